//! softhca's polling thread on the real clock: how it rests, how it asks for priority, and how
//! it watches itself for stalls.
//!
//! It waits like a device: for a guest's doorbell (see `doorbell`) or for the next completion
//! the link model has due, whichever comes first, and processes every packet due by then in
//! one poll; an idle port wakes only every [`DOORBELL_WAIT`]. A guest without a doorbell keeps
//! the older timer polling (a rest of 2 us to `idle_sleep`) for as long as it is attached.
//!
//! The thread is the port of a NIC: while it is not scheduled no guest's I/O moves, so on a
//! busy host it asks for a raised nice value (never `SCHED_FIFO`: see [`PollOptions::nice`]),
//! and it counts every second in which it was held up for [`STALL`] or more. The count is what
//! a caller reads ([`HcaThread::stalls`]) to tell a slow design from a busy
//! machine; logging each stalled second is optional (the demo summarises instead).

use crate::clock::Clock;
use crate::doorbell::Doorbells;
use crate::SoftHca;
pub use resex_rt::{raise_priority, Priority};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How the polling thread runs.
#[derive(Debug, Clone)]
pub struct PollOptions {
    /// The longest rest between polls while a guest without a doorbell is attached (its new
    /// doorbell records are noticed within it).
    pub idle_sleep: Duration,
    /// Ask for this nice value (-20..=19; the demo asks for -10); when refused, run as started
    /// (the outcome is in [`HcaThread::priority`]). Never `SCHED_FIFO`: the thread rests for
    /// microseconds, which a real-time thread turns into a spin (see
    /// [`resex_rt::raise_priority`]): measured here, 3.27 s of CPU in 3 s with 2 context
    /// switches, then real-time throttling and the guests starved for 100-190 ms at a time.
    pub nice: Option<i32>,
    /// Log each stalled second (a WARN line); otherwise only count it.
    pub log_stalls: bool,
    /// Wait on the guests' doorbells (a guest asks for one through its control path) and on
    /// the next completion due; a guest without one is polled every `idle_sleep` at most.
    /// False: poll every doorbell record every 2 us to `idle_sleep`, like a timer (the design
    /// before doorbells; kept for comparing them).
    pub doorbells: bool,
}

impl Default for PollOptions {
    fn default() -> Self {
        Self {
            idle_sleep: Duration::from_micros(20),
            nice: None,
            log_stalls: true,
            doorbells: true,
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
pub fn describe_polling(opts: &PollOptions) -> String {
    let idle = opts.idle_sleep;
    if opts.doorbells {
        format!(
            "a thread of its own on the real clock that waits for a guest's doorbell or the next \
             completion due (at most {DOORBELL_WAIT:?}; {idle:?} while a guest without a doorbell \
             is attached), never spinning"
        )
    } else {
        format!(
            "a thread of its own on the real clock, sleeping {SHORT_REST:?} to {idle:?} between \
             polls (until the next completion is due while busy; {idle:?} once idle), never spinning"
        )
    }
}

/// The shortest rest between polls. The thread never yield-spins: on a host with few CPUs a
/// thread that is always runnable starves the guests' cgroups (seen for seconds at a time on a
/// 2-CPU machine), and the guests are what the HCA serves.
const SHORT_REST: Duration = Duration::from_micros(2);

/// The longest wait while every guest rings its doorbell: the thread then looks at its stop
/// flag and its stall clock, and nothing else (100 wake-ups a second: nothing, idle).
pub const DOORBELL_WAIT: Duration = Duration::from_millis(10);

/// How long the thread rests after a poll.
#[derive(Debug, Default)]
struct Rest {
    /// Polls in a row that found nothing in flight (timer polling stays responsive for a while
    /// after work).
    idle: u32,
}

impl Rest {
    /// The rest after a poll that found work in flight (`busy`), whose next completion is due
    /// in `due_in` ns (when known), when `ringing` (every guest rings its doorbell) or not.
    fn next(
        &mut self,
        busy: bool,
        due_in: Option<u64>,
        ringing: bool,
        idle_sleep: Duration,
    ) -> Duration {
        let longest = if ringing { DOORBELL_WAIT } else { idle_sleep };
        if busy {
            self.idle = 0;
            return match due_in {
                // Wake a little early: a wake-up is late by a few microseconds.
                Some(ns) => Duration::from_nanos(ns.saturating_sub(3_000))
                    .clamp(SHORT_REST, longest.max(SHORT_REST)),
                // Work that waits for the guest (room in its CQ): look again soon.
                None => idle_sleep.max(SHORT_REST),
            };
        }
        if ringing {
            return DOORBELL_WAIT;
        }
        self.idle = self.idle.saturating_add(1);
        if self.idle < 2000 {
            SHORT_REST
        } else {
            idle_sleep
        }
    }
}

/// Watches the polling thread's own progress: a long wait for the HCA's lock, a long poll, or a
/// long gap between polls (the thread was not scheduled) stalls every guest's I/O at once; each
/// second is counted, and logged (at most once a second) when asked.
#[derive(Debug)]
struct StallLog {
    last_end: Instant,
    /// The rest asked for after the last poll.
    rest: Duration,
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
            rest: Duration::ZERO,
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

    /// Notes one poll: it began at `start` (after a rest of at most `rested`), had the lock
    /// at `locked` and ended at `end`. A rest ended by a doorbell is shorter than asked; only
    /// time past the rest asked for counts as a hold-up.
    fn note(&mut self, start: Instant, locked: Instant, end: Instant) {
        let gap = start.saturating_duration_since(self.last_end + self.rest);
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
    /// is dropped, waiting on the guests' doorbells ([`PollOptions::default`]); a guest without
    /// one is polled every `idle_sleep` at most.
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
        let shared = Arc::new(Shared::default());
        let priority = Arc::new(OnceLock::new());
        let hca = self.clone();
        if opts.doorbells {
            hca.lock().waits = true;
        }
        let (sh, pr) = (shared.clone(), priority.clone());
        let handle = std::thread::Builder::new()
            .name("softhca".into())
            .spawn(move || {
                sh.tid.store(resex_rt::thread_id(), Ordering::Release);
                // Rests below are microseconds while pacing: ask for them to be kept that short.
                resex_rt::set_timer_slack(1_000);
                if let Some(nice) = opts.nice {
                    let _ = pr.set(raise_priority(None, nice));
                }
                hca.run(&*clock, &opts, &sh);
                let mut st = hca.lock();
                st.waits = false;
                st.new_bells.clear();
                st.guests.values_mut().for_each(|g| g.rings = false);
            })
            .expect("spawning the softhca thread");
        HcaThread {
            shared,
            handle: Some(handle),
            priority,
        }
    }

    /// The thread's loop: poll, then wait for a doorbell or the next completion due.
    fn run(&self, clock: &dyn Clock, opts: &PollOptions, sh: &Shared) {
        let mut rest = Rest::default();
        let mut bells = Doorbells::default();
        let mut stalls = StallLog::new(opts.log_stalls, sh.counters.clone());
        while !sh.stop.load(Ordering::Acquire) {
            let t0 = Instant::now();
            let mut st = self.lock();
            let t1 = Instant::now();
            let now = clock.now_ns();
            bells.adopt(st.new_bells.drain(..));
            st.poll(now);
            let busy = st.busy;
            let due_in = if busy { st.next_due_ns() } else { None }.map(|d| d.saturating_sub(now));
            let ringing = opts.doorbells && st.all_ring();
            if stalls.due(t0) && opts.log_stalls {
                log_oldest(&st, now);
            }
            drop(st);
            sh.polls.fetch_add(1, Ordering::Relaxed);
            stalls.note(t0, t1, Instant::now());
            stalls.rest = rest.next(busy, due_in, ringing, opts.idle_sleep);
            let silent = bells.wait(stalls.rest);
            if !silent.is_empty() {
                let mut st = self.lock();
                for g in silent {
                    // Unless it has asked for another doorbell since, poll it again.
                    if !st.new_bells.iter().any(|(n, _)| *n == g) {
                        if let Some(guest) = st.guests.get_mut(&g) {
                            guest.rings = false;
                        }
                    }
                }
            }
        }
    }
}

/// Logs the oldest outstanding work request when it has waited 100 ms or more.
fn log_oldest(st: &crate::hca::HcaState, now: u64) {
    if let Some((qpn, waited, what)) = st.oldest_work(now) {
        if waited >= 100_000_000 {
            tracing::warn!(
                "softhca: QP {qpn:#x} has waited {} ms: {what}",
                waited / 1_000_000
            );
        }
    }
}

/// What the thread and its handle share.
#[derive(Debug, Default)]
struct Shared {
    stop: AtomicBool,
    counters: Arc<StallCounters>,
    /// The thread's kernel id (0 until it has started).
    tid: AtomicI32,
    /// Polls so far (each one wake-up).
    polls: AtomicU64,
}

/// The HCA's polling thread; stops and joins when dropped.
#[derive(Debug)]
pub struct HcaThread {
    shared: Arc<Shared>,
    handle: Option<JoinHandle<()>>,
    priority: Arc<OnceLock<Priority>>,
}

impl HcaThread {
    /// The thread's stalls so far.
    pub fn stalls(&self) -> StallSummary {
        let c = &self.shared.counters;
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

    /// The CPU time the thread has used so far, ns (`None`: not started yet, or `/proc` has
    /// no answer). What a NIC would cost is about nothing: this is the software HCA's price.
    pub fn cpu_ns(&self) -> Option<u64> {
        match self.shared.tid.load(Ordering::Acquire) {
            0 => None,
            tid => resex_rt::thread_cpu_ns(tid),
        }
    }

    /// The thread's kernel id, once it has started (waits for it at most `within`).
    pub fn tid(&self, within: Duration) -> Option<i32> {
        let deadline = Instant::now() + within;
        loop {
            match self.shared.tid.load(Ordering::Acquire) {
                0 if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(1)),
                0 => return None,
                tid => return Some(tid),
            }
        }
    }

    /// Polls so far (one per wake-up).
    pub fn polls(&self) -> u64 {
        self.shared.polls.load(Ordering::Relaxed)
    }

    /// The thread's CPU time and polls now (see [`PortSample::since`]).
    pub fn sample(&self) -> PortSample {
        PortSample {
            at: Instant::now(),
            cpu_ns: self.cpu_ns(),
            polls: self.polls(),
        }
    }
}

/// The port thread's counters at one moment.
#[derive(Debug, Clone, Copy)]
pub struct PortSample {
    at: Instant,
    cpu_ns: Option<u64>,
    polls: u64,
}

/// What the port thread cost over a stretch of wall time.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PortCost {
    /// Wall time, s.
    pub wall_s: f64,
    /// CPU time the thread used, s (`None`: `/proc` had no answer).
    pub cpu_s: Option<f64>,
    /// Polls (wake-ups).
    pub polls: u64,
}

impl PortSample {
    /// Counters taken now from elsewhere (a test, a thread read through `/proc`).
    pub fn new(cpu_ns: Option<u64>, polls: u64) -> Self {
        Self {
            at: Instant::now(),
            cpu_ns,
            polls,
        }
    }

    /// The cost between `earlier` and this sample.
    pub fn since(&self, earlier: &PortSample) -> PortCost {
        let wall_s = self.at.saturating_duration_since(earlier.at).as_secs_f64();
        let cpu_s = match (self.cpu_ns, earlier.cpu_ns) {
            (Some(b), Some(a)) => Some(b.saturating_sub(a) as f64 / 1e9),
            _ => None,
        };
        PortCost {
            wall_s,
            cpu_s,
            polls: self.polls.saturating_sub(earlier.polls),
        }
    }
}

impl PortCost {
    /// CPU seconds per wall second (1.0: a whole CPU).
    pub fn cpu_share(&self) -> Option<f64> {
        self.cpu_s
            .filter(|_| self.wall_s > 0.0)
            .map(|c| c / self.wall_s)
    }

    /// Wake-ups per wall second.
    pub fn polls_per_s(&self) -> f64 {
        if self.wall_s > 0.0 {
            self.polls as f64 / self.wall_s
        } else {
            0.0
        }
    }
}

impl Drop for HcaThread {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
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
    fn only_time_past_the_rest_asked_for_is_a_hold_up() {
        let c = Arc::new(StallCounters::default());
        let mut log = StallLog::new(false, c.clone());
        let t = log.since;
        // A 10 ms wait that ran its course, then one that was 30 ms late.
        log.rest = DOORBELL_WAIT;
        let at = t + Duration::from_millis(10);
        log.note(at, at, at + Duration::from_micros(5));
        let at = at + Duration::from_millis(40);
        log.note(at, at, at + Duration::from_micros(5));
        // A long rest asked for: its end closes the second.
        log.rest = Duration::from_secs(1);
        let end = t + Duration::from_millis(1001);
        log.note(end, end, end);
        assert_eq!(c.stalled.load(Ordering::Relaxed), 1);
        let longest = c.longest_us.load(Ordering::Relaxed);
        assert!((29_000..31_000).contains(&longest), "{longest}");
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

    #[test]
    fn the_rest_follows_the_doorbells_and_the_next_completion() {
        let idle = Duration::from_micros(20);
        let mut r = Rest::default();
        // Every guest rings: idle waits the longest, a pacing port until the completion is due.
        assert_eq!(r.next(false, None, true, idle), DOORBELL_WAIT);
        assert_eq!(
            r.next(true, Some(2_000_000), true, idle),
            Duration::from_micros(1997)
        );
        assert_eq!(r.next(true, Some(60_000_000), true, idle), DOORBELL_WAIT);
        assert_eq!(r.next(true, Some(1_000), true, idle), SHORT_REST);
        assert_eq!(r.next(true, None, true, idle), idle);
        // A guest without a doorbell: never longer than its poll interval, short after work.
        assert_eq!(r.next(true, Some(2_000_000), false, idle), idle);
        assert_eq!(r.next(false, None, false, idle), SHORT_REST);
        for _ in 0..2000 {
            r.next(false, None, false, idle);
        }
        assert_eq!(r.next(false, None, false, idle), idle);
    }

    #[test]
    fn a_guest_whose_doorbell_closes_is_polled_again() {
        use crate::{GuestId, LinkConfig, MonotonicClock, PortId};
        use resex_guestmem::VecMemory;
        let hca = SoftHca::new(LinkConfig::resex_testbed(), 2);
        let port = hca.add_guest(Arc::new(VecMemory::new(1 << 20)), PortId(0));
        let rings = |g: GuestId| hca.lock().guests.get(&g).is_some_and(|x| x.rings);
        let (mine, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        // No thread yet: nothing waits on doorbells, so none is handed out.
        assert!(port.attach_doorbell(theirs.try_clone().unwrap()).is_err());
        let t = hca.spawn(
            Arc::new(MonotonicClock::new()) as Arc<dyn Clock>,
            Duration::from_micros(20),
        );
        port.attach_doorbell(theirs).unwrap();
        assert!(rings(port.guest()));
        drop(mine);
        let deadline = Instant::now() + Duration::from_secs(10);
        while rings(port.guest()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(
            !rings(port.guest()),
            "the closed doorbell's guest still counted as ringing"
        );
        drop(t);
        assert!(!hca.lock().waits, "a stopped thread waits on nothing");
    }
}
