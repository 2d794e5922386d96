//! The fleet's ceilings in the core: applied over the local policy where a lever exists,
//! behind the admin's pin, kept across a policy change, and lifted when they lapse.

#![allow(clippy::cast_possible_truncation)]

mod common;

use common::{Guest, RAM};
use resex_core::{CoreConfig, FleetCeilings, HostCore, Tx, TxCause, TxLimit, VmId, VmInfo};

const MS: u64 = 1_000_000;

fn ceiling(bps: u64) -> TxLimit {
    TxLimit {
        share_bps: None,
        max_bps: Some(bps),
        weight: None,
    }
}

#[test]
fn fleet_ceilings_apply_yield_to_pins_and_lapse() {
    let (a, b, c) = (Guest::new(21), Guest::new(22), Guest::new(23));
    let mut core = HostCore::new(CoreConfig::default());
    for (i, g) in [&a, &b, &c].iter().enumerate() {
        let id = VmId(i as u32 + 1);
        let mut info = VmInfo::new(format!("vm{}", i + 1), 1, RAM);
        if i < 2 {
            info.tx_lever = Some(format!("softhca port {i}"));
        }
        core.add_vm(id, info).unwrap();
        core.set_memory(id, g.mem.clone()).unwrap();
    }
    let alloc = FleetCeilings {
        vms: vec![
            ("vm1".into(), 400_000_000),
            ("vm3".into(), 100_000_000),
            ("elsewhere".into(), 1),
        ],
        until_ns: 3 * MS,
    };
    let (i, done) = core.set_fleet(Some(alloc.clone()));
    assert_eq!((done.applied, done.skipped), (1, 2), "vm3 has no lever");
    assert_eq!(i.tx.len(), 1);
    assert_eq!(
        (i.tx[0].vm, i.tx[0].value, i.tx[0].cause),
        (VmId(1), ceiling(400_000_000), TxCause::Fleet)
    );
    assert!(core.fleet_active());
    // The same allocation again changes nothing.
    assert!(core.set_fleet(Some(alloc)).0.tx.is_empty());
    // The admin's pin wins; unpinned, the fleet's ceiling is back.
    let pin = ceiling(50_000_000);
    core.pin::<Tx>("vm1", Some(pin)).unwrap();
    assert_eq!(core.vm(VmId(1)).unwrap().tx(), pin);
    let (_, un) = core.pin::<Tx>("vm1", None).unwrap();
    assert_eq!(un.value, ceiling(400_000_000));
    // A policy change keeps the fleet's ceiling (it is not the policy's).
    let out = core.set_policy(None, MS);
    assert!(out.tx.is_empty(), "{out:?}");
    assert_eq!(core.vm(VmId(1)).unwrap().tx(), ceiling(400_000_000));
    // The next step's row records the fleet's ceiling (the journal has it).
    let out = core.step(2 * MS).unwrap();
    assert!(out.intents.tx.is_empty(), "set already, between steps");
    assert_eq!(
        out.rows[0].tx_set.map(|i| i.cause),
        Some(TxCause::Fleet),
        "{:?}",
        out.rows[0]
    );
    let out = core.step(3 * MS).unwrap();
    assert_eq!(out.intents.tx.len(), 1);
    assert_eq!(out.intents.tx[0].cause, TxCause::FleetLifted);
    assert!(out.intents.tx[0].value.is_none());
    assert_eq!(
        out.rows[0].tx_set.map(|i| i.cause),
        Some(TxCause::FleetLifted)
    );
    assert!(!core.fleet_active());
    // Lifting when nothing is in force is a no-op.
    assert!(core.set_fleet(None).0.tx.is_empty());
}
