//! `resex demo`: the main job (the paper's pair in four phases on an embedded host with the
//! daemon, or `--lab` in virtual time). The run is `resex_demo`'s; here are its options, where
//! its logs go, what the terminal shows while it runs, and the table or JSON at the end.
//!
//! - [`view`]: the real-time run on the terminal: `resex top`'s dashboard, a plain table, or
//!   nothing (`--headless`).
//! - [`table`]: the closing table, the story's line and the host's.
//! - [`logs`]: the real-time run's logs into a file, warnings counted.

mod logs;
mod table;
mod view;

use anyhow::{anyhow, Result};
use clap::Args;
use resex_demo::live::LiveOptions;
use resex_demo::{Demo, DemoError, DemoReport};
use resex_embedded::cgroup::CapMode;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::OnceLock;

/// Options of `resex demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// No live table: run the phases and print the results.
    #[arg(long)]
    pub headless: bool,
    /// Total seconds, split evenly between the four phases.
    #[arg(long, default_value_t = 40.0)]
    pub duration: f64,
    /// Print the results as JSON.
    #[arg(long)]
    pub json: bool,
    /// Run the four phases in the lab's virtual time instead (deterministic for a seed, and
    /// the same on a busy or small machine: no guest processes, no daemon thread).
    #[arg(long)]
    pub lab: bool,
    /// With --lab: the seed of the guests' arrivals.
    #[arg(long, default_value_t = 1, requires = "lab")]
    pub seed: u64,
    /// Cap mechanism: auto, cgroup-v2, cgroup-v1 or sigstop.
    #[arg(long, default_value = "auto")]
    pub caps: CapMode,
    /// Run directory (default: a fresh one under /tmp, removed at exit).
    #[arg(long)]
    pub run_dir: Option<PathBuf>,
    /// Copy each guest's log (agent, server, clients) into DIR when it stops.
    #[arg(long, value_name = "DIR")]
    pub keep_logs: Option<PathBuf>,
    /// softhca polls every doorbell record every 2-20 us instead of waiting for the guests'
    /// doorbells (the design before doorbells; to compare what its port thread costs).
    #[arg(long, conflicts_with = "lab")]
    pub timer_polling: bool,
    /// Give softhca's port thread a cgroup of its own, weighing as much as all the guests (cgroup
    /// v1, as root): it is then never held up behind the guests' threads (see docs/guide.md).
    #[arg(long, conflicts_with = "lab")]
    pub port_cgroup: bool,
}

/// The real-time demo's log file, once [`log_to_file`] has set it up.
static LOG: OnceLock<logs::DemoLog> = OnceLock::new();

/// Sends this process's logs into a file: `resex-demo.log` in `--keep-logs DIR`, else
/// `resex-demo-PID.log` in the temporary directory (removed at the end when nothing at warning
/// level or above was logged). The filter is taken only when the file could be made.
pub fn log_to_file(
    a: &DemoArgs,
    filter: &mut Option<tracing_subscriber::EnvFilter>,
) -> std::io::Result<()> {
    let path = match &a.keep_logs {
        Some(d) => d.join("resex-demo.log"),
        None => std::env::temp_dir().join(format!("resex-demo-{}.log", std::process::id())),
    };
    let log = logs::DemoLog::init(&path, filter)?;
    let _ = LOG.set(log);
    Ok(())
}

fn log_summary(a: &DemoArgs) {
    if let Some(line) = LOG.get().and_then(|l| l.summary(a.keep_logs.is_none())) {
        eprintln!("{line}");
    }
}

/// Runs `resex demo`.
pub fn run(a: DemoArgs) -> Result<()> {
    let demo = Demo::new(a.duration).map_err(|e| match e {
        DemoError::TooShort { min, .. } => {
            anyhow!("--duration must be at least {min} seconds (one per phase)")
        }
        e => e.into(),
    })?;
    let report = if a.lab {
        lab(&demo, a.seed)?
    } else {
        let r = live(&a, &demo);
        log_summary(&a);
        r?
    };
    if a.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        table::print(&report);
    }
    Ok(())
}

/// The virtual-time run, its progress on stderr when that is a terminal.
fn lab(demo: &Demo, seed: u64) -> Result<DemoReport> {
    let tty = std::io::stderr().is_terminal();
    let report = resex_demo::lab::run(demo, seed, &mut |k, name, done, total| {
        if tty {
            let pct = 100 * done / total.max(1);
            eprint!("\rresex demo --lab: phase {name} ({}/4) {pct:>3}%", k + 1);
            let _ = std::io::stderr().flush();
        }
    })?;
    if tty {
        eprintln!("\r{:<60}", "resex demo --lab: done");
    }
    Ok(report)
}

/// The real-time run (SIGTERM and SIGINT stop it), shown on the terminal.
fn live(a: &DemoArgs, demo: &Demo) -> Result<DemoReport> {
    let stop = crate::host::stop_flag()?;
    let opts = LiveOptions {
        caps: a.caps,
        run_dir: a.run_dir.clone(),
        keep_logs: a.keep_logs.clone(),
        timer_polling: a.timer_polling,
        port_cgroup: a.port_cgroup,
        command: crate::host::guest_command()?,
        stop: stop.clone(),
    };
    let mut view = view::Terminal::new(a.headless, stop);
    Ok(resex_demo::live::run(demo, &opts, &mut view)?)
}
