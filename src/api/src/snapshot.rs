//! The daemon's state as the API serves it (one JSON object per line). Field names are the
//! API's contract: see the README's "resexd API" section.

use resex_common::VmId;
use serde::{Deserialize, Serialize};

/// The whole host.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Snapshot {
    /// Milliseconds since the daemon started.
    pub uptime_ms: u64,
    /// The host line.
    pub host: HostSnap,
    /// One entry per VM, by id.
    pub vms: Vec<VmSnap>,
}

/// Host-wide figures.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct HostSnap {
    /// Backend.
    pub backend: String,
    /// The policy in force (`none`: monitoring only).
    pub policy: String,
    /// The control loop's interval, ms.
    pub interval_ms: u64,
    /// Fraction of the current epoch done.
    pub epoch_progress: f64,
    /// Link utilisation the pricing used in the last interval (0..1).
    pub link_util: f64,
    /// MTUs per second of all VMs.
    pub mtus_per_s: f64,
    /// Tick lateness since the previous snapshot (`snapshot_ms`), us: p50, p99, max.
    pub tick_late_p50_us: f64,
    /// p99.
    pub tick_late_p99_us: f64,
    /// max.
    pub tick_late_max_us: f64,
    /// Ticks so far.
    pub ticks: u64,
    /// Ticks skipped because the loop fell more than an interval behind.
    pub ticks_skipped: u64,
    /// Scan time per tick since the previous snapshot, us (mean).
    pub scan_us: f64,
    /// The priority the control loop's thread runs at (`SCHED_FIFO priority 10`, `nice -10`,
    /// or `normal priority (why)`); empty from an older daemon.
    #[serde(default)]
    pub loop_priority: String,
}

/// One VM.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct VmSnap {
    /// The VM's id on this host (given when first seen, never reused while resexd runs).
    pub id: VmId,
    /// Name.
    pub name: String,
    /// `registered`, `waiting` (no registration yet) or `rejected`.
    pub state: String,
    /// vCPUs.
    pub vcpus: u32,
    /// CPU over the last snapshot period, percent of one physical CPU.
    pub cpu_pct: f64,
    /// The cap the daemon set (None: the VM's own setting).
    pub cap_pct: Option<f64>,
    /// How caps are enforced.
    pub cap_mechanism: String,
    /// Why the cap last changed.
    pub cap_reason: Option<String>,
    /// Its guaranteed transmit share, bits per second (the rate lever; None: no setting).
    #[serde(default)]
    pub tx_share_bps: Option<u64>,
    /// Its transmit ceiling, bits per second (None: no setting).
    #[serde(default)]
    pub tx_max_bps: Option<u64>,
    /// Its rate lever, for people (None: it has none).
    #[serde(default)]
    pub tx_lever: Option<String>,
    /// Why its transmit limit last changed.
    #[serde(default)]
    pub tx_reason: Option<String>,
    /// Its weight in the split of the port's excess (None: from its guarantee).
    #[serde(default)]
    pub tx_weight: Option<u32>,
    /// What the admin grants it on the link, bits per second: its entitlement (configured,
    /// or an equal split of what the configured ones leave).
    #[serde(default)]
    pub entitled_bps: f64,
    /// The lowest cap a policy may give it, percent of one CPU (None: no policy).
    #[serde(default)]
    pub cpu_floor_pct: Option<f64>,
    /// Its transmit rate on the wire against its entitlement, bits per second, smoothed over
    /// about 100 ms (None: no policy).
    #[serde(default)]
    pub tx_rate_bps: Option<f64>,
    /// Sending above its entitlement: the only state in which a policy may limit it (None: no
    /// policy).
    #[serde(default)]
    pub excess: Option<bool>,
    /// Its I/O slowdown as the NIC measured it over its last report period (the mean sojourn of
    /// its work requests over their time on the wire plus their quiet wait, minus 1), where
    /// the NIC measures it.
    #[serde(default)]
    pub host_slowdown: Option<f64>,
    /// The host's own estimate of the VM's I/O latency over the last snapshot period, us: the
    /// mean time from posting a send work request to its completion, by Little's law (work
    /// outstanding, sampled every tick, over the rate of posting). Needs no report from the
    /// guest; where the rings show outstanding work (soft-RoCE send queues), else None.
    #[serde(default)]
    pub io_latency_us: Option<f64>,
    /// What the host made of its last report, when it discounted it: for people.
    #[serde(default)]
    pub report_discounted: Option<String>,
    /// Resos balance.
    pub balance: Option<f64>,
    /// Allotment this epoch.
    pub allotment: Option<f64>,
    /// Charge rate.
    pub rate: Option<f64>,
    /// MTU-sized packets per second.
    pub mtus_per_s: f64,
    /// Bytes sent per second.
    pub bytes_per_s: f64,
    /// Send WQEs per second.
    pub wqes_per_s: f64,
    /// Latest report's mean latency, us.
    pub lat_mean_us: Option<f64>,
    /// Latest report's p50, us.
    pub lat_p50_us: Option<f64>,
    /// Latest report's p99, us.
    pub lat_p99_us: Option<f64>,
    /// Interference the VM's reports show (fraction).
    pub intf_pct: Option<f64>,
    /// The VM its reports blamed.
    pub interferer: Option<String>,
    /// Queue pairs monitored.
    pub qps: usize,
    /// Totals since registration.
    pub mtus_total: u64,
    /// Bytes sent since registration.
    pub tx_bytes_total: u64,
    /// WQEs since registration.
    pub wqes_total: u64,
    /// Error CQEs.
    pub errors: u64,
    /// Times the monitor was lapped.
    pub overruns: u64,
    /// Ring anomalies.
    pub anomalies: u64,
    /// Reports accepted.
    pub reports: u64,
    /// Requests covered by all reports so far.
    pub lat_requests_total: u64,
    /// Sum over reports of count x mean, us (mean over any span = its delta / requests' delta).
    pub lat_sum_us: f64,
    /// Sum over reports of count x p99, us (the count-weighted mean of interval p99s).
    pub lat_p99_sum_us: f64,
    /// Mailbox blocks refused.
    pub bad_reports: u64,
    /// Registrations refused.
    pub rejected_registrations: u64,
    /// The last refusal.
    pub last_error: Option<String>,
    /// Queue pairs whose counting started late: registered after their rings had lapped, so
    /// what they did before is not in the totals. Empty on the normal path (the agent registers
    /// a QP before it is used) and from an older daemon.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub late_qps: Vec<LateQp>,
    /// What the host's period detector made of the bytes it counted the VM sending, 1 ms at a
    /// time (None: detection is off, or the daemon has not fed it yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period: Option<PeriodSnap>,
}

/// The host's verdict on a VM's periodicity (a training job's iterations), from its exact
/// transmitted bytes per interval, with no help from the guest.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct PeriodSnap {
    /// The period found (None: not periodic, and `why_not` says why).
    pub found: Option<PeriodFound>,
    /// Why no period was found (a silent or steady sender, too few samples, no repeating
    /// pattern, ...); beside `found`, why the latest looks found none while the period found
    /// still stands (it stands over a few).
    pub why_not: Option<String>,
    /// Intervals of the VM's transmit history the detector looked at (for a VM that never
    /// sent, and so was not looked at: the intervals seen).
    pub samples: u64,
    /// How long ago it looked, ms.
    pub age_ms: u64,
}

/// A VM's periodic communication as the host measured it.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct PeriodFound {
    /// The iteration time, ms.
    pub period_ms: f64,
    /// Fraction of the intervals in which it sent, in [0, 1].
    pub duty: f64,
    /// Bytes sent per iteration.
    pub bytes_per_period: f64,
    /// When its latest communication arc in the window looked at began, Unix time in ms (the
    /// detector's fit: its phase plus a whole number of periods). With the period it says when
    /// the next ones begin; hosts whose clocks agree can compare their jobs' timing (a phase
    /// taken modulo the period since the epoch could not be: a period 1 ns off moves it by
    /// seconds).
    pub last_start_unix_ms: f64,
    /// How sure the detector is, in [0, 1].
    pub confidence: f64,
    /// The time between its two latest arc starts as its host saw them in its bytes, ms (None:
    /// fewer than two seen in the last three periods). `last_start_unix_ms` is then the
    /// latest seen: a job whose iterations have just sped up or slowed down is timed by its
    /// latest ones, not by the window's mean.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_period_ms: Option<f64>,
}

/// A queue pair counted from the present position instead of from its start.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct LateQp {
    /// Its QP number.
    pub qpn: u32,
    /// Completions its send CQ had delivered before counting began (the CQ's consumer index
    /// past the start the registration gave; a CQ shared by several QPs counts theirs too), if
    /// the guest's doorbell record could be read.
    pub missed_completions: Option<u64>,
}
