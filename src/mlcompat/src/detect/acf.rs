//! The autocorrelation estimator (steps 2-4 of the method in `detect.rs`): the correlogram of
//! the on/off signal, the fundamental picked by a comb over its multiples, and its sub-sample
//! refinement at the harmonics. Suited to communication arcs several samples long; a spike
//! train whose period is not a whole number of samples decorrelates at the period's multiples
//! and is left to the event estimator (`events.rs`).

use super::{fft, DetectConfig, COMB_TEETH, HARMONIC_RATIO, HARMONIC_WINDOW, MAX_CANDIDATES};
use crate::error::DetectError;

/// The normalised autocorrelation of the centred on/off signal: `r[0] = 1`, each lag divided by
/// its overlap.
pub(super) fn correlogram(on: &[bool], p: f64) -> Vec<f64> {
    let n = on.len() as f64;
    let centred: Vec<f64> = on.iter().map(|&b| f64::from(u8::from(b)) - p).collect();
    let c = fft::autocorrelation(&centred);
    let var = p * (1.0 - p);
    c.iter()
        .enumerate()
        .map(|(k, &ck)| ck / ((n - k as f64) * var))
        .collect()
}

/// The period found: its lag in samples (sub-sample) and the correlation at it.
pub(super) struct Fundamental {
    /// The period, in samples (sub-sample).
    pub lag: f64,
    /// Its comb score.
    pub correlation: f64,
}

/// Steps 3 and 4 of the method: skip the trivial peak, pick the fundamental, refine it.
pub(super) fn fundamental(
    r: &[f64],
    max_lag: usize,
    cfg: &DetectConfig,
) -> Result<Fundamental, DetectError> {
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
