//! The ADMM penalty rho: fixed, or adapted by residual balancing.
//!
//! **Why adapt.** The paper's rho = 1e-3 is "empirical" for its (unstated) units; in ours it
//! is about three orders of magnitude below the problem's curvature and ADMM does not converge
//! in 60 iterations (`docs/drum.md`, "Rho"). Residual balancing (Boyd et al., "Distributed
//! Optimization and Statistical Learning via the Alternating Direction Method of Multipliers",
//! 2011, section 3.4.1) moves rho so that neither residual lags far behind the other:
//!
//! ```text
//! rho <- tau rho   if ||r|| > mu ||s||      (the constraint lags: penalise it harder)
//! rho <- rho / tau if ||s|| > mu ||r||      (the iterates still move: penalise less)
//! ```
//!
//! with the primal residual `r = A x^{k+1} - z^{k+1}` and the dual residual
//! `s = rho A (z^{k+1} - z^k)` (Boyd's `rho A^T B (z^{k+1} - z^k)` with B = -I), both summed
//! over hosts ([`crate::HostReport::primal_sq`], [`crate::HostReport::dual_sq`]). Alike hosts
//! scale both sums by n, so the decision, like the iterates, does not depend on n.
//!
//! **u is not rescaled.** Boyd's scaled form keeps `w = y / rho` and must rescale w by
//! `rho_old / rho_new` when rho changes. Our u is the unscaled multiplier y: the x- and z-steps
//! use `u^T (A x - z) + (rho/2) ||A x - z||^2` and the update is `u += rho (A x - z)`
//! ([`crate::uupdate`]), so u keeps its value across a change of rho (rescaling it would move
//! the prices, not keep them).
//!
//! **Freezing.** ADMM's convergence proof holds for a penalty that changes finitely often:
//! the rule stops moving rho after [`Balancing::freeze_after`] iterations.

use crate::DrumError;
use serde::{Deserialize, Serialize};

/// Residual balancing's parameters (Boyd et al. 2011, section 3.4.1).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Balancing {
    /// The imbalance that moves rho: one residual more than `mu` times the other (Boyd: 10).
    pub mu: f64,
    /// The factor rho moves by (Boyd: 2).
    pub tau: f64,
    /// rho stays at its value from this iteration on (0: never frozen).
    pub freeze_after: u64,
}

impl Default for Balancing {
    /// Boyd's typical mu = 10 and tau = 2; frozen after 100 iterations.
    fn default() -> Self {
        Self {
            mu: 10.0,
            tau: 2.0,
            freeze_after: 100,
        }
    }
}

impl Balancing {
    /// Checks the ranges: mu >= 1 and tau > 1, both finite.
    pub fn check(&self) -> Result<(), DrumError> {
        if !(self.mu.is_finite() && self.mu >= 1.0) {
            return Err(DrumError::OutOfRange {
                param: "balancing mu",
                value: self.mu,
                range: "at least 1",
            });
        }
        if !(self.tau.is_finite() && self.tau > 1.0) {
            return Err(DrumError::OutOfRange {
                param: "balancing tau",
                value: self.tau,
                range: "a number above 1",
            });
        }
        Ok(())
    }

    /// The penalty after iteration `k` with residual norms `primal = ||r||`, `dual = ||s||`.
    #[must_use]
    pub fn next(&self, rho: f64, k: u64, primal: f64, dual: f64) -> f64 {
        if self.freeze_after > 0 && k >= self.freeze_after {
            return rho;
        }
        let next = if primal > self.mu * dual {
            rho * self.tau
        } else if dual > self.mu * primal {
            rho / self.tau
        } else {
            rho
        };
        // Never to 0 or infinity: rho stays a positive number (see `Params::check`).
        if next.is_finite() && next > 0.0 {
            next
        } else {
            rho
        }
    }
}

/// Which penalty rule ADMM runs (the starting rho is [`crate::Params::rho`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Penalty {
    /// rho stays at its start: the paper's rule.
    Fixed,
    /// rho moves by residual balancing.
    Adaptive(Balancing),
}

/// A penalty rule's name, for reports (serde: `"fixed"`, `"adaptive"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PenaltyRule {
    /// [`Penalty::Fixed`].
    Fixed,
    /// [`Penalty::Adaptive`].
    Adaptive,
}

impl Penalty {
    /// The rule's name.
    #[must_use]
    pub fn rule(&self) -> PenaltyRule {
        match self {
            Self::Fixed => PenaltyRule::Fixed,
            Self::Adaptive(_) => PenaltyRule::Adaptive,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn balancing_moves_rho_toward_the_lagging_residual() {
        let b = Balancing::default();
        // The primal residual lags: rho doubles.
        assert_eq!(b.next(1.0, 1, 11.0, 1.0), 2.0);
        // The dual residual lags: rho halves.
        assert_eq!(b.next(1.0, 1, 1.0, 11.0), 0.5);
        // Within a factor mu of each other: rho stays.
        assert_eq!(b.next(1.0, 1, 10.0, 1.0), 1.0);
        assert_eq!(b.next(1.0, 1, 1.0, 10.0), 1.0);
        // Frozen after `freeze_after` iterations.
        assert_eq!(b.next(1.0, 100, 1e3, 1.0), 1.0);
        // Both residuals 0 (converged): rho stays.
        assert_eq!(b.next(1.0, 1, 0.0, 0.0), 1.0);
    }

    #[test]
    fn balancing_never_leaves_the_positive_numbers() {
        let b = Balancing::default();
        assert_eq!(b.next(f64::MAX, 1, 1.0, 0.0), f64::MAX);
        let tiny = 5e-324;
        assert_eq!(b.next(tiny, 1, 0.0, 1.0), tiny);
    }

    #[test]
    fn check_refuses_a_factor_that_does_not_move_rho() {
        let b = Balancing {
            tau: 1.0,
            ..Balancing::default()
        };
        assert_eq!(
            b.check(),
            Err(DrumError::OutOfRange {
                param: "balancing tau",
                value: 1.0,
                range: "a number above 1"
            })
        );
        assert_eq!(
            b.check().unwrap_err().to_string(),
            "invalid parameter: balancing tau must be a number above 1"
        );
        let b = Balancing {
            mu: 0.5,
            ..Balancing::default()
        };
        assert!(b.check().is_err());
        assert!(Balancing::default().check().is_ok());
    }
}
