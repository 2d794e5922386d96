//! Is the VM a steady sender whose samples only beat against the sampling?
//!
//! A VM sending 64 KiB every 1 ms, sampled every 1 ms, reads 65 536 bytes in most intervals,
//! and 0 or 131 072 where a post slips across a sampling edge. Otsu's split sees two levels
//! and the autocorrelation finds the beat's period, which is not a communication period. What
//! marks the beat: no byte is ever far from where a constant rate would put it. The cumulative
//! bytes C(i) after i samples are compared with their least-squares line; the excursion is the
//! range of C(i) minus the line, in intervals' worth of the mean rate. A post moved across an
//! edge moves one interval's bytes (the lab's reporting VM: excursion 1.01; posts jittered
//! independently by up to half an interval: at most 2). An on/off job idle for g intervals of
//! every period moves g intervals' worth (exactly (1 - duty) x period without noise; a spike
//! every P samples: P - 1). Traces within [`STEADY_EXCURSION`] are refused as steady: a job
//! idle for fewer than 2.5 intervals per period has no gap worth a circle.
//!
//! Work: two O(n) passes.

/// The largest excursion, in intervals' worth of the mean rate, of a steady sender.
pub const STEADY_EXCURSION: f64 = 2.5;

/// The excursion of `window` (see the module doc), with the mean bytes per interval; `None`
/// when the window is empty or silent.
pub(super) fn excursion(window: &[u64]) -> Option<(f64, f64)> {
    let n = window.len() as f64;
    let total: f64 = window.iter().map(|&v| v as f64).sum();
    let mean = total / n;
    if !(mean > 0.0 && mean.is_finite()) {
        return None;
    }
    // Points (i, C(i)) for i in 1..=n, centred on their means: i - (n + 1) / 2, C(i) - mean_c.
    let mid = 0.5 * (n + 1.0);
    let (mut sum_c, mut sxy, mut sxx) = (0.0, 0.0, 0.0);
    let mut c = 0.0;
    for (i, &v) in window.iter().enumerate() {
        c += v as f64;
        let x = (i + 1) as f64 - mid;
        sum_c += c;
        sxy += x * c;
        sxx += x * x;
    }
    let mean_c = sum_c / n;
    let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    c = 0.0;
    for (i, &v) in window.iter().enumerate() {
        c += v as f64;
        let d = c - mean_c - slope * ((i + 1) as f64 - mid);
        lo = lo.min(d);
        hi = hi.max(d);
    }
    let excursion = (hi - lo) / mean;
    excursion.is_finite().then_some((excursion, mean))
}

#[cfg(test)]
mod tests {
    use super::excursion;

    /// A beat (a zero, and the bytes a few samples later) moves one interval's worth; a gap
    /// of three samples in twenty, or a spike every four samples, moves three.
    #[test]
    fn a_beat_is_steady_and_a_gap_is_not() {
        let beat: Vec<u64> = (0..4000)
            .map(|i| match i % 20 {
                3 => 0,
                13 => 2,
                _ => 1,
            })
            .collect();
        let gap: Vec<u64> = (0..4000).map(|i| u64::from(i % 20 >= 3)).collect();
        let spikes: Vec<u64> = (0..4000).map(|i| u64::from(i % 4 == 0)).collect();
        let of = |w: &[u64]| excursion(w).map_or(f64::NAN, |e| e.0);
        assert!(of(&beat) < 1.1, "{}", of(&beat));
        assert!(of(&gap) > 2.9, "{}", of(&gap));
        assert!(of(&spikes) > 2.9, "{}", of(&spikes));
        assert_eq!(excursion(&[0, 0]), None);
        assert_eq!(excursion(&[]), None);
    }
}
