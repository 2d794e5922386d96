//! The model's parameters, and the paper's simulation set-up turned into them.
//!
//! Problem (4) of the paper, per host i with m applications:
//!
//! ```text
//! maximise  sum_i f~(x_i) + g(z_i)
//! s.t.      sum_j x_ij <= Q,   sum_j z_ij <= C,   a_j x_ij = z_ij,   x_i >= 0, z_i > 0
//! f~(x)  = the sum of the k largest  x_j^(1-alpha) / (1-alpha)        (the top-k alpha-fair utility)
//! g(z)   = -beta * sum_j z_j^-2                                       (the CQ latency utility)
//! ```
//!
//! **The capacities.** The paper's cost is `h^q(x) = sum_j log x_j <= q` (and `h^c(z) <= c`),
//! called convex; it is not: `log` is concave and the set `{x : prod_j x_j <= e^q}` is not
//! convex (with m = 2, (4, 1/4) and (1/4, 4) are in it, their midpoint is not). Worse, with the
//! top-k utility the problem is then unbounded once `1 - alpha > 2k/(m - k)` (give the k
//! favoured applications rate L and the others `(e^q / L^k)^(1/(m-k))`: the utility grows as
//! `L^(1-alpha)`, the latency term only as `L^(2k/(m-k))`), which with k = 20 and alpha = 1/2 is
//! every m > 100: two thirds of the paper's grid. We keep the paper's numbers and replace its
//! constraint by its convex inner approximation through the AM-GM inequality:
//! `sum_j x_j <= m e^(q/m)` implies `(prod_j x_j)^(1/m) <= e^(q/m)`, i.e. `sum_j log x_j <= q`.
//! Every allocation we accept satisfies the paper's constraint; the two coincide when all rates
//! are equal. So [`Params::from_paper`] sets `Q = m e^(q/m)`, `C = m e^(c/m)`.
//!
//! **beta.** The simulation section gives no beta. The proof of Theorem 1 writes
//! `g_i(z_i) = -q sum_j (1/z_ij)^2`; we read that `q` as a slip for beta (q_i is already the
//! capacity of x in (4), listed with a host index like c_i) and default beta to 1; `--beta`
//! changes it.
//!
//! **alpha.** Not given either; the paper's closed form is for alpha = 1/2, our default.

use crate::DrumError;
use serde::{Deserialize, Serialize};

/// The parameters of one DRUM instance (shared by every host and the coordinator).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Params {
    /// Applications per host (m).
    pub apps: usize,
    /// Active connections per host: only the k largest rates earn utility.
    pub k: usize,
    /// The fairness exponent, 0 < alpha < 1.
    pub alpha: f64,
    /// Weight of the latency utility g.
    pub beta: f64,
    /// Q: the WQE rate capacity of one host, `sum_j x_ij <= Q`.
    pub x_capacity: f64,
    /// C: the CQE polling capacity of one host, `sum_j z_ij <= C`.
    pub z_capacity: f64,
    /// The ADMM penalty rho (also the dual step).
    pub rho: f64,
    /// How the x-step chooses the k applications that earn utility.
    pub selection: Selection,
}

/// How the x-step chooses T, the k applications that earn utility (see [`crate::xstep`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Selection {
    /// The k applications with the largest rates `z_j / a_j` of the last z-step (the exact
    /// choice in the first iteration, when every rate is 0).
    #[default]
    Rates,
    /// The exact minimiser of every x-step: the k largest gains.
    Exact,
}

/// The paper's simulation set-up (Section III-D) before it is turned into [`Params`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PaperSetup {
    /// k = 20.
    pub k: usize,
    /// q_i = 25 (the paper's log-capacity of x).
    pub q: f64,
    /// c_i = 15 (the paper's log-capacity of z).
    pub c: f64,
    /// alpha (not in the paper; 1/2).
    pub alpha: f64,
    /// beta (not in the paper; 1).
    pub beta: f64,
    /// rho = 1e-3.
    pub rho: f64,
    /// The x-step's choice of T.
    pub selection: Selection,
}

impl Default for PaperSetup {
    fn default() -> Self {
        Self {
            k: 20,
            q: 25.0,
            c: 15.0,
            alpha: 0.5,
            beta: 1.0,
            rho: 1e-3,
            selection: Selection::Rates,
        }
    }
}

impl Params {
    /// The paper's set-up for m applications: `Q = m e^(q/m)`, `C = m e^(c/m)` (see the module
    /// documentation for why).
    pub fn from_paper(apps: usize, s: &PaperSetup) -> Result<Self, DrumError> {
        #[allow(clippy::cast_precision_loss)]
        let m = apps as f64;
        let p = Self {
            apps,
            k: s.k,
            alpha: s.alpha,
            beta: s.beta,
            x_capacity: m * (s.q / m).exp(),
            z_capacity: m * (s.c / m).exp(),
            rho: s.rho,
            selection: s.selection,
        };
        p.check()?;
        Ok(p)
    }

    /// Checks every range; the error names the parameter.
    pub fn check(&self) -> Result<(), DrumError> {
        let count = |param, value: usize, range| {
            Err(DrumError::Count {
                param,
                value: value as u64,
                range,
            })
        };
        let real = |param, value, range| {
            Err(DrumError::OutOfRange {
                param,
                value,
                range,
            })
        };
        if self.apps == 0 || u32::try_from(self.apps).is_err() {
            return count("apps", self.apps, "between 1 and 2^32 - 1");
        }
        if self.k == 0 || self.k > self.apps {
            return count("k", self.k, "between 1 and the number of applications");
        }
        if !(self.alpha > 0.0 && self.alpha < 1.0) {
            return real("alpha", self.alpha, "in (0, 1)");
        }
        let pos = |v: f64| v.is_finite() && v > 0.0;
        if !pos(self.beta) {
            return real("beta", self.beta, "a positive number");
        }
        for c in [self.x_capacity, self.z_capacity] {
            if !pos(c) {
                return real("capacities", c, "positive numbers");
            }
        }
        if !pos(self.rho) {
            return real("rho", self.rho, "a positive number");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paper_capacities_are_the_am_gm_bound_of_the_log_capacities() {
        let p = Params::from_paper(50, &PaperSetup::default()).unwrap();
        assert!((p.x_capacity - 50.0 * 0.5f64.exp()).abs() < 1e-12);
        assert!((p.z_capacity - 50.0 * 0.3f64.exp()).abs() < 1e-12);
        // Equal rates at the capacity meet the paper's constraint with equality.
        let per_app = p.z_capacity / 50.0;
        assert!((50.0 * per_app.ln() - 15.0).abs() < 1e-9);
    }

    #[test]
    fn rejects_k_above_m_and_alpha_out_of_range() {
        let s = PaperSetup::default();
        assert!(Params::from_paper(10, &s).is_err());
        let s = PaperSetup { alpha: 1.0, ..s };
        assert!(Params::from_paper(50, &s).is_err());
    }
}
