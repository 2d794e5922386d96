//! Policy files (`policies/*.toml`) as typed, range-checked configuration.
//!
//! Unknown keys are rejected by serde (the message names the key); out-of-range values are
//! rejected by [`PolicyConfig::validate`] with the key's dotted path and its allowed range.

pub use crate::drum::config::{ClassWeights, DrumConfig, RateAs};
use serde::{Deserialize, Serialize};

pub(crate) mod bounds;
mod governor;
mod ioshares;
mod justitia;
mod progress;

pub use bounds::ConfigError;
pub(crate) use bounds::{check, finite_in};
pub use governor::GovernorConfig;
pub use ioshares::{IoSharesConfig, IoSharesMode};
pub use justitia::JustitiaConfig;
pub use progress::ProgressConfig;

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
    /// Adaptive unfairness: a bursting VM's transmit share grows with its progress in the
    /// burst (`progress.rs`, issue 20).
    Progress,
    /// Justitia (NSDI '22) as a baseline to compare with, not a shipped policy: elephants
    /// paced by AIMD on the latency of the others (`justitia.rs`). Runs as published: no
    /// entitlement guard (Justitia has no entitlements).
    Justitia,
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
            PolicyKind::Progress | PolicyKind::Justitia => Lever::Rate,
            _ => Lever::Cpu,
        }
    }
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
    /// `[progress]` (only with `policy = "progress"`).
    #[serde(default)]
    pub progress: Option<ProgressConfig>,
    /// `[justitia]` (only with `policy = "justitia"`).
    #[serde(default)]
    pub justitia: Option<JustitiaConfig>,
    /// The policy as its paper published it, for `resex lab paper` and the Justitia baseline
    /// alone: no entitlement guard and reports believed as they come (the ResEx paper's system
    /// and Justitia had neither). Not settable from a file: on a host every shipped policy is
    /// held to the entitlements; `policy = "justitia"` sets it (a baseline to compare with).
    #[serde(skip)]
    pub as_published: bool,
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
            progress: (policy == PolicyKind::Progress).then(ProgressConfig::default),
            justitia: (policy == PolicyKind::Justitia).then(JustitiaConfig::default),
            as_published: policy == PolicyKind::Justitia,
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
        if cfg.policy == PolicyKind::Progress && cfg.progress.is_none() {
            cfg.progress = Some(ProgressConfig::default());
        }
        if cfg.policy == PolicyKind::Justitia {
            cfg.justitia.get_or_insert_with(JustitiaConfig::default);
            // A baseline as its paper published it: Justitia has no entitlements to guard.
            cfg.as_published = true;
        }
        cfg.lever.get_or_insert(Lever::default_for(cfg.policy));
        cfg.validate()?;
        Ok(cfg)
    }

    /// A line for the operator when this policy protects no tenant: a baseline as its paper
    /// published it (no entitlement guard, tenants' reports believed). `None` for every
    /// shipped policy.
    pub fn unguarded(&self) -> Option<String> {
        self.as_published.then(|| {
            format!(
                "policy {:?} runs as published, a baseline to compare with: no entitlement guard and tenants' reports believed, so a tenant is not protected from its neighbours (use a policy from policies/ on a host with tenants)",
                self.policy
            )
            .to_lowercase()
        })
    }

    /// Checks every value's range and the keys' consistency.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.check_ledger()?;
        self.check_levers()?;
        self.check_periods()?;
        self.check_sections()
    }

    /// The ledger's ranges.
    fn check_ledger(&self) -> Result<(), ConfigError> {
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
        )
    }

    /// The caps', the rates' and the balance rule's ranges.
    fn check_levers(&self) -> Result<(), ConfigError> {
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
        )
    }

    /// The epoch is whole intervals, and the actuation period whole intervals dividing it.
    fn check_periods(&self) -> Result<(), ConfigError> {
        let (l, c) = (&self.ledger, &self.caps);
        if !l.epoch_ms.is_multiple_of(l.interval_ms) {
            return Err(ConfigError::NotAMultiple {
                key: "ledger.epoch_ms",
                value: l.epoch_ms,
                of_key: "ledger.interval_ms",
                of: l.interval_ms,
            });
        }
        if !c.actuation_period_ms.is_multiple_of(l.interval_ms)
            || !l.epoch_ms.is_multiple_of(c.actuation_period_ms)
        {
            return Err(ConfigError::ActuationPeriod {
                period: c.actuation_period_ms,
                interval: l.interval_ms,
                epoch: l.epoch_ms,
            });
        }
        Ok(())
    }

    /// A policy's section only under that policy, and valid.
    fn check_sections(&self) -> Result<(), ConfigError> {
        let p = self.policy;
        section(
            p,
            PolicyKind::Ioshares,
            "ioshares",
            "an",
            self.ioshares.as_ref(),
            |s| s.validate(),
        )?;
        section(
            p,
            PolicyKind::Governor,
            "governor",
            "a",
            self.governor.as_ref(),
            |g| g.validate(),
        )?;
        section(p, PolicyKind::Drum, "drum", "a", self.drum.as_ref(), |d| {
            d.validate()
        })?;
        section(
            p,
            PolicyKind::Progress,
            "progress",
            "a",
            self.progress.as_ref(),
            |s| s.validate(),
        )?;
        section(
            p,
            PolicyKind::Justitia,
            "justitia",
            "a",
            self.justitia.as_ref(),
            |s| s.validate(),
        )
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

/// A policy's section `name`: validated under its policy `kind`, refused under another.
fn section<T>(
    policy: PolicyKind,
    kind: PolicyKind,
    name: &'static str,
    article: &'static str,
    s: Option<&T>,
    validate: impl Fn(&T) -> Result<(), ConfigError>,
) -> Result<(), ConfigError> {
    match s {
        Some(s) if policy == kind => validate(s),
        Some(_) => Err(ConfigError::SectionWithoutPolicy {
            section: name,
            article,
        }),
        None => Ok(()),
    }
}
