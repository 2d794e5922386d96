//! The detector in line with the driver's steps, for a driver in virtual time (the lab's
//! fabric): every step's rows go into a [`Batch`] of [`BATCH_TICKS`] ticks, each full batch
//! into the [`PeriodWatch`], and [`InlineDetector::verdicts`] detects every VM that is due
//! before it answers. resexd hands the same batches to the same watch on a thread of its own
//! (its loop must never wait for a detection); both date a batch by
//! [`interval_start_unix_ns`].

use super::{Batch, PeriodConfig, PeriodWatch};
use crate::output::StepOutput;
use resex_api::PeriodSnap;
use resex_common::VmId;
use std::collections::BTreeMap;

/// Ticks per batch (100 ms at 1 ms).
pub const BATCH_TICKS: usize = 100;

/// Unix time (ns) at which the interval a step at `now_ns` counted began, on a driver's clock
/// whose zero is Unix `unix_at_zero_ns`: the interval's boundary (a late step does not move
/// it) less one interval.
#[must_use]
pub fn interval_start_unix_ns(now_ns: u64, interval_ns: u64, unix_at_zero_ns: u64) -> u64 {
    let interval_ns = interval_ns.max(1);
    let boundary = now_ns - now_ns % interval_ns;
    unix_at_zero_ns
        .saturating_add(boundary)
        .saturating_sub(interval_ns)
}

/// A [`PeriodWatch`] fed step by step and asked in line (see the module's documentation).
#[derive(Debug)]
pub struct InlineDetector {
    watch: PeriodWatch,
    batch: Batch,
    interval_ns: u64,
    unix_at_zero_ns: u64,
}

impl InlineDetector {
    /// A detector whose driver's clock has its zero at Unix `unix_at_zero_ns`.
    #[must_use]
    pub fn new(cfg: PeriodConfig, unix_at_zero_ns: u64) -> Self {
        Self {
            interval_ns: cfg.interval_ns,
            watch: PeriodWatch::new(cfg),
            batch: Batch::default(),
            unix_at_zero_ns,
        }
    }

    /// Takes a step's rows (`now_ns` on the driver's clock, the end of `out.interval`).
    pub fn tick(&mut self, now_ns: u64, out: &StepOutput) {
        if !self.batch.fits(&out.rows) {
            self.flush();
        }
        let start = interval_start_unix_ns(now_ns, self.interval_ns, self.unix_at_zero_ns);
        self.batch.push(out.interval, start, &out.rows);
        if self.batch.ticks() >= BATCH_TICKS {
            self.flush();
        }
    }

    fn flush(&mut self) {
        if self.batch.ticks() > 0 {
            self.watch.feed(&self.batch);
            self.batch.clear();
        }
    }

    /// Every VM's verdict, after detecting those due (the ticks not yet in a full batch wait
    /// for it, as they do in resexd).
    pub fn verdicts(&mut self) -> BTreeMap<VmId, PeriodSnap> {
        self.watch.detect_due(usize::MAX);
        self.watch.snaps()
    }
}
