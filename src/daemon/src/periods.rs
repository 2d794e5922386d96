//! The period detector, off the 1 ms loop.
//!
//! The loop's side, [`PeriodFeed`], copies each step's per-VM transmitted bytes into a
//! [`Batch`] (a compare and a push per VM, into a batch sized once and reused; no lock it
//! waits for) and every [`BATCH_TICKS`] ticks hands it to the detector's thread through a
//! bounded [`crate::inbox`] without waiting; when it is full (or the thread holds it) the batch stays with the loop,
//! is filled again, and the thread restarts the histories (never a stall of the loop, never a
//! hole filled with made-up zeros). The thread, `resexd-periods`, runs
//! [`resex_core::periods::PeriodWatch`]: it appends the batches, runs the detector on at most
//! `per_second` VMs a second (round robin, each VM at most every `every_ms`; one VM at a time,
//! taking the batches that arrived in between, for at most 50 ms in a row), and publishes
//! every VM's verdict, which the loop copies into the API's snapshot.

use crate::config::PeriodsConfig;
use crate::inbox::{inbox, Inbox, Post, TrySend};
use resex_api::PeriodSnap;
use resex_common::{LogLimiter, VmId};
use resex_core::periods::{interval_start_unix_ns, Batch, PeriodConfig, PeriodWatch};
use resex_core::StepOutput;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use resex_core::periods::BATCH_TICKS;

/// Batches in flight at most.
const IN_FLIGHT: usize = 4;

/// The longest the thread detects before it looks for batches again.
const DETECT_BUDGET: Duration = Duration::from_millis(50);

/// How often the thread publishes its verdicts.
const PUBLISH_EVERY: Duration = Duration::from_millis(100);

/// Every VM's latest verdict, as the detector's thread last published them.
pub type Verdicts = Arc<RwLock<Arc<BTreeMap<VmId, PeriodSnap>>>>;

/// The loop's side of the detector.
#[derive(Debug)]
pub struct PeriodFeed {
    tx: Post<Batch>,
    back: Inbox<Batch>,
    /// The detector's thread, woken when a batch is handed over.
    detector: std::thread::Thread,
    batch: Batch,
    lost: bool,
    log_lost: LogLimiter,
    /// Unix time at the loop clock's zero, ns.
    unix_at_zero: u64,
    interval_ns: u64,
    verdicts: Verdicts,
    /// The verdicts last read (kept when the lock is busy: the loop never waits for it).
    cached: Arc<BTreeMap<VmId, PeriodSnap>>,
}

impl PeriodFeed {
    /// Adds the step's rows (`now_ns` on the loop's clock, the end of `out.interval`).
    pub fn tick(&mut self, now_ns: u64, out: &StepOutput) {
        if !self.batch.fits(&out.rows) {
            self.flush();
        }
        // The counted interval's start, on its boundary (a late tick does not move it).
        let start = interval_start_unix_ns(now_ns, self.interval_ns, self.unix_at_zero);
        self.batch.push(out.interval, start, &out.rows);
        if self.batch.ticks() >= BATCH_TICKS {
            self.flush();
        }
    }

    fn flush(&mut self) {
        if self.batch.ticks() == 0 {
            return;
        }
        // A batch back from the thread, or one sized for this batch (never grown tick by
        // tick on the loop).
        let rows = self.batch.ids.len();
        let next = self
            .back
            .try_pop()
            .unwrap_or_else(|| Batch::with_capacity(rows, BATCH_TICKS));
        let mut full = std::mem::replace(&mut self.batch, next);
        self.batch.clear();
        full.lost = std::mem::take(&mut self.lost);
        let sent = self.tx.try_send(full, IN_FLIGHT);
        if sent.is_ok() {
            // Never waits: a futex wake at most.
            self.detector.unpark();
        }
        if let Err(e) = sent {
            self.lost = true;
            let (why, mut kept) = match e {
                TrySend::Full(b) => ("the detector is behind", b),
                TrySend::Busy(b) => ("the detector was taking its queue", b),
                TrySend::Closed(b) => ("the detector has stopped", b),
            };
            // Kept, not freed on the loop: the next batch fills it.
            kept.clear();
            self.batch = kept;
            if let Some(n) = self.log_lost.hit() {
                tracing::warn!("periods: a batch of transmit counts dropped ({why}) [{n}]");
            }
        }
    }

    /// Every VM's latest verdict (those read last when the thread is publishing right now).
    pub fn verdicts(&mut self) -> Arc<BTreeMap<VmId, PeriodSnap>> {
        match self.verdicts.try_read() {
            Ok(v) => self.cached = v.clone(),
            Err(std::sync::TryLockError::Poisoned(p)) => self.cached = p.into_inner().clone(),
            Err(std::sync::TryLockError::WouldBlock) => {}
        }
        self.cached.clone()
    }
}

/// Starts the detector's thread; returns the loop's side and the thread.
pub fn spawn(
    cfg: &PeriodsConfig,
    interval_ns: u64,
    unix_at_zero: u64,
    stop: Arc<AtomicBool>,
) -> std::io::Result<(PeriodFeed, JoinHandle<()>)> {
    let (tx, rx) = inbox();
    let (back_tx, back) = inbox();
    let verdicts = Verdicts::default();
    let interval_ns = interval_ns.max(1);
    let every = cfg.every_ms.saturating_mul(1_000_000) / interval_ns;
    let watch = PeriodWatch::new(PeriodConfig::new(cfg.window, interval_ns, every));
    let per_second = f64::from(cfg.per_second);
    let thread = {
        let verdicts = verdicts.clone();
        std::thread::Builder::new()
            .name("resexd-periods".into())
            .spawn(move || {
                Detector {
                    watch,
                    rx,
                    back: back_tx,
                    verdicts,
                    per_second,
                }
                .run(&stop);
            })?
    };
    let feed = PeriodFeed {
        tx,
        back,
        detector: thread.thread().clone(),
        batch: Batch::default(),
        lost: false,
        log_lost: LogLimiter::default(),
        unix_at_zero,
        interval_ns,
        verdicts,
        cached: Arc::default(),
    };
    Ok((feed, thread))
}

/// The thread's state.
struct Detector {
    watch: PeriodWatch,
    rx: Inbox<Batch>,
    back: Post<Batch>,
    verdicts: Verdicts,
    per_second: f64,
}

impl Detector {
    /// Feeds a batch and hands it back for reuse.
    fn take(&mut self, b: Batch) {
        self.watch.feed(&b);
        let _ = self.back.try_send(b, IN_FLIGHT);
    }

    fn run(mut self, stop: &AtomicBool) {
        let mut tokens = 0.0;
        let (mut last, mut published) = (Instant::now(), Instant::now());
        while !stop.load(Ordering::Acquire) {
            let batches = self.rx.take();
            if batches.is_empty() {
                if self.rx.senders_gone() {
                    return;
                }
                // The loop unparks it when it hands a batch over.
                std::thread::park_timeout(PUBLISH_EVERY);
            }
            for b in batches {
                self.take(b);
            }
            let now = Instant::now();
            let dt = now.duration_since(last).as_secs_f64();
            last = now;
            // Tokens: per_second a second, at most a second's worth saved up.
            tokens = (tokens + self.per_second * dt).min(self.per_second.max(1.0));
            // One VM at a time, taking the batches that arrived in between, and for at most
            // DETECT_BUDGET: the loop's batches are never left waiting.
            while tokens >= 1.0 && now.elapsed() < DETECT_BUDGET {
                if self.watch.detect_due(1) == 0 {
                    break;
                }
                tokens -= 1.0;
                for b in self.rx.take() {
                    self.take(b);
                }
            }
            if now.duration_since(published) >= PUBLISH_EVERY {
                published = now;
                let fresh = Arc::new(self.watch.snaps());
                let old = std::mem::replace(
                    &mut *self.verdicts.write().unwrap_or_else(|p| p.into_inner()),
                    fresh,
                );
                drop(old); // outside the lock
            }
        }
    }
}
