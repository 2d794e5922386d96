//! The exposition text against golden files recorded from the code before the schema, and
//! the series each snapshot field yields.

use super::*;

/// The golden files: the exposition text the inline `encode` produced before the schema
/// (issue 31), recorded from that code.
/// `RESEX_BLESS_METRICS=1 cargo test -p resex-daemon --lib metrics` rewrites them.
fn golden(file: &str, got: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src/metrics/golden")
        .join(file);
    if std::env::var_os("RESEX_BLESS_METRICS").is_some() {
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
        std::fs::write(&path, got).expect("write the golden file");
    }
    std::fs::read_to_string(&path).expect("read the golden file")
}

/// The text with each family's samples sorted: a family keeps its series in a hash map,
/// so their order varies from one encoding to the next (it did before the schema too).
/// Lines without a `vm` label (headers, histograms) keep their order.
fn canonical(text: &str) -> String {
    let mut out = Vec::new();
    let mut block: Vec<&str> = Vec::new();
    let flush = |block: &mut Vec<&str>, out: &mut Vec<String>| {
        block.sort_by_key(|l| if l.contains("vm=\"") { *l } else { "" });
        out.extend(block.drain(..).map(str::to_owned));
    };
    for line in text.lines() {
        if line.starts_with('#') {
            flush(&mut block, &mut out);
            out.push(line.to_owned());
        } else {
            block.push(line);
        }
    }
    flush(&mut block, &mut out);
    out.join("\n") + "\n"
}

/// Several VMs: limited and not, with and without entitlements, late QPs, reports.
fn rich_snapshot() -> Snapshot {
    let web = resex_api::VmSnap {
        id: resex_common::VmId(1),
        name: "web".into(),
        state: "registered".into(),
        vcpus: 4,
        cpu_pct: 123.5,
        cap_pct: Some(250.0),
        cap_mechanism: "cgroup".into(),
        cap_reason: Some("price".into()),
        tx_share_bps: Some(500_000_000),
        tx_max_bps: Some(2_000_000_000),
        tx_lever: Some("devlink".into()),
        tx_weight: Some(3),
        entitled_bps: 2e9,
        cpu_floor_pct: Some(20.0),
        tx_rate_bps: Some(1.5e9),
        excess: Some(false),
        host_slowdown: Some(0.25),
        io_latency_us: Some(182.5),
        balance: Some(1234.5),
        allotment: Some(1000.0),
        rate: Some(2.5),
        mtus_per_s: 80.0,
        bytes_per_s: 125_000.0,
        wqes_per_s: 40.0,
        lat_mean_us: Some(20.0),
        lat_p50_us: Some(12.5),
        lat_p99_us: Some(250.0),
        intf_pct: Some(37.5),
        interferer: Some("batch".into()),
        qps: 3,
        mtus_total: 123_456_789,
        tx_bytes_total: 9_876_543_210,
        wqes_total: 4_242,
        errors: 2,
        overruns: 1,
        anomalies: 5,
        reports: 17,
        lat_requests_total: 170_000,
        lat_sum_us: 3.4e6,
        lat_p99_sum_us: 4.2e7,
        bad_reports: 1,
        rejected_registrations: 0,
        late_qps: vec![
            resex_api::LateQp {
                qpn: 0x107,
                missed_completions: Some(80),
            },
            resex_api::LateQp {
                qpn: 0x1a2b,
                missed_completions: Some(u64::MAX),
            },
        ],
        period: Some(resex_api::PeriodSnap {
            found: Some(resex_api::PeriodFound {
                period_ms: 2000.5,
                duty: 0.25,
                bytes_per_period: 4e8,
                last_start_unix_ms: 1_790_000_000_125.0,
                confidence: 0.875,
                latest_period_ms: None,
            }),
            why_not: None,
            samples: 8192,
            age_ms: 300,
        }),
        ..Default::default()
    };
    let batch = resex_api::VmSnap {
        id: resex_common::VmId(2),
        name: "batch".into(),
        state: "registered".into(),
        vcpus: 2,
        cpu_pct: 199.75,
        cap_mechanism: "cgroup".into(),
        entitled_bps: 1e9,
        cpu_floor_pct: Some(10.0),
        tx_rate_bps: Some(4e9),
        excess: Some(true),
        report_discounted: Some("claims 9 ms, NIC saw none".into()),
        balance: Some(-3.25),
        allotment: Some(1000.0),
        rate: Some(0.0),
        bytes_per_s: 5e8,
        lat_p50_us: Some(900.0),
        intf_pct: Some(0.0),
        qps: 1,
        mtus_total: 10,
        tx_bytes_total: 40_960,
        wqes_total: 10,
        reports: 3,
        lat_requests_total: 30,
        bad_reports: 4,
        rejected_registrations: 2,
        last_error: Some("bad magic".into()),
        late_qps: vec![resex_api::LateQp {
            qpn: 0x9,
            missed_completions: None,
        }],
        period: Some(resex_api::PeriodSnap {
            why_not: Some("steady sender".into()),
            samples: 8192,
            ..Default::default()
        }),
        ..Default::default()
    };
    let idle = resex_api::VmSnap {
        id: resex_common::VmId(3),
        name: "idle-vm.3".into(),
        state: "waiting".into(),
        vcpus: 1,
        cap_mechanism: "none".into(),
        ..Default::default()
    };
    Snapshot {
        uptime_ms: 123_456,
        host: resex_api::HostSnap {
            backend: "memory".into(),
            policy: "resex".into(),
            interval_ms: 10,
            epoch_progress: 0.625,
            link_util: 0.42,
            mtus_per_s: 80.0,
            tick_late_p50_us: 3.0,
            tick_late_p99_us: 40.0,
            tick_late_max_us: 90.0,
            ticks: 12_345,
            ticks_skipped: 7,
            scan_us: 12.0,
            loop_priority: "nice -10".into(),
        },
        vms: vec![web, batch, idle],
    }
}

/// Observations below, inside and above the buckets.
fn rich_loop_metrics() -> LoopMetrics {
    let lm = LoopMetrics::default();
    for x in [5e-7, 3e-6, 3e-6, 1.2e-4, 0.02, 1.5] {
        lm.tick_lateness.observe(x);
    }
    for x in [2e-6, 8e-6, 6.4e-5] {
        lm.scan.observe(x);
    }
    lm
}

#[test]
fn exposition_matches_the_golden_text() {
    let got = encode(&rich_snapshot(), &rich_loop_metrics());
    let want = golden("rich.txt", &got);
    assert_eq!(got.len(), want.len());
    assert_eq!(canonical(&got), canonical(&want));
}

#[test]
fn one_vm_exposition_matches_byte_for_byte() {
    let mut s = rich_snapshot();
    s.vms.truncate(1);
    s.vms[0].late_qps.truncate(1);
    let got = encode(&s, &rich_loop_metrics());
    assert_eq!(got, golden("one_vm.txt", &got));
}

#[test]
fn empty_exposition_matches_byte_for_byte() {
    let got = encode(&Snapshot::default(), &LoopMetrics::default());
    assert_eq!(got, golden("empty.txt", &got));
}

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

#[test]
fn periods_are_exported_with_their_figures_or_as_not_periodic() {
    let text = encode(&rich_snapshot(), &LoopMetrics::default());
    for want in [
        "resex_vm_periodic{vm=\"web\"} 1.0",
        "resex_vm_period_seconds{vm=\"web\"} 2.0005",
        "resex_vm_period_duty_ratio{vm=\"web\"} 0.25",
        "resex_vm_period_bytes{vm=\"web\"} 400000000.0",
        "resex_vm_period_last_start_timestamp_seconds{vm=\"web\"} 1790000000.125",
        "resex_vm_period_confidence_ratio{vm=\"web\"} 0.875",
        "resex_vm_periodic{vm=\"batch\"} 0.0",
    ] {
        assert!(text.contains(want), "{want} in\n{text}");
    }
    assert!(!text.contains("resex_vm_period_seconds{vm=\"batch\"}"));
    assert!(!text.contains("resex_vm_periodic{vm=\"idle-vm.3\"}"));
}
