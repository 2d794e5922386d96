//! The period detector's costs at resexd's defaults (1 024 VMs, a 8 192-interval window): what
//! the loop pays per tick to copy the rows into a batch, what the detector's thread pays per
//! batch of 100 ticks and per VM looked at (a periodic job, a steady sender). Prints a table;
//! not a timed test.
//!
//! `cargo bench -p resex-core --bench periods`

#![allow(
    missing_docs,
    clippy::cast_possible_truncation,
    clippy::cast_precision_loss
)]

use resex_core::periods::{Batch, PeriodConfig, PeriodWatch};
use resex_core::{StepOutput, VmId, VmRow};
use std::time::Instant;

const VMS: u32 = 1024;
const WINDOW: usize = 8192;

/// VM v sends 1 MB a ms for 400 ms of every 2 s (odd v), or 1.5 KB in two ms of three (even).
fn bytes(v: u32, k: u64) -> u64 {
    if v % 2 == 1 {
        if (k + u64::from(v)) % 2000 < 400 {
            1_000_000
        } else {
            0
        }
    } else if k.is_multiple_of(3) {
        0
    } else {
        1_500
    }
}

fn rows(out: &mut StepOutput, k: u64) {
    for (i, r) in out.rows.iter_mut().enumerate() {
        r.delta.tx_bytes = bytes(i as u32 + 1, k);
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let mut out = StepOutput {
        rows: (1..=VMS)
            .map(|v| VmRow {
                vm: VmId(v),
                cpu_pct: 0.0,
                delta: resex_ibmon::Counters::default(),
                report: None,
                priced: None,
                cap_set: None,
                tx_set: None,
            })
            .collect(),
        ..StepOutput::default()
    };
    let mut w = PeriodWatch::new(PeriodConfig::new(WINDOW, 1_000_000, 2000));
    let (mut push, mut feed) = (Vec::new(), Vec::new());
    let mut b = Batch::default();
    for k in 0..(WINDOW as u64 + 200) {
        rows(&mut out, k);
        let t = Instant::now();
        if !b.fits(&out.rows) {
            unreachable!("the same VMs every tick");
        }
        b.push(k, k * 1_000_000, &out.rows);
        push.push(t.elapsed().as_nanos() as f64 / 1000.0);
        if b.ticks() == 100 {
            let t = Instant::now();
            w.feed(&b);
            feed.push(t.elapsed().as_nanos() as f64 / 1000.0);
            b.clear();
        }
    }
    let t = Instant::now();
    let n = w.detect_due(VMS as usize);
    let all = t.elapsed().as_secs_f64();
    let snaps = w.snaps();
    let found = snaps.values().filter(|s| s.found.is_some()).count();
    println!("period detector, {VMS} VMs, window {WINDOW} intervals of 1 ms");
    println!("{:<52} {:>10}", "what", "value");
    println!(
        "{:<52} {:>7.1} us",
        "loop: rows into the batch, per tick (median)",
        median(push)
    );
    println!(
        "{:<52} {:>7.2} ms",
        "thread: one batch of 100 ticks into the rings (median)",
        median(feed) / 1000.0
    );
    println!(
        "{:<52} {:>7.2} ms",
        "thread: detection per VM (mean over all)",
        all * 1000.0 / n as f64
    );
    println!(
        "{:<52} {:>10}",
        "VMs found periodic / looked at",
        format!("{found}/{n}")
    );
    println!(
        "{:<52} {:>7.1} %",
        "thread at 32 detections a second, share of a core",
        all / n as f64 * 32.0 * 100.0
    );
}
