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
//! - [`uplink`]: a link several HCAs share (a rack's uplink), on their own clocks.
//! - [`thread`]: the polling thread on the real clock (priority, stall counting), which waits
//!   on the guests' doorbells (`doorbell`) and on the next completion due.

#![cfg_attr(test, allow(clippy::cast_possible_truncation))]

pub mod clock;
pub mod control;
mod doorbell;
mod flow;
pub mod hca;
pub mod link;
pub mod mr;
pub mod nic;
pub mod objects;
mod sched;
pub mod thread;
pub mod uplink;

pub use clock::{Clock, MonotonicClock, VirtualClock};
pub use control::GuestPort;
pub use link::{LinkConfig, PortId};
pub use mr::GuestId;
pub use nic::NicModel;
pub use objects::QpStats;
pub use thread::{
    describe_polling, HcaThread, PollOptions, PortCost, PortSample, Priority, StallSummary,
};
pub use uplink::{Uplink, UplinkCount, UplinkTap};

use hca::HcaState;
use objects::Guest;
use resex_common::TxLimit;
use resex_guestmem::GuestMemory;
use std::sync::{Arc, Mutex, MutexGuard};

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
        st.guests.insert(
            guest,
            Guest {
                mem,
                port,
                rings: false,
                retired: QpStats::default(),
                retired_qps: 0,
            },
        );
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
        st.new_bells.retain(|(g, _)| *g != guest);
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

    /// [`Self::set_tx_limit`] for a ceiling driven step by step (a rate controller such as
    /// DCQCN): when only the ceiling's rate changes, the vport's token bucket is kept rather
    /// than refilled, so the ceiling holds over any window. False when the guest is unknown.
    pub fn set_tx_rate(&self, guest: GuestId, limit: TxLimit, now_ns: u64) -> bool {
        let mut st = self.lock();
        let Some(port) = st.guests.get(&guest).map(|g| g.port) else {
            return false;
        };
        st.link
            .set_rate(port, guest.0, limit, now_ns.saturating_mul(1000));
        true
    }

    /// A guest's transmit limit (`None`: no such guest).
    pub fn tx_limit(&self, guest: GuestId) -> Option<TxLimit> {
        let st = self.lock();
        st.guests
            .get(&guest)
            .map(|g| st.link.limit(g.port, guest.0))
    }

    /// Sends `port`'s packets across a shared uplink (`None`: no longer).
    pub fn set_uplink(&self, uplink: Option<(UplinkTap, PortId)>) {
        self.lock().link.set_uplink(uplink);
    }

    /// What the HCA executed on a QP.
    pub fn stats(&self, qpn: u32) -> Option<QpStats> {
        self.lock().stats(qpn)
    }
}
