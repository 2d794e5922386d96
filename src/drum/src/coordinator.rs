//! Algorithm 2, DRUM-coordination: collect every host's report, sum, update u, broadcast.
//!
//! The coordinator holds u (m numbers) and the running sum of the reports of the iteration in
//! progress; it never sees x or z. Reports may arrive in any order and already merged (see
//! [`HostReport::merge`]); the broadcast goes out once all n hosts are in. The same coordinator
//! drives the dual-decomposition baseline with its diminishing step.
//!
//! **Stopping.** The paper stops "at the 17th iteration" against a known 99.5 % line, which a
//! running system does not have. [`Stopping`] asks for both a small primal residual,
//! `sqrt(sum_i ||A x_i - z_i||^2) <= primal * sqrt(sum_i ||z_i||^2)`, and a small objective
//! change, `|P^k - P^{k-1}| <= objective * |P^k|`; [`Summary`] reports both every iteration.
//!
//! **The penalty.** With [`StepRule::Balanced`] the coordinator also moves rho by residual
//! balancing ([`crate::penalty`]) after each u-update and broadcasts it
//! ([`Broadcast::rho`]); the hosts must step with it ([`crate::Solver::set_rho`]).

use crate::penalty::Balancing;
use crate::uupdate::dual_ascent;
use crate::{Broadcast, DrumError, HostReport};
use serde::{Deserialize, Serialize};

/// How the dual step is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum StepRule {
    /// ADMM: the penalty rho, every iteration.
    Constant(f64),
    /// Dual decomposition: `rho0 / sqrt(k)` at the k-th update (k = 1, 2, ...).
    Diminishing(f64),
    /// ADMM with residual balancing: the current penalty (the start until the first update)
    /// and the rule that moves it.
    Balanced {
        /// The penalty of the iteration in progress.
        rho: f64,
        /// How it moves.
        balancing: Balancing,
    },
}

impl StepRule {
    /// The step of the k-th update (k >= 1).
    #[must_use]
    pub fn step(&self, k: u64) -> f64 {
        match *self {
            Self::Constant(r) | Self::Balanced { rho: r, .. } => r,
            #[allow(clippy::cast_precision_loss)]
            Self::Diminishing(r) => r / (k.max(1) as f64).sqrt(),
        }
    }

    /// The penalty the coordinator broadcasts: the current rho under balancing, `None` for the
    /// rules whose hosts keep their own.
    #[must_use]
    pub fn broadcast_rho(&self) -> Option<f64> {
        match *self {
            Self::Balanced { rho, .. } => Some(rho),
            Self::Constant(_) | Self::Diminishing(_) => None,
        }
    }

    /// After the k-th update with residual norms `primal = ||r||` and `dual = ||s||`: moves a
    /// balanced rule's rho (the others do not move).
    fn adapt(&mut self, k: u64, primal: f64, dual: f64) {
        if let Self::Balanced { rho, balancing } = self {
            *rho = balancing.next(*rho, k, primal, dual);
        }
    }

    fn check(&self) -> Result<(), DrumError> {
        let r = match *self {
            Self::Constant(r) | Self::Diminishing(r) => r,
            Self::Balanced { rho, balancing } => {
                balancing.check()?;
                rho
            }
        };
        if r.is_finite() && r > 0.0 {
            Ok(())
        } else {
            Err(DrumError::OutOfRange {
                param: "rho",
                value: r,
                range: "a positive number",
            })
        }
    }
}

/// The stopping rule: both thresholds must hold.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Stopping {
    /// Relative primal residual.
    pub primal: f64,
    /// Relative objective change.
    pub objective: f64,
}

impl Default for Stopping {
    fn default() -> Self {
        Self {
            primal: 1e-3,
            objective: 1e-4,
        }
    }
}

/// One iteration as the coordinator saw it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// The iteration completed (1 for the first).
    pub iteration: u64,
    /// `P^k = sum_i f~(x_i) + g(z_i)`.
    pub objective: f64,
    /// `sum_i f~(x_i)`.
    pub utility: f64,
    /// `sum_i g(z_i)`.
    pub latency: f64,
    /// `sum_i ||A x_i - z_i||^2`: the paper's primal residual (squared, as in its Fig. 5).
    pub primal_residual: f64,
    /// `sqrt(primal_residual / sum_i ||z_i||^2)`.
    pub relative_primal: f64,
    /// `sum_i ||stationarity||^2` of the previous iterate (0 in the first iteration).
    pub stationarity: f64,
    /// `rho^2 sum_i ||A (z_i^{k+1} - z_i^k)||^2`: Boyd's dual residual, squared like the primal
    /// one (0 for the baseline).
    pub dual_residual: f64,
    /// The penalty (or the baseline's step) this iteration ran with.
    pub rho: f64,
    /// The objective of the feasible schedule recovered from z (see [`HostReport::recovered`]).
    pub recovered: f64,
    /// `|P^k - P^{k-1}| / |P^k|` (infinite in the first iteration).
    pub objective_change: f64,
    /// Whether the stopping rule holds at this iteration.
    pub stop: bool,
}

/// Algorithm 2 (serde: a fleet's coordinator can checkpoint it, or hand it over).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Coordinator {
    hosts: u64,
    rule: StepRule,
    stopping: Stopping,
    broadcast: Broadcast,
    acc: HostReport,
    last: Option<f64>,
}

impl Coordinator {
    /// u^0 = 0 for `apps` applications and `hosts` hosts.
    pub fn new(
        apps: usize,
        hosts: u64,
        rule: StepRule,
        stopping: Stopping,
    ) -> Result<Self, DrumError> {
        if hosts == 0 {
            return Err(DrumError::Count {
                param: "hosts",
                value: 0,
                range: "at least 1",
            });
        }
        rule.check()?;
        Ok(Self {
            hosts,
            rule,
            stopping,
            broadcast: Broadcast {
                iteration: 0,
                u: vec![0.0; apps],
                rho: rule.broadcast_rho(),
            },
            acc: HostReport::empty(apps, 1),
            last: None,
        })
    }

    /// The rule, with a balanced rule's current penalty.
    #[must_use]
    pub fn rule(&self) -> StepRule {
        self.rule
    }

    /// What the hosts need for the next iteration.
    #[must_use]
    pub fn broadcast(&self) -> &Broadcast {
        &self.broadcast
    }

    /// Adds one (or several merged) hosts' report of the iteration in progress.
    pub fn absorb(&mut self, r: &HostReport) -> Result<(), DrumError> {
        self.acc.merge(r)?;
        if self.acc.hosts > self.hosts {
            return Err(DrumError::Reports {
                got: self.acc.hosts,
                want: self.hosts,
            });
        }
        Ok(())
    }

    /// Once every host reported: the u-update, the iteration's summary, and the next broadcast.
    pub fn finish(&mut self) -> Result<Summary, DrumError> {
        if self.acc.hosts != self.hosts {
            return Err(DrumError::Missing {
                got: self.acc.hosts,
                want: self.hosts,
            });
        }
        let k = self.acc.iteration;
        let rho = self.rule.step(k);
        dual_ascent(&mut self.broadcast.u, &self.acc.residual, self.hosts, rho);
        let dual_residual = rho * rho * self.acc.dual_sq;
        self.rule
            .adapt(k, self.acc.primal_sq.sqrt(), dual_residual.sqrt());
        self.broadcast.iteration = k;
        self.broadcast.rho = self.rule.broadcast_rho();
        let r = &self.acc;
        let objective = r.utility + r.latency;
        let objective_change = self
            .last
            .map_or(f64::INFINITY, |p| (objective - p).abs() / objective.abs());
        let relative_primal = (r.primal_sq / r.z_sq).sqrt();
        let s = Summary {
            iteration: k,
            objective,
            utility: r.utility,
            latency: r.latency,
            primal_residual: r.primal_sq,
            relative_primal,
            stationarity: r.stationarity_sq,
            dual_residual,
            rho,
            recovered: r.recovered,
            objective_change,
            stop: relative_primal <= self.stopping.primal
                && objective_change <= self.stopping.objective,
        };
        self.last = Some(objective);
        self.acc.reset(k + 1);
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(it: u64, residual: Vec<f64>, utility: f64) -> HostReport {
        let mut r = HostReport::empty(residual.len(), it);
        r.hosts = 1;
        r.residual = residual;
        r.utility = utility;
        r.z_sq = 1.0;
        r
    }

    #[test]
    fn sums_reports_and_broadcasts_the_averaged_update() {
        let mut c = Coordinator::new(2, 2, StepRule::Constant(0.1), Stopping::default()).unwrap();
        assert_eq!(c.broadcast().u, [0.0, 0.0]);
        c.absorb(&report(1, vec![1.0, 2.0], 3.0)).unwrap();
        assert!(matches!(
            c.finish(),
            Err(DrumError::Missing { got: 1, want: 2 })
        ));
        c.absorb(&report(1, vec![3.0, -4.0], 4.0)).unwrap();
        let s = c.finish().unwrap();
        assert_eq!(s.iteration, 1);
        assert_eq!(s.objective, 7.0);
        // u = 0.1 / 2 * (4, -2).
        assert_eq!(c.broadcast().u, [0.2, -0.1]);
        assert_eq!(c.broadcast().iteration, 1);
        // A report of the old iteration is refused.
        assert!(matches!(
            c.absorb(&report(1, vec![0.0, 0.0], 0.0)),
            Err(DrumError::Iteration {
                got: 1,
                want: 2,
                ..
            })
        ));
    }

    #[test]
    fn balancing_updates_u_at_the_old_rho_and_broadcasts_the_new() {
        let rule = StepRule::Balanced {
            rho: 0.5,
            balancing: Balancing::default(),
        };
        let mut c = Coordinator::new(1, 1, rule, Stopping::default()).unwrap();
        assert_eq!(c.broadcast().rho, Some(0.5));
        // ||r|| = 1, ||s|| = 0.5 * 0.01: the primal residual lags, rho doubles.
        let mut r = report(1, vec![1.0], 1.0);
        r.primal_sq = 1.0;
        r.dual_sq = 1e-4;
        c.absorb(&r).unwrap();
        let s = c.finish().unwrap();
        assert_eq!(s.rho, 0.5);
        assert!((s.dual_residual - 0.25e-4).abs() < 1e-18);
        // u moved by the old rho and is not rescaled (it is the unscaled multiplier).
        assert_eq!(c.broadcast().u, [0.5]);
        assert_eq!(c.broadcast().rho, Some(1.0));
        assert_eq!(c.rule().step(2), 1.0);
        // ||s|| = 1 * 100 > 10 ||r||: rho halves.
        let mut r = report(2, vec![0.0], 1.0);
        r.primal_sq = 1.0;
        r.dual_sq = 1e4;
        c.absorb(&r).unwrap();
        assert_eq!(c.finish().unwrap().rho, 1.0);
        assert_eq!(c.broadcast().rho, Some(0.5));
    }

    #[test]
    fn a_fixed_penalty_is_not_broadcast_and_a_bad_rule_is_refused() {
        let c = Coordinator::new(1, 1, StepRule::Constant(1.0), Stopping::default()).unwrap();
        assert_eq!(c.broadcast().rho, None);
        let bad = StepRule::Balanced {
            rho: 1.0,
            balancing: Balancing {
                tau: 0.5,
                ..Balancing::default()
            },
        };
        assert!(Coordinator::new(1, 1, bad, Stopping::default()).is_err());
        assert!(Coordinator::new(1, 1, StepRule::Constant(0.0), Stopping::default()).is_err());
    }

    #[test]
    fn diminishing_step_is_rho_over_sqrt_k() {
        let r = StepRule::Diminishing(1e-3);
        assert_eq!(r.step(1), 1e-3);
        assert!((r.step(4) - 5e-4).abs() < 1e-18);
        let mut c = Coordinator::new(1, 1, r, Stopping::default()).unwrap();
        for k in 1..=4 {
            c.absorb(&report(k, vec![1.0], 1.0)).unwrap();
            c.finish().unwrap();
        }
        let want = 1e-3 * (1.0 + 1.0 / 2f64.sqrt() + 1.0 / 3f64.sqrt() + 0.5);
        assert!((c.broadcast().u[0] - want).abs() < 1e-15);
    }

    #[test]
    fn stops_when_residual_and_objective_change_are_small() {
        let mut c = Coordinator::new(1, 1, StepRule::Constant(1.0), Stopping::default()).unwrap();
        let mut r = report(1, vec![1e-4], 100.0);
        r.primal_sq = 1e-8;
        c.absorb(&r).unwrap();
        assert!(!c.finish().unwrap().stop, "no objective change yet");
        r.iteration = 2;
        r.utility = 100.001;
        c.absorb(&r).unwrap();
        assert!(c.finish().unwrap().stop);
    }
}
