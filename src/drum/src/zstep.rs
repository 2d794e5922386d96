//! The z-minimisation step for one application (Theorem 3).
//!
//! Step 2 of the paper, for host i, with the capacity price mu >= 0 of `sum_j z_ij <= C`:
//!
//! ```text
//! min_z  -g(z) + u^T (A x^{k+1} - z) + (rho/2) ||A x^{k+1} - z||^2 + mu (sum_j z_j - C)
//! ```
//!
//! separates by application: `min_z  beta z^-2 - w z + (rho/2) z^2` with
//! `w = u + rho a x - mu`, strictly convex on z > 0, so its minimiser is the unique positive root
//! of the stationarity condition
//!
//! ```text
//! rho z - w = 2 beta z^-3        (a quartic: rho z^4 - w z^3 - 2 beta = 0, one sign change)
//! ```
//!
//! The paper's (22) writes the u term as `-u^k z` (u times z: the derivative of `-u^T z` is
//! `-u`), drops beta from `2 z^-3` and carries `lambda / z` from its log cost; its fixed-point
//! form (23) inherits all three, and it is not a contraction in general. We solve the
//! stationarity above instead, by Newton's method in `t = 1/z`, where it reads
//! `G(t) = 2 beta t^4 + w t - rho = 0` with G convex: from any t right of the root Newton
//! descends monotonically onto it, and from the left one step lands right of it. The start is the
//! caller's warm value (the last z) when usable, else an upper bound of the root:
//! `(rho / 2 beta)^(1/4)` (and `rho / w`) for w >= 0, `max((rho/beta)^(1/4), (-w/beta)^(1/3))`
//! for w < 0.

/// The minimiser z of `beta z^-2 - w z + (rho/2) z^2` over z > 0; `warm` is a guess (0 or a
/// non-finite value for none).
#[must_use]
pub fn solve(beta: f64, rho: f64, w: f64, warm: f64) -> f64 {
    1.0 / solve_t(beta, rho, w, warm)
}

/// [`solve`] as `t = 1/z` (what the host step works with: one division fewer).
#[must_use]
pub fn solve_t(beta: f64, rho: f64, w: f64, warm: f64) -> f64 {
    let two_b = 2.0 * beta;
    let mut t = if warm > 0.0 && warm.is_finite() {
        1.0 / warm
    } else {
        upper_bound(beta, rho, w)
    };
    for _ in 0..200 {
        let t3 = t * t * t;
        let d = 4.0 * two_b * t3 + w;
        if d <= 0.0 {
            // Left of G's minimum: restart from the bound, right of the root.
            t = upper_bound(beta, rho, w);
            continue;
        }
        let next = t - ((two_b * t3 + w) * t - rho) / d;
        if next.is_nan() || next <= 0.0 {
            t = upper_bound(beta, rho, w);
            continue;
        }
        // Newton converges quadratically: a step of 1e-9 t leaves an error near 1e-18 t.
        let done = (next - t).abs() <= 1e-9 * t;
        t = next;
        if done {
            break;
        }
    }
    t
}

/// An upper bound of the root t = 1/z (see the module docs).
fn upper_bound(beta: f64, rho: f64, w: f64) -> f64 {
    if w >= 0.0 {
        let b = (rho / (2.0 * beta)).sqrt().sqrt();
        if w > 0.0 {
            b.min(rho / w)
        } else {
            b
        }
    } else {
        (rho / beta).sqrt().sqrt().max((-w / beta).cbrt())
    }
}

/// `-dz/dmu = 1 / (rho + 6 beta z^-4)`: how fast the solution falls as the capacity price rises.
#[must_use]
pub fn price_slope(beta: f64, rho: f64, z: f64) -> f64 {
    let t2 = 1.0 / (z * z);
    1.0 / (rho + 6.0 * beta * t2 * t2)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stationary(beta: f64, rho: f64, w: f64, z: f64) -> f64 {
        (rho * z - w - 2.0 * beta / (z * z * z)) / (rho * z).abs().max(w.abs()).max(1e-300)
    }

    #[test]
    fn roots_by_hand() {
        // beta = 1, rho = 2, w = 0: 2z = 2 z^-3, z = 1.
        assert!((solve(1.0, 2.0, 0.0, 0.0) - 1.0).abs() < 1e-14);
        // beta = 4, rho = 1, z = 2: w = rho z - 2 beta z^-3 = 2 - 1 = 1.
        assert!((solve(4.0, 1.0, 1.0, 0.0) - 2.0).abs() < 1e-14);
        // beta = 0.5, rho = 1e-3, z = 0.5: w = 5e-4 - 8 = -7.9995.
        assert!((solve(0.5, 1e-3, 5e-4 - 8.0, 0.0) - 0.5).abs() < 1e-14);
        // The paper's first step (x = 0, u = 0, mu = 0): z = (2 beta / rho)^(1/4).
        assert!((solve(1.0, 1e-3, 0.0, 0.0) - 2000f64.powf(0.25)).abs() < 1e-12);
    }

    #[test]
    fn warm_starts_from_either_side_agree_with_cold() {
        for &(beta, rho, w) in &[
            (1.0, 1e-3, 0.0),
            (1.0, 1e-3, 5.0),
            (1.0, 1e-3, -5.0),
            (25.0, 1e-3, 1e3),
            (1.0, 1.0, -1e6),
            (1e-3, 1e-3, 1e-9),
        ] {
            let cold = solve(beta, rho, w, 0.0);
            assert!(
                stationary(beta, rho, w, cold).abs() < 1e-12,
                "{beta} {rho} {w}"
            );
            for warm in [cold * 0.5, cold * 2.0, cold * 1e-6, cold * 1e6, f64::NAN] {
                let z = solve(beta, rho, w, warm);
                assert!(
                    (z - cold).abs() <= 1e-12 * cold,
                    "{beta} {rho} {w} {warm}: {z} {cold}"
                );
            }
        }
    }

    #[test]
    fn price_slope_matches_a_finite_difference() {
        let (beta, rho, w) = (1.0, 1e-3, 0.3);
        let z = solve(beta, rho, w, 0.0);
        let h = 1e-7;
        let fd = (solve(beta, rho, w + h, z) - solve(beta, rho, w - h, z)) / (2.0 * h);
        assert!((fd - price_slope(beta, rho, z)).abs() < 1e-6 * fd, "{fd}");
    }
}
