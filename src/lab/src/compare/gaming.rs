//! Gaming, measured (`resex lab compare --gaming`): what a tenant gains, and costs the others,
//! by running the agent or by lying in its reports.
//!
//! For every guest the (scenario, policy) runs three times, that guest's agent changed and
//! nothing else: *off* (it does not report), *on* (it reports honestly) and *lying* (it
//! reports three times its latency from the interference's start, once its honest baseline has
//! been learned). Two lines per guest:
//! - `agent`: *on* against *off*;
//! - `lying`: *lying* against *on*.
//!
//! Each line: the guest's own throughput gain (its transmit rate after the interference starts,
//! over the same in the run it is compared with, minus 1), its own latency gain (its mean
//! latency in the other run over this one, minus 1: positive is faster), and the worst harm to
//! any other guest (the larger of its throughput loss and its latency rise, the same way
//! round: positive is harm). The run the scenario itself describes is reused.

use super::{mean_of, run_one, CompareConfig};
use crate::host::LabError;
use crate::result::LabResult;
use resex_pricing::PolicyConfig;
use resex_scenario::Scenario;
use serde::Serialize;

/// What a lying guest multiplies its latency by.
pub const LIE: f64 = 3.0;

/// One guest's gain from one way of playing.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GamingRow {
    /// The guest.
    pub vm: String,
    /// `agent` (on against off) or `lying` (lying against honest).
    pub by: &'static str,
    /// Its own throughput gain.
    pub own_throughput_gain: f64,
    /// Its own mean latency gain (positive: faster).
    pub own_latency_gain: f64,
    /// The worst harm to any other guest (positive: harm).
    pub worst_harm_to_others: f64,
}

/// How a guest plays.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Play {
    Off,
    On,
    Lying,
}

impl Play {
    fn name(self) -> &'static str {
        match self {
            Play::Off => "off",
            Play::On => "on",
            Play::Lying => "lying",
        }
    }

    /// How guest `i` of `s` plays as written.
    fn of(s: &Scenario, i: usize) -> Play {
        let g = &s.guests[i];
        match (g.reports, g.report_scale > 1.0) {
            (false, _) => Play::Off,
            (true, false) => Play::On,
            (true, true) => Play::Lying,
        }
    }

    /// `s` with guest `i` playing this way (lying from `start_s`).
    fn apply(self, s: &Scenario, i: usize, start_s: f64) -> Scenario {
        let mut s = s.clone();
        let g = &mut s.guests[i];
        g.reports = self != Play::Off;
        g.report_scale = if self == Play::Lying { LIE } else { 1.0 };
        g.report_scale_from_s = if self == Play::Lying { start_s } else { 0.0 };
        s
    }
}

/// Each guest's throughput (Mb/s after the start) and mean latency (us) in a run.
fn figures(r: &LabResult, start_s: f64) -> Vec<(f64, Option<f64>)> {
    (0..r.vms.len())
        .map(|i| {
            let t = r
                .series
                .as_ref()
                .and_then(|se| mean_of(se, i, start_s, |v| &v.mbps))
                .unwrap_or(r.vms[i].tx_mbps);
            (t, r.vms[i].lat_mean_us)
        })
        .collect()
}

/// `a / b - 1`, 0 where either is missing or `b` is 0.
fn gain(a: Option<f64>, b: Option<f64>) -> f64 {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => a / b - 1.0,
        _ => 0.0,
    }
}

/// Guest `i`'s line for `now` against `then` (each guest's figures).
fn line(
    i: usize,
    name: &str,
    by: &'static str,
    now: &[(f64, Option<f64>)],
    then: &[(f64, Option<f64>)],
) -> GamingRow {
    let harm = (0..now.len())
        .filter(|&j| j != i)
        .map(|j| {
            let tput = gain(Some(then[j].0), Some(now[j].0));
            let lat = gain(now[j].1, then[j].1);
            tput.max(lat)
        })
        .fold(f64::NEG_INFINITY, f64::max);
    GamingRow {
        vm: name.to_owned(),
        by,
        own_throughput_gain: gain(Some(now[i].0), Some(then[i].0)),
        own_latency_gain: gain(then[i].1, now[i].1),
        worst_harm_to_others: if harm.is_finite() { harm } else { 0.0 },
    }
}

/// Every guest's two lines under `policy`; `as_is` is the run of the scenario as written.
pub fn measure(
    s: &Scenario,
    cfg: &CompareConfig,
    start_s: f64,
    policy: &Option<(String, PolicyConfig)>,
    as_is: &LabResult,
    mut progress: impl FnMut(&str),
) -> Result<Vec<GamingRow>, LabError> {
    let mut rows = Vec::new();
    let written = figures(as_is, start_s);
    for (i, g) in s.guests.iter().enumerate() {
        let mine = Play::of(s, i);
        let mut run = |p: Play| -> Result<Vec<(f64, Option<f64>)>, LabError> {
            if p == mine {
                return Ok(written.clone());
            }
            progress(&format!("{} {}", g.name, p.name()));
            let r = run_one(&p.apply(s, i, start_s), cfg, start_s, policy.clone())?;
            Ok(figures(&r, start_s))
        };
        let off = run(Play::Off)?;
        let on = run(Play::On)?;
        let lying = run(Play::Lying)?;
        rows.push(line(i, &g.name, "agent", &on, &off));
        rows.push(line(i, &g.name, "lying", &lying, &on));
    }
    Ok(rows)
}
