//! `resex demo --lab`: the demo's four phases in the lab's virtual time (the same scenario, the
//! same policy files, the same host core), deterministic for a seed and independent of how busy
//! this machine is. Each phase is one lab run of the paper pair: the interferer joins at its
//! scenario's start time (2 s, so a policy learns the quiet latency first; `base` leaves it
//! out), and the figures cover the phase's length after it joined and the demo's settle time.

use super::{Phase, INTERFERER, VICTIM};
use anyhow::{Context, Result};
use resex_lab::{LabConfig, LabHost, LabResult};
use resex_pricing::PolicyConfig;
use resex_scenario::Scenario;
use std::io::{IsTerminal, Write};

/// The lab's figures of one phase.
fn phase(name: &'static str, r: &LabResult, from_s: f64) -> Phase {
    let v = r.vms.iter().find(|v| v.name == VICTIM);
    let series = r.series.as_ref();
    let other = series.and_then(|s| {
        let i = s.vms.iter().position(|v| v.name == INTERFERER)?;
        let keep: Vec<usize> = (0..s.t_s.len()).filter(|&k| s.t_s[k] > from_s).collect();
        #[allow(clippy::cast_precision_loss)]
        let mean = |xs: &[f64]| keep.iter().map(|&k| xs[k]).sum::<f64>() / keep.len() as f64;
        (!keep.is_empty()).then(|| (mean(&s.vms[i].mbps), mean(&s.vms[i].cap)))
    });
    Phase {
        name,
        victim_mean_us: v.and_then(|v| v.lat_mean_us),
        victim_p99_us: v.and_then(|v| v.lat_p99_us),
        interferer_mbps: other.map_or(0.0, |o| o.0),
        interferer_cap_mean: other.map(|o| o.1),
        host_overloaded: false,
        health: None,
    }
}

/// Runs the four phases of `secs` virtual seconds each (figures after `settle`).
pub fn run(
    pair: &Scenario,
    policies: &[(&'static str, Option<(&'static str, PolicyConfig)>); 4],
    secs: f64,
    settle: f64,
    seed: u64,
) -> Result<Vec<Phase>> {
    let joins = pair
        .guests
        .iter()
        .find(|g| g.name == INTERFERER)
        .map_or(0.0, |g| g.start_s);
    let mut alone = pair.clone();
    alone.guests.retain(|g| g.name != INTERFERER);
    let tty = std::io::stderr().is_terminal();
    let mut out = Vec::new();
    for (k, (name, pol)) in policies.iter().enumerate() {
        let sc = if pol.is_none() && k == 0 {
            &alone
        } else {
            pair
        };
        let cfg = LabConfig {
            seed,
            duration_s: Some(joins + secs),
            warmup_s: joins + settle,
            series: true,
            policy: pol.as_ref().map(|(n, c)| ((*n).to_owned(), c.clone())),
            ..LabConfig::default()
        };
        let r = LabHost::new(sc, cfg)
            .with_context(|| format!("phase {name}"))?
            .run(|done, total| {
                if tty {
                    let pct = 100 * done / total.max(1);
                    eprint!("\rresex demo --lab: phase {name} ({}/4) {pct:>3}%", k + 1);
                    let _ = std::io::stderr().flush();
                }
            })
            .with_context(|| format!("phase {name}"))?;
        out.push(phase(name, &r, joins + settle));
    }
    if tty {
        eprintln!("\r{:<60}", "resex demo --lab: done");
    }
    Ok(out)
}
