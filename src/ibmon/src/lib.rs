//! IBMon: the host counts every VM's RDMA traffic by reading the guest's mlx5 send and
//! completion queues straight out of guest memory, never writing to them (the one thing the
//! host writes is the status byte of a latency-mailbox block it has read).
//!
//! - [`registry`]: validates a guest's registration document against its RAM ([`Layout`]).
//! - [`counters`]: the per-QP counts ([`Counters`]).
//! - [`cq`] and [`sq`]: the cursors that walk one CQ and one SQ.
//! - [`monitor`]: [`VmMonitor`], all of one VM's cursors, scanned with a bounded budget.
//! - [`rings`]: [`VmRings`], one VM's rings as a host holds them: its registrations' monitors,
//!   attachment to fresh or live rings, the budgeted scan.
//! - [`batch`]: [`scan_all`], one host tick over many VMs, prefetching a few VMs ahead.
//! - [`mailbox`]: draining a guest's latency mailbox (status bytes, validation, merge).
//! - [`rxe`]: soft-RoCE, the second ring format: the queue layouts (kernel UAPI), their
//!   validation ([`rxe::RxeRing`]) and [`rxe::RxeMonitor`], which counts them exactly.
//! - [`state`]: cursors saved to and restored from JSON, so that consecutive scans of a live
//!   guest by separate processes count each work request once.
//!
//! All guest bytes are hostile: nothing here panics, loops without bound or allocates in
//! proportion to a value read from guest memory.

#![cfg_attr(test, allow(clippy::cast_possible_truncation))]

pub mod batch;
pub mod counters;
pub mod cq;
mod hot;
pub mod mailbox;
pub mod monitor;
pub mod queueing;
pub mod registry;
pub mod rings;
pub mod rxe;
pub mod sq;
pub mod state;
pub mod synth;

pub use batch::{scan_all, Scan, ScanTarget};
pub use counters::Counters;
pub use monitor::{ScanOutcome, VmMonitor, DEFAULT_SCAN_BUDGET};
pub use queueing::Queueing;
pub use registry::{Layout, Limits, RegistrationError};
pub use rings::{LateQp, VmRings};
pub use state::{MonitorState, StateError};
