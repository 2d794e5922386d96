//! The software HCA: fetches the WQEs guests post (by polling their SQ doorbell records),
//! times their packets on the link model, applies their effect between guests' registered
//! memory, and writes mlx5 CQEs back. Errors become error CQEs and put the QP in error with
//! flushes; nothing a guest writes can make it panic or loop without bound.
//!
//! This file holds the state and one poll's order of work; each step is a file of its own:
//! `fetch` (doorbells and WQEs, hostile-safe), `transmit` (packets on the link), `complete`
//! (retiring work requests with CQEs, RNR retries), `execute` (moving bytes, the responder's
//! receives), `flush` (a QP in error), `due` (when to poll next; stall diagnosis).

mod complete;
mod due;
mod execute;
mod fetch;
mod flush;
mod transmit;

#[cfg(test)]
mod tests;

use crate::link::{Link, LinkConfig, PortId};
use crate::mr::{GuestId, MrTable};
use crate::objects::{Cq, Guest, Qp, QpStats, Wr};
use resex_common::LogLimiter;
use std::collections::{BTreeMap, BTreeSet};

/// An lkey that ends a receive WQE's scatter list (rdma-core's `MLX5_INVALID_LKEY`).
pub const INVALID_LKEY: u32 = 0x100;
/// Receiver-not-ready retries before `RNR_RETRY_EXC` (about 7 x 1 ms, like `rnr_retry = 7`).
pub const RNR_RETRIES: u32 = 7;
/// Delay between RNR retries, ps.
pub const RNR_DELAY_PS: u64 = 1_000_000_000;
/// How long a request to a vanished remote QP is retried before it fails (7 retries of 1 ms).
pub const TRANSPORT_RETRY_PS: u64 = 7_000_000_000;
/// WQEs fetched per QP per poll (bounded work per tick).
pub const FETCH_BUDGET: usize = 256;
/// Packets scheduled per poll across the link (bounded work per tick).
pub const PACKET_BUDGET: usize = 1 << 16;

/// The HCA's state (behind the `SoftHca` lock).
#[derive(Debug)]
pub struct HcaState {
    pub(crate) link: Link,
    pub(crate) guests: BTreeMap<GuestId, Guest>,
    pub(crate) mrs: MrTable,
    pub(crate) cqs: BTreeMap<u32, Cq>,
    pub(crate) qps: BTreeMap<u32, Qp>,
    pub(crate) next_guest: u32,
    pub(crate) next_cqn: u32,
    pub(crate) next_qpn: u32,
    /// READ responses to put on the wire: (ready ps, qpn).
    resp_pending: BTreeSet<(u64, u32)>,
    limiter: LogLimiter,
    /// Work in flight (a caller may sleep when there is none).
    pub(crate) busy: bool,
    /// Reused by every poll.
    scratch_qpns: Vec<u32>,
    /// Doorbell hints (the lab): fetch only QPs whose doorbell was reported, and complete only
    /// QPs with work in flight. A real device learns of doorbells by MMIO; we cannot trap the
    /// guest's doorbell record, so by default every QP's record is polled.
    pub(crate) hints: bool,
    /// QPs whose doorbell was reported since the last poll (hint mode).
    pub(crate) dirty: BTreeSet<u32>,
    /// QPs with work requests in flight (hint mode).
    active: BTreeSet<u32>,
    /// QPs that retired work requests in the polls since the caller last took them (hint mode).
    pub(crate) retired: Vec<u32>,
    /// A polling thread that waits on doorbells is running: guests may ask for one.
    pub(crate) waits: bool,
    /// Doorbells handed out since the thread last took them.
    pub(crate) new_bells: Vec<(GuestId, std::os::unix::net::UnixStream)>,
}

/// How a requester's WQE failed, for its error CQE.
type Syndrome = u8;

impl HcaState {
    pub(crate) fn new(link: LinkConfig, ports: u16) -> Self {
        Self {
            link: Link::new(link, ports),
            guests: BTreeMap::new(),
            mrs: MrTable::default(),
            cqs: BTreeMap::new(),
            qps: BTreeMap::new(),
            next_guest: 0,
            next_cqn: 0,
            next_qpn: 0xff,
            resp_pending: BTreeSet::new(),
            limiter: LogLimiter::default(),
            busy: false,
            scratch_qpns: Vec::new(),
            hints: false,
            dirty: BTreeSet::new(),
            active: BTreeSet::new(),
            retired: Vec::new(),
            waits: false,
            new_bells: Vec::new(),
        }
    }

    /// Stats of one QP.
    pub fn stats(&self, qpn: u32) -> Option<QpStats> {
        self.qps.get(&qpn).map(|q| q.stats)
    }

    fn warn(&mut self, qpn: u32, what: &str) {
        if let Some(n) = self.limiter.hit() {
            tracing::warn!(qpn, occurrences = n, "softhca: {what}");
        }
    }

    /// Like [`Self::warn`] (rate-limited), for what is normal but worth a line at info level.
    fn note(&mut self, qpn: u32, what: &str) {
        if let Some(n) = self.limiter.hit() {
            tracing::info!(qpn, occurrences = n, "softhca: {what}");
        }
    }

    /// One step, all up to `now_ns`: transmit what was queued, fetch, transmit, complete.
    pub fn poll(&mut self, now_ns: u64) {
        let now = now_ns.saturating_mul(1000);
        // What was queued goes on the wire up to `now` first. Fetching first would let this
        // poll's new work requests (ready at `now`) take turns from the last packet's end, in
        // the past: picked there, one holds the port idle until it is ready (up to the time
        // between polls, per new message) while another flow has packets ready.
        self.transmit(now);
        // Every QP, in QP-number order; with doorbell hints only those rung since the last poll
        // (fetch) and those with work in flight (complete): a QP outside both would fetch
        // nothing and complete nothing, so the result is the same.
        let mut qpns = std::mem::take(&mut self.scratch_qpns);
        qpns.clear();
        if self.hints {
            qpns.extend(std::mem::take(&mut self.dirty));
        } else {
            qpns.extend(self.qps.keys().copied());
        }
        for &qpn in &qpns {
            self.fetch(qpn, now);
            if self.hints && self.qps.get(&qpn).is_some_and(|q| !q.wrs.is_empty()) {
                self.active.insert(qpn);
            }
        }
        self.activate_responses(now);
        self.transmit(now);
        if self.hints {
            qpns.clear();
            qpns.extend(self.active.iter().copied());
        }
        for &qpn in &qpns {
            let before = if self.hints {
                self.qps.get(&qpn).map_or(0, |q| q.wrs.len())
            } else {
                0
            };
            self.complete(qpn, now);
            if self.hints {
                let after = self.qps.get(&qpn).map_or(0, |q| q.wrs.len());
                if after < before {
                    self.retired.push(qpn);
                }
                if after == 0 {
                    self.active.remove(&qpn);
                }
            }
        }
        self.scratch_qpns = qpns;
        self.busy = if self.hints {
            !self.active.is_empty()
        } else {
            self.qps.values().any(|q| !q.wrs.is_empty())
        };
    }

    /// Whether every guest with a QP rings its doorbell (a guest without QPs posts nothing).
    pub(crate) fn all_ring(&self) -> bool {
        self.qps
            .values()
            .all(|q| self.guests.get(&q.guest).is_none_or(|g| g.rings))
    }

    fn port_of(&self, qpn: u32) -> Option<PortId> {
        let q = self.qps.get(&qpn)?;
        self.guests.get(&q.guest).map(|g| g.port)
    }

    fn front_mut(&mut self, qpn: u32) -> Option<&mut Wr> {
        self.qps.get_mut(&qpn).and_then(|q| q.wrs.front_mut())
    }
}
