//! One VM's monitor: a cursor per CQ and per SQ, scanned with a bounded budget.

use crate::counters::Counters;
use crate::cq::{ahead, peek, CqeTail, INDEX_MASK};
use crate::registry::Layout;
use crate::sq::{Last, SqCursor};
use resex_common::LogLimiter;
use resex_guestmem::GuestMemory;
use resex_mlx5::consts::cqe_op;
use resex_mlx5::dbrec::read_cq_ci;
use resex_mlx5::SEND_WQE_BB;

/// Default cap on entries (CQEs + WQEs) walked per scan of one VM.
pub const DEFAULT_SCAN_BUDGET: u32 = 16_384;

/// What one scan did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScanOutcome {
    /// CQEs and WQEs walked.
    pub entries: u32,
    /// The budget ran out: there may be more to read at the next scan.
    pub exhausted: bool,
}

/// The monitor of one VM: its validated rings, its cursors and its cumulative per-QP counts.
#[derive(Debug)]
pub struct VmMonitor {
    pub(crate) layout: Layout,
    mtu: u64,
    pub(crate) cq_index: Vec<u32>,
    /// QP (index into `layout.qps`) that CQE counts without a known QPN go to.
    cq_owner: Vec<usize>,
    pub(crate) sq: Vec<SqCursor>,
    counters: Vec<Counters>,
    log_anomaly: LogLimiter,
    log_overrun: LogLimiter,
}

impl VmMonitor {
    /// A monitor starting at the registration's start indices (0 unless given).
    pub fn new(layout: Layout) -> VmMonitor {
        let cq_index = layout.cqs.iter().map(|c| c.start & INDEX_MASK).collect();
        let mut cq_owner = vec![0; layout.cqs.len()];
        for (qi, q) in layout.qps.iter().enumerate().rev() {
            if let Some(r) = q.recv_cq {
                cq_owner[r] = qi;
            }
            cq_owner[q.send_cq] = qi;
        }
        let sq = layout
            .qps
            .iter()
            .map(|q| SqCursor::new(q.sq.start))
            .collect();
        let counters = vec![Counters::default(); layout.qps.len()];
        VmMonitor {
            mtu: u64::from(layout.path_mtu),
            layout,
            cq_index,
            cq_owner,
            sq,
            counters,
            log_anomaly: LogLimiter::default(),
            log_overrun: LogLimiter::default(),
        }
    }

    /// The validated layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Cumulative counts per QP, in the order of `layout().qps` (sorted by QPN).
    pub fn counters(&self) -> &[Counters] {
        &self.counters
    }

    /// The sum over all QPs.
    pub fn total(&self) -> Counters {
        let mut t = Counters::default();
        for c in &self.counters {
            t += *c;
        }
        t
    }

    /// The monitor's index into CQ `i` (24 bits).
    pub fn cq_index(&self, i: usize) -> u32 {
        self.cq_index[i]
    }

    /// The CQ index below which every CQE of CQ `i` is fully accounted (its SQ walk done).
    pub fn cq_settled_index(&self, i: usize) -> u32 {
        let m = self.cq_index[i];
        let walking = self
            .layout
            .qps
            .iter()
            .zip(&self.sq)
            .any(|(q, s)| q.send_cq == i && s.walk.is_some());
        if walking {
            m.wrapping_sub(1) & INDEX_MASK
        } else {
            m
        }
    }

    /// True when no SQ walk is left unfinished (every CQE consumed is fully counted).
    pub fn settled(&self) -> bool {
        self.sq.iter().all(|s| s.walk.is_none())
    }

    /// Starts counting from the guest's present position instead of the registration's start
    /// indices: each CQ cursor jumps to the guest's consumer index, and each SQ cursor
    /// resynchronises on the next CQE (the work completed before now is not counted, and the
    /// reused SQ slots behind it are not anomalies). For attaching to a guest that is running.
    pub fn skip_to_now<M: GuestMemory + ?Sized>(&mut self, mem: &M) {
        for (i, cq) in self.layout.cqs.iter().enumerate() {
            if let Ok(ci) = read_cq_ci(mem, cq.dbrec) {
                self.cq_index[i] = ci & INDEX_MASK;
            }
        }
        for s in &mut self.sq {
            s.walk = None;
            s.synced = false;
            s.after_overrun = true;
        }
    }

    /// Asks the memory to bring in what the next [`Self::scan`] reads first: each CQ's doorbell
    /// record and the entry at its cursor, and each send queue's next basic block. A host that
    /// scans many VMs per tick calls this for the VM after next, so their cache misses overlap.
    pub fn prefetch<M: GuestMemory + ?Sized>(&self, mem: &M) {
        for (cq, &m) in self.layout.cqs.iter().zip(&self.cq_index) {
            mem.prefetch(cq.dbrec);
            let k = u64::from(m & (cq.cqe_cnt() - 1)) * cq.size.bytes() + cq.size.cqe_offset();
            mem.prefetch(cq.ring.gpa(k));
        }
        for (q, s) in self.layout.qps.iter().zip(&self.sq) {
            let k = u64::from(s.p & (q.sq.wqe_cnt - 1)) * SEND_WQE_BB;
            mem.prefetch(q.sq.ring.gpa(k));
        }
    }

    /// Reads every ring once, walking at most `budget` entries (CQEs + WQEs); what is left is
    /// read at the next scan. Never writes guest memory.
    pub fn scan<M: GuestMemory + ?Sized>(&mut self, mem: &M, budget: u32) -> ScanOutcome {
        let mut left = budget;
        // Walks left unfinished by the last scan come first: their CQEs were consumed already.
        for qi in 0..self.sq.len() {
            if self.sq[qi].walk.is_some() && !self.walk(mem, qi, &mut left) {
                return ScanOutcome {
                    entries: budget - left,
                    exhausted: true,
                };
            }
        }
        for ci in 0..self.layout.cqs.len() {
            if !self.scan_cq(mem, ci, &mut left) {
                return ScanOutcome {
                    entries: budget - left,
                    exhausted: true,
                };
            }
        }
        ScanOutcome {
            entries: budget - left,
            exhausted: false,
        }
    }

    /// Scans one CQ; false when the budget ran out.
    fn scan_cq<M: GuestMemory + ?Sized>(&mut self, mem: &M, ci: usize, left: &mut u32) -> bool {
        let cq = &self.layout.cqs[ci];
        let Ok(guest_ci) = read_cq_ci(mem, cq.dbrec) else {
            self.anomaly(self.cq_owner[ci], "CQ doorbell record unreadable");
            return true;
        };
        if ahead(guest_ci, self.cq_index[ci]).is_some_and(|d| d > cq.cqe_cnt()) {
            self.overrun(ci, guest_ci);
        }
        loop {
            if *left == 0 {
                return false;
            }
            let m = self.cq_index[ci];
            let cqe = match peek(mem, &self.layout.cqs[ci], m) {
                Ok(Some(c)) => c,
                Ok(None) => {
                    if ahead(guest_ci, m).is_some() {
                        // The guest consumed entry m, yet it is not valid: overwritten.
                        self.overrun(ci, guest_ci);
                        continue;
                    }
                    return true;
                }
                Err(_) => {
                    self.anomaly(self.cq_owner[ci], "CQ ring unreadable");
                    return true;
                }
            };
            *left -= 1;
            self.cq_index[ci] = (m + 1) & INDEX_MASK;
            if let Some(qi) = self.consume(ci, &cqe) {
                if !self.walk(mem, qi, left) {
                    return false;
                }
            }
        }
    }

    /// Accounts one CQE; returns the QP whose SQ walk it started.
    fn consume(&mut self, ci: usize, cqe: &CqeTail) -> Option<usize> {
        let owner = self.cq_owner[ci];
        let qp = self.find_qp(cqe.qpn);
        let qi = qp.unwrap_or(owner);
        self.counters[qi].completions += 1;
        if cqe.is_compressed() {
            self.anomaly(qi, "compressed CQE (unsupported)");
            return None;
        }
        match cqe.opcode {
            cqe_op::REQ | cqe_op::REQ_ERR => {
                if cqe.opcode == cqe_op::REQ_ERR {
                    self.counters[qi].errors += 1;
                }
                let Some(qi) = qp.filter(|&q| self.layout.qps[q].send_cq == ci) else {
                    self.anomaly(qi, "requester CQE for a QP not registered on this CQ");
                    return None;
                };
                let last = if cqe.opcode == cqe_op::REQ {
                    Last::Count
                } else {
                    Last::Skip
                };
                self.sq[qi].begin(cqe.wqe_counter, last);
                Some(qi)
            }
            cqe_op::RESP_WR_IMM
            | cqe_op::RESP_SEND
            | cqe_op::RESP_SEND_IMM
            | cqe_op::RESP_SEND_INV => {
                if qp.is_none() {
                    self.anomaly(qi, "responder CQE for an unregistered QPN");
                }
                self.counters[qi].recv_bytes += u64::from(cqe.byte_cnt);
                None
            }
            cqe_op::RESP_ERR | cqe_op::SIG_ERR => {
                self.counters[qi].errors += 1;
                None
            }
            cqe_op::RESIZE_CQ | cqe_op::NO_PACKET => None,
            _ => {
                self.anomaly(qi, "unknown CQE opcode");
                None
            }
        }
    }

    /// Continues QP `qi`'s SQ walk; false when the budget ran out first. Kept out of line:
    /// the CQE loop stays small (its cost moved by half when the walk was inlined into it).
    #[inline(never)]
    fn walk<M: GuestMemory + ?Sized>(&mut self, mem: &M, qi: usize, left: &mut u32) -> bool {
        let q = &self.layout.qps[qi];
        let anomaly =
            self.sq[qi].advance(mem, &q.sq, q.qpn, self.mtu, &mut self.counters[qi], left);
        if let Some(a) = anomaly {
            if let Some(n) = self.log_anomaly.hit() {
                tracing::warn!(
                    qpn = q.qpn,
                    occurrence = n,
                    "send queue walk: {a:?}; resynchronising"
                );
            }
        }
        self.sq[qi].walk.is_none()
    }

    fn find_qp(&self, qpn: u32) -> Option<usize> {
        self.layout.qps.binary_search_by_key(&qpn, |q| q.qpn).ok()
    }

    fn anomaly(&mut self, qi: usize, what: &str) {
        self.counters[qi].anomalies += 1;
        if let Some(n) = self.log_anomaly.hit() {
            tracing::warn!(
                qpn = self.layout.qps[qi].qpn,
                occurrence = n,
                "ring anomaly: {what}"
            );
        }
    }

    /// The HCA lapped the monitor on CQ `ci`: count it, resynchronise to the guest's consumer
    /// index, and tell the SQ cursors fed by this CQ that mismatches are now expected.
    fn overrun(&mut self, ci: usize, guest_ci: u32) {
        let owner = self.cq_owner[ci];
        self.counters[owner].overruns += 1;
        let lost = guest_ci.wrapping_sub(self.cq_index[ci]) & INDEX_MASK;
        if let Some(n) = self.log_overrun.hit() {
            tracing::warn!(
                qpn = self.layout.qps[owner].qpn,
                lost_cqes_at_least = lost,
                occurrence = n,
                "monitor lapped by the HCA: resynchronising to the consumer index"
            );
        }
        self.cq_index[ci] = guest_ci & INDEX_MASK;
        // The lost CQEs may have reported errors, so the WQEs between the SQ cursor and the next
        // CQE cannot be assumed to have completed: resynchronise on that CQE's own WQE.
        for (qi, q) in self.layout.qps.iter().enumerate() {
            if q.send_cq == ci {
                self.sq[qi].after_overrun = true;
                self.sq[qi].synced = false;
            }
        }
    }
}
