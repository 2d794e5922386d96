//! `resex lab mlcompat` (the paper's experiment on the fabric) and `resex lab fabric` end to
//! end: JSON rows of the issue's shape, the SVG, and each worker's period found in its exact
//! traffic on the fabric.

mod common;

use common::{resex, stdout};

#[test]
fn the_experiment_prints_rows_of_the_issues_shape_and_plots_fig2() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "lab",
        "mlcompat",
        "--group",
        "wideresnet+vgg16",
        "--iterations",
        "12",
        "--json",
        "--svg",
        dir.path().to_str().unwrap(),
    ];
    let out = stdout(&resex(&args));
    let row: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(row["jobs"], serde_json::json!(["wideresnet", "vgg16"]));
    let score = row["compat_score"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&score), "{row}");
    for k in [
        "fair_iter_ms",
        "unfair_iter_ms",
        "adaptive_iter_ms",
        "priority_iter_ms",
    ] {
        let v = row[k].as_array().unwrap();
        assert_eq!(v.len(), 2, "{k}: {row}");
        // Never faster than alone.
        for (t, alone) in v.iter().zip(row["alone_ms"].as_array().unwrap()) {
            assert!(
                t.as_f64().unwrap() >= alone.as_f64().unwrap() - 0.01,
                "{k}: {row}"
            );
        }
    }
    let svg = std::fs::read_to_string(dir.path().join("wideresnet+vgg16.svg")).unwrap();
    assert!(
        svg.contains("<svg") && svg.contains("Adaptive"),
        "{}",
        svg.len()
    );
}

#[test]
fn a_bad_group_is_a_clear_error() {
    let out = resex(&["lab", "mlcompat", "--group", "vgg19+alexnet"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("alexnet") && err.contains("dlrm"), "{err}");
}

/// Each of the four workers' periods, found in its traffic, within 5% of its iterations.
fn four_periods_within_5_percent(v: &serde_json::Value, out: &str) {
    let found = v["detected"].as_array().unwrap();
    assert_eq!(found.len(), 4, "{out}");
    for f in found {
        let p = f["period_ms"].as_f64().unwrap_or_else(|| panic!("{f}"));
        let it = f["iteration_ms"].as_f64().unwrap();
        assert!((p / it - 1.0).abs() < 0.05, "{f}");
    }
}

#[test]
fn fabric_runs_a_scenario_and_finds_each_workers_period() {
    let out = stdout(&resex(&[
        "lab",
        "fabric",
        "tools/scenarios/fabric/two-jobs.toml",
        "--json",
    ]));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let jobs = v["result"]["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 2);
    four_periods_within_5_percent(&v, &out);
}

#[test]
fn fabric_on_lab_hosts_runs_a_policy_on_every_host_and_finds_periods_in_the_monitors_counts() {
    let out = stdout(&resex(&[
        "lab",
        "fabric",
        "tools/scenarios/fabric/two-jobs.toml",
        "--lab-hosts",
        "--policy",
        "ioshares",
        "--duration",
        "2",
        "--json",
    ]));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let hosts = v["hosts"].as_array().unwrap();
    assert_eq!(hosts.len(), 4, "{out}");
    for h in hosts {
        assert_eq!(h["policy"], "ioshares", "{h}");
        assert!(h["vms"][0]["mtus"].as_u64().unwrap() > 0, "{h}");
    }
    four_periods_within_5_percent(&v, &out);
    // --policy without --lab-hosts is refused by the parser.
    let bad = resex(&[
        "lab",
        "fabric",
        "tools/scenarios/fabric/two-jobs.toml",
        "--policy",
        "ioshares",
    ]);
    assert!(!bad.status.success());
}

/// `--fleet`: the fabric's lab hosts under the coordinator's round, fair and adaptive side by
/// side (the topology turns adaptive unfairness on), the links' scores in the JSON.
#[test]
fn the_fleet_on_lab_hosts_scores_the_links_and_runs_its_fair_control() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let fabric = format!("{root}/tools/scenarios/fabric/fleet-jobs.toml");
    let topo = format!("{root}/tools/scenarios/fabric/fleet-jobs.topology.toml");
    let args = [
        "lab",
        "fabric",
        &fabric,
        "--lab-hosts",
        "--fleet",
        &topo,
        "--duration",
        "9",
        "--json",
    ];
    let out = stdout(&resex(&args));
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let f = &v["fleet"];
    assert_eq!(f["rounds"], 9, "{f}");
    let score = |name: &str| {
        f["links"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["name"] == name)
            .and_then(|l| l["score"].as_f64())
            .unwrap_or_else(|| panic!("{name}: {f}"))
    };
    assert!(score("uplink-a") >= 0.9 && score("uplink-b") < 0.8, "{f}");
    let jobs = f["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 4, "{f}");
    for j in jobs {
        for k in ["fair_iter_ms", "adaptive_iter_ms", "speedup"] {
            assert!(j[k].as_f64().is_some_and(|x| x > 0.0), "{k}: {j}");
        }
    }
    // Without --lab-hosts the fleet has no hosts to run on: refused by clap.
    let out = resex(&["lab", "fabric", &fabric, "--fleet", &topo]);
    assert!(!out.status.success());
}
