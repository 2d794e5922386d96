//! The control path of a software HCA: what a guest's provider asks of the device when it
//! creates completion queues, queue pairs and memory regions (on real hardware these go through
//! the kernel driver; the data path never does). The embedded host carries these requests over
//! the guest's control channel; in one process they are plain calls.
//!
//! Addresses: ring and doorbell addresses are guest-physical. A memory region is named by the
//! address the guest puts in its work requests (`iova`) and described by the guest-physical
//! address of every 4 KiB page it touches.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// `ibv_access_flags` values.
pub mod access {
    /// The HCA may write the region for local operations (receives, READ responses).
    pub const LOCAL_WRITE: u32 = 1;
    /// Remote peers may RDMA WRITE into the region.
    pub const REMOTE_WRITE: u32 = 2;
    /// Remote peers may RDMA READ it.
    pub const REMOTE_READ: u32 = 4;
    /// Remote peers may run atomics on it.
    pub const REMOTE_ATOMIC: u32 = 8;
}

/// A ring: its pages (guest-physical, 4 KiB aligned) and where it starts in the first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RingDesc {
    /// Page GPAs in ring order.
    pub pages: Vec<u64>,
    /// Byte offset of the ring in its first page.
    #[serde(default)]
    pub offset: u64,
}

/// Create a completion queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateCq {
    /// The CQ buffer.
    pub ring: RingDesc,
    /// Entries (a power of two).
    pub cqe_cnt: u32,
    /// 64 or 128.
    pub cqe_size: u32,
    /// GPA of the CQ doorbell record.
    pub dbrec: u64,
}

/// Create a reliable-connected queue pair.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateQp {
    /// Send queue buffer (`sq_wqe_cnt` 64-byte basic blocks).
    pub sq: RingDesc,
    /// Send queue size in basic blocks (a power of two).
    pub sq_wqe_cnt: u32,
    /// Receive queue buffer (`rq_wqe_cnt` entries of `rq_stride` bytes); may be empty.
    pub rq: RingDesc,
    /// Receive WQEs (a power of two, or 0 for no receive queue).
    pub rq_wqe_cnt: u32,
    /// Bytes per receive WQE (16 x scatter entries, a power of two).
    pub rq_stride: u32,
    /// GPA of the QP doorbell record (word 0: RQ head, word 1: SQ producer counter).
    pub dbrec: u64,
    /// CQN for send completions.
    pub send_cq: u32,
    /// CQN for receive completions.
    pub recv_cq: u32,
    /// Path MTU in bytes.
    pub path_mtu: u32,
}

/// Register a memory region.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegMr {
    /// The address work requests use for the region's first byte.
    pub iova: u64,
    /// Length in bytes.
    pub length: u64,
    /// GPA of every 4 KiB page the region touches, in order (the first holds `iova % 4096`).
    pub pages: Vec<u64>,
    /// `access::*` flags.
    pub access: u32,
}

/// A registered region's keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MrKeys {
    /// Local key (data segments).
    pub lkey: u32,
    /// Remote key (remote address segments).
    pub rkey: u32,
}

/// Where a queue pair lives, for connecting to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct QpAddr {
    /// The QP number.
    pub qpn: u32,
    /// The port's LID (InfiniBand; 0 for softhca and RoCE).
    #[serde(default)]
    pub lid: u16,
    /// The port's GID (RoCE and routed InfiniBand; zero when unused).
    #[serde(default)]
    pub gid: [u8; 16],
}

impl QpAddr {
    /// An address with only a QP number (softhca).
    pub fn qpn(qpn: u32) -> Self {
        Self {
            qpn,
            ..Self::default()
        }
    }
}

/// A control request the device refused.
#[derive(Debug, Clone, Error, PartialEq, Eq, Serialize, Deserialize)]
pub enum ControlError {
    /// A malformed or impossible request (bad geometry, page outside RAM, ...).
    #[error("invalid request: {0}")]
    Invalid(String),
    /// A CQN, QPN or key that does not exist.
    #[error("no such {0}")]
    NotFound(String),
    /// The device has no room for more objects of this kind.
    #[error("out of resources: {0}")]
    NoResources(String),
    /// The device went away.
    #[error("device unavailable: {0}")]
    Unavailable(String),
}

/// The control operations of a (software) HCA, as one guest sees them.
pub trait HcaControl: Send + Sync {
    /// Creates a CQ; returns its number. The device initialises the entries.
    fn create_cq(&self, req: &CreateCq) -> Result<u32, ControlError>;
    /// Creates a QP; returns its number.
    fn create_qp(&self, req: &CreateQp) -> Result<u32, ControlError>;
    /// Connects a QP to a remote QP and moves it to ready-to-send.
    fn connect_qp(&self, qpn: u32, remote: QpAddr) -> Result<(), ControlError>;
    /// Destroys a QP.
    fn destroy_qp(&self, qpn: u32) -> Result<(), ControlError>;
    /// Registers a memory region.
    fn reg_mr(&self, req: &RegMr) -> Result<MrKeys, ControlError>;
    /// Deregisters a memory region.
    fn dereg_mr(&self, lkey: u32) -> Result<(), ControlError>;
    /// The guest's doorbell: after it writes a doorbell record it rings this, and a device
    /// that waits (rather than polls) wakes. A device without one polls the records; the
    /// default says so.
    fn doorbell(&self) -> Result<crate::doorbell::Doorbell, ControlError> {
        Err(ControlError::Unavailable(
            "this device has no doorbell: it polls the doorbell records".into(),
        ))
    }
}
