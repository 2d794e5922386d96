//! The x-minimisation step for one application (Theorem 2), in its three cases.
//!
//! Step 1 of the paper, for host i, with the capacity price mu >= 0 of `sum_j x_ij <= Q`:
//!
//! ```text
//! min_x  -f~(x) + u^T (A x - z^k) + (rho/2) ||A x - z^k||^2 + mu (sum_j x_j - Q)
//! ```
//!
//! For a fixed selection T (the k applications that earn utility) this separates by
//! application. With `s = rho a^2` and the point the penalty alone would choose,
//!
//! ```text
//! x^ = (rho a z - a u - mu) / s          (= z/a - (a u + mu)/(rho a^2))
//! ```
//!
//! application j solves `min_x  -[j in T] phi(x) + (s/2) (x - x^)^2` over x >= 0:
//!
//! - **Case 1, j not in T**: [`outside`], `x = max(0, x^)`. The paper's (16) is a quadratic
//!   because its cost is `log x` (the price term is `mu / x`); with our linear capacity (see
//!   [`crate::params`]) it is linear, and x >= 0 clips it.
//! - **Case 2, j in T, alpha = 1/2**: [`alpha_half`]. Stationarity `x^-1/2 = s (x - x^)` with
//!   `y = sqrt(x)` is `s y^3 - s x^ y - 1 = 0`. The paper's (17) is the quartic
//!   `s y^4 + p y^2 - y + d = 0` (p = a u + mu - rho a z = -s x^; its d = lambda comes from the log
//!   cost); with a linear capacity the price enters p and d = 0, so the quartic is y times our
//!   cubic. **Root choice**: y = 0 is not a minimiser (the slope of -2 sqrt(x) is minus infinity
//!   there); the cubic `y^3 + P y + Q` with `P = -x^`, `Q = -1/s < 0` has exactly one positive
//!   root whatever the sign of P (Descartes: one sign change), and it is the minimiser since the
//!   objective is strictly convex in x > 0. We take it in closed form (Cardano, with the
//!   cancellation-free form of the sum of cube roots when P > 0; the trigonometric form when the
//!   cubic has three real roots) and polish it with two Newton steps. (With the paper's d > 0 the
//!   quartic has zero or two positive roots, a local maximum and a local minimum, and the
//!   objective is unbounded below at x -> 0: another sign that the log cost cannot be meant.)
//! - **Case 3, j in T, alpha != 1/2**: [`fixed_point`]. `x^-alpha = s (x - x^)` has no closed
//!   form. The paper iterates a fixed-point map ((18), whose cube root does not follow from the
//!   line before it). The natural map `x <- x^ + x^-alpha / s` has slope `-alpha (1 - x^/x)` at
//!   the root, so it is a contraction only while `x^ > -x (1 - alpha) / alpha`; once the prices
//!   push x^ below that (the dual variable of a top-k application does exactly this while it
//!   catches up) it oscillates away, or leaves x > 0. We
//!   iterate the Newton map of `H(x) = s (x - x^) - x^-alpha` instead, a fixed-point iteration
//!   whose fixed point is the root, kept inside a bracket `[max(0, x^), max(0, x^) + s^(-1/(1+alpha))]`
//!   that always holds the root (bisecting when a Newton step leaves it).
//!
//! **Which T.** The top-k utility makes the step non-convex: the exact minimiser takes, for
//! each application, the best value in T and out of T, and puts in T the k applications with
//! the largest [`gain`] (value out minus value in). [`gain_bound`] is a cheap upper bound (the
//! concave phi lies below its tangent at an upper bound of the in-T rate) that lets the host
//! step skip the exact in-T solve for applications that cannot enter the top k.

use crate::utility::{fair, fair_slope};

/// The unclipped minimiser of the penalty and prices alone, `x^` (see the module docs).
#[must_use]
pub fn x_hat(rho: f64, a: f64, z: f64, u: f64, mu: f64) -> f64 {
    (rho * a * z - a * u - mu) / (rho * a * a)
}

/// Case 1: an application outside the top k, `max(0, x^)`.
#[must_use]
pub fn outside(x_hat: f64) -> f64 {
    x_hat.max(0.0)
}

/// `s^(-1/(1+alpha))`: how far above `max(0, x^)` the in-T rate can lie.
#[must_use]
pub fn reach(alpha: f64, s: f64) -> f64 {
    if alpha == 0.5 {
        1.0 / (s * s).cbrt()
    } else {
        s.powf(-1.0 / (1.0 + alpha))
    }
}

/// The unique positive root of `y^3 + p y + q = 0` for q < 0.
#[must_use]
pub fn cubic_positive_root(p: f64, q: f64) -> f64 {
    let h = 0.5 * q;
    let p3 = p / 3.0;
    let d = h * h + p3 * p3 * p3;
    let mut y = if d >= 0.0 {
        // The fast cube root (within an ulp or two; the Newton steps below polish y anyway).
        let a = crate::num::cbrt(-h + d.sqrt());
        if p >= 0.0 {
            // y = A + B with B = -p/(3A) < 0 would cancel: y = -q / (A^2 - AB + B^2).
            let b = p3 / a;
            -q / (a * a + p3 + b * b)
        } else {
            a - p3 / a
        }
    } else {
        // Three real roots (p < 0): the largest is the positive one.
        let r = (-p3).sqrt();
        let c = ((1.5 * q / p) * (-3.0 / p).sqrt()).clamp(-1.0, 1.0);
        2.0 * r * (c.acos() / 3.0).cos()
    };
    for _ in 0..2 {
        let f = (y * y + p) * y + q;
        let df = 3.0 * y * y + p;
        if df > 0.0 {
            let next = y - f / df;
            if next > 0.0 {
                y = next;
            }
        }
    }
    y
}

/// Case 2: alpha = 1/2, an application in the top k: `x = y^2`, y the positive root of
/// `y^3 - x^ y - 1/s = 0`.
#[must_use]
pub fn alpha_half(x_hat: f64, s: f64) -> f64 {
    let y = cubic_positive_root(-x_hat, -1.0 / s);
    y * y
}

/// Case 3: alpha != 1/2, an application in the top k: the root of `x^-alpha = s (x - x^)` by
/// the safeguarded Newton map (see the module docs).
#[must_use]
pub fn fixed_point(alpha: f64, x_hat: f64, s: f64) -> f64 {
    let mut lo = x_hat.max(0.0);
    let mut hi = lo + reach(alpha, s);
    let mut x = hi;
    for _ in 0..200 {
        let h = s * (x - x_hat) - x.powf(-alpha);
        if h == 0.0 {
            return x;
        }
        if h > 0.0 {
            hi = x;
        } else {
            lo = x;
        }
        let dh = s + alpha * x.powf(-alpha - 1.0);
        let mut next = x - h / dh;
        if !(next > lo && next < hi) {
            next = 0.5 * (lo + hi);
        }
        if (next - x).abs() <= 1e-15 * x || hi - lo <= 1e-15 * hi {
            return next;
        }
        x = next;
    }
    x
}

/// An application in the top k: case 2 or case 3 by alpha.
#[must_use]
pub fn inside(alpha: f64, x_hat: f64, s: f64) -> f64 {
    if alpha == 0.5 {
        alpha_half(x_hat, s)
    } else {
        fixed_point(alpha, x_hat, s)
    }
}

/// What putting the application in T saves in the step's objective: the value of case 1 minus
/// the value at `x_in` (the in-T minimiser). Always >= 0 at the true minimiser.
#[must_use]
pub fn gain(alpha: f64, x_hat: f64, s: f64, x_in: f64) -> f64 {
    let below = (-x_hat).max(0.0);
    let d = x_in - x_hat;
    0.5 * s * (below * below - d * d) + fair(alpha, x_in)
}

/// An upper bound on [`gain`] without solving case 2 or 3 (`reach` is [`reach`]`(alpha, s)`).
#[must_use]
pub fn gain_bound(alpha: f64, x_hat: f64, s: f64, reach: f64) -> f64 {
    let base = x_hat.max(0.0);
    let mut x0 = base + reach;
    if x_hat > 0.0 {
        x0 = x0.min(x_hat + fair_slope(alpha, x_hat) / s);
    }
    let slope = fair_slope(alpha, x0);
    let below = (-x_hat).max(0.0);
    fair(alpha, x0) + slope * (x_hat - x0) + slope * slope / (2.0 * s) + 0.5 * s * below * below
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) {
        assert!((a - b).abs() <= tol * b.abs().max(1.0), "{a} vs {b}");
    }

    #[test]
    fn case1_is_the_clipped_penalty_point() {
        // rho = 1e-3, a = 2, z = 3: (0.006 - 2u - mu) / 0.004.
        close(x_hat(1e-3, 2.0, 3.0, 0.001, 0.0), 1.0, 1e-12);
        close(outside(x_hat(1e-3, 2.0, 3.0, 0.001, 0.0)), 1.0, 1e-12);
        close(x_hat(1e-3, 2.0, 3.0, 0.01, 0.0), -3.5, 1e-12);
        assert_eq!(outside(-3.5), 0.0);
        // The price moves it by mu / s.
        close(x_hat(1e-3, 2.0, 3.0, 0.0, 0.002), 1.0, 1e-12);
    }

    #[test]
    fn case2_roots_by_hand() {
        // s = 1, x^ = 0: y^3 = 1.
        close(alpha_half(0.0, 1.0), 1.0, 1e-14);
        // s = 1, x^ = 3: y^3 - 3y - 1 = 0, three real roots, y = 2 cos 20 deg.
        close(alpha_half(3.0, 1.0), 3.532_088_886_237_956, 1e-14);
        // s = 1, x^ = -3: y^3 + 3y - 1 = 0 (Cardano, the cancelling branch).
        close(alpha_half(-3.0, 1.0), 0.103_803_402_735_536_54, 1e-14);
        // Stationarity holds for extreme inputs.
        for (xh, s) in [
            (1e6, 1e-3),
            (-1e6, 1e-3),
            (0.2, 0.1),
            (-50.0, 10.0),
            (5.0, 1e-5),
        ] {
            let x = alpha_half(xh, s);
            close(x.powf(-0.5), s * (x - xh), 1e-10);
        }
    }

    #[test]
    fn case3_roots_by_hand() {
        // x = 16, alpha = 1/4: 16^-1/4 = 1/2 = 0.5 (16 - 15).
        close(fixed_point(0.25, 15.0, 0.5), 16.0, 1e-13);
        // x = 1, alpha = 0.3: 1 = 2 (1 - 0.5).
        close(fixed_point(0.3, 0.5, 2.0), 1.0, 1e-13);
        // Case 3 at alpha = 1/2 agrees with case 2.
        for (xh, s) in [(3.0, 1.0), (-3.0, 1.0), (0.0, 1e-3), (40.0, 0.03)] {
            close(fixed_point(0.5, xh, s), alpha_half(xh, s), 1e-12);
        }
    }

    #[test]
    fn the_naive_fixed_point_map_does_not_converge_where_ours_does() {
        // x <- x^ + x^-alpha / s with x^ = -10, alpha = 0.3, s = 0.117: slope -0.3 (1 + 10/x)
        // at the root x ~ 0.5, far beyond -1.
        let (alpha, xh, s) = (0.3, -10.0, 0.117);
        let root = fixed_point(alpha, xh, s);
        let mut x = root * 1.01;
        for _ in 0..50 {
            x = xh + x.powf(-alpha) / s;
        }
        assert!(x.is_nan() || (x - root).abs() > 0.1 * root, "{x} {root}");
        close(root.powf(-alpha), s * (root - xh), 1e-12);
    }

    #[test]
    fn gain_by_hand_and_its_bound() {
        // alpha = 1/2, s = 1, x^ = 0: x_in = 1: 0 - (1/2) + 2 = 1.5.
        close(gain(0.5, 0.0, 1.0, 1.0), 1.5, 1e-14);
        for (alpha, xh, s) in [
            (0.5, 0.0, 1.0),
            (0.5, 3.0, 1.0),
            (0.5, -3.0, 1e-3),
            (0.3, 0.2, 0.009),
            (0.7, 100.0, 0.05),
        ] {
            let g = gain(alpha, xh, s, inside(alpha, xh, s));
            let b = gain_bound(alpha, xh, s, reach(alpha, s));
            assert!(
                g >= 0.0 && b >= g * (1.0 - 1e-12),
                "{alpha} {xh} {s}: {g} {b}"
            );
        }
    }
}
