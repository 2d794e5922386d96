//! HiPower (`papers/hipower-batched-confirmation.txt`, section 3): batched confirmation with
//! bitmaps. Both sides register C mirrored buffers, a bitmap0 (the state of their own buffers,
//! one bit each, readable by the peer) and a bitmap1 (the target of the RDMA READ of the peer's
//! bitmap0). The requester sends by plain RDMA WRITE into a buffer from its pool of reusable
//! ones, flips its bitmap0 bit when the WRITE completed, and refills the pool with one READ of
//! the responder's bitmap0 when it falls below a threshold (the paper's evaluation: 50 % of C);
//! the responder finds data with one READ of the requester's bitmap0, consumes, flips its own
//! bit. When done the requester WRITEs an end flag.
//!
//! - `bitmap`: the bit rules, pure and tested against hostile bitmaps;
//! - `sender`: [`HpSender`], the requester; `receiver`: [`HpReceiver`], the responder.

pub mod bitmap;
mod receiver;
mod sender;

pub use receiver::HpReceiver;
pub use sender::HpSender;

use crate::provider::{QpAddr, QpInit, RemoteAddr};
use crate::ShimError;

/// What each side needs of the other (both directions READ the peer's bitmap0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Endpoint {
    /// The side's QP.
    pub qp: QpAddr,
    /// Its buffers (the responder's: written by the requester; the requester's: unused).
    pub pool: RemoteAddr,
    /// Its bitmap0 (read by the peer).
    pub bitmap0: RemoteAddr,
    /// Its end flag (the responder's: written by the requester).
    pub end: RemoteAddr,
    /// Buffers (C).
    pub n: u32,
    /// Bytes per buffer, header included.
    pub block_size: u64,
}

/// The default reuse threshold: refill the pool below half of C (the paper's evaluation).
pub const THRESHOLD_PCT: u32 = 50;

pub(crate) fn check(n: u32, block_size: u64) -> Result<(), ShimError> {
    if n == 0 || n > 4096 || block_size < crate::transport::HEADER {
        return Err(crate::TransportError::Geometry {
            kind: crate::transport::Kind::Hipower,
            blocks: n,
            block_size,
        }
        .into());
    }
    Ok(())
}

pub(crate) fn init(n: u32, mtu: u32) -> QpInit {
    QpInit {
        max_send_wr: n + 4,
        max_recv_wr: 0,
        max_recv_sge: 1,
        max_inline: 16,
        path_mtu: mtu,
    }
}
