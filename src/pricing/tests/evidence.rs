//! The host's evidence against latency reports: a report the NIC's times or the link
//! contradict is discounted before any policy sees it; one they bear out is kept whole.

use resex_common::NicTimes;
use resex_pricing::{
    Engine, IntervalInput, LatencyReport, PolicyConfig, PolicyKind, VmId, VmSpec, VmUsage,
};

fn report(mean_us: f64) -> LatencyReport {
    LatencyReport {
        count: 10,
        mean_ns: mean_us * 1000.0,
        stddev_ns: mean_us * 100.0,
        p50_ns: mean_us * 1000.0,
        p99_ns: mean_us * 1500.0,
        p999_ns: mean_us * 2000.0,
    }
}

/// Ten intervals per report period: each interval one work request whose sojourn in the NIC
/// is `wire + wait` us (when `nic`), the report at the period's end.
fn period(e: &mut Engine, first: u64, mean_us: f64, wait_us: Option<u64>, util: f64) {
    for i in first..first + 10 {
        let mut u = VmUsage::new(VmId(1), 20.0, 64);
        u.bytes = 64 << 10;
        u.nic = wait_us.map(|w| NicTimes {
            wqes: 1,
            sojourn_ns: (67 + w) * 1000,
            wire_ns: 67_000,
        });
        if i == first + 9 {
            u.report = Some(report(mean_us));
        }
        e.step(&IntervalInput {
            interval: i,
            link_util: Some(util),
            usage: &[u],
        })
        .unwrap();
    }
}

fn engine() -> Engine {
    let mut e = Engine::new(PolicyConfig::defaults(PolicyKind::Governor));
    e.add_vm(VmSpec::new(1, "v", 1), 1).unwrap();
    e
}

#[test]
fn a_report_the_nics_times_contradict_is_discounted() {
    let mut e = engine();
    // Ten honest periods at 100 us, the NIC seeing 3 us of wait beyond the wire.
    for k in 0..10 {
        period(&mut e, 1 + 10 * k, 100.0, Some(3), 0.95);
    }
    // Then 300 us while the NIC sees the same: the claim (+200 us) is cut to 1.5 x the host's
    // rise (0) plus 5% of the baseline.
    period(&mut e, 101, 300.0, Some(3), 0.95);
    let v = e.account(VmId(1)).unwrap().evidence.verdict.unwrap();
    assert!(v.discounted, "{v:?}");
    assert!((v.claimed_ns - 200_000.0).abs() < 1.0);
    assert!((v.credited_ns - 5_000.0).abs() < 1.0, "{v:?}");
}

#[test]
fn a_report_the_nic_bears_out_is_kept() {
    let mut e = engine();
    for k in 0..10 {
        period(&mut e, 1 + 10 * k, 100.0, Some(3), 0.95);
    }
    // +60 us claimed while the NIC saw 50 us more wait: 1.5 x 50 + 5 covers it.
    period(&mut e, 101, 160.0, Some(53), 0.95);
    let v = e.account(VmId(1)).unwrap().evidence.verdict.unwrap();
    assert!(!v.discounted, "{v:?}");
    assert_eq!(v.host_ns, Some(50_000.0));
}

#[test]
fn without_the_nics_times_the_link_decides() {
    let mut e = engine();
    for k in 0..10 {
        period(&mut e, 1 + 10 * k, 100.0, None, 0.2);
    }
    // A quiet link: 3x is cut to the slack.
    period(&mut e, 101, 300.0, None, 0.2);
    let v = e.account(VmId(1)).unwrap().evidence.verdict.unwrap();
    assert!(v.discounted && v.host_ns.is_none());
    // A congested one: the claim stands.
    period(&mut e, 111, 300.0, None, 0.95);
    let v = e.account(VmId(1)).unwrap().evidence.verdict.unwrap();
    assert!(!v.discounted);
}
