//! Block transports over the shim, as sans-IO state machines: each owns no thread, no clock
//! and no waiting loop; the real-time driver ([`realtime`]) and the lab's virtual-time driver
//! call the same code through [`BlockSender`] / [`BlockReceiver`].
//!
//! - [`status_byte`]: the status-byte mechanism (`papers/status-byte-rdma-transport.txt`,
//!   section 3): one-sided writes of data and status byte, RDMA READ of the receiver's status
//!   bytes when no free block is known, several tasks on one QP.
//! - [`window`]: the sliding window it is measured against (WRITE with immediate into a ring,
//!   head/tail, ACKs by SEND, an ACK thread at the sender).
//! - [`cpwr`]: confirming per work request (`papers/hipower-batched-confirmation.txt`'s
//!   "Vanilla"): WRITE with immediate into a pool of buffers, one receive per message, the
//!   reusable buffer named back by SEND.
//! - [`hipower`]: HiPower's batched confirmation: plain WRITEs, bitmap0/bitmap1 on each side,
//!   RDMA READs of the peer's bitmap, reuse in batches below a threshold, an end flag.
//! - [`any`]: any mechanism chosen at run time (endpoints and addresses as one type each);
//! - [`pair`]: both ends of any mechanism connected in one process;
//! - [`traits`]: the transport trait; [`work`]: the CPU work a call did, counted;
//!   [`realtime`]: the real-time driver (polling modes, waits).
//!
//! All put the same 8-byte header at the start of a block: device number (1 byte), reserved
//! (1), packet number (2, big-endian), payload length (4, big-endian).

pub mod any;
pub mod cpwr;
pub mod hipower;
pub mod pair;
pub mod realtime;
pub mod status_byte;
pub mod traits;
pub mod window;
pub mod work;

pub use realtime::Polling;
pub use traits::{BlockReceiver, BlockSender, Kind};
pub use work::Work;

use crate::buffer::Buffer;
use crate::provider::{CompletionQueue, Wc, WcStatus};
use crate::{ProtocolError, RequestError, ShimError};

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
pub struct Framing {
    block_size: u64,
    packet: [u16; 256],
}

impl Framing {
    /// Framing for blocks of `block_size` bytes, header included.
    pub fn new(block_size: u64) -> Self {
        Self {
            block_size,
            packet: [0; 256],
        }
    }

    /// Refuses a payload that does not fit a block.
    pub fn check(&self, len: usize) -> Result<(), ShimError> {
        let cap = self.block_size.saturating_sub(HEADER);
        if len as u64 > cap {
            return Err(RequestError::Payload { len, cap }.into());
        }
        Ok(())
    }

    /// Writes header + `data` into block `block` of `buf` as the next packet of `dev`; returns
    /// the packet number and the bytes the block now holds (header included).
    pub fn fill(
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
    pub fn read(&self, buf: &Buffer, block: u32) -> Result<Message, ShimError> {
        let base = u64::from(block) * self.block_size;
        let mut h = [0u8; 8];
        buf.read(base, &mut h)?;
        let (dev, packet, len) = parse_header(&h);
        if u64::from(len) > self.block_size - HEADER {
            return Err(ProtocolError::Claims { block, len }.into());
        }
        let mut data = vec![0u8; len as usize];
        buf.read(base + HEADER, &mut data)?;
        Ok(Message { dev, packet, data })
    }
}

/// Polls `cq` for one WRITE_IMM receive (into `wcs`, cleared first) and gives the slot its
/// immediate names (its top byte), checked against `n` slots, with the completion; `what` names a slot in errors.
/// `None`: nothing arrived. An error completion, another opcode or a slot past `n` (a hostile
/// or broken peer) is an error.
pub(crate) fn poll_write_imm(
    cq: &mut dyn CompletionQueue,
    wcs: &mut Vec<Wc>,
    n: u32,
    what: &'static str,
) -> Result<Option<(u32, Wc)>, ShimError> {
    wcs.clear();
    cq.poll(wcs, 1)?;
    let Some(wc) = wcs.first().copied() else {
        return Ok(None);
    };
    if let WcStatus::Error(s) = wc.status {
        return Err(ShimError::Completion {
            wr_id: wc.wr_id,
            syndrome: s,
        });
    }
    if wc.opcode != crate::provider::WcOpcode::RecvWriteImm {
        return Err(ProtocolError::UnexpectedCompletion { opcode: wc.opcode }.into());
    }
    let slot = wc.imm.unwrap_or(0) >> 24;
    if slot >= n {
        return Err(ProtocolError::Immediate { what, slot, n }.into());
    }
    Ok(Some((slot, wc)))
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
