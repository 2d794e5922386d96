//! The control loop: every interval scan the rings, read CPU time, drain the mailboxes and
//! price; at actuation boundaries set caps through the backend (recorded first for crash
//! safety); keep the API snapshot and the journal. One thread; discovery, registration and the
//! API run beside it and talk to it through channels.

// Float-to-integer conversions here are of measured, bounded quantities (ns, counts, ranks).
#![allow(clippy::cast_possible_truncation)]

use crate::actuator::{Act, Actuator};
use crate::api::{self, Shared};
use crate::capstore::{CapStore, StoreError};
use crate::config::Config;
use crate::journal::{Journal, Row};
use crate::registrar::{self, RegEvent};
use crate::vm::Vm;
use resex_api::{HostSnap, Snapshot, VmSnap};
use resex_backend::{DomainInfo, Hypervisor};
use resex_common::LatencyRecorder;
use resex_common::LogLimiter;
use resex_ibmon::mailbox;
use resex_ibmon::registry::Limits;
use resex_ibmon::Counters;
use resex_pricing::{Engine, IntervalInput, PolicyConfig, VmId, VmSpec, VmUsage};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A policy and the name it is shown under.
pub type NamedPolicy = (String, PolicyConfig);

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

/// Tick lateness of a run.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct RunSummary {
    /// Ticks run.
    pub ticks: u64,
    /// Ticks skipped (more than an interval behind).
    pub skipped: u64,
    /// Lateness p50, us.
    pub late_p50_us: f64,
    /// Lateness p99, us.
    pub late_p99_us: f64,
    /// Lateness max, us.
    pub late_max_us: f64,
    /// Caps restored at exit.
    pub restored: usize,
}

enum Command {
    Reload(Box<Option<NamedPolicy>>),
    /// The admin pins (or unpins) a VM's cap; the answer goes back on the sender.
    Pin(String, Option<f64>, Sender<Result<String, String>>),
}

/// A running daemon.
pub struct DaemonHandle {
    stop: Arc<AtomicBool>,
    cmd: Sender<Command>,
    shared: Shared,
    thread: Option<JoinHandle<RunSummary>>,
    helpers: Vec<JoinHandle<()>>,
    metrics: Option<crate::metrics::MetricsServer>,
}

impl std::fmt::Debug for DaemonHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DaemonHandle")
    }
}

impl DaemonHandle {
    /// The latest snapshot.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.shared
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
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

/// Puts back every cap recorded in `state_dir` (what `resexd --restore` and every start do).
pub fn restore_stale(
    hv: &dyn Hypervisor,
    cfg: &Config,
) -> Result<(usize, usize, Vec<String>), StoreError> {
    let mut store = CapStore::open(&cfg.state_dir())?;
    Ok(store.restore_all(hv))
}

/// Starts the daemon.
pub fn start(settings: Settings, hv: Arc<dyn Hypervisor>) -> Result<DaemonHandle, DaemonError> {
    let cfg = settings.cfg.clone();
    let mut store = CapStore::open(&cfg.state_dir())?;
    let (restored, forgotten, failed) = store.restore_all(&*hv);
    if restored + forgotten > 0 {
        tracing::warn!("restored {restored} caps left by a previous run ({forgotten} for domains that are gone)");
    }
    for f in &failed {
        tracing::error!("could not restore a cap left by a previous run: {f}");
    }
    let stop = Arc::new(AtomicBool::new(false));
    let shared: Shared = Arc::new(RwLock::new(Arc::new(Snapshot::default())));
    let api_path = cfg.api_socket();
    let (cmd_tx, cmd_rx) = mpsc::channel::<Command>();
    let pin: api::PinFn = {
        let tx = Mutex::new(cmd_tx.clone());
        Arc::new(move |vm: &str, pct: Option<f64>| {
            let (rtx, rrx) = mpsc::channel();
            tx.lock()
                .unwrap_or_else(|p| p.into_inner())
                .send(Command::Pin(vm.to_owned(), pct, rtx))
                .map_err(|_| "the daemon is stopping".to_owned())?;
            rrx.recv_timeout(Duration::from_secs(5))
                .map_err(|_| "the control loop did not answer".to_owned())?
        })
    };
    let (_, api_thread) =
        api::start(&api_path, shared.clone(), stop.clone(), pin).map_err(|source| {
            DaemonError::Api {
                path: api_path.display().to_string(),
                source,
            }
        })?;
    let loop_metrics = cfg
        .metrics
        .as_ref()
        .map(|_| crate::metrics::LoopMetrics::default());
    let metrics = match (&cfg.metrics, &loop_metrics) {
        (Some(addr), Some(lm)) => {
            let shared = shared.clone();
            let m = crate::metrics::serve(
                addr,
                move || shared.read().unwrap_or_else(|p| p.into_inner()).clone(),
                lm.clone(),
            )?;
            tracing::info!("metrics at http://{}/metrics", m.addr);
            Some(m)
        }
        _ => None,
    };
    let journal = match &cfg.journal {
        Some(p) => Some(Journal::create(p).map_err(|source| DaemonError::Journal {
            path: p.display().to_string(),
            source,
        })?),
        None => None,
    };
    let (disc_tx, disc_rx) = mpsc::channel();
    let disc_thread = {
        let (hv, stop) = (hv.clone(), stop.clone());
        let every = Duration::from_millis(cfg.discovery_ms);
        std::thread::Builder::new()
            .name("resexd-discovery".into())
            .spawn(move || {
                let mut log = LogLimiter::default();
                while !stop.load(Ordering::Acquire) {
                    match hv.domains() {
                        Ok(d) => {
                            if disc_tx.send(d).is_err() {
                                return;
                            }
                        }
                        Err(e) => {
                            if let Some(n) = log.hit() {
                                tracing::warn!("listing domains: {e} [{n}]");
                            }
                        }
                    }
                    let until = Instant::now() + every;
                    while Instant::now() < until && !stop.load(Ordering::Acquire) {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
            })
            .map_err(DaemonError::Thread)?
    };
    let (reg_tx, reg_rx) = mpsc::channel();
    let mut lp = Loop {
        hv: hv.clone(),
        cfg,
        limits: settings.limits,
        engine: None,
        policy_name: "none".into(),
        vms: BTreeMap::new(),
        next_id: 1,
        act: Some(Actuator::start(hv.clone(), store).map_err(DaemonError::Thread)?),
        journal,
        reg_tx,
        reg_rx,
        disc_rx,
        cmd_rx,
        shared: shared.clone(),
        stop: stop.clone(),
        log_mailbox: LogLimiter::default(),
        log_cpu: LogLimiter::default(),
        last_util: 0.0,
        snap_prev: BTreeMap::new(),
        snap_at: Instant::now(),
        started: Instant::now(),
        late_window: LatencyRecorder::new(),
        late_all: LatencyRecorder::new(),
        scan_ns: 0,
        loop_metrics,
        scan_ticks: 0,
        ticks: 0,
        skipped: 0,
        interval: 0,
        last_window: (0.0, 0.0, 0.0),
    };
    lp.set_policy(settings.policy);
    let thread = std::thread::Builder::new()
        .name("resexd-loop".into())
        .spawn(move || lp.run())
        .map_err(DaemonError::Thread)?;
    Ok(DaemonHandle {
        stop,
        cmd: cmd_tx,
        shared,
        thread: Some(thread),
        helpers: vec![disc_thread, api_thread],
        metrics,
    })
}

struct Loop {
    hv: Arc<dyn Hypervisor>,
    cfg: Config,
    limits: Limits,
    engine: Option<Engine>,
    policy_name: String,
    vms: BTreeMap<String, Vm>,
    next_id: u32,
    act: Option<Actuator>,
    journal: Option<Journal>,
    reg_tx: Sender<RegEvent>,
    reg_rx: Receiver<RegEvent>,
    disc_rx: Receiver<Vec<DomainInfo>>,
    cmd_rx: Receiver<Command>,
    shared: Shared,
    stop: Arc<AtomicBool>,
    log_mailbox: LogLimiter,
    log_cpu: LogLimiter,
    last_util: f64,
    /// Per VM at the last snapshot: totals and CPU ns.
    snap_prev: BTreeMap<String, (Counters, u64)>,
    snap_at: Instant,
    started: Instant,
    /// Histograms for the metrics endpoint, when it runs.
    loop_metrics: Option<crate::metrics::LoopMetrics>,
    /// Tick lateness since the last snapshot, and over the whole run.
    late_window: LatencyRecorder,
    late_all: LatencyRecorder,
    scan_ns: u64,
    scan_ticks: u64,
    ticks: u64,
    skipped: u64,
    interval: u64,
    last_window: (f64, f64, f64),
}

fn set_realtime() {
    let p = libc::sched_param { sched_priority: 10 };
    // SAFETY: sched_setscheduler on this thread (pid 0) with a valid, initialised parameter.
    let r = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) };
    if r == 0 {
        tracing::info!("control loop runs under SCHED_FIFO priority 10");
    } else {
        tracing::info!(
            "control loop runs at normal priority (SCHED_FIFO refused: {})",
            std::io::Error::last_os_error()
        );
    }
}

fn set_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes an integer argument and changes only this thread's
    // timer slack (1 ns: the loop wakes on time instead of up to 50 us late).
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}

impl Loop {
    fn tick_ms(&self) -> u64 {
        self.engine
            .as_ref()
            .map_or(1, |e| e.config().ledger.interval_ms.max(1))
    }

    fn set_policy(&mut self, p: Option<NamedPolicy>) {
        // Every cap back to its original setting first: a new policy starts from a clean host
        // (the admin's pinned caps excepted: they stay).
        let keys: Vec<String> = self
            .vms
            .iter()
            .filter(|(_, v)| v.pinned.is_none())
            .map(|(k, _)| k.clone())
            .collect();
        for k in &keys {
            self.restore_cap(k);
        }
        match p {
            Some((name, cfg)) => {
                let mut e = Engine::new(cfg);
                for vm in self.vms.values() {
                    let _ = e.add_vm(spec_of(vm, None), self.interval + 1);
                }
                self.engine = Some(e);
                self.policy_name = name;
            }
            None => {
                self.engine = None;
                self.policy_name = "none".into();
            }
        }
        tracing::info!("policy: {}", self.policy_name);
    }

    fn act(&self, a: Act) {
        if let Some(act) = &self.act {
            act.send(a);
        }
    }

    fn restore_cap(&mut self, key: &str) {
        if let Some(vm) = self.vms.get_mut(key) {
            if vm.cap.take().is_none() {
                return;
            }
        }
        self.act(Act::Restore {
            key: key.to_owned(),
        });
    }

    fn run(mut self) -> RunSummary {
        set_timer_slack();
        if self.cfg.realtime {
            set_realtime();
        }
        let mut tick = Duration::from_millis(self.tick_ms());
        let mut base = Instant::now();
        let mut k: u64 = 0;
        while !self.stop.load(Ordering::Acquire) {
            k += 1;
            let deadline = base + tick * u32::try_from(k).unwrap_or(u32::MAX);
            let now = Instant::now();
            if now < deadline {
                std::thread::sleep(deadline - now);
            }
            let now = Instant::now();
            let late = now.saturating_duration_since(deadline);
            if late > tick {
                // More than an interval behind: skip the lost intervals (the engine allows gaps).
                let behind = u64::try_from(late.as_nanos() / tick.as_nanos().max(1)).unwrap_or(0);
                k += behind;
                self.skipped += behind;
                self.interval += behind;
            }
            let late_ns = u64::try_from(late.as_nanos()).unwrap_or(u64::MAX);
            self.late_window.record(0, late_ns);
            if let Some(m) = &self.loop_metrics {
                m.tick_lateness.observe(late.as_secs_f64());
            }
            self.late_all.record(0, late_ns);
            self.interval += 1;
            self.ticks += 1;
            self.events();
            self.tick();
            if self.snap_at.elapsed() >= Duration::from_millis(self.cfg.snapshot_ms) {
                self.snapshot();
            }
            let want = Duration::from_millis(self.tick_ms());
            if want != tick {
                tick = want;
                base = Instant::now();
                k = 0;
            }
        }
        self.shutdown()
    }

    fn shutdown(&mut self) -> RunSummary {
        let keys: Vec<String> = self.vms.keys().cloned().collect();
        for vm in self.vms.values() {
            vm.registrar_stop.store(true, Ordering::Release);
        }
        // VMs with a cap in force get their original setting back through the actuator; the
        // final pass then finds whatever the store still holds (none, normally).
        let capped = self.vms.values().filter(|v| v.cap.is_some()).count();
        for k in &keys {
            self.restore_cap(k);
        }
        let (leftover, failed) = self.act.take().map(Actuator::finish).unwrap_or_default();
        let restored = capped + leftover;
        for f in failed {
            tracing::error!("could not restore a cap: {f}");
        }
        if let Some(j) = &mut self.journal {
            let _ = j.flush();
        }
        let run = self.late_all.take_interval();
        RunSummary {
            ticks: self.ticks,
            skipped: self.skipped,
            late_p50_us: run.p50_ns as f64 / 1000.0,
            late_p99_us: run.p99_ns as f64 / 1000.0,
            late_max_us: run.max_ns as f64 / 1000.0,
            restored,
        }
    }

    /// The admin's cap: set (and kept whatever the policy decides) or lifted.
    fn pin(&mut self, name: &str, pct: Option<f64>) -> Result<String, String> {
        let Some((key, vm)) = self.vms.iter_mut().find(|(_, v)| v.name == name) else {
            return Err(format!("no VM named `{name}`"));
        };
        let key = key.clone();
        let a = match pct {
            Some(p) => {
                vm.pinned = Some(p);
                vm.cap = Some(p);
                vm.cap_reason = Some(format!("pinned at {p}% by the admin"));
                Act::Set {
                    key,
                    name: vm.name.clone(),
                    pct: p,
                }
            }
            None => {
                vm.pinned = None;
                vm.cap = None;
                vm.cap_reason = Some("unpinned by the admin: original setting".into());
                Act::Restore { key }
            }
        };
        tracing::info!("{name}: {}", vm.cap_reason.as_deref().unwrap_or(""));
        let msg = vm.cap_reason.clone().unwrap_or_default();
        if let Some(act) = &self.act {
            act.send(a);
        }
        Ok(msg)
    }

    fn events(&mut self) {
        while let Ok(c) = self.cmd_rx.try_recv() {
            match c {
                Command::Reload(p) => self.set_policy(*p),
                Command::Pin(name, pct, reply) => {
                    let _ = reply.send(self.pin(&name, pct));
                }
            }
        }
        let mut latest = None;
        while let Ok(d) = self.disc_rx.try_recv() {
            latest = Some(d);
        }
        if let Some(d) = latest {
            self.discovered(d);
        }
        while let Ok(ev) = self.reg_rx.try_recv() {
            match ev {
                RegEvent::Accepted { key, doc, layout } => {
                    if let Some(vm) = self.vms.get_mut(&key) {
                        if let Err(e) = vm.install(&doc, layout, &self.limits) {
                            vm.rejections += 1;
                            vm.last_error = Some(e.to_string());
                        } else {
                            tracing::info!("{}: registered {} queue pairs", vm.name, vm.qps());
                        }
                    }
                }
                RegEvent::Rejected { key, error } => {
                    if let Some(vm) = self.vms.get_mut(&key) {
                        vm.rejections += 1;
                        vm.last_error = Some(error);
                    }
                }
            }
        }
    }

    fn discovered(&mut self, doms: Vec<DomainInfo>) {
        let live: std::collections::HashSet<&str> = doms.iter().map(|d| d.key.as_str()).collect();
        let gone: Vec<String> = self
            .vms
            .keys()
            .filter(|k| !live.contains(k.as_str()))
            .cloned()
            .collect();
        for k in gone {
            if let Some(vm) = self.vms.remove(&k) {
                vm.registrar_stop.store(true, Ordering::Release);
                if let Some(e) = &mut self.engine {
                    e.remove_vm(VmId(vm.engine_id));
                }
                self.act(Act::Forget { key: k.clone() });
                self.snap_prev.remove(&k);
                tracing::info!("{}: gone", vm.name);
            }
        }
        for d in doms {
            if let Some(vm) = self.vms.get_mut(&d.key) {
                if vm.mem.is_none() {
                    vm.mem = self.hv.memory(&d.key).ok();
                }
                continue;
            }
            let mut vm = Vm::new(
                d.key.clone(),
                self.next_id,
                d.name.clone(),
                d.vcpus,
                d.ram_size,
            );
            self.next_id += 1;
            vm.mem = match self.hv.memory(&d.key) {
                Ok(m) => Some(m),
                Err(e) => {
                    tracing::warn!("{}: cannot map guest memory yet: {e}", d.name);
                    None
                }
            };
            vm.cap_mechanism = self.hv.cap_mechanism(&d.key);
            if let Some(e) = &mut self.engine {
                if let Err(err) = e.add_vm(spec_of(&vm, Some(&d)), self.interval + 1) {
                    tracing::error!("{}: {err}", d.name);
                }
            }
            let (hv, key, name, ram, limits, tx, stop) = (
                self.hv.clone(),
                d.key.clone(),
                d.name.clone(),
                d.ram_size,
                self.limits,
                self.reg_tx.clone(),
                vm.registrar_stop.clone(),
            );
            let _ = std::thread::Builder::new()
                .name(format!("reg-{}", d.name))
                .spawn(move || registrar::run(hv, key, name, ram, limits, tx, stop));
            tracing::info!(
                "{}: found ({} vCPUs, caps by {})",
                d.name,
                d.vcpus,
                vm.cap_mechanism
            );
            self.vms.insert(d.key.clone(), vm);
        }
    }

    fn tick(&mut self) {
        let t0 = Instant::now();
        let budget = self.cfg.scan_budget;
        let mut usage: Vec<VmUsage> = Vec::with_capacity(self.vms.len());
        let mut deltas: Vec<(String, Counters, Option<resex_pricing::LatencyReport>)> =
            Vec::with_capacity(self.vms.len());
        // The VM two places ahead is prefetched while this one is scanned, so the cache misses
        // of different VMs overlap (1 024 busy VMs: 440 -> 290 us a tick in the IBMon bench).
        let mut all: Vec<(&String, &mut Vm)> = self.vms.iter_mut().collect();
        for i in 0..all.len() {
            if let Some((_, ahead)) = all.get(i + 2) {
                ahead.prefetch();
            }
            let (key, vm) = (all[i].0, &mut *all[i].1);
            let delta = vm.scan(budget);
            // CPU time every `cpu_every` intervals, VMs spread over the ticks.
            if (self.ticks + u64::from(vm.engine_id)).is_multiple_of(u64::from(self.cfg.cpu_every))
                || vm.cpu_prev.is_none()
            {
                match self.hv.cpu_time_ns(key) {
                    Ok(t) => {
                        let now = Instant::now();
                        if let Some((p, at)) = vm.cpu_prev {
                            let wall = now.duration_since(at).as_nanos().max(1) as f64;
                            vm.cpu_pct = t.saturating_sub(p) as f64 * 100.0 / wall;
                        }
                        vm.cpu_prev = Some((t, now));
                    }
                    Err(e) => {
                        if let Some(n) = self.log_cpu.hit() {
                            tracing::warn!("{}: CPU time: {e} [{n}]", vm.name);
                        }
                    }
                }
            }
            let mut report = None;
            if let (Some(mb), Some(mem)) = (&vm.mailbox, &vm.mem) {
                let d = mailbox::drain(&**mem, mb);
                vm.reports += u64::from(d.valid);
                if d.bad > 0 {
                    vm.bad_reports += u64::from(d.bad);
                    if let Some(n) = self.log_mailbox.hit() {
                        tracing::warn!("{}: {} mailbox blocks refused [{n}]", vm.name, d.bad);
                    }
                }
                if let Some(r) = d.report {
                    vm.last_report = Some(r);
                    vm.learn(&r);
                    let c = r.count as f64;
                    vm.lat_totals.0 += r.count;
                    vm.lat_totals.1 += c * r.mean_ns;
                    vm.lat_totals.2 += c * r.p99_ns;
                }
                report = d.report;
            }
            usage.push(VmUsage {
                vm: VmId(vm.engine_id),
                cpu_pct: vm.cpu_pct,
                mtus: delta.mtus,
                bytes: delta.tx_bytes,
                report,
            });
            deltas.push((key.clone(), delta, report));
        }
        let scan = t0.elapsed();
        self.scan_ns += u64::try_from(scan.as_nanos()).unwrap_or(0);
        if let Some(m) = &self.loop_metrics {
            m.scan.observe(scan.as_secs_f64());
        }
        self.scan_ticks += 1;
        usage.sort_by_key(|u| u.vm);
        let out = match &mut self.engine {
            Some(e) => match e.step(&IntervalInput {
                interval: self.interval,
                link_util: None,
                usage: &usage,
            }) {
                Ok(o) => Some(o.clone()),
                Err(err) => {
                    tracing::error!("pricing: {err}");
                    None
                }
            },
            None => None,
        };
        let mut set: BTreeMap<u32, (f64, String)> = BTreeMap::new();
        if let Some(o) = &out {
            self.last_util = o.link_util;
            for d in &o.decisions {
                let Some((key, vm)) = self.vms.iter_mut().find(|(_, v)| v.engine_id == d.vm.0)
                else {
                    continue;
                };
                if vm.pinned.is_some() {
                    continue; // the admin's cap wins
                }
                let key = key.clone();
                let full = 100.0 * f64::from(vm.vcpus);
                let reason = d.reason.to_string();
                vm.cap_reason = Some(reason.clone());
                let name = vm.name.clone();
                let a = if d.cap_pct >= full - 1e-9 {
                    vm.cap = None;
                    Act::Restore { key }
                } else {
                    vm.cap = Some(d.cap_pct);
                    Act::Set {
                        key,
                        name,
                        pct: d.cap_pct,
                    }
                };
                if let Some(act) = &self.act {
                    act.send(a);
                }
                set.insert(d.vm.0, (d.cap_pct, reason));
            }
        }
        if let Some(j) = &mut self.journal {
            for (key, delta, report) in &deltas {
                let Some(vm) = self.vms.get(key) else {
                    continue;
                };
                let priced = out.as_ref().and_then(|o| {
                    o.rows
                        .iter()
                        .find(|r| r.vm.0 == vm.engine_id)
                        .map(|r| (r.balance, r.rate, r.cap))
                });
                let _ = j.write(&Row {
                    interval: self.interval,
                    vm: &vm.name,
                    vcpus: vm.vcpus,
                    cpu_pct: vm.cpu_pct,
                    mtus: delta.mtus,
                    bytes: delta.tx_bytes,
                    report: *report,
                    link_util: out.as_ref().map(|o| o.link_util),
                    weight: 1.0,
                    priced,
                    cap_set: set.get(&vm.engine_id).cloned(),
                });
            }
            if self.interval.is_multiple_of(1000) {
                let _ = j.flush();
            }
        }
    }

    fn snapshot(&mut self) {
        let now = Instant::now();
        let dt = now.duration_since(self.snap_at).as_secs_f64().max(1e-6);
        self.snap_at = now;
        let w = self.late_window.take_interval();
        if w.count > 0 {
            self.last_window = (
                w.p50_ns as f64 / 1000.0,
                w.p99_ns as f64 / 1000.0,
                w.max_ns as f64 / 1000.0,
            );
        }
        let mut vms = Vec::new();
        let mut host_mtus = 0.0;
        for (key, vm) in &self.vms {
            let total = vm.total();
            let cpu_now = vm.cpu_prev.map_or(0, |c| c.0);
            let (prev, cpu_prev) = self.snap_prev.get(key).copied().unwrap_or((total, cpu_now));
            let d = total - prev;
            let acc = self
                .engine
                .as_ref()
                .and_then(|e| e.account(VmId(vm.engine_id)));
            let interferer = acc.and_then(|a| a.interferer).and_then(|id| {
                self.vms
                    .values()
                    .find(|v| v.engine_id == id.0)
                    .map(|v| v.name.clone())
            });
            let mtus_per_s = d.mtus as f64 / dt;
            host_mtus += mtus_per_s;
            vms.push(VmSnap {
                id: VmId(vm.engine_id),
                name: vm.name.clone(),
                state: if vm.registrations > 0 {
                    "registered".into()
                } else if vm.rejections > 0 {
                    "rejected".into()
                } else {
                    "waiting".into()
                },
                vcpus: vm.vcpus,
                cpu_pct: cpu_now.saturating_sub(cpu_prev) as f64 / 1e9 / dt * 100.0,
                cap_pct: vm.cap,
                cap_mechanism: vm.cap_mechanism.clone(),
                cap_reason: vm.cap_reason.clone(),
                balance: acc.map(|a| a.balance),
                allotment: acc.map(|a| a.allotment),
                rate: acc.map(|a| a.rate),
                mtus_per_s,
                bytes_per_s: d.tx_bytes as f64 / dt,
                wqes_per_s: d.wqes as f64 / dt,
                lat_mean_us: vm.last_report.map(|r| r.mean_ns / 1000.0),
                lat_p50_us: vm.last_report.map(|r| r.p50_ns / 1000.0),
                lat_p99_us: vm.last_report.map(|r| r.p99_ns / 1000.0),
                intf_pct: acc.and_then(|a| a.intf),
                interferer,
                qps: vm.qps(),
                mtus_total: total.mtus,
                tx_bytes_total: total.tx_bytes,
                wqes_total: total.wqes,
                errors: total.errors,
                overruns: total.overruns,
                anomalies: total.anomalies,
                reports: vm.reports,
                lat_requests_total: vm.lat_totals.0,
                lat_sum_us: vm.lat_totals.1 / 1000.0,
                lat_p99_sum_us: vm.lat_totals.2 / 1000.0,
                bad_reports: vm.bad_reports,
                rejected_registrations: vm.rejections,
                last_error: vm.last_error.clone(),
            });
            self.snap_prev.insert(key.clone(), (total, cpu_now));
        }
        let epoch_progress = self.engine.as_ref().map_or(0.0, |e| {
            let per = e.config().intervals_per_epoch().max(1);
            (self.interval % per) as f64 / per as f64
        });
        let snap = Snapshot {
            uptime_ms: u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            host: HostSnap {
                backend: self.hv.kind().into(),
                policy: self.policy_name.clone(),
                interval_ms: self.tick_ms(),
                epoch_progress,
                link_util: self.last_util,
                mtus_per_s: host_mtus,
                tick_late_p50_us: self.last_window.0,
                tick_late_p99_us: self.last_window.1,
                tick_late_max_us: self.last_window.2,
                ticks: self.ticks,
                ticks_skipped: self.skipped,
                scan_us: self.scan_ns as f64 / 1000.0 / self.scan_ticks.max(1) as f64,
            },
            vms,
        };
        self.scan_ns = 0;
        self.scan_ticks = 0;
        *self.shared.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(snap);
    }
}

fn spec_of(vm: &Vm, d: Option<&DomainInfo>) -> VmSpec {
    let mut s = VmSpec::new(vm.engine_id, vm.name.clone(), vm.vcpus.max(1));
    s.baseline = vm.baseline;
    if let Some(d) = d {
        s.weight = d.weight;
        s.sla_threshold = d.sla_threshold;
    }
    s
}
