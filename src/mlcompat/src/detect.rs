//! A VM's training period from its exact bytes per interval, with no help from the guest.
//!
//! Input: the bytes a VM transmitted in each of a run of equal intervals (resex's monitor
//! counts them every 1 ms), oldest first. Output: [`Periodicity`], the period, the fraction of
//! it the VM communicates (duty), its demand while communicating, the phase of the
//! communication arc and a confidence, or a [`DetectError`] saying why there is none.
//!
//! # Method
//!
//! 1. Levels (`detect/level.rs`): Otsu's split of the samples (clamped at the 99th
//!    percentile of the non-zero ones) into a compute and a communication level; a sample is
//!    on when above their midpoint. Refused (`NoOnOff`) when the levels are not apart by at
//!    least half the high level.
//! 2. Steady senders (`detect/steady.rs`): refused (`Steady`) when the cumulative bytes stay
//!    within [`STEADY_EXCURSION`] intervals' worth of their least-squares line: the zeros and
//!    double counts of a VM posting every interval are a beat against the sampling, not a
//!    period.
//! 3. Two estimators of the period, chosen by the bursts (`detect/choose.rs`): bursts (on runs)
//!    with a median length of at most [`SHORT_BURST`] samples go to the event estimator first,
//!    longer ones to the autocorrelation; each falls back on the other when it fails.
//!    - Autocorrelation (`detect/acf.rs`, `detect/fft.rs`) of the centred on/off signal, each
//!      lag normalised by its overlap, lags up to `n / min_periods`. The lag-0 peak is skipped
//!      (search from the first lag where the correlation reaches zero); each later local
//!      maximum is scored by a comb, the mean correlation at its first `COMB_TEETH` (8)
//!      multiples, and the fundamental is the first candidate scoring at least
//!      [`HARMONIC_RATIO`] of the best. A parabola gives a sub-sample lag, refined at the
//!      peaks near 2, 3, 4, 6, 9, ... times it; then one window per period, the arc's centre in
//!      each (circular mean) and a line through the centres (`detect/phase.rs`) correct the
//!      period and give the arc's centre. Confidence: the comb score.
//!    - Events (`detect/events.rs`): resex's monitor counts an RDMA WRITE in the interval it
//!      was posted, so a job sending one large message per iteration is a spike train. At a
//!      period that is not a whole number of samples the spikes fall 20 or 21 samples apart,
//!      the on/off signal repeats exactly only at a multiple close to a whole number, and the
//!      comb picks that multiple (181 ms for a 20.1 ms job). The event estimator times the
//!      bursts instead: the median difference of successive starts seeds the period, each
//!      burst gets an iteration index by rounding (missed bursts skip an index, extras are
//!      dropped), and a least-squares line of start against index gives the period and the
//!      first start. Confidence: the resultant of the residuals as phases of the period, times
//!      the share of iterations with a burst and of bursts kept.
//!
//!    The autocorrelation uses every sample and was validated on long arcs; timing is exact
//!    for spikes and tolerates iterations that wander (jobs sharing a link), where the
//!    autocorrelation decorrelates.
//! 4. Duty: the fraction of samples on. From posted-byte counts this is the fraction of
//!    intervals with posts, a lower bound on the share of the period on the wire. Demand: the
//!    mean of the on samples whose neighbours are on too (whole intervals of communication;
//!    all on samples when no run is that long), less that of the off samples whose
//!    neighbours are off too (the background). Bytes per period: every byte in the whole
//!    periods of the trace, per period, exact whatever the duty; `bytes_per_period /
//!    (link_rate x period)` is the duty on the wire. Phase: the arc's start (half the duty
//!    before its centre for the autocorrelation; the line's first start for events).
//!
//! Below `min_confidence` (from the estimator that went first or its fallback) the detector
//! looks again with the short gaps inside arcs filled (`detect/gaps.rs`: a job whose messages
//! take longer on the wire than an interval posts in some intervals of its arc only); if that
//! is not periodic either, the trace is refused as not periodic.
//!
//! # Bounded work
//!
//! Only the last `max_samples` samples are analysed (at most [`MAX_SAMPLES`]). With n of them:
//! one sort O(n log n), two FFTs of N = next power of two >= 2n, O(N log N) time and O(N)
//! memory; the peak search O(n), the comb at most 1024 candidates x 8 teeth x 9 lags, the
//! refinement O(log n); the phase fit two O(n) passes; the steady test two O(n) passes; the
//! event fit one sort of the b <= n / 2 burst starts' differences and a few O(b) passes. At the
//! default cap of 65 536 samples (65 s at 1 ms) that is a few million floating-point
//! operations.

mod acf;
mod choose;
mod events;
mod fft;
mod gaps;
mod level;
mod phase;
mod steady;

use serde::{Deserialize, Serialize};

use crate::error::DetectError;

pub use choose::SHORT_BURST;
pub use gaps::CLOSE_GAPS;
pub use steady::STEADY_EXCURSION;

/// The hard cap on samples analysed, whatever the configuration says (2^20: 17 min at 1 ms,
/// 32 MiB of FFT buffers).
pub const MAX_SAMPLES: usize = 1 << 20;

/// A candidate period is the fundamental when its comb score reaches this fraction of the
/// highest (multiples of the period score about as high).
pub const HARMONIC_RATIO: f64 = 0.8;

/// Multiples of a candidate period averaged in its comb score.
const COMB_TEETH: usize = 8;

/// The most candidate periods scored (local maxima of the autocorrelation, in lag order).
const MAX_CANDIDATES: usize = 1024;

/// Half-width, in lags, of the window searched for the peak at a multiple of the period.
const HARMONIC_WINDOW: usize = 2;

/// Settings of [`detect`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DetectConfig {
    /// Samples analysed: the most recent ones (capped at [`MAX_SAMPLES`]).
    pub max_samples: usize,
    /// Fewest periods the trace must span (at least 2).
    pub min_periods: f64,
    /// Shortest period reported, in samples (at least 2).
    pub min_period_samples: usize,
    /// Lowest confidence accepted, in (0, 1].
    pub min_confidence: f64,
}

impl Default for DetectConfig {
    fn default() -> Self {
        Self {
            max_samples: 1 << 16,
            min_periods: 3.0,
            min_period_samples: 4,
            min_confidence: 0.5,
        }
    }
}

impl DetectConfig {
    fn validate(&self) -> Result<(), DetectError> {
        if self.max_samples == 0 {
            return Err(DetectError::BadConfig("max_samples must be at least 1"));
        }
        if !(self.min_periods >= 2.0 && self.min_periods <= 1e6) {
            return Err(DetectError::BadConfig("min_periods must be in [2, 1e6]"));
        }
        if self.min_period_samples < 2 {
            return Err(DetectError::BadConfig(
                "min_period_samples must be at least 2",
            ));
        }
        if !(self.min_confidence > 0.0 && self.min_confidence <= 1.0) {
            return Err(DetectError::BadConfig("min_confidence must be in (0, 1]"));
        }
        Ok(())
    }
}

/// A VM's periodic communication, as [`detect`] estimated it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Periodicity {
    /// The iteration time, in ns.
    pub period_ns: u64,
    /// Fraction of the intervals in which the VM sent (on), in [0, 1]. resex's monitor counts
    /// an RDMA WRITE in the interval it was posted, so for a job that posts a few large
    /// messages this is the fraction of intervals with posts, a lower bound on the share of
    /// the period its bytes spend on the wire (see `bytes_per_period`). When the second look
    /// found the period (holes inside arcs filled), it is the arcs' share with the holes, and
    /// `demand_bytes_per_s` averages over them too.
    pub duty: f64,
    /// Mean bytes per second over the on intervals (the low level's bytes taken out): the
    /// transmit rate while communicating when arcs span many intervals; for posted spikes the
    /// bytes posted per on interval, not a wire rate.
    pub demand_bytes_per_s: f64,
    /// Where the communication arc starts, in ns after the start of the first sample given
    /// (modulo the period), in [0, period). When samples beyond `max_samples` were dropped,
    /// the phase is carried back over them with the estimated period, so its error grows by
    /// the period's error times the number of periods dropped.
    pub phase_ns: u64,
    /// Bytes sent per iteration, background included (the mean over the whole periods in the
    /// trace). Exact from posted-byte counts, whatever the duty: with the link's rate it gives
    /// the share of the period on the wire, `bytes_per_period / (link_rate x period)`.
    #[serde(default)]
    pub bytes_per_period: f64,
    /// How sure the estimator is, in [0, 1]: the comb score (mean autocorrelation of the on/off
    /// signal at the period's first multiples) or the event fit's score (burst starts on the
    /// fitted line, as phases, times the share of iterations with a burst).
    pub confidence: f64,
    /// How many periods the analysed samples span.
    pub periods_seen: f64,
    /// Samples analysed (the most recent ones, after the cap).
    pub samples_used: usize,
}

/// Estimates the period of `samples` (bytes transmitted per interval of `interval_ns`, oldest
/// first). Never panics; every float in the result is finite.
///
/// # Errors
///
/// [`DetectError`]: a zero interval, too few samples for `min_periods` periods, a silent VM, no
/// on/off structure, or no repeating pattern (confidence below `min_confidence`).
pub fn detect(
    samples: &[u64],
    interval_ns: u64,
    cfg: &DetectConfig,
) -> Result<Periodicity, DetectError> {
    cfg.validate()?;
    if interval_ns == 0 {
        return Err(DetectError::ZeroInterval);
    }
    let cap = cfg.max_samples.min(MAX_SAMPLES);
    let skipped = samples.len().saturating_sub(cap);
    let window = &samples[skipped..];
    let n = window.len();
    let needed = min_samples(cfg);
    if n < needed {
        return Err(DetectError::TooShort { samples: n, needed });
    }
    if u64::try_from(samples.len())
        .ok()
        .and_then(|len| len.checked_mul(interval_ns))
        .is_none()
    {
        return Err(DetectError::TooLong {
            samples: samples.len(),
            interval_ns,
        });
    }
    if window.iter().all(|&v| v == 0) {
        return Err(DetectError::Silent);
    }
    let levels = level::split(window).ok_or(DetectError::NoOnOff {
        low: window[0] as f64,
        high: window[0] as f64,
    })?;
    if levels.low > 0.5 * levels.high {
        return Err(DetectError::NoOnOff {
            low: levels.low,
            high: levels.high,
        });
    }
    if let Some((excursion, mean)) = steady::excursion(window) {
        if excursion <= STEADY_EXCURSION {
            return Err(DetectError::Steady {
                bytes_per_s: finite_or_max(mean * 1e9 / interval_ns as f64),
                excursion,
            });
        }
    }
    let threshold = levels.threshold();
    let on: Vec<bool> = window.iter().map(|&v| v as f64 > threshold).collect();
    let on_count = on.iter().filter(|&&b| b).count();
    if on_count == 0 || on_count == n {
        return Err(DetectError::NoOnOff {
            low: levels.low,
            high: levels.high,
        });
    }
    let duty = on_count as f64 / n as f64;
    let (on, duty, est) = match choose::estimate(&on, duty, cfg) {
        Ok(est) => (on, duty, est),
        Err(err @ DetectError::NotPeriodic { .. }) => second_look(&on, cfg).ok_or(err)?,
        Err(err) => return Err(err),
    };
    let period = est.period;
    // Measured from the first sample given.
    let phase = (est.start + skipped as f64).rem_euclid(period);
    let phase = if phase < period { phase } else { 0.0 }; // rem_euclid may round up
    let background = level_of(window, &on, false).unwrap_or(levels.low);
    let demand = level_of(window, &on, true).unwrap_or(levels.high) - background;
    let per_period =
        choose::bytes_per_period(window, period, est.start + 0.5 * est.arc_duty * period);
    let period_ns = to_ns(period * interval_ns as f64);
    Ok(Periodicity {
        period_ns,
        duty,
        demand_bytes_per_s: finite_or_max(demand.max(0.0) * 1e9 / interval_ns as f64),
        bytes_per_period: finite_or_max(per_period),
        // Rounded to ns, the phase may reach the rounded period: fold it back.
        phase_ns: to_ns(phase * interval_ns as f64) % period_ns.max(1),
        confidence: est.confidence.clamp(0.0, 1.0),
        periods_seen: n as f64 / period,
        samples_used: n,
    })
}

/// The detector's second look ([`gaps`]): the first gap length in [`CLOSE_GAPS`] whose closed
/// signal is periodic with its arcs whole (see [`gaps::accept`]), with that signal and its
/// duty.
fn second_look(on: &[bool], cfg: &DetectConfig) -> Option<(Vec<bool>, f64, choose::Estimate)> {
    if on.len() < gaps::MIN_SAMPLES {
        return None;
    }
    CLOSE_GAPS.iter().find_map(|&g| {
        let closed = gaps::close(on, g)?;
        let duty = closed.iter().filter(|&&b| b).count() as f64 / closed.len() as f64;
        if duty > gaps::MAX_DUTY {
            return None;
        }
        let est = choose::estimate(&closed, duty, cfg).ok()?;
        // Filled holes make arcs of random bursts too: only over a long history and many
        // periods is one that repeats told from one that happens to.
        if (closed.len() as f64) < gaps::MIN_PERIODS * est.period {
            return None;
        }
        let duty = gaps::accept(&closed, g, est.period)?;
        Some((closed, duty, est))
    })
}

/// The fewest samples [`detect`] analyses: `min_periods` periods of the shortest period, and
/// room for the lag after it.
fn min_samples(cfg: &DetectConfig) -> usize {
    let want = (cfg.min_periods * cfg.min_period_samples as f64).ceil();
    // Both factors are validated and bounded (1e6 x usize): saturate rather than wrap.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let want = want as usize;
    want.max(cfg.min_period_samples + 2)
}

/// The mean of the interior samples of one state (`on` or off: the sample and both its
/// neighbours in that state), which the state covers whole; the mean of all the samples in that
/// state when no run is three samples long; `None` if there are none. Edge samples, partly
/// covered, would bias the levels towards each other; a missed interval (zero, then twice the
/// bytes) is never interior to a communication run.
fn level_of(window: &[u64], on: &[bool], state: bool) -> Option<f64> {
    let mean = |filter: &dyn Fn(usize) -> bool| {
        let (sum, count) = (0..window.len())
            .filter(|&i| filter(i))
            .fold((0.0, 0usize), |(s, c), i| (s + window[i] as f64, c + 1));
        (count > 0).then(|| sum / count as f64)
    };
    let is = |i: usize| on[i] == state;
    let interior = |i: usize| i > 0 && i + 1 < on.len() && is(i - 1) && is(i) && is(i + 1);
    mean(&interior).or_else(|| mean(&is))
}

/// Nanoseconds from a non-negative float, saturating (NaN gives 0).
fn to_ns(x: f64) -> u64 {
    // Float-to-int `as` saturates and maps NaN to 0: exactly the rule wanted.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let ns = x.round() as u64;
    ns
}

/// `x` if finite, else the largest finite float.
fn finite_or_max(x: f64) -> f64 {
    if x.is_finite() {
        x
    } else {
        f64::MAX
    }
}

#[cfg(test)]
mod tests;
