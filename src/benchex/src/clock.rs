//! Time and waiting: a process-wide monotonic nanosecond clock, and a poller that spins, then
//! yields, then sleeps, so idle guests do not eat a shared host's CPUs.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

fn epoch() -> Instant {
    static E: OnceLock<Instant> = OnceLock::new();
    *E.get_or_init(Instant::now)
}

/// Nanoseconds since this process first asked.
pub fn now_ns() -> u64 {
    u64::try_from(epoch().elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Backoff for polling loops.
#[derive(Debug, Default)]
pub struct Idle {
    n: u32,
}

impl Idle {
    /// Work was found: poll hot again.
    pub fn busy(&mut self) {
        self.n = 0;
    }

    /// Nothing found: spin a little, then yield, then sleep 50 us per poll, and after about
    /// 100 ms of nothing, 1 ms per poll (dozens of idle guests share a host's few CPUs).
    pub fn idle(&mut self) {
        self.n = self.n.saturating_add(1);
        if self.n < 64 {
            std::hint::spin_loop();
        } else if self.n < 256 {
            std::thread::yield_now();
        } else if self.n < 2000 {
            std::thread::sleep(Duration::from_micros(50));
        } else {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Sleeps until `deadline_ns` on [`now_ns`]'s clock (sleeping coarse, then yielding).
pub fn wait_until(deadline_ns: u64) {
    loop {
        let now = now_ns();
        if now >= deadline_ns {
            return;
        }
        let left = deadline_ns - now;
        if left > 200_000 {
            std::thread::sleep(Duration::from_nanos(left - 100_000));
        } else {
            std::thread::yield_now();
        }
    }
}
