//! The autocorrelation of a real signal through a radix-2 FFT (Wiener-Khinchin).
//!
//! Work: O(N log N) time and 2N `f64`s of memory for N = the power of two at or above twice
//! the signal's length (zero padding makes the correlation linear, not circular).

use std::f64::consts::PI;

/// In-place iterative radix-2 FFT of `re + i im` (lengths equal, a power of two).
/// `inverse` conjugates the twiddles; the caller divides by N.
fn fft(re: &mut [f64], im: &mut [f64], inverse: bool) {
    let n = re.len();
    debug_assert!(n.is_power_of_two() && im.len() == n);
    if n < 2 {
        return;
    }
    // Bit-reversal permutation.
    let mut j = 0usize;
    for i in 1..n {
        let mut bit = n >> 1;
        while j & bit != 0 {
            j ^= bit;
            bit >>= 1;
        }
        j |= bit;
        if i < j {
            re.swap(i, j);
            im.swap(i, j);
        }
    }
    // Twiddles for the last stage, computed directly (no accumulated rotation error); stage
    // `len` uses every (n / len)-th of them.
    let sign = if inverse { 1.0 } else { -1.0 };
    let half = n / 2;
    let (tw_re, tw_im): (Vec<f64>, Vec<f64>) = (0..half)
        .map(|k| {
            let angle = sign * 2.0 * PI * k as f64 / n as f64;
            let (s, c) = angle.sin_cos();
            (c, s)
        })
        .unzip();
    let mut len = 2;
    while len <= n {
        let step = n / len;
        for start in (0..n).step_by(len) {
            for k in 0..len / 2 {
                let (wr, wi) = (tw_re[k * step], tw_im[k * step]);
                let a = start + k;
                let b = a + len / 2;
                let xr = re[b] * wr - im[b] * wi;
                let xi = re[b] * wi + im[b] * wr;
                re[b] = re[a] - xr;
                im[b] = im[a] - xi;
                re[a] += xr;
                im[a] += xi;
            }
        }
        len <<= 1;
    }
}

/// `c[k] = sum_i x[i] x[i + k]` for `k` in `0..x.len()`.
pub(super) fn autocorrelation(x: &[f64]) -> Vec<f64> {
    let n = x.len();
    if n == 0 {
        return Vec::new();
    }
    let size = (2 * n).next_power_of_two();
    let mut re = vec![0.0; size];
    let mut im = vec![0.0; size];
    re[..n].copy_from_slice(x);
    fft(&mut re, &mut im, false);
    for (r, i) in re.iter_mut().zip(im.iter_mut()) {
        *r = *r * *r + *i * *i;
        *i = 0.0;
    }
    fft(&mut re, &mut im, true);
    let scale = 1.0 / size as f64;
    re.truncate(n);
    for v in &mut re {
        *v *= scale;
    }
    re
}

#[cfg(test)]
mod tests {
    use super::autocorrelation;

    #[test]
    fn matches_the_direct_sum() {
        let mut rng = fastrand::Rng::with_seed(7);
        for n in [1usize, 2, 3, 5, 16, 17, 100] {
            let x: Vec<f64> = (0..n).map(|_| rng.f64() - 0.5).collect();
            let fast = autocorrelation(&x);
            for (k, got) in fast.iter().enumerate() {
                let want: f64 = (0..n - k).map(|i| x[i] * x[i + k]).sum();
                assert!((got - want).abs() < 1e-9, "n {n} lag {k}: {got} vs {want}");
            }
        }
    }
}
