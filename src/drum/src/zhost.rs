//! The z-step of one host: every application's quartic ([`crate::zstep`]) at the price of the
//! capacity `sum_j z_ij <= C`, the price found by Newton's method, and the host's report.
//!
//! `S(mu) = sum_j z_j(mu) - C` is decreasing and convex in mu (each z_j is), with
//! `S'(mu) = -sum_j 1 / (rho + 6 beta z_j^-4)`. Newton's method from the last iteration's price
//! converges monotonically from the left, and from the right its first step lands left of the
//! root (or at 0, where `S(0) <= 0` means the capacity is slack). Each evaluation is one pass
//! that writes its candidate z (the warm start of the next evaluation); the last pass's z is the
//! step's result, and its sums (residual, latency, the recovered schedule) are what the host
//! reports. Tolerance: `|S| <= 1e-11 C`.

use crate::host::{run_chunks, HostScratch, HostState, Parallel, Solver};
use crate::topk::Cand;
use crate::utility::fair;
use crate::zstep::{price_slope, solve};
use crate::HostReport;

impl Solver {
    /// The z-step; adds the host's residual, latency, residual norms and recovered objective to
    /// `report`.
    pub(crate) fn z_step(
        &self,
        st: &mut HostState,
        u: &[f64],
        sc: &mut HostScratch,
        par: Parallel,
        report: &mut HostReport,
    ) {
        let c = self.model.params.z_capacity;
        let mut mu = st.mu_z.max(0.0);
        let (mut s, mut slope) = self.z_pass(st, u, sc, par, mu);
        for _ in 0..100 {
            if (mu == 0.0 && s <= 0.0) || s.abs() <= 1e-11 * c || slope <= 0.0 {
                break;
            }
            let next = (mu + s / slope).max(0.0);
            if next == mu {
                break;
            }
            mu = next;
            (s, slope) = self.z_pass(st, u, sc, par, mu);
        }
        st.mu_z = mu;
        self.report_z(st, sc, report);
    }

    /// One evaluation at price `mu`: writes z, returns `(S(mu), -S'(mu))`.
    fn z_pass(
        &self,
        st: &mut HostState,
        u: &[f64],
        sc: &mut HostScratch,
        par: Parallel,
        mu: f64,
    ) -> (f64, f64) {
        let p = self.model.params;
        let a = &self.model.a;
        let x = &st.x;
        run_chunks(par, &mut sc.chunks, &mut st.z, |lo, zs, cs| {
            cs.sums = Default::default();
            cs.rtop.clear();
            for (off, zj) in zs.iter_mut().enumerate() {
                let j = lo + off;
                let (aj, xj) = (a[j], x[j]);
                let z = solve(p.beta, p.rho, u[j] + p.rho * aj * xj - mu, *zj);
                *zj = z;
                let r = aj * xj - z;
                cs.residual[off] = r;
                let s = &mut cs.sums;
                s.sum += z;
                s.slope += price_slope(p.beta, p.rho, z);
                s.latency -= p.beta / (z * z);
                s.primal_sq += r * r;
                s.z_sq += z * z;
                let xr = z / aj;
                s.recovered_x += xr;
                if xr > cs.rtop.threshold() {
                    #[allow(clippy::cast_possible_truncation)]
                    cs.rtop.offer(Cand {
                        key: xr,
                        idx: j as u32,
                        val: 0.0,
                    });
                }
            }
        });
        let t = sc.total();
        (t.sum - p.z_capacity, t.slope)
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
        st.rate_top.extend(sc.rtop.sort_by_index().iter().map(|c| c.idx));
        let theta = 1f64
            .min(p.x_capacity / t.recovered_x)
            .min(p.z_capacity / t.sum.max(f64::MIN_POSITIVE));
        report.latency += t.latency;
        report.primal_sq += t.primal_sq;
        report.z_sq += t.z_sq;
        report.recovered += theta.powf(1.0 - p.alpha) * utility + t.latency / (theta * theta);
    }
}
