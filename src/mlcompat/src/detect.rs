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
//!    on when above their midpoint. Refused when the levels are not apart by at least half the
//!    high level (a VM sending steadily has no on/off structure).
//! 2. Autocorrelation of the centred on/off signal (FFT, `detect/fft.rs`), each lag
//!    normalised by its overlap so that long lags are not penalised. Lags run up to
//!    `n / min_periods`, so at least `min_periods` periods are seen.
//! 3. The trivial peak at lag 0 is skipped by starting after the first lag where the
//!    correlation falls to zero or below. Each local maximum after it is a candidate period,
//!    scored by a comb: the mean correlation at its first [`COMB_TEETH`] multiples. Multiples
//!    of the period score as well as the period itself, so the fundamental is the first
//!    candidate whose score is at least [`HARMONIC_RATIO`] of the highest; averaging over the
//!    teeth keeps one lucky peak at 2P (short arcs, jitter) from outscoring P.
//! 4. Refinement: a parabola through the peak and its neighbours gives a sub-sample lag; then
//!    the peaks near 2, 3, 4, 6, 9, ... times that lag are located and refined the same way,
//!    each giving the period as lag / multiple with an error divided by the multiple.
//! 5. Period and phase (`detect/phase.rs`): one window per period, the arc's centre in each
//!    (circular mean), a line through the centres: its slope corrects the period, its
//!    intercept is the centre of the first arc.
//! 6. Duty: the fraction of samples on. Demand: the mean of the on samples whose neighbours
//!    are on too (whole intervals of communication), less that of the off samples whose
//!    neighbours are off too (the background). Phase: the arc's start, half the duty before
//!    its centre.
//!
//! The confidence is the fundamental's comb score (clamped to [0, 1]): 1 for a perfectly
//! repeating on/off pattern, near 0 for noise. Below `min_confidence` the trace is
//! refused as not periodic.
//!
//! # Bounded work
//!
//! Only the last `max_samples` samples are analysed (at most [`MAX_SAMPLES`]). With n of them:
//! one sort O(n log n), two FFTs of N = next power of two >= 2n, O(N log N) time and O(N)
//! memory; the peak search O(n), the comb at most 1024 candidates x 8 teeth x 9 lags, the
//! refinement O(log n); the phase fit two O(n) passes. At the
//! default cap of 65 536 samples (65 s at 1 ms) that is a few million floating-point
//! operations.

mod fft;
mod level;
mod phase;

use serde::{Deserialize, Serialize};

use crate::error::DetectError;

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
    /// Fraction of the period the VM is sending, in [0, 1].
    pub duty: f64,
    /// Mean transmit rate while communicating, bytes per second (the low level's bytes taken
    /// out).
    pub demand_bytes_per_s: f64,
    /// Where the communication arc starts, in ns after the start of the first sample given
    /// (modulo the period), in [0, period). When samples beyond `max_samples` were dropped,
    /// the phase is carried back over them with the estimated period, so its error grows by
    /// the period's error times the number of periods dropped.
    pub phase_ns: u64,
    /// Mean autocorrelation of the on/off signal at the period's first multiples (the comb
    /// score), in [0, 1].
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
    let threshold = levels.threshold();
    let on: Vec<bool> = window.iter().map(|&v| v as f64 > threshold).collect();
    let on_count = on.iter().filter(|&&b| b).count();
    if on_count == 0 || on_count == n {
        return Err(DetectError::NoOnOff {
            low: levels.low,
            high: levels.high,
        });
    }
    let r = correlogram(&on, on_count);
    // Lags 1..=max_lag are candidates; r has n entries, so max_lag + 1 < n.
    let max_lag = max_lag(n, cfg);
    let period = fundamental(&r, max_lag, cfg)?;
    let duty = on_count as f64 / n as f64;
    let arc = phase::fit(&on, period.lag);
    let periods_seen = n as f64 / arc.period;
    // The arc starts half the duty before its centre; measured from the first sample given.
    let phase = (arc.centre - 0.5 * duty * arc.period + skipped as f64).rem_euclid(arc.period);
    let phase = if phase < arc.period { phase } else { 0.0 }; // rem_euclid may round up
    let demand = level_of(window, &on, true).unwrap_or(levels.high)
        - level_of(window, &on, false).unwrap_or(levels.low);
    let period_ns = to_ns(arc.period * interval_ns as f64);
    Ok(Periodicity {
        period_ns,
        duty,
        demand_bytes_per_s: finite_or_max(demand.max(0.0) * 1e9 / interval_ns as f64),
        // Rounded to ns, the phase may reach the rounded period: fold it back.
        phase_ns: to_ns(phase * interval_ns as f64) % period_ns.max(1),
        confidence: period.correlation.clamp(0.0, 1.0),
        periods_seen,
        samples_used: n,
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

/// The longest lag searched: `n / min_periods`, and at most `n - 2` so that every candidate
/// has a right neighbour.
fn max_lag(n: usize, cfg: &DetectConfig) -> usize {
    let lag = (n as f64 / cfg.min_periods).floor();
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let lag = lag as usize;
    lag.min(n.saturating_sub(2))
}

/// The normalised autocorrelation of the centred on/off signal: `r[0] = 1`, each lag divided by
/// its overlap.
fn correlogram(on: &[bool], on_count: usize) -> Vec<f64> {
    let n = on.len() as f64;
    let p = on_count as f64 / n;
    let centred: Vec<f64> = on.iter().map(|&b| f64::from(u8::from(b)) - p).collect();
    let c = fft::autocorrelation(&centred);
    let var = p * (1.0 - p);
    c.iter()
        .enumerate()
        .map(|(k, &ck)| ck / ((n - k as f64) * var))
        .collect()
}

/// The period found: its lag in samples (sub-sample) and the correlation at it.
struct Fundamental {
    lag: f64,
    correlation: f64,
}

/// Steps 3 and 4 of the method: skip the trivial peak, pick the fundamental, refine it.
fn fundamental(r: &[f64], max_lag: usize, cfg: &DetectConfig) -> Result<Fundamental, DetectError> {
    let not_periodic = |best: f64| DetectError::NotPeriodic {
        best_correlation: best.clamp(0.0, 1.0),
        needed: cfg.min_confidence,
    };
    let Some(start) = (1..=max_lag).find(|&k| r[k] <= 0.0) else {
        return Err(not_periodic(0.0));
    };
    let first = start.max(cfg.min_period_samples);
    // Candidates: local maxima high enough to matter (at most MAX_CANDIDATES of them).
    let candidates: Vec<(usize, f64)> = (first..=max_lag)
        .filter(|&k| r[k] >= r[k - 1] && r[k] > r[k + 1] && r[k] >= 0.5 * cfg.min_confidence)
        .take(MAX_CANDIDATES)
        .map(|k| (k, comb(r, refine(r, k), first, max_lag)))
        .collect();
    let best = candidates.iter().map(|c| c.1).fold(0.0, f64::max);
    if best < cfg.min_confidence {
        return Err(not_periodic(best));
    }
    let Some(&(k0, score)) = candidates.iter().find(|c| c.1 >= HARMONIC_RATIO * best) else {
        return Err(not_periodic(best));
    };
    let mut lag = refine(r, k0);
    // Harmonics 2, 3, 4, 6, 9, ...: each prediction is within the window because the error of
    // the previous estimate, divided by its multiple, times the next multiple stays small.
    let mut m = 2usize;
    loop {
        let predicted = lag * m as f64;
        if predicted + (HARMONIC_WINDOW as f64) + 1.0 > max_lag as f64 {
            break;
        }
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let centre = predicted.round() as usize;
        let lo = centre.saturating_sub(HARMONIC_WINDOW).max(first);
        let hi = (centre + HARMONIC_WINDOW).min(max_lag);
        let Some(k) = (lo..=hi).max_by(|&a, &b| r[a].total_cmp(&r[b])) else {
            break;
        };
        if r[k] < 0.5 * r[k0] || k == lo || k == hi {
            break; // decorrelated (drifting period) or no peak inside the window
        }
        lag = refine(r, k) / m as f64;
        m = (m * 3 / 2).max(m + 1);
    }
    Ok(Fundamental {
        lag,
        correlation: score,
    })
}

/// The comb score of a candidate period `lag`: the mean over its first multiples m (at most
/// [`COMB_TEETH`], all within `max_lag`) of the highest correlation within 1 + m/2 lags of
/// m x lag (the window widens because the candidate's error grows with m).
fn comb(r: &[f64], lag: f64, first: usize, max_lag: usize) -> f64 {
    let mut sum = 0.0;
    let mut teeth = 0usize;
    for m in 1..=COMB_TEETH {
        let centre = (lag * m as f64).round();
        if centre.is_nan() || centre > max_lag as f64 {
            break;
        }
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let centre = centre as usize;
        let w = 1 + m / 2;
        let lo = centre.saturating_sub(w).max(first);
        let hi = (centre + w).min(max_lag);
        sum += (lo..=hi)
            .map(|k| r[k])
            .fold(f64::NEG_INFINITY, f64::max)
            .max(-1.0);
        teeth += 1;
    }
    if teeth == 0 {
        0.0
    } else {
        sum / teeth as f64
    }
}

/// The sub-sample position of the peak at `k` (a parabola through `k - 1`, `k`, `k + 1`).
fn refine(r: &[f64], k: usize) -> f64 {
    let (a, b, c) = (r[k - 1], r[k], r[k + 1]);
    let denom = a - 2.0 * b + c;
    let shift = if denom < 0.0 {
        (0.5 * (a - c) / denom).clamp(-0.5, 0.5)
    } else {
        0.0
    };
    k as f64 + shift
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
