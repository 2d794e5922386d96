//! `resex lab drum` end to end: the JSON schema, ADMM within 99.5 % of the certified optimum,
//! the plot, and a clear error for an impossible size.

mod common;

use common::{resex, stdout};

#[test]
fn lab_drum_json_has_the_schema_and_admm_reaches_the_optimum() {
    let dir = tempfile::tempdir().unwrap();
    let o = resex(&[
        "lab",
        "drum",
        "--hosts",
        "20",
        "--apps",
        "50",
        "--rho",
        "1",
        "--iterations",
        "30",
        "--json",
        "--plot",
        dir.path().to_str().unwrap(),
    ]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["hosts"], 20);
    assert_eq!(v["apps"], 50);
    let admm = &v["admm"];
    for key in ["iterations", "iterations_to_995", "objective"] {
        assert!(admm.get(key).is_some(), "admm.{key}");
    }
    assert_eq!(admm["primal_residual"].as_array().unwrap().len(), 30);
    assert_eq!(admm["objective_trace"].as_array().unwrap().len(), 30);
    let dd = &v["dual_decomposition"];
    assert!(dd["objective_at_60"].is_f64());
    assert_eq!(dd["objective_trace"].as_array().unwrap().len(), 30);
    let best = v["reference_objective"].as_f64().unwrap();
    let bound = v["reference_dual_bound"].as_f64().unwrap();
    // The certificate: feasible value <= optimum <= dual bound, equal up to rounding.
    assert!((bound - best).abs() <= 1e-9 * best.abs(), "{best} {bound}");
    let last = admm["objective"].as_f64().unwrap();
    assert!(
        (last - best).abs() <= 0.005 * best.abs(),
        "{last} vs {best}"
    );
    assert!(admm["iterations_to_995"].as_u64().unwrap() <= 20);
    assert_eq!(v["penalty"], "fixed");
    assert_eq!(v["final_rho"], 1.0);
    let svg = std::fs::read_to_string(dir.path().join("drum-n20-m50.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("dual decomposition"));
}

#[test]
fn lab_drum_default_is_the_adaptive_penalty_and_converges() {
    // The paper's first size and the seed whose fixed rho = 1e-3 ended 19x off the optimum.
    let o = resex(&[
        "lab",
        "drum",
        "--hosts",
        "100",
        "--apps",
        "50",
        "--seed",
        "7",
        "--iterations",
        "25",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["penalty"], "adaptive");
    assert_eq!(v["balancing"]["mu"], 10.0);
    assert_eq!(v["balancing"]["tau"], 2.0);
    let rho = v["final_rho"].as_f64().unwrap();
    assert!(
        rho > 0.0 && rho != v["params"]["rho"].as_f64().unwrap(),
        "{rho}"
    );
    assert_eq!(v["admm"]["rho_trace"].as_array().unwrap().len(), 25);
    assert!(v["admm"]["iterations_to_995"].as_u64().unwrap() <= 20);
}

#[test]
fn lab_drum_table_and_errors() {
    let o = resex(&[
        "lab",
        "drum",
        "--hosts",
        "2",
        "--apps",
        "30",
        "--iterations",
        "5",
    ]);
    let out = stdout(&o);
    assert!(out.contains("to 99.5%") && out.contains("ADMM/DD"), "{out}");
    assert!(out.contains("rho adaptive"), "{out}");
    let o = resex(&["lab", "drum", "--apps", "10"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("at least k (20)"));
    let o = resex(&["lab", "drum", "--rho", "0"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--rho must be a positive number"));
}
