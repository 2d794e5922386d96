//! The send-queue cursor: counts the WQEs a requester CQE completed, unsignalled ones included.
//!
//! A requester CQE names the index of the signalled WQE that produced it; every WQE before it on
//! the SQ completed too, in order. The cursor keeps `p`, the basic-block index just after the last
//! WQE counted, reads the control segment at `p`, checks that its index field is `p & 0xffff`
//! (otherwise the slot was reused: the guest lapped the monitor), adds the WQE's payload and
//! packets, and advances by `ceil(ds / 4)` until it has counted the named WQE. The walk is
//! resumable: when the scan budget runs out it stops and continues at the next scan.

use crate::counters::Counters;
use crate::registry::SqLayout;
use resex_guestmem::GuestMemory;
use resex_mlx5::consts::send_op;
use resex_mlx5::wqe::{send_wqe_payload_len, CtrlSeg, WqeError};
use resex_mlx5::{index16, packets, DS_BYTES, MAX_DS, SEND_WQE_BB};
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
    pub fn advance<M: GuestMemory + ?Sized>(
        &mut self,
        mem: &M,
        sq: &SqLayout,
        qpn: u32,
        mtu: u64,
        c: &mut Counters,
        budget: &mut u32,
    ) -> Option<SqAnomaly> {
        while let Some(walk) = self.walk {
            if *budget == 0 {
                return None;
            }
            *budget -= 1;
            let result = if self.synced {
                self.step(mem, sq, qpn, mtu, c, walk)
            } else {
                self.resync(mem, sq, qpn, mtu, c, walk)
            };
            if let Err(a) = result {
                let expected = self.after_overrun;
                if self.synced {
                    // Lost track at p: the WQEs from p up to the named one are gone. Count the
                    // named WQE if its slot still holds it.
                    self.synced = false;
                    let _ = self.resync(mem, sq, qpn, mtu, c, walk);
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

    /// One WQE at `p`.
    fn step<M: GuestMemory + ?Sized>(
        &mut self,
        mem: &M,
        sq: &SqLayout,
        qpn: u32,
        mtu: u64,
        c: &mut Counters,
        walk: Walk,
    ) -> Result<(), SqAnomaly> {
        let dist = u32::from(walk.until.wrapping_sub(index16(self.p)));
        if dist >= sq.wqe_cnt {
            return Err(SqAnomaly::IndexMismatch);
        }
        let mut bb = FirstBb([0; FIRST]);
        read_first_bb(mem, sq, self.p, &mut bb).ok_or(SqAnomaly::IndexMismatch)?;
        let ctrl = bb.ctrl();
        check_ctrl(&ctrl, index16(self.p), qpn)?;
        let bbs = ctrl.bbs();
        if dist != 0 && dist < bbs {
            // The WQE at p would cover the one the CQE names.
            return Err(SqAnomaly::IndexMismatch);
        }
        let is_last = dist == 0;
        if !(is_last && walk.last == Last::Skip) {
            count_wqe(mem, sq, self.p, &bb, &ctrl, mtu, c);
        }
        self.p = self.p.wrapping_add(bbs);
        self.after_overrun = false;
        if is_last {
            self.walk = None;
        }
        Ok(())
    }

    /// `p` is unknown: take the WQE the CQE names, if its slot still holds it, as the new
    /// position (counting it when it completed). Never counts anything it cannot see.
    fn resync<M: GuestMemory + ?Sized>(
        &mut self,
        mem: &M,
        sq: &SqLayout,
        qpn: u32,
        mtu: u64,
        c: &mut Counters,
        walk: Walk,
    ) -> Result<(), SqAnomaly> {
        self.walk = None;
        let at = (self.p & !0xffff) | u32::from(walk.until);
        let mut bb = FirstBb([0; FIRST]);
        read_first_bb(mem, sq, at, &mut bb).ok_or(SqAnomaly::IndexMismatch)?;
        let ctrl = bb.ctrl();
        check_ctrl(&ctrl, walk.until, qpn)?;
        if walk.last == Last::Count {
            count_wqe(mem, sq, at, &bb, &ctrl, mtu, c);
        }
        self.p = at.wrapping_add(ctrl.bbs());
        self.synced = true;
        self.after_overrun = false;
        Ok(())
    }
}

/// Bytes read first of each WQE: the control segment and two more segments, enough for the
/// common WQEs (a SEND with one SGE is 32 bytes, an RDMA WRITE or READ with one SGE 48).
const FIRST: usize = 48;

/// The first [`FIRST`] bytes of the WQE at `p`.
struct FirstBb([u8; FIRST]);

impl FirstBb {
    fn ctrl(&self) -> CtrlSeg {
        let mut c = [0u8; 16];
        c.copy_from_slice(&self.0[..16]);
        CtrlSeg::decode(&c)
    }
}

#[inline]
fn read_first_bb<M: GuestMemory + ?Sized>(
    mem: &M,
    sq: &SqLayout,
    p: u32,
    bb: &mut FirstBb,
) -> Option<()> {
    let slot = u64::from(p & (sq.wqe_cnt - 1)) * SEND_WQE_BB;
    sq.ring.read(mem, slot, &mut bb.0).ok()
}

fn check_ctrl(ctrl: &CtrlSeg, index: u16, qpn: u32) -> Result<(), SqAnomaly> {
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

/// Reads the rest of the WQE at `p` (whose control segment checked out) and adds it to the
/// counters. A WQE whose body makes no sense completed all the same: it counts as a WQE and an
/// anomaly, with no bytes or packets (they cannot be known), and the walk goes on past it.
fn count_wqe<M: GuestMemory + ?Sized>(
    mem: &M,
    sq: &SqLayout,
    p: u32,
    bb: &FirstBb,
    ctrl: &CtrlSeg,
    mtu: u64,
    c: &mut Counters,
) {
    let len = usize::from(ctrl.ds) * DS_BYTES;
    c.wqes += 1;
    // Most WQEs fit their first basic block; only longer ones need the large buffer (and its
    // initialisation). ds is 6 bits, so len <= 1008: a WQE never reaches past itself.
    let mut large;
    let buf: &[u8] = if len <= FIRST {
        &bb.0[..len]
    } else {
        large = [0u8; MAX_DS as usize * DS_BYTES];
        large[..FIRST].copy_from_slice(&bb.0);
        let slot = u64::from(p & (sq.wqe_cnt - 1)) * SEND_WQE_BB;
        if sq
            .ring
            .read(mem, slot + FIRST as u64, &mut large[FIRST..len])
            .is_err()
        {
            c.anomalies += 1;
            return;
        }
        &large[..len]
    };
    let Ok(bytes) = send_wqe_payload_len(ctrl, buf) else {
        c.anomalies += 1;
        return;
    };
    match ctrl.opcode {
        send_op::SEND
        | send_op::SEND_IMM
        | send_op::SEND_INVAL
        | send_op::RDMA_WRITE
        | send_op::RDMA_WRITE_IMM => {
            c.add_tx(bytes, packets(bytes, mtu));
        }
        send_op::RDMA_READ => {
            c.add_tx(0, 1);
            c.add_rx_read(bytes, packets(bytes, mtu));
        }
        send_op::ATOMIC_CS | send_op::ATOMIC_FA => {
            c.add_tx(0, 1);
            c.add_rx_read(0, 1);
        }
        _ => {} // NOP: nothing on the wire.
    }
}
