//! The host core on synthetic guests: exact counts per interval, link utilisation, reports,
//! attaching to live rings, pins and policy changes, the time base.
#![allow(missing_docs, clippy::cast_possible_truncation)]

mod common;

use common::{Guest, RAM};
use resex_core::{
    Cap, CapCause, CoreConfig, CoreError, CpuSample, HostCore, HostLink, Tx, VmId, VmInfo,
};
use resex_guestmem::GuestMemory;
use resex_ibmon::Counters;
use resex_pricing::PolicyConfig;
use std::sync::Arc;

const MS: u64 = 1_000_000;

fn core_with(guests: &[&Guest]) -> HostCore {
    core_granting(guests, None)
}

/// As [`core_with`], VM 1 granted `first_bps` of the link (its entitlement) when given.
fn core_granting(guests: &[&Guest], first_bps: Option<u64>) -> HostCore {
    let mut core = HostCore::new(CoreConfig::default());
    for (i, g) in guests.iter().enumerate() {
        let id = VmId(i as u32 + 1);
        let mut info = VmInfo::new(format!("vm{}", i + 1), 1, RAM);
        if i == 0 {
            info.entitlement.tx_bps = first_bps;
        }
        core.add_vm(id, info).unwrap();
        core.set_memory(id, g.mem.clone()).unwrap();
        core.register(id, &g.registration(), g.layout()).unwrap();
    }
    core
}

#[test]
fn counts_exactly_what_each_guest_completed_interval_by_interval() {
    let (mut a, mut b) = (Guest::new(1), Guest::new(2));
    let mut core = core_with(&[&a, &b]);
    let (mut seen_a, mut seen_b) = (Counters::default(), Counters::default());
    for k in 1..=20u64 {
        a.work((k % 2) as usize, (k % 5 + 1) as usize, 3000);
        if k % 3 == 0 {
            b.work(0, 7, 100_000);
        }
        let out = core.step(k * MS).unwrap();
        assert_eq!(out.interval, k);
        assert_eq!(out.rows.len(), 2);
        seen_a += out.rows[0].delta;
        seen_b += out.rows[1].delta;
        assert_eq!(seen_a, a.truth(), "vm1 after interval {k}");
        assert_eq!(seen_b, b.truth(), "vm2 after interval {k}");
    }
    let v = core.vm(VmId(1)).unwrap();
    assert_eq!(v.total(), a.truth());
    assert_eq!(v.qps(), 2);
    assert_eq!(
        v.attached_live(),
        0,
        "fresh rings are counted from their start"
    );
}

#[test]
fn link_utilisation_is_the_counted_bits_over_the_link_rate() {
    let mut g = Guest::new(3);
    let link = HostLink {
        bits_per_sec: 8_000_000_000,
        header_bytes: 58,
    };
    let mut core = HostCore::new(CoreConfig {
        link,
        ..CoreConfig::default()
    });
    core.add_vm(VmId(1), VmInfo::new("g", 1, RAM)).unwrap();
    core.set_memory(VmId(1), g.mem.clone()).unwrap();
    core.register(VmId(1), &g.registration(), g.layout())
        .unwrap();
    assert_eq!(core.step(MS).unwrap().link_util, 0.0, "nothing sent");
    // 10 writes of 50 000 bytes at a 1024-byte MTU: 49 packets each.
    g.work(0, 10, 50_000);
    let out = core.step(2 * MS).unwrap();
    let want = (500_000.0 + 490.0 * 58.0) * 8.0 / 8e6;
    assert!(
        (out.link_util - want).abs() < 1e-12,
        "{} vs {want}",
        out.link_util
    );
    assert_eq!(out.rows[0].delta.tx_packets, 490);
    // The snapshot's figure is the mean since the previous snapshot (2 ms).
    let snap = core.snapshot(2 * MS);
    assert!((snap.host.link_util - want / 2.0).abs() < 1e-12);
    assert_eq!(snap.vms[0].tx_bytes_total, 500_000);
}

#[test]
fn reports_are_drained_merged_learned_and_garbage_refused() {
    let mut g = Guest::new(4);
    let mut core = core_with(&[&g]);
    g.report(10, 100_000);
    g.report(30, 200_000);
    let out = core.step(MS).unwrap();
    let r = out.rows[0].report.expect("two reports merged");
    assert_eq!(r.count, 40);
    assert!((r.mean_ns - 175_000.0).abs() < 1e-6);
    assert_eq!(core.vm(VmId(1)).unwrap().reports(), (2, 0));
    // A block out of the writer's turn with its status byte set and garbage in it: refused,
    // freed and counted by the next full look at the mailbox (within FULL_DRAIN_EVERY ticks).
    g.mem
        .write(
            resex_guestmem::GuestAddress(common::MAILBOX + 128 * 5),
            &[1u8; 128],
        )
        .unwrap();
    let mut t = 1;
    while core.vm(VmId(1)).unwrap().reports() != (2, 1) {
        t += 1;
        let out = core.step(t * MS).unwrap();
        assert_eq!(out.rows[0].report, None);
        assert!(t <= 1 + resex_core::step::FULL_DRAIN_EVERY, "never refused");
    }
    // Ten reports teach the VM its quiet latency; each is taken the tick it is written.
    for k in 0..9 {
        g.report(5, 100_000 + k);
        t += 1;
        let out = core.step(t * MS).unwrap();
        assert!(out.rows[0].report.is_some(), "report {k} at tick {t}");
    }
    let b = core
        .vm(VmId(1))
        .unwrap()
        .baseline()
        .expect("learned after ten reports");
    assert!(b.mean_ns > 100_000.0 && b.mean_ns < 200_000.0, "{b:?}");
}

#[test]
fn a_guest_already_running_is_attached_at_its_present_position_without_faults() {
    let mut g = Guest::new(5);
    // Five laps of each 64-entry ring before the host looks.
    for _ in 0..80 {
        g.work(0, 4, 1000);
        g.work(1, 4, 1000);
    }
    let before = g.truth();
    let mut core = core_with(&[&g]);
    let out = core.step(MS).unwrap();
    assert_eq!(
        out.rows[0].delta,
        Counters::default(),
        "counting starts now"
    );
    assert_eq!(core.vm(VmId(1)).unwrap().attached_live(), 1);
    // Both QPs are named late, with what their send CQs delivered before: 80 CQEs each
    // (one per batch), the consumer index past the registration's start.
    let late = core.vm(VmId(1)).unwrap().late_qps().to_vec();
    let qpns: Vec<u32> = late.iter().map(|l| l.qpn).collect();
    assert_eq!(qpns.len(), 2, "{late:?}");
    assert!(
        late.iter().all(|l| l.missed_completions == Some(80)),
        "{late:?}"
    );
    g.work(0, 3, 2000);
    g.work(1, 5, 4000);
    let out = core.step(2 * MS).unwrap();
    let d = out.rows[0].delta;
    let t = g.truth() - before;
    assert_eq!(d, t, "everything after the attach, exactly");
    let v = core.vm(VmId(1)).unwrap();
    let total = v.total();
    assert_eq!(
        (total.anomalies, total.overruns, total.errors),
        (0, 0, 0),
        "no fault for a benign guest"
    );
}

#[test]
fn work_done_before_the_first_scan_is_counted_while_the_ring_has_not_lapped() {
    let mut g = Guest::new(6);
    let mut core = core_with(&[&g]);
    g.work(0, 9, 5000);
    g.work(1, 2, 100);
    let out = core.step(MS).unwrap();
    assert_eq!(out.rows[0].delta, g.truth());
    assert_eq!(core.vm(VmId(1)).unwrap().attached_live(), 0);
    assert!(core.vm(VmId(1)).unwrap().late_qps().is_empty());
}

fn policy(toml: &str) -> Option<resex_core::NamedPolicy> {
    Some(("test".into(), PolicyConfig::from_toml(toml).unwrap()))
}

/// FreeMarket with a tiny budget: a VM that burns CPU runs low at once and is cut every
/// actuation period (10 ms).
const GREEDY: &str = r#"
policy = "freemarket"
[ledger]
epoch_ms = 1000
interval_ms = 1
link_bytes_per_sec = 1048576
path_mtu = 1024
[caps]
floor_pct = 10.0
actuation_period_ms = 10
[balance_rule]
low_balance = 0.95
min_epoch_left = 0.01
cut_factor = 0.5
"#;

fn busy(core: &mut HostCore, id: VmId, k: u64) {
    core.cpu_sample(
        id,
        CpuSample {
            total_ns: k * MS,
            at_ns: k * MS,
        },
    )
    .unwrap();
}

#[test]
fn the_policy_cuts_caps_pins_win_and_a_policy_change_restores() {
    let (mut a, b) = (Guest::new(7), Guest::new(8));
    // VM 1 is granted 1 Mb/s and sends 4 KiB a millisecond (33 Mb/s), far above it: a VM
    // within its entitlement is never capped.
    let mut core = core_granting(&[&a, &b], Some(1_000_000));
    assert!(core.set_policy(policy(GREEDY), 0).is_empty());
    let mut cut = None;
    for k in 1..=200 {
        busy(&mut core, VmId(1), k);
        a.work(0, 1, 4096);
        let out = core.step(k * MS).unwrap();
        if let Some(i) = out.intents.caps.first() {
            cut = Some((k, *i));
            break;
        }
    }
    let (k, i) = cut.expect("a busy VM on a tiny budget is cut");
    assert_eq!(i.vm, VmId(1));
    assert!(matches!(i.cause, CapCause::Policy(_)));
    assert!(i.value.is_some_and(|c| c < 100.0));
    assert_eq!(core.vm(VmId(1)).unwrap().cap(), i.value);
    assert_eq!(core.last_output().rows[0].cap_set, Some(i));
    // The admin pins VM 1: later decisions leave it alone.
    let (msg, pin) = core.pin::<Cap>("vm1", Some(55.0)).unwrap();
    assert!(msg.contains("55"), "{msg}");
    assert_eq!(pin.value, Some(55.0));
    for j in k + 1..k + 40 {
        busy(&mut core, VmId(1), j);
        a.work(0, 1, 4096);
        let out = core.step(j * MS).unwrap();
        assert!(out.intents.caps.iter().all(|i| i.vm != VmId(1)), "pinned");
    }
    assert_eq!(core.vm(VmId(1)).unwrap().cap(), Some(55.0));
    assert!(matches!(
        core.pin::<Cap>("nobody", None),
        Err(CoreError::UnknownName(_))
    ));
    assert!(matches!(
        core.pin::<Cap>("vm1", Some(-3.0)),
        Err(CoreError::BadCap(_))
    ));
    // Unpinned: the policy's cap for it is back in force.
    let engine_cap = core.engine().unwrap().account(VmId(1)).unwrap().cap;
    assert!(engine_cap < 100.0);
    let (msg, un) = core.pin::<Cap>("vm1", None).unwrap();
    assert_eq!(
        (un.value, un.cause),
        (Some(engine_cap), CapCause::Unpinned),
        "{msg}"
    );
    assert_eq!(core.vm(VmId(1)).unwrap().cap(), Some(engine_cap));
    let j = k + 40;
    let restores = core.set_policy(None, j * MS);
    assert_eq!(restores.caps.len(), 1);
    assert!(restores.tx.is_empty());
    let r = restores.caps[0];
    assert_eq!(
        (r.vm, r.value, r.cause),
        (VmId(1), None, CapCause::PolicyChanged)
    );
    assert_eq!(core.policy_name(), "none");
    assert!(core.restore_all().is_empty(), "nothing left in force");
}

#[test]
fn intervals_follow_time_gaps_are_allowed_and_a_priced_interval_is_refused() {
    let g = Guest::new(9);
    let mut core = core_with(&[&g]);
    assert_eq!(core.next_step_ns(), MS);
    assert_eq!(core.step(MS).unwrap().interval, 1);
    assert_eq!(core.next_step_ns(), 2 * MS);
    // A late loop: intervals 2..4 are a gap.
    assert_eq!(core.step(5 * MS + 300).unwrap().interval, 5);
    assert_eq!(
        core.step(5 * MS + 900).unwrap_err(),
        CoreError::NotAfter {
            now_ns: 5 * MS + 900,
            got: 5,
            last: 5
        }
    );
    // A policy with a 2 ms interval re-bases time: the next step is 2 ms after the change.
    let two = GREEDY.replace("interval_ms = 1", "interval_ms = 2");
    core.set_policy(policy(&two), 5 * MS + 900);
    assert_eq!(core.interval_ns(), 2 * MS);
    assert_eq!(core.next_step_ns(), 7 * MS + 900);
    assert_eq!(core.step(7 * MS + 900).unwrap().interval, 6);
}

#[test]
fn vms_come_and_go_and_ids_are_checked() {
    let g = Guest::new(10);
    let mut core = core_with(&[&g]);
    assert_eq!(
        core.add_vm(VmId(1), VmInfo::new("again", 1, RAM)),
        Err(CoreError::DuplicateVm(VmId(1)))
    );
    assert_eq!(
        core.set_memory(VmId(9), Arc::new(resex_guestmem::VecMemory::new(4096))),
        Err(CoreError::UnknownVm(VmId(9)))
    );
    core.set_policy(policy(GREEDY), 0);
    core.add_vm(VmId(5), VmInfo::new("late", 2, RAM)).unwrap();
    let out = core.step(MS).unwrap();
    assert_eq!(
        out.rows.iter().map(|r| r.vm).collect::<Vec<_>>(),
        [VmId(1), VmId(5)]
    );
    assert!(
        out.rows.iter().all(|r| r.priced.is_some()),
        "every VM is priced"
    );
    assert_eq!(core.remove_vm(VmId(1)).unwrap().name, "vm1");
    let out = core.step(2 * MS).unwrap();
    assert_eq!(out.rows.len(), 1);
    assert_eq!(core.engine().unwrap().accounts().len(), 1);
    let snap = core.snapshot(2 * MS);
    assert_eq!(snap.vms[0].name, "late");
    assert_eq!(snap.vms[0].state, "waiting");
    assert_eq!(snap.host.policy, "test");
}

#[test]
fn transmit_limits_are_pinned_only_where_a_lever_exists_and_restored() {
    let (a, b) = (Guest::new(11), Guest::new(12));
    let mut core = HostCore::new(CoreConfig::default());
    for (i, g) in [&a, &b].iter().enumerate() {
        let id = VmId(i as u32 + 1);
        let mut info = VmInfo::new(format!("vm{}", i + 1), 1, RAM);
        if i == 0 {
            info.tx_lever = Some("softhca port 0".into());
        }
        core.add_vm(id, info).unwrap();
        core.set_memory(id, g.mem.clone()).unwrap();
    }
    let t = resex_core::TxLimit {
        share_bps: Some(500_000_000),
        max_bps: Some(2_000_000_000),
        weight: None,
    };
    let (msg, i) = core.pin::<Tx>("vm1", Some(t)).unwrap();
    assert_eq!(
        (i.vm, i.value, i.cause),
        (VmId(1), t, resex_core::TxCause::Pinned),
        "{msg}"
    );
    assert_eq!(core.vm(VmId(1)).unwrap().tx(), t);
    assert_eq!(
        core.pin::<Tx>("vm2", Some(t)).unwrap_err(),
        CoreError::NoTxLever("vm2".into())
    );
    let upside_down = resex_core::TxLimit {
        share_bps: Some(3),
        max_bps: Some(2),
        weight: None,
    };
    assert_eq!(
        core.pin::<Tx>("vm1", Some(upside_down)).unwrap_err(),
        CoreError::BadTx(upside_down)
    );
    let snap = core.snapshot(0);
    assert_eq!(snap.vms[0].tx_max_bps, Some(2_000_000_000));
    assert_eq!(snap.vms[0].tx_lever.as_deref(), Some("softhca port 0"));
    assert_eq!(snap.vms[1].tx_lever, None);
    // A pin survives a policy change; the host stopping puts it back.
    assert!(core.set_policy(policy(GREEDY), 0).tx.is_empty());
    let end = core.restore_all();
    assert_eq!(end.tx.len(), 1);
    assert!(end.tx[0].value.is_none());
    // Unpinned without a policy limit: none.
    core.pin::<Tx>("vm1", Some(t)).unwrap();
    let (_, un) = core.pin::<Tx>("vm1", None).unwrap();
    assert!(un.value.is_none());
}

/// Rows are kept between steps and an idle VM's is not written again: each step's rows must
/// still be exactly what that step saw (nothing left over from a busy, reporting or priced
/// interval before), the CPU percent the latest, the VMs those of the moment.
#[test]
fn each_steps_rows_are_that_steps_own_through_busy_idle_and_changes() {
    let (mut a, b) = (Guest::new(21), Guest::new(22));
    let mut core = core_with(&[&a, &b]);
    let sample = |total_ns, at_ns| CpuSample { total_ns, at_ns };
    core.cpu_sample(VmId(1), sample(0, 0)).unwrap();
    core.cpu_sample(VmId(2), sample(0, 0)).unwrap();
    let zero = Counters::default();
    for k in 1..=12u64 {
        // VM 1: busy on odd intervals, a report on every fourth, its CPU percent moving every
        // fifth (busy at 5, idle at 10); VM 2: idle, its CPU percent moving every third.
        if k % 2 == 1 {
            a.work(0, 2, 1000);
        }
        if k % 4 == 0 {
            a.report(5, 50_000);
        }
        if k % 3 == 0 {
            core.cpu_sample(VmId(2), sample(k * 10_000, k * MS))
                .unwrap();
        }
        if k % 5 == 0 {
            core.cpu_sample(VmId(1), sample(k * 20_000, k * MS))
                .unwrap();
        }
        let truth = a.truth();
        let out = core.step(k * MS).unwrap().clone();
        let (r1, r2) = (out.rows[0], out.rows[1]);
        assert_eq!(
            r1.delta == zero,
            k % 2 == 0,
            "vm1 busy only on odd intervals ({k})"
        );
        assert_eq!(
            r1.report.is_some(),
            k % 4 == 0,
            "vm1's report only when sent ({k})"
        );
        assert_eq!(r2.delta, zero);
        assert!(r2.report.is_none() && r2.priced.is_none() && r2.cap_set.is_none());
        let pct1 = if k >= 5 { 2.0 } else { 0.0 };
        assert!(
            (r1.cpu_pct - pct1).abs() < 1e-9,
            "vm1's CPU at {k}: {}",
            r1.cpu_pct
        );
        let pct = if k >= 3 { 1.0 } else { 0.0 };
        assert!(
            (r2.cpu_pct - pct).abs() < 1e-9,
            "vm2's CPU at {k}: {}",
            r2.cpu_pct
        );
        assert_eq!(core.vm(VmId(1)).unwrap().total(), truth);
    }
    // A VM added between steps gets its row, in id order; a policy prices every row, and
    // the step after a policy is dropped shows no price.
    core.add_vm(VmId(3), VmInfo::new("vm3", 1, RAM)).unwrap();
    core.set_policy(policy(GREEDY), 12 * MS);
    let out = core.step(13 * MS).unwrap();
    assert_eq!(
        out.rows.iter().map(|r| r.vm).collect::<Vec<_>>(),
        [VmId(1), VmId(2), VmId(3)]
    );
    assert!(out.rows.iter().all(|r| r.priced.is_some()));
    core.set_policy(None, 13 * MS);
    let out = core.step(14 * MS).unwrap();
    assert!(
        out.rows.iter().all(|r| r.priced.is_none()),
        "{:?}",
        out.rows
    );
    assert!(out
        .rows
        .iter()
        .all(|r| r.delta == zero && r.report.is_none()));
}
