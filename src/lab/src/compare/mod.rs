//! Policies side by side (`resex lab compare`): every scenario under every policy, the same
//! seed and duration, and the figures that tell policies apart.
//!
//! Each guest's part is its `role` (`victim`, `aggressor` or `bystander`; by default a guest
//! that reports is a victim and one that does not an aggressor). Only this evaluator reads
//! it: no policy, host core or lab host sees it, so running the agent makes no guest a victim.
//! The interference starts when the first aggressor does (with none, at the start), and every
//! latency and throughput figure is measured from then to the end (the time before is the
//! warm-up). Per (scenario, policy):
//! - per victim, mean and p99 over base: its latency after the interference starts, over its
//!   latency in the same window with the aggressors removed (no policy); the row's
//!   `victim_mean_x` and `victim_p99_x` are the worst victim's;
//! - aggressor throughput kept: the aggressors' Mb/s under the policy over their Mb/s with no
//!   policy (work conservation: 1 is everything kept), and their own latency over theirs with no
//!   policy (what a cap costs an open-loop aggressor, whose throughput it may not change);
//! - time to converge: from the interference's start, the time after which every victim's
//!   latency, averaged over the last 10 report periods, stays within `converge_within` of its
//!   base;
//! - oscillation: the aggressors' mean absolute cap change per report period over the second
//!   half of the interference, in percentage points of one CPU, and likewise their transmit
//!   ceilings', in percentage points of the link;
//! - what every guest is owed ([`owed`]): its transmit rate on the wire against the lesser of
//!   its demand and its entitlement;
//! - with `gaming`, what a guest gains, and costs the others, by running the agent or by lying
//!   ([`gaming`]).
//!
//! Beyond the scenarios, [`random`] draws small random hosts and judges what each guest is
//! owed on them (`resex lab owed`, and the entitlement proptest).

pub mod gaming;
pub mod owed;
pub mod random;

use crate::host::{LabConfig, LabError, LabHost};
use crate::result::{LabResult, Series};
pub use gaming::GamingRow;
pub use owed::OwedRow;
use resex_pricing::PolicyConfig;
use resex_scenario::{Role, Scenario};
use serde::Serialize;

/// Periods in the convergence test's moving average.
const WINDOW: usize = 10;

/// One victim's figures in a (scenario, policy) line.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VictimRow {
    /// The victim.
    pub name: String,
    /// Its mean latency over base.
    pub mean_x: Option<f64>,
    /// Its p99 over base.
    pub p99_x: Option<f64>,
    /// Seconds from the interference's start until it stays within bounds.
    pub converge_s: Option<f64>,
}

/// One (scenario, policy) line.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CompareRow {
    /// The scenario.
    pub scenario: String,
    /// The policy (`none`: no policy).
    pub policy: String,
    /// The worst victim's mean latency over base (after the interference starts).
    pub victim_mean_x: Option<f64>,
    /// The worst victim's p99 over base.
    pub victim_p99_x: Option<f64>,
    /// Every victim.
    pub victims: Vec<VictimRow>,
    /// Aggressors' throughput, Mb/s (whole run).
    pub aggressor_mbps: f64,
    /// That over the same with no policy.
    pub aggressor_kept: Option<f64>,
    /// The aggressors' own mean latency over theirs with no policy (what a cap costs an
    /// open-loop VM, whose throughput it may not change).
    pub aggressor_lat_x: Option<f64>,
    /// Seconds from the interference's start until every victim stays within bounds (`None`:
    /// some victim never does within the run).
    pub converge_s: Option<f64>,
    /// Aggressors' mean absolute cap change per report period, percentage points (second half
    /// of the interference).
    pub cap_osc_pp: f64,
    /// Aggressors' mean absolute transmit-ceiling change per report period, percentage points
    /// of the link (second half of the interference).
    pub rate_osc_pp: f64,
    /// Aggressors' mean transmit ceiling after the interference starts, % of the link (100:
    /// none).
    pub aggressor_tx_mean_pct: f64,
    /// Aggressors' mean cap, %.
    pub aggressor_cap_mean: f64,
    /// Aggressors' lowest cap, %.
    pub aggressor_cap_min: f64,
    /// Every guest's transmit rate against what it is owed.
    pub owed: Vec<OwedRow>,
    /// The least any guest that demands its entitlement got of it (`None`: no guest does).
    pub owed_min: Option<f64>,
    /// What running the agent or lying gains a guest and costs the others (with `gaming`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gaming: Option<Vec<GamingRow>>,
}

/// How to compare.
#[derive(Debug, Clone)]
pub struct CompareConfig {
    /// The lab settings of every run (its policy is replaced per run).
    pub lab: LabConfig,
    /// The convergence band: victim mean within `(1 + this) x base`.
    pub converge_within: f64,
    /// Rerun every (scenario, policy) with each guest's agent off, on and lying
    /// ([`gaming`]).
    pub gaming: bool,
}

impl CompareConfig {
    /// Runs of `duration_s` virtual seconds, the default 10% band, no gaming.
    pub fn of_seconds(duration_s: f64) -> Self {
        Self {
            lab: LabConfig {
                duration_s: Some(duration_s),
                ..LabConfig::default()
            },
            converge_within: 0.10,
            gaming: false,
        }
    }
}

/// The guests of a role, by index.
fn of_role(s: &Scenario, role: Role) -> Vec<usize> {
    (0..s.guests.len())
        .filter(|&i| s.guests[i].role() == role)
        .collect()
}

/// When the interference starts: the first aggressor's start (with none, 0), seconds.
pub(crate) fn start_of(s: &Scenario) -> f64 {
    let first = s
        .guests
        .iter()
        .filter(|g| g.role() == Role::Aggressor)
        .map(|g| g.start_s)
        .fold(f64::INFINITY, f64::min);
    if first.is_finite() {
        first
    } else {
        0.0
    }
}

pub(crate) fn run_one(
    s: &Scenario,
    cfg: &CompareConfig,
    warmup_s: f64,
    policy: Option<(String, PolicyConfig)>,
) -> Result<LabResult, LabError> {
    let lab = LabConfig {
        policy,
        warmup_s,
        series: true,
        ..cfg.lab.clone()
    };
    LabHost::new(s, lab)?.run(|_, _| {})
}

fn moving_mean(v: &[Option<f64>], end: usize) -> Option<f64> {
    let lo = end.saturating_sub(WINDOW - 1);
    let xs: Vec<f64> = v[lo..=end].iter().flatten().copied().collect();
    (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
}

/// Seconds after `start_s` from which the victim's moving mean stays within `limit_us`.
fn converge(series: &Series, victim: usize, start_s: f64, limit_us: f64) -> Option<f64> {
    let lat = &series.vms.get(victim)?.lat_mean_us;
    let first = series.t_s.iter().position(|&t| t > start_s)?;
    let mut since: Option<usize> = None;
    for k in first..series.t_s.len() {
        match moving_mean(lat, k) {
            Some(m) if m > limit_us => since = None,
            _ => {
                since.get_or_insert(k);
            }
        }
    }
    since.map(|k| (series.t_s[k] - start_s).max(0.0))
}

/// The first report period after `start_s` (the series' length when none is).
fn first_after(series: &Series, start_s: f64) -> usize {
    series
        .t_s
        .iter()
        .position(|&t| t > start_s)
        .unwrap_or(series.t_s.len())
}

/// Mean of the aggressors' series `of` from the interference's start.
fn mean_after(
    series: &Series,
    aggressors: &[usize],
    start_s: f64,
    of: fn(&crate::result::VmSeries) -> &Vec<f64>,
) -> f64 {
    let first = first_after(series, start_s);
    let xs: Vec<f64> = aggressors
        .iter()
        .filter_map(|&a| series.vms.get(a))
        .flat_map(|v| of(v).iter().skip(first).copied())
        .collect();
    if xs.is_empty() {
        100.0
    } else {
        xs.iter().sum::<f64>() / xs.len() as f64
    }
}

/// Mean of one VM's series `of` from `start_s` on (`None`: no point).
pub(crate) fn mean_of(
    series: &Series,
    vm: usize,
    start_s: f64,
    of: fn(&crate::result::VmSeries) -> &Vec<f64>,
) -> Option<f64> {
    let v = series.vms.get(vm)?;
    let xs: Vec<f64> = series
        .t_s
        .iter()
        .zip(of(v))
        .filter(|(t, _)| **t > start_s)
        .map(|(_, x)| *x)
        .collect();
    (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
}

fn oscillation(
    series: &Series,
    aggressors: &[usize],
    start_s: f64,
    of: fn(&crate::result::VmSeries) -> &Vec<f64>,
) -> f64 {
    let first = first_after(series, start_s);
    let from = first + (series.t_s.len() - first) / 2;
    let mut sum = 0.0;
    let mut n = 0usize;
    for &a in aggressors {
        let Some(v) = series.vms.get(a) else { continue };
        let x = of(v);
        for k in from.max(1)..x.len() {
            sum += (x[k] - x[k - 1]).abs();
            n += 1;
        }
    }
    if n == 0 {
        0.0
    } else {
        sum / n as f64
    }
}

/// Runs every scenario with no policy, with its victims alone, and under every policy;
/// `progress(scenario, policy)` is told each run as it starts.
pub fn run(
    scenarios: &[Scenario],
    policies: &[(String, PolicyConfig)],
    cfg: &CompareConfig,
    mut progress: impl FnMut(&str, &str),
) -> Result<Vec<CompareRow>, LabError> {
    let mut rows = Vec::new();
    for s in scenarios {
        let vs = of_role(s, Role::Victim);
        let aggressors = of_role(s, Role::Aggressor);
        let start = start_of(s);
        let base = if vs.is_empty() {
            None
        } else {
            progress(&s.name, "victims alone");
            let mut alone = s.clone();
            alone.guests.retain(|g| g.role() == Role::Victim);
            Some(run_one(&alone, cfg, start, None)?)
        };
        progress(&s.name, "none");
        let none = run_one(s, cfg, start, None)?;
        let ctx = RowCtx {
            s,
            cfg,
            vs: &vs,
            aggressors: &aggressors,
            start,
            base: base.as_ref(),
            none: &none,
        };
        let mut none_row = ctx.row("none", &none);
        if cfg.gaming {
            // With no policy nothing reads a report: measured, not assumed.
            none_row.gaming = Some(gaming::measure(s, cfg, start, &None, &none, |v| {
                progress(&s.name, &format!("none gaming {v}"));
            })?);
        }
        rows.push(none_row);
        for (name, pc) in policies {
            progress(&s.name, name);
            let policy = Some((name.clone(), pc.clone()));
            let r = run_one(s, cfg, start, policy.clone())?;
            let mut row = ctx.row(name, &r);
            if cfg.gaming {
                row.gaming = Some(gaming::measure(s, cfg, start, &policy, &r, |v| {
                    progress(&s.name, &format!("{name} gaming {v}"));
                })?);
            }
            rows.push(row);
        }
    }
    Ok(rows)
}

/// What every row of one scenario is measured against.
struct RowCtx<'a> {
    s: &'a Scenario,
    cfg: &'a CompareConfig,
    vs: &'a [usize],
    aggressors: &'a [usize],
    start: f64,
    base: Option<&'a LabResult>,
    none: &'a LabResult,
}

fn ratio(x: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (x, b) {
        (Some(x), Some(b)) if b > 0.0 => Some(x / b),
        _ => None,
    }
}

impl RowCtx<'_> {
    fn aggressor_mbps(&self, r: &LabResult) -> f64 {
        self.aggressors.iter().map(|&a| r.vms[a].tx_mbps).sum()
    }

    fn aggressor_lat(&self, r: &LabResult) -> Option<f64> {
        let v: Vec<f64> = self
            .aggressors
            .iter()
            .filter_map(|&a| r.vms[a].lat_mean_us)
            .collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    }

    /// Victim k of the scenario is guest vs[k] here and guest k in the base run.
    fn victims(&self, r: &LabResult) -> Vec<VictimRow> {
        let Some(base) = self.base else {
            return Vec::new();
        };
        let series = r.series.as_ref();
        self.vs
            .iter()
            .enumerate()
            .map(|(k, &i)| {
                let (v, b) = (&r.vms[i], &base.vms[k]);
                let limit = b.lat_mean_us.unwrap_or(0.0) * (1.0 + self.cfg.converge_within);
                VictimRow {
                    name: v.name.clone(),
                    mean_x: ratio(v.lat_mean_us, b.lat_mean_us),
                    p99_x: ratio(v.lat_p99_us, b.lat_p99_us),
                    converge_s: series.and_then(|se| converge(se, i, self.start, limit)),
                }
            })
            .collect()
    }

    fn row(&self, policy: &str, r: &LabResult) -> CompareRow {
        let victims = self.victims(r);
        let worst = |f: fn(&VictimRow) -> Option<f64>| {
            victims
                .iter()
                .filter_map(f)
                .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))))
        };
        let converge_s = victims
            .iter()
            .map(|v| v.converge_s)
            .collect::<Option<Vec<f64>>>()
            .map(|c| c.into_iter().fold(0.0, f64::max));
        let series = r.series.as_ref();
        let aggressors = self.aggressors;
        let n = aggressors.len().max(1) as f64;
        let none_mbps = self.aggressor_mbps(self.none);
        let owed = owed::rows(self.s, r, self.start);
        CompareRow {
            scenario: self.s.name.clone(),
            policy: policy.to_owned(),
            victim_mean_x: worst(|v| v.mean_x),
            victim_p99_x: worst(|v| v.p99_x),
            victims,
            aggressor_mbps: self.aggressor_mbps(r),
            aggressor_kept: (none_mbps > 0.0).then(|| self.aggressor_mbps(r) / none_mbps),
            aggressor_lat_x: ratio(self.aggressor_lat(r), self.aggressor_lat(self.none)),
            converge_s,
            cap_osc_pp: series.map_or(0.0, |se| {
                oscillation(se, aggressors, self.start, |v| &v.cap)
            }),
            rate_osc_pp: series.map_or(0.0, |se| {
                oscillation(se, aggressors, self.start, |v| &v.tx_max_pct)
            }),
            aggressor_tx_mean_pct: series.map_or(100.0, |se| {
                mean_after(se, aggressors, self.start, |v| &v.tx_max_pct)
            }),
            aggressor_cap_mean: aggressors.iter().map(|&a| r.vms[a].cap_mean).sum::<f64>() / n,
            aggressor_cap_min: Some(
                aggressors
                    .iter()
                    .map(|&a| r.vms[a].cap_min)
                    .fold(f64::INFINITY, f64::min),
            )
            .filter(|c| c.is_finite())
            .unwrap_or(100.0),
            owed_min: owed::least(&owed),
            owed,
            gaming: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result::VmSeries;

    fn series(lat: &[f64], caps: &[f64]) -> Series {
        Series {
            t_s: (1..=lat.len()).map(|i| i as f64 * 0.01).collect(),
            link_util: vec![0.0; lat.len()],
            vms: vec![
                VmSeries {
                    name: "v".into(),
                    lat_mean_us: lat.iter().map(|&x| Some(x)).collect(),
                    ..VmSeries::default()
                },
                VmSeries {
                    name: "a".into(),
                    cap: caps.to_vec(),
                    ..VmSeries::default()
                },
            ],
        }
    }

    #[test]
    fn convergence_is_the_time_after_which_the_moving_mean_stays_in_bounds() {
        // 20 bad periods after t = 0.0, then good ones: the 10-period mean is back under the
        // limit once at most 1 of its last 10 periods was bad (100 + 1 x 100 / 10 = 110).
        let mut lat = vec![200.0; 20];
        lat.extend(vec![100.0; 30]);
        let s = series(&lat, &[100.0; 50]);
        let t = converge(&s, 0, 0.0, 110.0).unwrap();
        assert!((t - 0.29).abs() < 1e-9, "{t}");
        // A relapse at the end: never converged.
        let mut lat2 = lat.clone();
        lat2.extend(vec![400.0; 5]);
        let s = series(&lat2, &[100.0; 55]);
        assert_eq!(converge(&s, 0, 0.0, 110.0), None);
    }

    #[test]
    fn oscillation_averages_cap_steps_over_the_second_half() {
        let caps: Vec<f64> = (0..40)
            .map(|i| if i % 2 == 0 { 50.0 } else { 40.0 })
            .collect();
        let s = series(&[100.0; 40], &caps);
        assert!((oscillation(&s, &[1], 0.0, |v| &v.cap) - 10.0).abs() < 1e-9);
        let s = series(&[100.0; 40], &[30.0; 40]);
        assert_eq!(oscillation(&s, &[1], 0.0, |v| &v.cap), 0.0);
    }
}
