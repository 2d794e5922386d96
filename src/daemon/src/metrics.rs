//! Prometheus metrics: `resexd --metrics 127.0.0.1:9464` serves `/metrics` in the text
//! exposition format (prometheus-client's OpenMetrics text, which Prometheus scrapes). Per-VM series carry a `vm` label; counters end in
//! `_total`, times are seconds. The control loop feeds two histograms (tick lateness, scan
//! duration); everything else is read from the latest snapshot at scrape time, so a scrape
//! never touches the loop.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use resex_api::Snapshot;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What the control loop observes itself.
#[derive(Debug, Clone)]
pub struct LoopMetrics {
    /// How late each tick started, seconds.
    pub tick_lateness: Histogram,
    /// How long each tick's scan of every VM took, seconds.
    pub scan: Histogram,
}

impl Default for LoopMetrics {
    fn default() -> Self {
        // 1 us to about 16 ms, doubling.
        let b = || Histogram::new(exponential_buckets(1e-6, 2.0, 15));
        Self {
            tick_lateness: b(),
            scan: b(),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VmLabel {
    vm: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QpLabel {
    vm: String,
    qpn: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InfoLabels {
    vm: String,
    id: String,
    state: String,
    cap_mechanism: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DaemonLabels {
    backend: String,
    policy: String,
}

type FGauge = Gauge<f64, AtomicU64>;

/// The exposition text for a snapshot and the loop's histograms.
pub fn encode(s: &Snapshot, lm: &LoopMetrics) -> String {
    let mut r = Registry::default();
    let counter = |r: &mut Registry, name: &str, help: &str, f: fn(&resex_api::VmSnap) -> u64| {
        let fam = Family::<VmLabel, Counter>::default();
        for v in &s.vms {
            fam.get_or_create(&VmLabel { vm: v.name.clone() })
                .inc_by(f(v));
        }
        r.register(name, help, fam);
    };
    counter(
        &mut r,
        "resex_vm_mtus",
        "MTU-sized packets the VM sent (IBMon count)",
        |v| v.mtus_total,
    );
    counter(
        &mut r,
        "resex_vm_tx_bytes",
        "Bytes the VM sent through its RDMA queues",
        |v| v.tx_bytes_total,
    );
    counter(
        &mut r,
        "resex_vm_wqes",
        "Work requests the VM posted",
        |v| v.wqes_total,
    );
    counter(
        &mut r,
        "resex_vm_errors",
        "Error completions in the VM's queues",
        |v| v.errors,
    );
    counter(
        &mut r,
        "resex_monitor_overruns",
        "Times a VM's ring lapped the monitor between scans",
        |v| v.overruns,
    );
    counter(
        &mut r,
        "resex_monitor_anomalies",
        "Ring contents the monitor refused as inconsistent",
        |v| v.anomalies,
    );
    counter(
        &mut r,
        "resex_vm_latency_reports",
        "Latency reports read from the VM's mailbox",
        |v| v.reports,
    );
    counter(
        &mut r,
        "resex_vm_bad_reports",
        "Mailbox blocks refused as malformed",
        |v| v.bad_reports,
    );
    counter(
        &mut r,
        "resex_vm_rejected_registrations",
        "Registration documents refused",
        |v| v.rejected_registrations,
    );
    counter(
        &mut r,
        "resex_vm_latency_requests",
        "Requests covered by the VM's latency reports",
        |v| v.lat_requests_total,
    );

    let gauge = |r: &mut Registry,
                 name: &str,
                 help: &str,
                 f: &dyn Fn(&resex_api::VmSnap) -> Option<f64>| {
        vm_gauge(r, s, name, help, f);
    };
    gauge(&mut r, "resex_vm_vcpus", "Virtual CPUs", &|v| {
        Some(f64::from(v.vcpus))
    });
    gauge(
        &mut r,
        "resex_vm_cpu_percent",
        "CPU use over the last snapshot, percent of one CPU",
        &|v| Some(v.cpu_pct),
    );
    gauge(
        &mut r,
        "resex_vm_cpu_cap_percent",
        "CPU cap in force, percent of one CPU (vCPUs x 100 when uncapped)",
        &|v| Some(v.cap_pct.unwrap_or(100.0 * f64::from(v.vcpus))),
    );
    gauge(&mut r, "resex_vm_resos_balance", "Resos balance", &|v| {
        v.balance
    });
    gauge(
        &mut r,
        "resex_vm_resos_allotment",
        "Resos allotted per epoch",
        &|v| v.allotment,
    );
    gauge(
        &mut r,
        "resex_vm_price_rate",
        "Price the policy charges the VM",
        &|v| v.rate,
    );
    gauge(
        &mut r,
        "resex_vm_latency_p50_seconds",
        "Median request latency the guest reported",
        &|v| v.lat_p50_us.map(|x| x / 1e6),
    );
    gauge(
        &mut r,
        "resex_vm_latency_p99_seconds",
        "99th-percentile request latency the guest reported",
        &|v| v.lat_p99_us.map(|x| x / 1e6),
    );
    gauge(
        &mut r,
        "resex_vm_interference_ratio",
        "Interference the policy attributes to the VM (0-1)",
        &|v| v.intf_pct.map(|x| x / 100.0),
    );
    gauge(
        &mut r,
        "resex_vm_tx_share_bps",
        "Guaranteed transmit share in the port's scheduler, bits per second (the rate lever; absent: none)",
        &|v| v.tx_share_bps.map(|b| b as f64),
    );
    gauge(
        &mut r,
        "resex_vm_tx_max_bps",
        "Transmit ceiling in the port's scheduler, bits per second (absent: none)",
        &|v| v.tx_max_bps.map(|b| b as f64),
    );
    gauge(
        &mut r,
        "resex_vm_tx_bps",
        "Transmit rate IBMon measured over the last snapshot, bits per second",
        &|v| Some(v.bytes_per_s * 8.0),
    );
    entitlement_gauges(&mut r, s);
    late_qp_gauges(&mut r, s);
    gauge(
        &mut r,
        "resex_vm_queue_pairs",
        "Queue pairs monitored",
        &|v| Some(v.qps as f64),
    );

    let info = Family::<InfoLabels, Gauge>::default();
    for v in &s.vms {
        info.get_or_create(&InfoLabels {
            vm: v.name.clone(),
            id: v.id.to_string(),
            state: v.state.clone(),
            cap_mechanism: v.cap_mechanism.clone(),
        })
        .set(1);
    }
    r.register("resex_vm_info", "A VM the daemon knows (value 1)", info);

    let h = &s.host;
    let dinfo = Family::<DaemonLabels, Gauge>::default();
    dinfo
        .get_or_create(&DaemonLabels {
            backend: h.backend.clone(),
            policy: h.policy.clone(),
        })
        .set(1);
    r.register(
        "resex_daemon_info",
        "The daemon's backend and policy (value 1)",
        dinfo,
    );
    let host_gauge = |r: &mut Registry, name: &str, help: &str, x: f64| {
        let g = FGauge::default();
        g.set(x);
        r.register(name, help, g);
    };
    host_gauge(
        &mut r,
        "resex_link_utilization_ratio",
        "Link utilisation the policy sees (0-1)",
        h.link_util,
    );
    host_gauge(
        &mut r,
        "resex_pricing_epoch_progress_ratio",
        "Progress through the pricing epoch (0-1)",
        h.epoch_progress,
    );
    #[allow(clippy::cast_precision_loss)]
    host_gauge(
        &mut r,
        "resex_daemon_uptime_seconds",
        "Seconds since the daemon started",
        s.uptime_ms as f64 / 1000.0,
    );
    let c = Counter::<u64>::default();
    c.inc_by(h.ticks);
    r.register("resex_daemon_ticks", "Control-loop ticks run", c);
    let c = Counter::<u64>::default();
    c.inc_by(h.ticks_skipped);
    r.register(
        "resex_daemon_ticks_skipped",
        "Control-loop intervals skipped because the loop ran late",
        c,
    );
    r.register(
        "resex_daemon_tick_lateness_seconds",
        "How late each control-loop tick started",
        lm.tick_lateness.clone(),
    );
    r.register(
        "resex_daemon_scan_duration_seconds",
        "Time each tick spent scanning every VM's rings",
        lm.scan.clone(),
    );
    let mut out = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &r) {
        tracing::error!("encoding metrics: {e}");
    }
    out
}

/// Why the metrics endpoint could not start.
#[derive(Debug, thiserror::Error)]
#[error("metrics endpoint on {addr}: {why}")]
pub struct MetricsError {
    addr: String,
    why: String,
}

/// The running `/metrics` endpoint; stops when dropped.
#[derive(Debug)]
pub struct MetricsServer {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// The address it listens on (with the port the OS chose for port 0).
    pub addr: std::net::SocketAddr,
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// prometheus-client writes OpenMetrics text (Prometheus's own scrape format since 2.x).
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Serves `/metrics` on `addr` (e.g. `127.0.0.1:9464`), reading snapshots from `snap`.
pub fn serve(
    addr: &str,
    snap: impl Fn() -> Arc<Snapshot> + Send + 'static,
    lm: LoopMetrics,
) -> Result<MetricsServer, MetricsError> {
    let err = |why: String| MetricsError {
        addr: addr.to_owned(),
        why,
    };
    let server = tiny_http::Server::http(addr).map_err(|e| err(e.to_string()))?;
    let bound = server
        .server_addr()
        .to_ip()
        .ok_or_else(|| err("not an IP address".into()))?;
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let thread = std::thread::Builder::new()
        .name("resexd-metrics".into())
        .spawn(move || {
            while !flag.load(Ordering::Acquire) {
                let req = match server.recv_timeout(Duration::from_millis(200)) {
                    Ok(Some(r)) => r,
                    Ok(None) => continue,
                    Err(e) => {
                        tracing::warn!("metrics endpoint: {e}");
                        continue;
                    }
                };
                let path = req.url().split('?').next().unwrap_or("");
                let resp = if path == "/metrics" && *req.method() == tiny_http::Method::Get {
                    let body = encode(&snap(), &lm);
                    tiny_http::Response::from_string(body).with_header(
                        tiny_http::Header::from_bytes("Content-Type", CONTENT_TYPE)
                            .expect("a valid header"),
                    )
                } else {
                    tiny_http::Response::from_string("resexd: metrics are at /metrics\n")
                        .with_status_code(404)
                };
                let _ = req.respond(resp);
            }
        })
        .map_err(|e| err(e.to_string()))?;
    Ok(MetricsServer {
        stop,
        thread: Some(thread),
        addr: bound,
    })
}

/// One gauge per VM where `f` has a value.
fn vm_gauge(
    r: &mut Registry,
    s: &Snapshot,
    name: &str,
    help: &str,
    f: &dyn Fn(&resex_api::VmSnap) -> Option<f64>,
) {
    let fam = Family::<VmLabel, FGauge>::default();
    for v in &s.vms {
        if let Some(x) = f(v) {
            fam.get_or_create(&VmLabel { vm: v.name.clone() }).set(x);
        }
    }
    r.register(name, help, fam);
}

/// The QPs counted from the present position, not from their start (absent on the normal path).
fn late_qp_gauges(r: &mut Registry, s: &Snapshot) {
    let late = Family::<QpLabel, Gauge>::default();
    let missed = Family::<QpLabel, Gauge>::default();
    for v in &s.vms {
        for q in &v.late_qps {
            let l = QpLabel {
                vm: v.name.clone(),
                qpn: format!("{:#x}", q.qpn),
            };
            late.get_or_create(&l).set(1);
            if let Some(n) = q.missed_completions {
                missed
                    .get_or_create(&l)
                    .set(i64::try_from(n).unwrap_or(i64::MAX));
            }
        }
    }
    r.register(
        "resex_qp_attached_late",
        "1 for a QP registered after its rings had lapped: counted from then on only",
        late,
    );
    r.register(
        "resex_qp_missed_completions",
        "Completions a late QP's send CQ had delivered before counting began",
        missed,
    );
}

/// What the admin grants each VM beside what it uses (absent where no policy runs).
#[allow(clippy::cast_precision_loss)]
fn entitlement_gauges(r: &mut Registry, s: &Snapshot) {
    let gauge = |r: &mut Registry, name, help, f: &dyn Fn(&resex_api::VmSnap) -> Option<f64>| {
        vm_gauge(r, s, name, help, f);
    };
    gauge(
        r,
        "resex_vm_entitled_bps",
        "Transmit rate the admin grants the VM (its entitlement), bits per second",
        &|v| (v.entitled_bps > 0.0).then_some(v.entitled_bps),
    );
    gauge(
        r,
        "resex_vm_cpu_floor_percent",
        "Lowest CPU cap a policy may give the VM, percent of one CPU",
        &|v| v.cpu_floor_pct,
    );
    gauge(
        r,
        "resex_vm_tx_rate_bps",
        "Transmit rate on the wire the policy compares with the entitlement, bits per second",
        &|v| v.tx_rate_bps,
    );
    gauge(
        r,
        "resex_vm_excess",
        "1 while the VM sends above its entitlement (only then may a policy limit it)",
        &|v| v.excess.map(|e| f64::from(u8::from(e))),
    );
    gauge(
        r,
        "resex_vm_tx_weight",
        "The VM's weight in the split of the port's excess",
        &|v| v.tx_weight.map(f64::from),
    );
    gauge(
        r,
        "resex_vm_host_slowdown_ratio",
        "I/O slowdown the NIC measured for the VM's work requests (where it measures it)",
        &|v| v.host_slowdown,
    );
    gauge(
        r,
        "resex_vm_report_discounted",
        "1 when the host discounted the VM's last latency report against its own evidence",
        &|v| Some(f64::from(u8::from(v.report_discounted.is_some()))),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transmit_limits_are_exported_only_where_set() {
        let mut s = Snapshot::default();
        let mut a = resex_api::VmSnap {
            name: "a".into(),
            tx_share_bps: Some(500_000_000),
            tx_max_bps: Some(2_000_000_000),
            bytes_per_s: 1000.0,
            ..Default::default()
        };
        a.vcpus = 1;
        let b = resex_api::VmSnap {
            name: "b".into(),
            vcpus: 1,
            ..Default::default()
        };
        s.vms = vec![a, b];
        let text = encode(&s, &LoopMetrics::default());
        assert!(text.contains("# TYPE resex_vm_tx_max_bps gauge"), "{text}");
        assert!(
            text.contains("resex_vm_tx_max_bps{vm=\"a\"} 2000000000"),
            "{text}"
        );
        assert!(
            text.contains("resex_vm_tx_share_bps{vm=\"a\"} 500000000"),
            "{text}"
        );
        assert!(!text.contains("resex_vm_tx_max_bps{vm=\"b\"}"), "{text}");
        assert!(text.contains("resex_vm_tx_bps{vm=\"a\"} 8000"), "{text}");
        assert!(
            !text.contains("resex_vm_entitled_bps{"),
            "none known: {text}"
        );
    }

    #[test]
    fn entitlements_are_exported_beside_use() {
        let s = Snapshot {
            vms: vec![resex_api::VmSnap {
                name: "a".into(),
                entitled_bps: 2e9,
                cpu_floor_pct: Some(20.0),
                tx_rate_bps: Some(3e9),
                excess: Some(true),
                report_discounted: Some("x".into()),
                ..Default::default()
            }],
            ..Default::default()
        };
        let text = encode(&s, &LoopMetrics::default());
        for want in [
            "resex_vm_entitled_bps{vm=\"a\"} 2000000000",
            "resex_vm_cpu_floor_percent{vm=\"a\"} 20",
            "resex_vm_tx_rate_bps{vm=\"a\"} 3000000000",
            "resex_vm_excess{vm=\"a\"} 1",
            "resex_vm_report_discounted{vm=\"a\"} 1",
        ] {
            assert!(text.contains(want), "{want} in {text}");
        }
        assert!(!text.contains("resex_qp_attached_late{"), "{text}");
    }

    #[test]
    fn late_qps_are_exported_with_what_they_missed() {
        let s = Snapshot {
            vms: vec![resex_api::VmSnap {
                name: "a".into(),
                late_qps: vec![
                    resex_api::LateQp {
                        qpn: 0x107,
                        missed_completions: Some(80),
                    },
                    resex_api::LateQp {
                        qpn: 0x108,
                        missed_completions: None,
                    },
                ],
                ..Default::default()
            }],
            ..Default::default()
        };
        let text = encode(&s, &LoopMetrics::default());
        for want in [
            "resex_qp_attached_late{vm=\"a\",qpn=\"0x107\"} 1",
            "resex_qp_attached_late{vm=\"a\",qpn=\"0x108\"} 1",
            "resex_qp_missed_completions{vm=\"a\",qpn=\"0x107\"} 80",
        ] {
            assert!(text.contains(want), "{want} in {text}");
        }
        assert!(!text.contains("resex_qp_missed_completions{vm=\"a\",qpn=\"0x108\"}"));
    }
}
