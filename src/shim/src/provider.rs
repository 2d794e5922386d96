//! The verbs-like API every provider implements: memory, regions, CQs, QPs, post and poll.

use crate::buffer::Buffer;
use crate::ShimError;
pub use resex_proto::hca::{access, QpAddr};

/// A registered memory region.
#[derive(Debug, Clone)]
pub struct Mr {
    /// The buffer it covers.
    pub buf: Buffer,
    /// Local key.
    pub lkey: u32,
    /// Remote key.
    pub rkey: u32,
}

impl Mr {
    /// A scatter/gather entry for `len` bytes at `off` in the region.
    pub fn sge(&self, off: u64, len: u32) -> Sge {
        Sge {
            addr: self.buf.addr() + off,
            len,
            lkey: self.lkey,
        }
    }

    /// Where a peer writes or reads this region: address and rkey of byte `off`.
    pub fn remote(&self, off: u64) -> RemoteAddr {
        RemoteAddr {
            addr: self.buf.addr() + off,
            rkey: self.rkey,
        }
    }
}

/// A scatter/gather entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sge {
    /// Address (as the region's buffer addresses it).
    pub addr: u64,
    /// Length.
    pub len: u32,
    /// The region's lkey.
    pub lkey: u32,
}

/// A remote memory location.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct RemoteAddr {
    /// Address in the remote region.
    pub addr: u64,
    /// The remote region's rkey.
    pub rkey: u32,
}

/// What a send work request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOp {
    /// RDMA WRITE.
    Write(RemoteAddr),
    /// RDMA WRITE with immediate (consumes a receive at the peer).
    WriteImm(RemoteAddr, u32),
    /// SEND.
    Send,
    /// SEND with immediate.
    SendImm(u32),
    /// RDMA READ into the local SGEs.
    Read(RemoteAddr),
}

/// A send work request.
#[derive(Debug, Clone, Copy)]
pub struct SendWr<'a> {
    /// Returned in its completion.
    pub wr_id: u64,
    /// Operation.
    pub op: SendOp,
    /// Local scatter/gather list.
    pub sges: &'a [Sge],
    /// Inline payload instead of the SGEs (copied at post time).
    pub inline: Option<&'a [u8]>,
    /// Generate a completion (selective signalling).
    pub signaled: bool,
}

/// A receive work request.
#[derive(Debug, Clone, Copy)]
pub struct RecvWr<'a> {
    /// Returned in its completion.
    pub wr_id: u64,
    /// Where a SEND's data goes.
    pub sges: &'a [Sge],
}

/// Completion status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WcStatus {
    /// Success.
    Success,
    /// An error with the device's syndrome (mlx5 values: 0x05 flush, 0x13 remote access, ...).
    Error(u8),
}

/// What completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WcOpcode {
    /// A SEND.
    Send,
    /// An RDMA WRITE (with or without immediate).
    Write,
    /// An RDMA READ.
    Read,
    /// A receive consumed by a SEND.
    Recv,
    /// A receive consumed by a WRITE with immediate.
    RecvWriteImm,
    /// Unknown (errors may not say).
    Other,
}

/// A work completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wc {
    /// The request's id.
    pub wr_id: u64,
    /// Status.
    pub status: WcStatus,
    /// What completed.
    pub opcode: WcOpcode,
    /// Bytes received (receives) or read (READ).
    pub byte_len: u32,
    /// Immediate data.
    pub imm: Option<u32>,
    /// The local QP.
    pub qpn: u32,
}

/// Queue pair sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpInit {
    /// Send WQEs (basic blocks: a WQE with inline data may take several).
    pub max_send_wr: u32,
    /// Receive WQEs (0: no receive queue).
    pub max_recv_wr: u32,
    /// Scatter entries per receive.
    pub max_recv_sge: u32,
    /// Most inline bytes per request.
    pub max_inline: u32,
    /// Path MTU.
    pub path_mtu: u32,
}

impl Default for QpInit {
    fn default() -> Self {
        Self {
            max_send_wr: 256,
            max_recv_wr: 64,
            max_recv_sge: 1,
            max_inline: 256,
            path_mtu: 1024,
        }
    }
}

/// A completion queue.
pub trait CompletionQueue: Send {
    /// Its number.
    fn cqn(&self) -> u32;
    /// Appends up to `max` completions to `out`; returns how many.
    fn poll(&mut self, out: &mut Vec<Wc>, max: usize) -> Result<usize, ShimError>;
}

/// A reliable-connected queue pair.
pub trait QueuePair: Send {
    /// Its number.
    fn qpn(&self) -> u32;
    /// Its full address, for the peer's `connect` (number, and LID/GID on real devices).
    fn addr(&self) -> QpAddr {
        QpAddr::qpn(self.qpn())
    }
    /// Connects to the peer and makes it ready to send.
    fn connect(&mut self, remote: QpAddr) -> Result<(), ShimError>;
    /// Posts a chain of send requests (one doorbell).
    fn post_send(&mut self, wrs: &[SendWr<'_>]) -> Result<(), ShimError>;
    /// Posts receives.
    fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), ShimError>;
}

/// A device as the application sees it.
pub trait Provider: Send + Sync {
    /// `softhca` or `verbs`.
    fn name(&self) -> &'static str;
    /// Device-reachable memory.
    fn alloc(&self, len: u64) -> Result<Buffer, ShimError>;
    /// Registers a buffer (`access::*`).
    fn reg_mr(&self, buf: &Buffer, access: u32) -> Result<Mr, ShimError>;
    /// Deregisters.
    fn dereg_mr(&self, mr: &Mr) -> Result<(), ShimError>;
    /// A CQ of at least `entries` entries.
    fn create_cq(&self, entries: u32) -> Result<Box<dyn CompletionQueue>, ShimError>;
    /// A QP whose completions go to the given CQs (by number).
    fn create_qp(
        &self,
        init: &QpInit,
        send_cq: u32,
        recv_cq: u32,
    ) -> Result<Box<dyn QueuePair>, ShimError>;
}
