//! What a lab run reports (the JSON of `resex lab run --json`).

use serde::Serialize;

/// One VM's figures over the run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VmResult {
    /// Its name.
    pub name: String,
    /// Mean server-side latency per order, us (`None`: it answered nothing).
    pub lat_mean_us: Option<f64>,
    /// Median, us.
    pub lat_p50_us: Option<f64>,
    /// 99th percentile, us.
    pub lat_p99_us: Option<f64>,
    /// 99.9th percentile, us.
    pub lat_p999_us: Option<f64>,
    /// Orders answered.
    pub requests: u64,
    /// Reply throughput the monitor counted, Mb/s.
    pub tx_mbps: f64,
    /// MTU-sized packets the monitor counted.
    pub mtus: u64,
    /// Mean CPU use while it ran, % of one CPU.
    pub cpu_pct_mean: f64,
    /// Mean cap in force while it ran, % (vCPUs x 100 when uncapped).
    pub cap_mean: f64,
    /// Lowest cap in force, %.
    pub cap_min: f64,
    /// Lowest Resos balance (`None` without a policy).
    pub balance_min: Option<f64>,
}

/// The host's figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HostResult {
    /// Mean utilisation of the monitored port's egress, 0-1 (payload and headers).
    pub link_util: f64,
}

/// A run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LabResult {
    /// The scenario's name.
    pub scenario: String,
    /// The policy (`none` without one).
    pub policy: String,
    /// The seed.
    pub seed: u64,
    /// Virtual seconds run.
    pub duration_s: f64,
    /// Per VM, in scenario order.
    pub vms: Vec<VmResult>,
    /// The host.
    pub host: HostResult,
}
