//! `resex host --scenario FILE`: the embedded host (guest processes, softhca, caps), optionally
//! with the daemon in the same process.

use anyhow::{Context, Result};
use clap::Args;
use resex_backend::local::default_run_dir;
use resex_demo::embedded::EmbeddedDaemon;
use resex_embedded::cgroup::CapMode;
use resex_embedded::{EmbeddedHost, GuestCommand, HostConfig};
use resex_scenario::Scenario;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Options of `resex host`.
#[derive(Debug, Args)]
pub struct HostArgs {
    /// The scenario (tools/scenarios/*.toml).
    #[arg(long)]
    pub scenario: PathBuf,
    /// Seconds to run (default: the scenario's duration_s).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Cap mechanism: auto, cgroup-v2, cgroup-v1 or sigstop.
    #[arg(long, default_value = "auto")]
    pub caps: CapMode,
    /// Run directory (domain records, sockets); resexd --run-dir must match.
    #[arg(long)]
    pub run_dir: Option<PathBuf>,
    /// Also run the daemon in this process, with the scenario's policy (its API socket, state
    /// and the link's model in the run directory, as `resex demo` runs it).
    #[arg(long)]
    pub daemon: bool,
    /// Directory of policy files for a scenario's bare policy name.
    #[arg(long, default_value = "policies")]
    pub policies: PathBuf,
    /// Copy each guest's log (agent, server, clients) into DIR when it stops.
    #[arg(long, value_name = "DIR")]
    pub keep_logs: Option<PathBuf>,
}

/// How this binary starts guest programs: itself, as `resex agent` / `resex benchex`.
pub fn guest_command() -> Result<GuestCommand> {
    let program = std::env::current_exe().context("finding this program's path")?;
    Ok(GuestCommand {
        program,
        agent_prefix: vec!["agent".into()],
        benchex_prefix: vec!["benchex".into()],
    })
}

/// A host configuration for `run_dir` whose guests this binary runs (see
/// [`resex_demo::embedded::host_config`]).
pub fn host_config(
    run_dir: &Path,
    caps: CapMode,
    keep_logs: Option<PathBuf>,
    log_stalls: bool,
) -> Result<HostConfig> {
    Ok(resex_demo::embedded::host_config(
        run_dir,
        caps,
        keep_logs,
        log_stalls,
        guest_command()?,
    ))
}

/// A flag that SIGTERM and SIGINT set.
pub fn stop_flag() -> Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for s in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(s, stop.clone())?;
    }
    Ok(stop)
}

/// Loads a policy file named by a scenario.
pub fn scenario_policy(
    s: &Scenario,
    dir: &Path,
) -> Result<Option<resex_daemon::control::NamedPolicy>> {
    let Some(path) = s.policy_path(dir) else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("reading the scenario's policy {}", path.display()))?;
    let cfg = resex_pricing::PolicyConfig::from_toml(&text)
        .with_context(|| format!("policy {}", path.display()))?;
    Ok(Some((s.policy.clone().unwrap_or_default(), cfg)))
}

/// The embedded host alone, or with resexd in this process.
enum Node {
    Host(EmbeddedHost),
    WithDaemon(EmbeddedDaemon),
}

impl Node {
    fn host(&mut self) -> &mut EmbeddedHost {
        match self {
            Node::Host(h) => h,
            Node::WithDaemon(n) => &mut n.host,
        }
    }

    /// Stops the daemon (if any: every cap and limit it set put back), then the host.
    fn stop(self) {
        match self {
            Node::Host(mut h) => h.stop(),
            Node::WithDaemon(n) => {
                let s = n.stop();
                println!(
                    "daemon: {} ticks, lateness p50 {:.0} us p99 {:.0} us max {:.0} us",
                    s.ticks, s.late_p50_us, s.late_p99_us, s.late_max_us
                );
            }
        }
    }
}

/// Starts the host for `scenario`, with the daemon and the scenario's policy when `daemon`.
fn start_node(a: &HostArgs, scenario: &Scenario, run_dir: &Path) -> Result<Node> {
    let cfg = host_config(run_dir, a.caps, a.keep_logs.clone(), true)?;
    if !a.daemon {
        return Ok(Node::Host(EmbeddedHost::new(scenario, cfg)?));
    }
    let policy = scenario_policy(scenario, &a.policies)?;
    let node = EmbeddedDaemon::start(scenario, cfg, true)?;
    // Before any guest starts: the host starts with none.
    node.daemon.reload(policy);
    Ok(Node::WithDaemon(node))
}

/// Starts the guests that are due and checks the running ones, every 100 ms, for `duration`
/// seconds or until `stop`.
fn run_guests(
    host: &mut EmbeddedHost,
    scenario: &Scenario,
    duration: f64,
    stop: &AtomicBool,
) -> Result<()> {
    let start = Instant::now();
    while !stop.load(Ordering::Acquire) && start.elapsed().as_secs_f64() < duration {
        for n in host.start_due(scenario)? {
            if let Some(g) = host.guests().iter().find(|g| g.spec.name == n) {
                println!(
                    "started {n}: pid {}, caps by {}",
                    g.record.pid,
                    g.record.cap.describe()
                );
            }
        }
        host.check()?;
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

/// Runs `resex host`.
pub fn run(a: HostArgs) -> Result<()> {
    let scenario = Scenario::load(&a.scenario)?;
    let run_dir = a.run_dir.clone().unwrap_or_else(default_run_dir);
    let stop = stop_flag()?;
    let mut node = start_node(&a, &scenario, &run_dir)?;
    println!(
        "embedded host {} ({} guests); domains published in {}",
        node.host().host_id,
        scenario.guests.len(),
        resex_backend::local::domains_dir(&run_dir).display()
    );
    match &node {
        Node::WithDaemon(n) => println!(
            "resexd runs in this process: resex status --api {}",
            n.api_socket().display()
        ),
        Node::Host(_) => println!(
            "run the daemon with: resexd --backend local --run-dir {}",
            run_dir.display()
        ),
    }
    let duration = a.duration.unwrap_or(scenario.duration_s);
    let result = run_guests(node.host(), &scenario, duration, &stop);
    node.stop();
    result
}
