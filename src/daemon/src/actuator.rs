//! The actuator: applies cap changes on a thread of its own, so a slow cgroup write or the
//! cap store's fsync never delays the control loop. Requests for one VM that queue up are
//! coalesced (only the latest is applied); every cap is recorded in the cap store before it is
//! first set, and what was applied is recorded after each batch (one write per batch).

use crate::capstore::CapStore;
use resex_backend::Hypervisor;
use resex_common::LogLimiter;
use std::collections::BTreeMap;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// What the loop asks for.
#[derive(Debug)]
pub enum Act {
    /// Set a cap (percent of one CPU).
    Set {
        /// Domain key.
        key: String,
        /// Name, for the record.
        name: String,
        /// The cap.
        pct: f64,
    },
    /// Put the VM's original setting back.
    Restore {
        /// Domain key.
        key: String,
    },
    /// The VM is gone: drop its record.
    Forget {
        /// Domain key.
        key: String,
    },
}

enum Msg {
    Act(Act),
    /// Restore everything and answer with (restored, failures).
    Finish(Sender<(usize, Vec<String>)>),
}

/// Where cap changes go: the actuator, or a test's recorder.
pub trait CapSink: Send {
    /// Queues a request.
    fn act(&self, a: Act);
}

/// The actuator's handle.
pub struct Actuator {
    tx: Sender<Msg>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Actuator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Actuator")
    }
}

impl Actuator {
    /// Starts the thread; it owns the store, and first restores whatever caps the store holds
    /// from a previous run.
    pub fn start(hv: Arc<dyn Hypervisor>, store: CapStore) -> std::io::Result<Actuator> {
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("resexd-actuator".into())
            .spawn(move || run(hv, store, rx))?;
        Ok(Actuator {
            tx,
            thread: Some(thread),
        })
    }

    /// Queues a request.
    pub fn send(&self, a: Act) {
        let _ = self.tx.send(Msg::Act(a));
    }

    /// A sender of requests.
    pub fn sender(&self) -> ActuatorTx {
        ActuatorTx(self.tx.clone())
    }

    /// Restores every recorded cap, stops the thread, and returns (restored, failures).
    pub fn finish(mut self) -> (usize, Vec<String>) {
        let (tx, rx) = mpsc::channel();
        let _ = self.tx.send(Msg::Finish(tx));
        let r = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or((0, vec!["the actuator did not answer".into()]));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        r
    }
}

impl CapSink for Actuator {
    fn act(&self, a: Act) {
        self.send(a);
    }
}

/// A sender to the actuator (what the driver holds; the loop keeps the [`Actuator`] to finish
/// it).
#[derive(Clone)]
pub struct ActuatorTx(Sender<Msg>);

impl CapSink for ActuatorTx {
    fn act(&self, a: Act) {
        let _ = self.0.send(Msg::Act(a));
    }
}

fn key_of(a: &Act) -> &str {
    match a {
        Act::Set { key, .. } | Act::Restore { key } | Act::Forget { key } => key,
    }
}

fn run(hv: Arc<dyn Hypervisor>, mut store: CapStore, rx: Receiver<Msg>) {
    let mut log = LogLimiter::default();
    // First of all, whatever a previous run left behind (a crash, kill -9).
    let (restored, forgotten, failed) = store.restore_all(&*hv);
    if restored + forgotten > 0 {
        tracing::warn!(
            "restored {restored} caps left by a previous run ({forgotten} for domains that are gone)"
        );
    }
    for f in &failed {
        tracing::error!("could not restore a cap left by a previous run: {f}");
    }
    while let Ok(first) = rx.recv() {
        // Coalesce what queued up: the latest request per VM wins.
        let mut pending: BTreeMap<String, Act> = BTreeMap::new();
        let mut finish = None;
        let mut next = Some(first);
        while let Some(m) = next.take() {
            match m {
                Msg::Act(a) => {
                    pending.insert(key_of(&a).to_owned(), a);
                }
                Msg::Finish(tx) => finish = Some(tx),
            }
            next = rx.try_recv().ok();
        }
        for (_, a) in pending {
            let r = match &a {
                Act::Set { key, name, pct } => store.set(&*hv, key, name, *pct),
                Act::Restore { key } => store.restore(&*hv, key).map(drop),
                Act::Forget { key } => store.forget(key),
            };
            if let Err(e) = r {
                if let Some(n) = log.hit() {
                    tracing::error!("cap change for {} failed: {e} [{n}]", key_of(&a));
                }
            }
        }
        if let Err(e) = store.sync() {
            if let Some(n) = log.hit() {
                tracing::error!("recording applied caps: {e} [{n}]");
            }
        }
        if let Some(tx) = finish {
            let (restored, _forgotten, failed) = store.restore_all(&*hv);
            let _ = tx.send((restored, failed));
            return;
        }
    }
}
