//! The unified circle: a quantum, each period rounded to it, and the LCM kept bounded (the
//! rule is in the parent module's documentation).

use super::{CircleConfig, UnifiedCircle};
use crate::error::CircleError;

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// The LCM of `counts`, or `None` once it exceeds `bound`.
fn bounded_lcm(counts: &[u128], bound: u128) -> Option<u128> {
    let mut lcm = 1u128;
    for &c in counts {
        // lcm <= bound <= 2^20 and c <= bound: the product fits in u128.
        lcm = lcm / gcd(lcm, c) * c;
        if lcm > bound {
            return None;
        }
    }
    Some(lcm)
}

/// One candidate quantum: its period counts and worst relative error.
struct Candidate {
    quantum: u128,
    counts: Vec<u128>,
    lcm: u128,
    error: f64,
}

/// The candidate for `m` slots in the shortest period, if its circle is within the bound.
fn candidate(periods: &[u128], shortest: u128, m: u128, bound: u128) -> Option<Candidate> {
    let quantum = ((shortest + m / 2) / m).max(1);
    let mut counts = Vec::with_capacity(periods.len());
    let mut error = 0.0f64;
    for &p in periods {
        let n = ((p + quantum / 2) / quantum).max(1);
        if n > bound {
            return None;
        }
        let rounded = n * quantum;
        error = error.max(rounded.abs_diff(p) as f64 / p as f64);
        counts.push(n);
    }
    let lcm = bounded_lcm(&counts, bound)?;
    Some(Candidate {
        quantum,
        counts,
        lcm,
        error,
    })
}

/// The unified circle for jobs of `periods_ns`: the quantum whose circle has at most
/// `max_slots` slots and rounds the periods with the smallest worst relative error (ties: the
/// finer quantum). Work: one candidate per m in `[min_slots_per_period, max_slots]`, each
/// O(jobs) gcds.
///
/// # Errors
///
/// [`CircleError::NoJobs`], [`CircleError::ZeroPeriod`], [`CircleError::BadConfig`], or
/// [`CircleError::NoCommonPerimeter`] when the best error exceeds `max_period_error` or no
/// quantum fits (a period shorter than `min_slots_per_period` ns).
pub fn unify(periods_ns: &[u64], cfg: &CircleConfig) -> Result<UnifiedCircle, CircleError> {
    cfg.validate()?;
    if periods_ns.is_empty() {
        return Err(CircleError::NoJobs);
    }
    if let Some(job) = periods_ns.iter().position(|&p| p == 0) {
        return Err(CircleError::ZeroPeriod { job });
    }
    let periods: Vec<u128> = periods_ns.iter().map(|&p| u128::from(p)).collect();
    let shortest = periods.iter().copied().min().unwrap_or(1);
    let bound = cfg.max_slots as u128;
    // The shortest period gets m slots, m <= its length in ns (a quantum of at least 1 ns).
    let m_hi = bound.min(shortest);
    let mut best: Option<Candidate> = None;
    for m in (cfg.min_slots_per_period as u128)..=m_hi {
        let Some(c) = candidate(&periods, shortest, m, bound) else {
            continue;
        };
        // Ascending m: an equal error from a larger m (a finer quantum) replaces the best.
        if best.as_ref().is_none_or(|b| c.error <= b.error) {
            best = Some(c);
        }
    }
    let refuse = |best_error: f64| CircleError::NoCommonPerimeter {
        max_slots: cfg.max_slots,
        tolerance: cfg.max_period_error,
        best_error,
    };
    let Some(best) = best else {
        return Err(refuse(f64::MAX));
    };
    if best.error > cfg.max_period_error {
        return Err(refuse(best.error));
    }
    let to_usize = |v: u128| usize::try_from(v).map_err(|_| refuse(best.error));
    let to_u64 = |v: u128| u64::try_from(v).map_err(|_| refuse(best.error));
    Ok(UnifiedCircle {
        quantum_ns: to_u64(best.quantum)?,
        slots: to_usize(best.lcm)?,
        max_slots: cfg.max_slots,
        perimeter_ns: to_u64(best.lcm * best.quantum)?,
        period_slots: best
            .counts
            .iter()
            .map(|&n| to_usize(n))
            .collect::<Result<_, _>>()?,
        rounded_periods_ns: best
            .counts
            .iter()
            .map(|&n| to_u64(n * best.quantum))
            .collect::<Result<_, _>>()?,
        period_error: best.error,
    })
}
