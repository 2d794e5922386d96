//! `[governor]`: the governor's settings and their bounds.

use super::{check, finite_in, ConfigError};
use serde::{Deserialize, Serialize};

/// `[governor]`: when the host may charge, how the charge is split, and the controller.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct GovernorConfig {
    /// Interference (fraction) above which a reporting VM counts as a victim (and is never
    /// charged as an aggressor in that period). A VM's own threshold overrides it.
    pub sla_threshold: f64,
    /// The interference the controller steers the worst victim to (at most the SLA threshold):
    /// below it the aggressors' caps rise again, so their throughput is kept.
    pub setpoint: f64,
    /// The host's own congestion test: an interval whose measured link utilisation is at least
    /// this is saturated ...
    pub congestion_util: f64,
    /// ... and a report can raise a charge only in an actuation period with at least this
    /// share of saturated intervals.
    pub congested_share: f64,
    /// Proportional gain, per unit change of the error, on the log of the total rate.
    pub kp: f64,
    /// Integral gain, per actuation period and unit of error, on the log of the total rate.
    pub ki: f64,
    /// The log of the total rate moves by at most this per actuation period.
    pub max_step: f64,
    /// The total rate never exceeds this (so the controller's own caps stop at base / max_rate).
    pub max_rate: f64,
    /// Per actuation period while no VM has reported for `report_timeout_ms`, the log of the
    /// total rate is multiplied by this (back off when the victim goes quiet).
    pub idle_decay: f64,
    /// The same meaning as in `[ioshares]`.
    pub report_timeout_ms: u64,
    /// A VM without a configured baseline averages its first this many reports.
    pub baseline_reports: u32,
    /// A faster (or steadier) report lowers the baseline to it.
    pub baseline_follows_lower: bool,
    /// The stddev baseline is at least this fraction of the baseline mean.
    pub stddev_floor: f64,
    /// Reports covering fewer requests are ignored.
    pub min_report_samples: u64,
    /// Interference is clamped to this.
    pub max_intf: f64,
}

impl Default for GovernorConfig {
    fn default() -> Self {
        Self {
            sla_threshold: 0.10,
            setpoint: 0.05,
            congestion_util: 0.90,
            congested_share: 0.10,
            kp: 0.5,
            ki: 0.5,
            max_step: 1.0,
            max_rate: 100.0,
            idle_decay: 0.80,
            report_timeout_ms: 100,
            baseline_reports: 10,
            baseline_follows_lower: true,
            stddev_floor: 0.05,
            min_report_samples: 1,
            max_intf: 10.0,
        }
    }
}

impl GovernorConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        check(
            "governor.sla_threshold",
            self.sla_threshold,
            self.sla_threshold.is_finite()
                && self.sla_threshold > 0.0
                && self.sla_threshold <= 10.0,
            "0.0 < x <= 10.0",
        )?;
        check(
            "governor.setpoint",
            self.setpoint,
            finite_in(self.setpoint, 0.0, 10.0),
            "0.0..=10.0",
        )?;
        check(
            "governor.congestion_util",
            self.congestion_util,
            finite_in(self.congestion_util, 0.0, 10.0),
            "0.0..=10.0",
        )?;
        check(
            "governor.congested_share",
            self.congested_share,
            finite_in(self.congested_share, 0.0, 1.0),
            "0.0..=1.0",
        )?;
        check(
            "governor.max_step",
            self.max_step,
            self.max_step.is_finite() && self.max_step > 0.0 && self.max_step <= 10.0,
            "0.0 < x <= 10.0",
        )?;
        check(
            "governor.kp",
            self.kp,
            finite_in(self.kp, 0.0, 100.0),
            "0.0..=100.0",
        )?;
        check(
            "governor.ki",
            self.ki,
            self.ki.is_finite() && self.ki > 0.0 && self.ki <= 100.0,
            "0.0 < x <= 100.0",
        )?;
        check(
            "governor.max_rate",
            self.max_rate,
            finite_in(self.max_rate, 1.0, 1000.0),
            "1.0..=1000.0",
        )?;
        check(
            "governor.idle_decay",
            self.idle_decay,
            finite_in(self.idle_decay, 0.0, 1.0),
            "0.0..=1.0",
        )?;
        check(
            "governor.report_timeout_ms",
            self.report_timeout_ms,
            (1..=3_600_000).contains(&self.report_timeout_ms),
            "1..=3600000",
        )?;
        check(
            "governor.baseline_reports",
            self.baseline_reports,
            (1..=100_000).contains(&self.baseline_reports),
            "1..=100000",
        )?;
        check(
            "governor.stddev_floor",
            self.stddev_floor,
            finite_in(self.stddev_floor, 0.0, 1.0),
            "0.0..=1.0",
        )?;
        check(
            "governor.min_report_samples",
            self.min_report_samples,
            self.min_report_samples >= 1,
            "1 or more",
        )?;
        check(
            "governor.max_intf",
            self.max_intf,
            finite_in(self.max_intf, 0.01, 1000.0),
            "0.01..=1000.0",
        )?;
        if self.setpoint > self.sla_threshold {
            return Err(ConfigError::Exceeds {
                key: "governor.setpoint",
                value: self.setpoint,
                limit_key: "governor.sla_threshold",
                limit: self.sla_threshold,
            });
        }
        Ok(())
    }
}
