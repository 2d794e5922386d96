//! The utilities: the alpha-fair utility of one rate, the top-k utility of a host (Definition
//! 2), and the CQ latency utility (Definition 1).
//!
//! The paper's Lemma 1 says the top-k utility is strictly concave. It is not concave: with
//! m = 2, k = 1, alpha = 1/2, `f~(1, 0) = f~(0, 1) = 2` but `f~(1/2, 1/2) = 1.41`. It is the
//! maximum over the C(m, k) selections of concave functions, and a maximum of concave functions
//! is not concave (the proof's "sup maintains concavity" holds for convex functions). So the
//! problem is not convex; for a fixed selection T it is. What we do about it: the x-step picks
//! T exactly for its own subproblem (see [`crate::xstep`]), and the reference (see
//! `reference`, feature `lab`) certifies its answer with a Lagrangian dual bound, which holds without
//! convexity.

/// `phi(x) = x^(1-alpha) / (1-alpha)`, the alpha-fair utility of rate x >= 0.
#[must_use]
pub fn fair(alpha: f64, x: f64) -> f64 {
    if alpha == 0.5 {
        2.0 * x.sqrt()
    } else {
        x.powf(1.0 - alpha) / (1.0 - alpha)
    }
}

/// `phi'(x) = x^-alpha` (infinite at 0).
#[must_use]
pub fn fair_slope(alpha: f64, x: f64) -> f64 {
    if alpha == 0.5 {
        1.0 / x.sqrt()
    } else {
        x.powf(-alpha)
    }
}

/// `f~(x)`: the sum of `fair` over the k largest rates of `x` (utility is increasing in the
/// rate, so the k largest utilities are those of the k largest rates).
#[must_use]
pub fn top_k(alpha: f64, k: usize, x: &[f64]) -> f64 {
    let mut v: Vec<f64> = x.to_vec();
    let k = k.min(v.len());
    if k == 0 {
        return 0.0;
    }
    v.select_nth_unstable_by(k - 1, |a, b| b.total_cmp(a));
    v[..k].iter().map(|&s| fair(alpha, s)).sum()
}

/// `g(z) = -beta * sum_j z_j^-2` (minus infinity if a rate is 0).
#[must_use]
pub fn latency(beta: f64, z: &[f64]) -> f64 {
    -beta * z.iter().map(|&v| 1.0 / (v * v)).sum::<f64>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_sums_the_k_largest_rates() {
        // 2 sqrt(9) + 2 sqrt(4) = 10.
        assert!((top_k(0.5, 2, &[1.0, 9.0, 4.0]) - 10.0).abs() < 1e-12);
        // alpha = 0.75: x^0.25 / 0.25, 16 -> 8.
        assert!((top_k(0.75, 1, &[16.0, 1.0]) - 8.0).abs() < 1e-12);
    }

    #[test]
    fn top_k_is_not_concave() {
        let mid = top_k(0.5, 1, &[0.5, 0.5]);
        let ends = 0.5 * (top_k(0.5, 1, &[1.0, 0.0]) + top_k(0.5, 1, &[0.0, 1.0]));
        assert!(mid < ends, "{mid} {ends}");
    }

    #[test]
    fn latency_is_minus_beta_over_z_squared() {
        assert!((latency(2.0, &[1.0, 0.5]) + 2.0 * (1.0 + 4.0)).abs() < 1e-12);
    }
}
