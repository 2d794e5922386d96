//! Formats that cross the guest/host boundary. This crate is shared by the guest agent and the
//! host, so it depends on no host crate.
//!
//! - [`registration`]: the JSON document with which a guest tells the host where its rings and
//!   its mailbox are (`shared/design.md`, "Registration").
//! - [`hca`]: the control path of a software HCA (create CQ/QP, register memory).
//! - [`hca_wire`]: that control path carried over a byte stream (JSON lines).
//! - [`doorbell`]: the guest's end of a device doorbell (wakes a device that waits).
//! - [`hca_admin`]: the host's own admin path to softhca (the rate lever's vport limits).
//! - [`channel`]: the agent's control channel messages (hello, register, accepted/rejected).
//! - [`mailbox`]: the latency-report mailbox's block format.
//! - [`xsline`]: a reliable line stream over xenstore keys (the Xen twin of a virtio-serial port).

#![cfg_attr(test, allow(clippy::cast_possible_truncation))]

pub mod channel;
pub mod doorbell;
pub mod hca;
pub mod hca_admin;
pub mod hca_wire;
pub mod mailbox;
pub mod preload;
pub mod registration;
pub mod xsline;

pub use registration::{
    CqRegistration, MailboxRegistration, QpRegistration, Registration, RingFormat, RingKind,
    RingRegistration, SqRegistration, REGISTRATION_VERSION,
};
