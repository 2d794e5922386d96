//! `resex lab mlcompat` (no subcommand): the paper's experiment on the lab fabric. Each group
//! of jobs shares one 50 Gb/s bottleneck under fair DCQCN, static unfairness, the adaptive
//! scheme and strict priority (`resex_fabric::paper`); one row per group, as text or JSON
//! lines, and the bottleneck's utilisation per job (the paper's Fig. 2) as SVG. With
//! `--lab-hosts` each of the four hosts is a whole lab host (`resex_lab::fabric`).

use anyhow::{bail, Result};
use clap::Args;
use resex_fabric::paper::{group_with, table1, PaperConfig, Scheme};
use resex_fabric::RunOptions;
use resex_lab::fabric::{run_on_hosts, HostsOptions};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;

/// Options of `resex lab mlcompat` without a subcommand.
#[derive(Debug, Args)]
pub struct ExperimentArgs {
    /// Groups to run, jobs joined by `+` (e.g. `--group dlrm+dlrm`); default: Fig. 1's two
    /// VGG19 jobs and Table 1's groups.
    #[arg(long = "group", value_name = "JOBS")]
    pub groups: Vec<String>,
    /// Iterations of the slowest job alone to run each scheme for.
    #[arg(long, default_value_t = 30)]
    pub iterations: u64,
    /// Iterations left out of each mean (the sliding happens in those).
    #[arg(long, default_value_t = 5)]
    pub warmup: usize,
    /// The adaptive scheme's gain: R_AI (1 + GAIN x progress); the paper's rule is 1.
    #[arg(long, default_value_t = resex_fabric::paper::ADAPTIVE_GAIN)]
    pub adaptive_gain: f64,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print one JSON row per group.
    #[arg(long)]
    pub json: bool,
    /// Write each group's bottleneck utilisation per job (the paper's Fig. 2) as SVG into DIR.
    #[arg(long, value_name = "DIR")]
    pub svg: Option<PathBuf>,
    /// Run every host as a whole lab host (real rings, softhca, the monitor, the host core)
    /// instead of the fluid model of its NIC: about 1 s of wall per virtual second.
    #[arg(long)]
    pub lab_hosts: bool,
}

/// `a/b/c` with `decimals` places, `-` for a job without enough iterations.
fn fmt(v: &[f64], decimals: usize) -> String {
    v.iter()
        .map(|x| {
            if x.is_finite() {
                format!("{x:.decimals$}")
            } else {
                "-".into()
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// Runs the experiment.
pub fn run(a: &ExperimentArgs) -> Result<()> {
    let cfg = config(a)?;
    if !a.json {
        print_header(a);
    }
    let mut out = std::io::stdout().lock();
    for g in &groups(a) {
        let jobs: Vec<&str> = g.iter().map(String::as_str).collect();
        if jobs.len() < 2 {
            bail!(
                "--group {}: a group needs two or more jobs joined by +",
                g.join("+")
            );
        }
        let (row, runs) = run_group(a, &cfg, &jobs)?;
        if a.json {
            writeln!(out, "{}", serde_json::to_string(&row)?)?;
        } else {
            writeln!(
                out,
                "{:<26} {:>5}  {:>14} {:>14} {:>14} {:>14} {:>14}  {:>11} {:>11}",
                g.join("+"),
                row.compat_score.map_or("-".into(), |s| format!("{s:.2}")),
                fmt(&row.alone_ms, 0),
                fmt(&row.fair_iter_ms, 0),
                fmt(&row.unfair_iter_ms, 0),
                fmt(&row.adaptive_iter_ms, 0),
                fmt(&row.priority_iter_ms, 0),
                fmt(&row.unfair_speedup, 2),
                fmt(&row.adaptive_speedup, 2),
            )?;
        }
        if let Some(dir) = &a.svg {
            let path = dir.join(format!("{}.svg", g.join("+")));
            let labelled: Vec<(String, &resex_fabric::FabricResult)> = Scheme::ALL
                .iter()
                .zip(&runs)
                .map(|(s, r)| (format!("{s:?}"), r))
                .collect();
            let window = row.alone_ms.iter().copied().fold(0.0, f64::max) * 6.0;
            super::mlcompat_plot::utilisation(&labelled, window, &path)?;
            if !a.json {
                writeln!(out, "  wrote {}", path.display())?;
            }
        }
    }
    Ok(())
}

/// The experiment's configuration from the options (iterations above the warm-up).
fn config(a: &ExperimentArgs) -> Result<PaperConfig> {
    let mut cfg = PaperConfig {
        iterations: a.iterations,
        warmup: a.warmup,
        seed: a.seed,
        ..PaperConfig::default()
    };
    cfg.dcqcn.adaptive_gain = a.adaptive_gain;
    if a.iterations <= a.warmup as u64 || a.iterations > 100_000 {
        bail!(
            "--iterations {} must be above --warmup {} (and at most 100000)",
            a.iterations,
            a.warmup
        );
    }
    Ok(cfg)
}

/// The groups of jobs: --group's, or the paper's Table 1.
fn groups(a: &ExperimentArgs) -> Vec<Vec<String>> {
    if a.groups.is_empty() {
        table1()
            .into_iter()
            .map(|g| g.into_iter().map(String::from).collect())
            .collect()
    } else {
        a.groups
            .iter()
            .map(|g| g.split('+').map(|s| s.trim().to_string()).collect())
            .collect()
    }
}

/// What the table shows, and its header.
fn print_header(a: &ExperimentArgs) {
    println!(
        "jobs on one 50 Gb/s bottleneck{}: mean iteration (ms) after {} warm-up \
         iterations; speed-up = fair / scheme; adaptive = R_AI (1 + {} x progress)",
        if a.lab_hosts {
            ", every host a lab host"
        } else {
            ""
        },
        a.warmup,
        a.adaptive_gain
    );
    println!(
        "{:<26} {:>5}  {:>14} {:>14} {:>14} {:>14} {:>14}  {:>11} {:>11}",
        "jobs",
        "score",
        "alone",
        "fair",
        "unfair",
        "adaptive",
        "priority",
        "unfair x",
        "adaptive x"
    );
}

/// One group under every scheme (fluid, or with --lab-hosts every host a lab host).
fn run_group(
    a: &ExperimentArgs,
    cfg: &PaperConfig,
    jobs: &[&str],
) -> Result<(resex_fabric::paper::Row, Vec<resex_fabric::FabricResult>)> {
    let tty = a.lab_hosts && std::io::stderr().is_terminal();
    group_with(jobs, cfg, |spec| -> Result<_> {
        if !a.lab_hosts {
            return Ok(resex_fabric::run(spec, &RunOptions::default())?);
        }
        let h = run_on_hosts(
            spec,
            &RunOptions::default(),
            &HostsOptions::default(),
            |n, e| {
                if tty && e > 0 {
                    eprint!("\r  {}: {:>3}%", spec.name, n * 100 / e);
                }
            },
        )?;
        if tty {
            eprint!("\r{:60}\r", "");
        }
        Ok(h.fabric)
    })
}
