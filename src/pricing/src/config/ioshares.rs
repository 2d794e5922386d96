//! `[ioshares]`: IOShares' settings and their bounds.

use super::{check, finite_in, ConfigError};
use serde::{Deserialize, Serialize};

/// How IOShares attributes a victim's interference.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum IoSharesMode {
    /// To every other VM that is not itself a victim in the period, by its share of the
    /// link's capacity while the victim waited (smoothed over intervals): an innocent small
    /// VM is never charged for a large VM's traffic, and on a quiet link nobody much is.
    #[default]
    Share,
    /// The paper's rule: to the other VM with the most MTUs in the interval, by its share of
    /// all MTUs.
    Paper,
}

/// `[ioshares]`: interference detection, rate rises and their decay.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct IoSharesConfig {
    /// Default SLA threshold: interference (fraction) above which a VM's report charges a
    /// neighbour. A VM's own threshold overrides it.
    pub sla_threshold: f64,
    /// A VM without a configured baseline learns it as the average of its first this many
    /// reports (no interference is assessed until then).
    pub baseline_reports: u32,
    /// After learning, a report with a lower mean (or stddev) lowers the baseline to it.
    pub baseline_follows_lower: bool,
    /// Stddev baselines below this fraction of the baseline mean are raised to it, so that a
    /// near-constant baseline does not turn tiny jitter into huge interference.
    pub stddev_floor: f64,
    /// Reports covering fewer requests than this are ignored.
    pub min_report_samples: u64,
    /// Interference above this is clamped (one absurd report cannot multiply a rate by 1000).
    pub max_intf: f64,
    /// Rates never rise above this (so caps never fall below base / max_rate by pricing).
    pub max_rate: f64,
    /// Per actuation period without interference attributed to it, a VM's rate moves to
    /// `1 + (rate - 1) x decay`.
    pub decay: f64,
    /// When no VM reported for this long, rates decay anyway; before that, rates hold while
    /// reports are missing.
    pub report_timeout_ms: u64,
    /// How interference is attributed: `share` (by share of the link while the victim
    /// waited) or `paper` (the top sender of the interval).
    pub mode: IoSharesMode,
    /// In `share` mode, a VM's link share is smoothed over intervals: per interval it keeps
    /// this much of its old value.
    pub share_memory: f64,
}

impl Default for IoSharesConfig {
    fn default() -> Self {
        Self {
            mode: IoSharesMode::Share,
            share_memory: 0.9,
            sla_threshold: 0.10,
            baseline_reports: 10,
            baseline_follows_lower: true,
            stddev_floor: 0.05,
            min_report_samples: 1,
            max_intf: 10.0,
            max_rate: 10.0,
            decay: 0.90,
            report_timeout_ms: 100,
        }
    }
}

impl IoSharesConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        check(
            "ioshares.sla_threshold",
            self.sla_threshold,
            self.sla_threshold.is_finite()
                && self.sla_threshold > 0.0
                && self.sla_threshold <= 10.0,
            "0.0 < x <= 10.0",
        )?;
        check(
            "ioshares.baseline_reports",
            self.baseline_reports,
            (1..=100_000).contains(&self.baseline_reports),
            "1..=100000",
        )?;
        check(
            "ioshares.stddev_floor",
            self.stddev_floor,
            finite_in(self.stddev_floor, 0.0, 1.0),
            "0.0..=1.0",
        )?;
        check(
            "ioshares.min_report_samples",
            self.min_report_samples,
            self.min_report_samples >= 1,
            "1 or more",
        )?;
        check(
            "ioshares.max_intf",
            self.max_intf,
            finite_in(self.max_intf, 0.01, 1000.0),
            "0.01..=1000.0",
        )?;
        check(
            "ioshares.max_rate",
            self.max_rate,
            finite_in(self.max_rate, 1.0, 1000.0),
            "1.0..=1000.0",
        )?;
        check(
            "ioshares.decay",
            self.decay,
            finite_in(self.decay, 0.0, 1.0),
            "0.0..=1.0 (0 = back to 1 at once, 1 = never decays)",
        )?;
        check(
            "ioshares.report_timeout_ms",
            self.report_timeout_ms,
            (1..=3_600_000).contains(&self.report_timeout_ms),
            "1..=3600000",
        )?;
        check(
            "ioshares.share_memory",
            self.share_memory,
            finite_in(self.share_memory, 0.0, 0.999),
            "0.0..=0.999",
        )?;
        Ok(())
    }
}
