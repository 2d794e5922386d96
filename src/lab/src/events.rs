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
        let (dt, iv) = (self.cfg.dt_ns, self.cfg.interval_ns);
        let grid = |t: u64| t.div_ceil(dt) * dt;
        self.hca.set_doorbell_hints(true);
        let by_qpn: HashMap<u32, usize> = self
            .guests
            .iter()
            .enumerate()
            .map(|(i, g)| (g.server.qpn(), i))
            .collect();
        let n = self.guests.len();
        // Per guest: accounted through this time, and its next own event (MAX: none).
        let mut synced = vec![0u64; n];
        let mut wake = vec![u64::MAX; n];
        let mut heap: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
        for (i, g) in self.guests.iter().enumerate() {
            if let Some(t) = g.server.next_event(0, dt) {
                wake[i] = t;
                heap.push(Reverse((t, i)));
            }
        }
        let mut due: Vec<usize> = Vec::new();
        let mut retired: Vec<u32> = Vec::new();
        for k in 0..intervals {
            let end = (k + 1) * iv;
            let mut now = k * iv + dt;
            loop {
                self.hca.poll(now);
                due.clear();
                retired.clear();
                self.hca.take_retired(&mut retired);
                due.extend(retired.iter().filter_map(|q| by_qpn.get(q).copied()));
                while let Some(&Reverse((t, i))) = heap.peek() {
                    if t > now {
                        break;
                    }
                    heap.pop();
                    if wake[i] == t {
                        due.push(i);
                    }
                }
                due.sort_unstable();
                due.dedup();
                let mut posted = false;
                for &i in &due {
                    let g = &mut self.guests[i];
                    let from = synced[i];
                    g.server
                        .skip(from, (now - dt).saturating_sub(from) / dt, dt);
                    g.server.step(now, dt).map_err(|source| LabError::Shim {
                        guest: g.name.clone(),
                        source,
                    })?;
                    synced[i] = now;
                    if g.server.posted {
                        posted = true;
                        self.hca.doorbell(g.server.qpn());
                    }
                    wake[i] = g.server.next_event(now, dt).unwrap_or(u64::MAX);
                    if wake[i] != u64::MAX {
                        heap.push(Reverse((wake[i], i)));
                    }
                }
                self.apply_caps(now, |i, g| {
                    let from = synced[i];
                    g.server.skip(from, (now - from) / dt, dt);
                    synced[i] = now;
                    // The next step, whatever the guest's own events: a cap can unpark a
                    // vCPU whose completion arrived while it was parked.
                    wake[i] = now + dt;
                    heap.push(Reverse((wake[i], i)));
                });
                if now >= end {
                    break;
                }
                let mut next = end;
                if posted {
                    next = now + dt;
                } else {
                    while let Some(&Reverse((t, i))) = heap.peek() {
                        if wake[i] == t {
                            next = next.min(t);
                            break;
                        }
                        heap.pop();
                    }
                    if let Some(d) = self.hca.next_due_ns() {
                        next = next.min(grid(d));
                    }
                    if let Some(c) = self.driver.next_action_ns() {
                        next = next.min(grid(c));
                    }
                }
                now = next.max(now + dt);
            }
            for (i, g) in self.guests.iter_mut().enumerate() {
                let from = synced[i];
                g.server.skip(from, (end - from) / dt, dt);
                synced[i] = end;
            }
            self.interval(k + 1, end)?;
            if (k + 1).is_multiple_of(tick) {
                progress(k + 1, intervals);
            }
        }
        Ok(())
    }
}
