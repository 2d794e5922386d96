//! The optimum of one host's problem, found independently of ADMM and certified.
//!
//! With `z = A x` substituted, a host's problem is
//! `max f~(x) - beta sum_j (a_j x_j)^-2` s.t. `sum_j x_j <= Q`, `sum_j a_j x_j <= C`. Its
//! Lagrangian dual
//!
//! ```text
//! D(mu_x, mu_z) = mu_x Q + mu_z C + sum_j out_j + (sum of the k largest (in_j - out_j))
//! out_j = max_z  -beta z^-2 - p_j z,       in_j = max_z  phi(z / a_j) - beta z^-2 - p_j z,
//! p_j   = mu_x / a_j + mu_z
//! ```
//!
//! (each application maximised in T and out of it; T takes the k best gains) is convex, and
//! weak duality `OPT <= D(mu)` holds for every mu >= 0 whether or not the problem is convex (it
//! is not, see [`crate::utility`]). We minimise D by bisection on its derivatives
//! (`C - sum_j z_j` in mu_z, `Q - sum_j x_j` in mu_x, nested), take the maximiser at the
//! minimum as a schedule, scale it into both capacities (a factor within rounding of 1), and
//! evaluate the primal objective there: a feasible value `P <= OPT`. So
//! `P <= OPT <= D`, and `D - P` is the certificate's gap (about 1e-12 relative in the paper's
//! set-up: the top-k non-convexity costs nothing there, T is the k smallest a_j).
//!
//! Every host of the paper's set-up has the same problem, so the fleet's optimum is n times one
//! host's. Each application's `in_j` is the root of a decreasing convex function of x, found by
//! Newton's method from the left (monotone).

use crate::utility::{fair, fair_slope, latency, top_k};
use crate::Model;
use serde::{Deserialize, Serialize};

/// One host's optimum.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reference {
    /// The primal objective of the feasible schedule (a lower bound of the optimum).
    pub objective: f64,
    /// The dual bound (an upper bound of the optimum).
    pub dual_bound: f64,
    /// The price of the x capacity at the dual minimum.
    pub mu_x: f64,
    /// The price of the z capacity at the dual minimum.
    pub mu_z: f64,
    /// The schedule's WQE rates.
    pub x: Vec<f64>,
    /// The schedule's CQE polling rates (`A x`).
    pub z: Vec<f64>,
}

/// Per application at given prices: (z, value) in and out of T.
fn app(model: &Model, j: usize, mu_x: f64, mu_z: f64) -> ((f64, f64), (f64, f64)) {
    let p = model.params;
    let a = model.a[j];
    let price = mu_x / a + mu_z;
    let z_out = (2.0 * p.beta / price).cbrt();
    let v_out = -p.beta / (z_out * z_out) - price * z_out;
    // In T, in x = z / a: F(x) = x^-alpha + 2 beta a^-2 x^-3 - price a, decreasing, convex.
    let k2 = 2.0 * p.beta / (a * a);
    let f = |x: f64| fair_slope(p.alpha, x) + k2 / (x * x * x) - price * a;
    let df = |x: f64| -p.alpha * x.powf(-p.alpha - 1.0) - 3.0 * k2 / (x * x * x * x);
    let mut x = z_out / a;
    for _ in 0..200 {
        let next = x - f(x) / df(x);
        if next.is_nan() || next <= x || next - x <= 1e-15 * x {
            break;
        }
        x = next;
    }
    let z_in = a * x;
    let v_in = fair(p.alpha, x) - p.beta / (z_in * z_in) - price * z_in;
    ((z_in, v_in), (z_out, v_out))
}

/// `D(mu)`, `sum_j z_j`, `sum_j x_j` at the Lagrangian maximiser, and the maximiser's z.
fn lagrangian(model: &Model, mu_x: f64, mu_z: f64, z: &mut Vec<f64>) -> (f64, f64, f64) {
    let p = model.params;
    z.clear();
    let mut gains: Vec<(f64, usize, f64)> = Vec::with_capacity(p.apps);
    let mut d = mu_x * p.x_capacity + mu_z * p.z_capacity;
    for j in 0..p.apps {
        let ((zi, vi), (zo, vo)) = app(model, j, mu_x, mu_z);
        d += vo;
        z.push(zo);
        gains.push((vi - vo, j, zi));
    }
    gains.sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    for &(g, j, zi) in &gains[..p.k] {
        d += g;
        z[j] = zi;
    }
    let sz = z.iter().sum();
    let sx = z.iter().zip(&model.a).map(|(z, a)| z / a).sum();
    (d, sz, sx)
}

/// Bisection in log space for the root of an increasing function on (0, infinity).
fn log_bisect(mut g: impl FnMut(f64) -> f64) -> f64 {
    let (mut lo, mut hi) = (1e-12, 1.0);
    while g(hi) < 0.0 && hi < 1e300 {
        lo = hi;
        hi *= 1e3;
    }
    while g(lo) > 0.0 && lo > 1e-300 {
        hi = lo;
        lo *= 1e-3;
    }
    for _ in 0..200 {
        let mid = (lo * hi).sqrt();
        if g(mid) < 0.0 {
            lo = mid;
        } else {
            hi = mid;
        }
        if hi - lo <= 1e-15 * hi {
            break;
        }
    }
    hi
}

/// The optimum of one host of `model`.
#[must_use]
pub fn solve(model: &Model) -> Reference {
    let p = model.params;
    let mut z = Vec::with_capacity(p.apps);
    let inner = |mu_x: f64, z: &mut Vec<f64>| -> f64 {
        log_bisect(|mu_z| p.z_capacity - lagrangian(model, mu_x, mu_z, z).1)
    };
    let mut mu_z = inner(0.0, &mut z);
    let mut mu_x = 0.0;
    if lagrangian(model, 0.0, mu_z, &mut z).2 > p.x_capacity {
        mu_x = log_bisect(|mx| {
            let mz = inner(mx, &mut z);
            p.x_capacity - lagrangian(model, mx, mz, &mut z).2
        });
        mu_z = inner(mu_x, &mut z);
    }
    let (dual_bound, sz, sx) = lagrangian(model, mu_x, mu_z, &mut z);
    let theta = 1f64.min(p.z_capacity / sz).min(p.x_capacity / sx);
    let z: Vec<f64> = z.iter().map(|v| v * theta).collect();
    let x: Vec<f64> = z.iter().zip(&model.a).map(|(z, a)| z / a).collect();
    let objective = top_k(p.alpha, p.k, &x) + latency(p.beta, &z);
    Reference {
        objective,
        dual_bound,
        mu_x,
        mu_z,
        x,
        z,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{PaperSetup, Params};

    #[test]
    fn certified_within_a_tiny_gap_and_feasible() {
        let p = Params::from_paper(50, &PaperSetup::default()).unwrap();
        let m = Model::paper(p, 1).unwrap();
        let r = solve(&m);
        assert!(r.objective <= r.dual_bound + 1e-12);
        assert!(
            (r.dual_bound - r.objective) <= 1e-9 * r.objective.abs(),
            "{r:?}"
        );
        assert!(r.z.iter().sum::<f64>() <= p.z_capacity * (1.0 + 1e-15));
        assert!(r.x.iter().sum::<f64>() <= p.x_capacity);
    }

    #[test]
    fn one_application_by_hand() {
        // m = k = 1, a = 1, alpha = 1/2, beta = 1, C = 2, Q large: z = x = 2 (capacity binds:
        // the utility 2 sqrt(x) - x^-2 grows for ever), objective 2 sqrt 2 - 1/4.
        let p = Params {
            apps: 1,
            k: 1,
            alpha: 0.5,
            beta: 1.0,
            x_capacity: 100.0,
            z_capacity: 2.0,
            rho: 1.0,
            selection: crate::Selection::Rates,
        };
        let r = solve(&Model::new(p, vec![1.0]).unwrap());
        assert!(
            (r.objective - (2.0 * 2f64.sqrt() - 0.25)).abs() < 1e-12,
            "{r:?}"
        );
        // mu_z = phi'(2) + 2 beta z^-3 = 1/sqrt 2 + 1/4.
        assert!((r.mu_z - (0.5f64.sqrt() + 0.25)).abs() < 1e-9, "{r:?}");
    }
}
