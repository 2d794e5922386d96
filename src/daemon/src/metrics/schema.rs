//! The metrics schema: every family the daemon exports, its name, help text and label type,
//! declared once in the `register` constructors below (in exposition order), and the `fill`
//! functions that map a [`Snapshot`] onto the families.
//!
//! Names carry their unit (`_seconds`, `_bps`, `_ratio`, `_percent`) and counters get their
//! `_total` from the encoder, so no family is registered with a separate unit.

use super::periods::Periods;
use super::LoopMetrics;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Metric, Registry};
use resex_api::{LateQp, Snapshot, VmSnap};
use std::sync::atomic::AtomicU64;

/// A gauge holding a float.
type FGauge = Gauge<f64, AtomicU64>;
/// A per-VM counter family.
type VmCounter = Family<VmLabel, Counter>;
/// A per-VM float gauge family.
pub(super) type VmGauge = Family<VmLabel, FGauge>;

/// The label of every per-VM series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VmLabel {
    /// The VM's name.
    pub(super) vm: String,
}

/// The labels of a per-QP series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QpLabel {
    /// The VM's name.
    vm: String,
    /// The QP number, in hex (`0x107`).
    qpn: String,
}

/// The labels of `resex_vm_info`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InfoLabels {
    /// The VM's name.
    vm: String,
    /// Its id on this host (`vm1`).
    id: String,
    /// `registered`, `waiting` or `rejected`.
    state: String,
    /// How its caps are enforced.
    cap_mechanism: String,
}

/// The labels of `resex_daemon_info`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DaemonLabels {
    /// The backend.
    backend: String,
    /// The policy in force.
    policy: String,
}

/// Registers `m` as `name` and returns it (a handle sharing its value with the registry).
fn add<M: Metric + Clone>(r: &mut Registry, name: &str, help: &str, m: M) -> M {
    r.register(name, help, m.clone());
    m
}

/// Registers a new, empty metric as `name` and returns it.
pub(super) fn reg<M: Metric + Clone + Default>(r: &mut Registry, name: &str, help: &str) -> M {
    add(r, name, help, M::default())
}

/// Sets the VM's series in `f` to `x`; none where `x` is `None`.
pub(super) fn put(f: &VmGauge, vm: &VmLabel, x: Option<f64>) {
    if let Some(x) = x {
        f.get_or_create(vm).set(x);
    }
}

/// Every family the daemon exports. Struct literals register their fields in the order they
/// are written, which is the order of the exposition.
#[derive(Debug)]
pub struct HostMetrics {
    /// Totals since registration.
    counters: VmCounters,
    /// What each VM uses and is charged, and its limits.
    gauges: VmGauges,
    /// What the admin grants each VM beside what it uses.
    entitlements: Entitlements,
    /// QPs counted from the present position.
    late_qps: LateQps,
    /// The period detector's verdicts.
    periods: Periods,
    /// Queue pairs each VM has monitored.
    queue_pairs: VmGauge,
    /// One series per VM (value 1) whose labels say what it is.
    vm_info: Family<InfoLabels, Gauge>,
    /// The daemon's own figures.
    daemon: DaemonMetrics,
}

impl HostMetrics {
    /// Registers every family into `r`; the loop's histograms are shared, not copied.
    pub fn register(r: &mut Registry, lm: &LoopMetrics) -> Self {
        Self {
            counters: VmCounters::register(r),
            gauges: VmGauges::register(r),
            entitlements: Entitlements::register(r),
            late_qps: LateQps::register(r),
            periods: Periods::register(r),
            queue_pairs: reg(r, "resex_vm_queue_pairs", "Queue pairs monitored"),
            vm_info: reg(r, "resex_vm_info", "A VM the daemon knows (value 1)"),
            daemon: DaemonMetrics::register(r, lm),
        }
    }

    /// Sets every family from `s`.
    #[allow(clippy::cast_precision_loss)]
    pub fn fill(&self, s: &Snapshot) {
        for v in &s.vms {
            let vm = VmLabel { vm: v.name.clone() };
            self.counters.fill(&vm, v);
            self.gauges.fill(&vm, v);
            self.entitlements.fill(&vm, v);
            self.late_qps.fill(&v.name, &v.late_qps);
            self.periods.fill(&vm, v.period.as_ref());
            put(&self.queue_pairs, &vm, Some(v.qps as f64));
            let info = InfoLabels {
                vm: v.name.clone(),
                id: v.id.to_string(),
                state: v.state.clone(),
                cap_mechanism: v.cap_mechanism.clone(),
            };
            self.vm_info.get_or_create(&info).set(1);
        }
        self.daemon.fill(s);
    }
}

/// Per-VM totals since registration.
#[derive(Debug)]
struct VmCounters {
    mtus: VmCounter,
    tx_bytes: VmCounter,
    wqes: VmCounter,
    errors: VmCounter,
    overruns: VmCounter,
    anomalies: VmCounter,
    reports: VmCounter,
    bad_reports: VmCounter,
    rejected_registrations: VmCounter,
    lat_requests: VmCounter,
}

impl VmCounters {
    /// Registers the families.
    fn register(r: &mut Registry) -> Self {
        Self {
            mtus: reg(
                r,
                "resex_vm_mtus",
                "MTU-sized packets the VM sent (IBMon count)",
            ),
            tx_bytes: reg(
                r,
                "resex_vm_tx_bytes",
                "Bytes the VM sent through its RDMA queues",
            ),
            wqes: reg(r, "resex_vm_wqes", "Work requests the VM posted"),
            errors: reg(r, "resex_vm_errors", "Error completions in the VM's queues"),
            overruns: reg(
                r,
                "resex_monitor_overruns",
                "Times a VM's ring lapped the monitor between scans",
            ),
            anomalies: reg(
                r,
                "resex_monitor_anomalies",
                "Ring contents the monitor refused as inconsistent",
            ),
            reports: reg(
                r,
                "resex_vm_latency_reports",
                "Latency reports read from the VM's mailbox",
            ),
            bad_reports: reg(
                r,
                "resex_vm_bad_reports",
                "Mailbox blocks refused as malformed",
            ),
            rejected_registrations: reg(
                r,
                "resex_vm_rejected_registrations",
                "Registration documents refused",
            ),
            lat_requests: reg(
                r,
                "resex_vm_latency_requests",
                "Requests covered by the VM's latency reports",
            ),
        }
    }

    /// Adds the VM's totals.
    fn fill(&self, vm: &VmLabel, v: &VmSnap) {
        for (f, n) in [
            (&self.mtus, v.mtus_total),
            (&self.tx_bytes, v.tx_bytes_total),
            (&self.wqes, v.wqes_total),
            (&self.errors, v.errors),
            (&self.overruns, v.overruns),
            (&self.anomalies, v.anomalies),
            (&self.reports, v.reports),
            (&self.bad_reports, v.bad_reports),
            (&self.rejected_registrations, v.rejected_registrations),
            (&self.lat_requests, v.lat_requests_total),
        ] {
            f.get_or_create(vm).inc_by(n);
        }
    }
}

/// Per-VM use, charges and limits (absent where the snapshot has no value).
#[derive(Debug)]
struct VmGauges {
    vcpus: VmGauge,
    cpu: VmGauge,
    cpu_cap: VmGauge,
    balance: VmGauge,
    allotment: VmGauge,
    rate: VmGauge,
    lat_p50: VmGauge,
    lat_p99: VmGauge,
    interference: VmGauge,
    tx_share: VmGauge,
    tx_max: VmGauge,
    tx: VmGauge,
}

impl VmGauges {
    /// Registers the families.
    fn register(r: &mut Registry) -> Self {
        Self {
            vcpus: reg(r, "resex_vm_vcpus", "Virtual CPUs"),
            cpu: reg(
                r,
                "resex_vm_cpu_percent",
                "CPU use over the last snapshot, percent of one CPU",
            ),
            cpu_cap: reg(
                r,
                "resex_vm_cpu_cap_percent",
                "CPU cap in force, percent of one CPU (vCPUs x 100 when uncapped)",
            ),
            balance: reg(r, "resex_vm_resos_balance", "Resos balance"),
            allotment: reg(r, "resex_vm_resos_allotment", "Resos allotted per epoch"),
            rate: reg(r, "resex_vm_price_rate", "Price the policy charges the VM"),
            lat_p50: reg(
                r,
                "resex_vm_latency_p50_seconds",
                "Median request latency the guest reported",
            ),
            lat_p99: reg(
                r,
                "resex_vm_latency_p99_seconds",
                "99th-percentile request latency the guest reported",
            ),
            interference: reg(
                r,
                "resex_vm_interference_ratio",
                "Interference the policy attributes to the VM (0-1)",
            ),
            tx_share: reg(
                r,
                "resex_vm_tx_share_bps",
                "Guaranteed transmit share in the port's scheduler, bits per second (the rate lever; absent: none)",
            ),
            tx_max: reg(
                r,
                "resex_vm_tx_max_bps",
                "Transmit ceiling in the port's scheduler, bits per second (absent: none)",
            ),
            tx: reg(
                r,
                "resex_vm_tx_bps",
                "Transmit rate IBMon measured over the last snapshot, bits per second",
            ),
        }
    }

    /// Sets the VM's series.
    #[allow(clippy::cast_precision_loss)]
    fn fill(&self, vm: &VmLabel, v: &VmSnap) {
        let vcpus = f64::from(v.vcpus);
        put(&self.vcpus, vm, Some(vcpus));
        put(&self.cpu, vm, Some(v.cpu_pct));
        put(&self.cpu_cap, vm, Some(v.cap_pct.unwrap_or(100.0 * vcpus)));
        put(&self.balance, vm, v.balance);
        put(&self.allotment, vm, v.allotment);
        put(&self.rate, vm, v.rate);
        put(&self.lat_p50, vm, v.lat_p50_us.map(|x| x / 1e6));
        put(&self.lat_p99, vm, v.lat_p99_us.map(|x| x / 1e6));
        put(&self.interference, vm, v.intf_pct.map(|x| x / 100.0));
        put(&self.tx_share, vm, v.tx_share_bps.map(|b| b as f64));
        put(&self.tx_max, vm, v.tx_max_bps.map(|b| b as f64));
        put(&self.tx, vm, Some(v.bytes_per_s * 8.0));
    }
}

/// What the admin grants each VM beside what it uses (absent where no policy runs).
#[derive(Debug)]
struct Entitlements {
    entitled: VmGauge,
    cpu_floor: VmGauge,
    tx_rate: VmGauge,
    excess: VmGauge,
    tx_weight: VmGauge,
    host_slowdown: VmGauge,
    io_latency: VmGauge,
    report_discounted: VmGauge,
}

impl Entitlements {
    /// Registers the families.
    fn register(r: &mut Registry) -> Self {
        Self {
            entitled: reg(
                r,
                "resex_vm_entitled_bps",
                "Transmit rate the admin grants the VM (its entitlement), bits per second",
            ),
            cpu_floor: reg(
                r,
                "resex_vm_cpu_floor_percent",
                "Lowest CPU cap a policy may give the VM, percent of one CPU",
            ),
            tx_rate: reg(
                r,
                "resex_vm_tx_rate_bps",
                "Transmit rate on the wire the policy compares with the entitlement, bits per second",
            ),
            excess: reg(
                r,
                "resex_vm_excess",
                "1 while the VM sends above its entitlement (only then may a policy limit it)",
            ),
            tx_weight: reg(
                r,
                "resex_vm_tx_weight",
                "The VM's weight in the split of the port's excess",
            ),
            host_slowdown: reg(
                r,
                "resex_vm_host_slowdown_ratio",
                "I/O slowdown the NIC measured for the VM's work requests (where it measures it)",
            ),
            io_latency: reg(
                r,
                "resex_vm_io_latency_estimate_seconds",
                "The host's own estimate of the VM's I/O latency (post to completion, by Little's law over its outstanding work; no report needed)",
            ),
            report_discounted: reg(
                r,
                "resex_vm_report_discounted",
                "1 when the host discounted the VM's last latency report against its own evidence",
            ),
        }
    }

    /// Sets the VM's series (an entitlement of 0 is none).
    fn fill(&self, vm: &VmLabel, v: &VmSnap) {
        let flag = |b: bool| f64::from(u8::from(b));
        let entitled = (v.entitled_bps > 0.0).then_some(v.entitled_bps);
        put(&self.entitled, vm, entitled);
        put(&self.cpu_floor, vm, v.cpu_floor_pct);
        put(&self.tx_rate, vm, v.tx_rate_bps);
        put(&self.excess, vm, v.excess.map(flag));
        put(&self.tx_weight, vm, v.tx_weight.map(f64::from));
        put(&self.host_slowdown, vm, v.host_slowdown);
        put(&self.io_latency, vm, v.io_latency_us.map(|us| us / 1e6));
        let discounted = flag(v.report_discounted.is_some());
        put(&self.report_discounted, vm, Some(discounted));
    }
}

/// The QPs counted from the present position, not from their start (absent on the normal
/// path).
#[derive(Debug)]
struct LateQps {
    attached_late: Family<QpLabel, Gauge>,
    missed_completions: Family<QpLabel, Gauge>,
}

impl LateQps {
    /// Registers the families.
    fn register(r: &mut Registry) -> Self {
        Self {
            attached_late: reg(
                r,
                "resex_qp_attached_late",
                "1 for a QP registered after its rings had lapped: counted from then on only",
            ),
            missed_completions: reg(
                r,
                "resex_qp_missed_completions",
                "Completions a late QP's send CQ had delivered before counting began",
            ),
        }
    }

    /// Sets the series of VM `vm`'s late QPs (what they missed saturates at `i64::MAX`).
    fn fill(&self, vm: &str, qps: &[LateQp]) {
        for q in qps {
            let l = QpLabel {
                vm: vm.to_owned(),
                qpn: format!("{:#x}", q.qpn),
            };
            self.attached_late.get_or_create(&l).set(1);
            if let Some(n) = q.missed_completions {
                let n = i64::try_from(n).unwrap_or(i64::MAX);
                self.missed_completions.get_or_create(&l).set(n);
            }
        }
    }
}

/// The daemon's own figures: host-wide gauges, tick counters and the loop's histograms.
#[derive(Debug)]
struct DaemonMetrics {
    info: Family<DaemonLabels, Gauge>,
    link_utilization: FGauge,
    epoch_progress: FGauge,
    uptime: FGauge,
    ticks: Counter,
    ticks_skipped: Counter,
    /// The loop's tick-lateness histogram (the loop observes it; `fill` leaves it).
    _tick_lateness: Histogram,
    /// The loop's scan-duration histogram (the loop observes it; `fill` leaves it).
    _scan_duration: Histogram,
}

impl DaemonMetrics {
    /// Registers the families; the histograms are `lm`'s, shared.
    fn register(r: &mut Registry, lm: &LoopMetrics) -> Self {
        Self {
            info: reg(
                r,
                "resex_daemon_info",
                "The daemon's backend and policy (value 1)",
            ),
            link_utilization: reg(
                r,
                "resex_link_utilization_ratio",
                "Link utilisation the policy sees (0-1)",
            ),
            epoch_progress: reg(
                r,
                "resex_pricing_epoch_progress_ratio",
                "Progress through the pricing epoch (0-1)",
            ),
            uptime: reg(
                r,
                "resex_daemon_uptime_seconds",
                "Seconds since the daemon started",
            ),
            ticks: reg(r, "resex_daemon_ticks", "Control-loop ticks run"),
            ticks_skipped: reg(
                r,
                "resex_daemon_ticks_skipped",
                "Control-loop intervals skipped because the loop ran late",
            ),
            _tick_lateness: add(
                r,
                "resex_daemon_tick_lateness_seconds",
                "How late each control-loop tick started",
                lm.tick_lateness.clone(),
            ),
            _scan_duration: add(
                r,
                "resex_daemon_scan_duration_seconds",
                "Time each tick spent scanning every VM's rings",
                lm.scan.clone(),
            ),
        }
    }

    /// Sets the host-wide series from `s` (the histograms are the loop's already).
    #[allow(clippy::cast_precision_loss)]
    fn fill(&self, s: &Snapshot) {
        let h = &s.host;
        let labels = DaemonLabels {
            backend: h.backend.clone(),
            policy: h.policy.clone(),
        };
        self.info.get_or_create(&labels).set(1);
        self.link_utilization.set(h.link_util);
        self.epoch_progress.set(h.epoch_progress);
        self.uptime.set(s.uptime_ms as f64 / 1000.0);
        self.ticks.inc_by(h.ticks);
        self.ticks_skipped.inc_by(h.ticks_skipped);
    }
}
