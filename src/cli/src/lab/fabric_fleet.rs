//! `resex lab fabric FILE --lab-hosts --fleet TOPOLOGY`: the fabric's lab hosts as one fleet
//! under the coordinator's round (`resex_lab::fabric`'s fleet: the same round, summaries and
//! allocations as resexd's fleet). What it prints: each topology link's score in the last
//! round, the schedules handed out and, when the topology turns adaptive unfairness on, each
//! job's iteration time fair (the same fabric and topology with `[compat] adaptive = false`,
//! run as a control) and adaptive, side by side.

use anyhow::{Context, Result};
use resex_fabric::FabricResult;
use resex_fleet::topology::Topology;
use resex_lab::fabric::{FleetOptions, FleetRound};
use serde::Serialize;
use std::io::Write;
use std::path::Path;

/// The fleet's options from the topology file.
pub(super) fn options(path: &Path, round_ms: u64) -> Result<FleetOptions> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let topology =
        Topology::from_toml(&text).with_context(|| format!("topology {}", path.display()))?;
    anyhow::ensure!(
        (100..=60_000).contains(&round_ms),
        "--fleet-round-ms {round_ms}: 100 to 60000 (resexd's publish_ms)"
    );
    Ok(FleetOptions { topology, round_ms })
}

/// The same fleet with adaptive unfairness off (the control), if it was on.
pub(super) fn fair_control(f: &FleetOptions) -> Option<FleetOptions> {
    f.topology.compat.adaptive.then(|| {
        let mut fair = f.clone();
        fair.topology.compat.adaptive = false;
        fair
    })
}

/// One topology link's score in the last round.
#[derive(Debug, Serialize)]
struct LinkScore {
    name: String,
    score: Option<f64>,
    why_not: Option<String>,
}

/// One job fair and adaptive.
#[derive(Debug, Serialize)]
struct JobSide {
    name: String,
    fair_iter_ms: Option<f64>,
    adaptive_iter_ms: Option<f64>,
    /// Fair over adaptive (above 1: adaptive is faster).
    speedup: Option<f64>,
}

/// The fleet's part of `resex lab fabric --json`.
#[derive(Debug, Serialize)]
pub(super) struct FleetReport {
    rounds: usize,
    /// Schedules handed out, summed over the rounds.
    schedules: usize,
    links: Vec<LinkScore>,
    /// With adaptive unfairness on: each job fair (the control) and adaptive.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    jobs: Vec<JobSide>,
}

/// The report of a run under the fleet (`rounds`), with its fair control when there is one.
pub(super) fn report(
    r: &FabricResult,
    rounds: &[FleetRound],
    fair: Option<&FabricResult>,
) -> FleetReport {
    let last = rounds.iter().rev().find_map(|r| r.report.as_ref());
    let links = last
        .map(|rep| {
            rep.links
                .iter()
                .map(|l| LinkScore {
                    name: l.link.clone(),
                    score: l.score,
                    why_not: l.why_not.clone(),
                })
                .collect()
        })
        .unwrap_or_default();
    let jobs = fair
        .map(|f| {
            r.jobs
                .iter()
                .map(|j| {
                    let a = j.mean_settled(r.duration_s);
                    let fj = f.jobs.iter().find(|x| x.name == j.name);
                    let fm = fj.and_then(|x| x.mean_settled(f.duration_s));
                    JobSide {
                        name: j.name.clone(),
                        fair_iter_ms: fm,
                        adaptive_iter_ms: a,
                        speedup: fm.zip(a).map(|(f, a)| f / a),
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    FleetReport {
        rounds: rounds.len(),
        schedules: rounds
            .iter()
            .filter_map(|r| r.report.as_ref())
            .map(|r| r.schedules)
            .sum(),
        links,
        jobs,
    }
}

/// The report for people.
pub(super) fn print(out: &mut impl Write, f: &FleetReport) -> Result<()> {
    writeln!(
        out,
        "fleet: {} rounds of the coordinator, {} schedules handed out; links in the last round:",
        f.rounds, f.schedules
    )?;
    for l in &f.links {
        match l.score {
            Some(s) => writeln!(out, "  {:<20} compatibility {s:.2}", l.name)?,
            None => writeln!(
                out,
                "  {:<20} not scored: {}",
                l.name,
                l.why_not.as_deref().unwrap_or("-")
            )?,
        }
    }
    if f.jobs.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "iterations once settled (after the first third), fair (the same topology without \
         adaptive unfairness) and adaptive:"
    )?;
    writeln!(
        out,
        "  {:<16} {:>10} {:>12} {:>8}",
        "job", "fair ms", "adaptive ms", "speedup"
    )?;
    let ms = |v: Option<f64>| v.map_or("-".into(), |m| format!("{m:.1}"));
    for j in &f.jobs {
        writeln!(
            out,
            "  {:<16} {:>10} {:>12} {:>8}",
            j.name,
            ms(j.fair_iter_ms),
            ms(j.adaptive_iter_ms),
            j.speedup.map_or("-".into(), |s| format!("{s:.2}x"))
        )?;
    }
    Ok(())
}
