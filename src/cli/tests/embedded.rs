//! End to end on the embedded host: real guest processes (`resex agent`, `resex benchex`), the
//! real daemon, counts checked exactly against what BenchEx sent (`resex demo` itself: demo.rs).
#![allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)]

use resex_api::VmSnap;
use resex_backend::local::LocalBackend;
use resex_embedded::cgroup::CapMode;
use resex_embedded::{EmbeddedHost, GuestCommand, HostConfig};
use resex_scenario::Scenario;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn host_config(run: &Path) -> HostConfig {
    HostConfig {
        run_dir: run.to_owned(),
        ram_dir: run.to_owned(),
        cap_mode: CapMode::Auto,
        command: GuestCommand {
            program: env!("CARGO_BIN_EXE_resex").into(),
            agent_prefix: vec!["agent".into()],
            benchex_prefix: vec!["benchex".into()],
        },
        report_ms: 10,
        keep_logs: None,
        realtime: false,
        log_stalls: true,
        hca_doorbells: true,
        port_cgroup: false,
        clients_start_unix_ms: None,
        uplink: None,
    }
}

fn daemon(run: &Path, journal: Option<&Path>) -> resex_daemon::DaemonHandle {
    let cfg = resex_daemon::config::Config {
        run_dir: Some(run.to_owned()),
        state_dir: Some(run.join("state")),
        api_socket: Some(run.join("api.sock")),
        journal: journal.map(Path::to_owned),
        metrics: Some("127.0.0.1:0".into()),
        ..Default::default()
    };
    resex_daemon::start(
        resex_daemon::Settings {
            cfg,
            policy: None,
            limits: Default::default(),
        },
        Arc::new(LocalBackend::new(run)),
    )
    .unwrap()
}

fn wait_for(
    d: &resex_daemon::DaemonHandle,
    host: &mut EmbeddedHost,
    what: &str,
    ok: impl Fn(&VmSnap) -> bool,
) -> VmSnap {
    let start = Instant::now();
    loop {
        host.check().unwrap();
        let s = d.snapshot();
        if let Some(v) = s.vms.iter().find(|v| ok(v)) {
            return v.clone();
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{what}: {:#?}",
            s.vms
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_daemon_counts_exactly_what_benchex_sent_and_receives_its_reports() {
    let run = tempfile::tempdir().unwrap();
    let s = Scenario::from_toml(
        r#"
name = "exact"
[[guest]]
name = "srv"
ram = "32MiB"
[guest.benchex]
buffer = "64KiB"
rate = 400.0
count = 300
"#,
    )
    .unwrap();
    let mut host = EmbeddedHost::new(&s, host_config(run.path())).unwrap();
    let journal = run.path().join("journal.csv");
    let d = daemon(run.path(), Some(&journal));
    host.start_due(&s).unwrap();
    // 300 replies of 64 KiB + 8 header bytes (one WRITE each) and a 1-byte inline status WRITE.
    let per_reply = 65536 + 8 + 1;
    let v = wait_for(&d, &mut host, "all 300 replies counted", |v| {
        v.name == "srv" && v.tx_bytes_total >= 300 * per_reply
    });
    std::thread::sleep(Duration::from_millis(300));
    let v2 = d
        .snapshot()
        .vms
        .iter()
        .find(|v| v.name == "srv")
        .unwrap()
        .clone();
    assert_eq!(
        v2.tx_bytes_total,
        300 * per_reply,
        "nothing more, nothing less"
    );
    // WQEs: two per reply plus one RDMA READ per synchronisation; MTUs: 65 + 1 packets per
    // reply, and a READ's request and its one response packet.
    let syncs = v2.wqes_total - 600;
    assert_eq!(v2.mtus_total, 300 * 66 + 2 * syncs, "{v2:#?}");
    assert_eq!((v2.overruns, v2.anomalies, v2.errors), (0, 0, 0));
    assert_eq!(v2.state, "registered");
    assert!(
        v.reports > 0 && v2.lat_requests_total > 0,
        "latency reports: {v2:#?}"
    );
    let mean = v2.lat_sum_us / v2.lat_requests_total as f64;
    assert!(
        mean > 60.0,
        "a 64 KiB reply takes at least its 67 us of wire time: {mean}"
    );
    assert!(
        v2.cap_mechanism.contains("period 10 ms"),
        "{}",
        v2.cap_mechanism
    );

    // The API socket: root only; `status` is one snapshot, `subscribe` a stream.
    let api = run.path().join("api.sock");
    let mode = std::fs::metadata(&api).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let mut s = UnixStream::connect(&api).unwrap();
    s.write_all(
        b"{\"cmd\":\"status\"}\n{\"cmd\":\"reboot\"}\n{\"cmd\":\"subscribe\",\"interval_ms\":20}\n",
    )
    .unwrap();
    let mut lines = BufReader::new(s).lines();
    let snap: serde_json::Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    let srv = &snap["vms"][0];
    assert_eq!(srv["name"], "srv");
    assert_eq!(srv["tx_bytes_total"], 300 * per_reply);
    assert!(lines.next().unwrap().unwrap().contains("\"error\""));
    for _ in 0..2 {
        let s: serde_json::Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        assert!(s["host"]["ticks"].as_u64().unwrap() > 0);
    }

    // `resex status --json` and `resex top --batch --json|--csv` read the same socket.
    let resex = |args: &[&str]| {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_resex"))
            .args(args)
            .arg("--api")
            .arg(&api)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).unwrap()
    };
    let st: resex_api::Snapshot = serde_json::from_str(&resex(&["status", "--json"])).unwrap();
    assert_eq!(st.vms[0].tx_bytes_total, 300 * per_reply);
    let batch = resex(&[
        "top",
        "--batch",
        "--json",
        "--count",
        "3",
        "--interval",
        "150",
    ]);
    let snaps: Vec<resex_api::Snapshot> = batch
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(snaps.len(), 3);
    assert!(
        snaps.windows(2).all(|w| w[1].uptime_ms >= w[0].uptime_ms)
            && snaps[2].uptime_ms > snaps[0].uptime_ms,
        "a stream"
    );
    let csv = resex(&["top", "--batch", "--csv", "--count", "1"]);
    let mut rows = csv.lines();
    assert!(rows
        .next()
        .unwrap()
        .starts_with("time_s,vm,state,cpu_pct,cap_pct"));
    assert!(rows.next().unwrap().contains(",srv,registered,"));
    assert!(resex(&["status"]).contains("srv"));

    // `resex cap`: the admin pins a cap through the daemon (and its backend), then unpins it.
    let pinned = resex(&["cap", "srv", "40"]);
    assert!(pinned.contains("pinned at 40%"), "{pinned}");
    wait_for(&d, &mut host, "the pinned cap", |v| v.cap_pct == Some(40.0));
    assert!(resex(&["cap", "srv", "none"]).contains("unpinned"));
    wait_for(&d, &mut host, "the unpinned cap", |v| {
        v.name == "srv" && v.cap_pct.is_none()
    });
    // `resex rate`: the admin's transmit limit in the guest's port of softhca's scheduler.
    assert!(
        v2.tx_lever
            .as_deref()
            .is_some_and(|l| l.starts_with("softhca vport")),
        "{v2:#?}"
    );
    let rated = resex(&["rate", "srv", "--share", "100Mbit", "--max", "2Gbit"]);
    assert!(rated.contains("pinned by the admin"), "{rated}");
    wait_for(&d, &mut host, "the pinned transmit limit", |v| {
        v.tx_max_bps == Some(2_000_000_000) && v.tx_share_bps == Some(100_000_000)
    });
    assert!(resex(&["rate", "srv", "none"]).contains("unpinned"));
    wait_for(&d, &mut host, "the unpinned transmit limit", |v| {
        v.name == "srv" && v.tx_max_bps.is_none()
    });
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_resex"))
        .args(["cap", "nosuch", "10", "--api"])
        .arg(&api)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&o.stderr).contains("no VM named `nosuch`"));

    // Prometheus: /metrics in the text exposition format, with the exact totals.
    let addr = d.metrics_addr().expect("metrics endpoint");
    let get = |path: &str| {
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        write!(c, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
        let mut r = String::new();
        std::io::Read::read_to_string(&mut c, &mut r).unwrap();
        r
    };
    let resp = get("/metrics");
    let (head, body) = resp.split_once("\r\n\r\n").unwrap();
    assert!(
        head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"),
        "{head}"
    );
    assert!(head.contains("application/openmetrics-text"), "{head}");
    for family in [
        "resex_vm_tx_bytes counter",
        "resex_vm_cpu_cap_percent gauge",
    ] {
        assert!(body.contains(&format!("# TYPE {family}\n")), "{family}");
    }
    assert!(body.trim_end().ends_with("# EOF"));
    let scrape = prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_owned()))).unwrap();
    use prometheus_parse::Value;
    // (prometheus-parse types a counter only when its TYPE line carries the _total name, as the
    // 0.0.4 format does; OpenMetrics names the family without it: the TYPE lines are checked
    // above, the values here.)
    let value = |name: &str| {
        scrape
            .samples
            .iter()
            .find(|s| s.metric == name && s.labels.get("vm") == Some("srv"))
            .map(|s| match s.value {
                Value::Counter(x) | Value::Gauge(x) | Value::Untyped(x) => x,
                _ => f64::NAN,
            })
    };
    assert_eq!(
        value("resex_vm_tx_bytes_total"),
        Some((300 * per_reply) as f64)
    );
    assert_eq!(value("resex_vm_mtus_total"), Some(v2.mtus_total as f64));
    assert_eq!(value("resex_monitor_overruns_total"), Some(0.0));
    assert_eq!(value("resex_vm_cpu_cap_percent"), Some(100.0));
    assert!(value("resex_vm_latency_p99_seconds").is_some_and(|p| p > 6e-5 && p < 10.0));
    let late = scrape
        .samples
        .iter()
        .find(|s| s.metric == "resex_daemon_tick_lateness_seconds")
        .expect("tick lateness histogram");
    match &late.value {
        Value::Histogram(h) => assert!(h.iter().any(|b| b.count > 0.0), "{h:?}"),
        v => panic!("not a histogram: {v:?}"),
    }
    for s in &scrape.samples {
        assert!(s.metric.starts_with("resex_"), "{}", s.metric);
    }
    assert!(get("/nope").contains(" 404 "));
    d.stop();

    // The journal is a trace `resex price replay` reads, and it adds up to the monitor's totals.
    let trace = resex_pricing::trace::Trace::read(std::fs::File::open(&journal).unwrap()).unwrap();
    let rows: Vec<_> = trace.rows.iter().filter(|r| r.vm == "srv").collect();
    assert!(rows.len() > 500, "one row per interval: {}", rows.len());
    assert_eq!(rows.iter().map(|r| r.mtus).sum::<u64>(), v2.mtus_total);
    assert_eq!(rows.iter().map(|r| r.bytes).sum::<u64>(), v2.tx_bytes_total);
    assert!(
        rows.iter().any(|r| r.report.is_some()),
        "reports are journalled"
    );
    host.stop();
    assert!(
        std::fs::read_dir(run.path().join("local/domains"))
            .unwrap()
            .next()
            .is_none(),
        "the record is withdrawn"
    );
}

#[test]
fn a_daemon_started_after_its_guests_attaches_at_their_present_position_without_faults() {
    // What every restart of resexd does: guests have been running for seconds (their rings
    // lapped many times) when the daemon first reads them.
    let run = tempfile::tempdir().unwrap();
    let s = Scenario::from_toml(
        r#"
name = "late"
[[guest]]
name = "a"
ram = "32MiB"
[guest.benchex]
buffer = "64KiB"
rate = 500.0
[[guest]]
name = "b"
ram = "32MiB"
[guest.benchex]
buffer = "4KiB"
rate = 2000.0
"#,
    )
    .unwrap();
    let mut host = EmbeddedHost::new(&s, host_config(run.path())).unwrap();
    host.start_due(&s).unwrap();
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        host.check().unwrap();
        std::thread::sleep(Duration::from_millis(100));
    }
    let d = daemon(run.path(), None);
    for name in ["a", "b"] {
        wait_for(&d, &mut host, "counting", |v| {
            v.name == name && v.state == "registered" && v.wqes_total > 500
        });
    }
    std::thread::sleep(Duration::from_millis(500));
    for v in &d.snapshot().vms {
        assert_eq!(
            (v.errors, v.overruns, v.anomalies),
            (0, 0, 0),
            "a benign guest shows no fault: {v:#?}"
        );
        assert_eq!(v.rejected_registrations, 0, "{v:#?}");
    }
    d.stop();
    host.stop();
}
