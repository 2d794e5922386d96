//! softhca's polling thread on the real clock: how it rests, how it asks for priority, and how
//! it watches itself for stalls.
//!
//! The thread is the port of a NIC: while it is not scheduled no guest's I/O moves, so on a
//! busy host it asks for a raised nice value (never `SCHED_FIFO`: see [`PollOptions::nice`]),
//! and it counts every second in which it was held up for [`STALL`] or more. The count is what
//! a caller reads ([`HcaThread::stalls`]) to tell a slow design from a busy
//! machine; logging each stalled second is optional (the demo summarises instead).

use crate::clock::Clock;
use crate::SoftHca;
pub use resex_rt::{raise_priority, Priority};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How the polling thread runs.
#[derive(Debug, Clone)]
pub struct PollOptions {
    /// The longest rest between polls (new doorbells are noticed within it).
    pub idle_sleep: Duration,
    /// Ask for this nice value (-20..=19; the demo asks for -10); when refused, run as started
    /// (the outcome is in [`HcaThread::priority`]). Never `SCHED_FIFO`: the thread rests for
    /// microseconds, which a real-time thread turns into a spin (see
    /// [`resex_rt::raise_priority`]): measured here, 3.27 s of CPU in 3 s with 2 context
    /// switches, then real-time throttling and the guests starved for 100-190 ms at a time.
    pub nice: Option<i32>,
    /// Log each stalled second (a WARN line); otherwise only count it.
    pub log_stalls: bool,
}

impl Default for PollOptions {
    fn default() -> Self {
        Self {
            idle_sleep: Duration::from_micros(20),
            nice: None,
            log_stalls: true,
        }
    }
}

/// A hold-up this long (not scheduled, waiting for the lock, or one poll) stalls every guest.
pub const STALL: Duration = Duration::from_millis(20);

/// What the thread saw of its own progress.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StallSummary {
    /// Whole seconds watched.
    pub seconds: u64,
    /// Of those, seconds with a hold-up of [`STALL`] or more.
    pub stalled_seconds: u64,
    /// The longest hold-up, us.
    pub longest_us: u64,
}

impl StallSummary {
    /// What happened between `earlier` and `self` (the longest hold-up is `self`'s).
    pub fn since(&self, earlier: &StallSummary) -> StallSummary {
        StallSummary {
            seconds: self.seconds.saturating_sub(earlier.seconds),
            stalled_seconds: self.stalled_seconds.saturating_sub(earlier.stalled_seconds),
            longest_us: self.longest_us,
        }
    }
}

#[derive(Debug, Default)]
struct StallCounters {
    seconds: AtomicU64,
    stalled: AtomicU64,
    longest_us: AtomicU64,
}

/// How [`SoftHca::spawn`]'s thread polls, in words (for benchmarks to print).
pub fn describe_polling(idle_sleep: Duration) -> String {
    format!(
        "a thread of its own on the real clock, sleeping {SHORT_REST:?} to {idle_sleep:?} between \
         polls (until the next completion is due while busy; {idle_sleep:?} once idle), never spinning"
    )
}

/// The shortest rest between polls. The thread never yield-spins: on a host with few CPUs a
/// thread that is always runnable starves the guests' cgroups (seen for seconds at a time on a
/// 2-CPU machine), and the guests are what the HCA serves.
const SHORT_REST: Duration = Duration::from_micros(2);

/// Waits for about `wait_ns` (the time until the next completion is due), at least
/// [`SHORT_REST`] and at most `max`.
fn rest_until(wait_ns: u64, max: Duration) {
    let rest =
        Duration::from_nanos(wait_ns.saturating_sub(3_000)).clamp(SHORT_REST, max.max(SHORT_REST));
    std::thread::sleep(rest);
}

/// Watches the polling thread's own progress: a long wait for the HCA's lock, a long poll, or a
/// long gap between polls (the thread was not scheduled) stalls every guest's I/O at once; each
/// second is counted, and logged (at most once a second) when asked.
#[derive(Debug)]
struct StallLog {
    last_end: Instant,
    worst: [Duration; 3],
    since: Instant,
    log: bool,
    counters: Arc<StallCounters>,
}

impl StallLog {
    fn new(log: bool, counters: Arc<StallCounters>) -> Self {
        let now = Instant::now();
        Self {
            last_end: now,
            worst: [Duration::ZERO; 3],
            since: now,
            log,
            counters,
        }
    }

    /// Whether a second has passed since the last report (the caller may add its own).
    fn due(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.since) >= Duration::from_secs(1)
    }

    fn note(&mut self, start: Instant, locked: Instant, end: Instant) {
        // The thread rests 20 us at most between polls: far below a stall.
        let gap = start.saturating_duration_since(self.last_end);
        for (w, d) in self.worst.iter_mut().zip([
            gap,
            locked.saturating_duration_since(start),
            end.saturating_duration_since(locked),
        ]) {
            *w = (*w).max(d);
        }
        self.last_end = end;
        if end.saturating_duration_since(self.since) >= Duration::from_secs(1) {
            let [gap, lock, poll] = self.worst;
            let worst = gap.max(lock).max(poll);
            let c = &self.counters;
            c.seconds.fetch_add(1, Ordering::Relaxed);
            c.longest_us.fetch_max(
                u64::try_from(worst.as_micros()).unwrap_or(u64::MAX),
                Ordering::Relaxed,
            );
            if worst >= STALL {
                c.stalled.fetch_add(1, Ordering::Relaxed);
                if self.log {
                    tracing::warn!(
                        "softhca stalled in the last second: longest unscheduled gap {gap:?}, \
                         wait for the lock {lock:?}, one poll {poll:?}"
                    );
                }
            }
            self.worst = [Duration::ZERO; 3];
            self.since = end;
        }
    }
}

impl SoftHca {
    /// Polls on a thread of its own against `clock` (the real clock) until the returned handle
    /// is dropped. While work is in flight it sleeps until the next completion is due, from
    /// 2 us up to `idle_sleep` (new doorbells are noticed within that), so a busy link does not
    /// cost a whole CPU; when idle it rests 2 us between polls for a while, then `idle_sleep`.
    pub fn spawn(&self, clock: Arc<dyn Clock>, idle_sleep: Duration) -> HcaThread {
        self.spawn_with(
            clock,
            PollOptions {
                idle_sleep,
                ..PollOptions::default()
            },
        )
    }

    /// [`Self::spawn`] with every option.
    pub fn spawn_with(&self, clock: Arc<dyn Clock>, opts: PollOptions) -> HcaThread {
        let busy_poll = opts.idle_sleep;
        let idle_sleep = opts.idle_sleep;
        let stop = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(StallCounters::default());
        let priority = Arc::new(OnceLock::new());
        let hca = self.clone();
        let flag = stop.clone();
        let (c, pr) = (counters.clone(), priority.clone());
        let handle = std::thread::Builder::new()
            .name("softhca".into())
            .spawn(move || {
                // Sleeps below are tens of microseconds: ask for them to be kept that short.
                resex_rt::set_timer_slack(1_000);
                if let Some(nice) = opts.nice {
                    let _ = pr.set(raise_priority(None, nice));
                }
                let mut idle = 0u32;
                let mut stalls = StallLog::new(opts.log_stalls, c);
                while !flag.load(Ordering::Acquire) {
                    let t0 = Instant::now();
                    let mut st = hca.lock();
                    let t1 = Instant::now();
                    let now = clock.now_ns();
                    st.poll(now);
                    let busy = st.busy;
                    let due = if busy { st.next_due_ns() } else { None };
                    if stalls.due(t0) && opts.log_stalls {
                        if let Some((qpn, waited, what)) = st.oldest_work(now) {
                            if waited >= 100_000_000 {
                                tracing::warn!(
                                    "softhca: QP {qpn:#x} has waited {} ms: {what}",
                                    waited / 1_000_000
                                );
                            }
                        }
                    }
                    drop(st);
                    stalls.note(t0, t1, Instant::now());
                    if busy {
                        idle = 0;
                        rest_until(due.map_or(0, |d| d.saturating_sub(now)), busy_poll);
                    } else {
                        idle = idle.saturating_add(1);
                        // Stay responsive for a while after work, then rest.
                        std::thread::sleep(if idle < 2000 { SHORT_REST } else { idle_sleep });
                    }
                }
            })
            .expect("spawning the softhca thread");
        HcaThread {
            stop,
            handle: Some(handle),
            counters,
            priority,
        }
    }
}

/// The HCA's polling thread; stops and joins when dropped.
#[derive(Debug)]
pub struct HcaThread {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
    counters: Arc<StallCounters>,
    priority: Arc<OnceLock<Priority>>,
}

impl HcaThread {
    /// The thread's stalls so far.
    pub fn stalls(&self) -> StallSummary {
        let c = &self.counters;
        StallSummary {
            seconds: c.seconds.load(Ordering::Relaxed),
            stalled_seconds: c.stalled.load(Ordering::Relaxed),
            longest_us: c.longest_us.load(Ordering::Relaxed),
        }
    }

    /// The priority the thread got, once it has asked (None when it was not asked to, or
    /// has not started yet).
    pub fn priority(&self) -> Option<Priority> {
        self.priority.get().cloned()
    }
}

impl Drop for HcaThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stalled_second_is_counted_and_a_quiet_one_is_not() {
        let c = Arc::new(StallCounters::default());
        let mut log = StallLog::new(false, c.clone());
        let t = log.since;
        // A quiet second: polls every 10 us.
        let mut at = t;
        while at < t + Duration::from_millis(1001) {
            let end = at + Duration::from_micros(5);
            log.note(at, at, end);
            at = end + Duration::from_micros(5);
        }
        // A second with one 30 ms gap.
        let gap_at = at + Duration::from_millis(30);
        log.note(gap_at, gap_at, gap_at + Duration::from_micros(5));
        let mut at = gap_at + Duration::from_micros(10);
        while at < t + Duration::from_millis(2002) {
            let end = at + Duration::from_micros(5);
            log.note(at, at, end);
            at = end + Duration::from_micros(5);
        }
        assert_eq!(c.seconds.load(Ordering::Relaxed), 2);
        assert_eq!(c.stalled.load(Ordering::Relaxed), 1);
        assert!(c.longest_us.load(Ordering::Relaxed) >= 30_000);
    }

    #[test]
    fn the_summary_of_a_stretch_is_the_difference() {
        let a = StallSummary {
            seconds: 10,
            stalled_seconds: 2,
            longest_us: 5,
        };
        let b = StallSummary {
            seconds: 14,
            stalled_seconds: 5,
            longest_us: 40_000,
        };
        assert_eq!(
            b.since(&a),
            StallSummary {
                seconds: 4,
                stalled_seconds: 3,
                longest_us: 40_000
            }
        );
    }
}
