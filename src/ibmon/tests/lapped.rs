//! When the guest and its HCA run ahead of the monitor (the monitor is lapped), it counts
//! overruns, resynchronises, and never counts more than happened; once it keeps up again it
//! counts exactly again.

#![allow(clippy::cast_possible_truncation)]

mod common;

use common::{at_most, config_strategy, op_strategy, Rig};
use proptest::prelude::*;
use resex_ibmon::synth::{SynthConfig, Wr};
use resex_mlx5::consts::send_op;

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn never_invents_counts_when_lapped(
        cfg in config_strategy(),
        ops in proptest::collection::vec(op_strategy(3, 6), 1..400),
    ) {
        let mut rig = Rig::new(&cfg);
        let nq = rig.guest.qp_count();
        let nc = rig.guest.cq_count();
        for op in &ops {
            let op = op.fit(nq, nc);
            rig.apply(&op, false);
            for (got, want) in rig.mon.counters().iter().zip(rig.guest.truth()) {
                prop_assert!(at_most(got, want), "invented counts: {got:?} > {want:?}");
            }
        }
    }
}

/// A small rig (8 WQEs, 4 CQEs) whose guest posted, completed and polled 20 sends while the
/// monitor slept: 5 laps of the CQ; and the send it used.
fn lapped() -> (Rig, Wr) {
    let cfg = SynthConfig {
        wqe_cnt: 8,
        cqe_cnt: 4,
        ..SynthConfig::default()
    };
    let mut rig = Rig::new(&cfg);
    let send = Wr {
        opcode: send_op::SEND,
        sges: vec![2048],
        inline: false,
        signaled: true,
    };
    for _ in 0..20 {
        assert!(rig.guest.post(&rig.mem, 0, &send));
        rig.guest.complete(&rig.mem, 0, 1, false);
        rig.guest.poll(&rig.mem, 0, 1, None);
    }
    (rig, send)
}

#[test]
fn counts_an_overrun_and_recovers_exactly_afterwards() {
    let (mut rig, send) = lapped();
    rig.mon.scan(&rig.mem, 1000);
    let c = rig.mon.counters()[0];
    assert_eq!(c.overruns, 1, "one lap event counted");
    assert_eq!(c.wqes, 0, "nothing unconsumed to count, nothing invented");
    assert_eq!(c.anomalies, 0);
    // From now on the monitor keeps up: exact again.
    let before = rig.mon.counters()[0];
    let truth_before = rig.guest.truth()[0];
    for _ in 0..10 {
        rig.guest.post(&rig.mem, 0, &send);
        rig.guest.complete(&rig.mem, 0, 1, false);
        rig.mon.scan(&rig.mem, 1000);
        let lim = rig.poll_limit(0);
        rig.guest.poll(&rig.mem, 0, 1, Some(lim));
    }
    let got = rig.mon.counters()[0] - before;
    let want = rig.guest.truth()[0] - truth_before;
    assert_eq!(got.wqes, 10);
    assert_eq!(got.tx_bytes, want.tx_bytes);
    assert_eq!(
        got.tx_packets, 20,
        "2048 bytes at 1 KiB MTU = 2 packets each"
    );
    assert_eq!(got.overruns, 0);
}

#[test]
fn a_scan_that_only_counts_an_overrun_reports_it_in_its_delta() {
    // An overrun counts without consuming an entry: `scan_delta`'s shortcut for a scan that
    // consumed nothing must not hide it.
    let (mut rig, _) = lapped();
    let d = rig.mon.scan_delta(&rig.mem, 1000);
    assert_eq!(d.overruns, 1, "{d:?}");
    assert_eq!(
        d,
        rig.mon.total(),
        "the first scan's delta is everything counted"
    );
    // Nothing new: the delta is zero, and the totals stay.
    let again = rig.mon.scan_delta(&rig.mem, 1000);
    assert!(again.is_zero(), "{again:?}");
    assert_eq!(rig.mon.total(), d);
}

#[test]
fn scan_moved_reports_each_scans_counts_busy_or_idle() {
    let (mut rig, send) = lapped();
    let first = rig
        .mon
        .scan_moved(&rig.mem, 1000)
        .expect("the overrun moved the totals");
    assert_eq!(first, rig.mon.total());
    assert_eq!(rig.mon.scan_moved(&rig.mem, 1000), None, "nothing new");
    assert!(rig.mon.scan_delta(&rig.mem, 1000).is_zero());
    // Busy for three scans in a row (the totals copied before each), idle, busy again (the
    // delta against the totals kept since it went idle): every delta is that scan's, and they
    // add up to the totals.
    let mut sum = first;
    for busy in [true, true, true, false, false, true, false, true] {
        if busy {
            rig.guest.post(&rig.mem, 0, &send);
            rig.guest.complete(&rig.mem, 0, 1, false);
        }
        let before = rig.mon.total();
        let got = rig.mon.scan_moved(&rig.mem, 1000);
        match got {
            Some(d) => {
                assert!(busy);
                assert_eq!(d.wqes, 1, "{d:?}");
                assert_eq!(rig.mon.total() - before, d);
                sum += d;
            }
            None => assert!(!busy, "a posted request not reported"),
        }
        let lim = rig.poll_limit(0);
        rig.guest.poll(&rig.mem, 0, 1, Some(lim));
    }
    assert_eq!(sum, rig.mon.total());
}

#[test]
fn scan_moved_keeps_what_a_plain_scan_counted() {
    let (mut rig, send) = lapped();
    let mut sum = rig.mon.scan_moved(&rig.mem, 1000).expect("the overrun");
    // A request counted by a plain scan is in the next call, though that call counts nothing;
    // one counted by a call is in that call.
    for plain in [true, false] {
        rig.guest.post(&rig.mem, 0, &send);
        rig.guest.complete(&rig.mem, 0, 1, false);
        if plain {
            rig.mon.scan(&rig.mem, 1000);
        }
        let d = rig
            .mon
            .scan_moved(&rig.mem, 1000)
            .expect("one request counted");
        assert_eq!(d.wqes, 1, "plain scan first: {plain}, {d:?}");
        sum += d;
        let lim = rig.poll_limit(0);
        rig.guest.poll(&rig.mem, 0, 1, Some(lim));
    }
    assert_eq!(sum, rig.mon.total());
    assert_eq!(rig.mon.scan_moved(&rig.mem, 1000), None);
}
