//! The progress policy (adaptive unfairness) through the engine: bursts found in the bytes per
//! interval, their size learned, shares by `1 + gain x progress` while bursting, released
//! after. The engine's guard makes every guarantee the VM's entitlement, so the policy's
//! shares arrive as weights in the split of the excess (relative to the largest, 1..100):
//! unfairness only with what is not guaranteed.

use resex_pricing::{
    Engine, IntervalInput, PolicyConfig, TxLimit, TxReason, VmId, VmSpec, VmUsage,
};

fn config() -> PolicyConfig {
    PolicyConfig::from_toml(
        r#"
policy = "progress"
[ledger]
link_bytes_per_sec = 1000000000
[caps]
actuation_period_ms = 1
[progress]
gain = 10.0
min_burst_bytes = 1000000
"#,
    )
    .unwrap()
}

fn usage(vm: u32, bytes: u64) -> VmUsage {
    let mut u = VmUsage::new(VmId(vm), 100.0, 0);
    u.bytes = bytes;
    u
}

/// VM 1 sends 1 MB per interval for 4 intervals every 10; VM 2 the same, 2 intervals later;
/// VM 3 sends 10 KB every interval (a latency-sensitive VM). Returns each interval's weights
/// in the excess (0: none) of VMs 1-3 once decided.
fn run(intervals: u64) -> Vec<[u64; 3]> {
    let mut e = Engine::new(config());
    for id in 1..=3 {
        e.add_vm(VmSpec::new(id, format!("vm{id}"), 1), 0).unwrap();
    }
    let mut shares = [0u64; 3];
    let mut out = Vec::new();
    for i in 0..intervals {
        let on = |start: u64| (i + 10 - start) % 10 < 4;
        let u = [
            usage(1, if on(0) { 1_000_000 } else { 0 }),
            usage(2, if on(2) { 1_000_000 } else { 0 }),
            usage(3, 10_000),
        ];
        let o = e
            .step(&IntervalInput {
                interval: i,
                link_util: None,
                usage: &u,
            })
            .unwrap();
        for d in &o.tx_decisions {
            let k = (d.vm.0 - 1) as usize;
            shares[k] = u64::from(d.tx.weight.unwrap_or(0));
            match d.reason {
                TxReason::Progress { progress_pct } => {
                    assert!((0.0..=100.0).contains(&progress_pct));
                }
                TxReason::Entitlement { .. } => {}
                r => panic!("unexpected reason {r}"),
            }
            assert_eq!(d.tx.share_bps, Some(2_666_666_667), "the entitlement");
            assert_eq!(d.tx.max_bps, None, "shares only");
        }
        out.push(shares);
    }
    out
}

#[test]
fn no_share_until_a_burst_size_is_learned() {
    let s = run(6);
    assert!(s.iter().all(|x| *x == [0, 0, 0]), "{s:?}");
}

#[test]
fn the_vm_further_into_its_burst_gets_the_larger_share() {
    let s = run(40);
    // Interval 32: VM 1 is 3 of 4 MB in (progress 0.75 -> 0.7: weight 8), VM 2 1 of 4 (0.25 ->
    // 0.2: weight 3); VM 3 never learns a burst (10 KB is below min_burst_bytes) but sends: it
    // weighs as the most advanced burst (8), never behind a job. Relative to the largest:
    // 100, 38, 100.
    assert_eq!(s[32], [100, 38, 100], "{:?}", &s[30..38]);
    // VM 1's burst ends after its last interval (33) and two quiet ones (34, 35): released at
    // 35 (the least weight), when VM 2 (in its last interval) and VM 3 (weighing as VM 2)
    // split the excess evenly.
    assert!(s[34][0] > 1, "{:?}", &s[30..38]);
    assert_eq!(s[35], [1, 100, 100], "{:?}", &s[30..38]);
}

#[test]
fn a_vm_that_never_pauses_keeps_no_advantage() {
    let mut e = Engine::new(config());
    e.add_vm(VmSpec::new(1, "vm1", 1), 0).unwrap();
    let mut last = None;
    for i in 0..40u64 {
        // One 2 MB burst to learn from, then sending without a pause.
        let bytes = match i {
            0 | 1 => 1_000_000,
            2 | 3 => 0,
            _ => 1_000_000,
        };
        let o = e
            .step(&IntervalInput {
                interval: i,
                link_util: None,
                usage: &[usage(1, bytes)],
            })
            .unwrap();
        if let Some(d) = o.tx_decisions.last() {
            last = Some((i, d.tx));
        }
    }
    // Past 4 MB (twice the learned 2 MB) its share is released: what is left is its
    // entitlement (the whole link: it is alone) and no weight.
    let (i, tx) = last.unwrap();
    assert!(i <= 10, "last change at {i}");
    assert_eq!(tx, TxLimit::new(Some(8_000_000_000), None));
}
