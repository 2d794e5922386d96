//! The x-step of one host: every application by its case ([`crate::xstep`]), the selection T of
//! the k applications that earn utility, and the price of the capacity `sum_j x_ij <= Q`.
//!
//! 1. One pass at price 0 writes case 1 for every application, offers each application whose
//!    [`gain_bound`] can still enter the chunk's top k to a [`TopK`] (solving case 2 or 3 for
//!    it), and measures the stationarity of the previous x under the new u.
//! 2. If the rates then exceed Q, the price is found for the fixed T by Newton's method with
//!    the exact slope, safeguarded by a bracket (`price_for`), then T is chosen
//!    again at that price; up to
//!    four rounds while T changes (the paper's "test with complementary slackness"). When T
//!    keeps changing, the last round stands: the step is non-convex there (see
//!    [`crate::utility`]).
//! 3. The members of T get their case-2/3 rates.
//!
//! With the selection by rates (T fixed before the step) and a capacity that bound in the last
//! iteration, the step starts the price search at the last price instead of trying 0 first.

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
        if fixed && st.mu_x > 0.0 {
            // The capacity bound last time: search from that price at once (one pass fewer
            // than trying price 0 first), then write x at the price found.
            mu = self.price_for(st, u, sc, par);
            self.select(st, u, sc, par, mu, measure, true);
            let stationarity_sq = sc.total().stationarity_sq;
            return self.finish_x(st, sc, mu, stationarity_sq);
        }
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
        self.finish_x(st, sc, mu, stationarity_sq)
    }

    /// Writes T's rates and the price; returns the utility and `stationarity_sq`.
    fn finish_x(
        &self,
        st: &mut HostState,
        sc: &HostScratch,
        mu: f64,
        stationarity_sq: f64,
    ) -> (f64, f64) {
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

    /// `sum_j x_j(mu)` for the fixed selection `sc.select` (case 1 outside it, 2/3 inside) and
    /// its slope `-d/dmu`: `1 / (rho a_j^2)` for each positive case-1 rate, and
    /// `s_j / (s_j + alpha x^(-alpha-1))` times that in T (the derivative of the root of
    /// `x^-alpha = s_j (x - x^)` in x^).
    fn fixed_sum(
        &self,
        st: &mut HostState,
        u: &[f64],
        sc: &mut HostScratch,
        par: Parallel,
        mu: f64,
    ) -> (f64, f64) {
        let p = self.model.params;
        let (a, inv_a) = (&self.model.a, &self.inv_a);
        let inv_rho = 1.0 / p.rho;
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
                let ia = inv_a[j];
                let xh = (z[j] - (u[j] + mu * ia) * inv_rho) * ia;
                if xh > 0.0 {
                    cs.sums.sum += xh;
                    cs.sums.slope += ia * ia * inv_rho;
                }
            }
        });
        let t = sc.total();
        let (mut sum, mut slope) = (t.sum, t.slope);
        for &j in &sc.select {
            let j = j as usize;
            let sj = self.s[j];
            let x = inside(p.alpha, x_hat(p.rho, a[j], st.z[j], u[j], mu), sj);
            sum += x;
            let curv = if p.alpha == 0.5 {
                0.5 / (x * x.sqrt())
            } else {
                p.alpha * x.powf(-p.alpha - 1.0)
            };
            let d = sj / (sj + curv);
            slope += d * inv_a[j] * inv_a[j] * inv_rho;
        }
        (sum, slope)
    }

    /// The price at which the fixed selection fills Q exactly: Newton's method on
    /// `F(mu) = sum_j x_j(mu) - Q`, which is decreasing and convex (case-1 rates are
    /// `max(0, linear)`; the in-T rates are convex in their x^), so from the left of the root it
    /// climbs monotonically onto it; kept inside a bracket (bisection when a step leaves it).
    /// From the last iteration's price this takes a few passes where the bracketing search
    /// it replaced took tens.
    fn price_for(&self, st: &mut HostState, u: &[f64], sc: &mut HostScratch, par: Parallel) -> f64 {
        let q = self.model.params.x_capacity;
        let (mut lo, mut hi) = (0.0, f64::INFINITY);
        let mut mu = st.mu_x.max(0.0);
        for _ in 0..200 {
            let (sum, slope) = self.fixed_sum(st, u, sc, par, mu);
            let f = sum - q;
            if f.abs() <= 1e-12 * q {
                return mu;
            }
            if f > 0.0 {
                lo = mu;
            } else {
                hi = mu;
                if mu == 0.0 {
                    return 0.0;
                }
            }
            let newton = if slope > 0.0 {
                mu + f / slope
            } else {
                f64::NAN
            };
            let next = if newton > lo && newton < hi {
                newton
            } else if lo == 0.0 && mu > 0.0 && newton <= 0.0 {
                // Right of the root and Newton points below 0: the capacity may be slack.
                0.0
            } else if hi.is_finite() {
                0.5 * (lo + hi)
            } else {
                // No upper end yet and no usable slope: every rate is 0 beyond some price.
                (2.0 * lo).max(1e-12)
            };
            if next == mu || hi - lo <= 1e-15 * hi {
                return next;
            }
            mu = next;
        }
        mu
    }
}
