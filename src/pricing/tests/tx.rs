//! The rate lever through the engine: a policy's transmit-limit proposals become decisions
//! once, at actuation boundaries, and only when they change what is in force.

use resex_pricing::{
    Account, Ctx, Engine, IntervalInput, Policy, PolicyConfig, PolicyKind, TxLimit, TxReason, VmId,
    VmSpec, VmUsage,
};

/// Gives VM 1 a 2 Gb/s share from interval 10 to 39, then releases it.
#[derive(Debug)]
struct Shares;

impl Policy for Shares {
    fn name(&self) -> &'static str {
        "shares"
    }
    fn price(&mut self, _: &Ctx<'_>, _: &mut [Account]) {}
    fn actuate(&mut self, ctx: &Ctx<'_>, accounts: &mut [Account]) {
        for acc in accounts.iter_mut().filter(|a| a.id() == VmId(1)) {
            acc.tx_proposal = Some(if (10..40).contains(&ctx.interval) {
                (
                    TxLimit {
                        share_bps: Some(2_000_000_000),
                        max_bps: None,
                        weight: None,
                    },
                    TxReason::Protect { victim: VmId(1) },
                )
            } else {
                (TxLimit::NONE, TxReason::Release)
            });
        }
    }
}

#[test]
fn tx_proposals_become_decisions_only_when_they_change() {
    let cfg = PolicyConfig::defaults(PolicyKind::Freemarket);
    let mut e = Engine::with_policy(cfg, Box::new(Shares));
    e.add_vm(VmSpec::new(1, "a", 1), 1).unwrap();
    e.add_vm(VmSpec::new(2, "b", 1), 1).unwrap();
    let mut seen = Vec::new();
    for i in 1..=60 {
        let usage = [
            VmUsage::new(VmId(1), 10.0, 5),
            VmUsage::new(VmId(2), 10.0, 5),
        ];
        let out = e
            .step(&IntervalInput {
                interval: i,
                link_util: Some(0.5),
                usage: &usage,
            })
            .unwrap();
        assert!(out.decisions.is_empty(), "no cap: the policy proposes none");
        for d in &out.tx_decisions {
            seen.push((i, d.vm, d.tx, d.reason));
        }
    }
    let share = TxLimit {
        share_bps: Some(2_000_000_000),
        max_bps: None,
        weight: None,
    };
    // Actuation every 10 intervals (10 ms): on at 10, off at 40; nothing in between.
    assert_eq!(
        seen,
        vec![
            (10, VmId(1), share, TxReason::Protect { victim: VmId(1) }),
            (40, VmId(1), TxLimit::NONE, TxReason::Release),
        ]
    );
    assert_eq!(e.account(VmId(1)).unwrap().tx, TxLimit::NONE);
}

/// FreeMarket on the rate lever: the balance rule's cut becomes a transmit ceiling at the same
/// fraction of the link, and with the rate lever alone the cap itself never moves.
#[test]
fn a_cap_deciding_policy_on_the_rate_lever_sets_ceilings_instead() {
    use resex_pricing::Lever;
    // The golden FreeMarket case: the 2 MiB VM is cut to 90% at interval 810.
    for (lever, caps) in [(Lever::Rate, false), (Lever::Both, true)] {
        let mut cfg = PolicyConfig::defaults(PolicyKind::Freemarket);
        cfg.lever = Some(lever);
        let mut e = Engine::new(cfg);
        e.set_link_bps(8_000_000_000);
        e.add_vm(VmSpec::new(1, "small", 1), 0).unwrap();
        e.add_vm(VmSpec::new(2, "big", 1), 0).unwrap();
        let mut first_tx = None;
        let mut capped = false;
        for i in 0..1000 {
            let usage = [
                VmUsage::new(VmId(1), 10.0, 5),
                VmUsage::new(VmId(2), 100.0, 600),
            ];
            let out = e
                .step(&IntervalInput {
                    interval: i,
                    link_util: None,
                    usage: &usage,
                })
                .unwrap();
            capped |= !out.decisions.is_empty();
            // (Every VM's guarantee is set from the start: its entitlement.)
            let ceiling = out.tx_decisions.iter().find(|d| d.tx.max_bps.is_some());
            if let (None, Some(d)) = (first_tx, ceiling) {
                first_tx = Some((i, *d));
            }
        }
        let (i, d) = first_tx.expect("a ceiling");
        assert_eq!((i, d.vm), (810, VmId(2)), "{lever:?}");
        assert_eq!(d.tx.max_bps, Some(7_200_000_000), "90% of 8 Gb/s");
        assert!(matches!(d.reason, TxReason::Ceiling(_)));
        assert_eq!(capped, caps, "{lever:?}: caps moved");
    }
}
