//! [`VmRings`]: one VM's guest rings as a host holds them: the monitors its registrations
//! created, attachment (to fresh rings or to rings already live), the budgeted scan, and the
//! prefetch stages [`crate::batch::scan_all`] runs a few VMs ahead. A host (`resex_core`) calls
//! only this; guest bytes are parsed in this crate alone.
//!
//! Registrations arrive again whenever the guest creates queue pairs. QPs already monitored
//! keep their cursors; new QPs get a monitor of their own, starting from the indices the guest
//! gave, so nothing is counted twice. A new QP that shares a CQ with a monitored one cannot be
//! split off: then every ring is re-attached from its present position (counts in flight at
//! that moment are lost, never doubled) and the event is logged.
//!
//! Attaching to rings that are already live (a guest that ran before this host process started,
//! or re-registered after a restart with the indices its rings were created with) starts at the
//! present position when the registration's start indices can no longer be counted from: when
//! a CQ's consumer index is a whole ring or more past its start, or an SQ's producer counter
//! more than a ring past its start. Counting then starts now (one INFO line), with no anomaly:
//! the reused slots behind the present position are not the guest's fault. Otherwise (a fresh
//! ring, or one less than a lap along) every completion since the start is counted exactly.
//!
//! The present position is exact too: each CQ cursor at the guest's consumer index, each SQ
//! cursor just after the WQE named by the last requester CQE the guest consumed for that QP
//! (looked up at most one ring back; its slot must still hold it), so the unsignalled WQEs of
//! the next batch are counted. Only a QP whose last CQE is gone resynchronises on its next one
//! (losing the unsignalled WQEs before it, never inventing any).

use crate::cq::{ahead, peek_at, INDEX_MASK};
use crate::queueing::Queueing;
use crate::registry::{
    validate, CqLayout, Layout, Limits, MailboxLayout, RegistrationError, SqLayout,
};
use crate::rxe::RxeMonitor;
use crate::{Counters, VmMonitor};
use resex_common::LogLimiter;
use resex_guestmem::GuestMemory;
use resex_mlx5::consts::cqe_op;
use resex_mlx5::dbrec::{read_cq_ci, read_sq_pi};
use resex_mlx5::wqe::CtrlSeg;
use resex_mlx5::SEND_WQE_BB;
use resex_proto::{QpRegistration, Registration, RingKind};
use smallvec::SmallVec;
use std::collections::{HashMap, HashSet};

/// One monitor and its attachment. In declaration order (`repr(C)`): the flag a tick checks
/// just before the monitor's own first line.
#[repr(C)]
struct Watch {
    /// Not scanned yet: decide at the first scan whether to count from the registration's
    /// start indices or from the present position.
    fresh: bool,
    /// Start at the present position whatever the indices (a re-attachment).
    from_now: bool,
    mon: VmMonitor,
}

/// A queue pair counted from the present position instead of from its start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LateQp {
    /// Its QP number.
    pub qpn: u32,
    /// Completions its send CQ had delivered before counting began (the CQ's consumer index
    /// past the start the registration gave; a CQ shared by several QPs counts theirs too), if
    /// the guest's doorbell record could be read.
    pub missed_completions: Option<u64>,
}

/// One VM's rings (see the module's documentation). In declaration order (`repr(C)`): what a
/// tick reads (the first watch's monitor inline); what only attaching, totals and reports read
/// is behind one pointer, so that a host's array of VMs stays dense.
#[derive(Default)]
#[repr(C)]
pub struct VmRings {
    /// The soft-RoCE queues, when the VM registered any.
    rxe: Option<Box<RxeMonitor>>,
    /// Behind a pointer: a tick reads only whether there is one, and drains it when there is.
    mailbox: Option<Box<MailboxLayout>>,
    /// One watch per registration that brought new QPs; the first inline (most VMs have
    /// one), so a tick reaches the monitor without following a pointer. Last of what a tick
    /// reads: the monitor's hot lines lead it, its totals and layout trail.
    watches: SmallVec<[Watch; 1]>,
    cold: Box<Cold>,
}

/// What a tick does not read.
#[derive(Default)]
struct Cold {
    /// The VM's name, in log lines.
    name: String,
    known: HashMap<u32, QpRegistration>,
    /// The doorbell records of every CQ the watches monitor.
    cq_dbrecs: HashSet<u64>,
    /// What the monitors dropped at a re-attachment had counted.
    retired: Counters,
    /// What the soft-RoCE monitors dropped at a re-registration had sampled.
    retired_queue: Queueing,
    reattached: u64,
    attached_live: u64,
    late: Vec<LateQp>,
    /// Lines about send queues unregistered (a guest's processes come and go).
    log_dropped: LogLimiter,
}

impl std::fmt::Debug for VmRings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "VmRings({}: {} QPs)",
            self.cold.name,
            self.cold.known.len()
        )
    }
}

/// At most this many late QPs are remembered per VM (a guest registers as many QPs as its
/// limits allow; the count of monitors is in `attached_live`).
pub const MAX_LATE: usize = 64;

/// The first `n` QPs of `layout`, each with what its send CQ delivered before now (see
/// [`LateQp`]).
fn late_qps<M: GuestMemory + ?Sized>(layout: &Layout, mem: &M, n: usize) -> Vec<LateQp> {
    let missed = |cq: &CqLayout| {
        read_cq_ci(mem, cq.dbrec)
            .ok()
            .map(|ci| u64::from(ci.wrapping_sub(cq.start) & INDEX_MASK))
    };
    layout
        .qps
        .iter()
        .take(n)
        .map(|q| LateQp {
            qpn: q.qpn,
            missed_completions: layout.cqs.get(q.send_cq).and_then(missed),
        })
        .collect()
}

fn cq_dbrecs(q: &QpRegistration) -> impl Iterator<Item = u64> + '_ {
    std::iter::once(q.send_cq.dbrec).chain(q.recv_cq.as_ref().map(|c| c.dbrec))
}

/// True when the rings of `layout` are too far past their start indices to count from them.
fn past_start<M: GuestMemory + ?Sized>(layout: &Layout, mem: &M) -> bool {
    let cq_lapped = layout.cqs.iter().any(|cq| {
        read_cq_ci(mem, cq.dbrec).is_ok_and(|ci| {
            ahead(ci & INDEX_MASK, cq.start & INDEX_MASK).is_some_and(|d| d >= cq.cqe_cnt())
        })
    });
    let sq_lapped = layout.qps.iter().any(|q| {
        read_sq_pi(mem, q.sq.dbrec).is_ok_and(|pi| {
            // The producer counter is 16 bits of the basic-block counter.
            #[allow(clippy::cast_possible_truncation)]
            let start = q.sq.start as u16;
            u32::from(pi.wrapping_sub(start)) > q.sq.wqe_cnt
        })
    });
    cq_lapped || sq_lapped
}

/// The last requester CQE for `qpn` before index `ci` (at most a ring back): its WQE index.
fn last_request<M: GuestMemory + ?Sized>(mem: &M, cq: &CqLayout, ci: u32, qpn: u32) -> Option<u16> {
    for back in 1..=cq.cqe_cnt() {
        let j = ci.wrapping_sub(back) & INDEX_MASK;
        match peek_at(mem, cq, j) {
            Ok(Some(t)) if t.qpn == qpn && t.opcode == cqe_op::REQ => return Some(t.wqe_counter),
            Ok(Some(_)) => {}
            // Overwritten by a newer lap, never written, or unreadable: nothing older is valid.
            Ok(None) | Err(_) => return None,
        }
    }
    None
}

/// The basic blocks of the WQE at index `w` of `sq`, if its slot still holds it.
fn wqe_bbs<M: GuestMemory + ?Sized>(mem: &M, sq: &SqLayout, w: u16, qpn: u32) -> Option<u32> {
    let off = u64::from(u32::from(w) & (sq.wqe_cnt - 1)) * SEND_WQE_BB;
    let mut b = [0u8; 16];
    sq.ring.read(mem, off, &mut b).ok()?;
    let c = CtrlSeg::decode(&b);
    (c.wqe_index == w && c.qpn == qpn && c.ds > 0).then(|| c.bbs())
}

/// Starts `mon` at the guest's present position (see the module's documentation).
fn attach_now<M: GuestMemory + ?Sized>(mon: &mut VmMonitor, mem: &M) {
    let layout = mon.layout();
    let mut st = mon.state();
    for (c, cq) in st.cqs.iter_mut().zip(&layout.cqs) {
        if let Ok(ci) = read_cq_ci(mem, cq.dbrec) {
            c.index = ci & INDEX_MASK;
        }
    }
    for (s, q) in st.qps.iter_mut().zip(&layout.qps) {
        let ci = st.cqs[q.send_cq].index;
        let at = last_request(mem, &layout.cqs[q.send_cq], ci, q.qpn)
            .and_then(|w| wqe_bbs(mem, &q.sq, w, q.qpn).map(|b| (w, b)));
        s.sq.walk = None;
        match at {
            Some((w, bbs)) => {
                s.sq.p = u32::from(w).wrapping_add(bbs);
                s.sq.synced = true;
                s.sq.after_overrun = false;
            }
            None => {
                s.sq.synced = false;
                s.sq.after_overrun = true;
            }
        }
    }
    // The state is the monitor's own, so it matches.
    let _ = mon.restore(&st);
}

impl VmRings {
    /// No ring yet; `name` names the VM in log lines.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            cold: Box::new(Cold {
                name: name.into(),
                ..Cold::default()
            }),
            ..Self::default()
        }
    }

    /// Queue pairs monitored (mlx5 QPs, and the QPs the soft-RoCE rings name).
    pub fn qps(&self) -> usize {
        self.cold.known.len() + self.rxe.as_ref().map_or(0, |r| r.qps())
    }

    /// The latency mailbox, once registered.
    pub fn mailbox(&self) -> Option<&MailboxLayout> {
        self.mailbox.as_deref()
    }

    /// Re-attachments that may have lost counts (a new QP on a CQ already monitored).
    pub fn reattached(&self) -> u64 {
        self.cold.reattached
    }

    /// Monitors started at the rings' present position because they were already live.
    pub fn attached_live(&self) -> u64 {
        self.cold.attached_live
    }

    /// The QPs of those monitors (at most [`MAX_LATE`], the first ones).
    pub fn late(&self) -> &[LateQp] {
        &self.cold.late
    }

    /// The soft-RoCE queues' monitor, when the VM registered any.
    pub fn rxe(&self) -> Option<&RxeMonitor> {
        self.rxe.as_deref()
    }

    /// Replaces the soft-RoCE queues with those of the latest registration: queues watched
    /// before keep their cursors, queues no longer registered (their process exited) are
    /// dropped, their counts kept in the total.
    fn install_rxe(&mut self, full: &Layout) {
        let old = self.rxe.take();
        let gone = old.as_ref().map_or(0, |o| o.rings().count());
        if let Some(o) = &old {
            self.log_dropped_sends(o, full);
            self.cold.retired += o.total();
            self.cold.retired_queue += o.queueing();
        }
        if full.rxe.is_empty() {
            if gone > 0 {
                tracing::info!("{}: {gone} soft-RoCE queue(s) unregistered", self.cold.name);
            }
            return;
        }
        let mut mon = RxeMonitor::new(full.rxe.clone(), full.path_mtu);
        let kept = old.as_ref().map_or(0, |o| mon.adopt(o));
        // The adopted cursors' counts are in `retired`: the new monitor counts on from zero.
        let now = full.rxe.len();
        if kept != now || gone != now {
            tracing::info!(
                "{}: soft-RoCE queues: {now} registered ({} new, {} gone)",
                self.cold.name,
                now - kept,
                gone - kept
            );
        }
        self.rxe = Some(Box::new(mon));
    }

    /// One line per send queue `full` no longer registers (rate-limited): the last request
    /// read on it (a request posted after the last scan and freed with its process cannot be).
    fn log_dropped_sends(&mut self, old: &RxeMonitor, full: &Layout) {
        let gone = old
            .last_requests()
            .filter(|(r, _)| r.kind == RingKind::Sq && !full.rxe.iter().any(|n| n.same_queue(r)));
        for (r, last) in gone {
            let Some(n) = self.cold.log_dropped.hit() else {
                continue;
            };
            let qp = r
                .qpn
                .map_or_else(|| "a qp".to_string(), |q| format!("qp {q}"));
            let what = match last {
                Some(ssn) => format!("the last request read on it was #{ssn}"),
                None => "no request was read on it".to_string(),
            };
            tracing::info!(
                "{}: the send queue of {qp} unregistered; {what} (#{n})",
                self.cold.name
            );
        }
    }

    /// Installs a registration with its validation against the VM's RAM (`full`). Only the
    /// QPs new to this VM are validated again, as a document of their own, to give them a
    /// monitor.
    pub fn install(
        &mut self,
        doc: &Registration,
        full: Layout,
        ram_size: u64,
        limits: &Limits,
    ) -> Result<(), RegistrationError> {
        self.install_rxe(&full);
        let new: Vec<&QpRegistration> = doc
            .qps
            .iter()
            .filter(|q| self.cold.known.get(&q.qpn) != Some(*q))
            .collect();
        if new.is_empty() {
            self.mailbox = full.mailbox.map(Box::new);
            return Ok(());
        }
        let watched = &self.cold.cq_dbrecs;
        let clash = new.iter().any(|q| {
            self.cold.known.contains_key(&q.qpn) || cq_dbrecs(q).any(|d| watched.contains(&d))
        });
        if clash {
            for w in self.watches.drain(..) {
                self.cold.retired += w.mon.total();
            }
            self.mailbox = full.mailbox.clone().map(Box::new);
            let mon = VmMonitor::new(full);
            self.cold.reattached += 1;
            tracing::info!(
                "{}: rings re-attached from their present position",
                self.cold.name
            );
            self.cold.cq_dbrecs = doc.qps.iter().flat_map(cq_dbrecs).collect();
            self.watches.push(Watch {
                mon,
                fresh: true,
                from_now: true,
            });
            self.cold.known = doc.qps.iter().map(|q| (q.qpn, q.clone())).collect();
            return Ok(());
        }
        let sub = Registration {
            rings: Vec::new(),
            version: doc.version,
            vm: None,
            path_mtu: doc.path_mtu,
            qps: new.iter().map(|q| (*q).clone()).collect(),
            mailbox: None,
        };
        let layout = validate(&sub, ram_size, limits)?;
        self.mailbox = full.mailbox.map(Box::new);
        self.cold
            .cq_dbrecs
            .extend(sub.qps.iter().flat_map(cq_dbrecs));
        self.watches.push(Watch {
            mon: VmMonitor::new(layout),
            fresh: true,
            from_now: false,
        });
        for q in sub.qps {
            self.cold.known.insert(q.qpn, q);
        }
        Ok(())
    }

    /// Brings in each monitor's own state (see [`VmMonitor::prefetch_state`]).
    pub fn prefetch_state(&self) {
        for w in &self.watches {
            w.mon.prefetch_state();
        }
    }

    /// Brings in what the next [`Self::scan`] reads first (see [`VmMonitor::prefetch`]).
    pub fn prefetch<M: GuestMemory + ?Sized>(&self, mem: &M) {
        for w in &self.watches {
            w.mon.prefetch(mem);
        }
    }

    /// Scans every monitor (the budget split between them, at least 64 entries each) and
    /// returns what happened since the last scan. A monitor's first scan attaches it: from the
    /// registration's start indices, or from the present position when the rings are a lap or
    /// more past them.
    #[inline]
    pub fn scan<M: GuestMemory + ?Sized>(&mut self, mem: &M, budget: u32) -> Counters {
        self.scan_moved(mem, budget).unwrap_or_default()
    }

    /// [`Self::scan`], or `None` when nothing was counted (an idle VM's scan then reads and
    /// writes no counter).
    #[inline]
    pub fn scan_moved<M: GuestMemory + ?Sized>(
        &mut self,
        mem: &M,
        budget: u32,
    ) -> Option<Counters> {
        // Most VMs, most ticks: one monitor, attached.
        if let ([w], None) = (self.watches.as_mut_slice(), &self.rxe) {
            if !w.fresh {
                return w.mon.scan_moved(mem, budget.max(64));
            }
        }
        Some(self.scan_each(mem, budget)).filter(|d| !d.is_zero())
    }

    #[inline(never)]
    fn scan_each<M: GuestMemory + ?Sized>(&mut self, mem: &M, budget: u32) -> Counters {
        let monitors = self.watches.len() + usize::from(self.rxe.is_some());
        let n = u32::try_from(monitors).unwrap_or(u32::MAX).max(1);
        let each = (budget / n).max(64);
        let mut delta = Counters::default();
        if let Some(r) = &mut self.rxe {
            delta += r.scan_delta(mem, each);
        }
        for w in &mut self.watches {
            if w.fresh {
                w.fresh = false;
                if w.from_now {
                    attach_now(&mut w.mon, mem);
                } else if past_start(w.mon.layout(), mem) {
                    let cold = &mut *self.cold;
                    let room = MAX_LATE.saturating_sub(cold.late.len());
                    cold.late.extend(late_qps(w.mon.layout(), mem, room));
                    attach_now(&mut w.mon, mem);
                    cold.attached_live += 1;
                    tracing::info!(
                        "{}: attached to rings already in use: counting starts now",
                        cold.name
                    );
                }
            }
            delta += w.mon.scan_delta(mem, each);
        }
        delta
    }

    /// The soft-RoCE send queues' outstanding work, sampled at every scan so far (the host's
    /// own latency evidence: see [`Queueing`]).
    pub fn queueing(&self) -> Queueing {
        let mut q = self.cold.retired_queue;
        if let Some(r) = &self.rxe {
            q += r.queueing();
        }
        q
    }

    /// Everything counted so far.
    pub fn total(&self) -> Counters {
        let mut total = self.cold.retired;
        for w in &self.watches {
            total += w.mon.total();
        }
        if let Some(r) = &self.rxe {
            total += r.total();
        }
        total
    }
}
