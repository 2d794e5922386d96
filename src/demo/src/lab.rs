//! The demo's four phases in the lab's virtual time (the same scenario, the same policy files,
//! the same host core), deterministic for a seed and independent of how busy this machine is.
//! Each phase is one lab run of the paper pair: the interferer joins at its scenario's start
//! time (2 s, so a policy learns the quiet latency first; `base` leaves it out), and the
//! figures cover the phase's length after it joined and the demo's settle time.

use crate::error::DemoError;
use crate::phase::Phase;
use crate::plan::{Demo, INTERFERER, VICTIM};
use crate::report::DemoReport;
use resex_lab::{LabConfig, LabHost, LabResult};
use resex_scenario::Scenario;

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

/// How far a lab run is: the phase (its index from 0 and name), and the lab's units of work
/// done in it and in all.
pub type Progress<'a> = &'a mut dyn FnMut(usize, &str, u64, u64);

/// Runs `demo`'s four phases of `demo.secs` virtual seconds each (figures after
/// `demo.settle`) with the guests' arrivals from `seed`, telling `progress` how far it is.
pub fn run(demo: &Demo, seed: u64, progress: Progress<'_>) -> Result<DemoReport, DemoError> {
    let pair = &demo.scenario;
    let joins = pair
        .guests
        .iter()
        .find(|g| g.name == INTERFERER)
        .map_or(0.0, |g| g.start_s);
    let mut alone = pair.clone();
    alone.guests.retain(|g| g.name != INTERFERER);
    let mut out = Vec::new();
    for (k, (name, pol)) in demo.plan.iter().enumerate() {
        let sc = if pol.is_none() && k == 0 {
            &alone
        } else {
            pair
        };
        let cfg = LabConfig {
            seed,
            duration_s: Some(joins + demo.secs),
            warmup_s: joins + demo.settle,
            series: true,
            policy: pol.as_ref().map(|(n, c)| ((*n).to_owned(), c.clone())),
            ..LabConfig::default()
        };
        let r =
            run_phase(sc, cfg, |done, total| progress(k, name, done, total)).map_err(|source| {
                DemoError::Lab {
                    phase: name,
                    source,
                }
            })?;
        out.push(phase(name, &r, joins + demo.settle));
    }
    Ok(DemoReport::lab(out, seed))
}

fn run_phase(
    sc: &Scenario,
    cfg: LabConfig,
    progress: impl FnMut(u64, u64),
) -> Result<LabResult, resex_lab::LabError> {
    LabHost::new(sc, cfg)?.run(progress)
}
