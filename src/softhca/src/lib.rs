//! softhca: a software HCA. Guests post real mlx5 work requests into rings in their memory and
//! ring the doorbell record; softhca fetches them, times their packets on a link model, moves
//! the bytes between the guests' registered memory regions, and writes real mlx5 CQEs back, so
//! that the monitor that reads a ConnectX guest reads these guests the same way.
//!
//! - [`clock`]: the real monotonic clock or virtual time.
//! - [`link`]: the link model (bandwidth per port and direction, MTU packets, round robin).
//! - [`mr`]: memory regions (keys, page lists, rights, bounds).
//! - [`objects`]: guests, CQs, QPs and work requests in flight.
//! - [`hca`]: fetch, transmit, execute, complete; errors as error CQEs with flushes.
//! - [`control`]: [`GuestPort`], one guest's control path (`HcaControl`).

#![cfg_attr(test, allow(clippy::cast_possible_truncation))]

pub mod clock;
pub mod control;
pub mod hca;
pub mod link;
pub mod mr;
pub mod objects;

pub use clock::{Clock, MonotonicClock, VirtualClock};
pub use control::GuestPort;
pub use link::{LinkConfig, PortId};
pub use mr::GuestId;
pub use objects::QpStats;

use hca::HcaState;
use objects::Guest;
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

    /// What the HCA executed on a QP.
    pub fn stats(&self, qpn: u32) -> Option<QpStats> {
        self.lock().stats(qpn)
    }

    /// Polls on a thread of its own against `clock` until the returned handle is dropped. While
    /// work is in flight it spins (yielding); when idle it sleeps `idle_sleep` between polls.
    pub fn spawn(&self, clock: Arc<dyn Clock>, idle_sleep: Duration) -> HcaThread {
        let stop = Arc::new(AtomicBool::new(false));
        let hca = self.clone();
        let flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name("softhca".into())
            .spawn(move || {
                let mut idle = 0u32;
                while !flag.load(Ordering::Acquire) {
                    if hca.poll(clock.now_ns()) {
                        idle = 0;
                        std::thread::yield_now();
                    } else {
                        idle = idle.saturating_add(1);
                        // Stay responsive for a while after work, then rest.
                        if idle < 2000 {
                            std::thread::yield_now();
                        } else {
                            std::thread::sleep(idle_sleep);
                        }
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
