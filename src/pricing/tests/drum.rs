//! The DRUM policy through the engine, against hand-computed allocations.

use resex_pricing::{
    CapReason, Engine, EngineOutput, IntervalInput, PolicyConfig, TxLimit, TxReason, VmId, VmSpec,
    VmUsage,
};

/// A 1 GB/s (8 Gb/s) link, 1 ms intervals, 10 ms periods, 2 CPUs for CQ service, a negligible
/// latency utility.
fn config(lever: &str) -> PolicyConfig {
    PolicyConfig::from_toml(&format!(
        r#"
policy = "drum"
lever = "{lever}"
[ledger]
link_bytes_per_sec = 1000000000
[drum]
beta = 1e-9
iterations = 400
cpu_capacity_pct = 200.0
"#
    ))
    .unwrap()
}

fn usage(vm: u32, cpu_pct: f64, link: f64) -> VmUsage {
    let mut u = VmUsage::new(VmId(vm), cpu_pct, 0);
    // 1e6 bytes per 1 ms interval is the whole link.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    {
        u.bytes = (link * 1e6).round() as u64;
    }
    u
}

/// One interval of `usage` on a link the policy measures itself.
fn step<'e>(e: &'e mut Engine, interval: u64, usage: &[VmUsage]) -> &'e EngineOutput {
    e.step(&IntervalInput {
        interval,
        link_util: None,
        usage,
    })
    .unwrap()
}

/// Steps intervals 0..=300 (long enough for the host's smoothed rates, over about 100 ms, to
/// settle) and returns each VM's last cap and transmit decision.
/// Each VM's last cap decision.
type Caps = Vec<(VmId, f64, CapReason)>;
/// Each VM's last transmit decision.
type Txs = Vec<(VmId, TxLimit, TxReason)>;

fn run(lever: &str) -> (Caps, Txs) {
    // Equal class weights: the hand computation below is DRUM's problem with w = 1.
    let mut cfg = config(lever);
    cfg.drum.as_mut().unwrap().weights.light = 1.0;
    let mut e = Engine::new(cfg);
    for id in 1..=3 {
        e.add_vm(VmSpec::new(id, format!("vm{id}"), 1), 0).unwrap();
    }
    let mut caps = Vec::new();
    let mut txs = Vec::new();
    for i in 0..=300 {
        // VM 1: half the link on half a CPU (a = 1); VM 2: a tenth of the link on a whole CPU
        // (a = 10); VM 3 idle.
        let u = [
            usage(1, 50.0, 0.5),
            usage(2, 100.0, 0.1),
            usage(3, 3.0, 0.0),
        ];
        let out = step(&mut e, i, &u);
        for d in &out.decisions {
            caps.retain(|c: &(VmId, f64, CapReason)| c.0 != d.vm);
            caps.push((d.vm, d.cap_pct, d.reason));
        }
        for d in &out.tx_decisions {
            txs.retain(|t: &(VmId, TxLimit, TxReason)| t.0 != d.vm);
            txs.push((d.vm, d.tx, d.reason));
        }
    }
    txs.sort_by_key(|t| t.0);
    (caps, txs)
}

#[test]
fn two_vms_split_the_link_where_both_capacities_bind() {
    // a = (1, 10), C = 2 CPUs (VM 3 is idle), Q = 1:
    // max 2 sqrt(x1) + 2 sqrt(x2), x1 + x2 <= 1, x1 + 10 x2 <= 2. Both bind: x = (8/9, 1/9),
    // z = (8/9, 10/9); the prices 1/sqrt(x_j) = lambda + a_j mu give mu = 0.2155,
    // lambda = 0.8452, both >= 0. Shares in steps of 1 %: 89 % and 11 % of 8 Gb/s; caps
    // 100 z = 88.9 -> 89 % and 111 % -> 100 % (its vCPU: unchanged, no decision). VM 1 sends
    // 4 Gb/s, above its entitlement (a third of the link), so its cap may apply; the guard
    // makes every guarantee the entitlement and DRUM's shares the weights of the excess.
    let (caps, txs) = run("both");
    assert_eq!(caps.len(), 1, "{caps:?}");
    let (vm, cap, reason) = caps[0];
    assert_eq!((vm, cap), (VmId(1), 89.0));
    let CapReason::Allocation { cpu_pct } = reason else {
        panic!("{reason:?}")
    };
    assert!((cpu_pct - 800.0 / 9.0).abs() < 0.1, "{cpu_pct}");
    let share = |v: u32| txs.iter().find(|t| t.0 == VmId(v)).map(|t| t.1);
    let third = Some(2_666_666_667);
    let limit = |weight| {
        Some(TxLimit {
            share_bps: third,
            max_bps: None,
            weight: Some(weight),
        })
    };
    // Weights relative to the largest share: 712 : 88 = 100 : 12.
    assert_eq!(share(1), limit(100));
    assert_eq!(share(2), limit(12));
    // The idle VM keeps its guarantee, with the least weight in the excess.
    assert_eq!(share(3), limit(1));
}

#[test]
fn each_lever_alone_acts_alone() {
    let (caps, txs) = run("rate");
    assert!(caps.is_empty(), "{caps:?}");
    assert_eq!(txs.len(), 3, "every VM's guarantee is its entitlement");
    let (caps, txs) = run("cpu");
    assert_eq!(caps.len(), 1);
    assert!(txs.is_empty(), "{txs:?}");
}

#[test]
fn a_drum_section_needs_the_drum_policy_and_ranges_are_checked() {
    let e = PolicyConfig::from_toml("policy = \"governor\"\n[drum]\nk = 3\n").unwrap_err();
    assert!(e.to_string().contains("`[drum]` section"), "{e}");
    let e = PolicyConfig::from_toml("policy = \"drum\"\n[drum]\nalpha = 1.0\n").unwrap_err();
    assert!(e.to_string().contains("drum.alpha"), "{e}");
    let e = PolicyConfig::from_toml("policy = \"drum\"\n[drum]\nspeed = 1\n").unwrap_err();
    assert!(e.to_string().contains("speed"), "{e}");
}

#[test]
fn a_light_vm_weighs_ten_so_its_weight_comes_a_hundred_to_one_whether_or_not_it_reports() {
    // Default weights (light 10, bulk 1), no CPU limit, beta negligible: x_j ~ w_j^2, so
    // x = (100/101, 1/101) = (0.990, 0.0099): shares of 99 % and 1 %, weights 100 and 1 in
    // the split of the excess. Light is what the host measures (VM 1 sends 0.4 Gb/s, within
    // its 4 Gb/s entitlement; VM 2 7.2 Gb/s), so a report changes nothing; each guarantee is
    // the entitlement.
    let last = |report: bool| {
        let mut cfg = config("rate");
        cfg.drum.as_mut().unwrap().cpu_capacity_pct = 0.0;
        let mut e = Engine::new(cfg);
        e.add_vm(VmSpec::new(1, "victim", 1), 0).unwrap();
        e.add_vm(VmSpec::new(2, "bulk", 1), 0).unwrap();
        let mut last = Vec::new();
        for i in 0..=300 {
            let mut v = usage(1, 100.0, 0.05);
            let mut b = usage(2, 100.0, 0.9);
            if report {
                for u in [&mut v, &mut b] {
                    u.report = Some(resex_pricing::LatencyReport {
                        count: 100,
                        mean_ns: 20_000.0,
                        stddev_ns: 1_000.0,
                        ..Default::default()
                    });
                }
            }
            let u = [v, b];
            let out = step(&mut e, i, &u);
            for d in &out.tx_decisions {
                last.retain(|t: &(VmId, TxLimit)| t.0 != d.vm);
                last.push((d.vm, d.tx));
            }
        }
        last.sort_by_key(|t| t.0);
        last
    };
    let limit = |weight| TxLimit {
        share_bps: Some(4_000_000_000),
        max_bps: None,
        weight: Some(weight),
    };
    let silent = last(false);
    assert_eq!(silent, [(VmId(1), limit(100)), (VmId(2), limit(1))]);
    assert_eq!(last(true), silent, "reports change nothing");
}
