//! softhca: a software HCA. Guests post real mlx5 work requests into rings in their memory and
//! ring the doorbell record; softhca fetches them, times their packets on a link model, moves
//! the bytes between the guests' registered memory regions, and writes real mlx5 CQEs back, so
//! that the monitor that reads a ConnectX guest reads these guests the same way.
//!
//! - [`clock`]: the real monotonic clock or virtual time.
//! - [`link`]: the link model (bandwidth per port and direction, MTU packets, round robin).
//! - [`mr`]: memory regions (keys, page lists, rights, bounds).
//! - [`nic`]: the NIC's own latencies (doorbell, DMA reads and writes, CQE writes).
//! - [`objects`]: guests, CQs, QPs and work requests in flight.
//! - [`hca`]: the HCA's state and one poll: fetch, transmit, execute, complete (a file each);
//!   errors as error CQEs with flushes.
//! - [`control`]: [`GuestPort`], one guest's control path (`HcaControl`).

#![cfg_attr(test, allow(clippy::cast_possible_truncation))]

pub mod clock;
pub mod control;
pub mod hca;
pub mod link;
pub mod mr;
pub mod nic;
pub mod objects;
mod sched;

pub use clock::{Clock, MonotonicClock, VirtualClock};
pub use control::GuestPort;
pub use link::{LinkConfig, PortId};
pub use mr::GuestId;
pub use nic::NicModel;
pub use objects::QpStats;

use hca::HcaState;
use objects::Guest;
use resex_common::TxLimit;
use resex_guestmem::GuestMemory;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

/// A software HCA with `ports` link ports.
#[derive(Debug, Clone)]
pub struct SoftHca {
    state: Arc<Mutex<HcaState>>,
}

impl SoftHca {
    /// An HCA whose link has `ports` ports.
    pub fn new(link: LinkConfig, ports: u16) -> Self {
        Self {
            state: Arc::new(Mutex::new(HcaState::new(link, ports))),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HcaState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Attaches a guest whose memory is `mem`, sending through `port`.
    pub fn add_guest(&self, mem: Arc<dyn GuestMemory>, port: PortId) -> GuestPort {
        let mut st = self.lock();
        st.next_guest += 1;
        let guest = GuestId(st.next_guest);
        st.guests.insert(guest, Guest { mem, port });
        GuestPort {
            hca: self.state.clone(),
            guest,
        }
    }

    /// Detaches a guest: its QPs, CQs and regions are destroyed; peers' requests to it fail.
    pub fn remove_guest(&self, guest: GuestId) {
        let mut st = self.lock();
        st.guests.remove(&guest);
        let gone: Vec<u32> = st
            .qps
            .iter()
            .filter(|(_, q)| q.guest == guest)
            .map(|(n, _)| *n)
            .collect();
        for qpn in gone {
            st.qps.remove(&qpn);
            st.link.forget(qpn);
        }
        st.cqs.retain(|_, c| c.guest != guest);
        st.mrs.remove_guest(guest);
    }

    /// Runs the HCA up to `now_ns`: fetch posted work, move packets, write completions.
    /// Returns true while work is in flight.
    pub fn poll(&self, now_ns: u64) -> bool {
        let mut st = self.lock();
        st.poll(now_ns);
        st.busy
    }

    /// A lower bound on when the work in flight next needs a poll (ns); `None`: none in flight.
    /// New doorbells are not included. For a caller that skips idle time (the lab).
    pub fn next_due_ns(&self) -> Option<u64> {
        self.lock().next_due_ns()
    }

    /// Turns doorbell hints on (for a caller that owns every guest's posting: the lab). The
    /// HCA then fetches only from QPs reported by [`Self::doorbell`] and tracks which QPs
    /// retired work ([`Self::take_retired`]); results are the same as polling every doorbell
    /// record as long as every doorbell is reported.
    pub fn set_doorbell_hints(&self, on: bool) {
        self.lock().hints = on;
    }

    /// Reports that `qpn`'s send doorbell was rung (hint mode).
    pub fn doorbell(&self, qpn: u32) {
        let mut st = self.lock();
        if st.hints {
            st.dirty.insert(qpn);
        }
    }

    /// Appends the QPs that retired work requests (completions written or WRs dropped) since
    /// the last call (hint mode), and forgets them.
    pub fn take_retired(&self, out: &mut Vec<u32>) {
        out.append(&mut self.lock().retired);
    }

    /// Sets (or with [`TxLimit::NONE`] lifts) a guest's transmit limit in its port's
    /// scheduler (its vport's share and ceiling), from `now_ns` on. False when the guest is
    /// unknown.
    pub fn set_tx_limit(&self, guest: GuestId, limit: TxLimit, now_ns: u64) -> bool {
        let mut st = self.lock();
        let Some(port) = st.guests.get(&guest).map(|g| g.port) else {
            return false;
        };
        st.link
            .set_limit(port, guest.0, limit, now_ns.saturating_mul(1000));
        true
    }

    /// A guest's transmit limit (`None`: no such guest).
    pub fn tx_limit(&self, guest: GuestId) -> Option<TxLimit> {
        let st = self.lock();
        st.guests
            .get(&guest)
            .map(|g| st.link.limit(g.port, guest.0))
    }

    /// What the HCA executed on a QP.
    pub fn stats(&self, qpn: u32) -> Option<QpStats> {
        self.lock().stats(qpn)
    }

    /// Polls on a thread of its own against `clock` (the real clock) until the returned handle
    /// is dropped. While work is in flight it sleeps until the next completion is due, from
    /// 2 us up to `idle_sleep` (new doorbells are noticed within that), so a busy link does not
    /// cost a whole CPU; when idle it rests 2 us between polls for a while, then `idle_sleep`.
    pub fn spawn(&self, clock: Arc<dyn Clock>, idle_sleep: Duration) -> HcaThread {
        let busy_poll = idle_sleep;
        let stop = Arc::new(AtomicBool::new(false));
        let hca = self.clone();
        let flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name("softhca".into())
            .spawn(move || {
                // Sleeps below are tens of microseconds: ask for them to be kept that short.
                // SAFETY: prctl(PR_SET_TIMERSLACK) takes an integer and affects this thread only.
                unsafe {
                    libc::prctl(libc::PR_SET_TIMERSLACK, 1_000 as libc::c_ulong);
                }
                let mut idle = 0u32;
                let mut stalls = StallLog::default();
                while !flag.load(Ordering::Acquire) {
                    let t0 = std::time::Instant::now();
                    let mut st = hca.lock();
                    let t1 = std::time::Instant::now();
                    let now = clock.now_ns();
                    st.poll(now);
                    let busy = st.busy;
                    let due = if busy { st.next_due_ns() } else { None };
                    if stalls.due(t0) {
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
                    stalls.note(t0, t1, std::time::Instant::now());
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
        }
    }
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
/// long gap between polls (the thread was not scheduled) stalls every guest's I/O at once, so
/// each is logged, at most once a second, with how long it lasted.
#[derive(Debug)]
struct StallLog {
    last_end: std::time::Instant,
    worst: [std::time::Duration; 3],
    since: std::time::Instant,
}

impl Default for StallLog {
    fn default() -> Self {
        let now = std::time::Instant::now();
        Self {
            last_end: now,
            worst: [Duration::ZERO; 3],
            since: now,
        }
    }
}

const STALL: Duration = Duration::from_millis(20);

impl StallLog {
    /// Whether a second has passed since the last report (the caller may add its own).
    fn due(&self, now: std::time::Instant) -> bool {
        now.saturating_duration_since(self.since) >= Duration::from_secs(1)
    }

    fn note(
        &mut self,
        start: std::time::Instant,
        locked: std::time::Instant,
        end: std::time::Instant,
    ) {
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
            if gap.max(lock).max(poll) >= STALL {
                tracing::warn!(
                    "softhca stalled in the last second: longest unscheduled gap {gap:?}, \
                     wait for the lock {lock:?}, one poll {poll:?}"
                );
            }
            self.worst = [Duration::ZERO; 3];
            self.since = end;
        }
    }
}

/// The HCA's polling thread; stops and joins when dropped.
#[derive(Debug)]
pub struct HcaThread {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Drop for HcaThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}
