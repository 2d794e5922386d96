//! `resex lab run`: a scenario on a whole host in virtual time, deterministically.

use super::emit::emit;
use crate::host::scenario_policy;
use anyhow::{Context, Result};
use clap::Args;
use resex_lab::{LabConfig, LabHost, LabResult};
use resex_scenario::Scenario;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

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

pub fn run_one(a: &RunArgs) -> Result<()> {
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
        super::plot::series(&result, &path)?;
        eprintln!("lab: wrote {}", path.display());
        if !a.series {
            result.series = None;
        }
    }
    emit(a.json, &result, |out| table(out, &result))
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
