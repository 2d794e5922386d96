//! [`RxeMonitor`]: one VM's soft-RoCE queues, counted exactly.
//!
//! **Where the counts come from.** A send queue is counted where work is posted: each scan
//! walks the slots from the monitor's cursor up to the producer index the library advanced
//! (`post_one_send` writes a WQE, then the producer), one work request per slot, its bytes from
//! `dma.length` and its packets at the path MTU, as the mlx5 monitor counts a completed WQE
//! (a READ is one request packet out and its length back; an atomic one packet each way). The
//! slots between the kernel's consumer index and the producer are posted and not yet done, so
//! they cannot be reused under the monitor; the ones behind the consumer can, once the producer
//! comes round, which only a whole lap between two scans does. Completion queues are walked the
//! same way up to the kernel's producer index: every entry is a completion, its `status` an
//! error or not, a receive's `byte_len` the bytes received, attributed to the QP its `qp_num`
//! names (to no QP when that QP is not registered). Receive queues are watched for a valid
//! header only: what they take in shows in the completions.
//!
//! **Laps.** rxe keeps its indices masked, so a lap cannot be seen in them. The library numbers
//! its requests (`ssn`, one more per WQE): a WQE whose number is a whole number of laps past the
//! previous one's is an overrun, counted as such (the lost requests are not invented).
//!
//! **Hostile input.** Every index is masked before it addresses a slot, a scan walks at most
//! its budget, a header that disagrees with the registration stops that ring (one anomaly, a
//! rate-limited WARN) until it agrees again. Nothing read can make the monitor panic or
//! allocate; a lying guest can only misstate its own counts.

use super::{layout, wc_op, wr_op, RxeRing};
use crate::counters::Counters;
use crate::queueing::Queueing;
use resex_common::LogLimiter;
use resex_guestmem::GuestMemory;
use resex_proto::RingKind;
use serde::{Deserialize, Serialize};

/// A ring's cursor: what the next scan reads first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RxeCursor {
    /// The next slot index to read (masked).
    pub index: u32,
    /// The cursor has been placed (at the registration's start, or the consumer index).
    pub attached: bool,
    /// The send sequence number of the last WQE read (send queues).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_ssn: Option<u32>,
    /// The header disagreed with the registration at the last scan.
    #[serde(default)]
    pub bad: bool,
}

/// One QP's counts (`qpn` is `None` for completions of QPs not registered).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RxeQpCounts {
    /// The QP.
    pub qpn: Option<u32>,
    /// Its counts.
    pub counts: Counters,
}

#[derive(Debug)]
struct Hot {
    ring: RxeRing,
    cur: RxeCursor,
    /// Index into the monitor's counters.
    bucket: usize,
    /// Work posted and not yet completed at the last look (send queues).
    outstanding: u32,
}

/// The monitor of one VM's soft-RoCE queues (see the module's documentation).
#[derive(Debug)]
pub struct RxeMonitor {
    mtu: u64,
    rings: Box<[Hot]>,
    /// Distinct QPNs named by the rings, ascending; `counters[qpns.len()]` is "no QP".
    qpns: Box<[u32]>,
    counters: Box<[Counters]>,
    total: Counters,
    /// The ring the next scan starts with (a budget spent on one ring moves on to the next).
    next: usize,
    /// Entries the last scan walked.
    walked: u32,
    /// The send queues' outstanding work, sampled once per scan.
    queue: Queueing,
    /// Requests known posted (from `ssn`) but passed over in a lap since the last sample.
    missed: u64,
    log_header: LogLimiter,
    log_lap: LogLimiter,
    log_first: LogLimiter,
}

/// The indices a scan reads from a header.
struct Indices {
    log2: u32,
    mask: u32,
    producer: u32,
    consumer: u32,
}

fn u32_ne(b: &[u8]) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[..4]);
    u32::from_ne_bytes(w)
}

fn read_u32<M: GuestMemory + ?Sized>(r: &RxeRing, mem: &M, off: u64) -> Option<u32> {
    let mut b = [0u8; 4];
    r.ring.read(mem, off, &mut b).ok()?;
    Some(u32::from_ne_bytes(b))
}

fn read_indices<M: GuestMemory + ?Sized>(r: &RxeRing, mem: &M) -> Option<Indices> {
    let mut geo = [0u8; 8];
    r.ring
        .read(mem, layout::queue::LOG2_ELEM_SIZE as u64, &mut geo)
        .ok()?;
    Some(Indices {
        log2: u32_ne(&geo[layout::queue::LOG2_ELEM_SIZE..]),
        mask: u32_ne(&geo[layout::queue::INDEX_MASK..]),
        producer: read_u32(r, mem, layout::queue::PRODUCER as u64)?,
        consumer: read_u32(r, mem, layout::queue::CONSUMER as u64)?,
    })
}

impl RxeMonitor {
    /// A monitor of `rings`, counting packets at `path_mtu` bytes.
    pub fn new(rings: Vec<RxeRing>, path_mtu: u32) -> RxeMonitor {
        let mut qpns: Vec<u32> = rings.iter().filter_map(|r| r.qpn).collect();
        qpns.sort_unstable();
        qpns.dedup();
        let rings: Box<[Hot]> = rings
            .into_iter()
            .map(|ring| Hot {
                bucket: ring
                    .qpn
                    .and_then(|q| qpns.binary_search(&q).ok())
                    .unwrap_or(qpns.len()),
                ring,
                cur: RxeCursor::default(),
                outstanding: 0,
            })
            .collect();
        RxeMonitor {
            mtu: u64::from(path_mtu.max(1)),
            counters: vec![Counters::default(); qpns.len() + 1].into_boxed_slice(),
            qpns: qpns.into_boxed_slice(),
            rings,
            total: Counters::default(),
            next: 0,
            walked: 0,
            queue: Queueing::default(),
            missed: 0,
            log_header: LogLimiter::default(),
            log_lap: LogLimiter::default(),
            log_first: LogLimiter::default(),
        }
    }

    /// Distinct QPs the rings name.
    pub fn qps(&self) -> usize {
        self.qpns.len()
    }

    /// The rings, in the registration's order.
    pub fn rings(&self) -> impl Iterator<Item = &RxeRing> {
        self.rings.iter().map(|h| &h.ring)
    }

    /// Each ring's cursor, in the registration's order.
    pub fn cursors(&self) -> Vec<RxeCursor> {
        self.rings.iter().map(|h| h.cur).collect()
    }

    /// Puts back cursors saved by [`Self::cursors`] (extra ones are ignored, missing ones left).
    pub fn set_cursors(&mut self, cursors: &[RxeCursor]) {
        for (h, c) in self.rings.iter_mut().zip(cursors) {
            h.cur = RxeCursor {
                index: c.index & h.ring.mask(),
                ..*c
            };
        }
    }

    /// Carries the cursors of the queues `old` also watched over to this monitor (a guest that
    /// registers again keeps its counts exact), and its log limits (a guest that registers
    /// again and again gets no fresh burst of lines). Returns how many cursors carried over.
    pub fn adopt(&mut self, old: &RxeMonitor) -> usize {
        self.log_header = old.log_header.clone();
        self.log_lap = old.log_lap.clone();
        self.log_first = old.log_first.clone();
        let mut kept = 0;
        for h in self.rings.iter_mut() {
            if let Some(o) = old.rings.iter().find(|o| o.ring.same_queue(&h.ring)) {
                h.cur = o.cur;
                kept += 1;
            }
        }
        kept
    }

    /// Cumulative counts per QP, ascending, then the completions of QPs not registered (none
    /// at all without rings).
    pub fn counters(&self) -> Vec<RxeQpCounts> {
        if self.rings.is_empty() {
            return Vec::new();
        }
        let named = self.qpns.iter().map(|&q| Some(q));
        named
            .chain(std::iter::once(None))
            .zip(self.counters.iter())
            .map(|(qpn, &counts)| RxeQpCounts { qpn, counts })
            .collect()
    }

    /// Entries (WQEs and completions) the last scan walked: its budget when there may be more.
    pub fn walked(&self) -> u32 {
        self.walked
    }

    /// The sum over every QP.
    pub fn total(&self) -> Counters {
        self.total
    }

    /// Work posted and not yet completed on each send queue now, summed (the host's own
    /// evidence of a VM's queueing; a header that cannot be read counts nothing).
    pub fn outstanding<M: GuestMemory + ?Sized>(&self, mem: &M) -> u64 {
        self.rings
            .iter()
            .filter(|h| h.ring.kind == RingKind::Sq)
            .filter_map(|h| read_indices(&h.ring, mem))
            .map(|x| u64::from(x.producer.wrapping_sub(x.consumer) & x.mask))
            .sum()
    }

    /// Walks every ring, at most `budget` entries in all, and returns what was counted.
    pub fn scan_delta<M: GuestMemory + ?Sized>(&mut self, mem: &M, budget: u32) -> Counters {
        let before = self.total;
        let n = self.rings.len();
        let mut left = budget;
        for j in 0..n {
            let k = (self.next + j) % n;
            left -= self.scan_ring(k, mem, left);
            if left == 0 {
                self.next = k;
                break;
            }
        }
        self.walked = budget - left;
        let delta = self.total - before;
        self.sample(delta.wqes);
        delta
    }

    /// One sample of the send queues' outstanding work (as each was last seen). Requests
    /// passed over in a lap were posted too: their number is known, their bytes are not.
    fn sample(&mut self, posted: u64) {
        let out: u64 = self.rings.iter().map(|h| u64::from(h.outstanding)).sum();
        self.queue += Queueing {
            samples: 1,
            outstanding: out,
            posted: posted.saturating_add(std::mem::take(&mut self.missed)),
        };
    }

    /// The send queues' outstanding work, sampled at every scan (the host's latency evidence).
    pub fn queueing(&self) -> Queueing {
        self.queue
    }

    /// Walks ring `k` up to `left` entries; returns the entries walked.
    fn scan_ring<M: GuestMemory + ?Sized>(&mut self, k: usize, mem: &M, left: u32) -> u32 {
        let Some(x) = self.checked_indices(k, mem) else {
            self.rings[k].outstanding = 0;
            return 0;
        };
        let h = &mut self.rings[k];
        if !h.cur.attached {
            h.cur.index = h.ring.start.unwrap_or(x.consumer) & x.mask;
            h.cur.attached = true;
        }
        let kind = h.ring.kind;
        if kind == RingKind::Sq {
            h.outstanding = x.producer.wrapping_sub(x.consumer) & x.mask;
        }
        if kind == RingKind::Rq {
            h.cur.index = x.consumer & x.mask;
            return 0;
        }
        let n = (x.producer.wrapping_sub(h.cur.index) & x.mask).min(left);
        for j in 0..n {
            let i = self.rings[k].cur.index.wrapping_add(j);
            let ok = match kind {
                RingKind::Sq => self.count_send(k, mem, i),
                _ => self.count_completion(k, mem, i),
            };
            if !ok {
                self.note_anomaly(k);
            }
        }
        let h = &mut self.rings[k];
        h.cur.index = h.cur.index.wrapping_add(n) & x.mask;
        n
    }

    /// The header's indices, or `None` (and one anomaly when it turns bad) when it cannot be
    /// read or disagrees with the registration.
    fn checked_indices<M: GuestMemory + ?Sized>(&mut self, k: usize, mem: &M) -> Option<Indices> {
        let h = &self.rings[k];
        let x = read_indices(&h.ring, mem)
            .filter(|x| x.log2 == h.ring.log2_elem && x.mask == h.ring.mask());
        let was_bad = h.cur.bad;
        self.rings[k].cur.bad = x.is_none();
        if x.is_none() && !was_bad {
            self.note_anomaly(k);
            if let Some(n) = self.log_header.hit() {
                let place = self.rings[k].ring.place(k);
                match self.rings[k].cur.last_ssn {
                    Some(ssn) => tracing::warn!(
                        "{place}: its header no longer matches the registration; not walked until it does (last request read #{ssn}) (#{n})"
                    ),
                    None => tracing::warn!(
                        "{place}: its header no longer matches the registration; not walked until it does (#{n})"
                    ),
                }
            }
        }
        x
    }

    fn note_anomaly(&mut self, k: usize) {
        let b = self.rings[k].bucket;
        self.counters[b].anomalies += 1;
        self.total.anomalies += 1;
    }

    fn packets(&self, len: u64) -> u64 {
        len.div_ceil(self.mtu).max(1)
    }

    /// Counts the send WQE in slot `i` of ring `k`; false when it cannot be read or its opcode
    /// is unknown (an anomaly).
    fn count_send<M: GuestMemory + ?Sized>(&mut self, k: usize, mem: &M, i: u32) -> bool {
        let h = &self.rings[k];
        let at = h.ring.slot(i);
        let Some(opcode) = read_u32(&h.ring, mem, at + layout::send_wqe::OPCODE as u64) else {
            return false;
        };
        let mut tail = [0u8; 12];
        if h.ring
            .ring
            .read(mem, at + layout::send_wqe::SSN as u64, &mut tail)
            .is_err()
        {
            return false;
        }
        let ssn = u32_ne(&tail);
        let len = u64::from(u32_ne(
            &tail[layout::send_wqe::DMA_LENGTH - layout::send_wqe::SSN..],
        ));
        self.check_lap(k, ssn);
        let mut c = Counters {
            wqes: 1,
            ..Counters::default()
        };
        match opcode {
            wr_op::RDMA_WRITE
            | wr_op::RDMA_WRITE_WITH_IMM
            | wr_op::SEND
            | wr_op::SEND_WITH_IMM
            | wr_op::SEND_WITH_INV => c.add_tx(len, self.packets(len)),
            wr_op::RDMA_READ => {
                c.add_tx(0, 1);
                c.add_rx_read(len, self.packets(len));
            }
            wr_op::ATOMIC_CMP_AND_SWP | wr_op::ATOMIC_FETCH_AND_ADD => {
                c.add_tx(0, 1);
                c.add_rx_read(0, 1);
            }
            wr_op::LOCAL_INV | wr_op::BIND_MW => {}
            _ => return false,
        }
        let b = self.rings[k].bucket;
        self.counters[b] += c;
        self.total += c;
        true
    }

    /// An `ssn` a whole number of laps past the last one's successor is an overrun.
    fn check_lap(&mut self, k: usize, ssn: u32) {
        let h = &mut self.rings[k];
        let last = h.cur.last_ssn.replace(ssn);
        let Some(last) = last else {
            self.note_first(k, ssn);
            return;
        };
        let gap = ssn.wrapping_sub(last).wrapping_sub(1);
        if gap == 0 || gap % h.ring.slots != 0 || gap >= 1 << 24 {
            return;
        }
        let (b, laps) = (h.bucket, gap / h.ring.slots);
        self.missed = self.missed.saturating_add(u64::from(gap));
        self.counters[b].overruns += 1;
        self.total.overruns += 1;
        if let Some(n) = self.log_lap.hit() {
            let place = self.rings[k].ring.place(k);
            tracing::warn!(
                "{place}: lapped {laps} time(s) between two scans; {gap} requests were not counted (#{n})"
            );
        }
    }

    /// The first request read on ring `k`: the library numbers requests from 0, so a later
    /// number says how many were posted before the host's cursor.
    fn note_first(&mut self, k: usize, ssn: u32) {
        if ssn == 0 {
            return;
        }
        if let Some(n) = self.log_first.hit() {
            let place = self.rings[k].ring.place(k);
            tracing::info!(
                "{place}: counting from request #{ssn}: the {ssn} before it were posted before the host's cursor (#{n})"
            );
        }
    }

    /// The number (`ssn`) of the last request read on each send queue, in the registration's
    /// order (`None` for other rings and before the first read).
    pub fn last_requests(&self) -> impl Iterator<Item = (&RxeRing, Option<u32>)> {
        self.rings.iter().map(|h| (&h.ring, h.cur.last_ssn))
    }

    /// Counts the completion in slot `i` of ring `k`; false when it cannot be read.
    fn count_completion<M: GuestMemory + ?Sized>(&mut self, k: usize, mem: &M, i: u32) -> bool {
        let h = &self.rings[k];
        let mut wc = [0u8; 24];
        let base = h.ring.slot(i) + layout::wc::STATUS as u64;
        if h.ring.ring.read(mem, base, &mut wc).is_err() {
            return false;
        }
        let field = |off: usize| u32_ne(&wc[off - layout::wc::STATUS..]);
        let (status, opcode) = (field(layout::wc::STATUS), field(layout::wc::OPCODE));
        let qpn = field(layout::wc::QP_NUM);
        let mut c = Counters {
            completions: 1,
            errors: u64::from(status != 0),
            ..Counters::default()
        };
        if status == 0 && (opcode == wc_op::RECV || opcode == wc_op::RECV_RDMA_WITH_IMM) {
            c.recv_bytes = u64::from(field(layout::wc::BYTE_LEN));
        }
        let b = self.qpns.binary_search(&qpn).unwrap_or(self.qpns.len());
        self.counters[b] += c;
        self.total += c;
        true
    }
}
