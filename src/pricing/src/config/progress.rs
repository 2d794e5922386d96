//! `[progress]`: the adaptive-unfairness policy's settings and their bounds.

use super::{check, finite_in, ConfigError};
use serde::{Deserialize, Serialize};

/// `[progress]`: how bursts are found in a VM's bytes per interval and how progress weighs.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProgressConfig {
    /// A bursting VM's transmit weight is `1 + gain x progress` (the paper's rule is
    /// `R_AI (1 + progress)`; the fabric's experiment needs 10 to act).
    pub gain: f64,
    /// A burst ends after this many intervals without bytes.
    pub gap_intervals: u32,
    /// A burst's expected size follows the finished ones: `size = (1 - ewma) size + ewma last`.
    pub ewma: f64,
    /// Bursts smaller than this (bytes) are not learned (a latency-sensitive VM's replies).
    pub min_burst_bytes: u64,
    /// Progress is rounded to this step (fewer changes for the lever to apply).
    pub step: f64,
}

impl Default for ProgressConfig {
    fn default() -> Self {
        Self {
            gain: 10.0,
            gap_intervals: 2,
            ewma: 0.5,
            min_burst_bytes: 1 << 20,
            step: 0.1,
        }
    }
}

impl ProgressConfig {
    /// Range checks.
    pub fn validate(&self) -> Result<(), ConfigError> {
        check(
            "progress.gain",
            self.gain,
            finite_in(self.gain, 0.0, 100.0),
            "0 to 100",
        )?;
        check(
            "progress.gap_intervals",
            self.gap_intervals,
            (1..=1000).contains(&self.gap_intervals),
            "1 to 1000",
        )?;
        check(
            "progress.ewma",
            self.ewma,
            finite_in(self.ewma, 0.01, 1.0),
            "0.01 to 1",
        )?;
        check(
            "progress.min_burst_bytes",
            self.min_burst_bytes,
            self.min_burst_bytes <= 1 << 40,
            "0 to 2^40",
        )?;
        check(
            "progress.step",
            self.step,
            finite_in(self.step, 0.001, 1.0),
            "0.001 to 1",
        )
    }
}
