//! `resex lab paper`: the ResEx paper's experiments in virtual time, one row per point.

use anyhow::{Context, Result};
use clap::Args;
use resex_lab::LabConfig;
use resex_scenario::Scenario;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;

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

pub fn paper(a: &PaperArgs) -> Result<()> {
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
        let text =
            std::fs::read_to_string(&path).map_err(|source| resex_lab::LabError::PolicyFile {
                path: path.clone(),
                source,
            })?;
        resex_pricing::PolicyConfig::from_toml(&text)
            .map_err(|source| resex_lab::LabError::Policy { path, source })
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
        for p in super::plot::paper(&rows, dir)? {
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
