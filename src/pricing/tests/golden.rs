//! Hand-computed cases for both algorithms (numbers worked out in the comments).
#![allow(clippy::cast_possible_truncation)]

use resex_pricing::{
    Baseline, CapReason, Engine, EngineOutput, IntervalInput, IoSharesMode, LatencyReport,
    PolicyConfig, PolicyKind, VmId, VmSpec, VmUsage,
};

fn step(e: &mut Engine, i: u64, usage: &[VmUsage]) -> EngineOutput {
    e.step(&IntervalInput {
        interval: i,
        link_util: None,
        usage,
    })
    .unwrap()
    .clone()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6
}

/// Two 1-vCPU VMs, equal split: each is allotted 100 000 CPU Resos + 1 048 576 / 2 = 524 288
/// MTU Resos = 624 288. The 2 MiB VM runs flat out: 100% CPU and 600 MTUs per interval, 700
/// Resos per interval at rate 1. Its balance is 624 288 - 700 n after n intervals: below 10%
/// (62 428.8) from n = 803 (interval 802), so the first cut is at the next actuation boundary,
/// interval 810 (balance 624 288 - 700 x 811 = 56 588; 18.9% of the epoch left): cap 90. Cuts
/// follow every 10 intervals while more than 10% of the epoch is left after the interval, i.e.
/// through interval 890 (10.9% left): nine cuts, cap 100 x 0.9^9 = 38.7420489. The balance
/// reaches 0 at n = 892 (interval 891) and stays there. Interval 1000 starts a new epoch:
/// balance and cap restored. The 64 KiB VM (20% CPU, 64 MTUs: 84 per interval) never runs low.
#[test]
fn freemarket_two_mib_vm_exhausts_its_resos_and_its_cap_falls() {
    let cfg = PolicyConfig::defaults(PolicyKind::Freemarket);
    let mut e = Engine::new(cfg);
    e.add_vm(VmSpec::new(1, "vm64k", 1), 0).unwrap();
    e.add_vm(VmSpec::new(2, "vm2m", 1), 0).unwrap();
    let usage = [
        VmUsage::new(VmId(1), 20.0, 64),
        VmUsage::new(VmId(2), 100.0, 600),
    ];
    let mut decisions = Vec::new();
    for i in 0..1000 {
        let out = step(&mut e, i, &usage);
        let big = out.rows[1];
        assert_eq!(big.allotment, 624_288.0);
        assert_eq!(big.charge_cpu, 100.0);
        assert_eq!(big.charge_io, 600.0);
        let expected_balance = (624_288.0 - 700.0 * (i + 1) as f64).max(0.0);
        assert!(
            close(big.balance, expected_balance),
            "interval {i}: {}",
            big.balance
        );
        assert!(close(
            out.rows[0].balance,
            624_288.0 - 84.0 * (i + 1) as f64
        ));
        for d in &out.decisions {
            decisions.push((i, d.vm, d.cap_pct, d.reason));
        }
        if i == 802 {
            assert!(big.balance < 62_428.8 && big.cap == 100.0);
        }
        if i == 891 {
            assert_eq!(big.balance, 0.0);
        }
    }
    assert_eq!(decisions.len(), 9, "{decisions:?}");
    for (k, (i, vm, cap, reason)) in decisions.iter().enumerate() {
        assert_eq!(*i, 810 + 10 * k as u64);
        assert_eq!(*vm, VmId(2));
        assert!(close(*cap, 100.0 * 0.9f64.powi(k as i32 + 1)), "{cap}");
        assert!(matches!(reason, CapReason::LowBalance { .. }));
    }
    assert!(close(decisions[0].2, 90.0));
    assert!(close(decisions[8].2, 38.742_048_9));
    assert!(close(e.account(VmId(2)).unwrap().cap, 38.742_048_9));
    if let CapReason::LowBalance { balance, allotment } = decisions[0].3 {
        assert_eq!((balance, allotment), (56_588.0, 624_288.0));
    }

    let out = step(&mut e, 1000, &usage);
    assert_eq!(out.rows[1].balance, 624_288.0 - 700.0);
    assert_eq!(out.rows[1].cap, 100.0);
    assert_eq!(
        out.decisions
            .iter()
            .map(|d| (d.vm, d.reason))
            .collect::<Vec<_>>(),
        vec![(VmId(2), CapReason::EpochReplenish)]
    );
}

fn report(mean: f64, stddev: f64) -> Option<LatencyReport> {
    Some(LatencyReport {
        count: 100,
        mean_ns: mean,
        stddev_ns: stddev,
        p99_ns: mean * 2.0,
        ..LatencyReport::default()
    })
}

/// Victim vm1 (baseline 10 us mean, 1 us stddev) sends 100 MTUs per interval; vm2 sends 900.
/// - interval 5: vm1 reports 15 us / 1.2 us: IntfPercent = max(0.5, 0.2) = 0.5 > 0.10;
///   IOShare(vm2) = 900 / 1000 = 0.9; r' = 0.45; vm2's rate 1 -> 1.45, charged at once:
///   CPU 100 x 1.45 = 145, I/O 900 x 1.45 = 1305.
/// - interval 10 (actuation): vm2's cap = 100 / 1.45 = 68.9655.
/// - interval 15: 12 us / 1 us: IntfPercent 0.2, r' = 0.18, rate 1.63;
///   interval 20: cap = 68.9655 x 1.45 / 1.63 = 100 / 1.63 = 61.3497.
/// - intervals 25 and 35: 10.5 us (5%, under the SLA): no raise. Interval 30: rate
///   1 + 0.63 x 0.9 = 1.567, cap 63.8162; interval 40: 1.5103, cap 66.2120.
/// - no reports after 35: rates hold at 50 ... 130 (reports are missing, not good news);
///   at 140, 105 ms after the last report (timeout 100 ms), decay resumes: 1.459 27.
///
/// Interval numbers count from the episode's start: both VMs send for [`WARM`] intervals
/// before it, so the host's smoothed rates (about 100 ms) show vm2 above its entitlement (half
/// the link) and vm1 within it; only a VM above its entitlement may be capped.
#[test]
fn ioshares_interference_episode_and_decay() {
    let mut cfg = PolicyConfig::defaults(PolicyKind::Ioshares);
    cfg.ioshares.as_mut().unwrap().mode = IoSharesMode::Paper;
    let mut e = Engine::new(cfg);
    let mut victim = VmSpec::new(1, "vm64k", 1);
    victim.baseline = Some(Baseline {
        mean_ns: 10_000.0,
        stddev_ns: 1_000.0,
    });
    e.add_vm(victim, 0).unwrap();
    e.add_vm(VmSpec::new(2, "vm2m", 1), 0).unwrap();
    let mut rate_at = Vec::new();
    let mut decisions = Vec::new();
    for w in 0..WARM {
        let out = step(
            &mut e,
            w,
            &[
                VmUsage::new(VmId(1), 30.0, 100),
                VmUsage::new(VmId(2), 100.0, 900),
            ],
        );
        assert!(out.decisions.is_empty(), "no cap before any report");
    }
    for i in 0..150 {
        let mut u1 = VmUsage::new(VmId(1), 30.0, 100);
        let u2 = VmUsage::new(VmId(2), 100.0, 900);
        u1.report = match i {
            5 => report(15_000.0, 1_200.0),
            15 => report(12_000.0, 1_000.0),
            25 | 35 => report(10_500.0, 1_000.0),
            _ => None,
        };
        let out = step(&mut e, WARM + i, &[u1, u2]);
        rate_at.push(out.rows[1].rate);
        decisions.extend(out.decisions.iter().map(|d| (i, d.vm, d.cap_pct, d.reason)));
        match i {
            5 => {
                assert!(close(out.rows[0].intf_pct.unwrap(), 0.5));
                assert_eq!(out.rows[0].interferer, Some(VmId(2)));
                assert!(close(out.rows[1].charge_cpu, 145.0));
                assert!(close(out.rows[1].charge_io, 1305.0));
            }
            25 => {
                assert!(close(out.rows[0].intf_pct.unwrap(), 0.05));
                assert_eq!(out.rows[0].interferer, None);
            }
            _ => {}
        }
    }
    assert!(close(rate_at[4], 1.0));
    assert!(close(rate_at[5], 1.45));
    assert!(close(rate_at[15], 1.63));
    assert!(close(rate_at[30], 1.567));
    assert!(close(rate_at[40], 1.5103));
    assert!(
        close(rate_at[130], 1.5103),
        "held while reports are missing"
    );
    assert!(close(rate_at[140], 1.459_27));
    let caps: Vec<(u64, f64)> = decisions.iter().map(|d| (d.0, d.2)).collect();
    assert_eq!(caps.len(), 5, "{decisions:?}");
    assert_eq!(caps[0].0, 10);
    assert!(close(caps[0].1, 100.0 / 1.45));
    assert_eq!(caps[1].0, 20);
    assert!(close(caps[1].1, 100.0 / 1.63));
    assert!(close(caps[1].1, caps[0].1 * 1.45 / 1.63));
    assert_eq!((caps[2].0, caps[3].0, caps[4].0), (30, 40, 140));
    assert!(close(caps[2].1, 100.0 / 1.567));
    assert!(close(caps[3].1, 100.0 / 1.5103));
    assert_eq!(
        decisions[0].3,
        CapReason::Interferer {
            victim: VmId(1),
            rate: 1.45
        }
    );
    assert!(matches!(decisions[2].3, CapReason::Decay { .. }));
    assert!(decisions.iter().all(|d| d.1 == VmId(2)));
}

/// Intervals of traffic before an episode: the host's smoothed rates settle.
const WARM: u64 = 300;

/// The baseline is learned from the first `baseline_reports` reports; until then a slow report
/// charges nobody.
#[test]
fn ioshares_learns_the_baseline_before_charging() {
    let mut cfg = PolicyConfig::defaults(PolicyKind::Ioshares);
    cfg.ioshares.as_mut().unwrap().mode = IoSharesMode::Paper;
    cfg.ioshares.as_mut().unwrap().baseline_reports = 3;
    let mut e = Engine::new(cfg);
    e.add_vm(VmSpec::new(1, "victim", 1), 0).unwrap();
    e.add_vm(VmSpec::new(2, "bully", 1), 0).unwrap();
    let lat = [20_000.0, 8_000.0, 10_000.0, 12_000.0, 13_000.0];
    for (i, mean) in lat.iter().enumerate() {
        let mut u1 = VmUsage::new(VmId(1), 10.0, 10);
        u1.report = report(*mean, 500.0);
        let out = step(&mut e, i as u64, &[u1, VmUsage::new(VmId(2), 50.0, 90)]).rows;
        match i {
            // Learning: 20 us is not held against anyone.
            0..=2 => assert_eq!((out[0].intf_pct, out[1].rate), (None, 1.0)),
            // Baseline 12.667 us: 12 us is under it (and lowers it to 12 us).
            3 => assert_eq!(out[0].intf_pct, Some(0.0)),
            // 13 us vs 12 us: 8.3%, under the 10% SLA.
            _ => {
                assert!(close(out[0].intf_pct.unwrap(), 1.0 / 12.0));
                assert_eq!(out[1].rate, 1.0);
            }
        }
    }
}

/// A VM that joins three quarters through an epoch is allotted a quarter of an epoch, with its
/// I/O share taken against the VMs already there.
#[test]
fn late_arrival_gets_a_prorated_allotment() {
    let mut e = Engine::new(PolicyConfig::defaults(PolicyKind::Freemarket));
    e.add_vm(VmSpec::new(1, "a", 1), 0).unwrap();
    for i in 0..750 {
        step(&mut e, i, &[]);
    }
    e.add_vm(VmSpec::new(2, "b", 1), 750).unwrap();
    let out = step(&mut e, 750, &[]);
    assert_eq!(out.rows[0].allotment, 100_000.0 + 1_048_576.0);
    assert_eq!(out.rows[1].allotment, (100_000.0 + 524_288.0) / 4.0);
    let out = step(&mut e, 1000, &[]);
    assert_eq!(out.rows[1].allotment, 624_288.0);
    let gone = e.remove_vm(VmId(2)).unwrap();
    assert_eq!(gone.allotment_used_period, 624_288.0 / 1000.0);
}

/// IOShares' `share` attribution by hand: the aggressor sends 500 000 bytes every 1 ms interval
/// on a link of 1 GiB/s (8 589 934.592 bits per interval): 4 000 000 bits, a share of
/// f = 0.465 66 (smoothed with memory 0.9: after [`WARM`] intervals, f). It is above its
/// entitlement (a third of the link); a second reporting VM that sends 1 000 bytes a ms is
/// within its own, so only the aggressor pays: at interval 5 the victim (IntfPercent 0.5)
/// charges it 0.5 f, and the small VM nothing, then or when it reports interference itself at
/// interval 15.
#[test]
fn ioshares_share_mode_charges_by_share_of_the_link_and_never_a_victim() {
    let cfg = PolicyConfig::defaults(PolicyKind::Ioshares);
    assert_eq!(cfg.ioshares.as_ref().unwrap().mode, IoSharesMode::Share);
    let mut e = Engine::new(cfg);
    let base = Some(Baseline {
        mean_ns: 10_000.0,
        stddev_ns: 1_000.0,
    });
    let mut victim = VmSpec::new(1, "victim", 1);
    victim.baseline = base;
    let mut small = VmSpec::new(2, "small", 1);
    small.baseline = base;
    e.add_vm(victim, 0).unwrap();
    e.add_vm(small, 0).unwrap();
    e.add_vm(VmSpec::new(3, "aggressor", 1), 0).unwrap();
    let f = 4_000_000.0 / (8.0 * (1u64 << 30) as f64 / 1000.0);
    let mut prev = (1.0, 1.0);
    for i in 0..WARM + 20 {
        let mut u1 = VmUsage::new(VmId(1), 10.0, 10);
        let mut u2 = VmUsage::new(VmId(2), 10.0, 1);
        let mut u3 = VmUsage::new(VmId(3), 90.0, 500);
        u1.bytes = 10_000;
        u2.bytes = 1_000;
        u3.bytes = 500_000;
        u1.report = (i == WARM + 5).then(|| report(15_000.0, 1_200.0)).flatten();
        u2.report = (i == WARM + 15)
            .then(|| report(15_000.0, 1_200.0))
            .flatten();
        let out = step(&mut e, i, &[u1, u2, u3]);
        match i.checked_sub(WARM) {
            Some(5) => {
                let raise = 0.5 * f;
                assert!(
                    (out.rows[2].rate - (1.0 + raise)).abs() < 1e-6,
                    "{}",
                    out.rows[2].rate
                );
                assert_eq!(
                    out.rows[1].rate, 1.0,
                    "within its entitlement: never charged"
                );
                assert_eq!(out.rows[0].interferer, Some(VmId(3)));
                assert!(close(out.rows[0].rate, 1.0), "a victim is never charged");
            }
            Some(15) => {
                assert_eq!(out.rows[1].interferer, Some(VmId(3)));
                // The small VM is this period's victim: its rate does not rise; the
                // aggressor's does.
                assert!(
                    close(out.rows[1].rate, prev.0),
                    "{} {}",
                    out.rows[1].rate,
                    prev.0
                );
                assert!(out.rows[2].rate > prev.1 + 0.1);
            }
            _ => {}
        }
        prev = (out.rows[1].rate, out.rows[2].rate);
    }
}
