//! Why a scenario cannot be used: [`ScenarioError`], and the typed problems of an invalid one.

use std::path::PathBuf;

/// A scenario that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Not TOML of this shape.
    #[error("{0}")]
    Parse(String),
    /// A value that cannot work.
    #[error("scenario `{scenario}`: {problem}")]
    Invalid {
        /// Its name.
        scenario: String,
        /// What.
        problem: Problem,
    },
}

/// What is wrong with a scenario ([`ScenarioError::Invalid`]), the first problem found.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Problem {
    /// The scenario's name.
    #[error("name must be 1-32 of a-z, 0-9, '-' and '_' (it names files and cgroups)")]
    Name,
    /// `duration_s`, seconds.
    #[error("duration_s = {0} must be in (0, 86400]")]
    Duration(f64),
    /// The link preset.
    #[error("link preset `{0}` is unknown (testbed, 100g)")]
    LinkPreset(String),
    /// No guests.
    #[error("no [[guest]]")]
    NoGuests,
    /// A guest.
    #[error("guest `{guest}`: {problem}")]
    Guest {
        /// Its name.
        guest: String,
        /// What.
        problem: GuestProblem,
    },
}

/// What is wrong with one guest of a scenario, the first problem found (its value as given).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GuestProblem {
    /// Its name.
    #[error("name must be 1-32 of a-z, 0-9, '-' and '_'")]
    Name,
    /// Another guest has its name.
    #[error("appears twice")]
    Twice,
    /// `vcpus`.
    #[error("vcpus = {0} must be 1..=64")]
    Vcpus(u32),
    /// `cap`, % of one CPU, and the most its vCPUs allow.
    #[error("cap = {cap} must be in (0, {max}] (% of one CPU)")]
    Cap {
        /// As given.
        cap: f64,
        /// 100 per vCPU.
        max: u32,
    },
    /// `ram`, bytes, below what the workload needs (or above 16 GiB).
    #[error("ram = {ram} bytes: this workload needs at least {need} (and at most 16 GiB)")]
    Ram {
        /// As given.
        ram: u64,
        /// What the workload needs.
        need: u64,
    },
    /// `benchex.buffer`, bytes.
    #[error("buffer = {0} must be 64 B..64 MiB")]
    Buffer(u64),
    /// `benchex.rate`, orders/s.
    #[error("rate = {0} must be 0..=1e6 orders/s")]
    Rate(f64),
    /// `benchex.clients`.
    #[error("clients = {0} must be 1..=64")]
    Clients(u32),
    /// `benchex.think_ms`, a periodic job's pause.
    #[error("benchex.think_ms = {0} must be 0 or in [0.001, 60000]")]
    Think(f64),
    /// `benchex.burst`, a periodic job's orders per iteration.
    #[error("benchex.burst = {0} must be 1..=4096")]
    Burst(u64),
    /// `benchex.think_ms` with an open loop.
    #[error("benchex.think_ms (a periodic job) runs closed loop only: rate must be 0, not {0}")]
    ThinkOpenLoop(f64),
    /// `benchex.burst` above 1 without a pause.
    #[error("benchex.burst = {0} needs benchex.think_ms > 0 (a periodic job)")]
    BurstWithoutThink(u64),
    /// `start_s`.
    #[error("start_s = {0} must be >= 0")]
    Start(f64),
    /// `report_scale`.
    #[error("report_scale = {0} must be in (0, 1000]")]
    ReportScale(f64),
    /// `report_scale_from_s`.
    #[error("report_scale_from_s = {0} must be >= 0")]
    ReportScaleFrom(f64),
    /// `weight`.
    #[error("weight = {0} must be > 0")]
    Weight(f64),
    /// `turns.at_s`.
    #[error("turns.at_s = {0} must be >= 0")]
    TurnsAt(f64),
    /// `turns.buffer`, bytes.
    #[error("turns.buffer = {0} must be 64 B..64 MiB")]
    TurnsBuffer(u64),
    /// `turns.rate`, orders/s.
    #[error("turns.rate = {0} must be 0..=1e6 orders/s")]
    TurnsRate(f64),
    /// `ram`, bytes, below what the workload it turns to needs.
    #[error("ram = {ram} bytes: the workload it turns to needs at least {need}")]
    TurnsRam {
        /// As given.
        ram: u64,
        /// What that workload needs.
        need: u64,
    },
    /// `cpu_floor`, % of one CPU, and the most its vCPUs allow.
    #[error("cpu_floor = {floor} must be in (0, {max}] (% of one CPU)")]
    CpuFloor {
        /// As given.
        floor: f64,
        /// 100 per vCPU.
        max: u32,
    },
    /// `entitlement` is 0.
    #[error("entitlement must be above 0")]
    Entitlement,
    /// `tx_share` above `tx_max`, bit/s.
    #[error("tx_share = {share} bit/s is above tx_max = {max} bit/s")]
    TxShare {
        /// As given.
        share: u64,
        /// As given.
        max: u64,
    },
}
