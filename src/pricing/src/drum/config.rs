//! `[drum]`: the DRUM policy's utilities, the host's capacities, the solver's effort and how
//! its solution becomes transmit limits and caps.

use crate::config::bounds::{check, finite_in, ConfigError};
use serde::{Deserialize, Serialize};

/// How a VM's WQE rate x becomes a transmit limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum RateAs {
    /// `tx_share = x`: a guaranteed, work-conserving share (an idle VM's share goes to the
    /// others).
    #[default]
    Share,
    /// `tx_max = x`: a ceiling (not work conserving).
    Ceiling,
    /// Both.
    Both,
}

/// `[drum.weights]`: the utility weight of each class of VM, as the host sees it behave.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClassWeights {
    /// VMs sending within their entitlement (the host's measure; whether a VM runs the agent
    /// or what it reports plays no part).
    pub light: f64,
    /// Every other VM (in excess of its entitlement).
    pub bulk: f64,
}

impl Default for ClassWeights {
    /// Light VMs weigh 10: at alpha = 1/2 rates go as the weight squared, so their weights in
    /// the excess come about 100:1 before a bulk VM's while both are backlogged.
    fn default() -> Self {
        Self {
            light: 10.0,
            bulk: 1.0,
        }
    }
}

/// `[drum]`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct DrumConfig {
    /// The fairness exponent of the WQE-rate utility, 0 < alpha < 1.
    pub alpha: f64,
    /// Only the k largest weighted utilities count (at most the number of active VMs).
    pub k: usize,
    /// Weight of the CQ latency utility `-beta sum_j z_j^-2` (z in CPUs).
    pub beta: f64,
    /// The ADMM penalty.
    pub rho: f64,
    /// ADMM iterations per actuation period (each warm-started from the last period's).
    pub iterations: u32,
    /// The CPU the VMs' CQ service may take in all, percent of one CPU (`0`: no host-wide
    /// limit, each VM's vCPUs are its own: a host whose CPUs are not oversubscribed).
    pub cpu_capacity_pct: f64,
    /// The link fraction the VMs' WQE rates may take in all.
    pub link_capacity: f64,
    /// `a_j` (CPU per unit of link rate) is clamped to `[a_min, a_max]` ...
    pub a_min: f64,
    /// ... see `a_min`.
    pub a_max: f64,
    /// ... and kept this much of its old value per period (a VM's new measurement gets the rest).
    pub a_memory: f64,
    /// Per period a VM's demand keeps this much of its peak (it follows a new peak at once); a
    /// VM whose demand falls below `min_demand` of the link leaves the problem.
    pub demand_memory: f64,
    /// See `demand_memory`.
    pub min_demand: f64,
    /// How x becomes a transmit limit.
    pub rate_as: RateAs,
    /// Transmit limits move in steps of this fraction of the link (fewer rewrites).
    pub rate_step: f64,
    /// Caps move in steps of this many percentage points.
    pub cap_step_pct: f64,
    /// The weights of the classes.
    pub weights: ClassWeights,
}

impl Default for DrumConfig {
    fn default() -> Self {
        Self {
            alpha: 0.5,
            k: 1024,
            beta: 1e-3,
            rho: 1.0,
            iterations: 3,
            cpu_capacity_pct: 0.0,
            link_capacity: 1.0,
            a_min: 0.01,
            a_max: 100.0,
            a_memory: 0.9,
            demand_memory: 0.99,
            min_demand: 1e-4,
            rate_as: RateAs::Share,
            rate_step: 0.01,
            cap_step_pct: 1.0,
            weights: ClassWeights::default(),
        }
    }
}

impl DrumConfig {
    /// Checks every range; errors name the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let pos = |v: f64| v.is_finite() && v > 0.0;
        check(
            "drum.alpha",
            self.alpha,
            pos(self.alpha) && self.alpha < 1.0,
            "0.0 < x < 1.0",
        )?;
        check(
            "drum.k",
            self.k,
            (1..=1 << 20).contains(&self.k),
            "1..=1048576",
        )?;
        check(
            "drum.beta",
            self.beta,
            finite_in(self.beta, 1e-12, 1e6),
            "1e-12..=1e6",
        )?;
        check(
            "drum.rho",
            self.rho,
            finite_in(self.rho, 1e-6, 1e6),
            "1e-6..=1e6",
        )?;
        check(
            "drum.iterations",
            self.iterations,
            (1..=1000).contains(&self.iterations),
            "1..=1000",
        )?;
        check(
            "drum.cpu_capacity_pct",
            self.cpu_capacity_pct,
            finite_in(self.cpu_capacity_pct, 0.0, 1e6),
            "0.0..=1000000.0 (0: no host-wide limit)",
        )?;
        check(
            "drum.link_capacity",
            self.link_capacity,
            pos(self.link_capacity) && self.link_capacity <= 1.0,
            "0.0 < x <= 1.0",
        )?;
        check(
            "drum.a_min",
            self.a_min,
            finite_in(self.a_min, 1e-6, 1e6),
            "1e-6..=1e6",
        )?;
        check(
            "drum.a_max",
            self.a_max,
            finite_in(self.a_max, self.a_min, 1e6),
            "a_min..=1e6",
        )?;
        for (key, v) in [
            ("drum.a_memory", self.a_memory),
            ("drum.demand_memory", self.demand_memory),
        ] {
            check(key, v, finite_in(v, 0.0, 0.999_999), "0.0..=0.999999")?;
        }
        check(
            "drum.min_demand",
            self.min_demand,
            finite_in(self.min_demand, 0.0, 1.0),
            "0.0..=1.0",
        )?;
        check(
            "drum.rate_step",
            self.rate_step,
            finite_in(self.rate_step, 1e-6, 0.5),
            "1e-6..=0.5",
        )?;
        check(
            "drum.cap_step_pct",
            self.cap_step_pct,
            finite_in(self.cap_step_pct, 0.01, 50.0),
            "0.01..=50.0",
        )?;
        for (key, v) in [
            ("drum.weights.light", self.weights.light),
            ("drum.weights.bulk", self.weights.bulk),
        ] {
            check(key, v, finite_in(v, 1e-3, 1e3), "1e-3..=1e3")?;
        }
        Ok(())
    }
}
