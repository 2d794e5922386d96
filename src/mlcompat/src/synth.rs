//! Synthetic on/off traces with known ground truth, for tests and experiments.
//!
//! A job communicates for `duty x period` of every period at `bytes_per_s`, starting at
//! `phase_ns` (plus a per-iteration jitter); the trace is what resex's monitor would count per
//! interval, with per-sample noise and occasionally a missed interval whose bytes are counted
//! in the next one (a late tick of exact cumulative counters). [`spike_train`] is a job that
//! posts one message per iteration, counted in the interval of the post. Seeded, so
//! reproducible.

use serde::{Deserialize, Serialize};

/// What to synthesise. Times in ns (floats: periods need not be whole nanoseconds).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceSpec {
    /// Iteration time.
    pub period_ns: f64,
    /// Fraction of the period spent communicating, in [0, 1].
    pub duty: f64,
    /// Transmit rate while communicating.
    pub bytes_per_s: f64,
    /// Start of the first communication arc after time 0, modulo the period.
    pub phase_ns: f64,
    /// Sampling interval.
    pub interval_ns: f64,
    /// Number of samples.
    pub samples: usize,
    /// Each iteration's start moves by a uniform draw in +-this fraction of the period.
    pub start_jitter: f64,
    /// Each arc's length scales by 1 + a uniform draw in +-this fraction.
    pub length_jitter: f64,
    /// Each sample's bytes scale by 1 + a uniform draw in +-this fraction.
    pub amplitude_noise: f64,
    /// Probability that an interval is missed (reads 0, its bytes go to the next one).
    pub missing: f64,
    /// Transmit rate outside communication (heartbeats, control traffic).
    pub background_bytes_per_s: f64,
    /// PRNG seed.
    pub seed: u64,
}

impl TraceSpec {
    /// A clean trace: no jitter, noise, missed intervals or background.
    #[must_use]
    pub fn clean(period_ns: f64, duty: f64, bytes_per_s: f64, samples: usize) -> Self {
        Self {
            period_ns,
            duty,
            bytes_per_s,
            phase_ns: 0.0,
            interval_ns: 1e6,
            samples,
            start_jitter: 0.0,
            length_jitter: 0.0,
            amplitude_noise: 0.0,
            missing: 0.0,
            background_bytes_per_s: 0.0,
            seed: 1,
        }
    }
}

/// SplitMix64: a tiny seeded generator (Steele, Lea, Flood 2014), enough for synthetic noise.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator from `seed`.
    #[must_use]
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        // The top 53 bits: exactly representable, uniform.
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [-a, a).
    pub fn symmetric(&mut self, a: f64) -> f64 {
        a * (2.0 * self.unit() - 1.0)
    }
}

/// The trace `spec` describes: bytes per interval, oldest first. Degenerate specs (a
/// non-positive period or interval, non-finite values) give zeros.
#[must_use]
pub fn on_off(spec: &TraceSpec) -> Vec<u64> {
    let mut rng = SplitMix64::new(spec.seed);
    let n = spec.samples;
    let dt = spec.interval_ns;
    let period = spec.period_ns;
    if !(period > 0.0 && dt > 0.0 && period.is_finite() && dt.is_finite()) {
        return vec![0; n];
    }
    let end = n as f64 * dt;
    let mut coverage = vec![0.0f64; n];
    // Iterations from one before time 0 (an arc may straddle it) to the end; at most a few
    // per sample, so that a period far below the interval cannot loop for ever.
    let mut k = (-spec.phase_ns / period).floor() - 1.0;
    let mut budget = 4 * n + 4;
    while spec.phase_ns + k * period < end && budget > 0 {
        budget -= 1;
        let start = spec.phase_ns + k * period + rng.symmetric(spec.start_jitter) * period;
        let len = spec.duty * period * (1.0 + rng.symmetric(spec.length_jitter));
        add_coverage(&mut coverage, dt, start, start + len.max(0.0));
        k += 1.0;
    }
    let mut bytes: Vec<f64> = coverage
        .iter()
        .map(|&c| {
            let on = c.min(1.0) * spec.bytes_per_s * dt * 1e-9;
            let noisy = on * (1.0 + rng.symmetric(spec.amplitude_noise));
            noisy.max(0.0) + spec.background_bytes_per_s * dt * 1e-9
        })
        .collect();
    for i in 0..n.saturating_sub(1) {
        if rng.unit() < spec.missing {
            bytes[i + 1] += bytes[i];
            bytes[i] = 0.0;
        }
    }
    bytes.iter().map(|&b| to_count(b)).collect()
}

/// Bytes as a count: float-to-int `as` saturates (a huge rate gives `u64::MAX`, not a wrap).
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn to_count(b: f64) -> u64 {
    b.round() as u64
}

/// Adds to each sample the fraction of it that `[start, stop)` covers.
fn add_coverage(coverage: &mut [f64], dt: f64, start: f64, stop: f64) {
    let first = (start / dt).floor().max(0.0);
    let mut i = first;
    while i * dt < stop {
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let idx = i as usize;
        let Some(slot) = coverage.get_mut(idx) else {
            return;
        };
        let lo = start.max(i * dt);
        let hi = stop.min((i + 1.0) * dt);
        if hi > lo {
            *slot += (hi - lo) / dt;
        }
        i += 1.0;
    }
}

/// A spike train: the trace of a job that posts one message of `bytes` per iteration, as
/// resex's monitor counts it (every byte in the interval of the post).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpikeSpec {
    /// Iteration time, ns.
    pub period_ns: f64,
    /// Bytes posted per iteration.
    pub bytes: u64,
    /// Time of the first post, ns.
    pub phase_ns: f64,
    /// Sampling interval, ns.
    pub interval_ns: f64,
    /// Number of samples.
    pub samples: usize,
    /// Each post moves by a uniform draw in +-this many ns.
    pub jitter_ns: f64,
    /// Probability that an iteration's post is missing.
    pub missing: f64,
    /// PRNG seed.
    pub seed: u64,
}

/// The trace `spec` describes: bytes per interval, oldest first (posts in one interval add
/// up, saturating). Degenerate specs give zeros.
#[must_use]
pub fn spike_train(spec: &SpikeSpec) -> Vec<u64> {
    let mut rng = SplitMix64::new(spec.seed);
    let mut out = vec![0u64; spec.samples];
    let (period, dt) = (spec.period_ns, spec.interval_ns);
    if !(period > 0.0 && dt > 0.0 && period.is_finite() && dt.is_finite()) {
        return out;
    }
    let end = spec.samples as f64 * dt;
    let mut k = 0.0;
    // At most one post per sample's worth of iterations, so a tiny period cannot loop for ever.
    let mut budget = 4 * spec.samples + 4;
    while spec.phase_ns + k * period < end + spec.jitter_ns.abs() && budget > 0 {
        budget -= 1;
        let t = spec.phase_ns + k * period + rng.symmetric(spec.jitter_ns);
        k += 1.0;
        if rng.unit() < spec.missing || t < 0.0 {
            continue;
        }
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let i = (t / dt).floor() as usize;
        if let Some(slot) = out.get_mut(i) {
            *slot = slot.saturating_add(spec.bytes);
        }
    }
    out
}
