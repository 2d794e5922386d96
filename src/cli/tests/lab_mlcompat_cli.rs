//! `resex lab mlcompat detect` end to end: the lab's monitor counts each VM's bytes per 1 ms
//! interval, and the detector finds each periodic job's iteration time from them alone (within
//! the 5%), its bytes per iteration, and refuses the steady latency-sensitive VM.

mod common;

use common::{resex, stdout};

#[test]
fn detect_finds_each_jobs_period_from_its_traffic_alone() {
    let dir = tempfile::tempdir().unwrap();
    let traffic = dir.path().join("traffic.json");
    let args = [
        "lab",
        "mlcompat",
        "detect",
        "tools/scenarios/periodic-pair.toml",
        "--json",
        "--traffic",
        traffic.to_str().unwrap(),
    ];
    let out = stdout(&resex(&args));
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    let rows = &report["vms"];
    let row = |name: &str| {
        rows.as_array()
            .unwrap()
            .iter()
            .find(|r| r["vm"] == name)
            .unwrap_or_else(|| panic!("{name}: {out}"))
            .clone()
    };
    for (job, mib) in [("job-a", 8.0), ("job-b", 4.0)] {
        let r = row(job);
        let err = r["period_error"].as_f64().unwrap();
        assert!(err.abs() < 0.05, "{job}: {r}");
        let per = r["bytes_per_period"].as_f64().unwrap() / f64::from(1 << 20);
        assert!((per - mib).abs() < 0.02 * mib, "{job}: {r}");
        let wire = r["wire_duty"].as_f64().unwrap();
        assert!(wire > 0.0 && wire < 1.0, "{job}: {r}");
    }
    // The two jobs on the circle: a score in [0, 1], no better as they run than at the best
    // rotation, one shift each.
    assert_eq!(
        report["jobs"],
        serde_json::json!(["job-a", "job-b"]),
        "{report}"
    );
    let c = &report["compatibility"];
    let (best, now) = (
        c["score"].as_f64().unwrap(),
        c["score_as_given"].as_f64().unwrap(),
    );
    assert!((0.0..=1.0).contains(&best) && now <= best + 1e-12, "{c}");
    assert_eq!(c["shifts_ns"].as_array().unwrap().len(), 2, "{c}");
    let rep = row("reporting");
    assert!(rep["period_ms"].is_null(), "{rep}");
    assert!(rep["why"].as_str().unwrap().contains("steady"), "{rep}");
    // What the detector saw: every VM's bytes per interval, 1 ms each.
    let t: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&traffic).unwrap()).unwrap();
    let vms = t.as_array().unwrap();
    assert_eq!(vms.len(), 3);
    assert!(vms.iter().all(|v| v["interval_ns"] == 1_000_000));
    assert_eq!(vms[1]["tx_bytes"].as_array().unwrap().len(), 4000);
}

#[test]
fn detect_on_a_missing_scenario_is_one_clear_error() {
    let o = resex(&["lab", "mlcompat", "detect", "tools/scenarios/nope.toml"]);
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("nope.toml"), "{e}");
}
