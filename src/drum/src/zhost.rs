//! The z-step of one host: every application's quartic ([`crate::zstep`]) at the price of the
//! capacity `sum_j z_ij <= C`, the price found by Newton's method, and the host's report.
//!
//! `S(mu) = sum_j z_j(mu) - C` is decreasing and convex in mu (each z_j is), with
//! `S'(mu) = -sum_j 1 / (rho + 6 beta z_j^-4)` and `S''` likewise in closed form. From the last
//! iteration's price, each step goes to the root of the second-order model of S (Newton's step
//! where the model has no root), which usually meets the tolerance in two passes where Newton
//! needs three; a step that lands at a negative price is cut to 0, where `S(0) <= 0` means the
//! capacity is slack. A host with no price yet (its first iteration) starts the search from the
//! price that fills the capacity for a sample of 64 applications. Each evaluation is one pass
//! that writes its candidate z (the warm start of the next evaluation); the last pass's z is the
//! step's result, and its sums (residual, latency, the recovered schedule) are what the host
//! reports. Tolerance: `|S| <= 1e-11 C`.

use crate::host::{run_chunks, HostScratch, HostState, Parallel, Solver, Sums};
use crate::topk::Cand;
use crate::topk::TopK;
use crate::utility::fair;
use crate::zstep::solve_t;
use crate::HostReport;

impl Solver {
    /// The z-step; adds the host's residual, latency, residual norms and recovered objective to
    /// `report`.
    /// `first` is an evaluation already done (by the fused pass) at the price `st.mu_z`.
    pub(crate) fn z_step(
        &self,
        st: &mut HostState,
        u: &[f64],
        sc: &mut HostScratch,
        par: Parallel,
        report: &mut HostReport,
        first: Option<(f64, f64, f64)>,
    ) {
        let c = self.model.params.z_capacity;
        let mut mu = st.mu_z.max(0.0);
        if first.is_none() && st.iteration == 0 {
            mu = self.sample_price(st, u);
        }
        let (mut s, mut slope, mut curv) = match first {
            Some(e) => e,
            None => self.z_pass(st, u, sc, par, mu),
        };
        for _ in 0..100 {
            if (mu == 0.0 && s <= 0.0) || s.abs() <= 1e-10 * c || slope <= 0.0 {
                break;
            }
            let next = (mu + model_step(s, slope, curv)).max(0.0);
            if next == mu {
                break;
            }
            mu = next;
            (s, slope, curv) = self.z_pass(st, u, sc, par, mu);
        }
        st.mu_z = mu;
        self.report_z(st, sc, report);
    }

    /// A first price when the host has none (its first iteration): the same search on every
    /// `stride`-th application against their share of the capacity, without a pass over the
    /// host. The exact passes start from it; the result is theirs (a start, not an
    /// approximation). Without it the first z-step took 10 passes from price 0 at the paper's
    /// set-up, with it 3.
    fn sample_price(&self, st: &HostState, u: &[f64]) -> f64 {
        let p = self.model.params;
        let m = p.apps;
        let stride = m.div_ceil(SAMPLE).max(1);
        #[allow(clippy::cast_precision_loss)]
        let share = p.z_capacity * (m.div_ceil(stride) as f64) / (m as f64);
        let a = &self.model.a;
        // Each evaluation starts from the last one's z (the first from the bound).
        let mut warm = [0.0; SAMPLE];
        let mut eval = |mu: f64| {
            let (mut s, mut slope, mut curv) = (-share, 0.0, 0.0);
            for (j, zw) in (0..m).step_by(stride).zip(&mut warm) {
                let t = solve_t(p.beta, p.rho, u[j] + p.rho * a[j] * st.x[j] - mu, *zw);
                let t4 = t * t * t * t;
                let d = 1.0 / (p.rho + 6.0 * p.beta * t4);
                *zw = 1.0 / t;
                s += *zw;
                slope += d;
                curv += 24.0 * p.beta * t4 * t * d * d * d;
            }
            (s, slope, curv)
        };
        let mut mu = 0.0;
        let (mut s, mut slope, mut curv) = eval(mu);
        for _ in 0..100 {
            if (mu == 0.0 && s <= 0.0) || s.abs() <= 1e-9 * share || slope <= 0.0 {
                break;
            }
            let next = (mu + model_step(s, slope, curv)).max(0.0);
            if next == mu {
                break;
            }
            mu = next;
            (s, slope, curv) = eval(mu);
        }
        mu
    }

    /// One evaluation at price `mu`: writes z, returns `(S(mu), -S'(mu), S''(mu))`.
    fn z_pass(
        &self,
        st: &mut HostState,
        u: &[f64],
        sc: &mut HostScratch,
        par: Parallel,
        mu: f64,
    ) -> (f64, f64, f64) {
        let p = self.model.params;
        let k = self.z_kernel(mu);
        let x = &st.x;
        run_chunks(par, &mut sc.chunks, &mut st.z, |lo, zs, cs| {
            cs.sums = Default::default();
            cs.rtop.clear();
            for (off, zj) in zs.iter_mut().enumerate() {
                let j = lo + off;
                z_app(
                    &k,
                    j,
                    (x[j], u[j], cs.saved[off]),
                    zj,
                    &mut cs.residual[off],
                    &mut cs.sums,
                    &mut cs.rtop,
                );
            }
        });
        let t = sc.total();
        (t.sum - p.z_capacity, t.slope, t.curv)
    }

    pub(crate) fn z_kernel(&self, mu: f64) -> ZKernel<'_> {
        let p = self.model.params;
        ZKernel {
            a: &self.model.a,
            inv_a: &self.inv_a,
            wexp: &self.wexp,
            beta: p.beta,
            rho: p.rho,
            mu,
            six_b: 6.0 * p.beta,
            k5: 24.0 * p.beta,
        }
    }

    /// Adds the last z pass's results to the report.
    fn report_z(&self, st: &mut HostState, sc: &mut HostScratch, report: &mut HostReport) {
        let p = self.model.params;
        let t = sc.total();
        for (i, c) in sc.chunks.iter().enumerate() {
            let lo = i * crate::host::CHUNK;
            for (s, r) in report.residual[lo..lo + c.residual.len()]
                .iter_mut()
                .zip(&c.residual)
            {
                *s += r;
            }
        }
        sc.rtop.clear();
        for c in &sc.chunks {
            sc.rtop.merge(&c.rtop);
        }
        let utility: f64 = sc.rtop.items().iter().map(|c| fair(p.alpha, c.key)).sum();
        st.rate_top.clear();
        st.rate_top
            .extend(sc.rtop.sort_by_index().iter().map(|c| c.idx));
        let theta = 1f64
            .min(p.x_capacity / t.recovered_x)
            .min(p.z_capacity / t.sum.max(f64::MIN_POSITIVE));
        report.latency += t.latency;
        report.primal_sq += t.primal_sq;
        report.z_sq += t.z_sq;
        report.dual_sq += t.dual_sq;
        report.recovered += theta.powf(1.0 - p.alpha) * utility + t.latency / (theta * theta);
    }
}

/// Applications in the sample that gives a host its first price.
const SAMPLE: usize = 64;

/// The root of the quadratic model `S - slope d + curv d^2 / 2` of the capacity's excess as a
/// function of the price step d (Newton's step when the model has none): one pass fewer than
/// Newton when the price moved.
fn model_step(s: f64, slope: f64, curv: f64) -> f64 {
    let disc = slope * slope - 2.0 * curv * s;
    if disc >= 0.0 {
        2.0 * s / (slope + disc.sqrt())
    } else {
        s / slope
    }
}

/// What the per-application z kernel needs.
pub(crate) struct ZKernel<'a> {
    a: &'a [f64],
    inv_a: &'a [f64],
    wexp: &'a [f64],
    beta: f64,
    rho: f64,
    mu: f64,
    six_b: f64,
    k5: f64,
}

/// Application j's z at the kernel's price from its new x, its u and its z^k (`xuz`): writes
/// z and the residual, adds to the sums (z, its first and second price derivatives, latency,
/// norms, the recovered rate).
#[inline]
pub(crate) fn z_app(
    k: &ZKernel<'_>,
    j: usize,
    (xj, uj, z_old): (f64, f64, f64),
    zj: &mut f64,
    residual: &mut f64,
    s: &mut Sums,
    rtop: &mut TopK,
) {
    let aj = k.a[j];
    let t = solve_t(k.beta, k.rho, uj + k.rho * aj * xj - k.mu, *zj);
    let z = 1.0 / t;
    *zj = z;
    let r = aj * xj - z;
    *residual = r;
    let t2 = t * t;
    // dz/dw = 1 / (rho + 6 beta t^4); d2z/dw2 = 24 beta t^5 (dz/dw)^3.
    let slope = 1.0 / (k.rho + k.six_b * t2 * t2);
    s.sum += z;
    s.slope += slope;
    s.curv += k.k5 * t2 * t2 * t * slope * slope * slope;
    s.latency -= k.beta * t2;
    s.primal_sq += r * r;
    s.z_sq += z * z;
    let dz = aj * (z - z_old);
    s.dual_sq += dz * dz;
    let xr = z * k.inv_a[j];
    s.recovered_x += xr;
    if xr * k.wexp[j] > rtop.threshold() {
        #[allow(clippy::cast_possible_truncation)]
        rtop.offer(Cand {
            key: xr * k.wexp[j],
            idx: j as u32,
            val: 0.0,
        });
    }
}

#[cfg(test)]
mod tests {
    use crate::zstep::solve;
    use crate::{Broadcast, HostReport, HostScratch, HostState, Model, PaperSetup, Params};
    use crate::{Parallel, Solver};

    #[test]
    fn the_first_z_step_fills_the_capacity_at_its_price() {
        // u = 0, x^1 from z^0 = 0: the z capacity binds (every z would be (2 beta / rho)^(1/4)
        // = 6.7 at price 0, C = m e^(15/m) = 5015).
        let p = Params::from_paper(5000, &PaperSetup::default()).unwrap();
        let solver = Solver::new(Model::paper(p, 2).unwrap());
        let mut st = HostState::new(p.apps);
        let mut sc = HostScratch::new(p.apps, p.k);
        let mut r = HostReport::empty(p.apps, 1);
        let b = Broadcast {
            iteration: 0,
            u: vec![0.0; p.apps],
            rho: None,
        };
        solver
            .host_step(&mut st, &b, &mut sc, Parallel::Serial, &mut r)
            .unwrap();
        let sum: f64 = st.z.iter().sum();
        assert!(st.mu_z > 0.0);
        assert!((sum - p.z_capacity).abs() <= 1e-9 * p.z_capacity, "{sum}");
        for (j, (&x, &z)) in st.x.iter().zip(&st.z).enumerate() {
            let w = p.rho * solver.model.a[j] * x - st.mu_z;
            let want = solve(p.beta, p.rho, w, 0.0);
            assert!((z - want).abs() <= 1e-12 * want, "{j}: {z} {want}");
        }
    }
}
