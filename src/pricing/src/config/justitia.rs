//! `[justitia]`: the Justitia baseline's settings and their bounds.

use super::{check, finite_in, ConfigError};
use serde::{Deserialize, Serialize};

/// `[justitia]`: how Justitia (NSDI '22) classifies VMs, what latency it aims at, and how its
/// pacer moves (see `justitia.rs`).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct JustitiaConfig {
    /// A VM whose mean message (bytes per completed work request, smoothed) is at least this
    /// is bandwidth-sensitive (an elephant, paced); smaller, latency-sensitive (never paced).
    /// Justitia's large chunk: 1 000 000 bytes.
    pub bulk_message_bytes: u64,
    /// The latency target: a latency-sensitive VM's mean sojourn over the window may exceed
    /// its quiet level (its wire time plus its quietest wait per request) by this fraction.
    pub target_slowdown: f64,
    /// The window the latency is measured over, intervals (Justitia: its last 1 000 probes).
    pub window_intervals: u32,
    /// A VM that sent nothing for this many intervals is no longer active.
    pub idle_intervals: u32,
    /// Additive increase of the elephants' virtual link, percent of the link per actuation
    /// period in which the target is met.
    pub increase_pct: f64,
    /// The multiplicative decrease per actuation period in which it is not (Justitia: 1/2).
    pub decrease: f64,
    /// The mean message size follows `size = (1 - ewma) size + ewma this_period`.
    pub ewma: f64,
}

impl Default for JustitiaConfig {
    fn default() -> Self {
        Self {
            bulk_message_bytes: 1_000_000,
            target_slowdown: 0.10,
            window_intervals: 10,
            idle_intervals: 20,
            increase_pct: 5.0,
            decrease: 0.5,
            ewma: 0.5,
        }
    }
}

impl JustitiaConfig {
    /// Range checks.
    pub fn validate(&self) -> Result<(), ConfigError> {
        check(
            "justitia.bulk_message_bytes",
            self.bulk_message_bytes,
            (1..=1 << 40).contains(&self.bulk_message_bytes),
            "1 to 2^40",
        )?;
        check(
            "justitia.target_slowdown",
            self.target_slowdown,
            finite_in(self.target_slowdown, 0.0, 100.0),
            "0 to 100",
        )?;
        check(
            "justitia.window_intervals",
            self.window_intervals,
            (1..=100_000).contains(&self.window_intervals),
            "1 to 100000",
        )?;
        check(
            "justitia.idle_intervals",
            self.idle_intervals,
            (1..=100_000).contains(&self.idle_intervals),
            "1 to 100000",
        )?;
        check(
            "justitia.increase_pct",
            self.increase_pct,
            finite_in(self.increase_pct, 0.01, 100.0),
            "0.01 to 100",
        )?;
        check(
            "justitia.decrease",
            self.decrease,
            finite_in(self.decrease, 0.01, 0.99),
            "0.01 to 0.99",
        )?;
        check(
            "justitia.ewma",
            self.ewma,
            finite_in(self.ewma, 0.01, 1.0),
            "0.01 to 1",
        )
    }
}
