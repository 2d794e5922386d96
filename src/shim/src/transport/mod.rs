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

use crate::buffer::Buffer;
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

fn header(dev: u8, packet: u16, len: u32) -> [u8; 8] {
    let mut h = [0u8; 8];
    h[0] = dev;
    h[2..4].copy_from_slice(&packet.to_be_bytes());
    h[4..8].copy_from_slice(&len.to_be_bytes());
    h
}

fn parse_header(h: &[u8; 8]) -> (u8, u16, u32) {
    (
        h[0],
        u16::from_be_bytes([h[2], h[3]]),
        u32::from_be_bytes([h[4], h[5], h[6], h[7]]),
    )
}

/// Blocks of `block_size` bytes (header included) in one buffer: how both transports frame
/// a message, and number each device's packets in the order they are filled.
pub(crate) struct Framing {
    block_size: u64,
    packet: [u16; 256],
}

impl Framing {
    pub(crate) fn new(block_size: u64) -> Self {
        Self {
            block_size,
            packet: [0; 256],
        }
    }

    /// Refuses a payload that does not fit a block.
    pub(crate) fn check(&self, len: usize) -> Result<(), ShimError> {
        let cap = self.block_size.saturating_sub(HEADER);
        if len as u64 > cap {
            return Err(ShimError::Invalid(format!(
                "{len} bytes do not fit a block of {cap}"
            )));
        }
        Ok(())
    }

    /// Writes header + `data` into block `block` of `buf` as the next packet of `dev`; returns
    /// the packet number and the bytes the block now holds (header included).
    pub(crate) fn fill(
        &mut self,
        buf: &Buffer,
        block: u32,
        dev: u8,
        data: &[u8],
    ) -> Result<(u16, u32), ShimError> {
        self.check(data.len())?;
        let packet = self.packet[usize::from(dev)];
        self.packet[usize::from(dev)] = packet.wrapping_add(1);
        let len = u32::try_from(data.len()).unwrap_or(u32::MAX);
        let base = u64::from(block) * self.block_size;
        buf.write(base, &header(dev, packet, len))?;
        buf.write(base + HEADER, data)?;
        Ok((packet, len + 8))
    }

    /// Reads block `block` of `buf` (written by a peer: its length is checked).
    pub(crate) fn read(&self, buf: &Buffer, block: u32) -> Result<Message, ShimError> {
        let base = u64::from(block) * self.block_size;
        let mut h = [0u8; 8];
        buf.read(base, &mut h)?;
        let (dev, packet, len) = parse_header(&h);
        if u64::from(len) > self.block_size - HEADER {
            return Err(ShimError::Invalid(format!(
                "block {block} claims {len} bytes, more than a block holds"
            )));
        }
        let mut data = vec![0u8; len as usize];
        buf.read(base + HEADER, &mut data)?;
        Ok(Message { dev, packet, data })
    }
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

/// How a transport waits for the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Polling {
    /// Busy-poll (spinning, then yielding) for the whole wait, as RDMA applications do and as
    /// the ResEx paper's BenchEx does: the VM's I/O rate then follows its CPU share, which is
    /// what makes a CPU cap an I/O lever.
    #[default]
    Spin,
    /// Poll hot for [`HOT_POLL`], then sleep between polls: many guests can share a few CPUs,
    /// but a CPU cap no longer bounds a VM's I/O as tightly.
    Adaptive,
}

impl std::fmt::Display for Polling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Spin => "spin",
            Self::Adaptive => "adaptive",
        })
    }
}

impl std::str::FromStr for Polling {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "spin" => Ok(Self::Spin),
            "adaptive" => Ok(Self::Adaptive),
            _ => Err(format!("polling must be spin or adaptive, not {s:?}")),
        }
    }
}

/// How long [`spin`] polls hot (spinning, then yielding) before it starts to sleep between
/// polls: longer than a small message's round trip, so latency-critical waits never sleep,
/// while a wait for a large transfer does not burn a CPU that other guests need.
pub(crate) const HOT_POLL: std::time::Duration = std::time::Duration::from_micros(200);

/// Polls until `f` returns `Some`, or `timeout` passes: spins briefly, then yields; with
/// [`Polling::Adaptive`], after [`HOT_POLL`] it sleeps between polls (an eighth of the time
/// waited so far, 10 to 100 us).
pub(crate) fn spin<T>(
    timeout: std::time::Duration,
    polling: Polling,
    what: &str,
    mut f: impl FnMut() -> Result<Option<T>, ShimError>,
) -> Result<T, ShimError> {
    use std::time::Duration;
    let start = std::time::Instant::now();
    let mut spins = 0u32;
    loop {
        if let Some(v) = f()? {
            return Ok(v);
        }
        spins = spins.saturating_add(1);
        if spins < 64 {
            std::hint::spin_loop();
            continue;
        }
        let waited = start.elapsed();
        if waited > timeout {
            return Err(ShimError::Timeout(format!("{what} after {timeout:?}")));
        }
        if polling == Polling::Spin || waited < HOT_POLL {
            std::thread::yield_now();
        } else {
            let nap = (waited / 8).clamp(Duration::from_micros(10), Duration::from_micros(100));
            std::thread::sleep(nap);
        }
    }
}
