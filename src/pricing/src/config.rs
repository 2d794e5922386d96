//! Policy files (`policies/*.toml`) as typed, range-checked configuration.
//!
//! Unknown keys are rejected by serde (the message names the key); out-of-range values are
//! rejected by [`PolicyConfig::validate`] with the key's dotted path and its allowed range.

pub use crate::drum::config::{ClassWeights, DrumConfig, RateAs};
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Which algorithm a policy file selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PolicyKind {
    /// Paper Algorithm 1.
    Freemarket,
    /// Paper Algorithm 2.
    Ioshares,
    /// Ours: congestion-gated, split by share, proportional-integral (`governor.rs`).
    Governor,
    /// DRUM's utility maximisation on one host: x as transmit limits, z as caps (`drum/`).
    Drum,
}

/// How the link's MTUs per epoch are split between VMs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum IoSplit {
    /// Every VM gets the same share.
    #[default]
    Equal,
    /// Shares proportional to each VM's weight.
    Weight,
}

/// Which levers a policy acts through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Lever {
    /// CPU caps only (the paper).
    #[default]
    Cpu,
    /// Transmit limits only (each VM's share and ceiling in its port's scheduler).
    Rate,
    /// Both: the rate lever first, the CPU cap as the last resort.
    Both,
}

impl Lever {
    /// True when transmit limits are used.
    pub fn rate(self) -> bool {
        matches!(self, Lever::Rate | Lever::Both)
    }
    /// True when CPU caps are used.
    pub fn cpu(self) -> bool {
        matches!(self, Lever::Cpu | Lever::Both)
    }
    /// The default of a policy kind: the governor uses both, the paper's policies the CPU.
    pub fn default_for(policy: PolicyKind) -> Self {
        match policy {
            PolicyKind::Governor | PolicyKind::Drum => Lever::Both,
            _ => Lever::Cpu,
        }
    }
}

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

/// `[rates]`: bounds of transmit-limit decisions (the rate lever).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RatesConfig {
    /// Lowest ceiling ever set, percent of the link's rate.
    pub floor_pct: f64,
}

impl Default for RatesConfig {
    fn default() -> Self {
        Self { floor_pct: 5.0 }
    }
}

/// `[ledger]`: epochs, intervals and the link that is priced.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LedgerConfig {
    /// Epoch length (allotments are replenished every epoch).
    pub epoch_ms: u64,
    /// Interval length (usage is charged every interval).
    pub interval_ms: u64,
    /// Link data rate in bytes per second (8 Gb/s after 8b/10b = 1 GiB/s in the paper).
    pub link_bytes_per_sec: u64,
    /// Path MTU in bytes: the chargeable I/O quantum.
    pub path_mtu: u32,
    /// Split of the link's MTUs between VMs.
    pub io_split: IoSplit,
}

impl Default for LedgerConfig {
    fn default() -> Self {
        Self {
            epoch_ms: 1000,
            interval_ms: 1,
            link_bytes_per_sec: 1 << 30,
            path_mtu: 1024,
            io_split: IoSplit::Equal,
        }
    }
}

/// `[caps]`: bounds and timing of CPU cap decisions.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct CapsConfig {
    /// Lowest cap ever set, percent of one physical CPU.
    pub floor_pct: f64,
    /// Cap decisions are made at most once per actuation period.
    pub actuation_period_ms: u64,
}

impl Default for CapsConfig {
    fn default() -> Self {
        Self {
            floor_pct: 10.0,
            actuation_period_ms: 10,
        }
    }
}

/// `[balance_rule]`: FreeMarket's gradual cap cut when Resos run low (both policies).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct BalanceRule {
    /// Cut when the balance is below this fraction of the allotment.
    pub low_balance: f64,
    /// ... and more than this fraction of the epoch remains.
    pub min_epoch_left: f64,
    /// Each cut multiplies the cap by this factor (once per actuation period).
    pub cut_factor: f64,
}

impl Default for BalanceRule {
    fn default() -> Self {
        Self {
            low_balance: 0.10,
            min_epoch_left: 0.10,
            cut_factor: 0.90,
        }
    }
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
    /// With the rate lever: a reporting (latency-sensitive) VM's transmit share is this many
    /// times its demand (its peak rate, decaying), ...
    pub share_headroom: f64,
    /// ... at least this many Mbit/s, rounded up to a power of two of Mbit/s (steady weights).
    pub share_min_mbps: f64,
    /// Per actuation period a VM's demand keeps this much of its peak (it follows a new
    /// peak at once).
    pub demand_memory: f64,
}

impl Default for GovernorConfig {
    fn default() -> Self {
        Self {
            share_headroom: 2.0,
            share_min_mbps: 128.0,
            demand_memory: 0.99,
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

/// A whole policy file.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyConfig {
    /// The algorithm.
    pub policy: PolicyKind,
    /// The levers it acts through (default: `cpu`; the governor's: `both`).
    #[serde(default)]
    pub lever: Option<Lever>,
    /// `[rates]`.
    #[serde(default)]
    pub rates: RatesConfig,
    /// `[ledger]`.
    #[serde(default)]
    pub ledger: LedgerConfig,
    /// `[caps]`.
    #[serde(default)]
    pub caps: CapsConfig,
    /// `[balance_rule]`.
    #[serde(default)]
    pub balance_rule: BalanceRule,
    /// `[ioshares]` (only with `policy = "ioshares"`).
    #[serde(default)]
    pub ioshares: Option<IoSharesConfig>,
    /// `[governor]` (only with `policy = "governor"`).
    #[serde(default)]
    pub governor: Option<GovernorConfig>,
    /// `[drum]` (only with `policy = "drum"`).
    #[serde(default)]
    pub drum: Option<DrumConfig>,
}

/// A policy file that cannot be used.
#[derive(Debug, Error, PartialEq)]
pub enum ConfigError {
    /// Not TOML, an unknown key, or a value of the wrong type.
    #[error("{0}")]
    Parse(String),
    /// A value outside its allowed range.
    #[error("`{key}` = {value} is out of range: allowed {allowed}")]
    OutOfRange {
        /// Dotted path of the key.
        key: &'static str,
        /// The value given.
        value: String,
        /// The allowed range, for people.
        allowed: &'static str,
    },
    /// Keys that do not fit together.
    #[error("{0}")]
    Inconsistent(String),
}

pub(crate) fn check<T: PartialOrd + std::fmt::Display + Copy>(
    key: &'static str,
    value: T,
    ok: bool,
    allowed: &'static str,
) -> Result<(), ConfigError> {
    if ok {
        Ok(())
    } else {
        Err(ConfigError::OutOfRange {
            key,
            value: value.to_string(),
            allowed,
        })
    }
}

pub(crate) fn finite_in(v: f64, lo: f64, hi: f64) -> bool {
    v.is_finite() && v >= lo && v <= hi
}

impl PolicyConfig {
    /// The defaults of a policy kind (what the shipped files say).
    pub fn defaults(policy: PolicyKind) -> Self {
        Self {
            policy,
            lever: Some(Lever::default_for(policy)),
            rates: RatesConfig::default(),
            ledger: LedgerConfig::default(),
            caps: CapsConfig::default(),
            balance_rule: BalanceRule::default(),
            ioshares: (policy == PolicyKind::Ioshares).then(IoSharesConfig::default),
            governor: (policy == PolicyKind::Governor).then(GovernorConfig::default),
            drum: (policy == PolicyKind::Drum).then(DrumConfig::default),
        }
    }

    /// Parses and validates a policy file's text.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let mut cfg: PolicyConfig =
            toml::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
        if cfg.policy == PolicyKind::Ioshares && cfg.ioshares.is_none() {
            cfg.ioshares = Some(IoSharesConfig::default());
        }
        if cfg.policy == PolicyKind::Governor && cfg.governor.is_none() {
            cfg.governor = Some(GovernorConfig::default());
        }
        if cfg.policy == PolicyKind::Drum && cfg.drum.is_none() {
            cfg.drum = Some(DrumConfig::default());
        }
        cfg.lever.get_or_insert(Lever::default_for(cfg.policy));
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks every value's range and the keys' consistency.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let l = &self.ledger;
        check(
            "ledger.interval_ms",
            l.interval_ms,
            (1..=1000).contains(&l.interval_ms),
            "1..=1000",
        )?;
        check(
            "ledger.epoch_ms",
            l.epoch_ms,
            (1..=3_600_000).contains(&l.epoch_ms),
            "1..=3600000",
        )?;
        check(
            "ledger.link_bytes_per_sec",
            l.link_bytes_per_sec,
            (1..=1 << 40).contains(&l.link_bytes_per_sec),
            "1..=1099511627776 (1 TiB/s)",
        )?;
        check(
            "ledger.path_mtu",
            l.path_mtu,
            [256, 512, 1024, 2048, 4096].contains(&l.path_mtu),
            "one of 256, 512, 1024, 2048, 4096",
        )?;
        let c = &self.caps;
        check(
            "caps.floor_pct",
            c.floor_pct,
            finite_in(c.floor_pct, 1.0, 100.0),
            "1.0..=100.0",
        )?;
        check(
            "caps.actuation_period_ms",
            c.actuation_period_ms,
            (1..=60_000).contains(&c.actuation_period_ms),
            "1..=60000",
        )?;
        check(
            "rates.floor_pct",
            self.rates.floor_pct,
            finite_in(self.rates.floor_pct, 0.1, 100.0),
            "0.1..=100.0",
        )?;
        let b = &self.balance_rule;
        check(
            "balance_rule.low_balance",
            b.low_balance,
            finite_in(b.low_balance, 0.0, 1.0),
            "0.0..=1.0",
        )?;
        check(
            "balance_rule.min_epoch_left",
            b.min_epoch_left,
            finite_in(b.min_epoch_left, 0.0, 1.0),
            "0.0..=1.0",
        )?;
        check(
            "balance_rule.cut_factor",
            b.cut_factor,
            b.cut_factor.is_finite() && b.cut_factor > 0.0 && b.cut_factor <= 1.0,
            "0.0 < x <= 1.0",
        )?;
        if !l.epoch_ms.is_multiple_of(l.interval_ms) {
            return Err(ConfigError::Inconsistent(format!(
                "`ledger.epoch_ms` ({}) must be a multiple of `ledger.interval_ms` ({})",
                l.epoch_ms, l.interval_ms
            )));
        }
        if !c.actuation_period_ms.is_multiple_of(l.interval_ms)
            || !l.epoch_ms.is_multiple_of(c.actuation_period_ms)
        {
            return Err(ConfigError::Inconsistent(format!(
                "`caps.actuation_period_ms` ({}) must be a multiple of `ledger.interval_ms` ({}) \
                 and divide `ledger.epoch_ms` ({})",
                c.actuation_period_ms, l.interval_ms, l.epoch_ms
            )));
        }
        match (self.policy, &self.ioshares) {
            (PolicyKind::Ioshares, Some(s)) => s.validate()?,
            (_, Some(_)) => {
                return Err(ConfigError::Inconsistent(
                    "an `[ioshares]` section needs `policy = \"ioshares\"`".into(),
                ))
            }
            _ => {}
        }
        match (self.policy, &self.governor) {
            (PolicyKind::Governor, Some(g)) => g.validate()?,
            (_, Some(_)) => {
                return Err(ConfigError::Inconsistent(
                    "a `[governor]` section needs `policy = \"governor\"`".into(),
                ))
            }
            _ => {}
        }
        match (self.policy, &self.drum) {
            (PolicyKind::Drum, Some(d)) => d.validate()?,
            (_, Some(_)) => {
                return Err(ConfigError::Inconsistent(
                    "a `[drum]` section needs `policy = \"drum\"`".into(),
                ))
            }
            _ => {}
        }
        Ok(())
    }

    /// The levers in force.
    pub fn lever(&self) -> Lever {
        self.lever.unwrap_or(Lever::default_for(self.policy))
    }

    /// Intervals per epoch.
    pub fn intervals_per_epoch(&self) -> u64 {
        self.ledger.epoch_ms / self.ledger.interval_ms
    }

    /// Intervals per actuation period.
    pub fn intervals_per_actuation(&self) -> u64 {
        self.caps.actuation_period_ms / self.ledger.interval_ms
    }

    /// The link's MTUs per epoch (1 GiB/s and 1 KiB over 1 s: 1 048 576).
    pub fn link_mtus_per_epoch(&self) -> f64 {
        let l = &self.ledger;
        // Exact in f64 for every validated value (< 2^53).
        (l.link_bytes_per_sec as f64) * (l.epoch_ms as f64 / 1000.0) / f64::from(l.path_mtu)
    }
}

impl IoSharesConfig {
    fn validate(&self) -> Result<(), ConfigError> {
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

impl GovernorConfig {
    fn validate(&self) -> Result<(), ConfigError> {
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
        check(
            "governor.share_headroom",
            self.share_headroom,
            finite_in(self.share_headroom, 1.0, 100.0),
            "1.0..=100.0",
        )?;
        check(
            "governor.share_min_mbps",
            self.share_min_mbps,
            finite_in(self.share_min_mbps, 1.0, 1e6),
            "1.0..=1000000.0",
        )?;
        check(
            "governor.demand_memory",
            self.demand_memory,
            finite_in(self.demand_memory, 0.0, 1.0),
            "0.0..=1.0",
        )?;
        if self.setpoint > self.sla_threshold {
            return Err(ConfigError::Inconsistent(format!(
                "`governor.setpoint` ({}) must not exceed `governor.sla_threshold` ({})",
                self.setpoint, self.sla_threshold
            )));
        }
        Ok(())
    }
}
