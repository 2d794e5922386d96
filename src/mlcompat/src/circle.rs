//! The circle abstraction: are jobs sharing a link compatible, and at which rotations?
//!
//! A job is its iteration time (period) and the arcs of it during which it communicates, at a
//! demand given as a fraction of the link's capacity. Time rolled onto a circle of the period
//! puts every iteration's communication on the same arcs. Jobs with different periods go onto
//! the *unified circle*, whose perimeter is the least common multiple of their periods: on it,
//! a job of period P repeats its arcs L / P times.
//!
//! # Rounding to a quantum (bounded LCM)
//!
//! Measured periods are not commensurate (their exact LCM is astronomically long), so the
//! circle is built from a quantum q: each period P_i becomes n_i = round(P_i / q) quanta and the
//! unified circle has L = lcm(n_1, ..) slots of q ns. [`unify`] tries every q = round(P_min / m)
//! for m from `min_slots_per_period` up to `max_slots` (the shortest period gets m slots), keeps
//! those with L <= `max_slots`, and picks the one with the smallest worst relative rounding
//! error e = max_i |n_i q - P_i| / P_i (ties: the finer quantum). If that error exceeds
//! `max_period_error` the jobs are refused ([`CircleError::NoCommonPerimeter`]).
//!
//! What the rounding costs: the circle models job i as if its period were n_i q. The real job
//! slips by |n_i q - P_i| per iteration, e_i L per turn of the unified circle, relative to the
//! rotation found; arc edges move by at most q / 2 when slotted. A rotation is therefore a
//! statement about jobs whose periods lock to the rounded ones (as the paper's unfairness makes
//! them slide into place), and must be re-applied as they drift; [`UnifiedCircle`] reports
//! e and q so the caller can judge.
//!
//! # Search
//!
//! Rotations are searched on a grid of at most `rotation_steps` shifts per job (a job's shift
//! matters only modulo its own period). One job (the one with the most communication) stays at
//! shift 0: rotating every job together changes nothing. With two jobs the other's shifts are
//! tried exhaustively (the optimum on the grid). With more, each job in turn is placed at its
//! best shift given those already placed (greedy), then coordinate descent re-places each job
//! given all others until a sweep improves nothing or `max_sweeps` sweeps: a local optimum, so
//! the score is a lower bound on the best compatibility.
//!
//! # Score
//!
//! With D(t) the total demand at slot t (fractions of capacity; an arc partly covering a slot
//! counts for the part covered), the excess is X = sum_t max(0, D(t) - 1) q and the demand-time
//! V = sum_t D(t) q, both in ns of full link. The score is `1 - X_best / V`: the fraction of the
//! jobs' communication that fits the link at the best rotation found. 1 means fully compatible
//! (a rotation with no demand above capacity); jobs with no communication score 1. Because
//! max(0, D - 1) < D wherever D > 0, the score is above 0 whenever V > 0.
//!
//! # Bounded work
//!
//! [`unify`]: O(max_slots x jobs) gcds. Profiles: O(jobs x arcs x max_slots). Search with J jobs,
//! S = rotation steps, L slots: two jobs O(S L); more, O((1 + max_sweeps) J (J L + S L)).

mod search;
mod unify;

use serde::{Deserialize, Serialize};

use crate::detect::Periodicity;
use crate::error::CircleError;

pub use unify::unify;

/// The largest demand accepted for a job, in link capacities (a sanity bound).
pub const MAX_DEMAND: f64 = 1e6;

/// The hard cap on `max_slots` and `rotation_steps`, whatever the configuration says.
pub const HARD_MAX_SLOTS: usize = 1 << 20;

/// A communication arc, `[start, end)` as fractions of the job's period: `0 <= start < 1` and
/// `start <= end <= start + 1`; an `end` above 1 wraps past the period's end.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CommArc {
    /// Where the arc starts, fraction of the period.
    pub start: f64,
    /// Where it ends, fraction of the period (above 1: wraps).
    pub end: f64,
}

/// A periodic job on a link: its period, when it communicates, and how hard.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// Iteration time, ns.
    pub period_ns: u64,
    /// Communication arcs (overlapping arcs count once).
    pub arcs: Vec<CommArc>,
    /// Demand while communicating, as a fraction of the link's capacity.
    pub demand: f64,
}

impl Job {
    /// A job with one arc `[start, end)` (fractions of the period).
    #[must_use]
    pub fn single(period_ns: u64, start: f64, end: f64, demand: f64) -> Self {
        Self {
            period_ns,
            arcs: vec![CommArc { start, end }],
            demand,
        }
    }

    /// The job [`crate::detect::detect`] saw, on a link of `link_bytes_per_s`: one arc from the
    /// phase, duty long, at the detected demand over the link's rate. Invalid values (a zero
    /// period or link rate) are refused later, by [`compatibility`].
    ///
    /// The monitor counts a WRITE when it is posted, so a job that posts its whole iteration's
    /// bytes at once shows them in one interval (a duty of one sample, a demand many times the
    /// link). The arc is therefore at least as long as its bytes per period need at the link's
    /// rate, with the demand spread over it; where the posts already span longer (a job sending
    /// below the link's rate), the detected duty and demand stand.
    #[must_use]
    pub fn from_periodicity(p: &Periodicity, link_bytes_per_s: f64) -> Self {
        // A phase of a whole period (or more) folds back to the start of the circle.
        let start = (p.phase_ns % p.period_ns.max(1)) as f64 / p.period_ns as f64;
        let period_s = p.period_ns as f64 / 1e9;
        let wire = p.bytes_per_period / (link_bytes_per_s * period_s);
        let (duty, demand) = if wire.is_finite() && wire > p.duty {
            let duty = wire.min(1.0);
            (duty, wire / duty)
        } else {
            (p.duty, p.demand_bytes_per_s / link_bytes_per_s)
        };
        Self::single(p.period_ns, start, start + duty, demand)
    }
}

/// Settings of [`unify`] and [`compatibility`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CircleConfig {
    /// The most slots the unified circle may have (the LCM bound; at most [`HARD_MAX_SLOTS`]).
    pub max_slots: usize,
    /// The fewest slots the shortest period gets (its resolution).
    pub min_slots_per_period: usize,
    /// The largest relative error allowed when rounding a period to the quantum.
    pub max_period_error: f64,
    /// Shifts tried per job (at most one per slot of its period).
    pub rotation_steps: usize,
    /// The most jobs accepted.
    pub max_jobs: usize,
    /// The most arcs accepted per job.
    pub max_arcs: usize,
    /// The most coordinate-descent sweeps (three jobs or more).
    pub max_sweeps: usize,
}

impl Default for CircleConfig {
    fn default() -> Self {
        Self {
            max_slots: 4096,
            min_slots_per_period: 20,
            max_period_error: 0.01,
            rotation_steps: 360,
            max_jobs: 32,
            max_arcs: 64,
            max_sweeps: 16,
        }
    }
}

impl CircleConfig {
    fn validate(&self) -> Result<(), CircleError> {
        if self.max_slots == 0 || self.max_slots > HARD_MAX_SLOTS {
            return Err(CircleError::BadConfig("max_slots must be in [1, 2^20]"));
        }
        if self.min_slots_per_period == 0 || self.min_slots_per_period > self.max_slots {
            return Err(CircleError::BadConfig(
                "min_slots_per_period must be in [1, max_slots]",
            ));
        }
        if !(self.max_period_error >= 0.0 && self.max_period_error < 1.0) {
            return Err(CircleError::BadConfig("max_period_error must be in [0, 1)"));
        }
        if self.rotation_steps == 0 || self.rotation_steps > HARD_MAX_SLOTS {
            return Err(CircleError::BadConfig(
                "rotation_steps must be in [1, 2^20]",
            ));
        }
        if self.max_jobs == 0 || self.max_jobs > 1024 || self.max_arcs > 4096 {
            return Err(CircleError::BadConfig(
                "max_jobs must be in [1, 1024], max_arcs <= 4096",
            ));
        }
        Ok(())
    }
}

/// The unified circle [`unify`] chose.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UnifiedCircle {
    /// The quantum, ns: one slot.
    pub quantum_ns: u64,
    /// Slots on the circle: the LCM of the rounded periods in quanta.
    pub slots: usize,
    /// The bound it respects (`max_slots`).
    pub max_slots: usize,
    /// The perimeter, ns (`slots x quantum_ns`).
    pub perimeter_ns: u64,
    /// Each job's rounded period, in slots.
    pub period_slots: Vec<usize>,
    /// Each job's rounded period, ns.
    pub rounded_periods_ns: Vec<u64>,
    /// The worst relative rounding error over the jobs, max |rounded - period| / period.
    pub period_error: f64,
}

/// How the rotations were searched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Search {
    /// Every shift on the grid (one or two jobs): the best on the grid.
    Exhaustive,
    /// Greedy placement, then coordinate descent: a local optimum.
    CoordinateDescent {
        /// Sweeps run.
        sweeps: usize,
    },
}

/// The verdict of [`compatibility`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Compatibility {
    /// `1 - excess_ns / demand_ns` at the best rotation found, in [0, 1]; 1 = fully compatible.
    pub score: f64,
    /// The same with every shift 0: how compatible the jobs are as their arcs were given (for
    /// detected jobs, as they run now).
    pub score_as_given: f64,
    /// Each job's rotation: its arcs moved later by this many ns, in [0, its rounded period).
    pub shifts_ns: Vec<u64>,
    /// Demand above capacity at the best rotation, ns of full link per perimeter.
    pub excess_ns: f64,
    /// Demand above capacity with every shift 0.
    pub excess_as_given_ns: f64,
    /// All the jobs' demand-time, ns of full link per perimeter.
    pub demand_ns: f64,
    /// The circle the search ran on.
    pub circle: UnifiedCircle,
    /// How the rotations were searched.
    pub search: Search,
}

/// Checks `jobs` against `cfg`: counts, periods, demands, arcs.
fn validate(jobs: &[Job], cfg: &CircleConfig) -> Result<(), CircleError> {
    if jobs.is_empty() {
        return Err(CircleError::NoJobs);
    }
    if jobs.len() > cfg.max_jobs {
        return Err(CircleError::TooManyJobs {
            got: jobs.len(),
            max: cfg.max_jobs,
        });
    }
    for (job, j) in jobs.iter().enumerate() {
        if j.period_ns == 0 {
            return Err(CircleError::ZeroPeriod { job });
        }
        if !(j.demand >= 0.0 && j.demand <= MAX_DEMAND) {
            return Err(CircleError::BadDemand {
                job,
                demand: j.demand,
                max: MAX_DEMAND,
            });
        }
        if j.arcs.len() > cfg.max_arcs {
            return Err(CircleError::TooManyArcs {
                job,
                got: j.arcs.len(),
                max: cfg.max_arcs,
            });
        }
        for (arc, a) in j.arcs.iter().enumerate() {
            let ok = a.start >= 0.0 && a.start < 1.0 && a.end >= a.start && a.end <= a.start + 1.0;
            if !ok {
                return Err(CircleError::BadArc {
                    job,
                    arc,
                    start: a.start,
                    end: a.end,
                });
            }
        }
    }
    Ok(())
}

/// How compatible `jobs` are on one link, and the rotations that make them most so.
///
/// # Errors
///
/// [`CircleError`]: no or too many jobs, a zero period, a bad demand or arc, a bad setting, or
/// no unified circle within `max_slots` at the allowed rounding error.
pub fn compatibility(jobs: &[Job], cfg: &CircleConfig) -> Result<Compatibility, CircleError> {
    cfg.validate()?;
    validate(jobs, cfg)?;
    let periods: Vec<u64> = jobs.iter().map(|j| j.period_ns).collect();
    let circle = unify(&periods, cfg)?;
    let profiles: Vec<search::Profile> = jobs
        .iter()
        .zip(&circle.period_slots)
        .map(|(job, &n)| search::Profile::new(job, n))
        .collect();
    let found = search::best_rotations(&profiles, circle.slots, cfg);
    let zero = vec![0; jobs.len()];
    let as_given = search::excess(&profiles, &zero, circle.slots);
    let demand: f64 = profiles.iter().map(|p| p.demand_time(circle.slots)).sum();
    let q = circle.quantum_ns as f64;
    let score = |excess: f64| {
        if demand > 0.0 {
            (1.0 - excess / demand).clamp(0.0, 1.0)
        } else {
            1.0
        }
    };
    Ok(Compatibility {
        score: score(found.excess),
        score_as_given: score(as_given),
        shifts_ns: found
            .shifts
            .iter()
            .map(|&s| s as u64 * circle.quantum_ns)
            .collect(),
        excess_ns: found.excess * q,
        excess_as_given_ns: as_given * q,
        demand_ns: demand * q,
        circle,
        search: found.search,
    })
}

#[cfg(test)]
mod tests;
