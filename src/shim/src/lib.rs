//! The guest-side shim: what applications in a VM link to.
//!
//! - [`provider`]: a verbs-like API (memory regions, CQs, QPs, chained `post_send` with
//!   per-request signalling, `post_recv`, `poll_cq`) behind the [`Provider`] trait.
//! - [`soft`]: the `softhca` provider (mlx5 rings in guest RAM, doorbell records).
//! - [`guest`]: a guest process's RAM file and softhca control socket, as a provider.
//! - [`xenbus`]: xenstore from inside a Xen domU (`/dev/xen/xenbus`), the guest's end of an
//!   [`resex_proto::xsline`] link.
//! - `verbs` (feature `rdma`): real devices through libibverbs.
//! - [`mailbox`]: the guest's end of the latency mailbox (reports the host reads out of guest
//!   memory).
//! - [`transport`]: the status-byte transport (and the sliding window it is measured against).
//! - [`error`]: the typed cases of [`ShimError`] (a request, a placement, a transport's setting,
//!   a peer's data).
//!
//! This crate runs inside guests: it depends on no host crate (only the shared formats).

#![cfg_attr(test, allow(clippy::cast_possible_truncation))]

pub mod buffer;
pub mod error;
pub mod guest;
pub mod mailbox;
pub mod provider;
pub mod soft;
pub mod transport;
#[cfg(feature = "rdma")]
pub mod verbs;
pub mod xenbus;

pub use buffer::Buffer;
pub use error::{Placement, ProtocolError, RequestError, SenderKind, TransportError};
pub use provider::{
    CompletionQueue, Mr, Provider, QpInit, QueuePair, RecvWr, RemoteAddr, SendOp, SendWr, Sge, Wc,
    WcOpcode, WcStatus,
};
pub use soft::SoftProvider;

/// What can go wrong in the shim.
#[derive(Debug, thiserror::Error)]
pub enum ShimError {
    /// Guest memory refused an access.
    #[error(transparent)]
    Mem(#[from] resex_guestmem::MemError),
    /// The device refused a control request.
    #[error("device: {0}")]
    Control(#[from] resex_proto::hca::ControlError),
    /// A request the shim cannot post or serve as asked.
    #[error(transparent)]
    Request(#[from] RequestError),
    /// Memory that cannot hold what the shim was asked to place in it.
    #[error(transparent)]
    Placement(#[from] Placement),
    /// A page list that does not describe a usable ring.
    #[error(transparent)]
    Ring(#[from] resex_guestmem::RingError),
    /// A work queue entry or a send queue the mlx5 writer refused.
    #[error(transparent)]
    Writer(resex_mlx5::writer::WriteError),
    /// A transport's setting, or a peer's, that cannot work.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// Data or a completion the protocol does not allow (a hostile or broken peer).
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
    /// A libibverbs call failed.
    #[error("{}", error::verbs_failure(call, *errno))]
    Verbs {
        /// The call.
        call: &'static str,
        /// The OS error it left, if it sets one.
        errno: Option<i32>,
    },
    /// A thread of the shim's panicked.
    #[error("the {thread} thread panicked")]
    Panicked {
        /// Which thread.
        thread: &'static str,
    },
    /// The queue has no room; `posted` requests of the chain were posted.
    #[error("queue full after posting {posted} requests")]
    QueueFull {
        /// Requests posted before the queue filled.
        posted: usize,
    },
    /// No device memory left.
    #[error("out of device memory: {wanted} bytes wanted, {free} free")]
    OutOfMemory {
        /// Bytes asked for.
        wanted: u64,
        /// Bytes left.
        free: u64,
    },
    /// A work request completed with an error.
    #[error("work request {wr_id} failed with syndrome {syndrome:#04x} ({})", syndrome_name(*syndrome))]
    Completion {
        /// The request.
        wr_id: u64,
        /// The device's syndrome.
        syndrome: u8,
    },
    /// The peer did not make progress in time.
    #[error("timed out: {0}")]
    Timeout(String),
    /// The provider cannot run on this machine.
    #[error("{0}")]
    Unavailable(String),
}

/// A person's name for an mlx5 error syndrome.
pub fn syndrome_name(s: u8) -> &'static str {
    match s {
        0x01 => "local length error",
        0x02 => "local QP operation error",
        0x04 => "local protection error",
        0x05 => "work request flushed",
        0x11 => "local access error",
        0x12 => "remote invalid request",
        0x13 => "remote access error",
        0x14 => "remote operation error",
        0x15 => "transport retry counter exceeded",
        0x16 => "RNR retry counter exceeded",
        _ => "unknown syndrome",
    }
}
