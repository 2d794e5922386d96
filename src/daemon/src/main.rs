//! `resexd`: the resex host daemon. See `resexd --help` and the README.

use anyhow::{bail, Context, Result};
use clap::Parser;
use resex_backend::local::LocalBackend;
use resex_backend::Hypervisor;
use resex_daemon::config::Config;
use resex_daemon::control::{restore_stale, NamedPolicy, Settings};
use resex_ibmon::registry::Limits;
use resex_pricing::PolicyConfig;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The resex host daemon: monitors every guest's RDMA rings, prices CPU and I/O in Resos under a
/// policy, and enforces it with CPU caps. SIGHUP reloads the policy; SIGTERM and SIGINT restore
/// every cap and exit.
#[derive(Debug, Parser)]
#[command(name = "resexd", version, about)]
struct Cli {
    /// Configuration file (TOML; see tools/resexd.toml).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Backend: local (the embedded host), kvm or xen.
    #[arg(long)]
    backend: Option<String>,
    /// Policy file (policies/*.toml).
    #[arg(long, conflicts_with = "no_policy")]
    policy: Option<PathBuf>,
    /// Monitor only: no pricing caps, whatever the config says.
    #[arg(long)]
    no_policy: bool,
    /// The local backend's run directory.
    #[arg(long)]
    run_dir: Option<PathBuf>,
    /// The kvm backend's libvirt URI (default qemu:///system).
    #[arg(long, value_name = "URI")]
    connect: Option<String>,
    /// Where original cap settings are recorded.
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// The API socket.
    #[arg(long)]
    api: Option<PathBuf>,
    /// Journal file (CSV, the trace format of `resex price replay` plus caps).
    #[arg(long)]
    journal: Option<PathBuf>,
    /// Serve Prometheus metrics at http://ADDR/metrics (e.g. 127.0.0.1:9464).
    #[arg(long, value_name = "ADDR")]
    metrics: Option<String>,
    /// Only put back every cap a previous run left, then exit.
    #[arg(long)]
    restore: bool,
    /// Exit after this many seconds (restoring caps).
    #[arg(long)]
    duration: Option<f64>,
    /// Join a fleet through etcd at these client URLs (comma-separated; the `[fleet]` section's
    /// `endpoints`). Needs a build with `--features fleet`.
    #[arg(long, value_name = "URLS", value_delimiter = ',')]
    fleet: Vec<String>,
    /// This host's name in the fleet (default: the machine's host name).
    #[arg(long, value_name = "NAME")]
    fleet_host: Option<String>,
    /// The fleet lease's TTL, seconds.
    #[arg(long, value_name = "S")]
    fleet_ttl: Option<i64>,
}

/// Joins the fleet when `[fleet]` is set: registers under a lease and publishes the daemon's
/// summaries from its own thread; resexd runs on its local policy whatever etcd does.
#[cfg(feature = "fleet")]
fn join_fleet(
    cfg: &Config,
    d: &resex_daemon::control::DaemonHandle,
) -> Result<Option<resex_fleet::etcd::Member>> {
    use resex_fleet::etcd::{unix_ms, Fleet, Member};
    let Some(f) = cfg.fleet.clone() else {
        return Ok(None);
    };
    let host = f.host_name()?;
    if let Err(e) = Fleet::connect(&f) {
        tracing::warn!("fleet: {e}; running on the local policy, joining when etcd answers");
    }
    let record = resex_fleet::HostRecord {
        host: host.clone(),
        pid: std::process::id(),
        started_unix_ms: unix_ms(),
        metrics: d.metrics_addr().map(|a| a.to_string()),
        backend: cfg.backend.clone(),
        version: env!("CARGO_PKG_VERSION").into(),
    };
    let snap = d.snapshots();
    // The coordinator's allocation for this host: ceilings over the local policy until it
    // lapses; lifted at once when the fleet is lost.
    let on_alloc = d.fleet_sink();
    let m = Member::spawn_with(
        f,
        record,
        {
            let mut rates = resex_fleet::PeriodRates::default();
            move || rates.summary(&host, &snap(), unix_ms())
        },
        on_alloc,
    )?;
    Ok(Some(m))
}

#[cfg(not(feature = "fleet"))]
fn join_fleet(cfg: &Config, _d: &resex_daemon::control::DaemonHandle) -> Result<Option<()>> {
    if cfg.fleet.is_some() {
        bail!("{}", resex_daemon::config::NO_FLEET);
    }
    Ok(None)
}

fn load_policy(path: &Path) -> Result<NamedPolicy> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let cfg =
        PolicyConfig::from_toml(&text).with_context(|| format!("policy {}", path.display()))?;
    if let Some(line) = cfg.unguarded() {
        tracing::warn!("{}: {line}", path.display());
    }
    let name = path
        .file_stem()
        .map_or_else(|| "policy".into(), |s| s.to_string_lossy().into_owned());
    Ok((name, cfg))
}

fn backend(cfg: &Config) -> Result<Arc<dyn Hypervisor>> {
    match cfg.backend.as_str() {
        "local" => Ok(Arc::new(LocalBackend::new(&cfg.run_dir()))),
        #[cfg(feature = "libvirt")]
        "kvm" => Ok(Arc::new(resex_backend::kvm::KvmBackend::connect(&cfg.connect)?)),
        #[cfg(not(feature = "libvirt"))]
        "kvm" => bail!("the kvm backend is not in this build: rebuild resexd with `--features libvirt` (Debian: libvirt-dev)"),
        #[cfg(feature = "xen")]
        "xen" => Ok(Arc::new(resex_backend::xen::XenBackend::new(
            resex_backend::xen::RealXen::open()?,
        ))),
        #[cfg(not(feature = "xen"))]
        "xen" => bail!("the xen backend is not in this build: rebuild resexd with `--features xen` (Debian: libxen-dev, libclang-dev)"),
        other => bail!("unknown backend `{other}` (local, kvm, xen)"),
    }
}

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let cfg = configure(&cli)?;
    let hv = backend(&cfg)?;
    if cli.restore {
        let (restored, forgotten, failed) = restore_stale(hv.clone(), &cfg)?;
        println!(
            "restored {restored} caps and transmit limits; forgot {forgotten} for domains that are gone"
        );
        if !failed.is_empty() {
            bail!("could not restore: {}", failed.join("; "));
        }
        return Ok(());
    }
    run(&cli, &cfg, hv)
}

/// The configuration file (or the defaults) with the command line's settings over it.
fn configure(cli: &Cli) -> Result<Config> {
    let mut cfg = match &cli.config {
        Some(p) => Config::load(p)?,
        None => Config::default(),
    };
    let set = |slot: &mut Option<PathBuf>, v: &Option<PathBuf>| {
        if let Some(v) = v {
            *slot = Some(v.clone());
        }
    };
    if let Some(b) = &cli.backend {
        cfg.backend = b.clone();
    }
    set(&mut cfg.policy, &cli.policy);
    if cli.no_policy {
        cfg.policy = None;
    }
    set(&mut cfg.run_dir, &cli.run_dir);
    if let Some(u) = &cli.connect {
        cfg.connect = u.clone();
    }
    set(&mut cfg.state_dir, &cli.state_dir);
    set(&mut cfg.api_socket, &cli.api);
    set(&mut cfg.journal, &cli.journal);
    if let Some(m) = &cli.metrics {
        cfg.metrics = Some(m.clone());
    }
    fleet_flags(cli, &mut cfg)?;
    Ok(cfg)
}

/// `--fleet`, `--fleet-host` and `--fleet-ttl` over the `[fleet]` section, checked.
#[cfg(feature = "fleet")]
fn fleet_flags(cli: &Cli, cfg: &mut Config) -> Result<()> {
    if !cli.fleet.is_empty() {
        let mut f = cfg
            .fleet
            .take()
            .unwrap_or_else(|| resex_fleet::FleetConfig::new(Vec::new()));
        f.endpoints = cli.fleet.clone();
        cfg.fleet = Some(f);
    }
    if cfg.fleet.is_none() && (cli.fleet_host.is_some() || cli.fleet_ttl.is_some()) {
        bail!("--fleet-host and --fleet-ttl need --fleet URLS (or a [fleet] section)");
    }
    if let Some(f) = cfg.fleet.as_mut() {
        if let Some(h) = &cli.fleet_host {
            f.host = Some(h.clone());
        }
        if let Some(t) = cli.fleet_ttl {
            f.ttl_s = t;
        }
        f.validate().context("[fleet]")?;
    }
    Ok(())
}

/// Without the fleet, `--fleet` and its settings are refused in one line.
#[cfg(not(feature = "fleet"))]
fn fleet_flags(cli: &Cli, _: &mut Config) -> Result<()> {
    if !cli.fleet.is_empty() || cli.fleet_host.is_some() || cli.fleet_ttl.is_some() {
        bail!("{}", resex_daemon::config::NO_FLEET);
    }
    Ok(())
}

/// Runs the daemon until a signal (or `--duration`): SIGHUP reloads the policy file.
fn run(cli: &Cli, cfg: &Config, hv: Arc<dyn Hypervisor>) -> Result<()> {
    let policy = cfg.policy.as_deref().map(load_policy).transpose()?;
    let settings = Settings {
        cfg: cfg.clone(),
        policy,
        limits: Limits::default(),
    };
    let term = Arc::new(AtomicBool::new(false));
    let hup = Arc::new(AtomicBool::new(false));
    for s in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(s, term.clone())?;
    }
    signal_hook::flag::register(signal_hook::consts::SIGHUP, hup.clone())?;
    let d = resex_daemon::start(settings, hv)?;
    tracing::info!(
        "resexd running: backend {}, API {}, state {}",
        cfg.backend,
        cfg.api_socket().display(),
        cfg.state_dir().display()
    );
    let member = join_fleet(cfg, &d)?;
    let start = Instant::now();
    while !term.load(Ordering::Acquire) && d.running() {
        if cli
            .duration
            .is_some_and(|s| start.elapsed().as_secs_f64() >= s)
        {
            break;
        }
        if hup.swap(false, Ordering::AcqRel) {
            match cfg.policy.as_deref().map(load_policy).transpose() {
                Ok(p) => {
                    tracing::info!("SIGHUP: policy reloaded");
                    d.reload(p);
                }
                Err(e) => tracing::error!("SIGHUP: keeping the current policy: {e:#}"),
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // Leave first: the lease is revoked, another host takes the coordinator's role at once.
    #[cfg(feature = "fleet")]
    if let Some(m) = member {
        m.leave();
    }
    #[cfg(not(feature = "fleet"))]
    let _ = member;
    let s = d.stop();
    tracing::info!(
        "stopped after {} ticks: lateness p50 {:.0} us, p99 {:.0} us, max {:.0} us; {} caps restored, {} transmit limits restored",
        s.ticks,
        s.late_p50_us,
        s.late_p99_us,
        s.late_max_us,
        s.restored,
        s.restored_tx
    );
    Ok(())
}
