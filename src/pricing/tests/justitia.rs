//! The Justitia baseline through the engine: elephants (mean message of at least 1 MB) get an
//! equal part of a virtual link that halves while a latency-sensitive VM's sojourn is more
//! than 10% over its quiet level (never below the elephants' share by count) and grows by 5%
//! of the link while it is not; with no latency-sensitive VM active, nothing is paced. No
//! entitlement guard applies (Justitia has none) and no report is read.

use resex_common::NicTimes;
use resex_pricing::{
    Engine, IntervalInput, LatencyReport, PolicyConfig, PolicyKind, TxReason, VmId, VmSpec, VmUsage,
};

const LINK_BPS: f64 = 8e9;
const LINK_BYTES: u64 = 1_000_000_000;

fn config() -> PolicyConfig {
    let path = format!(
        "{}/../../tools/baselines/justitia.toml",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap();
    let mut cfg = PolicyConfig::from_toml(&text).unwrap();
    cfg.ledger.link_bytes_per_sec = LINK_BYTES;
    cfg
}

/// An elephant (VM 1: one 4 MB request completing every 4 intervals, 1 MB a interval) and,
/// unless `alone`, a latency-sensitive VM (VM 2: 4 requests of 4 KB an interval, each waiting
/// `wait_us` beyond its 4 us on the wire; it also reports 3x, which nothing reads).
fn usage(i: u64, wait_us: u64, alone: bool) -> Vec<VmUsage> {
    let mut big = VmUsage::new(VmId(1), 100.0, 0);
    big.bytes = 1_000_000;
    big.nic = Some(NicTimes {
        wqes: u64::from(i % 4 == 3),
        sojourn_ns: if i % 4 == 3 { 4_000_000 } else { 0 },
        wire_ns: if i % 4 == 3 { 4_000_000 } else { 0 },
    });
    let mut small = VmUsage::new(VmId(2), 100.0, 0);
    small.bytes = 16_000;
    small.nic = Some(NicTimes {
        wqes: 4,
        sojourn_ns: 4 * (4_000 + wait_us * 1000),
        wire_ns: 16_000,
    });
    small.report = Some(LatencyReport {
        count: 4,
        mean_ns: 30_000.0,
        stddev_ns: 1000.0,
        p50_ns: 30_000.0,
        p99_ns: 40_000.0,
        p999_ns: 40_000.0,
    });
    if alone {
        vec![big]
    } else {
        vec![big, small]
    }
}

/// Runs the phases (intervals, the small VM's wait in us, the elephant alone) and returns the
/// elephant's ceiling after each interval (`None`: no ceiling).
fn run(phases: &[(u64, u64, bool)]) -> Vec<Option<u64>> {
    let mut e = Engine::new(config());
    e.add_vm(VmSpec::new(1, "elephant", 1), 0).unwrap();
    e.add_vm(VmSpec::new(2, "mouse", 1), 0).unwrap();
    let mut ceiling = None;
    let mut out = Vec::new();
    let mut i = 0;
    for &(n, wait_us, alone) in phases {
        for _ in 0..n {
            let u = usage(i, wait_us, alone);
            let o = e
                .step(&IntervalInput {
                    interval: i,
                    link_util: None,
                    usage: &u,
                })
                .unwrap();
            for d in &o.tx_decisions {
                assert_eq!(d.tx.share_bps, None, "no guarantee: no entitlement guard");
                if d.vm == VmId(2) {
                    assert_eq!(
                        d.tx.max_bps, None,
                        "the latency-sensitive VM is never paced"
                    );
                    continue;
                }
                match d.reason {
                    TxReason::Justitia { virtual_link_pct } => {
                        assert!(
                            (50.0..100.0).contains(&virtual_link_pct),
                            "{virtual_link_pct}"
                        );
                    }
                    TxReason::Release => {}
                    r => panic!("unexpected reason {r}"),
                }
                ceiling = d.tx.max_bps;
            }
            out.push(ceiling);
            i += 1;
        }
    }
    out
}

#[test]
fn the_file_is_a_baseline_that_runs_as_published() {
    let cfg = config();
    assert_eq!(cfg.policy, PolicyKind::Justitia);
    assert!(cfg.as_published, "Justitia has no entitlements to guard");
    assert_eq!(cfg.intervals_per_actuation(), 1);
    let bad = "policy = \"justitia\"\n[justitia]\ndecrease = 1.5\n";
    let e = PolicyConfig::from_toml(bad).unwrap_err().to_string();
    assert!(e.contains("justitia.decrease"), "{e}");
    let stray = "policy = \"governor\"\n[justitia]\ndecrease = 0.5\n";
    assert!(PolicyConfig::from_toml(stray).is_err());
}

#[test]
fn a_missed_target_halves_the_elephants_link_down_to_their_share_by_count() {
    // 20 quiet intervals (each wait 1 us: the quiet level), then 10 with 8 us of wait (a
    // slowdown of 1.4 over the quiet 5 us).
    let c = run(&[(20, 1, false), (10, 8, false)]);
    assert!(c[..20].iter().all(Option::is_none), "{c:?}");
    let half = LINK_BYTES * 4;
    assert_eq!(c[20], Some(half), "one period missed: x 1/2");
    assert!(
        c[21..].iter().all(|x| *x == Some(half)),
        "the floor: 1 of 2 active: {c:?}"
    );
}

#[test]
fn a_met_target_gives_the_link_back_by_five_percent_a_period() {
    // Missed for 5 intervals (20-24), then quiet: while the window (10 intervals) holds one
    // slow interval the mean is still 14% over (interval 33), so the link grows only once they
    // have all left it (34); then by 5% per interval, and it is lifted at the whole link.
    let c = run(&[(20, 1, false), (5, 8, false), (30, 1, false)]);
    let at = |k: usize| c[k].map_or(1.0, |b| b as f64 / LINK_BPS);
    assert!((at(33) - 0.5).abs() < 1e-9, "{}", at(33));
    assert!((at(34) - 0.55).abs() < 1e-9, "{}", at(34));
    assert!((at(39) - 0.80).abs() < 1e-9, "{}", at(39));
    assert_eq!(c[42].map(|b| b > 0), Some(true), "{c:?}");
    assert_eq!(c[43], None, "back to the whole link: lifted");
}

#[test]
fn an_elephant_alone_is_never_paced() {
    let c = run(&[(20, 1, false), (5, 8, false), (25, 8, true)]);
    assert!(c[20].is_some());
    // The mouse is idle after 20 intervals without bytes: only an elephant is active.
    assert!(c[25..44].iter().any(Option::is_some));
    assert_eq!(c[49], None, "{c:?}");
}
