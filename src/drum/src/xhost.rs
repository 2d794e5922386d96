//! The x-step of one host: every application by its case ([`crate::xstep`]), the selection T of
//! the k applications that earn utility, and the price of the capacity `sum_j x_ij <= Q`.
//!
//! 1. One pass at price 0 writes case 1 for every application, offers each application whose
//!    [`gain_bound`] can still enter the chunk's top k to a [`TopK`] (solving case 2 or 3 for
//!    it), and measures the stationarity of the previous x under the new u.
//! 2. If the rates then exceed Q, the price is found for the fixed T by the Illinois method
//!    (regula falsi that halves the stale end), then T is chosen again at that price; up to
//!    four rounds while T changes (the paper's "test with complementary slackness"). When T
//!    keeps changing, the last round stands: the step is non-convex there (see
//!    [`crate::utility`]).
//! 3. The members of T get their case-2/3 rates.

use crate::host::{run_chunks, HostScratch, HostState, Parallel, Solver};
use crate::params::Selection;
use crate::topk::Cand;
use crate::utility::{fair, fair_slope};
use crate::xstep::{gain, gain_bound, inside, outside, x_hat};

/// Where in the sorted selection `top` the chunk starting at `lo` begins.
fn first_at(top: &[u32], lo: usize) -> usize {
    top.partition_point(|&t| (t as usize) < lo)
}

impl Solver {
    /// The x-step; returns the host's utility `f~(x^{k+1})` and the squared stationarity of x^k.
    pub(crate) fn x_step(
        &self,
        st: &mut HostState,
        u: &[f64],
        sc: &mut HostScratch,
        par: Parallel,
        measure: bool,
    ) -> (f64, f64) {
        let q = self.model.params.x_capacity;
        let fixed = self.model.params.selection == Selection::Rates && st.iteration > 0;
        if fixed {
            sc.select.clear();
            sc.select.extend_from_slice(&st.rate_top);
        }
        let mut mu = 0.0;
        let sum = self.select(st, u, sc, par, mu, measure, fixed);
        let stationarity_sq = sc.total().stationarity_sq;
        if sum > q * (1.0 + 1e-12) && fixed {
            mu = self.price_for(st, u, sc, par);
            self.select(st, u, sc, par, mu, false, true);
        } else if sum > q * (1.0 + 1e-12) {
            for _ in 0..4 {
                mu = self.price_for(st, u, sc, par);
                sc.prev.clear();
                sc.prev.extend_from_slice(&sc.select);
                self.select(st, u, sc, par, mu, false, false);
                if sc.select == sc.prev {
                    break;
                }
            }
        }
        st.mu_x = mu;
        st.top.clear();
        st.top.extend_from_slice(&sc.select);
        let mut utility = 0.0;
        for &(j, v) in &sc.ins {
            st.x[j as usize] = v;
            utility += self.w[j as usize] * fair(self.model.params.alpha, v);
        }
        (utility, stationarity_sq)
    }

    /// One selection pass at price `mu`: writes case 1 everywhere, chooses T into `sc.select`
    /// (sorted) with its in-T rates in `sc.ins`; returns `sum_j x_j` with T at its in-T rates.
    #[allow(clippy::too_many_arguments)]
    fn select(
        &self,
        st: &mut HostState,
        u: &[f64],
        sc: &mut HostScratch,
        par: Parallel,
        mu: f64,
        measure: bool,
        fixed: bool,
    ) -> f64 {
        let p = self.model.params;
        let (a, reach, inv_a) = (&self.model.a, &self.reach, &self.inv_a);
        let (sv, w) = (&self.s, &self.w);
        let inv_rho = 1.0 / p.rho;
        let (z, old_top, old_mu) = (&st.z, &st.top, st.mu_x);
        run_chunks(par, &mut sc.chunks, &mut st.x, |lo, xs, cs| {
            cs.top.clear();
            cs.sums = Default::default();
            let mut tp = first_at(old_top, lo);
            for (off, xj) in xs.iter_mut().enumerate() {
                let j = lo + off;
                let aj = a[j];
                if measure {
                    let was_in = old_top.get(tp).is_some_and(|&t| t as usize == j);
                    tp += usize::from(was_in);
                    let mut d = aj * u[j] + old_mu;
                    if was_in {
                        d -= fair_slope(p.alpha, *xj);
                    } else if *xj <= 0.0 {
                        d = d.min(0.0);
                    }
                    cs.sums.stationarity_sq += d * d;
                }
                let s = sv[j];
                // x_hat without a division: (z - (u + mu / a) / rho) / a.
                let ia = inv_a[j];
                let xh = (z[j] - (u[j] + mu * ia) * inv_rho) * ia;
                let out = outside(xh);
                *xj = out;
                cs.sums.sum += out;
                if !fixed && w[j] * gain_bound(p.alpha, xh, s, reach[j]) >= cs.top.threshold() {
                    let xin = inside(p.alpha, xh, s);
                    #[allow(clippy::cast_possible_truncation)]
                    cs.top.offer(Cand {
                        key: w[j] * gain(p.alpha, xh, s, xin),
                        idx: j as u32,
                        val: xin,
                    });
                }
            }
        });
        let mut sum = sc.total().sum;
        sc.ins.clear();
        if fixed {
            for &j in &sc.select {
                let j = j as usize;
                let xin = inside(p.alpha, x_hat(p.rho, a[j], st.z[j], u[j], mu), self.s[j]);
                sum += xin - st.x[j];
                #[allow(clippy::cast_possible_truncation)]
                sc.ins.push((j as u32, xin));
            }
            return sum;
        }
        sc.top.clear();
        for c in &sc.chunks {
            sc.top.merge(&c.top);
        }
        sc.select.clear();
        for c in sc.top.sort_by_index() {
            sum += c.val - st.x[c.idx as usize];
            sc.select.push(c.idx);
            sc.ins.push((c.idx, c.val));
        }
        sum
    }

    /// `sum_j x_j(mu)` for the fixed selection `sc.select` (case 1 outside it, 2/3 inside).
    fn fixed_sum(
        &self,
        st: &mut HostState,
        u: &[f64],
        sc: &mut HostScratch,
        par: Parallel,
        mu: f64,
    ) -> f64 {
        let p = self.model.params;
        let a = &self.model.a;
        let (z, top) = (&st.z, &sc.select);
        run_chunks(par, &mut sc.chunks, &mut st.x, |lo, xs, cs| {
            cs.sums = Default::default();
            let mut tp = first_at(top, lo);
            for off in 0..xs.len() {
                let j = lo + off;
                if top.get(tp).is_some_and(|&t| t as usize == j) {
                    tp += 1;
                    continue;
                }
                cs.sums.sum += outside(x_hat(p.rho, a[j], z[j], u[j], mu));
            }
        });
        let mut sum = sc.total().sum;
        for &j in &sc.select {
            let j = j as usize;
            sum += inside(p.alpha, x_hat(p.rho, a[j], st.z[j], u[j], mu), self.s[j]);
        }
        sum
    }

    /// The price at which the fixed selection fills Q exactly (Illinois method).
    fn price_for(&self, st: &mut HostState, u: &[f64], sc: &mut HostScratch, par: Parallel) -> f64 {
        let q = self.model.params.x_capacity;
        let f = |mu: f64, st: &mut HostState, sc: &mut HostScratch| {
            self.fixed_sum(st, u, sc, par, mu) - q
        };
        let (mut lo, mut flo) = (0.0, f(0.0, st, sc));
        if flo <= 0.0 {
            return 0.0;
        }
        let mut hi = st.mu_x.max(1e-12);
        let mut fhi = f(hi, st, sc);
        let mut grow = 0;
        while fhi > 0.0 && grow < 400 {
            lo = hi;
            flo = fhi;
            hi *= 4.0;
            fhi = f(hi, st, sc);
            grow += 1;
        }
        let mut side = 0i8;
        for _ in 0..200 {
            let mid = (lo * fhi - hi * flo) / (fhi - flo);
            let mid = if mid > lo && mid < hi {
                mid
            } else {
                0.5 * (lo + hi)
            };
            let fm = f(mid, st, sc);
            if fm.abs() <= 1e-12 * q || hi - lo <= 1e-15 * hi {
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
        hi
    }
}
