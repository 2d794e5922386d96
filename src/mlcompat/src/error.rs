//! The crate's errors: why a trace has no period, why jobs cannot be put on one circle, why
//! jobs cannot be placed on links.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Why [`crate::detect::detect`] found no period.
#[derive(Debug, Clone, PartialEq, Error, Serialize, Deserialize)]
pub enum DetectError {
    /// The sampling interval is zero.
    #[error("the sampling interval is zero")]
    ZeroInterval,
    /// The trace's duration (samples x interval) does not fit in 64-bit nanoseconds.
    #[error("{samples} samples of {interval_ns} ns overflow 64-bit nanoseconds")]
    TooLong {
        /// Samples analysed.
        samples: usize,
        /// The sampling interval.
        interval_ns: u64,
    },
    /// A configuration value is out of range; the message names it.
    #[error("invalid detection setting: {0}")]
    BadConfig(&'static str),
    /// Too few samples to see the required number of periods of the shortest period.
    #[error("{samples} samples, at least {needed} are needed")]
    TooShort {
        /// Samples given (after the cap).
        samples: usize,
        /// The fewest that can be analysed.
        needed: usize,
    },
    /// Every sample is zero: the VM sent nothing.
    #[error("the VM sent nothing")]
    Silent,
    /// The samples do not fall into a low (compute) and a high (communication) level: the VM
    /// sends at one steady level, or its levels differ by less than half.
    #[error("no on/off structure: low level {low:.3e}, high level {high:.3e} bytes per interval")]
    NoOnOff {
        /// Mean of the lower class (bytes per interval).
        low: f64,
        /// Mean of the upper class (bytes per interval).
        high: f64,
    },
    /// The VM sends at a steady rate: its cumulative bytes never stray from a straight line by
    /// more than [`crate::detect::STEADY_EXCURSION`] intervals' worth (the samples only beat
    /// against the sampling), so it has no communication period.
    #[error(
        "steady sender: {bytes_per_s:.3e} bytes/s, within {excursion:.2} intervals' worth of a \
         constant rate"
    )]
    Steady {
        /// The mean rate, bytes per second.
        bytes_per_s: f64,
        /// The range of the cumulative bytes about their least-squares line, in intervals'
        /// worth of the mean rate.
        excursion: f64,
    },
    /// The on/off signal has no repeating pattern: its best autocorrelation peak is too low.
    #[error("not periodic: best autocorrelation {best_correlation:.3} is below {needed:.3}")]
    NotPeriodic {
        /// The highest autocorrelation peak found (0 if none).
        best_correlation: f64,
        /// The configured minimum.
        needed: f64,
    },
}

/// Why [`crate::circle::compatibility`] or [`crate::circle::unify`] refused its jobs.
#[derive(Debug, Clone, PartialEq, Error, Serialize, Deserialize)]
pub enum CircleError {
    /// No job was given.
    #[error("no jobs")]
    NoJobs,
    /// More jobs than the configured maximum.
    #[error("{got} jobs, at most {max}")]
    TooManyJobs {
        /// Jobs given.
        got: usize,
        /// The configured maximum.
        max: usize,
    },
    /// A job's period is zero.
    #[error("job {job}: period is zero")]
    ZeroPeriod {
        /// The job's index.
        job: usize,
    },
    /// A job's demand is negative, not finite or above the sanity bound.
    #[error("job {job}: demand {demand} is not in [0, {max}]")]
    BadDemand {
        /// The job's index.
        job: usize,
        /// The demand given (fraction of link capacity).
        demand: f64,
        /// The largest accepted.
        max: f64,
    },
    /// A job has more arcs than the configured maximum.
    #[error("job {job}: {got} arcs, at most {max}")]
    TooManyArcs {
        /// The job's index.
        job: usize,
        /// Arcs given.
        got: usize,
        /// The configured maximum.
        max: usize,
    },
    /// An arc is not `0 <= start < 1`, `start <= end <= start + 1` (finite).
    #[error("job {job}, arc {arc}: [{start}, {end}) is not within one turn starting in [0, 1)")]
    BadArc {
        /// The job's index.
        job: usize,
        /// The arc's index.
        arc: usize,
        /// Its start (fraction of the period).
        start: f64,
        /// Its end (fraction of the period; above 1 wraps).
        end: f64,
    },
    /// A configuration value is out of range; the message names it.
    #[error("invalid circle setting: {0}")]
    BadConfig(&'static str),
    /// No quantum keeps the unified circle within the slot bound with period errors within the
    /// tolerance.
    #[error(
        "no unified circle of at most {max_slots} slots rounds every period within {tolerance} \
         ({})",
        best(*best_error)
    )]
    NoCommonPerimeter {
        /// The configured bound on the unified circle's slots.
        max_slots: usize,
        /// The configured tolerance on a period's relative rounding error.
        tolerance: f64,
        /// The smallest worst-case relative error any admissible quantum gave (`f64::MAX` if no
        /// quantum was admissible at all).
        best_error: f64,
    },
}

/// Why [`crate::place::place`] refused its jobs or links. (Serialize only: it holds a
/// [`CircleError`], whose `BadConfig` text is `&'static str`.)
#[derive(Debug, Clone, PartialEq, Error, Serialize)]
pub enum PlaceError {
    /// No link was given (jobs need somewhere to go).
    #[error("no links")]
    NoLinks,
    /// More jobs than [`crate::place::MAX_JOBS`].
    #[error("{got} jobs, at most {max}")]
    TooManyJobs {
        /// Jobs given.
        got: usize,
        /// The bound.
        max: usize,
    },
    /// More links than [`crate::place::MAX_LINKS`].
    #[error("{got} links, at most {max}")]
    TooManyLinks {
        /// Links given.
        got: usize,
        /// The bound.
        max: usize,
    },
    /// Two jobs have the same name.
    #[error("job {name:?} is named twice")]
    DuplicateJob {
        /// The name.
        name: String,
    },
    /// Two links have the same name.
    #[error("link {name:?} is named twice")]
    DuplicateLink {
        /// The name.
        name: String,
    },
    /// A link takes more jobs than the circle scores at once (`CircleConfig::max_jobs`).
    #[error(
        "link {link:?}: max_jobs {max_jobs}, at most {max} (the jobs the circle scores at once)"
    )]
    LinkTooLarge {
        /// The link.
        link: String,
        /// Its `max_jobs`.
        max_jobs: usize,
        /// The bound.
        max: usize,
    },
    /// The links together have room for fewer jobs than were given.
    #[error("{jobs} jobs, but the links have room for {slots}")]
    NotEnoughRoom {
        /// Jobs given.
        jobs: usize,
        /// The sum of the links' `max_jobs`.
        slots: usize,
    },
    /// A job cannot be put on a circle even alone (zero period, bad demand such as NaN, bad
    /// arc, too many arcs, a period too short to slot).
    #[error("job {job:?} refused alone: {reason}")]
    BadJob {
        /// The job's name.
        job: String,
        /// What the circle said of it alone.
        reason: CircleError,
    },
}

/// The best rounding error found, for people (none when no quantum fitted the bound at all).
fn best(e: f64) -> String {
    if e == f64::MAX {
        "no quantum fits: the periods' least common multiple is too long".into()
    } else {
        format!("best error {e:.4}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_common_perimeter_says_whether_any_quantum_fitted() {
        let e = |best_error| {
            CircleError::NoCommonPerimeter {
                max_slots: 4096,
                tolerance: 0.01,
                best_error,
            }
            .to_string()
        };
        assert_eq!(
            e(0.02),
            "no unified circle of at most 4096 slots rounds every period within 0.01 (best error 0.0200)"
        );
        assert!(e(f64::MAX)
            .ends_with("(no quantum fits: the periods' least common multiple is too long)"));
        let periods: Vec<u64> = [101, 113, 127, 149, 163, 181, 197, 211, 229, 241]
            .iter()
            .map(|ms| ms * 1_000_000 + 333_333)
            .collect();
        let got = crate::circle::unify(&periods, &crate::CircleConfig::default()).unwrap_err();
        assert!(got.to_string().contains("least common multiple"), "{got}");
    }
}
