//! The real-time driver: runs the transports' state machines on the monotonic clock, waiting by
//! polling (spinning, yielding, and with [`Polling::Adaptive`] or [`Polling::Batch`] sleeping)
//! until they can go on.
//! The only place in the transports that reads a clock or waits.

use super::{BlockReceiver, BlockSender, Message};
use crate::ShimError;
use std::time::{Duration, Instant};

pub use resex_common::Polling;

/// How long [`spin`] polls hot (spinning, then yielding) with [`Polling::Adaptive`] before it
/// starts to sleep between polls: longer than a small message's round trip, so latency-critical waits never sleep,
/// while a wait for a large transfer does not burn a CPU that other guests need.
pub const HOT_POLL: Duration = Duration::from_micros(200);

/// [`HOT_POLL`] for [`Polling::Batch`]: a bulk job's waits are for transfers of milliseconds.
pub const BATCH_HOT_POLL: Duration = Duration::from_micros(20);

/// How long a wait of `waited` so far sleeps before its next poll (`None`: it yields). With
/// [`Polling::Adaptive`], after [`HOT_POLL`], an eighth of the time waited, 10 to 100 us; with
/// [`Polling::Batch`], after [`BATCH_HOT_POLL`], a quarter of it, 50 us to 1 ms.
#[must_use]
pub fn nap(polling: Polling, waited: Duration) -> Option<Duration> {
    let us = Duration::from_micros;
    match polling {
        Polling::Spin => None,
        Polling::Adaptive if waited < HOT_POLL => None,
        Polling::Adaptive => Some((waited / 8).clamp(us(10), us(100))),
        Polling::Batch if waited < BATCH_HOT_POLL => None,
        Polling::Batch => Some((waited / 4).clamp(us(50), us(1000))),
    }
}

/// Polls until `f` returns `Some`, or `timeout` passes: spins briefly, then yields, then with
/// [`Polling::Adaptive`] or [`Polling::Batch`] sleeps between polls ([`nap`]).
pub fn spin<T>(
    timeout: Duration,
    polling: Polling,
    what: &str,
    mut f: impl FnMut() -> Result<Option<T>, ShimError>,
) -> Result<T, ShimError> {
    let start = Instant::now();
    let mut spins = 0u32;
    loop {
        if let Some(v) = f()? {
            return Ok(v);
        }
        spins = spins.saturating_add(1);
        if spins < 64 {
            std::hint::spin_loop();
            continue;
        }
        let waited = start.elapsed();
        if waited > timeout {
            return Err(ShimError::Timeout(format!("{what} after {timeout:?}")));
        }
        match nap(polling, waited) {
            Some(nap) => std::thread::sleep(nap),
            None => std::thread::yield_now(),
        }
    }
}

/// The monotonic clock the state machines are given, in ns since the driver's origin.
#[derive(Debug, Clone, Copy)]
pub struct RealClock(Instant);

impl RealClock {
    /// A clock whose zero is now.
    pub fn new() -> Self {
        Self(Instant::now())
    }

    /// ns since the origin.
    pub fn now_ns(&self) -> u64 {
        u64::try_from(self.0.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

impl Default for RealClock {
    fn default() -> Self {
        Self::new()
    }
}

/// Waits (polling) until `tx` takes `data`; returns its packet number.
pub fn send(
    tx: &mut dyn BlockSender,
    clock: &RealClock,
    dev: u8,
    data: &[u8],
    timeout: Duration,
    polling: Polling,
) -> Result<u16, ShimError> {
    spin(timeout, polling, "waiting for a free block", || {
        tx.try_send(clock.now_ns(), dev, data)
    })
}

/// Waits (polling) for the next message of `rx`.
pub fn recv(
    rx: &mut dyn BlockReceiver,
    clock: &RealClock,
    timeout: Duration,
    polling: Polling,
) -> Result<Message, ShimError> {
    spin(timeout, polling, "waiting for a block", || {
        rx.try_recv(clock.now_ns())
    })
}

/// Polls `tx` until `left(tx)` is 0.
fn drain(
    tx: &mut dyn BlockSender,
    clock: &RealClock,
    timeout: Duration,
    polling: Polling,
    what: &str,
    left: fn(&dyn BlockSender) -> u64,
) -> Result<(), ShimError> {
    spin(timeout, polling, what, || {
        tx.poll(clock.now_ns())?;
        Ok((left(&*tx) == 0).then_some(()))
    })
}

/// Waits (polling) until every block `tx` sent is known reusable.
pub fn flush(
    tx: &mut dyn BlockSender,
    clock: &RealClock,
    timeout: Duration,
    polling: Polling,
) -> Result<(), ShimError> {
    let what = "waiting for the last confirmations";
    drain(tx, clock, timeout, polling, what, |t| t.in_flight())
}

/// Waits (polling) until every WRITE `tx` posted has completed locally
/// ([`BlockSender::unfinished`]): a reply is on the wire; HiPower's responder can see it.
pub fn complete(
    tx: &mut dyn BlockSender,
    clock: &RealClock,
    timeout: Duration,
    polling: Polling,
) -> Result<(), ShimError> {
    let what = "waiting for the WRITEs to complete";
    drain(tx, clock, timeout, polling, what, |t| t.unfinished())
}

/// Like [`send`] for a sender shared with a [`Poller`]: the lock is taken per attempt.
pub fn send_shared<S: BlockSender + ?Sized>(
    tx: &std::sync::Mutex<Box<S>>,
    clock: &RealClock,
    dev: u8,
    data: &[u8],
    timeout: Duration,
    polling: Polling,
) -> Result<u16, ShimError> {
    spin(timeout, polling, "waiting for a free block", || {
        let mut g = tx.lock().unwrap_or_else(|p| p.into_inner());
        g.try_send(clock.now_ns(), dev, data)
    })
}

/// Like [`flush`] for a sender shared with a [`Poller`].
pub fn flush_shared<S: BlockSender + ?Sized>(
    tx: &std::sync::Mutex<Box<S>>,
    clock: &RealClock,
    timeout: Duration,
    polling: Polling,
) -> Result<(), ShimError> {
    spin(
        timeout,
        polling,
        "waiting for the last confirmations",
        || {
            let mut g = tx.lock().unwrap_or_else(|p| p.into_inner());
            g.poll(clock.now_ns())?;
            Ok((g.in_flight() == 0).then_some(()))
        },
    )
}

/// A thread that calls a sender's [`BlockSender::poll`] until dropped: the sliding window's
/// ACK thread on the real clock. It yields between polls (a dedicated polling thread, as the
/// paper's); an error ends it and is returned by [`Poller::stop`].
pub struct Poller {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    handle: Option<std::thread::JoinHandle<Result<(), ShimError>>>,
}

impl std::fmt::Debug for Poller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Poller")
    }
}

/// Starts a [`Poller`] on `tx`.
pub fn spawn_poller<S: BlockSender + ?Sized + 'static>(
    tx: std::sync::Arc<std::sync::Mutex<Box<S>>>,
    clock: RealClock,
) -> Result<Poller, ShimError> {
    use std::sync::atomic::{AtomicBool, Ordering};
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let handle = std::thread::Builder::new()
        .name("ack-poller".into())
        .spawn(move || {
            while !flag.load(Ordering::Acquire) {
                tx.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .poll(clock.now_ns())?;
                std::thread::yield_now();
            }
            Ok(())
        })
        .map_err(|e| ShimError::Unavailable(format!("spawning the ACK thread: {e}")))?;
    Ok(Poller {
        stop,
        handle: Some(handle),
    })
}

impl Poller {
    /// Stops the thread and returns how it ended.
    pub fn stop(mut self) -> Result<(), ShimError> {
        self.halt()
    }

    fn halt(&mut self) -> Result<(), ShimError> {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
        match self.handle.take().map(|h| h.join()) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(ShimError::Panicked { thread: "ACK" }),
            None => Ok(()),
        }
    }
}

impl Drop for Poller {
    fn drop(&mut self) {
        let _ = self.halt();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_polling_naps_as_documented() {
        let us = Duration::from_micros;
        assert_eq!(nap(Polling::Spin, Duration::from_secs(1)), None);
        assert_eq!(nap(Polling::Adaptive, us(150)), None);
        assert_eq!(nap(Polling::Adaptive, us(400)), Some(us(50)));
        assert_eq!(nap(Polling::Adaptive, us(5000)), Some(us(100)));
        assert_eq!(nap(Polling::Batch, us(10)), None);
        assert_eq!(nap(Polling::Batch, us(30)), Some(us(50)));
        assert_eq!(nap(Polling::Batch, us(2000)), Some(us(500)));
        assert_eq!(nap(Polling::Batch, us(9000)), Some(us(1000)));
    }
}
