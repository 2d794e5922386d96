//! The x-step and the z-step's first evaluation in one pass over a host's applications.
//!
//! With [`Selection::Rates`](crate::Selection::Rates) the x-step's selection T is known before
//! it starts (the k largest `z_j / a_j` of the last z-step), so each application's new x can be
//! computed and immediately used for its z at the last iteration's z price. When the x
//! capacity turns out slack (it is at the optimum of the paper's set-up, where
//! `sum_j x_j <= sum_j a_j x_j <= C < Q`), that pass was both the x-step and the z-step's first
//! evaluation, and the host saves one pass over its `2 m` doubles. When it binds, the host puts
//! z^k back (kept chunk by chunk in the scratch) and redoes the x-step with its price
//! ([`crate::xhost`]), then the z-step. The result is the same either way: this is a schedule, not an
//! approximation.

use crate::host::{HostScratch, HostState, Parallel, Solver};
use crate::utility::{fair, fair_slope};
use crate::xstep::{inside, outside};
use crate::zhost::z_app;

/// What the fused pass measured.
pub(crate) struct Fused {
    /// `sum_j x_j` at price 0.
    pub sum_x: f64,
    /// `f~(x)` (T at its in-T rates).
    pub utility: f64,
    /// The previous x's squared stationarity.
    pub stationarity_sq: f64,
    /// The z evaluation: `(S, -S', S'')` at `st.mu_z`.
    pub eval: (f64, f64, f64),
}

impl Solver {
    /// One pass: x at price 0 with T = `st.rate_top`, then z at `st.mu_z`.
    pub(crate) fn fused_pass(
        &self,
        st: &mut HostState,
        u: &[f64],
        sc: &mut HostScratch,
        par: Parallel,
    ) -> Fused {
        let p = self.model.params;
        let k = self.z_kernel(st.mu_z.max(0.0));
        let (a, inv_a, sv, w) = (&self.model.a, &self.inv_a, &self.s, &self.w);
        let inv_rho = 1.0 / p.rho;
        let (old_top, top, old_mu) = (&st.top, &st.rate_top, st.mu_x);
        let (xs_all, zs_all) = (&mut st.x, &mut st.z);
        run_chunks2(par, &mut sc.chunks, xs_all, zs_all, |lo, xs, zs, cs| {
            cs.sums = Default::default();
            cs.rtop.clear();
            let mut op = old_top.partition_point(|&t| (t as usize) < lo);
            let mut tp = top.partition_point(|&t| (t as usize) < lo);
            for (off, (xj, zj)) in xs.iter_mut().zip(zs.iter_mut()).enumerate() {
                let j = lo + off;
                let (aj, ia, uj) = (a[j], inv_a[j], u[j]);
                // Stationarity of the previous x under this u.
                let was_in = old_top.get(op).is_some_and(|&t| t as usize == j);
                op += usize::from(was_in);
                let mut d = aj * uj + old_mu;
                if was_in {
                    d -= fair_slope(p.alpha, *xj);
                } else if *xj <= 0.0 {
                    d = d.min(0.0);
                }
                cs.sums.stationarity_sq += d * d;
                // The x-step at price 0.
                let xh = (*zj - uj * inv_rho) * ia;
                let is_in = top.get(tp).is_some_and(|&t| t as usize == j);
                tp += usize::from(is_in);
                let xn = if is_in {
                    let v = inside(p.alpha, xh, sv[j]);
                    cs.sums.utility += w[j] * fair(p.alpha, v);
                    v
                } else {
                    outside(xh)
                };
                *xj = xn;
                cs.sums.sum_x += xn;
                // The z-step's first evaluation (z^k kept in case the x capacity binds).
                cs.saved[off] = *zj;
                z_app(
                    &k,
                    j,
                    (xn, uj, cs.saved[off]),
                    zj,
                    &mut cs.residual[off],
                    &mut cs.sums,
                    &mut cs.rtop,
                );
            }
        });
        let t = sc.total();
        Fused {
            sum_x: t.sum_x,
            utility: t.utility,
            stationarity_sq: t.stationarity_sq,
            eval: (t.sum - p.z_capacity, t.slope, t.curv),
        }
    }
}

/// [`crate::host::run_chunks`] over two arrays chunked alike.
fn run_chunks2<F>(
    par: Parallel,
    chunks: &mut [crate::host::ChunkScratch],
    x: &mut [f64],
    z: &mut [f64],
    f: F,
) where
    F: Fn(usize, &mut [f64], &mut [f64], &mut crate::host::ChunkScratch) + Sync + Send,
{
    use crate::host::CHUNK;
    use rayon::prelude::*;
    match par {
        Parallel::Apps => x
            .par_chunks_mut(CHUNK)
            .zip(z.par_chunks_mut(CHUNK))
            .zip(chunks.par_iter_mut())
            .enumerate()
            .for_each(|(i, ((xs, zs), c))| f(i * CHUNK, xs, zs, c)),
        Parallel::Serial => x
            .chunks_mut(CHUNK)
            .zip(z.chunks_mut(CHUNK))
            .zip(chunks.iter_mut())
            .enumerate()
            .for_each(|(i, ((xs, zs), c))| f(i * CHUNK, xs, zs, c)),
    }
}
