//! A fast cube root: the baseline takes one per application per price it tries, and the
//! platform's `cbrt` (a software routine here) dominated its profile.

/// `x^(1/3)` for finite x > 0 (to within an ulp or two): an exponent-third first guess from the
/// bits, then three Halley steps (cubic convergence: 10 %, 1e-3, 1e-9, 1e-27).
#[must_use]
pub fn cbrt(x: f64) -> f64 {
    if !(x > 0.0 && x.is_finite()) || x < f64::MIN_POSITIVE {
        return x.cbrt();
    }
    // The exponent divided by 3 (with the bias re-added): within a factor 1.26 of the root.
    let mut y = f64::from_bits(x.to_bits() / 3 + 0x2A9F_7893_782D_A1CE);
    for _ in 0..3 {
        let y3 = y * y * y;
        y *= (y3 + 2.0 * x) / (2.0 * y3 + x);
    }
    y
}

#[cfg(test)]
mod tests {
    #[test]
    fn agrees_with_the_library_over_the_range() {
        let mut x = 1e-300;
        while x < 1e300 {
            for f in [1.0, 1.7, 2.9, 5.3] {
                let v = x * f;
                let (a, b) = (super::cbrt(v), v.cbrt());
                assert!((a - b).abs() <= 4e-16 * b, "{v}: {a} {b}");
            }
            x *= 1e3;
        }
    }
}
