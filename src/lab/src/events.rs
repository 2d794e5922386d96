//! Moving virtual time. [`LabHost::run_events`] is the event-driven loop: only the steps at
//! which something can happen are visited, and at each only the guests with something to do
//! step (the others are accounted in bulk when they next step or at the interval's end). A
//! guest steps at its own next event (a start, an arrival, computing done, its vCPU budget
//! spent or renewed), when the HCA retired work on its QP, or when a cap is applied to it.
//! The HCA is told of every doorbell, so it only looks at QPs with work.
//! [`LabHost::run_stepped`] steps every guest every step: the reference the event loop is held
//! to (a test compares their results byte for byte).

use crate::host::{LabError, LabHost};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

impl LabHost {
    /// Every guest, every step.
    pub(crate) fn run_stepped(
        &mut self,
        intervals: u64,
        tick: u64,
        progress: &mut impl FnMut(u64, u64),
    ) -> Result<(), LabError> {
        let (dt, iv) = (self.cfg.dt_ns, self.cfg.interval_ns);
        let steps_per_interval = iv / dt;
        for k in 0..intervals {
            for s in 0..steps_per_interval {
                let now = k * iv + (s + 1) * dt;
                self.hca.poll(now);
                for g in &mut self.guests {
                    g.server.step(now, dt).map_err(|source| LabError::Shim {
                        guest: g.name.clone(),
                        source,
                    })?;
                }
                self.apply_caps(now, |_, _| {});
            }
            self.interval(k + 1, (k + 1) * iv)?;
            if (k + 1).is_multiple_of(tick) {
                progress(k + 1, intervals);
            }
        }
        Ok(())
    }

    /// The event-driven loop (see the module's documentation).
    pub(crate) fn run_events(
        &mut self,
        intervals: u64,
        tick: u64,
        progress: &mut impl FnMut(u64, u64),
    ) -> Result<(), LabError> {
        let mut ev = Events::new(self);
        while ev.k < intervals {
            let k = ev.k;
            self.advance_events(&mut ev, (k + 1) * self.cfg.interval_ns)?;
            if ev.k > k && ev.k.is_multiple_of(tick) {
                progress(ev.k, intervals);
            }
        }
        Ok(())
    }

    /// Visits every step of the event loop at or before `until_ns` (interval ends
    /// included): the loop of [`Self::run_events`], resumable at any step.
    pub(crate) fn advance_events(
        &mut self,
        ev: &mut Events,
        until_ns: u64,
    ) -> Result<(), LabError> {
        let (dt, iv) = (self.cfg.dt_ns, self.cfg.interval_ns);
        let grid = |t: u64| t.div_ceil(dt) * dt;
        while ev.next <= until_ns {
            let now = ev.next;
            let end = (ev.k + 1) * iv;
            self.hca.poll(now);
            ev.due.clear();
            ev.retired.clear();
            self.hca.take_retired(&mut ev.retired);
            ev.due
                .extend(ev.retired.iter().filter_map(|q| ev.by_qpn.get(q).copied()));
            while let Some(&Reverse((t, i))) = ev.heap.peek() {
                if t > now {
                    break;
                }
                ev.heap.pop();
                if ev.wake[i] == t {
                    ev.due.push(i);
                }
            }
            ev.due.sort_unstable();
            ev.due.dedup();
            let mut posted = false;
            for &i in &ev.due {
                let g = &mut self.guests[i];
                let from = ev.synced[i];
                g.server
                    .skip(from, (now - dt).saturating_sub(from) / dt, dt);
                g.server.step(now, dt).map_err(|source| LabError::Shim {
                    guest: g.name.clone(),
                    source,
                })?;
                ev.synced[i] = now;
                if g.server.posted {
                    posted = true;
                    self.hca.doorbell(g.server.qpn());
                }
                ev.wake[i] = g.server.next_event(now, dt).unwrap_or(u64::MAX);
                if ev.wake[i] != u64::MAX {
                    ev.heap.push(Reverse((ev.wake[i], i)));
                }
            }
            let (synced, wake, heap) = (&mut ev.synced, &mut ev.wake, &mut ev.heap);
            self.apply_caps(now, |i, g| {
                let from = synced[i];
                g.server.skip(from, (now - from) / dt, dt);
                synced[i] = now;
                // The next step, whatever the guest's own events: a cap can unpark a
                // vCPU whose completion arrived while it was parked.
                wake[i] = now + dt;
                heap.push(Reverse((wake[i], i)));
            });
            ev.last = now;
            if now >= end {
                for (i, g) in self.guests.iter_mut().enumerate() {
                    let from = ev.synced[i];
                    g.server.skip(from, (end - from) / dt, dt);
                    ev.synced[i] = end;
                }
                ev.k += 1;
                self.interval(ev.k, end)?;
                ev.next = end + dt;
                continue;
            }
            let mut next = end;
            if posted {
                next = now + dt;
            } else {
                while let Some(&Reverse((t, i))) = ev.heap.peek() {
                    if ev.wake[i] == t {
                        next = next.min(t);
                        break;
                    }
                    ev.heap.pop();
                }
                if let Some(d) = self.hca.next_due_ns() {
                    next = next.min(grid(d));
                }
                if let Some(c) = self.driver.next_action_ns() {
                    next = next.min(grid(c));
                }
            }
            ev.next = next.max(now + dt);
        }
        Ok(())
    }
}

/// Where the event loop is: what [`LabHost::advance_events`] resumes from.
#[derive(Debug)]
pub(crate) struct Events {
    by_qpn: HashMap<u32, usize>,
    /// Per guest: accounted through this time.
    pub(crate) synced: Vec<u64>,
    /// Per guest: its next own event (MAX: none).
    pub(crate) wake: Vec<u64>,
    pub(crate) heap: BinaryHeap<Reverse<(u64, usize)>>,
    due: Vec<usize>,
    retired: Vec<u32>,
    /// Intervals done.
    pub(crate) k: u64,
    /// The next step to visit.
    pub(crate) next: u64,
    /// The last step visited (0: none yet).
    pub(crate) last: u64,
}

impl Events {
    /// The loop's start: every guest's first event.
    pub(crate) fn new(host: &LabHost) -> Self {
        let dt = host.cfg.dt_ns;
        host.hca.set_doorbell_hints(true);
        let n = host.guests.len();
        let mut ev = Self {
            by_qpn: host
                .guests
                .iter()
                .enumerate()
                .map(|(i, g)| (g.server.qpn(), i))
                .collect(),
            synced: vec![0; n],
            wake: vec![u64::MAX; n],
            heap: BinaryHeap::new(),
            due: Vec::new(),
            retired: Vec::new(),
            k: 0,
            next: dt,
            last: 0,
        };
        for (i, g) in host.guests.iter().enumerate() {
            if let Some(t) = g.server.next_event(0, dt) {
                ev.wake[i] = t;
                ev.heap.push(Reverse((t, i)));
            }
        }
        ev
    }

    /// Guest `i` has something to do at step `t` (after the last visited step): it is
    /// stepped then, and the loop visits `t`.
    pub(crate) fn wake_at(&mut self, i: usize, t: u64, dt: u64) {
        let t = t.div_ceil(dt).max(1).saturating_mul(dt).max(self.last + dt);
        self.wake[i] = self.wake[i].min(t);
        self.heap.push(Reverse((self.wake[i], i)));
        self.next = self.next.min(t);
    }
}
