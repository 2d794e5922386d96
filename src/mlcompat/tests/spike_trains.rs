//! Spike trains, as resex's monitor sees a job that posts one large message per iteration:
//! periods that are not whole numbers of samples, posts jittered by up to a sample, 1 % of
//! them missing.

use resex_mlcompat::synth::{spike_train, SpikeSpec};
use resex_mlcompat::{detect, DetectConfig, DetectError};

const MS: f64 = 1e6;

/// Periods 5.3 ms to 499.1 ms, three seeds, 4000 samples (8 to 750 periods): the period within
/// 2 %, the bytes per iteration within 2 % of the posted bytes times the share of iterations
/// with their post.
#[test]
fn spike_train_grid() {
    let mut worst = 0.0f64;
    let mut worst_bytes = 0.0f64;
    let mut cases = 0;
    for period_ms in [5.3, 7.77, 13.1, 20.2, 31.9, 47.9, 101.3, 233.7, 499.1] {
        for seed in 1..=3u64 {
            let spec = SpikeSpec {
                period_ns: period_ms * MS,
                bytes: 8 << 20,
                phase_ns: f64::from(u32::try_from(seed).unwrap_or(0)) * 1.7 * MS,
                interval_ns: MS,
                samples: 4000,
                jitter_ns: MS,
                missing: 0.01,
                seed,
            };
            let trace = spike_train(&spec);
            let got = detect(&trace, 1_000_000, &DetectConfig::default())
                .unwrap_or_else(|e| panic!("{spec:?}: {e}"));
            let err = (got.period_ns as f64 / spec.period_ns - 1.0).abs();
            assert!(err < 0.02, "{err} {got:?} {spec:?}");
            // The share of iterations whose post is there, between the first and last post.
            let posts = trace.iter().filter(|&&v| v > 0).count() as f64;
            let first = trace.iter().position(|&v| v > 0).unwrap_or(0) as f64;
            let last = trace.iter().rposition(|&v| v > 0).unwrap_or(0) as f64;
            let share = posts / (((last - first) / period_ms).round() + 1.0);
            let bytes_err = got.bytes_per_period / (share * (8u64 << 20) as f64) - 1.0;
            assert!(bytes_err.abs() < 0.02, "{bytes_err} {got:?} {spec:?}");
            worst = worst.max(err);
            worst_bytes = worst_bytes.max(bytes_err.abs());
            cases += 1;
        }
    }
    eprintln!(
        "{cases} spike trains: worst period error {worst:.5}, bytes per period {worst_bytes:.4}"
    );
}

/// A 64 KiB post every 1 ms, jittered by up to half an interval: intervals read 0, 1 or 2 posts (a beat
/// against the sampling), and the VM is refused as a steady sender, not given a period.
#[test]
fn a_beating_steady_sender_is_refused() {
    for seed in 1..=5 {
        let trace = spike_train(&SpikeSpec {
            period_ns: 1.0003 * MS,
            bytes: 64 << 10,
            phase_ns: 0.5 * MS,
            interval_ns: MS,
            samples: 4000,
            jitter_ns: 0.5 * MS,
            missing: 0.0,
            seed,
        });
        assert!(trace.contains(&0) && trace.contains(&(128 << 10)));
        let got = detect(&trace, 1_000_000, &DetectConfig::default());
        assert!(matches!(got, Err(DetectError::Steady { .. })), "{got:?}");
    }
}
