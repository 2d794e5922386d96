//! The completion-queue cursor: the monitor's own 24-bit index into a CQ it never writes.
//!
//! Entry `m` is new when its opcode is not INVALID and its owner bit equals `(m >> k) & 1`.
//! The guest's consumer index (doorbell record word 0) is the lap check: an owner bit alone
//! cannot tell lap n from lap n + 2, so when the consumer index is more than a ring ahead of
//! `m`, or ahead of `m` while entry `m` is not valid, the HCA has lapped the monitor; it counts
//! an overrun and resynchronises to the consumer index, inventing nothing.

use crate::registry::CqLayout;
use resex_guestmem::{GuestMemory, MemError};
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

/// Byte offset in the ring of entry `index`'s 64-byte CQE.
#[inline]
fn cqe_offset(cq: &CqLayout, index: u32) -> u64 {
    u64::from(index & (cq.cqe_cnt() - 1)) * cq.size.bytes() + cq.size.cqe_offset()
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

/// Reads the entry for `index` if it is valid for that index (the HCA wrote it on this lap).
/// Reads `op_own` first and the rest after an acquire fence, as the provider does; only the
/// 24 bytes that hold what the monitor counts are copied.
#[inline]
pub fn peek<M: GuestMemory + ?Sized>(
    mem: &M,
    cq: &CqLayout,
    index: u32,
) -> Result<Option<CqeTail>, MemError> {
    let base = cqe_offset(cq, index);
    let op_own = cq.ring.read_u8(mem, base + off::OP_OWN as u64)?;
    if !is_valid_for(op_own, index, cq.log_cnt) {
        return Ok(None);
    }
    fence(Ordering::Acquire);
    let mut b = [0u8; 64 - TAIL];
    cq.ring.read(mem, base + TAIL as u64, &mut b)?;
    let at = |o: usize| o - TAIL;
    let op_own = b[at(off::OP_OWN)];
    // The copy is what we decode; it must still be valid (a racing writer may have moved on).
    if !is_valid_for(op_own, index, cq.log_cnt) {
        return Ok(None);
    }
    let be32 = |o: usize| u32::from_be_bytes([b[at(o)], b[at(o) + 1], b[at(o) + 2], b[at(o) + 3]]);
    Ok(Some(CqeTail {
        opcode: op_own >> 4,
        format: (op_own >> 2) & 3,
        byte_cnt: be32(off::BYTE_CNT),
        qpn: be32(off::SOP_DROP_QPN) & 0x00ff_ffff,
        wqe_counter: u16::from_be_bytes([b[at(off::WQE_COUNTER)], b[at(off::WQE_COUNTER) + 1]]),
    }))
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
