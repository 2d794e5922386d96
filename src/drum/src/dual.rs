//! The baseline: dual decomposition with (sub)gradient steps on the same problem (4).
//!
//! The coupling `A x_i = z_i` is priced by the same shared u (averaged over hosts, see
//! [`crate::uupdate`]) and each host maximises its Lagrangian with no penalty term:
//!
//! ```text
//! x_i(u) = argmax  f~(x) - u^T A x   s.t. sum_j x_j <= Q, x >= 0
//! z_i(u) = argmax  g(z)  + u^T z     s.t. sum_j z_j <= C
//! u      <- u + rho_k * mean_i (A x_i(u) - z_i(u)),   rho_k = 1e-3 / sqrt(k)
//! ```
//!
//! Both maximisations have closed forms. With `c_j = a_j u_j`, putting j in T is worth more the
//! smaller c_j, so T is the k smallest c_j, `x_j = (c_j + mu)^(-1/alpha)` there and 0 elsewhere,
//! with mu >= 0 the price that fills Q (found by the Illinois method; it is always above
//! `-min c_j`, so no application outside T ever wants capacity). And
//! `z_j = (2 beta / (mu - u_j))^(1/3)` with mu >= max(0, max_j u_j) the price that fills C (Newton's
//! method, safeguarded by bisection), or mu = 0 when C is slack.
//!
//! The paper's baseline solved its problem (1) instead (the QP utility alone, no CQ, no
//! coupling) and compared objective values of different problems; its 69.3 % "utility gap" is a
//! gap between models. Ours compares the two algorithms on one problem; `docs/drum.md` says
//! what that changes.

use crate::host::Solver;
use crate::topk::{Cand, TopK};
use crate::utility::fair;
use crate::{Broadcast, DrumError, HostReport};
use serde::{Deserialize, Serialize};

/// One host's warm starts (the two capacity prices).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct DualState {
    /// Iterations done.
    pub iteration: u64,
    /// The price of `sum_j x_j <= Q` last time.
    pub mu_x: f64,
    /// The price of `sum_j z_j <= C` last time.
    pub mu_z: f64,
}

/// A host's working buffers for the baseline.
#[derive(Debug, Clone)]
pub struct DualScratch {
    top: TopK,
    rtop: TopK,
}

impl DualScratch {
    /// Buffers for top k.
    #[must_use]
    pub fn new(k: usize) -> Self {
        Self {
            top: TopK::new(k),
            rtop: TopK::new(k),
        }
    }
}

impl Solver {
    /// One host's dual-decomposition step under the broadcast u; adds its results to `report`.
    pub fn dual_step(
        &self,
        st: &mut DualState,
        b: &Broadcast,
        sc: &mut DualScratch,
        report: &mut HostReport,
    ) -> Result<(), DrumError> {
        let p = self.model.params;
        let (a, u) = (&self.model.a, &b.u);
        if self.is_weighted() {
            return Err(DrumError::Weighted);
        }
        if u.len() != p.apps || report.residual.len() != p.apps {
            return Err(DrumError::Length {
                what: "broadcast or report",
                got: u.len().min(report.residual.len()),
                want: p.apps,
            });
        }
        if b.iteration != st.iteration || report.iteration != st.iteration + 1 {
            return Err(DrumError::Iteration {
                what: "broadcast",
                got: b.iteration,
                want: st.iteration,
            });
        }
        // x(u): T = the k smallest a_j u_j.
        sc.top.clear();
        for (j, (&aj, &uj)) in a.iter().zip(u).enumerate() {
            #[allow(clippy::cast_possible_truncation)]
            sc.top.offer(Cand {
                key: -(aj * uj),
                idx: j as u32,
                val: 0.0,
            });
        }
        let mu_x = self.x_price(sc.top.items(), st.mu_x);
        st.mu_x = mu_x;
        let mut utility = 0.0;
        for c in sc.top.sort_by_index() {
            let x = (mu_x - c.key).powf(-1.0 / p.alpha);
            utility += fair(p.alpha, x);
            report.residual[c.idx as usize] += a[c.idx as usize] * x;
        }
        // z(u).
        let mu_z = self.z_price(u, st.mu_z);
        st.mu_z = mu_z;
        let (mut latency, mut primal_sq, mut z_sq, mut sum_z, mut sum_xr) =
            (0.0, 0.0, 0.0, 0.0, 0.0);
        sc.rtop.clear();
        let tops = sc.top.items();
        let mut tp = 0;
        for (j, ((&aj, &uj), r)) in a.iter().zip(u).zip(report.residual.iter_mut()).enumerate() {
            let z = crate::num::cbrt(2.0 * p.beta / (mu_z - uj));
            let x = if tops.get(tp).is_some_and(|c| c.idx as usize == j) {
                tp += 1;
                (mu_x - tops[tp - 1].key).powf(-1.0 / p.alpha)
            } else {
                0.0
            };
            *r -= z;
            let d = aj * x - z;
            primal_sq += d * d;
            z_sq += z * z;
            latency -= p.beta / (z * z);
            sum_z += z;
            let xr = z / aj;
            sum_xr += xr;
            if xr > sc.rtop.threshold() {
                #[allow(clippy::cast_possible_truncation)]
                sc.rtop.offer(Cand {
                    key: xr,
                    idx: j as u32,
                    val: 0.0,
                });
            }
        }
        let ru: f64 = sc.rtop.items().iter().map(|c| fair(p.alpha, c.key)).sum();
        let theta = 1f64.min(p.x_capacity / sum_xr).min(p.z_capacity / sum_z);
        report.recovered += theta.powf(1.0 - p.alpha) * ru + latency / (theta * theta);
        report.hosts += 1;
        report.utility += utility;
        report.latency += latency;
        report.primal_sq += primal_sq;
        report.z_sq += z_sq;
        st.iteration += 1;
        Ok(())
    }

    /// The price filling Q for the selection `top` (keys are `-c_j`); 0 when Q is slack.
    fn x_price(&self, top: &[Cand], warm: f64) -> f64 {
        // The price of the capacity is mu = e - c_min.
        let p = self.model.params;
        // With e = mu + c_min > 0: sum_T (e + c_j - c_min)^(-1/alpha) - Q, decreasing in e.
        let cmin = top.iter().map(|c| -c.key).fold(f64::INFINITY, f64::min);
        let f = |e: f64| -> f64 {
            top.iter()
                .map(|c| (e - c.key - cmin).powf(-1.0 / p.alpha))
                .sum::<f64>()
                - p.x_capacity
        };
        if cmin > 0.0 && f(cmin) <= 0.0 {
            return 0.0;
        }
        // Every term is at most e^(-1/alpha), so f(e0) <= 0 at k e0^(-1/alpha) = Q; f grows
        // without bound as e -> 0.
        #[allow(clippy::cast_precision_loss)]
        let hi = (p.x_capacity / top.len() as f64).powf(-p.alpha);
        let fhi = f(hi);
        let mut lo = if warm + cmin > 0.0 && warm + cmin < hi {
            warm + cmin
        } else {
            0.5 * hi
        };
        let mut flo = f(lo);
        while flo <= 0.0 {
            lo *= 0.5;
            flo = f(lo);
        }
        let e = illinois(&f, lo, flo, hi, fhi, 1e-12 * p.x_capacity);
        (e - cmin).max(0.0)
    }

    /// The price filling C at u; 0 when C is slack.
    fn z_price(&self, u: &[f64], warm: f64) -> f64 {
        let p = self.model.params;
        let umax = u.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let two_b = 2.0 * p.beta;
        let eval = |mu: f64| -> (f64, f64) {
            let (mut s, mut d) = (0.0, 0.0);
            for &uj in u {
                let z = crate::num::cbrt(two_b / (mu - uj));
                s += z;
                d += z / (3.0 * (mu - uj));
            }
            (s - p.z_capacity, d)
        };
        let floor = umax.max(0.0);
        if umax < 0.0 && eval(0.0).0 <= 0.0 {
            return 0.0;
        }
        #[allow(clippy::cast_precision_loss)]
        let m = p.apps as f64;
        let mut hi = floor + two_b * (m / p.z_capacity).powi(3);
        let mut lo = floor;
        let mut mu = if warm > lo && warm < hi { warm } else { hi };
        for _ in 0..200 {
            let (s, d) = eval(mu);
            if s.abs() <= 1e-11 * p.z_capacity {
                return mu;
            }
            if s > 0.0 {
                lo = mu;
            } else {
                hi = mu;
            }
            let next = mu + s / d;
            mu = if next > lo && next < hi {
                next
            } else {
                0.5 * (lo + hi)
            };
            if hi - lo <= 1e-15 * hi {
                return mu;
            }
        }
        mu
    }
}

/// The Illinois method on a decreasing f with f(lo) > 0 >= f(hi).
pub(crate) fn illinois(
    f: &dyn Fn(f64) -> f64,
    mut lo: f64,
    mut flo: f64,
    mut hi: f64,
    mut fhi: f64,
    tol: f64,
) -> f64 {
    let mut side = 0i8;
    for _ in 0..300 {
        let mut mid = (lo * fhi - hi * flo) / (fhi - flo);
        if !(mid > lo && mid < hi) {
            mid = 0.5 * (lo + hi);
        }
        let fm = f(mid);
        if fm.abs() <= tol || hi - lo <= 1e-15 * hi {
            return mid;
        }
        if fm > 0.0 {
            lo = mid;
            flo = fm;
            if side == 1 {
                fhi *= 0.5;
            }
            side = 1;
        } else {
            hi = mid;
            fhi = fm;
            if side == -1 {
                flo *= 0.5;
            }
            side = -1;
        }
    }
    0.5 * (lo + hi)
}
