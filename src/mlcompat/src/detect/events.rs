//! The event estimator: the period from when bursts start, for spike trains and short bursts.
//!
//! resex's monitor counts an RDMA WRITE in the interval its work request was posted, so a job
//! that computes and then sends one large message shows one sample of bytes per iteration and
//! zeros between. When the period is not a whole number of samples, the spikes fall 20 and 21
//! samples apart (say), the on/off signal matches itself exactly only at a multiple of the
//! period close to a whole number (9 x 20.1 = 181), and the autocorrelation picks that
//! multiple. Timing the bursts instead gives the period to a small fraction of a sample:
//!
//! 1. Bursts: runs of on samples, runs one off sample apart merged (a missed interval inside
//!    an arc); each burst's time is its first sample.
//! 2. Seed: the median of the differences between successive starts.
//! 3. Indices: each burst gets an iteration index, the previous one plus the difference in
//!    starts divided by the period and rounded (a missed burst adds 2; a burst less than half a
//!    period after the previous is an extra and is dropped). Local differences keep the
//!    indices right when the iterations wander (jobs sharing a link stretch each other's
//!    iterations), however far the wander takes them from a straight line.
//! 4. Fit: a least-squares line of start time against index; its slope is the period, its
//!    intercept the first burst's start. Done twice with local indices, then twice with
//!    indices from the line itself (the nearest iteration, one burst per iteration: right when
//!    the spacing jitters by more than a third of a short period); the better scoring fit wins.
//! 5. Score: the resultant length of the residuals taken as phases of the period (1 when every
//!    burst is on the line, about 0 for bursts at random), times the fraction of the
//!    iterations spanned that have a burst, times the fraction of bursts kept.
//!
//! Work: one sort of the differences, O(b log b) for b bursts (b <= n / 2), and a constant
//! number of O(b) passes.

use std::f64::consts::TAU;

/// A burst: a run of on samples (gaps of [`MERGE_GAP`] off samples merged).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Burst {
    /// Its first sample.
    pub start: usize,
    /// Samples from its first to its last, inclusive.
    pub len: usize,
}

/// Off samples between two runs that still make one burst (a missed interval in an arc).
const MERGE_GAP: usize = 1;

/// Fewest bursts fitted.
const MIN_BURSTS: usize = 3;

/// The period and start time the bursts give, in samples, and how well they fit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct EventFit {
    /// The period (sub-sample).
    pub period: f64,
    /// The start of the burst of iteration 0, on the fitted line (may be off the trace).
    pub start: f64,
    /// In [0, 1]: residual resultant x iterations with a burst x bursts kept.
    pub score: f64,
}

/// The bursts of `on`, in order.
pub(super) fn bursts(on: &[bool]) -> Vec<Burst> {
    let mut out: Vec<Burst> = Vec::new();
    let mut i = 0;
    while i < on.len() {
        if !on[i] {
            i += 1;
            continue;
        }
        let mut j = i;
        while j < on.len() && on[j] {
            j += 1;
        }
        match out.last_mut() {
            Some(last) if i - (last.start + last.len) <= MERGE_GAP => last.len = j - last.start,
            _ => out.push(Burst {
                start: i,
                len: j - i,
            }),
        }
        i = j;
    }
    out
}

/// The median of `values` (`None` if empty); sorts them.
pub(super) fn median(values: &mut [f64]) -> Option<f64> {
    values.sort_unstable_by(f64::total_cmp);
    values.get(values.len() / 2).copied()
}

/// Fits a line through the starts of `bursts`; `None` with fewer than [`MIN_BURSTS`] bursts
/// or no usable fit.
pub(super) fn fit(bursts: &[Burst]) -> Option<EventFit> {
    if bursts.len() < MIN_BURSTS {
        return None;
    }
    let starts: Vec<f64> = bursts.iter().map(|b| b.start as f64).collect();
    let mut diffs: Vec<f64> = starts.windows(2).map(|w| w[1] - w[0]).collect();
    let seed = median(&mut diffs)?;
    let mut best: Option<EventFit> = None;
    let mut line = Line {
        period: seed,
        start: starts[0],
    };
    for pass in 0..4 {
        let indexed = if pass < 2 {
            local_indices(&starts, line.period)
        } else {
            line_indices(&starts, line)
        };
        let Some(next) = least_squares(&indexed) else {
            break;
        };
        line = next;
        let score = score(&indexed, line, starts.len());
        if best.is_none_or(|b| score > b.score) {
            best = Some(EventFit {
                period: line.period,
                start: line.start,
                score,
            });
        }
    }
    best
}

/// A line of start time against iteration index.
#[derive(Debug, Clone, Copy)]
struct Line {
    period: f64,
    start: f64,
}

/// (index, start) pairs, one per iteration with a burst, indices increasing.
type Indexed = Vec<(f64, f64)>;

/// Step 3: indices from successive differences; extras (less than half a period on) dropped.
fn local_indices(starts: &[f64], period: f64) -> Indexed {
    let mut out: Indexed = Vec::with_capacity(starts.len());
    for &s in starts {
        match out.last() {
            None => out.push((0.0, s)),
            Some(&(k, prev)) => {
                let step = ((s - prev) / period).round();
                if step >= 1.0 {
                    out.push((k + step, s));
                }
            }
        }
    }
    out
}

/// Step 4's second half: the nearest iteration on `line`; of two bursts on one iteration, the
/// nearer is kept.
fn line_indices(starts: &[f64], line: Line) -> Indexed {
    let mut out: Indexed = Vec::with_capacity(starts.len());
    for &s in starts {
        let k = ((s - line.start) / line.period).round();
        let off = |k: f64, s: f64| (s - line.start - k * line.period).abs();
        match out.last_mut() {
            Some(last) if last.0 >= k => {
                if last.0 == k && off(k, s) < off(last.0, last.1) {
                    *last = (k, s);
                }
            }
            _ => out.push((k, s)),
        }
    }
    out
}

/// The least-squares line through `indexed`; `None` if it is degenerate (one index, a period
/// below a sample, non-finite).
fn least_squares(indexed: &Indexed) -> Option<Line> {
    if indexed.len() < MIN_BURSTS {
        return None;
    }
    let n = indexed.len() as f64;
    let mean_k = indexed.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_s = indexed.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = indexed.iter().map(|p| (p.0 - mean_k).powi(2)).sum();
    let sxy: f64 = indexed
        .iter()
        .map(|p| (p.0 - mean_k) * (p.1 - mean_s))
        .sum();
    let period = sxy / sxx;
    let start = mean_s - period * mean_k;
    (period.is_finite() && period >= 1.0 && start.is_finite()).then_some(Line { period, start })
}

/// Step 5: resultant of the residuals x iterations with a burst x bursts kept, in [0, 1].
fn score(indexed: &Indexed, line: Line, bursts: usize) -> f64 {
    let (Some(first), Some(last)) = (indexed.first(), indexed.last()) else {
        return 0.0;
    };
    let omega = TAU / line.period;
    let (s, c) = indexed.iter().fold((0.0, 0.0), |(s, c), &(k, t)| {
        let (si, ci) = (omega * (t - line.start - k * line.period)).sin_cos();
        (s + si, c + ci)
    });
    let kept = indexed.len() as f64;
    let resultant = s.hypot(c) / kept;
    let coverage = kept / (last.0 - first.0 + 1.0);
    let score = resultant * coverage.min(1.0) * (kept / bursts.max(1) as f64);
    if score.is_finite() {
        score.clamp(0.0, 1.0)
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::{bursts, fit, Burst};

    /// Spikes every 20.1 samples (20 or 21 apart), one missing: the period to 0.01 sample.
    #[test]
    fn spike_train_at_a_fractional_period() {
        let mut on = vec![false; 4000];
        for k in (0..198u32).filter(|&k| k != 50) {
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let i = (3.3 + 20.1 * f64::from(k)).floor() as usize;
            on[i] = true;
        }
        let got = fit(&bursts(&on)).expect("a fit");
        assert!((got.period - 20.1).abs() < 0.01, "{got:?}");
        assert!((got.start - 3.3).abs() < 0.6, "{got:?}");
        assert!(got.score > 0.9, "{got:?}");
    }

    /// A one-sample gap inside a run is a missed interval, not two bursts.
    #[test]
    fn merges_one_sample_gaps() {
        let on = [false, true, true, false, true, false, false, true];
        let got = bursts(&on);
        assert_eq!(
            got,
            [Burst { start: 1, len: 4 }, Burst { start: 7, len: 1 }]
        );
    }

    /// Fewer than three bursts give no fit.
    #[test]
    fn two_bursts_are_not_a_fit() {
        assert_eq!(fit(&bursts(&[true, false, false, true])), None);
    }
}
