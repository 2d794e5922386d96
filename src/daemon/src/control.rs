//! Starting and stopping the daemon: the API socket, the metrics endpoint, the journal, the
//! backend sampler (domains, memory, CPU time: every slow backend call, off the loop), the
//! actuator (caps off the loop), and the real-time loop that drives the host core.

use crate::actuator::Actuator;
use crate::api::{self, Shared};
use crate::config::Config;
use crate::driver::{Command, Driver, Inputs, Sinks};
use crate::inbox::{inbox, Post};
use crate::journal::Journal;
use crate::knob::{CapKnob, TxKnob};
use crate::metrics::{LoopMetrics, MetricsServer};
use crate::runloop::{Loop, RunSummary};
use crate::sampler::{self, Periods};
use crate::store::{Store, StoreError};
use resex_api::Snapshot;
use resex_backend::lever::{HostLever, RateLever, VfLever};
use resex_backend::vf::NetlinkLever;
use resex_backend::Hypervisor;
use resex_core::{CoreConfig, HostCore};
use resex_ibmon::registry::Limits;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use crate::driver::FleetGrant;
pub use resex_core::NamedPolicy;

/// What the daemon runs with.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The configuration.
    pub cfg: Config,
    /// The policy (None: monitoring only).
    pub policy: Option<NamedPolicy>,
    /// Registration limits.
    pub limits: Limits,
}

/// What stops the daemon from starting.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The cap store.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The API socket.
    #[error("API socket {path}: {source}")]
    Api {
        /// Its path.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The journal.
    #[error("journal {path}: {source}")]
    Journal {
        /// Its path.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A thread could not start.
    #[error("starting a thread: {0}")]
    Thread(std::io::Error),
    /// The metrics endpoint.
    #[error(transparent)]
    Metrics(#[from] crate::metrics::MetricsError),
}

/// A running daemon.
pub struct DaemonHandle {
    stop: Arc<AtomicBool>,
    cmd: Post<Command>,
    shared: Shared,
    thread: Option<JoinHandle<RunSummary>>,
    helpers: Vec<JoinHandle<()>>,
    metrics: Option<MetricsServer>,
    /// Unix time at the loop clock's zero, ns (the fleet's schedules are in Unix time).
    unix_at_zero_ns: u64,
}

impl std::fmt::Debug for DaemonHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DaemonHandle")
    }
}

impl DaemonHandle {
    /// Unix time at the loop clock's zero, ns (the fleet's schedules are moved onto the
    /// loop's clock with it).
    pub fn unix_at_zero_ns(&self) -> u64 {
        self.unix_at_zero_ns
    }

    /// The latest snapshot.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.shared
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// A reader of the latest snapshot that outlives this borrow (the fleet member's).
    pub fn snapshots(&self) -> impl Fn() -> Arc<Snapshot> + Send + 'static {
        let shared = self.shared.clone();
        move || shared.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The admin's pin (or unpin) of one of a VM's levers, as the API asks it; what was done,
    /// or why not.
    pub fn admin(&self, a: api::Admin) -> Result<String, api::AdminError> {
        ask(&self.cmd, a)
    }

    /// The fleet's per-VM ceilings (name, bits per second), in force for their `valid` unless
    /// renewed; `None` lifts them (the local policy alone). Does not wait for the loop.
    pub fn fleet_ceilings(&self, c: Option<FleetGrant>) {
        let _ = self.cmd.send(Command::Fleet(c));
    }

    /// Where a fleet member hands this host's allocations (`None`: lift them), outliving this
    /// borrow.
    #[cfg(feature = "fleet")]
    pub fn fleet_sink(&self) -> impl FnMut(Option<&resex_fleet::Allocation>) + Send + 'static {
        let cmd = Mutex::new(self.cmd.clone());
        let zero = self.unix_at_zero_ns;
        move |a| {
            let _ = cmd
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .send(Command::Fleet(a.map(|a| FleetGrant::of(a, zero))));
        }
    }

    /// Switches policy (every cap is first put back to its original setting).
    pub fn reload(&self, policy: Option<NamedPolicy>) {
        let _ = self.cmd.send(Command::Reload(Box::new(policy)));
    }

    /// True while the loop runs.
    pub fn running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// Stops the loop, restores every cap it set, and returns the run's figures.
    pub fn stop(mut self) -> RunSummary {
        self.finish()
    }

    /// Where the metrics endpoint listens, when it runs.
    pub fn metrics_addr(&self) -> Option<std::net::SocketAddr> {
        self.metrics.as_ref().map(|m| m.addr)
    }

    fn finish(&mut self) -> RunSummary {
        self.stop.store(true, Ordering::Release);
        drop(self.metrics.take());
        let s = self
            .thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default();
        for h in self.helpers.drain(..) {
            let _ = h.join();
        }
        s
    }
}

impl Drop for DaemonHandle {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.finish();
        }
    }
}

/// Puts back every cap and transmit limit recorded in `state_dir` (what `resexd --restore`
/// and every start do). Returns (restored, forgotten, failures).
pub fn restore_stale(
    hv: Arc<dyn Hypervisor>,
    cfg: &Config,
) -> Result<(usize, usize, Vec<String>), StoreError> {
    let caps = CapKnob(hv.clone());
    let (r, f, mut e) = Store::open(&cfg.state_dir())?.restore_all(&caps);
    let tx = TxKnob {
        lever: lever_of(&hv, cfg),
        hv,
    };
    let (r2, f2, e2) = Store::open(&cfg.state_dir())?.restore_all(&tx);
    e.extend(e2);
    Ok((r + r2, f + f2, e))
}

/// The host's rate lever: the backend's own, else each domain's VF (`[rates.vfs]` by name,
/// else the backend's): softhca's scheduler for the embedded host's guests, the configured VF
/// lever (`[rates] vf_lever`) for SR-IOV VFs.
pub fn lever_of(hv: &Arc<dyn Hypervisor>, cfg: &Config) -> Arc<dyn RateLever> {
    hv.clone().rate_lever().unwrap_or_else(|| {
        let vfs = cfg.rates.vf_lever.mechanism().map(|m| {
            let l: Arc<dyn VfLever> = Arc::new(NetlinkLever::new(m));
            l
        });
        Arc::new(HostLever::new(hv.clone(), vfs).with_names(cfg.vfs_by_name()))
    })
}

/// Sends an admin request to the loop and waits (5 s at most) for its answer.
fn ask(cmd: &Post<Command>, a: api::Admin) -> Result<String, api::AdminError> {
    let (rtx, rrx) = mpsc::channel();
    cmd.send(Command::Admin(a, rtx))
        .map_err(|_| api::AdminError::Stopping)?;
    rrx.recv_timeout(Duration::from_secs(5))
        .map_err(|_| api::AdminError::NoAnswer)?
}

/// The admin function the API calls.
fn pin_fn(cmd: Post<Command>) -> api::PinFn {
    let tx = Mutex::new(cmd);
    Arc::new(move |a| ask(&tx.lock().unwrap_or_else(|p| p.into_inner()), a))
}

/// The core's settings from the daemon's.
pub fn core_config(cfg: &Config, limits: Limits) -> CoreConfig {
    CoreConfig {
        scan_budget: cfg.scan_budget,
        link: cfg.link(),
        limits,
        ..CoreConfig::default()
    }
}

/// The metrics endpoint, when configured, and the loop's own histograms it exports.
fn serve_metrics(
    cfg: &Config,
    shared: &Shared,
) -> Result<(Option<LoopMetrics>, Option<MetricsServer>), DaemonError> {
    let Some(addr) = &cfg.metrics else {
        return Ok((None, None));
    };
    let lm = LoopMetrics::default();
    let shared = shared.clone();
    let m = crate::metrics::serve(
        addr,
        move || shared.read().unwrap_or_else(|p| p.into_inner()).clone(),
        lm.clone(),
    )?;
    tracing::info!("metrics at http://{}/metrics", m.addr);
    Ok((Some(lm), Some(m)))
}

/// The journal, when configured.
fn open_journal(cfg: &Config) -> Result<Option<Journal>, DaemonError> {
    cfg.journal
        .as_ref()
        .map(|p| {
            Journal::create(p).map_err(|source| DaemonError::Journal {
                path: p.display().to_string(),
                source,
            })
        })
        .transpose()
}

/// Starts the daemon.
pub fn start(settings: Settings, hv: Arc<dyn Hypervisor>) -> Result<DaemonHandle, DaemonError> {
    let cfg = settings.cfg.clone();
    // The caps and limits a previous run left are put back by the actuators before anything
    // else they do (on their threads: a backend that hangs cannot hold the start).
    let cap_store = Store::<CapKnob>::open(&cfg.state_dir())?;
    let tx_store = Store::<TxKnob>::open(&cfg.state_dir())?;
    let lever = lever_of(&hv, &cfg);
    let stop = Arc::new(AtomicBool::new(false));
    let shared: Shared = Arc::new(RwLock::new(Arc::new(Snapshot::default())));
    let api_path = cfg.api_socket();
    let (cmd_tx, cmd_rx) = inbox::<Command>();
    let (_, api_thread) = api::start(
        &api_path,
        shared.clone(),
        stop.clone(),
        pin_fn(cmd_tx.clone()),
    )
    .map_err(|source| DaemonError::Api {
        path: api_path.display().to_string(),
        source,
    })?;
    let (loop_metrics, metrics) = serve_metrics(&cfg, &shared)?;
    let journal = open_journal(&cfg)?;
    let clock = Instant::now();
    let unix_at_zero_ns = crate::sampler::unix_at(clock);
    let (sample_tx, sample_rx) = inbox();
    let (reg_tx, reg_rx) = inbox();
    let sampler = sampler::spawn(
        hv.clone(),
        lever.clone(),
        settings.limits,
        Periods {
            discovery: Duration::from_millis(cfg.discovery_ms),
            cpu: Duration::from_millis(u64::from(cfg.cpu_every)),
        },
        clock,
        sample_tx,
        reg_tx,
        cfg.vms.clone(),
        stop.clone(),
    )
    .map_err(DaemonError::Thread)?;
    let actuator = Actuator::start(CapKnob(hv.clone()), cap_store).map_err(DaemonError::Thread)?;
    let tx_actuator = Actuator::start(
        TxKnob {
            lever,
            hv: hv.clone(),
        },
        tx_store,
    )
    .map_err(DaemonError::Thread)?;
    let mut driver = Driver::new(
        HostCore::new(core_config(&cfg, settings.limits)),
        Inputs {
            samples: sample_rx,
            regs: reg_rx,
            cmds: cmd_rx,
        },
        Sinks {
            caps: Box::new(actuator.sender()),
            tx: Box::new(tx_actuator.sender()),
        },
        journal,
        hv.kind(),
    );
    driver.publish_to(shared.clone(), cfg.snapshot_ms.saturating_mul(1_000_000));
    let mut helpers = vec![sampler, api_thread];
    if cfg.periods.enabled {
        let interval_ns = driver.core.config().interval_ns;
        let (feed, thread) =
            crate::periods::spawn(&cfg.periods, interval_ns, unix_at_zero_ns, stop.clone())
                .map_err(DaemonError::Thread)?;
        driver.feed_periods(feed);
        helpers.push(thread);
    }
    driver.set_policy(settings.policy, 0);
    let lp = Loop {
        driver,
        actuator,
        tx_actuator,
        clock,
        stop: stop.clone(),
        realtime: cfg.realtime,
        metrics: loop_metrics,
    };
    let thread = std::thread::Builder::new()
        .name("resexd-loop".into())
        .spawn(move || lp.run())
        .map_err(DaemonError::Thread)?;
    Ok(DaemonHandle {
        stop,
        cmd: cmd_tx,
        shared,
        thread: Some(thread),
        helpers,
        metrics,
        unix_at_zero_ns,
    })
}
