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
    /// A request line that does not parse.
    #[error("invalid request: malformed request: {reason}")]
    Malformed {
        /// The parser's reason (it cannot cross the wire as a type).
        reason: String,
    },
    /// The device answered a request with an answer for another kind of request.
    #[error("invalid request: unexpected answer {0:?}")]
    UnexpectedAnswer(Answer),
    /// A queue's geometry the device cannot build.
    #[error("invalid request: {0}")]
    Geometry(Geometry),
    /// A memory region that cannot be registered.
    #[error("invalid request: {0}")]
    Region(RegionError),
    /// A doorbell record not 8-byte aligned or not inside guest RAM.
    #[error(
        "invalid request: {queue} doorbell record {addr:#x} must be 8-byte aligned inside guest \
         RAM ({ram} bytes)"
    )]
    DoorbellRecord {
        /// Whose record.
        queue: QueueKind,
        /// The record's guest-physical address.
        addr: u64,
        /// Size of guest RAM.
        ram: u64,
    },
    /// A ring or a doorbell record the device cannot use as guest memory (pages misaligned,
    /// outside RAM, too few; an access refused).
    #[error("invalid request: {place}: {reason}")]
    Memory {
        /// Which ring or record.
        place: Place,
        /// Why, as guest memory said it (its error cannot cross the wire as a type).
        reason: String,
    },
    /// A queue pair connected a second time.
    #[error("invalid request: queue pair {qpn:#x} is already connected")]
    AlreadyConnected {
        /// The queue pair.
        qpn: u32,
    },
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

/// A queue geometry the device cannot build.
#[derive(Debug, Clone, Copy, Error, PartialEq, Eq, Serialize, Deserialize)]
pub enum Geometry {
    /// A CQE size other than 64 or 128 bytes.
    #[error("cqe_size {0} is not 64 or 128")]
    CqeSize(u32),
    /// A CQ entry count not a power of two in 2..=4194304.
    #[error("cqe_cnt {0} is not a power of two in 2..=4194304")]
    CqeCount(u32),
    /// A send queue size not a power of two up to 32768 basic blocks.
    #[error("sq_wqe_cnt {0} is not a power of two <= 32768")]
    SqWqeCount(u32),
    /// A receive queue whose WQE count or stride is not a power of two in range.
    #[error(
        "receive queue of {wqes} WQEs of {stride} bytes: both must be powers of two \
         (<= 32768 WQEs, 16..=1024 bytes)"
    )]
    RecvQueue {
        /// `rq_wqe_cnt`.
        wqes: u32,
        /// `rq_stride`.
        stride: u32,
    },
    /// A path MTU other than 256, 512, 1024, 2048 or 4096 bytes.
    #[error("path_mtu {0} is not 256, 512, 1024, 2048 or 4096")]
    PathMtu(u32),
}

/// A memory region that cannot be registered.
#[derive(Debug, Clone, Copy, Error, PartialEq, Eq, Serialize, Deserialize)]
pub enum RegionError {
    /// The length is 0 or above the device's largest region.
    #[error("memory region length {length} is not in 1..={max}")]
    Length {
        /// The length asked for.
        length: u64,
        /// The largest region, bytes.
        max: u64,
    },
    /// The page list does not have one page per 4 KiB page the region touches.
    #[error(
        "memory region of {length} bytes at iova {iova:#x} touches {need} pages, {given} given"
    )]
    PageCount {
        /// The region's length.
        length: u64,
        /// The region's first address.
        iova: u64,
        /// Pages it touches.
        need: u64,
        /// Pages given.
        given: u64,
    },
    /// A page not 4 KiB aligned or not inside guest RAM.
    #[error("memory region page {page:#x} is not a 4 KiB page inside guest RAM ({ram} bytes)")]
    Page {
        /// The page's guest-physical address.
        page: u64,
        /// Size of guest RAM.
        ram: u64,
    },
    /// `iova + length` overflows.
    #[error("memory region wraps the address space")]
    Wraps,
    /// Access flags outside `access::*`.
    #[error("unknown access flags {0:#x}")]
    UnknownAccess(u32),
}

/// A kind of queue, as errors name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum QueueKind {
    /// A completion queue.
    Cq,
    /// A queue pair.
    Qp,
}

impl std::fmt::Display for QueueKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            QueueKind::Cq => "CQ",
            QueueKind::Qp => "QP",
        })
    }
}

/// A ring or doorbell record of a control request, as errors name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Place {
    /// A CQ's entries.
    CqBuffer,
    /// A QP's send queue.
    SqBuffer,
    /// A QP's receive queue.
    RqBuffer,
    /// A CQ's doorbell record.
    CqDoorbell,
    /// A QP's doorbell record.
    QpDoorbell,
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Place::CqBuffer => "CQ buffer",
            Place::SqBuffer => "SQ buffer",
            Place::RqBuffer => "RQ buffer",
            Place::CqDoorbell => "CQ doorbell",
            Place::QpDoorbell => "QP doorbell",
        })
    }
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

/// A successful answer (what the wire carries back, [`crate::hca_wire`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Answer {
    /// A CQ or QP number.
    Number(u32),
    /// A region's keys.
    Keys(MrKeys),
    /// Done.
    Done,
}
