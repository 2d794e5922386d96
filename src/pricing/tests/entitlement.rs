//! The entitlement guard through the engine: whatever a policy proposes, a VM within its
//! entitlement gets no cap and no ceiling, every guarantee is the VM's entitlement, a ceiling
//! never goes below it, and a cap that held a VM under its entitlement is lifted.

use resex_pricing::{
    Account, CapReason, Ctx, Engine, Entitlement, IntervalInput, Policy, PolicyConfig, TxLimit,
    TxReason, VmId, VmSpec, VmUsage,
};

const LINK: u64 = 8_000_000_000;

/// Proposes the harshest limits on every VM: the floor cap, a 1% ceiling and a share that
/// favours VM 1 a hundredfold.
#[derive(Debug)]
struct Harsh;

impl Policy for Harsh {
    fn name(&self) -> &'static str {
        "harsh"
    }
    fn price(&mut self, _: &Ctx<'_>, _: &mut [Account]) {}
    fn actuate(&mut self, _: &Ctx<'_>, accounts: &mut [Account]) {
        for a in accounts.iter_mut() {
            let share = if a.id() == VmId(1) { 100 } else { 1 };
            a.proposal = Some((1.0, CapReason::EpochReplenish));
            a.tx_proposal = Some((
                TxLimit::new(Some(share * 10_000_000), Some(LINK / 100)),
                TxReason::Release,
            ));
        }
    }
    fn proposes_tx(&self) -> bool {
        true
    }
}

fn engine(lever: &str, specs: &[VmSpec]) -> Engine {
    let mut cfg =
        PolicyConfig::from_toml(&format!("policy = \"freemarket\"\nlever = \"{lever}\"")).unwrap();
    cfg.caps.floor_pct = 10.0;
    let mut e = Engine::with_policy(cfg, Box::new(Harsh));
    e.set_link_bps(LINK);
    e.set_header_bytes(30);
    for s in specs {
        e.add_vm(s.clone(), 1).unwrap();
    }
    e
}

/// Bytes per 1 ms interval for a rate in bits/s (1 KiB packets).
fn usage(vm: u32, bps: f64) -> VmUsage {
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let bytes = (bps / 8.0 / 1000.0) as u64;
    let mut u = VmUsage::new(VmId(vm), 100.0, bytes.div_ceil(1024));
    u.bytes = bytes;
    u
}

/// Runs `n` intervals with VM 1 at `a` and VM 2 at `b` bits/s; returns the engine.
fn run(e: &mut Engine, from: u64, n: u64, a: f64, b: f64) {
    for i in from..from + n {
        let u = [usage(1, a), usage(2, b)];
        e.step(&IntervalInput {
            interval: i,
            link_util: Some(0.9),
            usage: &u,
        })
        .unwrap();
    }
}

#[test]
fn a_vm_within_its_entitlement_gets_no_cap_and_no_ceiling_and_its_guarantee_is_its_own() {
    let mut e = engine(
        "both",
        &[VmSpec::new(1, "light", 1), VmSpec::new(2, "heavy", 1)],
    );
    // Equal split: 4 Gb/s each. VM 1 sends 1 Gb/s, VM 2 7 Gb/s.
    run(&mut e, 1, 500, 1e9, 7e9);
    let (light, heavy) = (e.account(VmId(1)).unwrap(), e.account(VmId(2)).unwrap());
    assert!((light.ent.tx_bps - 4e9).abs() < 1.0);
    assert!(light.ent.within() && !heavy.ent.within());
    assert_eq!(light.cap, 100.0, "within its entitlement: never capped");
    assert_eq!(light.tx.max_bps, None, "within its entitlement: no ceiling");
    assert_eq!(
        light.tx.share_bps,
        Some(4_000_000_000),
        "its guarantee is its entitlement"
    );
    assert_eq!(
        heavy.tx.share_bps,
        Some(4_000_000_000),
        "so is the heavy one's"
    );
    assert_eq!(
        heavy.tx.max_bps,
        Some(4_400_000_000),
        "a ceiling, but never below 1.1x the entitlement"
    );
    // The policy's shares became weights for the excess, relative to the largest.
    assert_eq!((light.tx.weight, heavy.tx.weight), (Some(100), Some(1)));
}

#[test]
fn a_cap_that_holds_a_vm_under_its_entitlement_is_raised() {
    let mut e = engine("cpu", &[VmSpec::new(1, "a", 1), VmSpec::new(2, "b", 1)]);
    // VM 2 sends 6 Gb/s: in excess, so the policy's floor cap (10%) applies.
    run(&mut e, 1, 200, 1e9, 6e9);
    assert!(e.account(VmId(2)).unwrap().cap < 20.0);
    // Capped, it sends 1 Gb/s: under its 4 Gb/s. The guard cap rises in proportion to the
    // shortfall, and once it has left excess its cap is lifted.
    run(&mut e, 201, 500, 1e9, 1e9);
    let b = e.account(VmId(2)).unwrap();
    assert!(b.ent.guard_cap > 30.0, "guard cap {}", b.ent.guard_cap);
    assert!(b.ent.within());
    assert_eq!(b.cap, 100.0);
}

#[test]
fn a_vm_held_at_its_entitlement_by_a_ceiling_stays_in_excess_and_may_be_capped() {
    // Both levers: VM 2 sends 7 Gb/s, above its 4 Gb/s, and gets a ceiling at 4.4 Gb/s (the
    // lowest the guard allows: 1.1x its entitlement) and the floor cap.
    let mut e = engine("both", &[VmSpec::new(1, "a", 1), VmSpec::new(2, "b", 1)]);
    run(&mut e, 1, 300, 1e9, 7e9);
    assert_eq!(e.account(VmId(2)).unwrap().tx.max_bps, Some(4_400_000_000));
    // Under its ceiling it sends 3.2 Gb/s (the ceiling's pacing): below what would end an
    // excess without a ceiling, but the ceiling, not its demand, holds it there: still in
    // excess, still capped at the floor (its CPU beyond what the entitlement needs is not
    // guaranteed).
    run(&mut e, 301, 500, 1e9, 3.2e9);
    let b = e.account(VmId(2)).unwrap();
    assert!(!b.ent.within(), "held by its ceiling: still in excess");
    assert!(b.cap < 15.0, "cap {}", b.cap);
    assert_eq!(b.tx.max_bps, Some(4_400_000_000));
    // The cap starves it (1 Gb/s, a quarter of its entitlement): the guard cap rises, and once
    // it is clearly below its entitlement it leaves excess and every limit is lifted.
    run(&mut e, 801, 500, 1e9, 1e9);
    let b = e.account(VmId(2)).unwrap();
    assert!(b.ent.guard_cap > 30.0, "guard cap {}", b.ent.guard_cap);
    assert!(b.ent.within());
    assert_eq!((b.cap, b.tx.max_bps), (100.0, None));
}

#[test]
fn without_a_ceiling_a_vm_below_its_entitlement_leaves_excess() {
    // The same 3.2 Gb/s with the CPU lever only (no ceiling): within, its cap lifted.
    let mut e = engine("cpu", &[VmSpec::new(1, "a", 1), VmSpec::new(2, "b", 1)]);
    run(&mut e, 1, 300, 1e9, 7e9);
    run(&mut e, 301, 500, 1e9, 3.2e9);
    let b = e.account(VmId(2)).unwrap();
    assert!(b.ent.within());
    assert_eq!(b.cap, 100.0);
}

#[test]
fn configured_entitlements_and_floors_win_and_the_rest_is_split() {
    let mut a = VmSpec::new(1, "a", 1);
    a.entitlement = Entitlement {
        tx_bps: Some(6_000_000_000),
        cpu_floor_pct: Some(50.0),
    };
    let specs = [a, VmSpec::new(2, "b", 1), VmSpec::new(3, "c", 1)];
    let mut e = engine("cpu", &specs);
    for i in 1..=20 {
        let u = [usage(1, 7e9), usage(2, 0.0), usage(3, 0.0)];
        e.step(&IntervalInput {
            interval: i,
            link_util: None,
            usage: &u,
        })
        .unwrap();
    }
    let acc = |v| e.account(VmId(v)).unwrap().ent.clone();
    assert_eq!(acc(1).tx_bps, 6e9);
    assert_eq!((acc(2).tx_bps, acc(3).tx_bps), (1e9, 1e9));
    assert_eq!(acc(1).cpu_floor_pct, 50.0);
    assert_eq!(acc(2).cpu_floor_pct, 10.0, "the policy's floor by default");
    // In excess (7 of 6 Gb/s) VM 1 is capped, at its own floor at the lowest.
    assert!(e.account(VmId(1)).unwrap().cap >= 50.0);
}

#[test]
fn no_policy_file_can_switch_the_guard_off() {
    // `as_published` (the paper's system, for `resex lab paper`) is not a key of any file.
    let e = PolicyConfig::from_toml("policy = \"freemarket\"\nas_published = true\n").unwrap_err();
    assert!(e.to_string().contains("as_published"), "{e}");
    assert!(
        !PolicyConfig::from_toml("policy = \"freemarket\"\n")
            .unwrap()
            .as_published
    );
}
