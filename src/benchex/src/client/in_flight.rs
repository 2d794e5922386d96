//! Waiting for the replies still in flight once the last order went out: for as long as they
//! keep arriving, within a bound. A server that fell behind (a slow host, a nested hypervisor
//! under emulation: seconds of queue) still answers every order; a client that left after a
//! fixed wait took its queue pairs down under the server's last replies, whose work requests
//! then failed (transport retries exceeded) and whose bytes the run's counts never saw.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// How long the client waits for the replies in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InFlightWait {
    /// Gives up once no reply arrived for this long, ns.
    pub quiet_ns: u64,
    /// Gives up after this long in all, whatever still arrives, ns.
    pub most_ns: u64,
}

impl Default for InFlightWait {
    /// Two quiet seconds (the fixed wait this replaced), two minutes at most.
    fn default() -> Self {
        Self {
            quiet_ns: 2_000_000_000,
            most_ns: 120_000_000_000,
        }
    }
}

impl InFlightWait {
    /// Waits until `received` reaches `sent`, `stop` is set, no reply arrived for
    /// [`Self::quiet_ns`], or [`Self::most_ns`] passed (on `now`, ns). Returns whether every
    /// reply came.
    pub fn wait(
        &self,
        sent: u64,
        received: &AtomicU64,
        stop: &AtomicBool,
        now: impl Fn() -> u64,
    ) -> bool {
        let start = now();
        let give_up = start.saturating_add(self.most_ns);
        let mut seen = received.load(Ordering::Acquire);
        let mut quiet_until = start.saturating_add(self.quiet_ns);
        while seen < sent && !stop.load(Ordering::Acquire) {
            let t = now();
            if t >= quiet_until || t >= give_up {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
            let got = received.load(Ordering::Acquire);
            if got != seen {
                seen = got;
                quiet_until = now().saturating_add(self.quiet_ns);
            }
        }
        seen >= sent
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    /// A reply every `every` until `n` arrived or `halt` is set.
    fn replies(
        received: &Arc<AtomicU64>,
        halt: &Arc<AtomicBool>,
        n: u64,
        every: Duration,
    ) -> std::thread::JoinHandle<()> {
        let (r, h) = (received.clone(), halt.clone());
        std::thread::spawn(move || {
            for _ in 0..n {
                if h.load(Ordering::Acquire) {
                    return;
                }
                std::thread::sleep(every);
                r.fetch_add(1, Ordering::AcqRel);
            }
        })
    }

    /// No reply yet, not halted.
    fn fresh() -> (Arc<AtomicU64>, Arc<AtomicBool>) {
        (
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicBool::new(false)),
        )
    }

    fn clock() -> impl Fn() -> u64 {
        let t0 = Instant::now();
        move || u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    #[test]
    fn replies_that_keep_coming_are_all_awaited_past_one_quiet_window() {
        let (received, halt) = fresh();
        // 40 replies 10 ms apart: 400 ms in all, twice the quiet window.
        let t = replies(&received, &halt, 40, Duration::from_millis(10));
        let w = InFlightWait {
            quiet_ns: 200_000_000,
            most_ns: 60_000_000_000,
        };
        assert!(w.wait(40, &received, &AtomicBool::new(false), clock()));
        assert_eq!(received.load(Ordering::Acquire), 40);
        t.join().unwrap();
    }

    #[test]
    fn replies_that_stop_coming_are_given_up_after_the_quiet_window() {
        let (received, halt) = fresh();
        let t = replies(&received, &halt, 5, Duration::from_millis(5));
        let w = InFlightWait {
            quiet_ns: 100_000_000,
            most_ns: 60_000_000_000,
        };
        assert!(!w.wait(10, &received, &AtomicBool::new(false), clock()));
        t.join().unwrap();
        assert_eq!(received.load(Ordering::Acquire), 5);
    }

    #[test]
    fn a_trickle_is_given_up_at_the_bound_and_a_stop_at_once() {
        let (received, halt) = fresh();
        let t = replies(&received, &halt, u64::MAX, Duration::from_millis(5));
        let w = InFlightWait {
            quiet_ns: 1_000_000_000,
            most_ns: 100_000_000,
        };
        assert!(!w.wait(u64::MAX, &received, &AtomicBool::new(false), clock()));
        // Stopped: no wait at all (else this test would take ten minutes).
        let long = InFlightWait {
            quiet_ns: 600_000_000_000,
            most_ns: 600_000_000_000,
        };
        assert!(!long.wait(u64::MAX, &received, &AtomicBool::new(true), clock()));
        halt.store(true, Ordering::Release);
        t.join().unwrap();
        // Nothing in flight: nothing to wait for.
        assert!(w.wait(0, &AtomicU64::new(0), &AtomicBool::new(false), clock()));
    }
}
