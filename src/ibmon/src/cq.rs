//! The completion-queue cursor: the monitor's own 24-bit index into a CQ it never writes.
//!
//! Entry `m` is new when its opcode is not INVALID and its owner bit equals `(m >> k) & 1`.
//! The guest's consumer index (doorbell record word 0) is the lap check: an owner bit alone
//! cannot tell lap n from lap n + 2, so when the consumer index is more than a ring ahead of
//! `m`, or ahead of `m` while entry `m` is not valid, the HCA has lapped the monitor; it counts
//! an overrun and resynchronises to the consumer index, inventing nothing.

use crate::hot::{Ram, RingAt};
use crate::registry::CqLayout;
use resex_mlx5::consts::cqe_format;
use resex_mlx5::cqe::{is_valid_for, off};
use std::sync::atomic::{fence, Ordering};

/// Mask of a 24-bit CQ index.
pub const INDEX_MASK: u32 = 0x00ff_ffff;

/// How far the guest's consumer index `ci` is ahead of `m`, if it is ahead (24-bit, signed).
#[inline]
pub fn ahead(ci: u32, m: u32) -> Option<u32> {
    let d = ci.wrapping_sub(m) & INDEX_MASK;
    (d != 0 && d < 1 << 23).then_some(d)
}

/// One CQ as a scan needs it: its cursor, its geometry, where its entries are.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CqHot {
    /// The monitor's index (24 bits).
    pub index: u32,
    /// log2 of the entry count.
    pub log_cnt: u32,
    /// log2 of the entry size (6 or 7).
    pub shift: u32,
    /// Offset of the 64-byte CQE in its entry (0, or 64 in 128-byte entries).
    pub cqe_off: u64,
    /// Doorbell record.
    pub dbrec: u64,
    /// QP (index) that counts without a known QPN go to.
    pub owner: usize,
    /// The entries.
    pub ring: RingAt,
}

impl CqHot {
    /// The packed copy of `cq`, its pages appended to `table`.
    pub(crate) fn new(cq: &CqLayout, owner: usize, table: &mut Vec<u64>) -> CqHot {
        CqHot {
            index: cq.start & INDEX_MASK,
            log_cnt: cq.log_cnt,
            shift: cq.size.bytes().trailing_zeros(),
            cqe_off: cq.size.cqe_offset(),
            dbrec: cq.dbrec.0,
            owner,
            ring: RingAt::push(&cq.ring, table),
        }
    }

    /// Byte offset in the ring of entry `index`'s 64-byte CQE.
    #[inline]
    pub(crate) fn cqe_offset(&self, index: u32) -> u64 {
        (u64::from(index & ((1 << self.log_cnt) - 1)) << self.shift) + self.cqe_off
    }

    /// Cache hints for what a scan of this CQ reads first: the doorbell record and the entry at
    /// the cursor.
    #[inline]
    pub(crate) fn prefetch<R: Ram>(&self, r: &R, pages: &[u64]) {
        r.prefetch(self.dbrec);
        self.ring
            .prefetch(r, pages, self.cqe_offset(self.index) + off::OP_OWN as u64);
    }

    /// The guest's consumer index (doorbell record word 0, big-endian, 24 bits).
    #[inline]
    pub(crate) fn guest_ci<R: Ram>(&self, r: &R) -> Option<u32> {
        Some(u32::from_be_bytes(r.u32_ne(self.dbrec)?.to_ne_bytes()) & INDEX_MASK)
    }
}

/// What the monitor needs of a CQE: the fields at its end (bytes 40..64 of the 64-byte entry).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CqeTail {
    /// CQE opcode (`cqe_op::*`).
    pub opcode: u8,
    /// CQE format (`cqe_format::*`).
    pub format: u8,
    /// `byte_cnt`.
    pub byte_cnt: u32,
    /// The QP number (24 bits of `sop_drop_qpn`).
    pub qpn: u32,
    /// `wqe_counter`.
    pub wqe_counter: u16,
}

impl CqeTail {
    /// A compressed (mini-CQE) entry.
    pub fn is_compressed(&self) -> bool {
        self.format == cqe_format::COMPRESSED
    }
}

/// The tail's first byte in the entry: 8-aligned, so the copy is three word loads.
const TAIL: usize = 40;

/// The CQE ring could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Unreadable;

/// Reads the entry for `index` if it is valid for that index (the HCA wrote it on this lap).
/// Reads `op_own` first and the rest after an acquire fence, as the provider does; only the
/// 24 bytes that hold what the monitor counts are copied (three 8-byte loads when the entry
/// lies in one page, as it does whenever the ring starts 64-byte aligned).
#[inline]
pub(crate) fn peek<R: Ram>(
    r: &R,
    cq: &CqHot,
    pages: &[u64],
    index: u32,
) -> Result<Option<CqeTail>, Unreadable> {
    let base = cq.cqe_offset(index);
    let Some(g) = cq.ring.entry(pages, base, 64) else {
        return peek_split(r, cq, pages, index, base);
    };
    let op_own = r.u8(g + off::OP_OWN as u64).ok_or(Unreadable)?;
    if !is_valid_for(op_own, index, cq.log_cnt) {
        return Ok(None);
    }
    fence(Ordering::Acquire);
    let w: [u64; 3] = r.words(g + TAIL as u64).ok_or(Unreadable)?;
    let mut b = [0u8; 64 - TAIL];
    for (d, w) in b.chunks_exact_mut(8).zip(w) {
        d.copy_from_slice(&w.to_ne_bytes());
    }
    Ok(decode(&b, index, cq.log_cnt))
}

/// [`peek`] for an entry that crosses a page boundary (a ring not 64-byte aligned).
#[cold]
fn peek_split<R: Ram>(
    r: &R,
    cq: &CqHot,
    pages: &[u64],
    index: u32,
    base: u64,
) -> Result<Option<CqeTail>, Unreadable> {
    let mut op_own = [0u8];
    cq.ring
        .read_split(r, pages, base + off::OP_OWN as u64, &mut op_own)
        .ok_or(Unreadable)?;
    if !is_valid_for(op_own[0], index, cq.log_cnt) {
        return Ok(None);
    }
    fence(Ordering::Acquire);
    let mut b = [0u8; 64 - TAIL];
    cq.ring
        .read_split(r, pages, base + TAIL as u64, &mut b)
        .ok_or(Unreadable)?;
    Ok(decode(&b, index, cq.log_cnt))
}

/// Reads entry `index` of `cq` straight from guest memory, for callers outside the scan (the
/// host core looks back through a ring when it attaches to a running guest): the entry if it is
/// valid for that index, `None` if it is not (never written, or overwritten by a newer lap).
/// Same protocol as the scan's read: `op_own` first, the rest after an acquire fence, and the
/// copy checked again.
///
/// # Errors
/// The ring is not readable at that entry.
pub fn peek_at<M: resex_guestmem::GuestMemory + ?Sized>(
    mem: &M,
    cq: &CqLayout,
    index: u32,
) -> Result<Option<CqeTail>, resex_guestmem::MemError> {
    let base = (u64::from(index & (cq.cqe_cnt() - 1)) << cq.size.bytes().trailing_zeros())
        + cq.size.cqe_offset();
    let op_own = cq.ring.read_u8(mem, base + off::OP_OWN as u64)?;
    if !is_valid_for(op_own, index, cq.log_cnt) {
        return Ok(None);
    }
    fence(Ordering::Acquire);
    let mut b = [0u8; 64 - TAIL];
    cq.ring.read(mem, base + TAIL as u64, &mut b)?;
    Ok(decode(&b, index, cq.log_cnt))
}

/// The tail copied after the fence; it must still be valid (a racing writer may have moved on).
#[inline]
fn decode(b: &[u8; 64 - TAIL], index: u32, log_cnt: u32) -> Option<CqeTail> {
    let at = |o: usize| o - TAIL;
    let op_own = b[at(off::OP_OWN)];
    if !is_valid_for(op_own, index, log_cnt) {
        return None;
    }
    let be32 = |o: usize| u32::from_be_bytes([b[at(o)], b[at(o) + 1], b[at(o) + 2], b[at(o) + 3]]);
    Some(CqeTail {
        opcode: op_own >> 4,
        format: (op_own >> 2) & 3,
        byte_cnt: be32(off::BYTE_CNT),
        qpn: be32(off::SOP_DROP_QPN) & 0x00ff_ffff,
        wqe_counter: u16::from_be_bytes([b[at(off::WQE_COUNTER)], b[at(off::WQE_COUNTER) + 1]]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ahead_is_signed_modulo_2_24() {
        assert_eq!(ahead(5, 3), Some(2));
        assert_eq!(
            ahead(3, 5),
            None,
            "the monitor ahead of the guest is normal"
        );
        assert_eq!(ahead(3, 3), None);
        assert_eq!(ahead(1, INDEX_MASK), Some(2), "wraps at 2^24");
        assert_eq!(ahead(INDEX_MASK, 1), None);
    }
}
