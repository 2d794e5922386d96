//! Per-VM time series for the detail pane: MTU/s, latency p99, cap and balance over the last
//! minutes, one point per snapshot, bounded.

use crate::Snapshot;
use std::collections::{BTreeMap, VecDeque};

/// One point of a VM's history.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Point {
    /// Seconds since the daemon started.
    pub t: f64,
    /// MTU/s.
    pub mtus: f64,
    /// Reported latency p99, us (None: no report).
    pub p99_us: Option<f64>,
    /// Cap in force, % (None: uncapped).
    pub cap: Option<f64>,
    /// Resos balance.
    pub balance: Option<f64>,
}

/// Histories of every VM seen, each at most `cap` points.
#[derive(Debug, Clone)]
pub struct History {
    cap: usize,
    vms: BTreeMap<String, VecDeque<Point>>,
}

impl History {
    /// Histories of at most `points` points each.
    pub fn new(points: usize) -> Self {
        Self {
            cap: points.max(2),
            vms: BTreeMap::new(),
        }
    }

    /// Adds a snapshot's point for each of its VMs; forgets VMs gone from it.
    pub fn push(&mut self, s: &Snapshot) {
        #[allow(clippy::cast_precision_loss)]
        let t = s.uptime_ms as f64 / 1000.0;
        self.vms
            .retain(|name, _| s.vms.iter().any(|v| &v.name == name));
        for v in &s.vms {
            let h = self.vms.entry(v.name.clone()).or_default();
            if h.back().is_some_and(|p| p.t >= t) {
                continue; // the same snapshot again
            }
            if h.len() == self.cap {
                h.pop_front();
            }
            h.push_back(Point {
                t,
                mtus: v.mtus_per_s,
                p99_us: v.lat_p99_us,
                cap: v.cap_pct,
                balance: v.balance,
            });
        }
    }

    /// A VM's points, oldest first.
    pub fn of(&self, vm: &str) -> Option<&VecDeque<Point>> {
        self.vms.get(vm)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::VmSnap;

    fn snap(t: u64, names: &[&str]) -> Snapshot {
        Snapshot {
            uptime_ms: t,
            vms: names
                .iter()
                .map(|n| VmSnap {
                    name: (*n).into(),
                    mtus_per_s: t as f64,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn bounded_deduplicated_and_forgets_departed_vms() {
        let mut h = History::new(3);
        for t in [1000, 2000, 2000, 3000, 4000] {
            h.push(&snap(t, &["a", "b"]));
        }
        let a: Vec<f64> = h.of("a").unwrap().iter().map(|p| p.t).collect();
        assert_eq!(a, vec![2.0, 3.0, 4.0]);
        h.push(&snap(5000, &["a"]));
        assert!(h.of("b").is_none());
    }
}
