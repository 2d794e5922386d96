//! One VM's monitor: a cursor per CQ and per SQ, scanned with a bounded budget.

use crate::counters::Counters;
use crate::cq::{ahead, peek, CqHot, CqeTail, Unreadable, INDEX_MASK};
use crate::hot::{Ram, ViaTrait};
use crate::registry::Layout;
use crate::sq::{Last, SqCursor, SqRing};
use resex_common::LogLimiter;
use resex_guestmem::{prefetch_host, prefetch_host_lines, GuestMemory};
use resex_mlx5::consts::cqe_op;
use resex_mlx5::dbrec::read_cq_ci;

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

/// The bit of [`VmMonitor`]'s `walked` mask for QP `qi`.
#[inline]
fn walked_bit(qi: usize) -> u64 {
    1 << qi.min(63)
}

/// One QP as a scan needs it: its SQ cursor and ring, and its send CQ.
#[derive(Clone, Debug)]
pub(crate) struct QpHot {
    /// The SQ walk's cursor.
    pub cur: SqCursor,
    /// The SQ.
    pub sq: SqRing,
    /// Index of the send CQ.
    pub send_cq: usize,
}

/// The monitor of one VM: its validated rings, its cursors and its cumulative per-QP counts.
///
/// A scan reads only the packed state (`cqs`, `qps`, `pages`, `counters`): one array each,
/// allocated once at construction; the [`Layout`] is kept for [`Self::layout`] and the state
/// file. In declaration order (`repr(C)`): what an idle scan reads (its flags, the CQs and the
/// pages), then what a busy one adds (the QPs and the counters), then the totals, which only a
/// scan that counted reads, and the rest last. A host's array of monitors stays dense where a
/// tick walks it: an idle scan reads the first 56 bytes.
#[derive(Debug)]
#[repr(C)]
pub struct VmMonitor {
    /// The send queues the last scan walked (bit `qi`, QPs past 63 sharing bit 63): where a
    /// busy VM will most likely walk again, so the only SQ lines [`Self::prefetch`] asks for
    /// (an idle VM's SQ pages would only crowd the TLB).
    walked: u64,
    /// A walk may be unfinished (the last scan ran out of budget, or a state was restored).
    pub(crate) resume: bool,
    /// QPNs strictly ascending (as `validate` leaves them): a CQE's QPN equal to its CQ's own
    /// QP's is that QP without a search.
    qpns_ascending: bool,
    /// The totals may have moved since the last [`Self::scan_moved`] reported: a scan consumed
    /// or walked entries, or counted an anomaly or an overrun (they count without consuming an
    /// entry).
    noted: bool,
    /// Distinct CQs, in the order of `layout.cqs`.
    pub(crate) cqs: Box<[CqHot]>,
    /// Every ring's pages, back to back.
    pages: Box<[u64]>,
    /// QPs, in the order of `layout.qps` (sorted by QPN).
    pub(crate) qps: Box<[QpHot]>,
    counters: Box<[Counters]>,
    /// The sum of `counters`, kept by every change to them.
    total: Counters,
    /// `total` at the last [`Self::scan_moved`] that reported (what the next one counts from).
    at_delta: Counters,
    log_anomaly: LogLimiter,
    log_overrun: LogLimiter,
    pub(crate) layout: Layout,
}

impl VmMonitor {
    /// A monitor starting at the registration's start indices (0 unless given).
    pub fn new(layout: Layout) -> VmMonitor {
        let mut cq_owner = vec![0; layout.cqs.len()];
        for (qi, q) in layout.qps.iter().enumerate().rev() {
            if let Some(r) = q.recv_cq {
                cq_owner[r] = qi;
            }
            cq_owner[q.send_cq] = qi;
        }
        let mut pages = Vec::new();
        let cqs = layout
            .cqs
            .iter()
            .zip(&cq_owner)
            .map(|(c, &owner)| CqHot::new(c, owner, &mut pages))
            .collect();
        let qps = layout
            .qps
            .iter()
            .map(|q| QpHot {
                cur: SqCursor::new(q.sq.start),
                sq: SqRing::new(&q.sq, q.qpn, layout.path_mtu, &mut pages),
                send_cq: q.send_cq,
            })
            .collect();
        VmMonitor {
            cqs,
            qps,
            pages: pages.into_boxed_slice(),
            counters: vec![Counters::default(); layout.qps.len()].into_boxed_slice(),
            total: Counters::default(),
            at_delta: Counters::default(),
            resume: false,
            qpns_ascending: layout.qps.windows(2).all(|w| w[0].qpn < w[1].qpn),
            walked: 0,
            noted: false,
            layout,
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

    /// The sum over all QPs (kept up to date by each scan: no summing here).
    pub fn total(&self) -> Counters {
        self.total
    }

    /// The monitor's index into CQ `i` (24 bits).
    pub fn cq_index(&self, i: usize) -> u32 {
        self.cqs[i].index
    }

    /// The CQ index below which every CQE of CQ `i` is fully accounted (its SQ walk done).
    pub fn cq_settled_index(&self, i: usize) -> u32 {
        let m = self.cqs[i].index;
        let walking = self
            .qps
            .iter()
            .any(|q| q.send_cq == i && q.cur.walk.is_some());
        if walking {
            m.wrapping_sub(1) & INDEX_MASK
        } else {
            m
        }
    }

    /// True when no SQ walk is left unfinished (every CQE consumed is fully counted).
    pub fn settled(&self) -> bool {
        self.qps.iter().all(|q| q.cur.walk.is_none())
    }

    /// Starts counting from the guest's present position instead of the registration's start
    /// indices: each CQ cursor jumps to the guest's consumer index, and each SQ cursor
    /// resynchronises on the next CQE (the work completed before now is not counted, and the
    /// reused SQ slots behind it are not anomalies). For attaching to a guest that is running.
    pub fn skip_to_now<M: GuestMemory + ?Sized>(&mut self, mem: &M) {
        for (cq, l) in self.cqs.iter_mut().zip(&self.layout.cqs) {
            if let Ok(ci) = read_cq_ci(mem, l.dbrec) {
                cq.index = ci & INDEX_MASK;
            }
        }
        for q in self.qps.iter_mut() {
            q.cur.walk = None;
            q.cur.synced = false;
            q.cur.after_overrun = true;
        }
    }

    /// Asks the memory to bring in what the next [`Self::scan`] reads first: each CQ's doorbell
    /// record and the entry at its cursor, and the next basic block of each send queue the last
    /// scan walked (an idle queue's page would only take a TLB entry). A host that scans many
    /// VMs per tick calls this a VM or two ahead ([`crate::scan_all`] does), so that the cache
    /// and TLB misses of different VMs overlap.
    #[inline]
    pub fn prefetch<M: GuestMemory + ?Sized>(&self, mem: &M) {
        match mem.mapped() {
            Some(view) => self.prefetch_with(&view),
            None => self.prefetch_with(&ViaTrait(mem)),
        }
    }

    /// Asks the cache for this monitor's own packed state that [`Self::prefetch`] and
    /// [`Self::scan`] read first: the CQ cursors and the page table, and, when the last scan
    /// walked a send queue, the SQ cursors and the counters. A host that scans many VMs calls
    /// it a few VMs ahead of [`Self::prefetch`] ([`crate::scan_all`] does). The first CQ's
    /// cursor is brought in whole (it may straddle two lines); the rest is a line each.
    pub fn prefetch_state(&self) {
        if let Some(cq) = self.cqs.first() {
            prefetch_host_lines(cq);
        }
        prefetch_host(&*self.pages);
        if self.walked != 0 {
            prefetch_host(&*self.qps);
            prefetch_host(&*self.counters);
        }
    }

    fn prefetch_with<R: Ram>(&self, r: &R) {
        for cq in self.cqs.iter() {
            cq.prefetch(r, &self.pages);
        }
        if self.walked == 0 {
            return;
        }
        for (qi, q) in self.qps.iter().enumerate() {
            if self.walked & walked_bit(qi) != 0 {
                q.sq.ring.prefetch(r, &self.pages, q.sq.slot(q.cur.p));
            }
        }
    }

    /// Reads every ring once, walking at most `budget` entries (CQEs + WQEs); what is left is
    /// read at the next scan. Never writes guest memory.
    ///
    /// Memory that is one mapping ([`GuestMemory::mapped`]) is read through an inlined view,
    /// so a `&dyn GuestMemory` costs one dynamic call per scan, not one per read.
    #[inline]
    pub fn scan<M: GuestMemory + ?Sized>(&mut self, mem: &M, budget: u32) -> ScanOutcome {
        match mem.mapped() {
            Some(view) => self.scan_with(&view, budget),
            None => self.scan_with(&ViaTrait(mem), budget),
        }
    }

    /// [`Self::scan`], returning what it counted since the last call (zero when nothing).
    #[inline]
    pub fn scan_delta<M: GuestMemory + ?Sized>(&mut self, mem: &M, budget: u32) -> Counters {
        self.scan_moved(mem, budget).unwrap_or_default()
    }

    /// [`Self::scan`], returning what was counted since the last call, or `None` when nothing
    /// was (most VMs, most ticks: then no counter is read or written). Counts are only ever
    /// added by a scan, and every scan that adds some marks the monitor, so what a plain
    /// [`Self::scan`] between two calls counted is in the next one.
    #[inline]
    pub fn scan_moved<M: GuestMemory + ?Sized>(
        &mut self,
        mem: &M,
        budget: u32,
    ) -> Option<Counters> {
        self.scan(mem, budget);
        if !self.noted {
            return None;
        }
        self.noted = false;
        let d = self.total - self.at_delta;
        self.at_delta = self.total;
        Some(d)
    }

    fn scan_with<R: Ram>(&mut self, r: &R, budget: u32) -> ScanOutcome {
        // Stores only when they change a value: an idle VM's lines stay clean.
        if self.walked != 0 {
            self.walked = 0;
        }
        let out = self.scan_rings(r, budget);
        if self.resume != out.exhausted {
            self.resume = out.exhausted;
        }
        if (out.entries != 0 || self.walked != 0) && !self.noted {
            self.noted = true;
        }
        out
    }

    fn scan_rings<R: Ram>(&mut self, r: &R, budget: u32) -> ScanOutcome {
        let mut left = budget;
        // Walks left unfinished by the last scan come first: their CQEs were consumed already.
        if self.resume {
            for qi in 0..self.qps.len() {
                if self.qps[qi].cur.walk.is_some() && !self.walk(r, qi, &mut left) {
                    return ScanOutcome {
                        entries: budget - left,
                        exhausted: true,
                    };
                }
            }
        }
        for ci in 0..self.cqs.len() {
            if !self.scan_cq(r, ci, &mut left) {
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
    #[inline(always)]
    fn scan_cq<R: Ram>(&mut self, r: &R, ci: usize, left: &mut u32) -> bool {
        let Some(guest_ci) = self.cqs[ci].guest_ci(r) else {
            self.anomaly(self.cqs[ci].owner, "CQ doorbell record unreadable");
            return true;
        };
        if ahead(guest_ci, self.cqs[ci].index).is_some_and(|d| d > 1 << self.cqs[ci].log_cnt) {
            self.overrun(ci, guest_ci);
        }
        loop {
            if *left == 0 {
                return false;
            }
            let cq = &self.cqs[ci];
            let m = cq.index;
            let cqe = match peek(r, cq, &self.pages, m) {
                Ok(Some(c)) => c,
                Ok(None) => {
                    if ahead(guest_ci, m).is_some() {
                        // The guest consumed entry m, yet it is not valid: overwritten.
                        self.overrun(ci, guest_ci);
                        continue;
                    }
                    return true;
                }
                Err(Unreadable) => {
                    self.anomaly(cq.owner, "CQ ring unreadable");
                    return true;
                }
            };
            *left -= 1;
            self.cqs[ci].index = (m + 1) & INDEX_MASK;
            if let Some(qi) = self.consume(ci, &cqe) {
                if !self.walk(r, qi, left) {
                    return false;
                }
            }
        }
    }

    /// Accounts one CQE; returns the QP whose SQ walk it started. The common CQEs (a requester
    /// CQE on its QP's send CQ, a responder CQE of a known QP) are handled here, the rest by
    /// [`Self::consume_other`].
    #[inline(always)]
    fn consume(&mut self, ci: usize, cqe: &CqeTail) -> Option<usize> {
        let owner = self.cqs[ci].owner;
        // The CQ's own QP first (one comparison); QPNs strictly ascending make that the one a
        // binary search would find.
        let qp = match self.qps.get(owner) {
            Some(q) if self.qpns_ascending && q.sq.qpn == cqe.qpn => Some(owner),
            _ => self.find_qp(cqe.qpn),
        };
        if let Some(qi) = qp.filter(|_| !cqe.is_compressed()) {
            match cqe.opcode {
                cqe_op::REQ if self.qps[qi].send_cq == ci => {
                    self.counters[qi].completions += 1;
                    self.total.completions += 1;
                    self.qps[qi].cur.begin(cqe.wqe_counter, Last::Count);
                    return Some(qi);
                }
                cqe_op::RESP_WR_IMM
                | cqe_op::RESP_SEND
                | cqe_op::RESP_SEND_IMM
                | cqe_op::RESP_SEND_INV => {
                    for c in [&mut self.counters[qi], &mut self.total] {
                        c.completions += 1;
                        c.recv_bytes += u64::from(cqe.byte_cnt);
                    }
                    return None;
                }
                _ => {}
            }
        }
        self.consume_other(ci, cqe, qp)
    }

    /// [`Self::consume`] for every other CQE: errors, compressed or unknown ones, unknown QPNs.
    #[cold]
    #[inline(never)]
    fn consume_other(&mut self, ci: usize, cqe: &CqeTail, qp: Option<usize>) -> Option<usize> {
        let owner = self.cqs[ci].owner;
        let qi = qp.unwrap_or(owner);
        self.counters[qi].completions += 1;
        self.total.completions += 1;
        if cqe.is_compressed() {
            self.anomaly(qi, "compressed CQE (unsupported)");
            return None;
        }
        match cqe.opcode {
            cqe_op::REQ | cqe_op::REQ_ERR => {
                if cqe.opcode == cqe_op::REQ_ERR {
                    self.counters[qi].errors += 1;
                    self.total.errors += 1;
                }
                let Some(qi) = qp.filter(|&q| self.qps[q].send_cq == ci) else {
                    self.anomaly(qi, "requester CQE for a QP not registered on this CQ");
                    return None;
                };
                let last = if cqe.opcode == cqe_op::REQ {
                    Last::Count
                } else {
                    Last::Skip
                };
                self.qps[qi].cur.begin(cqe.wqe_counter, last);
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
                self.total.recv_bytes += u64::from(cqe.byte_cnt);
                None
            }
            cqe_op::RESP_ERR | cqe_op::SIG_ERR => {
                self.counters[qi].errors += 1;
                self.total.errors += 1;
                None
            }
            cqe_op::RESIZE_CQ | cqe_op::NO_PACKET => None,
            _ => {
                self.anomaly(qi, "unknown CQE opcode");
                None
            }
        }
    }

    /// Continues QP `qi`'s SQ walk; false when the budget ran out first.
    #[inline(always)]
    fn walk<R: Ram>(&mut self, r: &R, qi: usize, left: &mut u32) -> bool {
        self.walked |= walked_bit(qi);
        let q = &mut self.qps[qi];
        let mut delta = Counters::default();
        let anomaly = q.cur.advance(r, &q.sq, &self.pages, &mut delta, left);
        self.counters[qi] += delta;
        self.total += delta;
        if let Some(a) = anomaly {
            if let Some(n) = self.log_anomaly.hit() {
                tracing::warn!(
                    qpn = q.sq.qpn,
                    occurrence = n,
                    "send queue walk: {a:?}; resynchronising"
                );
            }
        }
        q.cur.walk.is_none()
    }

    #[inline]
    fn find_qp(&self, qpn: u32) -> Option<usize> {
        self.qps.binary_search_by_key(&qpn, |q| q.sq.qpn).ok()
    }

    #[cold]
    fn anomaly(&mut self, qi: usize, what: &str) {
        self.noted = true;
        self.counters[qi].anomalies += 1;
        self.total.anomalies += 1;
        if let Some(n) = self.log_anomaly.hit() {
            tracing::warn!(
                qpn = self.qps[qi].sq.qpn,
                occurrence = n,
                "ring anomaly: {what}"
            );
        }
    }

    /// The HCA lapped the monitor on CQ `ci`: count it, resynchronise to the guest's consumer
    /// index, and tell the SQ cursors fed by this CQ that mismatches are now expected.
    #[cold]
    fn overrun(&mut self, ci: usize, guest_ci: u32) {
        self.noted = true;
        let owner = self.cqs[ci].owner;
        self.counters[owner].overruns += 1;
        self.total.overruns += 1;
        let lost = guest_ci.wrapping_sub(self.cqs[ci].index) & INDEX_MASK;
        if let Some(n) = self.log_overrun.hit() {
            tracing::warn!(
                qpn = self.qps[owner].sq.qpn,
                lost_cqes_at_least = lost,
                occurrence = n,
                "monitor lapped by the HCA: resynchronising to the consumer index"
            );
        }
        self.cqs[ci].index = guest_ci & INDEX_MASK;
        // The lost CQEs may have reported errors, so the WQEs between the SQ cursor and the next
        // CQE cannot be assumed to have completed: resynchronise on that CQE's own WQE.
        for q in self.qps.iter_mut() {
            if q.send_cq == ci {
                q.cur.after_overrun = true;
                q.cur.synced = false;
            }
        }
    }
}
