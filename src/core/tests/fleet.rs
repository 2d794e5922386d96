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
        adaptive: Vec::new(),
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

/// A core with VMs `job1` (with a rate lever) and `job2` (with one if `lever2`), and their
/// guests (kept alive by the caller).
fn two_jobs(seed: u64, lever2: bool) -> (HostCore, [Guest; 2]) {
    let guests = [Guest::new(seed), Guest::new(seed + 1)];
    let mut core = HostCore::new(CoreConfig::default());
    for (i, g) in guests.iter().enumerate() {
        let id = VmId(i as u32 + 1);
        let mut info = VmInfo::new(format!("job{}", i + 1), 1, RAM);
        if i == 0 || lever2 {
            info.tx_lever = Some(format!("softhca port {i}"));
        }
        core.add_vm(id, info).unwrap();
        core.set_memory(id, g.mem.clone()).unwrap();
    }
    (core, guests)
}

/// Two compatible periodic jobs on one host's port (200 ms periods, 50 ms arcs), scheduled by
/// the fleet: the ceilings follow their progress every step, the one further into its arc
/// gets the larger share, and the schedule lapses with the allocation.
#[test]
fn scheduled_ceilings_follow_the_jobs_progress_and_lapse() {
    use resex_core::adaptive::{JobTiming, Schedule};
    let (mut core, _guests) = two_jobs(31, true);
    // job1's arcs begin at 1 000 + 200 k ms, job2's 20 ms later.
    let t1 = JobTiming {
        period_ns: 200 * MS,
        start_ns: 1000 * MS,
        arc_ns: 50 * MS,
    };
    let t2 = JobTiming {
        start_ns: 1020 * MS,
        ..t1
    };
    let sched = |me, other| Schedule {
        pool_bps: 1_000_000_000,
        gain: 10.0,
        me,
        others: vec![other],
        me_bytes: 0,
        grid: false,
    };
    let alloc = FleetCeilings {
        vms: Vec::new(),
        until_ns: 3000 * MS,
        adaptive: vec![
            ("job1".into(), sched(t1, t2)),
            ("job2".into(), sched(t2, t1)),
        ],
    };
    let (i, done) = core.set_fleet(Some(alloc));
    assert_eq!(done.applied, 2);
    assert_eq!(i.tx.len(), 2, "each gets its schedule's ceiling at once");
    let max = |core: &HostCore, id| core.vm(VmId(id)).unwrap().tx().max_bps.unwrap();
    // At 1 030 ms: job1 60% into its arc (weight 7), job2 20% (weight 3).
    core.step(1030 * MS).unwrap();
    assert_eq!((max(&core, 1), max(&core, 2)), (700_000_000, 300_000_000));
    // At 1 060 ms job1's arc has ended: job2 (80%) takes the pool, job1 keeps a base share.
    let moved = core.step(1060 * MS).unwrap().intents.tx.clone();
    assert_eq!(max(&core, 2), 1_000_000_000);
    assert_eq!(max(&core, 1), 100_000_000);
    assert_eq!(moved.len(), 2);
    assert!(moved.iter().all(|i| i.cause == TxCause::Fleet));
    // As job2 advances, job1's base share shrinks (1 / (1 + 9.2): one twentieth); a step
    // where no ceiling crosses a twentieth changes nothing.
    core.step(1061 * MS).unwrap();
    assert_eq!(max(&core, 1), 50_000_000);
    assert!(core.step(1062 * MS).unwrap().intents.tx.is_empty());
    // Lapsed: lifted, and no schedule moves them again.
    let out = core.step(3000 * MS).unwrap();
    assert_eq!(out.intents.tx.len(), 2);
    assert!(out
        .intents
        .tx
        .iter()
        .all(|i| i.cause == TxCause::FleetLifted));
    assert!(core.step(3030 * MS).unwrap().intents.tx.is_empty());
}

/// A scheduled VM without a rate lever is left alone, a VM named twice is scheduled once, and
/// the row of a step records the schedule's latest ceiling, not one it replaced.
#[test]
fn schedules_only_where_a_lever_exists_once_per_vm_and_the_row_has_the_latest() {
    use resex_core::adaptive::{JobTiming, Schedule};
    let (mut core, _guests) = two_jobs(41, false);
    core.step(900 * MS).unwrap();
    let t = JobTiming {
        period_ns: 200 * MS,
        start_ns: 1000 * MS,
        arc_ns: 50 * MS,
    };
    let other = JobTiming {
        start_ns: 1020 * MS,
        ..t
    };
    let s = |gain| Schedule {
        pool_bps: 1_000_000_000,
        gain,
        me: t,
        others: vec![other],
        me_bytes: 0,
        grid: false,
    };
    let (i, done) = core.set_fleet(Some(FleetCeilings {
        vms: Vec::new(),
        until_ns: 5000 * MS,
        adaptive: vec![
            ("job1".into(), s(10.0)),
            ("job1".into(), s(0.0)),
            ("job2".into(), s(10.0)),
        ],
    }));
    assert_eq!((done.applied, i.tx.len()), (1, 1), "job2 has no lever");
    // At 900 ms neither is predicted to send: job1 may use the pool.
    assert_eq!(i.tx[0].value.max_bps, Some(1_000_000_000));
    let out = core.step(1030 * MS).unwrap();
    assert_eq!(out.intents.tx.len(), 1, "{:?}", out.intents);
    assert_eq!(out.intents.tx[0].vm, VmId(1));
    // The first schedule given (gain 10): 7 / (7 + 3).
    assert_eq!(out.intents.tx[0].value.max_bps, Some(700_000_000));
    assert_eq!(
        out.rows[0].tx_set.map(|i| i.value.max_bps),
        Some(Some(700_000_000)),
        "the row records the latest ceiling"
    );
    assert!(out.rows[1].tx_set.is_none());
}

/// The host sees its own job: a job still sending after its predicted arc ended keeps the
/// share its progress earns (its bytes over its bytes per period), not a base share; what it
/// saw survives a new allocation; and an explicit entitlement is the lowest ceiling a schedule
/// sets.
#[test]
fn a_job_seen_sending_keeps_its_share_and_an_entitlement_is_the_floor() {
    use resex_core::adaptive::{JobTiming, Schedule};
    let (mut core, mut guests) = two_jobs(51, false);
    for (k, g) in guests.iter().enumerate() {
        let id = VmId(k as u32 + 1);
        core.register(id, &g.registration(), g.layout()).unwrap();
    }
    core.step(900 * MS).unwrap();
    // job1 predicted to send from 1 000 ms for 50 ms; the other job from 1 020 ms.
    let me = JobTiming {
        period_ns: 200 * MS,
        start_ns: 1000 * MS,
        arc_ns: 50 * MS,
    };
    let other = JobTiming {
        start_ns: 1020 * MS,
        ..me
    };
    let alloc = |me_bytes| FleetCeilings {
        vms: Vec::new(),
        until_ns: 9000 * MS,
        adaptive: vec![(
            "job1".into(),
            Schedule {
                pool_bps: 1_000_000_000,
                gain: 10.0,
                me,
                others: vec![other],
                me_bytes,
                grid: false,
            },
        )],
    };
    core.set_fleet(Some(alloc(1_000_000)));
    let max = |core: &HostCore| core.vm(VmId(1)).unwrap().tx().max_bps.unwrap();
    // It sends 800 kB from 1 000 ms to 1 040 ms, 100 kB a step every 5 ms.
    let mut t = 1000;
    for _ in 0..8 {
        guests[0].work(0, 2, 50_000);
        core.step(t * MS).unwrap();
        t += 5;
    }
    // A round that leaves it out, then one that schedules it again: what the host saw stays.
    core.set_fleet(Some(FleetCeilings {
        adaptive: Vec::new(),
        ..alloc(0)
    }));
    core.set_fleet(Some(alloc(1_000_000)));
    // At 1 055 ms its predicted arc is over; the other is 70% in (weight 8). Seen 80% in
    // (weight 9): 9 / 17 of the pool, 10 twentieths. Predicted, it would get 1 / 9: 2.
    core.step(1055 * MS).unwrap();
    assert_eq!(max(&core), 500_000_000);
    // Its pause of 50 ms ends the arc: the prediction again (nobody is predicted to send
    // at 1 095 ms: the pool).
    core.step(1095 * MS).unwrap();
    assert_eq!(max(&core), 1_000_000_000);
    // An explicit entitlement of 300 Mb/s: never below it.
    let (mut core, _g) = two_jobs(61, false);
    core.remove_vm(VmId(1)).unwrap();
    let mut info = VmInfo::new("job1", 1, RAM);
    info.tx_lever = Some("softhca port 0".into());
    info.entitlement.tx_bps = Some(300_000_000);
    core.add_vm(VmId(1), info).unwrap();
    core.step(1059 * MS).unwrap();
    core.set_fleet(Some(alloc(0)));
    // At 1 060 ms it is predicted idle, the other 80% in: 1 / 10 of the pool, but 300 Mb/s.
    core.step(1060 * MS).unwrap();
    assert_eq!(max(&core), 300_000_000);
}
