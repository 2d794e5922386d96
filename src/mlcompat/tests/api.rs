//! The public types at the crate's edges: building a job from a detection, configurations as
//! JSON.

use resex_mlcompat::{compatibility, CircleConfig, DetectConfig, Job, Periodicity};

fn detected(phase_ns: u64) -> Periodicity {
    Periodicity {
        period_ns: 100_000_000,
        duty: 0.4,
        demand_bytes_per_s: 2.5e9,
        bytes_per_period: 1e8,
        phase_ns,
        confidence: 0.9,
        periods_seen: 10.0,
        samples_used: 1000,
    }
}

/// The arc starts at the phase, lasts the duty, and the demand is over the link's rate; a
/// phase of a whole period folds back to 0 instead of making an invalid arc.
#[test]
fn job_from_a_detection() {
    let job = Job::from_periodicity(&detected(25_000_000), 5e9);
    assert_eq!(job.period_ns, 100_000_000);
    assert_eq!(job.arcs.len(), 1);
    assert!((job.arcs[0].start - 0.25).abs() < 1e-12 && (job.arcs[0].end - 0.65).abs() < 1e-12);
    assert!((job.demand - 0.5).abs() < 1e-12);
    let folded = Job::from_periodicity(&detected(100_000_000), 5e9);
    assert_eq!(folded.arcs[0].start, 0.0);
    assert!(compatibility(&[folded], &CircleConfig::default()).is_ok());
    let no_link = Job::from_periodicity(&detected(0), 0.0);
    assert!(compatibility(&[no_link], &CircleConfig::default()).is_err());
}

/// Posted all at once (the monitor counts a WRITE when posted): 8 MiB in one 1 ms interval of a
/// 20 ms iteration, on an 8 Gb/s link, is an arc as long as the bytes take on the wire
/// (8.39 ms: 0.419 of the period) at the link's rate, not 0.05 of it at 8.4x the link.
#[test]
fn a_spike_becomes_its_wire_time() {
    let spike = Periodicity {
        period_ns: 20_000_000,
        duty: 0.05,
        demand_bytes_per_s: 8_388_608.0 / 1e-3,
        bytes_per_period: 8_388_608.0,
        ..detected(0)
    };
    let job = Job::from_periodicity(&spike, 1e9);
    let len = job.arcs[0].end - job.arcs[0].start;
    assert!((len - 0.419_430_4).abs() < 1e-9, "{job:?}");
    assert!((job.demand - 1.0).abs() < 1e-9, "{job:?}");
    // Two such jobs (42% each) fit on one link once rotated.
    let other = Job::from_periodicity(
        &Periodicity {
            phase_ns: 0,
            ..spike.clone()
        },
        1e9,
    );
    let c = compatibility(&[job, other], &CircleConfig::default()).expect("one circle");
    assert!(c.score > 0.99 && c.score_as_given < 0.6, "{c:?}");
}

/// Configurations round-trip through JSON and refuse unknown keys.
#[test]
fn configurations_as_json() {
    let circle = CircleConfig::default();
    let json = serde_json::to_string(&circle).expect("serialise");
    assert_eq!(
        serde_json::from_str::<CircleConfig>(&json).expect("parse"),
        circle
    );
    let detect = DetectConfig::default();
    let json = serde_json::to_string(&detect).expect("serialise");
    assert_eq!(
        serde_json::from_str::<DetectConfig>(&json).expect("parse"),
        detect
    );
    let typo = json.replace("min_periods", "min_period");
    assert!(serde_json::from_str::<DetectConfig>(&typo).is_err());
    let extra = r#"{"max_slots":1,"min_slots_per_period":1,"max_period_error":0.1,
        "rotation_steps":1,"max_jobs":1,"max_arcs":1,"max_sweeps":1,"lcm":5}"#;
    assert!(serde_json::from_str::<CircleConfig>(extra).is_err());
}
