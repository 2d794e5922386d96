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
//! stationarity above instead, in `t = 1/z`, where it reads `G(t) = 2 beta t^4 + w t - rho = 0`
//! with G convex and increasing past the root, by Halley's method:
//! `t - 2 G G' / (2 G'^2 - G G'')`. Its denominator is
//! `80 beta^2 t^6 + 8 beta w t^3 + 2 w^2 + 24 beta rho t^2 > 0` (the first three terms are a
//! quadratic in `beta t^3` with a negative discriminant), so the step is always defined.
//! Convergence is cubic, `e' ~ K e^3` with `K = (G''/2G')^2 - G'''/6G' <= 4 / t^2` near the
//! root (there `G' >= 6 beta t^3`): a step below `2.5e-5 t` leaves an error below `1e-13 t`,
//! and we stop there. From the last z (its price and u moved a little) that is one step for
//! most applications; Newton's method needed two or three for the same accuracy. Where no warm
//! value is usable the start is an upper bound of the root, `b = (rho / 2 beta)^(1/4)` (and
//! `rho / w`) for w >= 0, `b + (-w / 2 beta)^(1/3)` for w < 0 (with `a^3 = -w / 2 beta`,
//! `G(a + b) = 2 beta ((a + b)((a + b)^3 - a^3) - b^4) >= 0`). A step that leaves G's
//! increasing side or t > 0 restarts from the bound.

/// The minimiser z of `beta z^-2 - w z + (rho/2) z^2` over z > 0; `warm` is a guess (0 or a
/// non-finite value for none).
#[must_use]
pub fn solve(beta: f64, rho: f64, w: f64, warm: f64) -> f64 {
    1.0 / solve_t(beta, rho, w, warm)
}

/// [`solve`] as `t = 1/z` (what the host step works with: one division fewer).
#[must_use]
#[inline]
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
        let g = (two_b * t3 + w) * t - rho;
        // Halley's step 2 G G' / (2 G'^2 - G G''); its denominator is positive wherever
        // G' > 0 (module docs).
        let step = 2.0 * g * d / (2.0 * d * d - g * 12.0 * two_b * t * t);
        let next = t - step;
        if next.is_nan() || next <= 0.0 {
            t = upper_bound(beta, rho, w);
            continue;
        }
        t = next;
        // Halley converges cubically, with an error after the step of at most about
        // 4 (step / t)^3 t here (module docs): a step below 2.5e-5 t leaves less than 1e-13 t.
        if step.abs() <= 2.5e-5 * t {
            break;
        }
    }
    t
}

/// An upper bound of the root t = 1/z (see the module docs).
fn upper_bound(beta: f64, rho: f64, w: f64) -> f64 {
    let b = (rho / (2.0 * beta)).sqrt().sqrt();
    if w >= 0.0 {
        if w > 0.0 {
            b.min(rho / w)
        } else {
            b
        }
    } else {
        b + crate::num::cbrt(-w / (2.0 * beta))
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
    fn agrees_with_a_forty_digit_root() {
        // 2e-3 t^4 + 1e-9 t - 1e-3 = 0 by mpmath at 40 digits: t = 0.8408962384770006650...
        let z = 1.189_207_365_002_799_9;
        for warm in [0.0, z * 1e6, z * 1e-6, z * (1.0 + 1e-4)] {
            let got = solve(1e-3, 1e-3, 1e-9, warm);
            assert!((got - z).abs() <= 1e-13 * z, "{warm}: {got}");
        }
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
