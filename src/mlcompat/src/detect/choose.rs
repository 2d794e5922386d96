//! Choosing between the two estimators, and the bytes per period.
//!
//! The autocorrelation (`acf.rs`) is the primary estimator when communication arcs span
//! several samples: it uses every sample and was validated on the synthetic grid. When bursts
//! are short (median length at most [`SHORT_BURST`] samples: posted spikes), it decorrelates at
//! a fractional period and picks a multiple, so the event estimator (`events.rs`) goes first.
//! Whichever goes first, the other is the fallback when the first does not reach
//! `min_confidence` or sees too few periods.

use super::{acf, events, gaps, phase, DetectConfig};
use crate::error::DetectError;

/// Bursts this long or shorter (median, in samples) are timed by the event estimator first.
pub const SHORT_BURST: usize = 2;

/// A period, where its communication starts, and the estimator's confidence.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Estimate {
    /// In samples (sub-sample).
    pub period: f64,
    /// The start of a communication arc, in samples from the window's first sample (any
    /// iteration's: reduce modulo the period).
    pub start: f64,
    /// In [0, 1].
    pub confidence: f64,
    /// The share of the period its arc spans: the duty, or for arcs with holes (posts in some
    /// of their intervals only) the share with the holes filled.
    pub arc_duty: f64,
}

/// The period of the on/off signal `on` (`duty` of it on), by the estimator suited to its
/// bursts, falling back on the other.
pub(super) fn estimate(
    on: &[bool],
    duty: f64,
    cfg: &DetectConfig,
) -> Result<Estimate, DetectError> {
    let n = on.len();
    let bursts = events::bursts(on);
    let mut lengths: Vec<f64> = bursts.iter().map(|b| b.len as f64).collect();
    let short = events::median(&mut lengths).is_some_and(|m| m <= SHORT_BURST as f64);
    let by_events = || -> Result<Estimate, f64> {
        let fit = events::fit(&bursts).ok_or(0.0)?;
        let enough =
            fit.period >= cfg.min_period_samples as f64 && n as f64 >= cfg.min_periods * fit.period;
        if !enough || fit.score < cfg.min_confidence {
            return Err(if enough { fit.score } else { 0.0 });
        }
        Ok(Estimate {
            period: fit.period,
            start: fit.start,
            confidence: fit.score,
            arc_duty: duty,
        })
    };
    let by_correlation = || -> Result<Estimate, DetectError> {
        let r = acf::correlogram(on, duty);
        // Lags 1..=max_lag are candidates; r has n entries, so max_lag + 1 < n.
        let fundamental = acf::fundamental(&r, max_lag(n, cfg), cfg)?;
        let arc = phase::fit(on, fundamental.lag);
        // The arc spans its duty, holes filled: it starts half of that before its centre.
        let arc_duty = gaps::arc_duty(on, arc.period).unwrap_or(duty);
        Ok(Estimate {
            period: arc.period,
            start: arc.centre - 0.5 * arc_duty * arc.period,
            confidence: fundamental.correlation,
            arc_duty,
        })
    };
    let not_periodic = |err: DetectError, score: f64| match err {
        DetectError::NotPeriodic {
            best_correlation,
            needed,
        } => DetectError::NotPeriodic {
            best_correlation: best_correlation.max(score).clamp(0.0, 1.0),
            needed,
        },
        other => other,
    };
    if short {
        match by_events() {
            Ok(est) => Ok(est),
            Err(score) => by_correlation().map_err(|e| not_periodic(e, score)),
        }
    } else {
        match by_correlation() {
            Ok(est) => Ok(est),
            Err(err) => by_events().map_err(|score| not_periodic(err, score)),
        }
    }
}

/// The longest lag searched: `n / min_periods`, and at most `n - 2` so that every candidate
/// has a right neighbour.
fn max_lag(n: usize, cfg: &DetectConfig) -> usize {
    let lag = (n as f64 / cfg.min_periods).floor();
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let lag = lag as usize;
    lag.min(n.saturating_sub(2))
}

/// Bytes per iteration: the bytes in the whole periods of `window` that start half a period
/// before an arc's centre `centre` (so that jittered bursts stay inside), divided by their
/// number; with no whole period, the mean rate times the period.
pub(super) fn bytes_per_period(window: &[u64], period: f64, centre: f64) -> f64 {
    let n = window.len() as f64;
    let from = (centre - 0.5 * period).rem_euclid(period);
    let whole = ((n - from) / period).floor();
    let sum = |lo: f64, hi: f64| {
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let (lo, hi) = (lo.round().max(0.0) as usize, hi.round().max(0.0) as usize);
        let part = window.get(lo..hi.min(window.len())).unwrap_or_default();
        part.iter().map(|&v| v as f64).sum::<f64>()
    };
    let bytes = if whole >= 1.0 {
        sum(from, from + whole * period) / whole
    } else {
        sum(0.0, n) * period / n
    };
    if bytes.is_finite() {
        bytes.max(0.0)
    } else {
        0.0
    }
}
