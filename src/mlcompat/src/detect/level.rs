//! Splitting a VM's samples into a low (compute) and a high (communication) level.
//!
//! Otsu's rule on the sorted samples: the split that maximises the between-class variance.
//! Samples above the 99th percentile of the non-zero samples are clamped to it first, so that a
//! few huge counts (a burst, a hostile guest) cannot become a class of their own. A sample is
//! "on" when it is above the midpoint of the two class means (unclamped samples compared), so a
//! sample the communication phase half covers is as likely on as off.
//!
//! Work: one sort, O(n log n); one pass over the sorted samples.

/// The two levels and the threshold between them, in bytes per interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Levels {
    /// Mean of the low class.
    pub low: f64,
    /// Mean of the high class.
    pub high: f64,
}

impl Levels {
    /// The midpoint: samples above it are "on".
    pub fn threshold(&self) -> f64 {
        0.5 * (self.low + self.high)
    }
}

/// The clamp percentile (of the non-zero samples).
const CLAMP_QUANTILE: f64 = 0.99;

/// Otsu's two levels of `samples`; `None` when the (clamped) samples are all equal.
pub(super) fn split(samples: &[u64]) -> Option<Levels> {
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    let zeros = sorted.partition_point(|&v| v == 0);
    let nonzero = &sorted[zeros..];
    let cap = if nonzero.is_empty() {
        0
    } else {
        let last = nonzero.len() - 1;
        let idx = (last as f64 * CLAMP_QUANTILE).floor();
        // idx is in [0, last]: a float of a usize, floored and scaled by a quantile below 1.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let idx = (idx as usize).min(last);
        nonzero[idx]
    };
    let values: Vec<f64> = sorted.iter().map(|&v| v.min(cap) as f64).collect();
    let n = values.len() as f64;
    let total: f64 = values.iter().sum();
    let mut best: Option<(f64, Levels)> = None;
    let mut low_sum = 0.0;
    for k in 1..values.len() {
        low_sum += values[k - 1];
        if values[k - 1] >= values[k] {
            continue; // not a split between distinct values
        }
        let w0 = k as f64;
        let w1 = n - w0;
        let mu0 = low_sum / w0;
        let mu1 = (total - low_sum) / w1;
        let between = w0 * w1 * (mu1 - mu0) * (mu1 - mu0);
        if best.is_none_or(|(b, _)| between > b) {
            best = Some((
                between,
                Levels {
                    low: mu0,
                    high: mu1,
                },
            ));
        }
    }
    best.map(|(_, levels)| levels)
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn finds_two_levels_despite_one_huge_sample() {
        let mut samples = vec![0u64; 60];
        samples.extend(std::iter::repeat_n(1_000, 40));
        samples.push(u64::MAX);
        let levels = split(&samples).expect("two levels");
        assert!(levels.low < 1.0, "{levels:?}");
        assert!((levels.high - 1_000.0).abs() < 1.0, "{levels:?}");
    }

    #[test]
    fn equal_samples_have_no_split() {
        assert_eq!(split(&[5, 5, 5, 5]), None);
        assert_eq!(split(&[0, 0]), None);
        assert_eq!(split(&[]), None);
    }
}
