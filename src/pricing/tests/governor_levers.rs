//! The governor on two levers (the shipped `lever = "both"`): shares for the VMs that report
//! latency, ceilings on the aggressors when shares are not enough, and the CPU cap only after
//! the ceilings are at their floor; with the rate lever alone it never caps.
#![allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)]

use resex_pricing::{
    Baseline, Engine, IntervalInput, LatencyReport, Lever, PolicyConfig, PolicyKind, TxLimit, VmId,
    VmSpec, VmUsage,
};

const BASE_NS: f64 = 100_000.0;
/// The link the limits are set against: 8 Gb/s.
const LINK: u64 = 8_000_000_000;

fn engine(lever: Lever) -> Engine {
    let mut cfg = PolicyConfig::defaults(PolicyKind::Governor);
    cfg.lever = Some(lever);
    let mut e = Engine::new(cfg);
    e.set_link_bps(LINK);
    let mut victim = VmSpec::new(1, "victim", 1);
    victim.baseline = Some(Baseline {
        mean_ns: BASE_NS,
        stddev_ns: 5_000.0,
    });
    e.add_vm(victim, 0).unwrap();
    e.add_vm(VmSpec::new(2, "aggressor", 1), 0).unwrap();
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

/// One interval: the victim sends `victim_bytes` and reports `victim_ns` every 10th interval
/// (unless `None`); the aggressor sends 900 MTUs. Returns (caps, transmit limits).
fn step(
    e: &mut Engine,
    i: u64,
    util: f64,
    victim_ns: Option<f64>,
    victim_bytes: u64,
) -> (Vec<f64>, Vec<TxLimit>) {
    let mut v = VmUsage::new(VmId(1), 20.0, victim_bytes / 1024 + 1);
    v.bytes = victim_bytes;
    v.report = victim_ns.filter(|_| i % 10 == 9).map(report);
    let mut a = VmUsage::new(VmId(2), 100.0, 900);
    a.bytes = 900 * 1024;
    let out = e
        .step(&IntervalInput {
            interval: i,
            link_util: Some(util),
            usage: &[v, a],
        })
        .unwrap();
    let caps = out.rows.iter().map(|r| r.cap).collect();
    let tx = [VmId(1), VmId(2)]
        .iter()
        .map(|&id| e.account(id).unwrap().tx)
        .collect();
    (caps, tx)
}

#[test]
fn a_reporting_vm_gets_a_share_of_twice_its_demand_and_keeps_it_steady() {
    let mut e = engine(Lever::Both);
    // The victim sends 64 KiB per ms: 524 Mb/s; twice that is 1 049 Mb/s: 2 048 Mbit/s as a
    // power of two. It reports latency as it was alone.
    let mut shares = Vec::new();
    for i in 0..500 {
        let (caps, tx) = step(&mut e, i, 0.5, Some(BASE_NS), 65_536);
        assert_eq!(caps, vec![100.0, 100.0], "no cap while nobody suffers");
        assert_eq!(tx[1], TxLimit::NONE, "the aggressor is not limited");
        shares.push(tx[0].share_bps);
        assert_eq!(tx[0].max_bps, None);
    }
    assert_eq!(shares.last().copied().flatten(), Some(2_048_000_000));
    // Once set it does not move.
    let first = shares.iter().position(Option::is_some).unwrap();
    assert!(first < 20, "set within two periods of the first report");
    assert!(shares[first + 10..].windows(2).all(|w| w[0] == w[1]));
    // The reports stop: after report_timeout_ms (100) the share is released.
    for i in 500..700 {
        let (_, tx) = step(&mut e, i, 0.5, None, 0);
        if i > 650 {
            assert_eq!(tx[0], TxLimit::NONE, "released at {i}");
        }
    }
}

/// A toy host whose victim suffers in proportion to the aggressor's transmit fraction and
/// CPU-cap fraction together, more than shares alone can fix.
fn toy(lever: Lever) -> (Vec<f64>, Vec<f64>) {
    let mut e = engine(lever);
    let (mut cap, mut frac) = (100.0, 1.0);
    let (mut caps, mut fracs) = (vec![], vec![]);
    for i in 0..4_000 {
        let victim = BASE_NS * (1.0 + 0.3 * frac * cap / 100.0);
        let (c, tx) = step(&mut e, i, 1.0, Some(victim), 65_536);
        cap = c[1];
        frac = tx[1].max_bps.map_or(1.0, |m| m as f64 / LINK as f64);
        if i % 10 == 0 {
            caps.push(cap);
            fracs.push(frac);
        }
    }
    (caps, fracs)
}

#[test]
fn ceilings_come_before_caps_and_the_loop_settles() {
    let (caps, fracs) = toy(Lever::Both);
    // The setpoint (+5%) is reached at a transmit fraction of 1/6: above the 5% floor, so the
    // CPU cap is never touched.
    assert!(caps.iter().all(|&c| c == 100.0), "a cap was used: {caps:?}");
    let last = *fracs.last().unwrap();
    assert!((last - 1.0 / 6.0).abs() < 0.01, "settled at {last}");
    let tail = &fracs[fracs.len() - 100..];
    let moved: f64 = tail.windows(2).map(|w| (w[1] - w[0]).abs()).sum();
    assert!(moved < 0.002, "still moving: {moved}");
}

#[test]
fn with_the_rate_lever_alone_no_cap_is_ever_set() {
    // Here the victim suffers from the aggressor's CPU too (its cap fraction counts), which the
    // rate lever cannot reach: ceilings go to their floor and stay; caps stay at 100.
    let (caps, fracs) = toy(Lever::Rate);
    assert!(caps.iter().all(|&c| c == 100.0));
    assert!(
        fracs.iter().all(|&f| f >= 0.05 - 1e-9),
        "never below the floor"
    );
}

#[test]
fn a_report_on_a_link_that_never_fills_limits_nobody() {
    // A liar: it claims triple latency while the host never sees the link above 50%.
    let mut e = engine(Lever::Both);
    for i in 0..2_000 {
        let (caps, tx) = step(&mut e, i, 0.5, Some(3.0 * BASE_NS), 1024);
        assert_eq!(caps[1], 100.0);
        assert_eq!(tx[1], TxLimit::NONE, "the neighbour is never limited ({i})");
    }
}
