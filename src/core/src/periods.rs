//! Periods: each VM's transmitted bytes per interval, kept for the period detector, and the
//! detector's verdicts (ML training jobs communicate once per iteration).
//!
//! The driver hands the step's rows over in [`Batch`]es (a run of ticks, every VM's
//! `tx_bytes` per tick, exact from the monitor); [`PeriodWatch::feed`] appends them to one
//! ring per VM ([`PeriodConfig::window`] intervals, allocated when the VM first sends, 4 bytes
//! an interval); [`PeriodWatch::detect_due`] runs [`resex_mlcompat::detect`] on at most a given
//! number of VMs whose verdict is older than [`PeriodConfig::redetect_intervals`], round robin;
//! [`PeriodWatch::snaps`] gives the API's [`PeriodSnap`] of every VM. No thread and no clock:
//! resexd runs it on a thread of its own, off the 1 ms loop; the lab can call it in virtual
//! time. Work is bounded: a batch costs O(ticks x VMs), a detection O(window log window).

use resex_api::{PeriodFound, PeriodSnap};
use resex_common::VmId;
use resex_mlcompat::{detect, DetectConfig, DetectError, Periodicity};
use std::collections::BTreeMap;
use std::ops::Bound;

use crate::output::VmRow;

mod inline;
pub use inline::{interval_start_unix_ns, InlineDetector, BATCH_TICKS};

/// Settings of a [`PeriodWatch`].
#[derive(Debug, Clone, PartialEq)]
pub struct PeriodConfig {
    /// Intervals of history kept per VM (the most recent).
    pub window: usize,
    /// The core's interval, ns.
    pub interval_ns: u64,
    /// A VM's verdict is redone once it is this many intervals old.
    pub redetect_intervals: u64,
    /// The detector's settings (its `max_samples` is the window).
    pub detect: DetectConfig,
}

impl PeriodConfig {
    /// `window` intervals of `interval_ns`, each VM looked at again every `redetect_intervals`.
    pub fn new(window: usize, interval_ns: u64, redetect_intervals: u64) -> Self {
        let window = window.clamp(1, resex_mlcompat::detect::MAX_SAMPLES);
        Self {
            window,
            interval_ns: interval_ns.max(1),
            redetect_intervals: redetect_intervals.max(1),
            detect: DetectConfig {
                max_samples: window,
                ..DetectConfig::default()
            },
        }
    }
}

/// Every VM's transmitted bytes over a run of ticks, as the driver hands them over.
#[derive(Debug, Clone, Default)]
pub struct Batch {
    /// The VMs, in the rows' order (the same in every tick of the batch).
    pub ids: Vec<VmId>,
    /// The interval of each tick.
    pub intervals: Vec<u64>,
    /// Bytes sent, `ids.len()` per tick, tick after tick.
    pub bytes: Vec<u64>,
    /// Unix time, ns, at which the first tick's interval started.
    pub unix_ns: u64,
    /// Batches before this one were lost (the detector fell behind): history restarts.
    pub lost: bool,
}

impl Batch {
    /// An empty batch with room for `ticks` ticks of `vms` VMs.
    pub fn with_capacity(vms: usize, ticks: usize) -> Self {
        Self {
            ids: Vec::with_capacity(vms),
            intervals: Vec::with_capacity(ticks),
            bytes: Vec::with_capacity(vms.saturating_mul(ticks)),
            ..Self::default()
        }
    }

    /// Ticks held.
    pub fn ticks(&self) -> usize {
        self.intervals.len()
    }

    /// Whether `rows` can join this batch (the same VMs in the same order, or it is empty).
    pub fn fits(&self, rows: &[VmRow]) -> bool {
        self.intervals.is_empty()
            || (rows.len() == self.ids.len()
                && rows.iter().zip(&self.ids).all(|(r, id)| r.vm == *id))
    }

    /// Appends one tick's rows (call [`Batch::fits`] first); `unix_ns` is when its interval
    /// started, kept for the batch's first tick.
    pub fn push(&mut self, interval: u64, unix_ns: u64, rows: &[VmRow]) {
        if self.intervals.is_empty() {
            self.ids.clear();
            self.ids.extend(rows.iter().map(|r| r.vm));
            self.unix_ns = unix_ns;
        }
        self.intervals.push(interval);
        self.bytes.extend(rows.iter().map(|r| r.delta.tx_bytes));
    }

    /// Empties it for reuse (keeping its allocations).
    pub fn clear(&mut self) {
        self.ids.clear();
        self.intervals.clear();
        self.bytes.clear();
        self.lost = false;
    }
}

/// What is kept of one VM.
#[derive(Debug, Default)]
struct Track {
    /// Bytes per interval (saturated at 4 GiB), empty until the VM first sends.
    ring: Vec<u32>,
    head: usize,
    len: usize,
    /// The interval the next sample is for.
    next: u64,
    /// Unix time at which the oldest sample's interval started, ns.
    oldest_unix_ns: u64,
    /// Intervals seen since it was first fed.
    seen: u64,
    verdict: Option<Verdict>,
}

#[derive(Debug)]
struct Verdict {
    result: Result<Periodicity, DetectError>,
    samples: usize,
    /// When the detector last looked (a period found stands over a few looks that find none).
    looked: u64,
    /// Looks since it was found that found no period.
    missed: u32,
    /// Why the latest look found none.
    last_miss: Option<String>,
    oldest_unix_ns: u64,
}

/// A period found stands until this many looks in a row find none: a live job's period
/// wanders (jobs sharing a link, a busy host), and its confidence hovers near the threshold;
/// a job that stops sending loses it at once ("the VM sent nothing").
pub const HOLD_LOOKS: u32 = 4;

/// Every VM's transmit history and the detector's verdicts.
#[derive(Debug)]
pub struct PeriodWatch {
    cfg: PeriodConfig,
    tracks: BTreeMap<VmId, Track>,
    /// The last VM detected (round robin).
    cursor: Option<VmId>,
    /// The latest interval fed.
    now: u64,
    scratch: Vec<u64>,
    /// Detections run so far.
    pub detections: u64,
}

impl PeriodWatch {
    /// An empty watch.
    pub fn new(cfg: PeriodConfig) -> Self {
        Self {
            cfg,
            tracks: BTreeMap::new(),
            cursor: None,
            now: 0,
            scratch: Vec::new(),
            detections: 0,
        }
    }

    /// Appends a batch; VMs not in it are forgotten.
    pub fn feed(&mut self, b: &Batch) {
        let n = b.ids.len();
        if b.ticks() == 0 || b.bytes.len() != n * b.ticks() {
            return;
        }
        if let Some(&last) = b.intervals.last() {
            self.now = self.now.max(last);
        }
        let mut sorted = b.ids.clone();
        sorted.sort_unstable();
        self.tracks.retain(|id, _| sorted.binary_search(id).is_ok());
        let (w, iv) = (self.cfg.window, self.cfg.interval_ns);
        let first = b.intervals[0];
        for (j, id) in b.ids.iter().enumerate() {
            let t = self.tracks.entry(*id).or_default();
            if b.lost {
                t.len = 0;
                t.seen = 0;
            }
            for (k, &interval) in b.intervals.iter().enumerate() {
                let unix = b.unix_ns + interval.saturating_sub(first).saturating_mul(iv);
                t.push(interval, unix, b.bytes[k * n + j], w, iv);
            }
        }
    }

    /// Runs the detector on at most `max` VMs whose verdict is missing or old, continuing
    /// after the last one looked at; returns how many it ran.
    pub fn detect_due(&mut self, max: usize) -> usize {
        let (now, every) = (self.now, self.cfg.redetect_intervals);
        // A verdict stands until it is old and the history is as long as the one it was made
        // on (after lost batches the history restarts: a verdict on its first few intervals
        // would replace a good one with "too short").
        let due = |t: &Track| {
            !t.ring.is_empty()
                && t.verdict.as_ref().is_none_or(|v| {
                    now.saturating_sub(v.looked) >= every && t.len >= v.samples.min(t.ring.len())
                })
        };
        let after = self.cursor.map_or(Bound::Unbounded, Bound::Excluded);
        let upto = self
            .cursor
            .map_or(Bound::Excluded(VmId(0)), Bound::Included);
        let ids: Vec<VmId> = self
            .tracks
            .range((after, Bound::Unbounded))
            .chain(self.tracks.range((Bound::Unbounded, upto)))
            .filter(|(_, t)| due(t))
            .map(|(id, _)| *id)
            .take(max)
            .collect();
        for id in &ids {
            self.detect_one(*id);
        }
        if let Some(last) = ids.last() {
            self.cursor = Some(*last);
        }
        ids.len()
    }

    fn detect_one(&mut self, id: VmId) {
        let Some(t) = self.tracks.get_mut(&id) else {
            return;
        };
        self.scratch.clear();
        let w = t.ring.len();
        self.scratch
            .extend((0..t.len).map(|i| u64::from(t.ring[(t.head + i) % w])));
        let result = detect(&self.scratch, self.cfg.interval_ns, &self.cfg.detect);
        self.detections += 1;
        if let (Err(e @ DetectError::NotPeriodic { .. }), Some(v)) = (&result, t.verdict.as_mut()) {
            if v.result.is_ok() && v.missed + 1 < HOLD_LOOKS {
                v.missed += 1;
                v.looked = self.now;
                v.last_miss = Some(e.to_string());
                return;
            }
        }
        t.verdict = Some(Verdict {
            result,
            samples: t.len,
            looked: self.now,
            missed: 0,
            last_miss: None,
            oldest_unix_ns: t.oldest_unix_ns,
        });
    }

    /// The API's view of every VM fed (a VM that never sent: "the VM sent nothing").
    pub fn snaps(&self) -> BTreeMap<VmId, PeriodSnap> {
        self.tracks
            .iter()
            .map(|(id, t)| (*id, self.snap_of(t)))
            .collect()
    }

    fn snap_of(&self, t: &Track) -> PeriodSnap {
        let ms = |intervals: u64| intervals.saturating_mul(self.cfg.interval_ns) / 1_000_000;
        let Some(v) = &t.verdict else {
            let why = if t.ring.is_empty() {
                DetectError::Silent.to_string()
            } else {
                "not looked at yet".to_owned()
            };
            return PeriodSnap {
                found: None,
                why_not: Some(why),
                samples: t.seen.min(self.cfg.window as u64),
                age_ms: 0,
            };
        };
        let end_ns = v.oldest_unix_ns as f64 + v.samples as f64 * self.cfg.interval_ns as f64;
        let (found, why_not) = match &v.result {
            Ok(p) => {
                let held = v.last_miss.as_ref().map(|m| {
                    format!(
                        "held over {} look(s) that found none; the latest: {m}",
                        v.missed
                    )
                });
                let mut f = found(p, v.oldest_unix_ns, end_ns);
                if let Some((start_ns, between_ns)) = t.seen_arcs(p, self.cfg.interval_ns) {
                    f.last_start_unix_ms = start_ns as f64 / 1e6;
                    f.latest_period_ms = between_ns.map(|b| b as f64 / 1e6);
                }
                (Some(f), held)
            }
            Err(e) => (None, Some(e.to_string())),
        };
        PeriodSnap {
            found,
            why_not,
            samples: v.samples as u64,
            age_ms: ms(self.now.saturating_sub(v.looked)),
        }
    }
}

/// The detector's figures, its phase (from the window's first sample, at `oldest_unix_ns`)
/// carried to the latest arc start before the window's end (`end_ns`, Unix): the error is the
/// period's times the periods in the window, not times the periods since the epoch.
fn found(p: &Periodicity, oldest_unix_ns: u64, end_ns: f64) -> PeriodFound {
    let period = p.period_ns.max(1) as f64;
    let first = oldest_unix_ns as f64 + p.phase_ns as f64;
    let k = ((end_ns - first) / period).floor().max(0.0);
    PeriodFound {
        period_ms: p.period_ns as f64 / 1e6,
        duty: p.duty,
        bytes_per_period: p.bytes_per_period,
        last_start_unix_ms: (first + k * period) / 1e6,
        confidence: p.confidence,
        latest_period_ms: None,
    }
}

impl Track {
    /// Appends the sample of `interval` (zeros for the intervals skipped since the last one).
    fn push(&mut self, interval: u64, unix_ns: u64, bytes: u64, window: usize, iv: u64) {
        if self.seen > 0 && interval < self.next {
            return; // an interval already fed
        }
        let gap = if self.seen == 0 {
            0
        } else {
            interval - self.next
        };
        self.seen = self.seen.saturating_add(gap.saturating_add(1));
        self.next = interval.saturating_add(1);
        if self.ring.is_empty() && bytes == 0 {
            return; // history starts at the first byte sent
        }
        if self.ring.is_empty() {
            self.ring = vec![0; window];
        }
        if self.len == 0 || gap >= window as u64 {
            self.head = 0;
            self.len = 0;
            self.oldest_unix_ns = unix_ns;
        } else {
            for _ in 0..gap {
                self.push_one(0, iv);
            }
        }
        self.push_one(u32::try_from(bytes).unwrap_or(u32::MAX), iv);
    }

    /// The latest arc start seen in the last three periods of its bytes (Unix ns) and the
    /// time since the one before, if there was one. An arc starts at an interval that carries
    /// at least a tenth of the job's mean rate on the wire after a pause of at least a third of
    /// its time off the wire (at least 5 intervals): acknowledgements between arcs are no
    /// start, nor a short lull within one.
    fn seen_arcs(&self, p: &Periodicity, iv: u64) -> Option<(u64, Option<u64>)> {
        let w = self.ring.len();
        let period = (p.period_ns / iv.max(1)).max(1);
        let on = (p.duty * period as f64).max(1.0);
        let busy = (p.bytes_per_period / on / 10.0).max(1.0);
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let gap = ((((1.0 - p.duty) * period as f64) / 3.0) as usize).max(5);
        let span = usize::try_from(period.saturating_mul(3)).unwrap_or(usize::MAX);
        let from = self.len.saturating_sub(span);
        let (mut idle, mut starts) = (0usize, [None::<usize>; 2]);
        for i in from..self.len {
            if f64::from(self.ring[(self.head + i) % w]) >= busy {
                if idle >= gap {
                    starts = [starts[1], Some(i)];
                }
                idle = 0;
            } else {
                idle += 1;
            }
        }
        let at = |i: usize| {
            self.oldest_unix_ns
                .saturating_add((i as u64).saturating_mul(iv))
        };
        let last = starts[1]?;
        Some((
            at(last),
            starts[0].map(|s| ((last - s) as u64).saturating_mul(iv)),
        ))
    }

    fn push_one(&mut self, v: u32, iv: u64) {
        let w = self.ring.len();
        if self.len < w {
            self.ring[(self.head + self.len) % w] = v;
            self.len += 1;
        } else {
            self.ring[self.head] = v;
            self.head = (self.head + 1) % w;
            self.oldest_unix_ns = self.oldest_unix_ns.saturating_add(iv);
        }
    }
}

#[cfg(test)]
mod tests;
