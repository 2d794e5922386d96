//! `resex lab run`: a scenario on a whole host in virtual time, deterministically.

use crate::host::scenario_policy;
use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use resex_lab::{LabConfig, LabHost, LabResult};
use resex_scenario::Scenario;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

/// `resex lab ...`
#[derive(Debug, Subcommand)]
pub enum LabCommand {
    /// Run a scenario in virtual time and print per-VM latency, throughput, CPU and caps.
    Run(RunArgs),
    /// Run the ResEx paper's experiments (Figs. 1, 3-9) and print one row per point.
    Paper(PaperArgs),
    /// Compare policies on the same scenarios: victim latency, work kept, convergence,
    /// oscillation.
    Compare(CompareArgs),
    /// The DRUM paper's simulations: ADMM vs dual decomposition against the certified optimum.
    Drum(crate::lab_drum::DrumArgs),
    /// The shim's transports in virtual time on a NIC model: status-byte vs sliding window
    /// (Figs. 10, 12-15, 18) and HiPower vs CPWR (one-to-one, broadcast, gather).
    Transport(crate::lab_transport::TransportArgs),
    /// Congestion compatibility of periodic (ML training) jobs: without a subcommand the
    /// paper's experiment on the fabric (fair, unfair, adaptive, priority); `detect` finds
    /// each VM's period, duty cycle and demand from the monitor's exact counts alone; `place`
    /// proposes which jobs share which link.
    Mlcompat(crate::lab_mlcompat::MlcompatArgs),
    /// Run a fabric scenario (several hosts, links, DCQCN, periodic jobs) in virtual time.
    Fabric(crate::lab_fabric::FabricArgs),
}

/// Options of `resex lab compare`.
#[derive(Debug, Args)]
pub struct CompareArgs {
    /// Scenarios (default: every .toml in tools/scenarios/compare, by name).
    pub scenarios: Vec<PathBuf>,
    /// Policies to compare: names under --policies or files.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "freemarket,ioshares-paper,ioshares,governor-cpu,governor"
    )]
    pub policy: Vec<String>,
    /// Directory of policy files.
    #[arg(long, default_value = "policies")]
    pub policies: PathBuf,
    /// Set every policy's `caps.floor_pct` to this (the same floor for all).
    #[arg(long, value_name = "PCT")]
    pub floor: Option<f64>,
    /// Virtual seconds per run.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The convergence band: the victim's mean within (1 + this) x its base.
    #[arg(long, default_value_t = 0.10)]
    pub within: f64,
    /// Print the rows as JSON.
    #[arg(long)]
    pub json: bool,
    /// Write the trade-off plot (victim latency against the aggressors' work kept, one point
    /// per policy and scenario) as DIR/tradeoff.svg.
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
    /// Also rerun each scenario under each policy with each guest's agent off, on and lying
    /// (3x its latency): what running the agent or lying gains a guest and costs the others
    /// (two more runs per guest and policy).
    #[arg(long)]
    pub gaming: bool,
}

/// Options of `resex lab paper`.
#[derive(Debug, Args)]
pub struct PaperArgs {
    /// Directory of the paper's scenarios.
    #[arg(long, default_value = "tools/scenarios/paper")]
    pub scenarios: PathBuf,
    /// The paper pair (the interferer starts at 2 s).
    #[arg(long, default_value = "tools/scenarios/paper-pair.toml")]
    pub pair: PathBuf,
    /// Directory of policy files.
    #[arg(long, default_value = "policies")]
    pub policies: PathBuf,
    /// Virtual seconds per run.
    #[arg(long, default_value_t = 6.0)]
    pub duration: f64,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print the rows as JSON.
    #[arg(long)]
    pub json: bool,
    /// Also write one SVG plot per figure into DIR.
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
}

/// Options of `resex lab run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The scenario (tools/scenarios/*.toml: the embedded host's format).
    pub scenario: PathBuf,
    /// Seed (the same seed and scenario give byte-identical output).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
    /// Policy: `none`, a file, or a name under --policies (default: the scenario's).
    #[arg(long)]
    pub policy: Option<String>,
    /// Directory of policy files.
    #[arg(long, default_value = "policies")]
    pub policies: PathBuf,
    /// Virtual seconds (default: the scenario's duration).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Step of the guest models, us (must divide 1 000).
    #[arg(long, default_value_t = 5)]
    pub dt_us: u64,
    /// Delay between a pricing decision and its cap, ms.
    #[arg(long, default_value_t = 0)]
    pub actuator_delay_ms: u64,
    /// Leave orders that arrived in the first SECONDS out of the latency figures.
    #[arg(long, value_name = "SECONDS", default_value_t = 0.0)]
    pub warmup: f64,
    /// Include the time series (one point per report period) in the JSON.
    #[arg(long)]
    pub series: bool,
    /// Write the run's time series as DIR/SCENARIO-POLICY.svg (latency, cap, throughput).
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
}

pub fn run(c: LabCommand) -> Result<()> {
    match c {
        LabCommand::Run(a) => run_one(&a),
        LabCommand::Paper(a) => paper(&a),
        LabCommand::Compare(a) => crate::lab_compare::compare(&a),
        LabCommand::Drum(a) => crate::lab_drum::drum(&a),
        LabCommand::Transport(a) => crate::lab_transport::transport(&a),
        LabCommand::Mlcompat(a) => crate::lab_mlcompat::run(&a),
        LabCommand::Fabric(a) => crate::lab_fabric::run(&a),
    }
}

fn paper(a: &PaperArgs) -> Result<()> {
    let load = |p: PathBuf| Scenario::load(&p).with_context(|| format!("{}", p.display()));
    let sc = resex_lab::paper::PaperScenarios {
        alone: load(a.scenarios.join("alone.toml"))?,
        interfered: load(a.scenarios.join("interfered.toml"))?,
        pair: load(a.pair.clone())?,
        same: load(a.scenarios.join("64k-64k.toml"))?,
        slow: load(a.scenarios.join("slow-2m.toml"))?,
    };
    let dir = a.policies.clone();
    let policy = move |name: &str| -> Result<resex_pricing::PolicyConfig, resex_lab::LabError> {
        let path = dir.join(format!("{name}.toml"));
        let text = std::fs::read_to_string(&path)
            .map_err(|e| resex_lab::LabError::Invalid(format!("{}: {e}", path.display())))?;
        resex_pricing::PolicyConfig::from_toml(&text)
            .map_err(|e| resex_lab::LabError::Invalid(format!("{}: {e}", path.display())))
    };
    let base = LabConfig {
        seed: a.seed,
        duration_s: Some(a.duration),
        ..LabConfig::default()
    };
    let tty = std::io::stderr().is_terminal();
    let rows = resex_lab::paper::run(&sc, &base, &policy, |fig, case| {
        if tty {
            eprint!("\r\x1b[Klab paper: Fig. {fig}: {case}");
        }
    })?;
    if tty {
        eprintln!();
    }
    if let Some(dir) = &a.plot {
        for p in crate::lab_plot::paper(&rows, dir)? {
            eprintln!("wrote {}", p.display());
        }
    }
    let mut out = std::io::stdout().lock();
    if a.json {
        serde_json::to_writer_pretty(&mut out, &rows)?;
        writeln!(out)?;
        return Ok(());
    }
    let o = |x: Option<f64>, p: usize| x.map_or("-".to_owned(), |v| format!("{v:.p$}"));
    writeln!(
        out,
        "{:<5} {:<40} {:<10} {:>10} {:>10} {:>10} {:>8} {:>12}  queued/compute/wait us",
        "fig", "case", "policy", "mean us", "p99 us", "other Mb/s", "cap %", "min balance",
    )?;
    for r in &rows {
        writeln!(
            out,
            "{:<5} {:<40} {:<10} {:>10} {:>10} {:>10} {:>8} {:>12}  {}",
            r.figure,
            r.case,
            r.policy,
            o(r.victim_mean_us, 1),
            o(r.victim_p99_us, 1),
            o(r.other_mbps, 0),
            o(r.other_cap_mean, 1),
            o(r.other_balance_min, 0),
            r.split_us
                .map_or("-".to_owned(), |[q, c, w]| format!("{q:.1}/{c:.1}/{w:.1}"))
        )?;
    }
    Ok(())
}

fn run_one(a: &RunArgs) -> Result<()> {
    let mut scenario = Scenario::load(&a.scenario)?;
    let policy = match a.policy.as_deref() {
        Some("none") => None,
        Some(p) => {
            scenario.policy = Some(p.to_owned());
            scenario_policy(&scenario, &a.policies)?
        }
        None => scenario_policy(&scenario, &a.policies)?,
    };
    let cfg = LabConfig {
        seed: a.seed,
        dt_ns: a.dt_us * 1000,
        actuator_delay_ns: a.actuator_delay_ms * 1_000_000,
        policy,
        duration_s: a.duration,
        warmup_s: a.warmup,
        series: a.series || a.plot.is_some(),
        ..LabConfig::default()
    };
    if !(a.warmup.is_finite() && a.warmup >= 0.0) {
        anyhow::bail!("--warmup must be a number of seconds >= 0");
    }
    let host = LabHost::new(&scenario, cfg).context("building the lab host")?;
    let tty = std::io::stderr().is_terminal();
    let result = host.run(|done, total| {
        if tty {
            eprint!(
                "\rlab: {}/{} intervals ({}%)",
                done,
                total,
                done * 100 / total.max(1)
            );
        }
    })?;
    if tty {
        eprintln!();
    }
    let mut result = result;
    if let Some(dir) = &a.plot {
        // A policy given as a path is named by its file's stem.
        let policy = Path::new(&result.policy).file_stem().map_or_else(
            || result.policy.clone(),
            |s| s.to_string_lossy().into_owned(),
        );
        let path = dir.join(format!("{}-{policy}.svg", result.scenario));
        crate::lab_plot::series(&result, &path)?;
        eprintln!("lab: wrote {}", path.display());
        if !a.series {
            result.series = None;
        }
    }
    emit(a.json, &result, |out| table(out, &result))
}

/// Prints `v` as pretty JSON, or through `table`; a closed pipe (`| head` had enough) is no
/// error.
pub fn emit<T: serde::Serialize>(
    json: bool,
    v: &T,
    table: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<()> {
    let mut out = std::io::stdout().lock();
    let written = if json {
        serde_json::to_writer_pretty(&mut out, v)
            .map_err(std::io::Error::from)
            .and_then(|()| writeln!(out))
    } else {
        table(&mut out)
    };
    match written {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => Ok(r?),
    }
}

fn table(out: &mut dyn Write, r: &LabResult) -> std::io::Result<()> {
    let o = |x: Option<f64>| x.map_or("-".to_owned(), |v| format!("{v:.1}"));
    writeln!(
        out,
        "scenario {}  policy {}  seed {}  {} s virtual  link {:.0}%",
        r.scenario,
        r.policy,
        r.seed,
        r.duration_s,
        r.host.link_util * 100.0
    )?;
    writeln!(
        out,
        "{:<14} {:>10} {:>10} {:>10} {:>10} {:>9} {:>9} {:>7} {:>7} {:>7} {:>12}",
        "vm",
        "mean us",
        "p50 us",
        "p99 us",
        "p99.9 us",
        "requests",
        "Mb/s",
        "cpu %",
        "cap %",
        "min cap",
        "min balance"
    )?;
    for v in &r.vms {
        writeln!(
            out,
            "{:<14} {:>10} {:>10} {:>10} {:>10} {:>9} {:>9.0} {:>7.1} {:>7.1} {:>7.1} {:>12}",
            v.name,
            o(v.lat_mean_us),
            o(v.lat_p50_us),
            o(v.lat_p99_us),
            o(v.lat_p999_us),
            v.requests,
            v.tx_mbps,
            v.cpu_pct_mean,
            v.cap_mean,
            v.cap_min,
            v.balance_min.map_or("-".into(), |b| format!("{b:.0}"))
        )?;
    }
    Ok(())
}
