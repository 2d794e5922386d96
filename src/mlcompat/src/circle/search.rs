//! Demand profiles on the slotted circle and the search for the rotations with least excess.

use super::{CircleConfig, Job, Search};

/// One job's demand per slot of its own (rounded) period.
#[derive(Debug, Clone)]
pub(super) struct Profile {
    /// Demand (fraction of capacity) in each of the period's slots.
    demand: Vec<f64>,
    /// The slots where the demand is not zero.
    support: Vec<usize>,
}

impl Profile {
    /// `job`'s arcs on `slots` slots: each slot's demand is the job's demand times the part of
    /// the slot its arcs cover (overlapping arcs count once).
    pub fn new(job: &Job, slots: usize) -> Self {
        let n = slots as f64;
        let mut cover = vec![0.0f64; slots];
        for arc in &job.arcs {
            let (a, b) = (arc.start * n, arc.end * n);
            let mut j = a.floor();
            while j < b {
                let part = b.min(j + 1.0) - a.max(j);
                // j < b <= 2n: the index is in [0, 2 slots), folded once.
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let idx = (j as usize) % slots;
                cover[idx] += part.max(0.0);
                j += 1.0;
            }
        }
        let demand: Vec<f64> = cover.iter().map(|&c| c.min(1.0) * job.demand).collect();
        let support = (0..slots).filter(|&i| demand[i] > 0.0).collect();
        Self { demand, support }
    }

    fn slots(&self) -> usize {
        self.demand.len()
    }

    /// Demand-time over the unified circle of `circle` slots, in slots of full link.
    pub fn demand_time(&self, circle: usize) -> f64 {
        let repeats = (circle / self.slots()) as f64;
        self.demand.iter().sum::<f64>() * repeats
    }

    /// Adds this profile, rotated by `shift` slots, into `total` (the unified circle).
    fn add_to(&self, total: &mut [f64], shift: usize, sign: f64) {
        let n = self.slots();
        for &u in &self.support {
            let mut t = (u + shift) % n;
            while t < total.len() {
                total[t] += sign * self.demand[u];
                t += n;
            }
        }
    }

    /// The excess over `base` (others' demand) with this profile added at `shift`, minus the
    /// excess of `base` alone: only the slots this profile touches.
    fn added_excess(&self, base: &[f64], shift: usize) -> f64 {
        let n = self.slots();
        let mut sum = 0.0;
        for &u in &self.support {
            let mut t = (u + shift) % n;
            while t < base.len() {
                sum += (base[t] + self.demand[u] - 1.0).max(0.0) - (base[t] - 1.0).max(0.0);
                t += n;
            }
        }
        sum
    }

    /// The best grid shift given `base`, and its added excess; ties go to the smallest shift.
    fn best_shift(&self, base: &[f64], steps: usize) -> (usize, f64) {
        let n = self.slots();
        let step = n.div_ceil(steps).max(1);
        let mut best = (0, f64::INFINITY);
        for shift in (0..n).step_by(step) {
            let cost = self.added_excess(base, shift);
            if cost < best.1 - EPS {
                best = (shift, cost);
            }
        }
        best
    }
}

/// Improvements smaller than this (slots of full link) are float noise, not improvements.
const EPS: f64 = 1e-9;

/// The excess, in slots of full link, with `profiles` rotated by `shifts` on a circle of
/// `circle` slots.
pub(super) fn excess(profiles: &[Profile], shifts: &[usize], circle: usize) -> f64 {
    let mut total = vec![0.0; circle];
    for (p, &s) in profiles.iter().zip(shifts) {
        p.add_to(&mut total, s, 1.0);
    }
    total.iter().map(|&d| (d - 1.0).max(0.0)).sum()
}

/// What the search found.
pub(super) struct Found {
    pub shifts: Vec<usize>,
    pub excess: f64,
    pub search: Search,
}

/// The rotations with least excess: the job with most demand-time anchored at 0, the others
/// placed greedily in decreasing demand-time, then (three jobs or more) coordinate descent.
pub(super) fn best_rotations(profiles: &[Profile], circle: usize, cfg: &CircleConfig) -> Found {
    let mut order: Vec<usize> = (0..profiles.len()).collect();
    order.sort_by(|&a, &b| {
        let (da, db) = (
            profiles[a].demand_time(circle),
            profiles[b].demand_time(circle),
        );
        db.total_cmp(&da).then(a.cmp(&b))
    });
    let mut shifts = vec![0usize; profiles.len()];
    let mut total = vec![0.0; circle];
    for (rank, &j) in order.iter().enumerate() {
        if rank > 0 {
            shifts[j] = profiles[j].best_shift(&total, cfg.rotation_steps).0;
        }
        profiles[j].add_to(&mut total, shifts[j], 1.0);
    }
    let mut search = Search::Exhaustive;
    if profiles.len() > 2 {
        let mut sweeps = 0;
        while sweeps < cfg.max_sweeps {
            sweeps += 1;
            let mut improved = false;
            for &j in &order[1..] {
                let p = &profiles[j];
                p.add_to(&mut total, shifts[j], -1.0);
                let current = p.added_excess(&total, shifts[j]);
                let (shift, cost) = p.best_shift(&total, cfg.rotation_steps);
                if cost < current - EPS {
                    shifts[j] = shift;
                    improved = true;
                }
                p.add_to(&mut total, shifts[j], 1.0);
            }
            if !improved {
                break;
            }
        }
        search = Search::CoordinateDescent { sweeps };
    }
    let found = excess(profiles, &shifts, circle);
    // The arcs as given (every shift 0) are a candidate too: a local optimum can be worse.
    let zero = vec![0; profiles.len()];
    let as_given = excess(profiles, &zero, circle);
    if as_given < found - EPS {
        return Found {
            shifts: zero,
            excess: as_given,
            search,
        };
    }
    Found {
        shifts,
        excess: found,
        search,
    }
}
