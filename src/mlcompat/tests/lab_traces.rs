//! The detector on traces recorded in resex's lab: each VM's transmitted bytes per 1 ms as the
//! monitor counted them (an RDMA WRITE counted whole in the interval it was posted, so a job's
//! 8 MiB reply is one spike per iteration). Ground truth: the lab's iteration count over the
//! run.

use resex_mlcompat::{detect, DetectConfig, DetectError, Periodicity};
use serde::Deserialize;

/// One VM's recorded traffic.
#[derive(Debug, Deserialize)]
struct Trace {
    name: String,
    #[allow(dead_code)]
    start_s: f64,
    interval_ns: u64,
    tx_bytes: Vec<u64>,
}

const MIB: f64 = 1024.0 * 1024.0;

fn load(file: &str) -> Vec<Trace> {
    let path = format!("{}/tests/data/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn run(traces: &[Trace], name: &str) -> Result<Periodicity, DetectError> {
    let t = traces
        .iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("no VM {name}"));
    detect(&t.tx_bytes, t.interval_ns, &DetectConfig::default())
}

/// The job's period within 5 % of the lab's iteration time, its bytes per iteration within 2 %
/// of the message it posts.
fn check(file: &str, name: &str, iteration_ms: f64, message_mib: f64) {
    let got = run(&load(file), name).unwrap_or_else(|e| panic!("{file} {name}: {e}"));
    let ms = got.period_ns as f64 / 1e6;
    let err = ms / iteration_ms - 1.0;
    let bytes_err = got.bytes_per_period / (message_mib * MIB) - 1.0;
    eprintln!(
        "{file} {name}: period {ms:.3} ms vs {iteration_ms} ms ({:+.2} %), bytes/period {:.3} \
         MiB ({:+.2} %), duty {:.3}, confidence {:.3}",
        100.0 * err,
        got.bytes_per_period / MIB,
        100.0 * bytes_err,
        got.duty,
        got.confidence
    );
    assert!(err.abs() < 0.05, "{got:?}");
    assert!(bytes_err.abs() < 0.02, "{got:?}");
    assert!(got.confidence >= 0.5, "{got:?}");
}

#[test]
fn job_a_alone() {
    check("lab-job-a-alone.json", "job-a", 20.20, 8.0);
}

#[test]
fn job_b_alone() {
    check("lab-job-b-alone.json", "job-b", 29.81, 4.0);
}

/// Sharing a port, the jobs stretch each other's iterations (job-a's from 20 to 25 ms): the
/// bursts wander off any straight line, yet the mean period is found.
#[test]
fn periodic_pair() {
    check("lab-periodic-pair.json", "job-a", 21.51, 8.0);
    check("lab-periodic-pair.json", "job-b", 32.22, 4.0);
}

/// The latency-sensitive VM sends 64 KiB every 1 ms: its zeros and double counts are its
/// schedule beating against the sampling, not a communication period.
#[test]
fn a_steady_sender_is_refused() {
    for file in ["lab-job-a-alone.json", "lab-periodic-pair.json"] {
        let got = run(&load(file), "reporting");
        eprintln!("{file} reporting: {got:?}");
        assert!(
            matches!(got, Err(DetectError::Steady { .. })),
            "{file}: {got:?}"
        );
    }
}
