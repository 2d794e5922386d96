//! The paper's simulations (Section III-D): ADMM and the baseline on n hosts with m
//! applications, against the certified optimum.
//!
//! Both methods run a fixed number of iterations (the paper plots 60) from u = z = 0. What is
//! measured:
//!
//! - `iterations`: the first iteration at which the stopping rule holds (primal residual and
//!   objective change, [`crate::Stopping`]); `None` if it never did.
//! - `iterations_to_995`: the first iteration from which the objective stays within 0.5 % of the
//!   reference (`|P^k - P*| <= 0.005 |P*|` for every later iteration of the run; the paper's
//!   "99.5 % approximated optimal value"). The iterates are not feasible until they converge
//!   (`A x != z`), so their objective can lie above the optimum; `iterations_to_995_recovered`
//!   asks the same of the feasible schedule recovered from z ([`crate::HostReport::recovered`]).
//! - `reference_objective`: n times one host's certified optimum ([`crate::reference`]).
//! - `utility_gap`: the mean over the iterations of `(P_admm - P_dd) / |P_admm|`, the paper's
//!   "on average 69.3 % less" measure.
//! - `penalty`, `final_rho`: the penalty rule ADMM ran ([`Penalty`]: the paper's fixed rho, or
//!   residual balancing from [`ADAPTIVE_START`]) and the rho of its last iteration.
//!
//! The caller passes the clock (the library reads none), and sees progress.

use crate::fleet::{AdmmFleet, DualFleet};
use crate::penalty::PenaltyRule;
use crate::reference;
use crate::{Balancing, DrumError, Model, PaperSetup, Params, Penalty, Stopping};
use serde::{Deserialize, Serialize};

/// What to run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Config {
    /// n.
    pub hosts: usize,
    /// m.
    pub apps: usize,
    /// The seed of A.
    pub seed: u64,
    /// The paper's parameters.
    pub setup: PaperSetup,
    /// ADMM iterations.
    pub iterations: u64,
    /// Baseline iterations.
    pub dd_iterations: u64,
    /// The baseline's first step (its k-th is `dd_rho / sqrt(k)`).
    pub dd_rho: f64,
    /// The stopping rule whose first iteration is reported.
    pub stopping: Stopping,
    /// ADMM's penalty rule, from `setup.rho`.
    pub penalty: Penalty,
}

impl Config {
    /// The paper's set-up for n hosts and m applications: 60 iterations of each method, ADMM
    /// at the fixed rho = 1e-3, the baseline's `rho_k = 1e-3 / sqrt(k)`.
    #[must_use]
    pub fn paper(hosts: usize, apps: usize, seed: u64) -> Self {
        Self {
            hosts,
            apps,
            seed,
            setup: PaperSetup::default(),
            iterations: 60,
            dd_iterations: 60,
            dd_rho: 1e-3,
            stopping: Stopping::default(),
            penalty: Penalty::Fixed,
        }
    }

    /// The paper's set-up with ADMM's penalty moved by residual balancing (Boyd's mu = 10,
    /// tau = 2) from [`ADAPTIVE_START`]: `resex lab drum`'s default.
    #[must_use]
    pub fn adaptive(hosts: usize, apps: usize, seed: u64) -> Self {
        let mut c = Self::paper(hosts, apps, seed);
        c.setup.rho = ADAPTIVE_START;
        c.penalty = Penalty::Adaptive(Balancing::default());
        c
    }
}

/// Where residual balancing starts rho. From any start in [1e-3, 10] it reaches 0.5 % of the
/// optimum within 20 iterations on the paper's grid (seeds 1-10); 0.1 is the middle of that
/// range on a log scale (`docs/drum.md`, "Rho").
pub const ADAPTIVE_START: f64 = 0.1;

/// ADMM's run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdmmRun {
    /// The first iteration at which the stopping rule held.
    pub iterations: Option<u64>,
    /// The first iteration from which the objective stayed within 0.5 % of the reference.
    pub iterations_to_995: Option<u64>,
    /// The same for the recovered feasible schedule.
    pub iterations_to_995_recovered: Option<u64>,
    /// The objective at the last iteration.
    pub objective: f64,
    /// `sum_i ||A x_i - z_i||^2` per iteration (the paper's primal residual).
    pub primal_residual: Vec<f64>,
    /// The objective per iteration.
    pub objective_trace: Vec<f64>,
    /// The recovered feasible schedule's objective per iteration.
    pub recovered_trace: Vec<f64>,
    /// `sqrt(primal + stationarity)` per iteration, stationarity measured one iteration late
    /// (the last entry is the primal part alone).
    pub kkt_residual: Vec<f64>,
    /// The penalty rho of each iteration.
    pub rho_trace: Vec<f64>,
    /// Mean wall time of one iteration (all n hosts and the coordinator), seconds.
    pub seconds_per_iteration: f64,
}

/// The baseline's run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DualRun {
    /// The objective at the last iteration (the 60th by default).
    pub objective_at_60: f64,
    /// The objective per iteration.
    pub objective_trace: Vec<f64>,
    /// The recovered feasible schedule's objective per iteration.
    pub recovered_trace: Vec<f64>,
    /// `sum_i ||A x_i - z_i||^2` per iteration.
    pub primal_residual: Vec<f64>,
    /// Mean wall time of one iteration, seconds.
    pub seconds_per_iteration: f64,
}

/// One simulation's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// n.
    pub hosts: usize,
    /// m.
    pub apps: usize,
    /// The seed of A.
    pub seed: u64,
    /// The parameters solved (capacities after the AM-GM mapping; `rho` is ADMM's start).
    pub params: Params,
    /// ADMM's penalty rule: `"fixed"` or `"adaptive"`.
    pub penalty: PenaltyRule,
    /// Residual balancing's parameters, when the penalty is adaptive.
    pub balancing: Option<Balancing>,
    /// The penalty of ADMM's last iteration.
    pub final_rho: f64,
    /// ADMM.
    pub admm: AdmmRun,
    /// The baseline.
    pub dual_decomposition: DualRun,
    /// The certified optimum (n times one host's feasible value).
    pub reference_objective: f64,
    /// The dual bound on it.
    pub reference_dual_bound: f64,
    /// ADMM's objective over the baseline's at the baseline's last iteration (ADMM at the same
    /// iteration, or its last).
    pub objective_ratio: f64,
    /// The same for the recovered feasible schedules.
    pub recovered_ratio: f64,
    /// The mean of `(P_admm - P_dd) / |P_admm|` over the common iterations.
    pub utility_gap: f64,
    /// Peak resident memory of the process, MiB (filled in by the caller).
    pub peak_rss_mib: Option<f64>,
}

/// What is running, for a progress line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// The reference is being computed.
    Reference,
    /// ADMM iteration i of n.
    Admm(u64, u64),
    /// Baseline iteration i of n.
    Dual(u64, u64),
}

/// The first index from which `trace` stays within 0.5 % of `best`, as an iteration number.
#[must_use]
pub fn settle(trace: &[f64], best: f64) -> Option<u64> {
    let within = |v: &f64| (v - best).abs() <= 0.005 * best.abs();
    let last_out = trace.iter().rposition(|v| !within(v));
    let first = last_out.map_or(0, |i| i + 1);
    (first < trace.len()).then(|| first as u64 + 1)
}

/// Runs one simulation.
pub fn run(
    cfg: &Config,
    clock: &mut dyn FnMut() -> f64,
    progress: &mut dyn FnMut(Progress),
) -> Result<Outcome, DrumError> {
    check_counts(cfg)?;
    let params = Params::from_paper(cfg.apps, &cfg.setup)?;
    let model = Model::paper(params, cfg.seed)?;
    #[allow(clippy::cast_precision_loss)]
    let n = cfg.hosts as f64;
    progress(Progress::Reference);
    let r = reference::solve(&model);
    let best = r.objective * n;
    let admm = run_admm(cfg, model.clone(), best, clock, progress)?;
    let dual = run_dual(cfg, model, clock, progress)?;
    let at = usize::try_from(cfg.dd_iterations.min(cfg.iterations)).unwrap_or(usize::MAX) - 1;
    let (obj, rec) = (&admm.objective_trace, &admm.recovered_trace);
    let (dobj, drec) = (&dual.objective_trace, &dual.recovered_trace);
    Ok(Outcome {
        hosts: cfg.hosts,
        apps: cfg.apps,
        seed: cfg.seed,
        params,
        penalty: cfg.penalty.rule(),
        balancing: match cfg.penalty {
            Penalty::Fixed => None,
            Penalty::Adaptive(b) => Some(b),
        },
        final_rho: *admm.rho_trace.last().unwrap_or(&params.rho),
        reference_objective: best,
        reference_dual_bound: r.dual_bound * n,
        objective_ratio: obj[at] / dobj[at],
        recovered_ratio: rec[at] / drec[at],
        utility_gap: utility_gap(obj, dobj, at + 1),
        peak_rss_mib: None,
        admm,
        dual_decomposition: dual,
    })
}

/// Refuses zero hosts or iterations.
fn check_counts(cfg: &Config) -> Result<(), DrumError> {
    for (param, value) in [
        ("hosts", cfg.hosts as u64),
        ("iterations", cfg.iterations),
        ("dd_iterations", cfg.dd_iterations),
    ] {
        if value == 0 {
            return Err(DrumError::Count {
                param,
                value,
                range: "at least 1",
            });
        }
    }
    Ok(())
}

/// ADMM's `cfg.iterations` iterations on `cfg.hosts` hosts, against the reference `best`.
fn run_admm(
    cfg: &Config,
    model: Model,
    best: f64,
    clock: &mut dyn FnMut() -> f64,
    progress: &mut dyn FnMut(Progress),
) -> Result<AdmmRun, DrumError> {
    let mut fleet = AdmmFleet::with_penalty(model, cfg.hosts, cfg.stopping, cfg.penalty)?;
    let (mut obj, mut rec, mut prim, mut stat) = (vec![], vec![], vec![], vec![]);
    let mut rhos = vec![];
    let mut iterations = None;
    let t0 = clock();
    for i in 1..=cfg.iterations {
        progress(Progress::Admm(i, cfg.iterations));
        let s = fleet.iterate()?;
        if s.stop && iterations.is_none() {
            iterations = Some(s.iteration);
        }
        obj.push(s.objective);
        rec.push(s.recovered);
        prim.push(s.primal_residual);
        stat.push(s.stationarity);
        rhos.push(s.rho);
    }
    #[allow(clippy::cast_precision_loss)]
    let admm_s = (clock() - t0) / cfg.iterations as f64;
    drop(fleet);
    let kkt = (0..prim.len())
        .map(|i| (prim[i] + stat.get(i + 1).copied().unwrap_or(0.0)).sqrt())
        .collect();
    Ok(AdmmRun {
        iterations,
        iterations_to_995: settle(&obj, best),
        iterations_to_995_recovered: settle(&rec, best),
        objective: *obj.last().unwrap_or(&f64::NAN),
        primal_residual: prim,
        recovered_trace: rec,
        kkt_residual: kkt,
        rho_trace: rhos,
        seconds_per_iteration: admm_s,
        objective_trace: obj,
    })
}

/// The baseline's `cfg.dd_iterations` iterations on `cfg.hosts` hosts.
fn run_dual(
    cfg: &Config,
    model: Model,
    clock: &mut dyn FnMut() -> f64,
    progress: &mut dyn FnMut(Progress),
) -> Result<DualRun, DrumError> {
    let mut dd = DualFleet::new(model, cfg.hosts, cfg.dd_rho)?;
    let (mut dobj, mut drec, mut dprim) = (vec![], vec![], vec![]);
    let t0 = clock();
    for i in 1..=cfg.dd_iterations {
        progress(Progress::Dual(i, cfg.dd_iterations));
        let s = dd.iterate()?;
        dobj.push(s.objective);
        drec.push(s.recovered);
        dprim.push(s.primal_residual);
    }
    #[allow(clippy::cast_precision_loss)]
    let dd_s = (clock() - t0) / cfg.dd_iterations as f64;
    Ok(DualRun {
        objective_at_60: *dobj.last().unwrap_or(&f64::NAN),
        objective_trace: dobj,
        recovered_trace: drec,
        primal_residual: dprim,
        seconds_per_iteration: dd_s,
    })
}

/// The mean of `(P_admm - P_dd) / |P_admm|` over the first `common` iterations.
#[allow(clippy::cast_precision_loss)]
fn utility_gap(obj: &[f64], dobj: &[f64], common: usize) -> f64 {
    (0..common)
        .map(|i| (obj[i] - dobj[i]) / obj[i].abs())
        .sum::<f64>()
        / common as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settle_is_the_first_iteration_that_stays_within() {
        assert_eq!(
            settle(&[0.0, 99.0, 100.2, 90.0, 99.8, 100.0], 100.0),
            Some(5)
        );
        assert_eq!(settle(&[100.0, 100.1], 100.0), Some(1));
        assert_eq!(settle(&[100.0, 50.0], 100.0), None);
        // Negative optimum: within 0.5 % of |P*|.
        assert_eq!(settle(&[-3.0, -2.009], -2.0), Some(2));
    }
}
