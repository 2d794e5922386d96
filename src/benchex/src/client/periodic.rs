//! A periodic job ("compute, then communicate", as a data-parallel training job): bursts of
//! orders, each once the previous one's replies are all in and a pause has passed; its checks,
//! its start at a common instant, and its iteration count.

use super::{window_open, ClientConfig, Limits, Sender, Tally};
use crate::clock::{now_ns, Idle};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The longest pause of a periodic job ([`ClientConfig::think`]).
pub const MAX_THINK: Duration = Duration::from_secs(60);

/// The most orders per iteration of a periodic job ([`ClientConfig::burst`]).
pub const MAX_BURST: u64 = 4096;

/// The longest a client waits for [`ClientConfig::start_unix_ms`].
pub const MAX_START_WAIT: Duration = Duration::from_secs(600);

/// A periodic job's settings that cannot work ([`ClientConfig::check`]), named as the
/// `benchex client` options.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PeriodicError {
    /// The pause, ms, neither 0 nor a number in [0.001, 60000].
    #[error("--think-ms {0} must be 0 or a number in [0.001, 60000]")]
    Think(f64),
    /// Orders per iteration outside 1..=4096.
    #[error("--burst {0} must be 1..=4096 orders per iteration")]
    Burst(u64),
    /// A pause with an open loop.
    #[error("--think-ms (a periodic job) runs closed loop only: --rate must be 0, not {0}")]
    OpenLoop(f64),
    /// Several orders per iteration without a pause.
    #[error("--burst {0} needs --think-ms > 0 (a periodic job)")]
    BurstWithoutThink(u64),
}

/// The shortest pause of a periodic job, ms (1 us): less would round to no pause.
pub const MIN_THINK_MS: f64 = 0.001;

/// Checks a periodic job's pause (ms, as given), burst and rate.
pub fn check_periodic(think_ms: f64, burst: u64, rate: f64) -> Result<(), PeriodicError> {
    let max_ms = MAX_THINK.as_secs_f64() * 1e3;
    // A pause under 1 us would round to nothing: refused rather than run as a plain loop.
    if !(think_ms == 0.0 || (think_ms.is_finite() && (MIN_THINK_MS..=max_ms).contains(&think_ms))) {
        return Err(PeriodicError::Think(think_ms));
    }
    if !(1..=MAX_BURST).contains(&burst) {
        return Err(PeriodicError::Burst(burst));
    }
    if think_ms > 0.0 && rate != 0.0 {
        return Err(PeriodicError::OpenLoop(rate));
    }
    if burst > 1 && think_ms <= 0.0 {
        return Err(PeriodicError::BurstWithoutThink(burst));
    }
    Ok(())
}

impl ClientConfig {
    /// Refuses a periodic job that cannot work (see [`check_periodic`]).
    pub fn check(&self) -> Result<(), PeriodicError> {
        check_periodic(self.think.as_secs_f64() * 1e3, self.burst, self.rate)
    }

    /// A periodic job: closed loop with a pause.
    pub(super) fn periodic(&self) -> bool {
        self.rate == 0.0 && !self.think.is_zero()
    }
}

/// How long to wait, at wall-clock time `now`, for `start_unix_ms`: zero for a time past, at
/// most [`MAX_START_WAIT`].
pub fn start_wait(start_unix_ms: u64, now: SystemTime) -> Duration {
    UNIX_EPOCH
        .checked_add(Duration::from_millis(start_unix_ms))
        .map_or(MAX_START_WAIT, |start| {
            start.duration_since(now).unwrap_or(Duration::ZERO)
        })
        .min(MAX_START_WAIT)
}

/// Sleeps until wall-clock time `start_unix_ms` (see [`start_wait`]), or until `stop`.
pub(super) fn wait_for_start(start_unix_ms: u64, stop: &AtomicBool) {
    // The deadline once: the cap holds however long the wait (a start an hour ahead waits the
    // cap, not the hour).
    let deadline = std::time::Instant::now() + start_wait(start_unix_ms, SystemTime::now());
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() || stop.load(Ordering::Acquire) {
            return;
        }
        std::thread::sleep(left.min(Duration::from_millis(50)));
    }
}

/// A periodic job's iterations so far.
#[derive(Debug, Default)]
pub(super) struct Iterations {
    /// Complete (every reply in).
    pub(super) complete: u64,
    /// Begun.
    begun: u64,
    /// The first one's first order, [`now_ns`].
    first_ns: u64,
    /// The latest one's first order.
    latest_ns: u64,
}

impl Iterations {
    /// An iteration begins at `now`.
    pub(super) fn begin(&mut self, now: u64) {
        if self.begun == 0 {
            self.first_ns = now;
        }
        self.latest_ns = now;
        self.begun += 1;
    }

    /// The mean time from one iteration's first order to the next one's, ns (0 with fewer than
    /// 2 begun).
    pub(super) fn mean_ns(&self) -> f64 {
        if self.begun < 2 {
            return 0.0;
        }
        (self.latest_ns - self.first_ns) as f64 / (self.begun - 1) as f64
    }
}

/// Sends one iteration's `cfg.burst` orders, `cfg.window` outstanding; false when a limit cut
/// it short.
fn send_burst(
    tx: &mut Sender,
    cfg: &ClientConfig,
    lim: &Limits,
    received: &AtomicU64,
) -> Result<bool, resex_shim::ShimError> {
    let mut idle = Idle::default();
    for _ in 0..cfg.burst {
        loop {
            if lim.reached(tx.sent) {
                return Ok(false);
            }
            if window_open(tx, cfg, received) {
                break;
            }
            idle.idle();
        }
        idle.busy();
        tx.send(now_ns())?;
    }
    Ok(true)
}

/// Waits for the replies to every order sent; when the last arrived ([`now_ns`]), or None when
/// stopped or past the end first.
fn await_replies(sent: u64, lim: &Limits, received: &AtomicU64, rec: &Mutex<Tally>) -> Option<u64> {
    let mut idle = Idle::default();
    while received.load(Ordering::Acquire) < sent {
        if lim.over() {
            return None;
        }
        idle.idle();
    }
    Some(rec.lock().unwrap_or_else(|p| p.into_inner()).last_ns)
}

/// A periodic job: iterations of `cfg.burst` orders, each once the previous one's replies are
/// all in and `cfg.think` has passed since the last of them, until a limit.
pub(super) fn send_periodic(
    tx: &mut Sender,
    cfg: &ClientConfig,
    lim: &Limits,
    received: &AtomicU64,
    rec: &Mutex<Tally>,
) -> Result<Iterations, resex_shim::ShimError> {
    let think = u64::try_from(cfg.think.as_nanos()).unwrap_or(u64::MAX);
    let mut it = Iterations::default();
    while !lim.reached(tx.sent) {
        it.begin(now_ns());
        if !send_burst(tx, cfg, lim, received)? {
            break;
        }
        let Some(last) = await_replies(tx.sent, lim, received, rec) else {
            break;
        };
        it.complete += 1;
        if lim.reached(tx.sent) {
            break;
        }
        lim.pause_until(last.saturating_add(think));
    }
    Ok(it)
}
