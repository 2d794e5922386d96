//! The communication arc's centre, and the period refined by how that centre drifts.
//!
//! Folding the on samples at the period and taking their circular mean gives the arc's centre.
//! With a slightly wrong period P', iteration k's arc appears k (P - P') later each period: so
//! the trace is cut into one window per period (each window centred on the arc), the centre is
//! taken in each window, unwrapped, and a least-squares line through the centres gives the
//! period (P' plus the slope) and the centre of iteration 0 (the intercept). Jitter of the
//! iterations' starts averages out over the fit; a period wrong by a sample over 20 periods,
//! which would smear a global fold by 20 samples, is corrected.
//!
//! Work: O(n) per pass, [`PASSES`] passes; memory one accumulator per period in the trace.

use std::f64::consts::TAU;

/// Refinement passes (the second corrects what remains of the first).
const PASSES: usize = 2;

/// The largest correction accepted, as a fraction of the period: beyond it the fit is not
/// trusted (a multi-burst pattern, a wrong period) and the previous estimate is kept.
const MAX_CORRECTION: f64 = 0.1;

/// The refined period and the centre of the arc, both in samples; the centre is measured from
/// the start of the window's first sample, in [0, period).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Arc {
    pub period: f64,
    pub centre: f64,
}

/// The circular mean of `times` folded at `period`, in (-period / 2, period / 2]; `None` when
/// the resultant is zero (no samples, or perfectly spread).
fn circular_centre(times: impl Iterator<Item = f64>, period: f64) -> Option<f64> {
    let omega = TAU / period;
    let (s, c) = times.fold((0.0, 0.0), |(s, c), t| {
        let (si, ci) = (omega * t.rem_euclid(period)).sin_cos();
        (s + si, c + ci)
    });
    (s != 0.0 || c != 0.0).then(|| s.atan2(c) / omega)
}

/// Times (sample centres) of the on samples.
fn on_times(on: &[bool]) -> impl Iterator<Item = f64> + '_ {
    on.iter()
        .enumerate()
        .filter(|(_, &b)| b)
        .map(|(i, _)| i as f64 + 0.5)
}

/// The arc of `on` with the period first estimated as `period` samples.
pub(super) fn fit(on: &[bool], period: f64) -> Arc {
    let Some(centre) = circular_centre(on_times(on), period) else {
        return Arc {
            period,
            centre: 0.0,
        };
    };
    let mut arc = Arc {
        period,
        centre: centre.rem_euclid(period),
    };
    for _ in 0..PASSES {
        match drift(on, arc) {
            Some(next) if (next.period - arc.period).abs() <= MAX_CORRECTION * arc.period => {
                arc = next;
            }
            _ => break,
        }
    }
    arc
}

/// One pass: per-window centres (whole windows only), unwrapped, fitted by a line.
fn drift(on: &[bool], arc: Arc) -> Option<Arc> {
    let Arc { period, centre } = arc;
    let origin = centre - 0.5 * period;
    // Window k holds times in [origin + k P, origin + (k + 1) P); k from 0 (origin <= 0.5).
    let windows = (on.len() as f64 / period).ceil() + 2.0;
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let windows = windows as usize;
    let mut sums = vec![(0.0f64, 0.0f64); windows];
    let omega = TAU / period;
    for t in on_times(on) {
        let k = ((t - origin) / period).floor().max(0.0);
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let k = (k as usize).min(windows - 1);
        let (s, c) = (omega * (t - centre)).sin_cos();
        sums[k].0 += s;
        sums[k].1 += c;
    }
    // Centres relative to `centre`, unwrapped to within half a period of the previous one.
    let mut points: Vec<(f64, f64)> = Vec::new();
    let mut last = 0.0f64;
    let len = on.len() as f64;
    for (k, &(s, c)) in sums.iter().enumerate() {
        let from = origin + k as f64 * period;
        // Only whole windows: one the trace's ends cut shows part of an arc, off centre.
        if from < 0.0 || from + period > len || (s == 0.0 && c == 0.0) {
            continue;
        }
        let mut u = s.atan2(c) / omega;
        u += ((last - u) / period).round() * period;
        last = u;
        points.push((k as f64, u));
    }
    if points.len() < 3 {
        return None;
    }
    let n = points.len() as f64;
    let mean_k = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_u = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mean_k).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mean_k) * (p.1 - mean_u)).sum();
    let slope = sxy / sxx;
    let intercept = mean_u - slope * mean_k;
    let period = period + slope;
    // Window 0's arc is centred near `centre`; iteration 0 is at `centre + intercept`.
    let centre = (centre + intercept).rem_euclid(period);
    (period.is_finite() && period > 0.0 && centre.is_finite()).then_some(Arc { period, centre })
}

#[cfg(test)]
mod tests {
    use super::fit;

    /// A square wave of period 40.4 samples started at 13.2, given as 41: both recovered.
    #[test]
    fn corrects_a_period_off_by_more_than_a_sample() {
        let (p, start, width) = (40.4, 13.2, 12.0);
        let on: Vec<bool> = (0..2000)
            .map(|i| {
                let t = f64::from(i) + 0.5;
                (t - start).rem_euclid(p) < width
            })
            .collect();
        let arc = fit(&on, 41.0);
        assert!((arc.period - p).abs() < 0.01, "{arc:?}");
        assert!((arc.centre - (start + width / 2.0)).abs() < 0.3, "{arc:?}");
    }
}
