//! Registration before use: a queue pair the application creates is registered with the host
//! before the application can post on it, so the host counts it from its first work request
//! (never "attached late"). [`RegisterFirst`] wraps the provider the application uses; its
//! `create_qp` wakes the session to register at once and waits until the host accepted a
//! document naming the new QP, for at most [`REGISTER_WAIT`]. Without a host session nothing
//! waits (the registration's start indices still let a host that comes later count from the
//! start, until the rings lap).

use crate::event::Event;
use resex_shim::ShimError;
use resex_shim::{Buffer, CompletionQueue, Mr, Provider, QpInit, QueuePair};
use std::collections::HashSet;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The longest a new QP waits for the host to accept its registration.
pub const REGISTER_WAIT: Duration = Duration::from_millis(500);

/// What [`Gate::wait_registered`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Registered {
    /// The host accepted a document naming the QP.
    Yes,
    /// No host session is open: nothing to wait for.
    NoHost,
    /// The host did not accept it in time (it rejected the document, or is slow).
    TimedOut,
}

#[derive(Default)]
struct State {
    /// The open session's wake-up, if a session is open.
    nudge: Option<Sender<Event>>,
    /// QPNs of the documents the host accepted in this session.
    accepted: HashSet<u32>,
}

/// Shared by the session thread and the QP-creating threads.
#[derive(Default)]
pub struct Gate {
    state: Mutex<State>,
    changed: Condvar,
}

impl Gate {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A session opened; `nudge` wakes it to register now.
    pub(crate) fn opened(&self, nudge: Sender<Event>) {
        let mut s = self.lock();
        s.nudge = Some(nudge);
        s.accepted.clear();
        self.changed.notify_all();
    }

    /// The session ended: waiters stop waiting.
    pub(crate) fn closed(&self) {
        let mut s = self.lock();
        s.nudge = None;
        s.accepted.clear();
        self.changed.notify_all();
    }

    /// Wakes the open session (if any) to register again if the rings changed; `false` without
    /// a session.
    pub(crate) fn nudge(&self) -> bool {
        let s = self.lock();
        s.nudge
            .as_ref()
            .is_some_and(|n| n.send(Event::Nudge).is_ok())
    }

    /// The host accepted a document naming `qpns`.
    pub(crate) fn accepted(&self, qpns: &[u32]) {
        self.lock().accepted.extend(qpns.iter().copied());
        self.changed.notify_all();
    }

    /// Waits until the host accepted a document naming `qpn`, for at most `limit`.
    pub fn wait_registered(&self, qpn: u32, limit: Duration) -> Registered {
        let until = Instant::now() + limit;
        let mut s = self.lock();
        let Some(nudge) = s.nudge.clone() else {
            return Registered::NoHost;
        };
        // A closed session drops the receiver: then there is nothing to wait for.
        if nudge.send(Event::Nudge).is_err() {
            return Registered::NoHost;
        }
        loop {
            if s.accepted.contains(&qpn) {
                return Registered::Yes;
            }
            if s.nudge.is_none() {
                return Registered::NoHost;
            }
            let now = Instant::now();
            if now >= until {
                return Registered::TimedOut;
            }
            s = self
                .changed
                .wait_timeout(s, until - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

/// The application's provider, registering each new QP with the host before handing it out.
pub struct RegisterFirst {
    inner: Arc<dyn Provider>,
    gate: Arc<Gate>,
}

impl RegisterFirst {
    /// Wraps `inner`; `gate` is the agent's.
    pub fn new(inner: Arc<dyn Provider>, gate: Arc<Gate>) -> Self {
        Self { inner, gate }
    }
}

impl Provider for RegisterFirst {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn alloc(&self, len: u64) -> Result<Buffer, ShimError> {
        self.inner.alloc(len)
    }
    fn reg_mr(&self, buf: &Buffer, access: u32) -> Result<Mr, ShimError> {
        self.inner.reg_mr(buf, access)
    }
    fn dereg_mr(&self, mr: &Mr) -> Result<(), ShimError> {
        self.inner.dereg_mr(mr)
    }
    fn create_cq(&self, entries: u32) -> Result<Box<dyn CompletionQueue>, ShimError> {
        self.inner.create_cq(entries)
    }
    fn create_qp(
        &self,
        init: &QpInit,
        send_cq: u32,
        recv_cq: u32,
    ) -> Result<Box<dyn QueuePair>, ShimError> {
        let qp = self.inner.create_qp(init, send_cq, recv_cq)?;
        let qpn = qp.qpn();
        if self.gate.wait_registered(qpn, REGISTER_WAIT) == Registered::TimedOut {
            tracing::warn!(
                "QP {qpn:#x}: the host did not accept its registration within {} ms; it may be \
                 counted from later on",
                REGISTER_WAIT.as_millis()
            );
        }
        Ok(qp)
    }
}
