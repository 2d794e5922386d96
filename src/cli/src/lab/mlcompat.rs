//! `resex lab mlcompat detect`: runs a scenario in the lab (monitor only) and finds each VM's
//! period, communication duty cycle and demand from the monitor's exact bytes per interval
//! alone (`resex_mlcompat::detect`), beside the VM's own iteration time as the lab knows it,
//! then how compatible the periodic ones are on the port (`resex_mlcompat::compatibility`: the
//! circle, as they run and at the best rotation).

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use resex_lab::{LabConfig, LabHost, LabResult};
use resex_mlcompat::{
    compatibility, detect, CircleConfig, Compatibility, DetectConfig, Job, Periodicity,
};
use resex_scenario::Scenario;
use serde::Serialize;
use std::path::PathBuf;

/// `resex lab mlcompat [...]`: without a subcommand, the paper's experiment.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct MlcompatArgs {
    #[command(subcommand)]
    pub cmd: Option<MlcompatCmd>,
    #[command(flatten)]
    pub experiment: super::mlcompat_paper::ExperimentArgs,
}

/// The congestion-compatibility tools.
#[derive(Debug, Subcommand)]
pub enum MlcompatCmd {
    /// Find each VM's period, duty cycle and demand from its traffic alone (no guest help).
    Detect(DetectArgs),
    /// Advise which jobs should share which link (compatible ones together), vs round-robin.
    Place(super::mlcompat_place::PlaceArgs),
}

/// Options of `resex lab mlcompat detect`.
#[derive(Debug, Args)]
pub struct DetectArgs {
    /// The scenario (e.g. tools/scenarios/periodic-pair.toml).
    pub scenario: PathBuf,
    /// Virtual seconds (default: the scenario's duration).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print the rows as JSON.
    #[arg(long)]
    pub json: bool,
    /// Also write every VM's bytes per interval (what the detector saw) as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub traffic: Option<PathBuf>,
}

/// What `detect --json` prints.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// One row per VM.
    pub vms: Vec<Row>,
    /// The periodic VMs, in the order of `compatibility.shifts_ns`.
    pub jobs: Vec<String>,
    /// How compatible they are on the port (two or more periodic VMs; `None` otherwise).
    pub compatibility: Option<Compatibility>,
    /// Why there is no compatibility figure although two or more VMs are periodic.
    pub compatibility_error: Option<String>,
}

/// One VM's row.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Row {
    /// The VM.
    pub vm: String,
    /// Its iteration time as the lab measured it (its run over the orders it answered), ms.
    pub iteration_ms: Option<f64>,
    /// The period found in its traffic, ms (`None`: not periodic, see `why`).
    pub period_ms: Option<f64>,
    /// `period_ms / iteration_ms - 1`.
    pub period_error: Option<f64>,
    /// Fraction of the intervals in which it posted (a lower bound on its time on the wire:
    /// the monitor counts a WRITE when it is posted).
    pub duty: Option<f64>,
    /// Bytes it sends per iteration.
    pub bytes_per_period: Option<f64>,
    /// Fraction of each iteration its bytes need on the link alone (bytes per iteration at
    /// the link's rate over the period).
    pub wire_duty: Option<f64>,
    /// Its rate while communicating, Mb/s.
    pub demand_mbps: Option<f64>,
    /// The detector's confidence, 0-1.
    pub confidence: Option<f64>,
    /// Why no period was found.
    pub why: Option<String>,
}

pub fn run(a: &MlcompatArgs) -> Result<()> {
    match &a.cmd {
        None => super::mlcompat_paper::run(&a.experiment),
        Some(MlcompatCmd::Detect(d)) => detect_cmd(d),
        Some(MlcompatCmd::Place(p)) => super::mlcompat_place::run(p),
    }
}

fn detect_cmd(a: &DetectArgs) -> Result<()> {
    let s = Scenario::load(&a.scenario)
        .with_context(|| format!("scenario {}", a.scenario.display()))?;
    let cfg = LabConfig {
        seed: a.seed,
        duration_s: a.duration,
        traffic: true,
        ..LabConfig::default()
    };
    let r = LabHost::new(&s, cfg)?.run(|_, _| {})?;
    if let Some(path) = &a.traffic {
        std::fs::write(path, serde_json::to_string(&r.traffic)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    let bits = resex_lab::link_of(&s).bits_per_sec;
    let (rows, found) = rows(&r, bits);
    let names: Vec<String> = found.iter().map(|(n, _)| n.clone()).collect();
    #[allow(clippy::cast_precision_loss)]
    let link_bytes = bits as f64 / 8.0;
    let jobs: Vec<Job> = found
        .iter()
        .map(|(_, p)| Job::from_periodicity(p, link_bytes))
        .collect();
    let (compat, compat_err) = if jobs.len() >= 2 {
        match compatibility(&jobs, &CircleConfig::default()) {
            Ok(c) => (Some(c), None),
            Err(e) => (None, Some(e.to_string())),
        }
    } else {
        (None, None)
    };
    if a.json {
        let report = Report {
            vms: rows,
            jobs: names,
            compatibility: compat,
            compatibility_error: compat_err,
        };
        println!("{}", serde_json::to_string(&report)?);
        return Ok(());
    }
    println!(
        "scenario {}  seed {}  {} s virtual: each VM's period from its bytes per 1 ms interval",
        r.scenario, r.seed, r.duration_s
    );
    println!(
        "{:<14} {:>12} {:>10} {:>8} {:>9} {:>9} {:>6}",
        "vm", "iteration ms", "period ms", "error", "MiB/iter", "wire duty", "conf"
    );
    let f = |v: Option<f64>, w: usize, p: usize| {
        v.map_or_else(|| format!("{:>w$}", "-"), |x| format!("{x:>w$.p$}"))
    };
    for row in &rows {
        print!(
            "{:<14} {} {} {}",
            row.vm,
            f(row.iteration_ms, 12, 2),
            f(row.period_ms, 10, 2),
            row.period_error
                .map_or_else(|| format!("{:>8}", "-"), |e| format!("{:>7.1}%", e * 100.0))
        );
        match &row.why {
            None => println!(
                " {} {} {}",
                f(row.bytes_per_period.map(|b| b / f64::from(1 << 20)), 9, 2),
                f(row.wire_duty, 9, 2),
                f(row.confidence, 6, 2)
            ),
            Some(w) => println!("  {w}"),
        }
    }
    if let Some(c) = &compat {
        #[allow(clippy::cast_precision_loss)]
        let shifts: Vec<String> = names
            .iter()
            .zip(&c.shifts_ns)
            .map(|(n, s)| format!("{n} +{:.2} ms", *s as f64 / 1e6))
            .collect();
        println!(
            "compatibility of {} on the port: {:.2} as they run, {:.2} at the best rotation ({})",
            names.join(", "),
            c.score_as_given,
            c.score,
            shifts.join(", ")
        );
    } else if let Some(e) = &compat_err {
        println!("compatibility: {e}");
    }
    Ok(())
}

/// The rows of a run recorded with `LabConfig::traffic`.
pub fn rows(r: &LabResult, link_bits_per_sec: u64) -> (Vec<Row>, Vec<(String, Periodicity)>) {
    let traffic = r.traffic.as_deref().unwrap_or_default();
    let mut found = Vec::new();
    let rows = r
        .vms
        .iter()
        .zip(traffic)
        .map(|(vm, t)| {
            #[allow(clippy::cast_precision_loss)]
            let iteration_ms =
                (vm.requests > 0).then(|| (r.duration_s - t.start_s) * 1e3 / vm.requests as f64);
            let mut row = Row {
                vm: vm.name.clone(),
                iteration_ms,
                period_ms: None,
                period_error: None,
                duty: None,
                bytes_per_period: None,
                wire_duty: None,
                demand_mbps: None,
                confidence: None,
                why: None,
            };
            match detect(&t.tx_bytes, t.interval_ns, &DetectConfig::default()) {
                Ok(p) => {
                    #[allow(clippy::cast_precision_loss)]
                    let ms = p.period_ns as f64 / 1e6;
                    row.period_ms = Some(ms);
                    row.period_error = iteration_ms.map(|i| ms / i - 1.0);
                    row.duty = Some(p.duty);
                    row.bytes_per_period = Some(p.bytes_per_period);
                    #[allow(clippy::cast_precision_loss)]
                    let wire_s = p.bytes_per_period * 8.0 / link_bits_per_sec.max(1) as f64;
                    row.wire_duty = Some((wire_s * 1e3 / ms).min(1.0));
                    row.demand_mbps = Some(p.demand_bytes_per_s * 8.0 / 1e6);
                    row.confidence = Some(p.confidence);
                    found.push((vm.name.clone(), p));
                }
                Err(e) => row.why = Some(e.to_string()),
            }
            row
        })
        .collect();
    (rows, found)
}
