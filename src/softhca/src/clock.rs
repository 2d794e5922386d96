//! Time for the HCA and its link model: the real monotonic clock, or virtual time (the lab).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// A source of nanoseconds since some fixed origin. Never goes backwards.
pub trait Clock: Send + Sync {
    /// Nanoseconds now.
    fn now_ns(&self) -> u64;
}

/// The real monotonic clock (origin: creation).
#[derive(Debug, Clone, Copy)]
pub struct MonotonicClock {
    origin: Instant,
}

impl MonotonicClock {
    /// A clock whose zero is now.
    pub fn new() -> Self {
        Self {
            origin: Instant::now(),
        }
    }

    /// When its zero was.
    pub fn origin(&self) -> Instant {
        self.origin
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    fn now_ns(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

/// Virtual time: moves only when told to.
#[derive(Debug, Default)]
pub struct VirtualClock {
    ns: AtomicU64,
}

impl VirtualClock {
    /// A virtual clock at 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// Moves time forward by `ns`.
    pub fn advance(&self, ns: u64) {
        self.ns.fetch_add(ns, Ordering::AcqRel);
    }

    /// Sets the time (ignored if it would go backwards).
    pub fn set(&self, ns: u64) {
        self.ns.fetch_max(ns, Ordering::AcqRel);
    }
}

impl Clock for VirtualClock {
    fn now_ns(&self) -> u64 {
        self.ns.load(Ordering::Acquire)
    }
}

impl<T: Clock + ?Sized> Clock for std::sync::Arc<T> {
    fn now_ns(&self) -> u64 {
        (**self).now_ns()
    }
}
