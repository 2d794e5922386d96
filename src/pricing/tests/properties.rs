//! Properties over random hosts: balances never below zero, caps within bounds, decisions only
#![allow(clippy::cast_possible_truncation)]
//! at actuation boundaries, identical output for identical input, and no effect of VM order.

use proptest::prelude::*;
use resex_pricing::{
    Engine, EngineOutput, IntervalInput, LatencyReport, PolicyConfig, PolicyKind, VmId, VmSpec,
    VmUsage,
};

#[derive(Debug, Clone)]
struct Host {
    vcpus: Vec<u32>,
    /// Per interval, per VM: cpu%, MTUs, optional report mean (ns).
    intervals: Vec<Vec<(f64, u64, Option<f64>)>>,
    kind: PolicyKind,
}

fn host() -> impl Strategy<Value = Host> {
    (
        1usize..6,
        prop_oneof![Just(PolicyKind::Freemarket), Just(PolicyKind::Ioshares)],
    )
        .prop_flat_map(|(n, kind)| {
            (
                proptest::collection::vec(1u32..4, n),
                proptest::collection::vec(
                    proptest::collection::vec(
                        (
                            0.0f64..400.0,
                            prop_oneof![Just(0u64), 0u64..50, 0u64..20_000],
                            proptest::option::weighted(0.3, 1_000.0f64..100_000.0),
                        ),
                        n,
                    ),
                    1..400,
                ),
                Just(kind),
            )
                .prop_map(|(vcpus, intervals, kind)| Host {
                    vcpus,
                    intervals,
                    kind,
                })
        })
}

fn config(kind: PolicyKind) -> PolicyConfig {
    // A short epoch so that random runs cross several epochs and many actuation periods.
    let mut cfg = PolicyConfig::defaults(kind);
    cfg.ledger.epoch_ms = 100;
    cfg.ledger.link_bytes_per_sec = 100 << 20;
    if let Some(s) = cfg.ioshares.as_mut() {
        s.baseline_reports = 2;
        s.decay = 0.5;
    }
    cfg.validate().unwrap();
    cfg
}

/// Runs `h` with VM `k` given id `ids[k]`, added in `add_order` and listed in `list_order`.
/// Returns the outputs re-keyed by the VM's position in `h`.
fn run(h: &Host, ids: &[u32], add_order: &[usize], list_order: &[usize]) -> Vec<EngineOutput> {
    let mut e = Engine::new(config(h.kind));
    for &k in add_order {
        e.add_vm(VmSpec::new(ids[k], format!("vm{k}"), h.vcpus[k]), 0)
            .unwrap();
    }
    let mut outs = Vec::new();
    for (i, row) in h.intervals.iter().enumerate() {
        let usage: Vec<VmUsage> = list_order
            .iter()
            .map(|&k| {
                let (cpu, mtus, lat) = row[k];
                let mut u = VmUsage::new(VmId(ids[k]), cpu, mtus);
                u.report = lat.map(|m| LatencyReport {
                    count: 10,
                    mean_ns: m,
                    stddev_ns: m / 10.0,
                    p99_ns: m * 3.0,
                    ..LatencyReport::default()
                });
                u
            })
            .collect();
        let out = e
            .step(&IntervalInput {
                interval: i as u64,
                link_util: None,
                usage: &usage,
            })
            .unwrap();
        outs.push(out.clone());
    }
    outs
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn bounds_hold_and_decisions_wait_for_boundaries(h in host()) {
        let n = h.vcpus.len();
        let ids: Vec<u32> = (0..n as u32).collect();
        let order: Vec<usize> = (0..n).collect();
        let cfg = config(h.kind);
        for (i, out) in run(&h, &ids, &order, &order).iter().enumerate() {
            for row in &out.rows {
                let vcpus = h.vcpus[row.vm.0 as usize];
                prop_assert!(row.balance >= 0.0 && row.balance <= row.allotment);
                prop_assert!(row.cap >= cfg.caps.floor_pct - 1e-9);
                prop_assert!(row.cap <= 100.0 * f64::from(vcpus) + 1e-9);
                prop_assert!(row.rate >= 1.0);
                prop_assert!(row.charge_cpu >= 0.0 && row.charge_io >= 0.0);
            }
            if i % 10 != 0 {
                prop_assert!(out.decisions.is_empty(), "decision at interval {}", i);
            }
        }
    }

    #[test]
    fn same_input_same_output_whatever_the_vm_order(h in host(), seed in any::<u64>()) {
        let n = h.vcpus.len();
        let ids: Vec<u32> = (0..n as u32).collect();
        let order: Vec<usize> = (0..n).collect();
        let a = run(&h, &ids, &order, &order);
        let b = run(&h, &ids, &order, &order);
        prop_assert_eq!(format!("{a:?}"), format!("{b:?}"));
        // Shuffle the order VMs are added in and listed in each interval.
        let mut shuffled = order.clone();
        let mut s = seed;
        for k in (1..n).rev() {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            shuffled.swap(k, (s >> 33) as usize % (k + 1));
        }
        let mut reversed = order.clone();
        reversed.reverse();
        let c = run(&h, &ids, &shuffled, &reversed);
        prop_assert_eq!(format!("{a:?}"), format!("{c:?}"));
    }
}
