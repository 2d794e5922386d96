//! Black-Scholes option pricing: the server's per-order compute (the paper used a financial
//! library for the same job).

/// The standard normal cumulative distribution (Abramowitz & Stegun 26.2.17, |error| < 7.5e-8).
pub fn norm_cdf(x: f64) -> f64 {
    let k = 1.0 / (1.0 + 0.231_641_9 * x.abs());
    let poly = k
        * (0.319_381_530
            + k * (-0.356_563_782
                + k * (1.781_477_937 + k * (-1.821_255_978 + k * 1.330_274_429))));
    let tail = (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt() * poly;
    if x >= 0.0 {
        1.0 - tail
    } else {
        tail
    }
}

/// A European option.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Option_ {
    /// Spot price.
    pub spot: f64,
    /// Strike price.
    pub strike: f64,
    /// Annual volatility.
    pub vol: f64,
    /// Years to expiry.
    pub years: f64,
    /// Risk-free rate.
    pub rate: f64,
}

/// Call and put prices.
pub fn price(o: &Option_) -> (f64, f64) {
    let sqrt_t = o.years.max(1e-9).sqrt();
    let d1 =
        ((o.spot / o.strike).ln() + (o.rate + 0.5 * o.vol * o.vol) * o.years) / (o.vol * sqrt_t);
    let d2 = d1 - o.vol * sqrt_t;
    let disc = o.strike * (-o.rate * o.years).exp();
    let call = o.spot * norm_cdf(d1) - disc * norm_cdf(d2);
    let put = disc * norm_cdf(-d2) - o.spot * norm_cdf(-d1);
    (call, put)
}

/// Prices `n` options around `o` (strikes stepping by 0.1%): the compute of one order.
pub fn price_book(o: &Option_, n: u32) -> f64 {
    let mut acc = 0.0;
    for i in 0..n {
        let mut v = *o;
        v.strike *= 1.0 + f64::from(i) * 0.001;
        let (c, p) = price(&v);
        acc += c - p;
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_a_textbook_value_and_put_call_parity() {
        // Hull's example: S=42, K=40, r=10%, sigma=20%, T=0.5: call 4.76, put 0.81.
        let o = Option_ {
            spot: 42.0,
            strike: 40.0,
            vol: 0.2,
            years: 0.5,
            rate: 0.1,
        };
        let (c, p) = price(&o);
        assert!((c - 4.76).abs() < 0.01, "{c}");
        assert!((p - 0.81).abs() < 0.01, "{p}");
        let parity = o.spot - o.strike * (-o.rate * o.years).exp();
        assert!((c - p - parity).abs() < 1e-6);
        assert!((norm_cdf(0.0) - 0.5).abs() < 1e-7);
    }
}
