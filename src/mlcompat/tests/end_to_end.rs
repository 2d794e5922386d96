//! From bytes per millisecond to a verdict: two VMs' synthetic traces through `detect`, then
//! `Job::from_periodicity` and `compatibility`.

use resex_mlcompat::synth::{on_off, TraceSpec};
use resex_mlcompat::{compatibility, detect, CircleConfig, DetectConfig, Job};

/// The link both VMs share, bytes per second (40 Gb/s).
const LINK: f64 = 5e9;

/// A noisy VM at full link rate while communicating.
fn vm(period_ms: f64, duty: f64, phase_ms: f64, seed: u64) -> Job {
    let spec = TraceSpec {
        period_ns: period_ms * 1e6,
        duty,
        bytes_per_s: LINK,
        phase_ns: phase_ms * 1e6,
        interval_ns: 1e6,
        samples: 3000,
        start_jitter: 0.005,
        length_jitter: 0.02,
        amplitude_noise: 0.1,
        missing: 0.005,
        background_bytes_per_s: 0.0,
        seed,
    };
    let p = detect(&on_off(&spec), 1_000_000, &DetectConfig::default()).expect("periodic");
    Job::from_periodicity(&p, LINK)
}

/// Two 100 ms jobs communicating 40 % of the time, 10 ms apart: colliding as they run
/// (30 ms of their 80 ms overlap: score 1 - 30/80), fully compatible once rotated.
#[test]
fn detected_jobs_at_forty_percent_are_compatible_once_rotated() {
    let jobs = [vm(100.0, 0.4, 5.0, 1), vm(100.0, 0.4, 15.0, 2)];
    let got = compatibility(&jobs, &CircleConfig::default()).expect("one circle");
    eprintln!(
        "40 %: as given {:.4}, best {:.4}",
        got.score_as_given, got.score
    );
    assert!(got.circle.period_error < 0.01, "{got:?}");
    assert!((got.score_as_given - 0.625).abs() < 0.05, "{got:?}");
    assert!(got.score > 0.97, "{got:?}");
}

/// 60 % each cannot be separated: about 5/6 at best. A 100 ms and a 200 ms job that fit
/// (50 % and 20 %) score about 1.
#[test]
fn detected_jobs_score_as_the_hand_computed_cases() {
    let tight = [vm(100.0, 0.6, 0.0, 3), vm(100.0, 0.6, 30.0, 4)];
    let got = compatibility(&tight, &CircleConfig::default()).expect("one circle");
    eprintln!(
        "60 %: as given {:.4}, best {:.4}",
        got.score_as_given, got.score
    );
    assert!((got.score - 5.0 / 6.0).abs() < 0.03, "{got:?}");

    let fits = [vm(100.0, 0.5, 20.0, 5), vm(200.0, 0.2, 40.0, 6)];
    let got = compatibility(&fits, &CircleConfig::default()).expect("one circle");
    eprintln!(
        "100/200 ms: as given {:.4}, best {:.4}",
        got.score_as_given, got.score
    );
    assert!(got.score > 0.97, "{got:?}");
    assert!(got.score_as_given < 0.9, "{got:?}");
}
