//! `resex lab run`, `resex lab compare` and `resex lab owed` end to end: byte-identical
//! output, the time-series plot, the comparison table, the random hosts, and the lab-only
//! lying guest refused by the embedded host.

mod common;

use common::{resex, stdout};

#[test]
fn lab_run_with_series_is_deterministic_and_plots() {
    let dir = tempfile::tempdir().unwrap();
    let plot = dir.path().to_str().unwrap();
    let args = [
        "lab",
        "run",
        "tools/scenarios/compare/pair.toml",
        "--policy",
        "governor-cpu",
        "--duration",
        "2.5",
        "--json",
        "--series",
        "--plot",
        plot,
    ];
    let a = stdout(&resex(&args));
    let b = stdout(&resex(&args));
    assert_eq!(a, b, "the same seed and scenario must give the same bytes");
    let v: serde_json::Value = serde_json::from_str(&a).unwrap();
    let s = &v["series"];
    assert_eq!(s["t_s"].as_array().unwrap().len(), 250);
    let caps = s["vms"][1]["cap"].as_array().unwrap();
    // The interferer starts at 2 s and the cap-only governor caps it within the run.
    assert_eq!(caps[150].as_f64(), Some(100.0));
    assert!(caps.last().unwrap().as_f64().unwrap() < 100.0);
    let svg = std::fs::read_to_string(dir.path().join("pair-governor-cpu.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("interfering"));
}

#[test]
fn lab_compare_prints_one_row_per_scenario_and_policy() {
    let o = resex(&[
        "lab",
        "compare",
        "tools/scenarios/compare/lying.toml",
        "--policy",
        "ioshares,governor,justitia",
        "--duration",
        "3",
        "--json",
    ]);
    let rows: Vec<serde_json::Value> = serde_json::from_str(&stdout(&o)).unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r["policy"].as_str().unwrap()).collect();
    // `justitia` is a baseline under tools/baselines, found by name.
    assert_eq!(names, ["none", "ioshares", "governor", "justitia"]);
    assert_eq!(rows[2]["aggressor_cap_min"].as_f64(), Some(100.0));
    let o = resex(&["lab", "compare", "--policy", "nosuch", "--duration", "1"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("policies/nosuch.toml"));
}

#[test]
fn the_embedded_host_refuses_a_lying_guest() {
    let dir = tempfile::tempdir().unwrap();
    let o = resex(&[
        "host",
        "--scenario",
        "tools/scenarios/compare/lying.toml",
        "--run-dir",
        dir.path().to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("lab-only"), "{err}");
}

/// `resex lab owed`: the same seed draws the same hosts and gives the same bytes; every host
/// is judged under every policy named, and the summary is that of the hosts' lines.
#[test]
fn lab_owed_judges_every_random_host_and_sums_it_up() {
    let owed = |seed: &str, policy: &str| {
        resex(&[
            "lab", "owed", "--hosts", "2", "--seed", seed, "--policy", policy, "--json",
        ])
    };
    assert!(
        !owed("7", "governor,none-such").status.success(),
        "an unknown policy is refused"
    );
    let a = stdout(&owed("7", "governor,drum-rate"));
    assert_eq!(
        a,
        stdout(&owed("7", "governor,drum-rate")),
        "the same seed, the same bytes"
    );
    let v: serde_json::Value = serde_json::from_str(&a).unwrap();
    let hosts = v["hosts"].as_array().unwrap();
    assert_eq!(hosts.len(), 2);
    for h in hosts {
        let n = h["guests"].as_array().unwrap().len();
        assert!((2..=6).contains(&n), "{h}");
        let p: Vec<&str> = h["policies"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["policy"].as_str().unwrap())
            .collect();
        assert_eq!(p, ["governor", "drum-rate"]);
    }
    // The summary's worst is the worst of the hosts' lines.
    let worst = |k: usize| {
        hosts
            .iter()
            .filter_map(|h| h["policies"][k]["latency_x"][0].as_f64())
            .reduce(f64::max)
    };
    let summary = v["summary"].as_array().unwrap();
    assert_eq!(summary.len(), 2);
    for (k, s) in summary.iter().enumerate() {
        assert_eq!(s["worst_latency_x"][0].as_f64(), worst(k), "{s}");
    }
    let other = stdout(&owed("8", "governor,drum-rate"));
    let o: serde_json::Value = serde_json::from_str(&other).unwrap();
    let guests = |v: &serde_json::Value| -> Vec<serde_json::Value> {
        v["hosts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["guests"].clone())
            .collect()
    };
    assert_ne!(guests(&o), guests(&v), "another seed, other hosts");
}
