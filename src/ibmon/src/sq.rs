//! The send-queue cursor: counts the WQEs a requester CQE completed, unsignalled ones included.
//!
//! A requester CQE names the index of the signalled WQE that produced it; every WQE before it on
//! the SQ completed too, in order. The cursor keeps `p`, the basic-block index just after the last
//! WQE counted, reads the control segment at `p`, checks that its index field is `p & 0xffff`
//! (otherwise the slot was reused: the guest lapped the monitor), adds the WQE's payload and
//! packets, and advances by `ceil(ds / 4)` until it has counted the named WQE. The walk is
//! resumable: when the scan budget runs out it stops and continues at the next scan.

use crate::counters::Counters;
use crate::hot::{Ram, RingAt};
use crate::registry::SqLayout;
use resex_mlx5::consts::{send_op, INLINE_SEG};
use resex_mlx5::wqe::{send_wqe_payload_len, CtrlSeg, WqeError};
use resex_mlx5::{index16, DS_BYTES, MAX_DS, SEND_WQE_BB};
use serde::{Deserialize, Serialize};

/// What to do with the WQE named by the CQE once the walk reaches it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Last {
    /// It completed: count it.
    Count,
    /// It failed (error CQE): step over it without counting.
    Skip,
}

/// A walk in progress: up to and including the WQE at index `until`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Walk {
    /// 16-bit index of the WQE that ends the walk.
    pub until: u16,
    /// What to do with that last WQE.
    pub last: Last,
}

/// Why the walk could not follow the SQ (each is one anomaly unless resynchronising after an
/// overrun, when they are expected).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SqAnomaly {
    /// The slot at `p` holds a different index (reused) or the CQE's index is a ring or more away.
    IndexMismatch,
    /// The control segment's QPN is not this QP's.
    WrongQpn,
    /// The WQE's bytes are not a valid WQE.
    Malformed(WqeError),
}

/// The cursor of one SQ.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SqCursor {
    /// Basic-block counter just after the last WQE counted (wrapping).
    pub p: u32,
    /// False when `p` is unknown (after a mismatch); the next CQE resynchronises.
    pub synced: bool,
    /// True between an overrun of the send CQ and the next successful resynchronisation:
    /// mismatches then are consequences of the counted overrun, not new anomalies.
    pub after_overrun: bool,
    /// The walk in progress.
    pub walk: Option<Walk>,
}

/// One SQ as a walk needs it: geometry, QPN, where its basic blocks are.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SqRing {
    /// Basic blocks (a power of two).
    pub wqe_cnt: u32,
    /// The QP's number (every control segment must carry it).
    pub qpn: u32,
    /// Path MTU in bytes.
    pub mtu: u64,
    /// Its log2 when it is a power of two (registration allows only 256 to 4096).
    pub mtu_shift: Option<u32>,
    /// The QPN as it sits in a control segment's first word (bytes 4..7, big-endian), for
    /// checking index and QPN with one comparison ([`id_word`]); a bit outside [`ID_MASK`]
    /// when the QPN does not fit in 24 bits, so that nothing matches it.
    pub qpn_word: u64,
    /// The basic blocks.
    pub ring: RingAt,
}

/// The bytes of a control segment's first word that hold the WQE index (1..3) and the QPN
/// (4..7).
const ID_MASK: u64 = u64::from_ne_bytes([0, 0xff, 0xff, 0, 0xff, 0xff, 0xff, 0]);

/// What [`ID_MASK`] keeps of a control segment with WQE index `index` on the QP of `qpn_word`.
#[inline(always)]
fn id_word(qpn_word: u64, index: u16) -> u64 {
    let [hi, lo] = index.to_be_bytes();
    qpn_word | u64::from_ne_bytes([0, hi, lo, 0, 0, 0, 0, 0])
}

/// The `ds` field of a control segment's first word.
#[inline(always)]
fn ds_of(w0: u64) -> u8 {
    w0.to_ne_bytes()[7] & 0x3f
}

/// The opcode field of a control segment's first word.
#[inline(always)]
fn opcode_of(w0: u64) -> u8 {
    w0.to_ne_bytes()[3]
}

impl SqRing {
    /// The packed copy of `sq`, its pages appended to `table`.
    pub(crate) fn new(sq: &SqLayout, qpn: u32, mtu: u32, table: &mut Vec<u64>) -> SqRing {
        SqRing {
            wqe_cnt: sq.wqe_cnt,
            qpn,
            mtu: u64::from(mtu),
            mtu_shift: mtu.is_power_of_two().then(|| mtu.trailing_zeros()),
            qpn_word: if qpn < 1 << 24 {
                let [_, a, b, c] = qpn.to_be_bytes();
                u64::from_ne_bytes([0, 0, 0, 0, a, b, c, 0])
            } else {
                1
            },
            ring: RingAt::push(&sq.ring, table),
        }
    }

    /// Packets of a message of `len` bytes: [`resex_mlx5::packets`], the shift for the division
    /// worked out once.
    #[inline(always)]
    pub(crate) fn packets(&self, len: u64) -> u64 {
        match self.mtu_shift {
            Some(s) => ((len >> s) + u64::from(len & ((1 << s) - 1) != 0)).max(1),
            None => resex_mlx5::packets(len, self.mtu),
        }
    }

    /// Byte offset in the ring of basic block `p`.
    #[inline]
    pub(crate) fn slot(&self, p: u32) -> u64 {
        u64::from(p & (self.wqe_cnt - 1)) * SEND_WQE_BB
    }
}

impl SqCursor {
    /// A cursor at basic block `start`.
    pub fn new(start: u32) -> SqCursor {
        SqCursor {
            p: start,
            synced: true,
            after_overrun: false,
            walk: None,
        }
    }

    /// Starts a walk to the WQE at `until` (from a requester or error CQE).
    pub fn begin(&mut self, until: u16, last: Last) {
        self.walk = Some(Walk { until, last });
    }

    /// Continues the walk, spending at most `*budget` WQEs; counts into `c`.
    /// Returns when the walk is done or the budget is spent.
    #[inline(always)]
    pub(crate) fn advance<R: Ram>(
        &mut self,
        r: &R,
        sq: &SqRing,
        pages: &[u64],
        c: &mut Counters,
        budget: &mut u32,
    ) -> Option<SqAnomaly> {
        if self.synced {
            self.run(r, sq, pages, c, budget);
        }
        while let Some(walk) = self.walk {
            if *budget == 0 {
                return None;
            }
            *budget -= 1;
            let result = if self.synced {
                self.step(r, sq, pages, c, walk)
            } else {
                self.resync(r, sq, pages, c, walk)
            };
            if let Err(a) = result {
                let expected = self.after_overrun;
                if self.synced {
                    // Lost track at p: the WQEs from p up to the named one are gone. Count the
                    // named WQE if its slot still holds it.
                    self.synced = false;
                    let _ = self.resync(r, sq, pages, c, walk);
                }
                self.walk = None;
                if !expected {
                    c.anomalies += 1;
                    return Some(a);
                }
                return None;
            }
        }
        None
    }

    /// The common case, kept in registers: counts WQE after WQE while each checks out. Stops
    /// at the end of the walk, when the budget runs out, or before a WQE that does not check
    /// out (leaving it, unread as far as the cursor goes, to [`Self::advance`]'s general loop,
    /// which reads it again and handles the anomaly).
    #[inline(always)]
    fn run<R: Ram>(
        &mut self,
        r: &R,
        sq: &SqRing,
        pages: &[u64],
        c: &mut Counters,
        budget: &mut u32,
    ) {
        let Some(walk) = self.walk else {
            return;
        };
        let mut p = self.p;
        let mut left = *budget;
        let mut stepped = false;
        let mut done = false;
        while left > 0 {
            let Some((next, last)) = wqe_at(r, sq, pages, p, walk, c) else {
                break;
            };
            left -= 1;
            p = next;
            stepped = true;
            if last {
                done = true;
                break;
            }
        }
        if stepped {
            self.p = p;
            self.after_overrun = false;
            *budget = left;
            if done {
                self.walk = None;
            }
        }
    }

    /// One WQE at `p`.
    #[inline(always)]
    fn step<R: Ram>(
        &mut self,
        r: &R,
        sq: &SqRing,
        pages: &[u64],
        c: &mut Counters,
        walk: Walk,
    ) -> Result<(), SqAnomaly> {
        let p = self.p;
        let index = index16(p);
        let dist = u32::from(walk.until.wrapping_sub(index));
        if dist >= sq.wqe_cnt {
            return Err(SqAnomaly::IndexMismatch);
        }
        let head = read_head(r, sq, pages, p).ok_or(SqAnomaly::IndexMismatch)?;
        let w0 = head.w0();
        if w0 & ID_MASK != id_word(sq.qpn_word, index) {
            // Which of the two differs (the index is checked first).
            check_ctrl(&Ctrl::decode(w0), index, sq.qpn)?;
        }
        let ds = ds_of(w0);
        if ds == 0 {
            return Err(SqAnomaly::Malformed(WqeError::ZeroDs));
        }
        let bbs = u32::from(ds).div_ceil(4);
        if dist != 0 && dist < bbs {
            // The WQE at p would cover the one the CQE names.
            return Err(SqAnomaly::IndexMismatch);
        }
        let is_last = dist == 0;
        if !(is_last && walk.last == Last::Skip) {
            count_wqe(r, sq, pages, p, &head, c);
        }
        self.p = p.wrapping_add(bbs);
        self.after_overrun = false;
        if is_last {
            self.walk = None;
        }
        Ok(())
    }

    /// `p` is unknown: take the WQE the CQE names, if its slot still holds it, as the new
    /// position (counting it when it completed). Never counts anything it cannot see.
    #[cold]
    fn resync<R: Ram>(
        &mut self,
        r: &R,
        sq: &SqRing,
        pages: &[u64],
        c: &mut Counters,
        walk: Walk,
    ) -> Result<(), SqAnomaly> {
        self.walk = None;
        let at = (self.p & !0xffff) | u32::from(walk.until);
        let head = read_head(r, sq, pages, at).ok_or(SqAnomaly::IndexMismatch)?;
        let ctrl = Ctrl::decode(head.w0());
        check_ctrl(&ctrl, walk.until, sq.qpn)?;
        if walk.last == Last::Count {
            count_wqe(r, sq, pages, at, &head, c);
        }
        self.p = at.wrapping_add(ctrl.bbs());
        self.synced = true;
        self.after_overrun = false;
        Ok(())
    }
}

/// The WQE at `p` of a walk, when it checks out (index, QPN, ds, not covering the one the CQE
/// names): counts it (unless it is the failed last one) and returns the next `p` and whether
/// it ended the walk. `None`, with nothing counted, when it does not check out.
#[inline(always)]
fn wqe_at<R: Ram>(
    r: &R,
    sq: &SqRing,
    pages: &[u64],
    p: u32,
    walk: Walk,
    c: &mut Counters,
) -> Option<(u32, bool)> {
    let index = index16(p);
    let dist = u32::from(walk.until.wrapping_sub(index));
    if dist >= sq.wqe_cnt {
        return None;
    }
    let head = read_head(r, sq, pages, p)?;
    let w0 = head.w0();
    if w0 & ID_MASK != id_word(sq.qpn_word, index) {
        return None;
    }
    let ds = ds_of(w0);
    if ds == 0 {
        return None;
    }
    let bbs = u32::from(ds).div_ceil(4);
    if dist != 0 && dist < bbs {
        return None;
    }
    let is_last = dist == 0;
    if !(is_last && walk.last == Last::Skip) {
        count_wqe(r, sq, pages, p, &head, c);
    }
    Some((p.wrapping_add(bbs), is_last))
}

/// Bytes of a WQE that decide its payload when it is short: the control segment and two more
/// segments (a SEND with one SGE is 32 bytes, an RDMA WRITE or READ with one SGE 48).
const FIRST: usize = 48;

/// What the walk reads of the WQE at a slot: its first [`FIRST`] bytes as six 8-byte words in
/// memory order (one bounds check and six loads when they lie in one page, as they do whenever
/// the ring starts 64-byte aligned). Only the control segment's first word and the first
/// big-endian word of the segments at bytes 16 and 32 (a data segment's byte count, or an
/// inline segment's length) decide anything.
#[derive(Clone, Copy, Debug)]
struct Head([u64; FIRST / 8]);

impl Head {
    /// The control segment's first word.
    #[inline(always)]
    fn w0(&self) -> u64 {
        self.0[0]
    }

    /// The big-endian word at byte 16 x `seg` (`seg` is 1 or 2).
    #[inline(always)]
    fn seg(&self, seg: usize) -> u32 {
        let w = if seg == 1 { self.0[2] } else { self.0[4] };
        let b = w.to_ne_bytes();
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }
}

/// What the walk needs of a control segment (its first 8 bytes).
#[derive(Clone, Copy, Debug)]
struct Ctrl {
    wqe_index: u16,
    qpn: u32,
    ds: u8,
}

impl Ctrl {
    /// Decodes the control segment's first word, as [`CtrlSeg::decode`] does.
    #[inline(always)]
    fn decode(w0: u64) -> Ctrl {
        let b = w0.to_ne_bytes();
        Ctrl {
            wqe_index: u16::from_be_bytes([b[1], b[2]]),
            qpn: u32::from_be_bytes([b[4], b[5], b[6], b[7]]) >> 8,
            ds: b[7] & 0x3f,
        }
    }

    /// Basic blocks the WQE occupies: `ceil(ds / 4)`.
    #[inline(always)]
    fn bbs(&self) -> u32 {
        u32::from(self.ds).div_ceil(4)
    }
}

/// The [`Head`] of the WQE at basic block `p`.
#[inline(always)]
fn read_head<R: Ram>(r: &R, sq: &SqRing, pages: &[u64], p: u32) -> Option<Head> {
    let slot = sq.slot(p);
    let w = match sq.ring.entry(pages, slot, FIRST as u64) {
        Some(g) => r.words(g)?,
        None => read_head_split(r, sq, pages, slot)?,
    };
    Some(Head(w))
}

/// [`read_head`] across a page boundary (a ring not 64-byte aligned).
#[cold]
#[inline(never)]
fn read_head_split<R: Ram>(
    r: &R,
    sq: &SqRing,
    pages: &[u64],
    slot: u64,
) -> Option<[u64; FIRST / 8]> {
    let mut b = [[0u8; 8]; FIRST / 8];
    sq.ring.read_split(r, pages, slot, b.as_flattened_mut())?;
    Some(b.map(u64::from_ne_bytes))
}

#[inline(always)]
fn check_ctrl(ctrl: &Ctrl, index: u16, qpn: u32) -> Result<(), SqAnomaly> {
    if ctrl.wqe_index != index {
        return Err(SqAnomaly::IndexMismatch);
    }
    if ctrl.qpn != qpn {
        return Err(SqAnomaly::WrongQpn);
    }
    if ctrl.ds == 0 {
        return Err(SqAnomaly::Malformed(WqeError::ZeroDs));
    }
    Ok(())
}

/// What a send opcode puts on the wire, and how its WQE is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// SEND, SEND_IMM, SEND_INVAL, RDMA_WRITE, RDMA_WRITE_IMM: the payload goes out.
    Tx,
    /// RDMA_READ: one request out, the payload comes back.
    Read,
    /// ATOMIC_CS, ATOMIC_FA: one request out, one response back.
    Atomic,
    /// NOP: nothing.
    Nop,
}

/// The opcode's [`Kind`] and its fixed segments (control, remote address, atomic: as
/// [`resex_mlx5::wqe::fixed_segments`] counts them); `None` for an opcode the monitor does not
/// know.
#[inline(always)]
fn kind(opcode: u8) -> Option<(Kind, usize)> {
    match opcode {
        send_op::SEND | send_op::SEND_IMM | send_op::SEND_INVAL => Some((Kind::Tx, 1)),
        send_op::RDMA_WRITE | send_op::RDMA_WRITE_IMM => Some((Kind::Tx, 2)),
        send_op::RDMA_READ => Some((Kind::Read, 2)),
        send_op::ATOMIC_CS | send_op::ATOMIC_FA => Some((Kind::Atomic, 3)),
        send_op::NOP => Some((Kind::Nop, 1)),
        _ => None,
    }
}

/// [`send_wqe_payload_len`] of a WQE of at most [`FIRST`] bytes (`1 <= ds <= 3`) from its
/// [`Head`]: the same checks and the same result, without copying its bytes.
#[inline(always)]
fn short_payload(kind: Kind, fixed: usize, ds: usize, head: &Head) -> Result<u64, ()> {
    if ds < fixed {
        return Err(());
    }
    if ds == fixed {
        return Ok(0);
    }
    let first = head.seg(fixed);
    if first & INLINE_SEG != 0 {
        // Inline data only for what carries a payload out (SEND*, RDMA_WRITE*).
        if kind != Kind::Tx {
            return Err(());
        }
        let len = first & !INLINE_SEG;
        let room = (ds - fixed) * DS_BYTES - 4;
        return if usize::try_from(len).map_or(true, |n| n > room) {
            Err(())
        } else {
            Ok(u64::from(len))
        };
    }
    // ds <= 3 and fixed >= 1: at most one more data segment, at byte 32.
    let mut total = u64::from(first);
    if ds == 3 && fixed == 1 {
        let n = head.seg(2);
        if n & INLINE_SEG != 0 {
            return Err(());
        }
        total += u64::from(n);
    }
    Ok(total)
}

/// [`send_wqe_payload_len`] of a WQE longer than [`FIRST`] bytes (ds is 6 bits, so at most
/// 1 008 bytes: a WQE never reaches past itself). Its segments are read into a buffer; the
/// control segment is the one already decoded (`w0`: only its opcode and ds matter here).
#[cold]
#[inline(never)]
fn long_payload<R: Ram>(r: &R, sq: &SqRing, pages: &[u64], p: u32, w0: u64) -> Result<u64, ()> {
    let mut large = [0u8; MAX_DS as usize * DS_BYTES];
    large[..8].copy_from_slice(&w0.to_ne_bytes());
    let mut head = [0u8; 16];
    head.copy_from_slice(&large[..16]);
    let ctrl = CtrlSeg::decode(&head);
    let len = usize::from(ctrl.ds) * DS_BYTES;
    sq.ring
        .read_split(
            r,
            pages,
            sq.slot(p) + DS_BYTES as u64,
            &mut large[DS_BYTES..len],
        )
        .ok_or(())?;
    send_wqe_payload_len(&ctrl, &large[..len]).map_err(|_| ())
}

/// Adds the WQE at `p` (whose control segment checked out) to the counters. A WQE whose body
/// makes no sense completed all the same: it counts as a WQE and an anomaly, with no bytes or
/// packets (they cannot be known), and the walk goes on past it.
#[inline(always)]
fn count_wqe<R: Ram>(r: &R, sq: &SqRing, pages: &[u64], p: u32, head: &Head, c: &mut Counters) {
    c.wqes += 1;
    // The usual WQE first: a SEND or RDMA WRITE with one data segment after its fixed ones
    // (what `short_payload` makes of it, without the general dispatch).
    let w0 = head.w0();
    let fixed = match opcode_of(w0) {
        send_op::SEND | send_op::SEND_IMM | send_op::SEND_INVAL => 1,
        send_op::RDMA_WRITE | send_op::RDMA_WRITE_IMM => 2,
        _ => 0,
    };
    if fixed != 0 && usize::from(ds_of(w0)) == fixed + 1 {
        let n = head.seg(fixed);
        if n & INLINE_SEG == 0 {
            let bytes = u64::from(n);
            c.add_tx(bytes, sq.packets(bytes));
            return;
        }
    }
    let Some((kind, fixed)) = kind(opcode_of(head.w0())) else {
        c.anomalies += 1;
        return;
    };
    let ds = usize::from(ds_of(head.w0()));
    // Most WQEs fit their first basic block; only longer ones read more.
    let payload = if ds * DS_BYTES <= FIRST {
        short_payload(kind, fixed, ds, head)
    } else {
        long_payload(r, sq, pages, p, head.w0())
    };
    let Ok(bytes) = payload else {
        c.anomalies += 1;
        return;
    };
    match kind {
        Kind::Tx => c.add_tx(bytes, sq.packets(bytes)),
        Kind::Read => {
            c.add_tx(0, 1);
            c.add_rx_read(bytes, sq.packets(bytes));
        }
        Kind::Atomic => {
            c.add_tx(0, 1);
            c.add_rx_read(0, 1);
        }
        Kind::Nop => {}
    }
}

#[cfg(test)]
mod tests;
