//! Step 3, the u-update, as the coordinator runs it.
//!
//! The paper's (7) reads `u^{k+1} = u^k + rho (sum_i F(x_i) + sum_i z_i)` and Algorithm 2 the
//! same with `+ sum_i z_ij`. The sign is a slip: the update is dual ascent on the constraint
//! `A x_i - z_i = 0`, whose Lagrangian term `u^T (A x - z)` the x- and z-steps use, so it is
//! `u + rho (A x - z)`. With the plus sign u grows without bound (both sums are positive).
//!
//! **One u for all hosts.** The paper keeps one u per application and sums the residuals of all
//! hosts. Problem (4) has one constraint per host and application, so the exact ADMM would keep
//! one u_i per host; with one A and the same capacities on every host (the paper's set-up),
//! every host runs the same iterates from the same start and the per-host u_i are all equal. We
//! keep the paper's shared u but average: `u += rho / n * sum_i (A x_i - z_i)`. With alike hosts
//! this is exactly the per-host ADMM, whatever n; with the plain sum the dual step would be
//! n rho against a penalty of rho (10 against 1e-3 at n = 1e4), which is not ADMM and does not
//! converge. Hosts that differ (a later fleet) would need per-host u_i: the shared u then
//! enforces only the fleet's mean of `A x_i - z_i`.

/// `u_j += step / hosts * residual_sum_j`.
pub fn dual_ascent(u: &mut [f64], residual_sum: &[f64], hosts: u64, step: f64) {
    #[allow(clippy::cast_precision_loss)]
    let f = step / hosts.max(1) as f64;
    for (uj, r) in u.iter_mut().zip(residual_sum) {
        *uj += f * r;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn averages_the_residuals_over_hosts() {
        // Two hosts' residual sums (3, -1); rho = 0.5: u += 0.5 / 2 * (3, -1).
        let mut u = vec![1.0, 1.0];
        dual_ascent(&mut u, &[3.0, -1.0], 2, 0.5);
        assert_eq!(u, [1.75, 0.75]);
    }
}
