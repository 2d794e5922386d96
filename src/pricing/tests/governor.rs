//! The governor on the CPU lever alone (`lever = "cpu"`, the cap-only governor): congestion
//! gate, split by share, back-off, and a closed loop that settles. Its two-lever behaviour is in
//! `governor_levers.rs`.
#![allow(clippy::cast_possible_truncation)]

use resex_pricing::{
    Baseline, Engine, Entitlement, IntervalInput, LatencyReport, Lever, PolicyConfig, PolicyKind,
    VmId, VmSpec, VmUsage,
};

const BASE_NS: f64 = 100_000.0;

/// VM 1 is latency-sensitive; VMs 2.. are granted 1 Gb/s each (about 122 MTUs per interval) and
/// VM 1 the rest of the 8.6 Gb/s link: only what a VM sends above its entitlement may be capped.
fn engine(n: u32) -> Engine {
    let mut cfg = PolicyConfig::defaults(PolicyKind::Governor);
    cfg.lever = Some(Lever::Cpu);
    let mut e = Engine::new(cfg);
    for id in 1..=n {
        let mut spec = VmSpec::new(id, format!("vm{id}"), 1);
        if id == 1 {
            spec.baseline = Some(Baseline {
                mean_ns: BASE_NS,
                stddev_ns: 5_000.0,
            });
        } else {
            spec.entitlement = Entitlement {
                tx_bps: Some(1_000_000_000),
                cpu_floor_pct: None,
            };
        }
        e.add_vm(spec, 0).unwrap();
    }
    e
}

fn report(mean_ns: f64) -> LatencyReport {
    LatencyReport {
        count: 100,
        mean_ns,
        stddev_ns: 5_000.0,
        p50_ns: mean_ns,
        p99_ns: mean_ns,
        p999_ns: mean_ns,
    }
}

/// One interval: VM 1 reports `victim_ns` every 10th interval; the others send `mtus`.
fn step(e: &mut Engine, i: u64, util: f64, victim_ns: Option<f64>, mtus: &[u64]) -> Vec<f64> {
    let mut usage = vec![VmUsage {
        report: victim_ns.filter(|_| i % 10 == 9).map(report),
        ..VmUsage::new(VmId(1), 20.0, 64)
    }];
    for (k, &m) in mtus.iter().enumerate() {
        usage.push(VmUsage::new(VmId(k as u32 + 2), 100.0, m));
    }
    let out = e
        .step(&IntervalInput {
            interval: i,
            link_util: Some(util),
            usage: &usage,
        })
        .unwrap();
    out.rows.iter().map(|r| r.cap).collect()
}

#[test]
fn a_report_on_a_link_that_never_fills_charges_nobody() {
    // The victim claims its latency tripled, but the host never sees the link above 50%.
    let mut e = engine(2);
    for i in 0..2_000 {
        let caps = step(&mut e, i, 0.5, Some(3.0 * BASE_NS), &[200]);
        assert_eq!(caps[1], 100.0, "interval {i}: the neighbour was capped");
    }
    // The same claim while the link is saturated in every interval: the neighbour is capped.
    let mut e = engine(2);
    let mut caps = vec![];
    for i in 0..200 {
        caps = step(&mut e, i, 1.0, Some(3.0 * BASE_NS), &[900]);
    }
    assert!(caps[1] < 50.0, "{caps:?}");
    assert_eq!(caps[0], 100.0, "the victim itself is never charged");
}

#[test]
fn the_charge_is_split_by_the_aggressors_shares() {
    // VM 2 sends 900 MTUs an interval and VM 3 450, both above their 1 Gb/s (about 122 MTUs);
    // VM 4 sends 50, within it (not an aggressor). Weights by excess: about 0.70 and 0.30.
    let mut e = engine(4);
    // (Checked before the big one reaches the floor: the victim here never recovers.)
    let mut caps = vec![];
    for i in 0..60 {
        caps = step(&mut e, i, 1.0, Some(1.5 * BASE_NS), &[900, 450, 50]);
    }
    assert!(caps[1] > 10.0, "{caps:?}");
    assert!(caps[1] < caps[2], "the larger sender pays more: {caps:?}");
    assert!(caps[2] < 100.0, "the smaller aggressor pays too: {caps:?}");
    assert_eq!(
        caps[3], 100.0,
        "a VM within its entitlement is no aggressor"
    );
}

#[test]
fn it_backs_off_when_the_victim_goes_quiet() {
    let mut e = engine(2);
    for i in 0..100 {
        step(&mut e, i, 1.0, Some(3.0 * BASE_NS), &[900]);
    }
    let capped = step(&mut e, 100, 1.0, None, &[900])[1];
    assert!(capped < 50.0);
    // No reports at all: after the 100 ms timeout ln R decays by 0.8 per period.
    let mut caps = vec![];
    for i in 101..1_000 {
        caps = step(&mut e, i, 1.0, None, &[900]);
    }
    assert_eq!(caps[1], 100.0, "{caps:?}");
}

#[test]
fn a_closed_loop_settles_at_the_setpoint_without_sawing() {
    // A toy host: the victim's latency rises by 30% of the aggressor's cap fraction (uncapped:
    // +30%, far above the 10% SLA), and the link is saturated while the aggressor sends.
    let mut e = engine(2);
    let mut cap = 100.0;
    let mut history = vec![];
    for i in 0..3_000 {
        let victim = BASE_NS * (1.0 + 0.3 * cap / 100.0);
        let mtus = (900.0 * cap / 100.0) as u64;
        let util = if cap > 5.0 { 1.0 } else { 0.3 };
        cap = step(&mut e, i, util, Some(victim), &[mtus])[1];
        if i % 10 == 0 {
            history.push(cap);
        }
    }
    // The setpoint is +5%: 0.3 x cap / 100 = 0.05 at cap 16.7% (above the 10% floor).
    let last = *history.last().unwrap();
    assert!((last - 16.67).abs() < 0.5, "settled at {last}");
    // Settled: the last 100 decisions move the cap by less than 0.1 point in all.
    let tail = &history[history.len() - 100..];
    let moved: f64 = tail.windows(2).map(|w| (w[1] - w[0]).abs()).sum();
    assert!(moved < 0.1, "still moving: {moved}");
    // On the way it may overshoot, but not down to the floor.
    let min = history.iter().copied().fold(f64::INFINITY, f64::min);
    assert!(min > 10.0, "overshot to {min}");
}
