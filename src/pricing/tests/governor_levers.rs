//! The governor (v3) on the rate lever (the shipped `lever = "both"`, and `"rate"`): every VM's
//! guaranteed rate is its entitlement, and nobody gets a ceiling or a cap, whatever anyone
//! reports: the port's committed tier protects what is entitled, and a limit above an
//! entitlement would take work without helping anyone.
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

/// Half the link each: the equal split of two VMs.
const HALF: TxLimit = TxLimit {
    share_bps: Some(LINK / 2),
    max_bps: None,
    weight: None,
};

/// Every interval's caps and limits over `n` intervals on a saturated link, the victim
/// reporting `claim` x its base latency (`None`: it runs no agent).
fn trace(lever: Lever, claim: Option<f64>, n: u64) -> Vec<(Vec<f64>, Vec<TxLimit>)> {
    let mut e = engine(lever);
    (0..n)
        .map(|i| step(&mut e, i, 1.0, claim.map(|c| c * BASE_NS), 65_536))
        .collect()
}

#[test]
fn every_guarantee_is_the_entitlement_and_nobody_is_limited() {
    for lever in [Lever::Both, Lever::Rate] {
        let t = trace(lever, Some(3.0), 1_000);
        for (i, (caps, tx)) in t.iter().enumerate().skip(1) {
            assert_eq!(caps, &vec![100.0, 100.0], "{lever:?} {i}: no cap");
            assert_eq!(tx, &vec![HALF, HALF], "{lever:?} {i}: the entitlements");
        }
    }
}

#[test]
fn running_the_agent_or_lying_changes_nothing_on_the_rate_lever() {
    let silent = trace(Lever::Both, None, 1_000);
    for claim in [1.0, 3.0, 100.0] {
        assert_eq!(
            trace(Lever::Both, Some(claim), 1_000),
            silent,
            "claim {claim}"
        );
    }
}

#[test]
fn a_report_on_a_link_that_never_fills_limits_nobody() {
    // A liar: it claims triple latency while the host never sees the link above 50%.
    let mut e = engine(Lever::Both);
    for i in 1..2_000 {
        let (caps, tx) = step(&mut e, i, 0.5, Some(3.0 * BASE_NS), 1024);
        assert_eq!(caps[1], 100.0);
        assert_eq!(tx[1], HALF, "the neighbour is never limited ({i})");
    }
}
