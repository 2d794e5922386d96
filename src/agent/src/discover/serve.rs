//! `resex-agent --discover`: the agent with no workload of its own. It scans the guest's
//! processes every interval ([`super::watch`]) and keeps the host's registration equal to the
//! soft-RoCE queues it finds: a new queue is registered at the next scan, a process's queues are
//! unregistered when it exits.

use super::fit::{fit, Budget, Left};
use super::watch::{Changes, ResourceSource, Watcher};
use crate::gate::Gate;
use crate::session::{self, ChannelEnd, ChannelStatus, DocFn};
use resex_common::LogLimiter;
use resex_proto::{Registration, RingRegistration, REGISTRATION_VERSION};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the discovery agent does.
#[derive(Debug, Clone)]
pub struct Options {
    /// `/proc` (a test gives its own).
    pub proc_root: PathBuf,
    /// Between two scans.
    pub every: Duration,
    /// The path MTU put in the registration (packets are counted at it).
    pub path_mtu: u32,
    /// The VM name put in the registration (informational).
    pub name: Option<String>,
    /// Where mlx5 applications run with `libresex_preload.so` report their QPs (None: not
    /// listened for).
    pub preload: Option<PathBuf>,
    /// How often the session looks for changes by itself (a change found by a scan wakes it at
    /// once).
    pub session_poll: Duration,
}

impl Options {
    /// `/proc`, every `every`, the path MTU, the VM's name; the interposer's socket off.
    pub fn new(every: Duration, path_mtu: u32, name: Option<String>) -> Self {
        Self {
            proc_root: PathBuf::from("/proc"),
            every,
            path_mtu,
            name,
            preload: None,
            session_poll: Duration::from_millis(100),
        }
    }
}

/// What a run did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Totals {
    /// Scans made.
    pub scans: u64,
    /// Processes found with queues (each change counted).
    pub found: u64,
    /// Processes whose queues went away.
    pub gone: u64,
}

/// Serves sessions on `chan` and scans until `stop`.
pub fn run(
    chan: Box<dyn ChannelEnd>,
    opts: &Options,
    resources: ResourceSource,
    stop: &Arc<AtomicBool>,
    status: Arc<ChannelStatus>,
) -> std::io::Result<Totals> {
    let rings: Arc<Mutex<Vec<RingRegistration>>> = Arc::default();
    let gate = Arc::new(Gate::default());
    let preload = match &opts.preload {
        Some(path) => {
            let g = gate.clone();
            let nudge: Arc<dyn Fn() + Send + Sync> = Arc::new(move || {
                g.nudge();
            });
            match crate::preload::Server::start(path, opts.proc_root.clone(), nudge) {
                Ok(s) => {
                    tracing::info!(
                        "mlx5 applications under libresex_preload.so report to {}",
                        path.display()
                    );
                    Some(s)
                }
                // Soft-RoCE discovery does not need the socket: it goes on without.
                Err(e) => {
                    tracing::warn!(
                        "{}: {e}: mlx5 applications cannot report (discovery goes on)",
                        path.display()
                    );
                    None
                }
            }
        }
        None => None,
    };
    let reported = preload.as_ref().map(|s| s.reported.clone());
    let doc: DocFn = {
        let (rings, name, mtu) = (rings.clone(), opts.name.clone(), opts.path_mtu);
        let said = Mutex::new((Left::default(), LogLimiter::default()));
        Arc::new(move || {
            let mut d = Registration {
                version: REGISTRATION_VERSION,
                vm: name.clone(),
                path_mtu: mtu,
                qps: reported.as_ref().map_or_else(Vec::new, |r| {
                    r.lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .values()
                        .cloned()
                        .collect()
                }),
                mailbox: None,
                rings: rings.lock().unwrap_or_else(|p| p.into_inner()).clone(),
            };
            let left = fit(&mut d, &Budget::default());
            let mut s = said.lock().unwrap_or_else(|p| p.into_inner());
            if left != s.0 && left != Left::default() && s.1.hit().is_some() {
                tracing::warn!(
                    "{} soft-RoCE queue(s) and {} QP(s) left out: they overlap others or pass the host's limits",
                    left.rings,
                    left.qps
                );
            }
            s.0 = left;
            d
        })
    };
    let channel = {
        let (stop, gate, poll) = (stop.clone(), gate.clone(), opts.session_poll);
        std::thread::Builder::new()
            .name("agent-channel".into())
            .spawn(move || session::run(chan, doc, status, stop, poll, gate))?
    };
    let mut watcher = Watcher::new(&opts.proc_root, resources);
    let mut totals = Totals::default();
    let mut next = Instant::now();
    while !stop.load(Ordering::Acquire) {
        let changes = watcher.scan();
        totals.scans += 1;
        if changes.any() {
            say(&changes);
            totals.found += changes.found.len() as u64;
            totals.gone += changes.gone.len() as u64;
            *rings.lock().unwrap_or_else(|p| p.into_inner()) = watcher.rings();
            gate.nudge();
        }
        next += opts.every;
        let now = Instant::now();
        if next < now {
            next = now;
        }
        std::thread::sleep(next - now);
    }
    // Wake the session so it sees the stop now, not at its next own look.
    gate.nudge();
    let _ = channel.join();
    drop(preload);
    Ok(totals)
}

fn say(c: &Changes) {
    for p in &c.found {
        let qps: Vec<String> = p.qps.iter().map(|q| format!("{q:#x}")).collect();
        let skipped = if p.skipped > 0 {
            format!(" ({} more not told apart: not registered)", p.skipped)
        } else {
            String::new()
        };
        tracing::info!(
            "process {} ({}): {} soft-RoCE queue(s){skipped}, QPs [{}]",
            p.pid,
            p.comm,
            p.queues,
            qps.join(", ")
        );
    }
    for p in &c.gone {
        tracing::info!(
            "process {} ({}) closed its queues or exited: {} queue(s) unregistered",
            p.pid,
            p.comm,
            p.queues
        );
    }
}
