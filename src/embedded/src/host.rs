//! Starting, watching and stopping a scenario's guests.

// Float-to-integer conversions here are of measured, bounded quantities (ns, rates).
#![allow(clippy::cast_possible_truncation)]

use crate::cgroup::{CapMode, GuestCgroups, Mounts, PortCgroup, PortCgroupError};
use crate::error::io;
pub use crate::error::HostError;
use crate::sockets::{serve_admin, serve_control};

mod args;
use args::{agent_args, client_args};
use resex_backend::cap::signal;
use resex_backend::lever::Vf;
use resex_backend::local::{publish, DomainRecord};
use resex_guestmem::{FileMemory, GuestMemory};
use resex_scenario::{GuestSpec, Scenario};
use resex_softhca::{
    Clock, GuestPort, HcaThread, LinkConfig, MonotonicClock, PollOptions, PortId, PortSample,
    Priority, SoftHca, StallSummary, Uplink,
};

/// softhca's port thread's nice value when asked for (not `SCHED_FIFO`: see
/// `resex_softhca::PollOptions::nice`).
pub const HCA_NICE: i32 = -10;

/// With [`HostConfig::realtime`] (and cgroup v1), softhca's port thread has a cgroup of its own
/// beside the guests' that weighs as this many nice-0 tasks: as much as all the guests together
/// (see [`crate::cgroup::PortCgroup`]).
pub const PORT_WEIGHT: u32 = 8;

/// With [`HostConfig::realtime`], the host's guests and their clients together weigh as this
/// many nice-0 tasks against the rest of the machine (cgroup `cpu.shares`/`cpu.weight`): on a
/// 2-CPU machine beside one CPU hog they then keep what VMs with their own vCPUs would have.
pub const GUEST_GROUP_WEIGHT: u32 = 8;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How to start a guest's programs: `program prefix... ARGS`. The `resex` binary runs them as
/// `resex agent ...` and `resex benchex ...`, so a single binary is enough.
#[derive(Debug, Clone)]
pub struct GuestCommand {
    /// The executable.
    pub program: PathBuf,
    /// Arguments before the agent's.
    pub agent_prefix: Vec<String>,
    /// Arguments before benchex's.
    pub benchex_prefix: Vec<String>,
}

/// Host settings.
#[derive(Debug, Clone)]
pub struct HostConfig {
    /// Where domain records and sockets go.
    pub run_dir: PathBuf,
    /// Where guest RAM files go (`/dev/shm`).
    pub ram_dir: PathBuf,
    /// Cap mechanism.
    pub cap_mode: CapMode,
    /// Guest programs.
    pub command: GuestCommand,
    /// Agent report interval, ms.
    pub report_ms: u64,
    /// Where guest logs are copied when a guest stops (None: they are deleted with it).
    pub keep_logs: Option<PathBuf>,
    /// Raise the host's time-critical parts: softhca's port thread (nice -10) and the guests'
    /// cgroup ([`GUEST_GROUP_WEIGHT`]).
    pub realtime: bool,
    /// Log each second softhca's port thread was stalled (otherwise only count them:
    /// [`EmbeddedHost::hca_stalls`]).
    pub log_stalls: bool,
    /// softhca's port thread waits for the guests' doorbells (`resex_softhca::PollOptions`);
    /// false: it polls every doorbell record on a timer (the older design, for comparison).
    pub hca_doorbells: bool,
    /// With `realtime`: softhca's port thread gets a cgroup of its own ([`PORT_WEIGHT`], see
    /// [`crate::cgroup::PortCgroup`]). Off by default: it ends the port's hold-ups, and the
    /// demo's story then rests on the CPU interference alone (see docs/guide.md).
    pub port_cgroup: bool,
    /// When set, every guest's clients wait until this Unix time, ms, before their first order
    /// (jobs that start together).
    pub clients_start_unix_ms: Option<u64>,
    /// A link shared with other embedded hosts in this process (a rack's uplink): the guests'
    /// port sends across it (`resex_softhca::uplink`). None: the port's own link only.
    pub uplink: Option<Uplink>,
}

/// One process on the HCA: its RAM, its control socket server, the child.
struct Proc {
    name: String,
    child: Child,
    log: PathBuf,
    ram: PathBuf,
    port: GuestPort,
    stop: Arc<AtomicBool>,
    server: Option<std::thread::JoinHandle<()>>,
}

/// A running guest of the scenario.
pub struct RunningGuest {
    /// Its scenario entry.
    pub spec: GuestSpec,
    /// Domain id.
    pub id: u32,
    /// The published record.
    pub record: DomainRecord,
    record_path: PathBuf,
    server: Proc,
    clients: Option<Proc>,
    cgroups: Option<GuestCgroups>,
    client_cgroups: Option<GuestCgroups>,
    dir: PathBuf,
}

impl std::fmt::Debug for RunningGuest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RunningGuest({})", self.spec.name)
    }
}

/// The embedded host.
pub struct EmbeddedHost {
    /// This instance's name (`SCENARIO-PID`).
    pub host_id: String,
    cfg: HostConfig,
    hca: SoftHca,
    clock: Arc<MonotonicClock>,
    /// softhca's admin socket (the rate lever), its stop flag and its thread.
    admin: (
        PathBuf,
        Arc<AtomicBool>,
        Option<std::thread::JoinHandle<()>>,
    ),
    hca_thread: HcaThread,
    /// The port thread's own cgroup (after `hca_thread`: removed once the thread has exited),
    /// or why it has none.
    port_cgroup: Result<PortCgroup, PortCgroupError>,
    mounts: Mounts,
    guests: Vec<RunningGuest>,
    next_id: u32,
    started: Instant,
}

impl std::fmt::Debug for EmbeddedHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EmbeddedHost({})", self.host_id)
    }
}

/// The link a scenario asks for: its preset, with the rate and base latency overridden (the
/// scenario loader refuses unknown presets).
pub fn link_of(s: &Scenario) -> LinkConfig {
    LinkConfig::preset_with(&s.link.preset, s.link.gbps, s.link.base_latency_us).unwrap_or_default()
}

impl EmbeddedHost {
    /// Starts softhca for `scenario` (no guests yet: see [`Self::start_due`]).
    pub fn new(scenario: &Scenario, cfg: HostConfig) -> Result<Self, HostError> {
        if let Some(g) = scenario
            .guests
            .iter()
            .find(|g| g.report_scale != 1.0 || g.benchex.chunk.0 != 0 || g.turns.is_some())
        {
            return Err(HostError::LabOnly(g.name.clone()));
        }
        let host_id = format!("{}-{}", scenario.name, std::process::id());
        let hca = SoftHca::new(link_of(scenario), 2);
        let clock = Arc::new(MonotonicClock::new());
        if let Some(up) = &cfg.uplink {
            hca.set_uplink(Some((up.tap(clock.origin()), PortId(0))));
        }
        let thread = hca.spawn_with(
            clock.clone() as Arc<dyn Clock>,
            PollOptions {
                idle_sleep: Duration::from_micros(20),
                nice: cfg.realtime.then_some(HCA_NICE),
                log_stalls: cfg.log_stalls,
                doorbells: cfg.hca_doorbells,
            },
        );
        let dir = cfg.run_dir.join("local").join(&host_id);
        std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
        let admin = dir.join("hca-admin.sock");
        let admin_stop = Arc::new(AtomicBool::new(false));
        let admin_thread = serve_admin(&admin, hca.clone(), clock.clone(), admin_stop.clone())?;
        let mounts = Mounts::detect();
        mounts.remove_stale();
        let port_cgroup = Self::port_cgroup(&cfg, &mounts, &host_id, &thread);
        Ok(Self {
            host_id,
            cfg,
            hca,
            clock,
            admin: (admin, admin_stop, Some(admin_thread)),
            hca_thread: thread,
            port_cgroup,
            mounts,
            guests: Vec::new(),
            next_id: 1,
            started: Instant::now(),
        })
    }

    /// softhca's port thread's cgroup when asked for and the host runs real-time with cgroups.
    fn port_cgroup(
        cfg: &HostConfig,
        mounts: &Mounts,
        host_id: &str,
        thread: &HcaThread,
    ) -> Result<PortCgroup, PortCgroupError> {
        if !cfg.port_cgroup || !cfg.realtime || cfg.cap_mode == CapMode::Sigstop {
            return Err(PortCgroupError::NotAsked);
        }
        PortCgroup::for_thread(mounts, &format!("resex-{host_id}"), thread, PORT_WEIGHT)
    }

    /// Whether softhca's port thread has a cgroup of its own.
    pub fn has_port_group(&self) -> bool {
        self.port_cgroup.is_ok()
    }

    /// Where softhca's port thread runs: its own cgroup's weight, or why it has none.
    pub fn port_group(&self) -> String {
        match &self.port_cgroup {
            Ok(_) => format!("own cgroup, weight {PORT_WEIGHT}"),
            Err(e) => format!("no cgroup of its own: {e}"),
        }
    }

    /// The running guests.
    pub fn guests(&self) -> &[RunningGuest] {
        &self.guests
    }

    /// Starts every guest of `scenario` whose `start_s` has come and that is not running yet.
    pub fn start_due(&mut self, scenario: &Scenario) -> Result<Vec<String>, HostError> {
        let t = self.started.elapsed().as_secs_f64();
        let mut started = Vec::new();
        for g in &scenario.guests {
            if g.start_s <= t && !self.guests.iter().any(|r| r.spec.name == g.name) {
                self.start_guest(g)?;
                started.push(g.name.clone());
            }
        }
        Ok(started)
    }

    fn spawn_proc(
        &self,
        name: &str,
        dir: &Path,
        ram_bytes: u64,
        port: u16,
        prefix: &[String],
        args: &[String],
    ) -> Result<Proc, HostError> {
        let ram = self
            .cfg
            .ram_dir
            .join(format!("resex-{}-{name}.ram", self.host_id));
        let mem: Arc<dyn GuestMemory> = Arc::new(FileMemory::create(&ram, ram_bytes)?);
        let gp = self.hca.add_guest(mem, PortId(port));
        let sock = dir.join(format!("{name}-hca.sock"));
        let stop = Arc::new(AtomicBool::new(false));
        let server = serve_control(name, &sock, gp.clone(), stop.clone())?;
        let log = dir.join(format!("{name}.log"));
        let logf =
            std::fs::File::create(&log).map_err(io(format!("creating {}", log.display())))?;
        let errf = logf.try_clone().map_err(io("log file"))?;
        let mut cmd = Command::new(&self.cfg.command.program);
        // Every guest program takes its machine as `--ram FILE --hca SOCKET`.
        cmd.args(prefix)
            .arg("--ram")
            .arg(&ram)
            .arg("--hca")
            .arg(&sock)
            .args(args)
            .stdin(Stdio::null())
            .stdout(logf)
            .stderr(errf);
        // SAFETY: the closure runs in the forked child before exec and only makes two system
        // calls (prctl, setpriority) that neither allocate nor lock: the guest gets SIGTERM when the thread that started it (the
        // host's) goes away, so no guest outlives its host spinning on a vanished device.
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // Guests run at nice 0 whatever the host raised itself to (a raise is
                // inherited; lowering one's own priority is always allowed).
                if libc::setpriority(libc::PRIO_PROCESS, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().map_err(io(format!(
            "starting {}",
            self.cfg.command.program.display()
        )))?;
        Ok(Proc {
            name: name.to_owned(),
            child,
            log,
            ram,
            port: gp,
            stop,
            server: Some(server),
        })
    }

    /// From now on, the clients of the guests started wait until Unix time `at_ms` (None: no
    /// wait) before their first order.
    pub fn start_clients_at(&mut self, at_ms: Option<u64>) {
        self.cfg.clients_start_unix_ms = at_ms;
    }

    /// Starts one guest: its server process with the agent (port 0) and its clients (port 1).
    pub fn start_guest(&mut self, g: &GuestSpec) -> Result<(), HostError> {
        let dir = self
            .cfg
            .run_dir
            .join("local")
            .join(&self.host_id)
            .join(&g.name);
        std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
        let channel = dir.join("agent.sock");
        let bench = dir.join("bench.sock");
        let (channel_s, bench_s) = (channel.to_string_lossy(), bench.to_string_lossy());
        let agent_args = agent_args(g, &channel_s, &bench_s, self.cfg.report_ms);
        let server = self.spawn_proc(
            &g.name,
            &dir,
            g.ram.0,
            0,
            &self.cfg.command.agent_prefix,
            &agent_args,
        )?;
        let pid = server.child.id();
        // Its VF: its port in softhca's scheduler, with the scenario's own setting (the
        // domain's original, which a daemon saves and restores).
        let vport = server.port.guest();
        if !g.tx().is_none() {
            self.hca.set_tx_limit(vport, g.tx(), self.clock.now_ns());
        }
        let group = format!("resex-{}", self.host_id);
        let weight = self.cfg.realtime.then_some(GUEST_GROUP_WEIGHT);
        let cgroups = GuestCgroups::setup(
            &self.mounts,
            self.cfg.cap_mode,
            &group,
            &g.name,
            pid,
            weight,
        );
        tracing::info!("{}: pid {pid}, caps by {}", g.name, cgroups.cap.describe());
        set_scenario_cap(g, &cgroups);
        let (clients, client_cgroups) = self.start_clients(g, &dir, &bench_s, &group, weight)?;
        let id = self.next_id;
        self.next_id += 1;
        let record = DomainRecord {
            id,
            name: g.name.clone(),
            host: self.host_id.clone(),
            vcpus: g.vcpus,
            ram_file: server.ram.clone(),
            ram_size: g.ram.0,
            pid,
            cpu: cgroups.cpu.clone(),
            cap: cgroups.cap.clone(),
            channel,
            sla_threshold: g.sla_threshold,
            weight: g.weight,
            entitled_bps: g.entitlement().0,
            cpu_floor_pct: g.entitlement().1,
            vf: Some(Vf::Soft {
                socket: self.admin.0.clone(),
                vport: vport.0,
            }),
        };
        let record_path = publish(&self.cfg.run_dir, &record)?;
        self.guests.push(RunningGuest {
            spec: g.clone(),
            id,
            record,
            record_path,
            server,
            clients: Some(clients),
            cgroups: Some(cgroups),
            client_cgroups,
            dir,
        });
        Ok(())
    }

    /// Starts guest `g`'s BenchEx clients (port 1), serving `bench`. They stand for machines
    /// across the link. With a weighted group (`realtime`: `weight`) they join it, beside the
    /// guests and never capped, so a busy host delays them no more than the guests. Without one
    /// they stay in this process's cgroup: in an unweighted group the guests and their clients
    /// would together weigh as one task against everything else (a CI run's parallel tests
    /// starved such clients into timeouts).
    fn start_clients(
        &self,
        g: &GuestSpec,
        dir: &Path,
        bench: &str,
        group: &str,
        weight: Option<u32>,
    ) -> Result<(Proc, Option<GuestCgroups>), HostError> {
        let w = &g.benchex;
        let ram = (16 << 20) + 4 * (w.buffer.0 + 4096) * u64::from(w.clients);
        let mut prefix = self.cfg.command.benchex_prefix.clone();
        prefix.push("client".into());
        let name = format!("{}-clients", g.name);
        let args = client_args(w, bench, self.cfg.clients_start_unix_ms);
        let clients = self.spawn_proc(&name, dir, ram, 1, &prefix, &args)?;
        let cgroups = weight.map(|w| {
            GuestCgroups::setup(
                &self.mounts,
                self.cfg.cap_mode,
                group,
                &name,
                clients.child.id(),
                Some(w),
            )
        });
        Ok((clients, cgroups))
    }

    /// How often softhca's port thread was held up so far (see `resex_softhca::thread`).
    pub fn hca_stalls(&self) -> StallSummary {
        self.hca_thread.stalls()
    }

    /// softhca's port thread's CPU time and wake-ups now (`resex_softhca::PortSample::since`
    /// gives what a stretch cost).
    pub fn hca_sample(&self) -> PortSample {
        self.hca_thread.sample()
    }

    /// The priority softhca's port thread got (None until it has asked, or when
    /// [`HostConfig::realtime`] is off).
    pub fn hca_priority(&self) -> Option<Priority> {
        self.hca_thread.priority()
    }

    /// Checks that every guest still runs: a guest process that exited, or clients that
    /// failed, are an error (clients that sent their `count` orders exit successfully).
    pub fn check(&mut self) -> Result<(), HostError> {
        for g in &mut self.guests {
            let server = std::iter::once((&mut g.server, false));
            for (p, is_clients) in server.chain(g.clients.as_mut().map(|c| (c, true))) {
                if let Ok(Some(st)) = p.child.try_wait() {
                    if is_clients && st.success() {
                        continue;
                    }
                    return Err(HostError::GuestExited {
                        name: p.name.clone(),
                        status: st.to_string(),
                        log: p.log.display().to_string(),
                    });
                }
            }
        }
        Ok(())
    }

    /// Stops one guest and cleans up after it.
    pub fn stop_guest(&mut self, name: &str) {
        if let Some(i) = self.guests.iter().position(|g| g.spec.name == name) {
            let g = self.guests.remove(i);
            self.teardown(g);
        }
    }

    fn teardown(&self, mut g: RunningGuest) {
        let _ = std::fs::remove_file(&g.record_path);
        let mut procs: Vec<Proc> = g.clients.take().into_iter().collect();
        procs.push(g.server);
        // A guest stopped by a duty cycle must be continued to see SIGTERM.
        for p in &procs {
            signal(p.child.id(), libc::SIGCONT);
            signal(p.child.id(), libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(3);
        for p in &mut procs {
            while Instant::now() < deadline {
                if matches!(p.child.try_wait(), Ok(Some(_))) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            if !matches!(p.child.try_wait(), Ok(Some(_))) {
                let _ = p.child.kill();
                let _ = p.child.wait();
            }
            p.stop.store(true, Ordering::Release);
            if let Some(t) = p.server.take() {
                let _ = t.join();
            }
            self.hca.remove_guest(p.port.guest());
            let _ = std::fs::remove_file(&p.ram);
            if let Some(keep) = &self.cfg.keep_logs {
                let to = keep.join(format!("{}.log", p.name));
                let kept = std::fs::create_dir_all(keep).and_then(|()| std::fs::copy(&p.log, &to));
                if let Err(e) = kept {
                    tracing::warn!("keeping {}: {e}", p.log.display());
                }
            }
        }
        drop(g.client_cgroups.take());
        drop(g.cgroups.take());
        let _ = std::fs::remove_dir_all(&g.dir);
    }

    /// Stops every guest.
    pub fn stop(&mut self) {
        let guests = std::mem::take(&mut self.guests);
        for g in guests {
            self.teardown(g);
        }
        self.admin.1.store(true, Ordering::Release);
        if let Some(t) = self.admin.2.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.admin.0);
        let _ = std::fs::remove_dir(self.cfg.run_dir.join("local").join(&self.host_id));
    }
}

impl Drop for EmbeddedHost {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The scenario's fixed cap, if it sets one: the domain's own setting, which a daemon saves
/// and restores like any admin's cap.
fn set_scenario_cap(g: &GuestSpec, cgroups: &GuestCgroups) {
    if let Some(c) = g.cap {
        if let Err(e) = cgroups.cap.set(Some(c)) {
            tracing::warn!(
                "{}: the scenario's cap of {c}% could not be set: {e}",
                g.name
            );
        }
    }
}
