//! `resex lab fabric FILE`: a fabric scenario (several hosts, links, DCQCN, periodic jobs) in
//! virtual time. Prints each job's iteration times against its time alone and, for fabrics of
//! up to `DETECT_MAX_VMS` VMs, the period `resex_mlcompat::detect` finds in each worker's exact
//! bytes per 1 ms interval (what a host's monitor counts), beside the job's own.
//!
//! With `--lab-hosts` every host is a whole lab host (`resex_lab::fabric`): the workers post
//! real WRITEs, softhca sends them under each flow's DCQCN rate, and the per-VM bytes are what
//! each host's monitor counted; `--policy` runs a pricing policy on every host's core;
//! `--fleet TOPOLOGY` makes the hosts one fleet under the coordinator's round
//! (`fabric_fleet`).

use anyhow::{Context, Result};
use clap::Args;
use resex_fabric::sim::run_with_progress;
use resex_fabric::{FabricResult, FabricSpec, RunOptions};
use resex_lab::fabric::{run_on_hosts, FleetOptions, FleetRound, HostsOptions};
use resex_mlcompat::{detect, DetectConfig};
use serde::Serialize;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use super::fabric_fleet::{self, FleetReport};

/// Per-VM traffic is recorded and analysed for fabrics of at most this many VMs.
pub const DETECT_MAX_VMS: usize = 256;

/// Options of `resex lab fabric`.
#[derive(Debug, Args)]
pub struct FabricArgs {
    /// The fabric scenario (e.g. tools/scenarios/fabric/two-jobs.toml).
    pub scenario: PathBuf,
    /// Virtual seconds (default: the scenario's).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
    /// Write the recorded links' utilisation per job as SVG to FILE.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    /// Every host a whole lab host (rings, softhca, the monitor, the host core) instead of
    /// the fluid model of its NIC.
    #[arg(long)]
    pub lab_hosts: bool,
    /// With --lab-hosts: the policy every host's core runs (a name under --policies or a file;
    /// default: none, monitoring only).
    #[arg(long, requires = "lab_hosts")]
    pub policy: Option<String>,
    /// Directory of policy files.
    #[arg(long, default_value = "policies")]
    pub policies: PathBuf,
    /// With --lab-hosts: the hosts are one fleet under this topology (the file `resex fleet
    /// topology set` takes; its hosts are the fabric's host names), the coordinator's round
    /// every --fleet-round-ms of virtual time. With `[compat] adaptive = true` the fabric also
    /// runs fair, as a control, and each job's iterations are shown fair and adaptive.
    #[arg(long, requires = "lab_hosts", value_name = "TOPOLOGY")]
    pub fleet: Option<PathBuf>,
    /// With --fleet: a round (and every host's summary) every this many virtual ms.
    #[arg(long, default_value_t = 1000, requires = "fleet")]
    pub fleet_round_ms: u64,
}

/// One worker's period as found in its traffic.
#[derive(Debug, Serialize)]
struct Found {
    vm: String,
    job: String,
    iteration_ms: Option<f64>,
    period_ms: Option<f64>,
    why: Option<String>,
}

#[derive(Debug, Serialize)]
struct Report<'a> {
    result: &'a FabricResult,
    detected: Vec<Found>,
    /// With --lab-hosts: each host's lab result.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    hosts: &'a [resex_lab::LabResult],
    /// With --fleet: the fleet's rounds, scores and (adaptive) each job fair and adaptive.
    #[serde(skip_serializing_if = "Option::is_none")]
    fleet: Option<FleetReport>,
}

/// What a run gave.
struct Ran {
    fabric: FabricResult,
    hosts: Vec<resex_lab::LabResult>,
    rounds: Vec<FleetRound>,
}

fn median(v: &[f64]) -> Option<f64> {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s.get(s.len() / 2).copied()
}

/// Runs it.
pub fn run(a: &FabricArgs) -> Result<()> {
    let text = std::fs::read_to_string(&a.scenario)
        .with_context(|| format!("reading {}", a.scenario.display()))?;
    let spec = FabricSpec::from_toml(&text)
        .with_context(|| format!("fabric scenario {}", a.scenario.display()))?;
    let vms: usize = spec.jobs.iter().map(|j| j.workers.len()).sum();
    let opts = RunOptions {
        duration_s: a.duration,
        traffic: vms <= DETECT_MAX_VMS,
        ..RunOptions::default()
    };
    let fleet = a
        .fleet
        .as_deref()
        .map(|p| fabric_fleet::options(p, a.fleet_round_ms))
        .transpose()?;
    let ran = simulate(a, &spec, &opts, fleet.clone())?;
    let fleet = match fleet {
        Some(f) => {
            let fair = match fabric_fleet::fair_control(&f) {
                Some(c) => Some(simulate(a, &spec, &opts, Some(c))?.fabric),
                None => None,
            };
            Some(fabric_fleet::report(
                &ran.fabric,
                &ran.rounds,
                fair.as_ref(),
            ))
        }
        None => None,
    };
    let (r, hosts) = (ran.fabric, ran.hosts);
    let detected = periods(&r);
    if let Some(path) = &a.svg {
        let runs = vec![(spec.name.clone(), &r)];
        let window = r.duration_s * 1e3;
        super::mlcompat_plot::utilisation(&runs, window, path)?;
    }
    if a.json {
        println!(
            "{}",
            serde_json::to_string(&Report {
                result: &r,
                detected,
                hosts: &hosts,
                fleet,
            })?
        );
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    print_jobs(&mut out, a, &r)?;
    print_hosts(&mut out, &hosts)?;
    print_periods(&mut out, a, &r, &detected, vms)?;
    if let Some(f) = &fleet {
        fabric_fleet::print(&mut out, f)?;
    }
    if let Some(p) = &a.svg {
        writeln!(out, "wrote {}", p.display())?;
    }
    Ok(())
}

/// The fabric in virtual time (fluid, or with --lab-hosts each host's lab host), with a
/// progress line on a terminal.
fn simulate(
    a: &FabricArgs,
    spec: &FabricSpec,
    opts: &RunOptions,
    fleet: Option<FleetOptions>,
) -> Result<Ran> {
    let tty = std::io::stderr().is_terminal();
    let started = std::time::Instant::now();
    let show = |now: u64, end: u64| {
        if tty && end > 0 {
            eprint!(
                "\r  {:>3}% of {:.1} virtual s",
                now * 100 / end,
                end as f64 / 1e9
            );
        }
    };
    let out = if a.lab_hosts {
        let policy = a
            .policy
            .as_deref()
            .filter(|p| *p != "none")
            .map(|p| super::compare::load_policy(p, &a.policies, None))
            .transpose()?;
        let h = run_on_hosts(spec, opts, &HostsOptions { policy, fleet }, show)?;
        Ran {
            fabric: h.fabric,
            hosts: h.hosts,
            rounds: h.fleet,
        }
    } else {
        Ran {
            fabric: run_with_progress(spec, opts, show)?,
            hosts: Vec::new(),
            rounds: Vec::new(),
        }
    };
    if tty {
        eprintln!(
            "\r  done in {:.1} s wall{:>20}",
            started.elapsed().as_secs_f64(),
            ""
        );
    }
    Ok(out)
}

/// Each worker's period found in its traffic, beside its job's mean iteration.
fn periods(r: &FabricResult) -> Vec<Found> {
    r.traffic
        .iter()
        .map(|v| {
            let iteration_ms = r
                .jobs
                .iter()
                .find(|j| j.name == v.job)
                .and_then(|j| j.mean_after(1));
            let (period_ms, why) = match detect(&v.bytes, 1_000_000, &DetectConfig::default()) {
                Ok(p) => (Some(p.period_ns as f64 / 1e6), None),
                Err(e) => (None, Some(e.to_string())),
            };
            Found {
                vm: v.vm.clone(),
                job: v.job.clone(),
                iteration_ms,
                period_ms,
                why,
            }
        })
        .collect()
}

/// The header line and one line per job.
fn print_jobs(out: &mut impl Write, a: &FabricArgs, r: &FabricResult) -> Result<()> {
    writeln!(
        out,
        "fabric {}: {} hosts, {} links, {} flows, {} virtual s, {} {} steps",
        r.name,
        r.hosts,
        r.links,
        r.flows,
        r.duration_s,
        r.steps,
        if a.lab_hosts { "lab-host" } else { "fluid" }
    )?;
    writeln!(
        out,
        "{:<16} {:<11} {:>6} {:>10} {:>10} {:>10} {:>8} {:>8}",
        "job", "preset", "iters", "mean ms", "median ms", "alone ms", "slowdown", "CNPs"
    )?;
    for j in &r.jobs {
        let mean = j.mean_after(1);
        writeln!(
            out,
            "{:<16} {:<11} {:>6} {:>10} {:>10} {:>10.1} {:>8} {:>8}",
            j.name,
            j.preset.as_deref().unwrap_or("-"),
            j.iter_ms.len(),
            mean.map_or("-".into(), |m| format!("{m:.1}")),
            median(&j.iter_ms).map_or("-".into(), |m| format!("{m:.1}")),
            j.alone_ms,
            mean.map_or("-".into(), |m| format!("{:.3}", m / j.alone_ms)),
            j.cnps
        )?;
    }
    Ok(())
}

/// With --lab-hosts: each host's NIC use and its workers' mean caps.
fn print_hosts(out: &mut impl Write, hosts: &[resex_lab::LabResult]) -> Result<()> {
    let Some(first) = hosts.first() else {
        return Ok(());
    };
    writeln!(
        out,
        "lab hosts (policy {}): per host, its NIC's use and its workers' mean CPU cap",
        first.policy
    )?;
    for h in hosts {
        let caps: Vec<String> = h.vms.iter().map(|v| format!("{:.0}", v.cap_mean)).collect();
        writeln!(
            out,
            "  {:<12} link {:>5.1}%  caps {}",
            h.scenario,
            h.host.wire_util * 100.0,
            caps.join("/")
        )?;
    }
    Ok(())
}

/// The periods found, against each job's iteration (or why the traffic was not recorded).
fn print_periods(
    out: &mut impl Write,
    a: &FabricArgs,
    r: &FabricResult,
    detected: &[Found],
    vms: usize,
) -> Result<()> {
    if r.traffic.is_empty() {
        writeln!(
            out,
            "(periods from traffic: skipped, {vms} VMs is above {DETECT_MAX_VMS})"
        )?;
        return Ok(());
    }
    writeln!(
        out,
        "periods found in each worker's bytes per 1 ms (no help from the job{}):",
        if a.lab_hosts {
            "; counted by each host's monitor"
        } else {
            ""
        }
    )?;
    for f in detected {
        match (f.period_ms, f.iteration_ms) {
            (Some(p), Some(it)) => writeln!(
                out,
                "  {:<24} {p:>8.1} ms  (runs {it:.1} ms, {:+.1}%)",
                f.vm,
                (p / it - 1.0) * 100.0
            )?,
            _ => writeln!(
                out,
                "  {:<24} {}",
                f.vm,
                f.why.as_deref().unwrap_or("no iteration finished")
            )?,
        }
    }
    Ok(())
}
