//! Block transports over the shim.
//!
//! - [`status_byte`]: the status-byte mechanism (`papers/status-byte-rdma-transport.txt`,
//!   section 3): one-sided writes of data and status byte, RDMA READ of the receiver's status
//!   bytes when no free block is known, several tasks on one QP.
//! - [`window`]: the sliding window it is measured against (WRITE with immediate into a ring,
//!   head/tail, ACKs by SEND).
//!
//! Both put the same 8-byte header at the start of a block: device number (1 byte), reserved
//! (1), packet number (2, big-endian), payload length (4, big-endian).

pub mod status_byte;
pub mod window;

use crate::provider::{CompletionQueue, Wc, WcStatus};
use crate::ShimError;

/// Bytes of block header.
pub const HEADER: u64 = 8;

/// A delivered block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Device (task) number.
    pub dev: u8,
    /// Packet number within the device's stream.
    pub packet: u16,
    /// Payload.
    pub data: Vec<u8>,
}

pub(crate) fn header(dev: u8, packet: u16, len: u32) -> [u8; 8] {
    let mut h = [0u8; 8];
    h[0] = dev;
    h[2..4].copy_from_slice(&packet.to_be_bytes());
    h[4..8].copy_from_slice(&len.to_be_bytes());
    h
}

pub(crate) fn parse_header(h: &[u8; 8]) -> (u8, u16, u32) {
    (
        h[0],
        u16::from_be_bytes([h[2], h[3]]),
        u32::from_be_bytes([h[4], h[5], h[6], h[7]]),
    )
}

/// Polls `cq` once; an error completion becomes an error.
pub(crate) fn poll_ok(cq: &mut dyn CompletionQueue, wcs: &mut Vec<Wc>) -> Result<(), ShimError> {
    wcs.clear();
    cq.poll(wcs, 32)?;
    for wc in wcs.iter() {
        if let WcStatus::Error(s) = wc.status {
            return Err(ShimError::Completion {
                wr_id: wc.wr_id,
                syndrome: s,
            });
        }
    }
    Ok(())
}

/// Spins (yielding) until `f` returns `Some`, or `timeout` passes.
pub(crate) fn spin<T>(
    timeout: std::time::Duration,
    what: &str,
    mut f: impl FnMut() -> Result<Option<T>, ShimError>,
) -> Result<T, ShimError> {
    let start = std::time::Instant::now();
    let mut spins = 0u32;
    loop {
        if let Some(v) = f()? {
            return Ok(v);
        }
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(64) {
            if start.elapsed() > timeout {
                return Err(ShimError::Timeout(format!("{what} after {timeout:?}")));
            }
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}
