use super::*;
use crate::output::VmRow;
use resex_ibmon::Counters;

const MS: u64 = 1_000_000;
const UNIX0: u64 = 1_700_000_000_123_000_000;

fn row(vm: u32, tx_bytes: u64) -> VmRow {
    VmRow::new(
        VmId(vm),
        0.0,
        Counters {
            tx_bytes,
            ..Counters::default()
        },
        None,
    )
}

/// Feeds `ticks` intervals from `first` in batches of 100: `bytes(vm, interval)` for VMs 1..=n.
fn feed(w: &mut PeriodWatch, n: u32, first: u64, ticks: u64, bytes: impl Fn(u32, u64) -> u64) {
    let mut b = Batch::default();
    for k in first..first + ticks {
        let rows: Vec<VmRow> = (1..=n).map(|v| row(v, bytes(v, k))).collect();
        assert!(b.fits(&rows));
        b.push(k, UNIX0 + (k - first) * MS, &rows);
        if b.ticks() == 100 {
            w.feed(&b);
            b.clear();
        }
    }
    w.feed(&b);
}

fn watch(window: usize) -> PeriodWatch {
    PeriodWatch::new(PeriodConfig::new(window, MS, 1000))
}

/// VM 1: on for 40 ms of every 200 ms from interval 5 030 (1 MB a ms); VM 2: a steady sender
/// whose posts beat against the sampling (two intervals in three).
fn job(vm: u32, k: u64) -> u64 {
    match vm {
        1 if (k + 200 - 30) % 200 < 40 => 1_000_000,
        2 if !k.is_multiple_of(3) => 1_500,
        _ => 0,
    }
}

#[test]
fn a_periodic_sender_is_found_with_its_last_arc_start_on_the_unix_clock() {
    let mut w = watch(2048);
    feed(&mut w, 3, 5000, 3000, job);
    assert_eq!(w.detect_due(10), 2, "VM 3 never sent: nothing to detect");
    let s = w.snaps();
    let p = s[&VmId(1)].found.expect("periodic");
    assert!((p.period_ms - 200.0).abs() < 2.0, "{p:?}");
    assert!((p.duty - 0.2).abs() < 0.02, "{p:?}");
    assert!((p.bytes_per_period - 40e6).abs() < 1e6, "{p:?}");
    // Arcs start at intervals 5 030 + 200 j; the run ends at 7 999: the latest began at 7 830.
    let want = (UNIX0 + 2830 * MS) as f64 / 1e6;
    assert!(
        (p.last_start_unix_ms - want).abs() < 3.0,
        "last start {} against {want}",
        p.last_start_unix_ms
    );
    assert_eq!(s[&VmId(1)].samples, 2048, "the window, not the whole run");
    let steady = &s[&VmId(2)];
    assert!(steady.found.is_none());
    assert!(
        steady.why_not.as_deref().unwrap().contains("steady"),
        "{steady:?}"
    );
    let silent = &s[&VmId(3)];
    assert_eq!(silent.why_not.as_deref(), Some("the VM sent nothing"));
    assert_eq!(silent.samples, 2048);
}

#[test]
fn detection_is_bounded_round_robin_and_redone_when_old() {
    let mut w = watch(1024);
    feed(
        &mut w,
        5,
        0,
        1000,
        |_, k| if k % 100 < 10 { 5000 } else { 0 },
    );
    assert_eq!(w.detect_due(2), 2);
    assert_eq!(w.detect_due(2), 2);
    assert_eq!(
        w.detect_due(2),
        1,
        "the fifth, then everyone has a fresh verdict"
    );
    assert_eq!(w.detect_due(2), 0);
    assert_eq!(w.snaps()[&VmId(5)].age_ms, 0);
    feed(
        &mut w,
        5,
        1000,
        1000,
        |_, k| if k % 100 < 10 { 5000 } else { 0 },
    );
    assert_eq!(w.snaps()[&VmId(5)].age_ms, 1000);
    assert_eq!(
        w.detect_due(100),
        5,
        "a verdict 1000 intervals old is redone"
    );
    assert_eq!(w.detections, 10);
    let p = w.snaps()[&VmId(3)].found.expect("periodic");
    assert!((p.period_ms - 100.0).abs() < 1.0, "{p:?}");
}

#[test]
fn skipped_intervals_are_zeros_and_a_long_gap_or_a_lost_batch_restarts_history() {
    let mut w = watch(512);
    let rows = [row(1, 7)];
    let mut b = Batch::default();
    b.push(10, UNIX0, &rows);
    b.push(13, UNIX0 + 3 * MS, &rows); // the loop skipped two intervals
    w.feed(&b);
    let t = &w.tracks[&VmId(1)];
    assert_eq!((t.len, t.seen), (4, 4));
    assert_eq!(&t.ring[..4], &[7, 0, 0, 7]);
    assert_eq!(t.oldest_unix_ns, UNIX0);
    b.clear();
    b.push(2000, UNIX0 + 1990 * MS, &rows); // longer than the window
    w.feed(&b);
    let t = &w.tracks[&VmId(1)];
    assert_eq!((t.len, t.oldest_unix_ns), (1, UNIX0 + 1990 * MS));
    b.clear();
    b.push(2001, UNIX0 + 1991 * MS, &rows);
    b.push(2002, UNIX0 + 1992 * MS, &rows);
    b.lost = true;
    w.feed(&b);
    assert_eq!(
        w.tracks[&VmId(1)].len,
        2,
        "history restarts after lost batches"
    );
}

#[test]
fn the_window_slides_and_carries_the_oldest_samples_time() {
    let mut w = watch(4);
    feed(&mut w, 1, 0, 10, |_, k| k + 1);
    let t = &w.tracks[&VmId(1)];
    assert_eq!(t.len, 4);
    let order: Vec<u32> = (0..4).map(|i| t.ring[(t.head + i) % 4]).collect();
    assert_eq!(order, [7, 8, 9, 10]);
    assert_eq!(t.oldest_unix_ns, UNIX0 + 6 * MS);
}

#[test]
fn gone_vms_are_forgotten_and_malformed_batches_change_nothing() {
    let mut w = watch(64);
    feed(&mut w, 3, 0, 10, |_, _| 1);
    assert_eq!(w.snaps().len(), 3);
    feed(&mut w, 1, 10, 10, |_, _| 1);
    assert_eq!(w.snaps().keys().copied().collect::<Vec<_>>(), [VmId(1)]);
    let bad = Batch {
        ids: vec![VmId(1), VmId(2)],
        intervals: vec![20, 21],
        bytes: vec![1, 2, 3],
        ..Batch::default()
    };
    w.feed(&bad);
    assert_eq!(w.tracks[&VmId(1)].seen, 20);
    // An interval already fed is ignored; a saturated sample is 4 GiB.
    let mut b = Batch::default();
    b.push(5, UNIX0, &[row(1, u64::MAX)]);
    b.push(20, UNIX0, &[row(1, u64::MAX)]);
    w.feed(&b);
    let t = &w.tracks[&VmId(1)];
    assert_eq!((t.seen, t.ring[t.len - 1]), (21, u32::MAX));
}

#[test]
fn a_batch_takes_rows_of_the_same_vms_only() {
    let mut b = Batch::default();
    b.push(1, UNIX0, &[row(1, 1), row(2, 2)]);
    assert!(b.fits(&[row(1, 5), row(2, 6)]));
    assert!(!b.fits(&[row(1, 5), row(3, 6)]));
    assert!(!b.fits(&[row(1, 5)]));
    b.clear();
    assert!(b.fits(&[row(9, 1)]));
}

#[test]
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn the_arc_start_holds_when_the_period_is_a_little_off() {
    // 100.3 ms: not a whole number of intervals, so each verdict's period differs a little;
    // the latest arc start must not move with it (a phase modulo the period since the epoch
    // moved by tens of ms for a 150 ns change).
    let spikes = |_: u32, k: u64| {
        let at = |j: u64| (j as f64 * 100.3).round() as u64;
        let j = (k as f64 / 100.3) as u64;
        if at(j) == k || at(j + 1) == k {
            4_000_000
        } else {
            0
        }
    };
    let mut w = watch(4096);
    feed(&mut w, 1, 0, 6000, spikes);
    w.detect_due(1);
    let a = w.snaps()[&VmId(1)].found.expect("periodic");
    let mut w2 = watch(4096);
    feed(&mut w2, 1, 0, 7003, spikes);
    w2.detect_due(1);
    let b = w2.snaps()[&VmId(1)].found.expect("periodic");
    assert!(
        (a.period_ms - 100.3).abs() < 0.05 && (b.period_ms - 100.3).abs() < 0.05,
        "{a:?} {b:?}"
    );
    // 10 periods later, the same arcs: b's latest start is a's plus ten periods.
    let moved = b.last_start_unix_ms - a.last_start_unix_ms;
    assert!((moved - 1003.0).abs() < 2.0, "{a:?} {b:?}");
    // And it is a spike's time: 100.3 j ms after the first interval.
    let j = ((a.last_start_unix_ms - UNIX0 as f64 / 1e6) / 100.3).round();
    let d = a.last_start_unix_ms - (UNIX0 as f64 / 1e6 + j * 100.3);
    assert!(d.abs() < 2.0, "{a:?}");
}

#[test]
fn after_lost_batches_a_verdict_stands_until_the_history_is_long_again() {
    let mut w = PeriodWatch::new(PeriodConfig::new(1024, MS, 100));
    let on = |_: u32, k: u64| if k % 100 < 10 { 5000 } else { 0 };
    feed(&mut w, 1, 0, 1024, on);
    assert_eq!(w.detect_due(1), 1);
    assert!(w.snaps()[&VmId(1)].found.is_some());
    let mut b = Batch::default();
    for k in 1024..1124 {
        b.push(k, UNIX0 + k * MS, &[row(1, on(1, k))]);
    }
    b.lost = true;
    w.feed(&b);
    assert_eq!(
        w.detect_due(1),
        0,
        "100 intervals of history: the old verdict stands"
    );
    let s = &w.snaps()[&VmId(1)];
    assert!(s.found.is_some() && s.age_ms == 100, "{s:?}");
    feed(&mut w, 1, 1124, 924, on);
    assert_eq!(w.detect_due(1), 1, "a full history again");
    // A batch of no VMs forgets them all.
    let mut none = Batch::default();
    none.push(3000, UNIX0, &[]);
    w.feed(&none);
    assert!(w.snaps().is_empty());
}

#[test]
fn a_period_found_stands_over_a_few_looks_that_find_none_then_goes() {
    let mut w = watch(2048);
    feed(&mut w, 1, 0, 3000, job);
    assert_eq!(w.detect_due(10), 1);
    let period = w.snaps()[&VmId(1)].found.expect("periodic").period_ms;
    // Then random traffic (SplitMix64's finaliser: on in about half the intervals) for a
    // whole window.
    let noise = |_: u32, k: u64| {
        let mut x = k.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        x ^= x >> 31;
        if x.is_multiple_of(2) {
            1_000_000
        } else {
            0
        }
    };
    let mut next = 3000;
    for look in 1..=HOLD_LOOKS {
        feed(&mut w, 1, next, 2048, noise);
        next += 2048;
        assert_eq!(w.detect_due(10), 1);
        let s = &w.snaps()[&VmId(1)];
        if look < HOLD_LOOKS {
            assert_eq!(s.found.map(|f| f.period_ms), Some(period), "look {look}");
            let why = s.why_not.as_deref().unwrap_or_default();
            assert!(
                why.starts_with(&format!("held over {look} look(s)")),
                "{why}"
            );
        } else {
            assert!(s.found.is_none(), "dropped at look {look}: {s:?}");
            assert!(s
                .why_not
                .as_deref()
                .unwrap_or_default()
                .contains("not periodic"));
        }
    }
}

#[test]
fn the_latest_arc_start_and_period_are_the_ones_seen_not_the_windows_fit() {
    // On for 40 ms every 200 ms, then (from interval 7 000) every 160 ms: the window's fit
    // says about 200 ms; the host saw the last two arcs begin 160 ms apart, the latest at
    // interval 7 640, with trickles (a tenth of a percent of the arc's rate) between them.
    let arcs = |_: u32, k: u64| {
        let on = if k < 7000 {
            k % 200 < 40
        } else {
            (k - 7000) % 160 < 40
        };
        match (on, k % 7) {
            (true, _) => 1_000_000,
            (false, 0) => 1_000,
            _ => 0,
        }
    };
    let mut w = watch(4096);
    feed(&mut w, 1, 4000, 3700, arcs);
    w.detect_due(1);
    let p = w.snaps()[&VmId(1)].found.expect("periodic");
    assert_eq!(p.latest_period_ms, Some(160.0), "{p:?}");
    let want = (UNIX0 + (7640 - 4000) * MS) as f64 / 1e6;
    assert!(
        (p.last_start_unix_ms - want).abs() < 1e-6,
        "{p:?} against {want}"
    );
}
