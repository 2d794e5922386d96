//! The actuator: applies a knob's changes (caps, transmit limits) on a thread of its own, so a
//! slow cgroup write, a netlink round trip or the store's fsync never delays the control loop.
//! Requests for one VM that queue up are coalesced (only the latest is applied); every setting
//! is recorded in the store before it is first changed, and what was applied is recorded after
//! each batch (one write per batch). It starts by putting back whatever a previous run left.

use crate::knob::Knob;
use crate::store::Store;
use resex_common::LogLimiter;
use std::collections::BTreeMap;
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

/// What the loop asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Act<V> {
    /// Set a value.
    Set {
        /// Domain key.
        key: String,
        /// Name, for the record.
        name: String,
        /// The value.
        value: V,
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

impl<V> Act<V> {
    fn key(&self) -> &str {
        match self {
            Act::Set { key, .. } | Act::Restore { key } | Act::Forget { key } => key,
        }
    }
}

enum Msg<V> {
    Act(Act<V>),
    /// Restore everything and answer with (restored, failures).
    Finish(Sender<(usize, Vec<String>)>),
}

/// Where changes go: an actuator, or a test's recorder.
pub trait Sink<V>: Send {
    /// Queues a request.
    fn act(&self, a: Act<V>);
}

/// Where cap changes go.
pub type CapSink = dyn Sink<f64>;
/// Where transmit-limit changes go.
pub type TxSink = dyn Sink<resex_common::TxLimit>;

/// An actuator's handle.
pub struct Actuator<K: Knob> {
    tx: Sender<Msg<K::Value>>,
    thread: Option<JoinHandle<()>>,
}

impl<K: Knob> std::fmt::Debug for Actuator<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Actuator({})", K::WHAT)
    }
}

/// A sender to an actuator (what the driver holds; the loop keeps the [`Actuator`] to finish
/// it).
pub struct ActuatorTx<V>(Sender<Msg<V>>);

impl<V: Send> Sink<V> for ActuatorTx<V> {
    fn act(&self, a: Act<V>) {
        let _ = self.0.send(Msg::Act(a));
    }
}

impl<K: Knob> Actuator<K> {
    /// Starts the thread; it owns the knob and the store, and first restores whatever the
    /// store holds from a previous run.
    pub fn start(knob: K, store: Store<K>) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name(format!("resexd-{}", K::FILE.trim_end_matches(".json")))
            .spawn(move || run(knob, store, rx))?;
        Ok(Self {
            tx,
            thread: Some(thread),
        })
    }

    /// A sender of requests.
    pub fn sender(&self) -> ActuatorTx<K::Value> {
        ActuatorTx(self.tx.clone())
    }

    /// Restores every recorded setting, stops the thread, and returns (restored, failures).
    pub fn finish(mut self) -> (usize, Vec<String>) {
        let (tx, rx) = mpsc::channel();
        let _ = self.tx.send(Msg::Finish(tx));
        let r = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or((0, vec![format!("the {} actuator did not answer", K::WHAT)]));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        r
    }
}

/// How often the values in force are written, at most.
const SYNC_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Writes the values in force if they changed.
fn sync<K: Knob>(store: &mut Store<K>, log: &mut LogLimiter, at: &mut std::time::Instant) {
    *at = std::time::Instant::now();
    if let Err(e) = store.sync() {
        if let Some(n) = log.hit() {
            tracing::error!("recording applied {}s: {e} [{n}]", K::WHAT);
        }
    }
}

fn run<K: Knob>(knob: K, mut store: Store<K>, rx: Receiver<Msg<K::Value>>) {
    let mut log = LogLimiter::default();
    // First of all, whatever a previous run left behind (a crash, kill -9).
    let (restored, forgotten, failed) = store.restore_all(&knob);
    if restored + forgotten > 0 {
        tracing::warn!(
            "restored {restored} {}s left by a previous run ({forgotten} for domains that are gone)",
            K::WHAT
        );
    }
    for f in &failed {
        tracing::error!(
            "could not restore a {} left by a previous run: {f}",
            K::WHAT
        );
    }
    // The values in force are written at most once a second (a schedule moves a ceiling many
    // times a second; each write is an fsync). Originals are written at once by `set`.
    let mut synced = std::time::Instant::now();
    loop {
        let first = match rx.recv_timeout(SYNC_EVERY) {
            Ok(m) => m,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                sync(&mut store, &mut log, &mut synced);
                continue;
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        };
        // Coalesce what queued up: the latest request per VM wins.
        let mut pending: BTreeMap<String, Act<K::Value>> = BTreeMap::new();
        let mut finish = None;
        let mut next = Some(first);
        while let Some(m) = next.take() {
            match m {
                Msg::Act(a) => {
                    pending.insert(a.key().to_owned(), a);
                }
                Msg::Finish(tx) => finish = Some(tx),
            }
            next = rx.try_recv().ok();
        }
        for (_, a) in pending {
            let r = match &a {
                Act::Set { key, name, value } => store.set(&knob, key, name, value),
                Act::Restore { key } => store.restore(&knob, key).map(drop),
                Act::Forget { key } => store.forget(key),
            };
            if let Err(e) = r {
                if let Some(n) = log.hit() {
                    tracing::error!("{} change for {} failed: {e} [{n}]", K::WHAT, a.key());
                }
            }
        }
        if synced.elapsed() >= SYNC_EVERY || finish.is_some() {
            sync(&mut store, &mut log, &mut synced);
        }
        if let Some(tx) = finish {
            let (restored, _forgotten, failed) = store.restore_all(&knob);
            let _ = tx.send((restored, failed));
            return;
        }
    }
}
