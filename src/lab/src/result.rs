//! What a lab run reports (the JSON of `resex lab run --json`).

use serde::Serialize;

/// One VM's figures over the run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VmResult {
    /// Its name.
    pub name: String,
    /// Mean server-side latency per order, us (`None`: it answered nothing). Latency figures
    /// cover the orders that arrived after the warm-up (`LabConfig::warmup_s`).
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
    /// Mean time an order queued before its computing started, us (the paper's Fig. 2 split).
    pub queue_us: Option<f64>,
    /// Mean computing time per order, us.
    pub compute_us: Option<f64>,
    /// Mean time from posting the reply to seeing its completion, us.
    pub wait_us: Option<f64>,
}

/// The host's figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HostResult {
    /// Mean utilisation of the monitored port's egress, 0-1 (payload and headers), as the host
    /// core measured it from the monitor's counts, interval by interval (what policies see).
    pub link_util: f64,
    /// The same from softhca's own record of what it put on the wire (the ground truth).
    pub wire_util: f64,
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
    /// Time series, one point per report period (only when asked for: `LabConfig::series`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub series: Option<Series>,
    /// Each VM's bytes per interval (only when asked for: `LabConfig::traffic`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub traffic: Option<Vec<VmTraffic>>,
}

/// One VM's transmitted bytes per interval, exactly as the monitor counted them.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct VmTraffic {
    /// Its name.
    pub name: String,
    /// When it started (its first interval ends one interval later), virtual seconds.
    pub start_s: f64,
    /// The interval, ns.
    pub interval_ns: u64,
    /// Bytes sent in each interval from its start.
    pub tx_bytes: Vec<u64>,
}

/// Time series of a run, one point per report period.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct Series {
    /// End of each period, virtual seconds.
    pub t_s: Vec<f64>,
    /// The monitored port's egress utilisation in each period, 0-1.
    pub link_util: Vec<f64>,
    /// Per VM, in scenario order.
    pub vms: Vec<VmSeries>,
}

/// One VM's time series.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct VmSeries {
    /// Its name.
    pub name: String,
    /// Mean latency of the orders answered in the period, us.
    pub lat_mean_us: Vec<Option<f64>>,
    /// Their 99th percentile, us.
    pub lat_p99_us: Vec<Option<f64>>,
    /// The cap in force at the period's end, %.
    pub cap: Vec<f64>,
    /// The transmit ceiling in force at the period's end, % of the link (100: none).
    pub tx_max_pct: Vec<f64>,
    /// Reply throughput the monitor counted in the period, Mb/s.
    pub mbps: Vec<f64>,
    /// Its pricing rate at the period's end (1 without a policy).
    pub rate: Vec<f64>,
}
