//! `resex fleet demo --json` (issue 22, item 5): a local etcd, two embedded hosts with guests on
//! a shared uplink, the coordinator's host killed, etcd killed. Needs `--features fleet`;
//! without etcd installed it says so and passes, unless RESEX_REQUIRE_SYSTEM_DEPS=1 (CI).

#![cfg(feature = "fleet")]

use std::process::Command;

/// Runs `resex fleet demo ARGS --json`; its report.
fn demo(args: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_resex"))
        .args(["fleet", "demo"])
        .args(args)
        .arg("--json")
        .env("RUST_LOG", "error")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    eprintln!("{v}");
    v
}

#[test]
fn the_fleet_demo_allocates_fails_over_and_leaves_no_stale_throttle() {
    if !resex_fleet::local::installed_or_skip() {
        return;
    }
    let v = demo(&["--hosts", "2"]);
    assert_eq!(v["hosts"], 2);
    assert_eq!(v["stale_throttles_after_fallback"], 0, "{v}");
    assert!(v["allocations"].as_u64().unwrap() >= 2, "{v}");
    assert!(v["rounds"].as_u64().unwrap() >= 1, "{v}");
    assert_ne!(v["killed"], v["new_leader"]);
    let ttl = v["ttl_s"].as_f64().unwrap();
    // The bounds: a new leader within two TTLs, the fallback within one.
    assert!(v["leader_failover_s"].as_f64().unwrap() <= 2.0 * ttl, "{v}");
    assert!(v["etcd_loss_fallback_s"].as_f64().unwrap() <= ttl, "{v}");
    // The allocation's ceilings were in force and fit the uplink (what the guests then sent
    // is in the output: a shared 2-CPU machine makes it noisy).
    let (c, up) = (
        v["ceilings_mbps"].as_f64().unwrap(),
        v["uplink_mbps"].as_f64().unwrap(),
    );
    assert!(c > 0.0 && c <= up * 1.001, "{v}");
}

/// `resex fleet demo --jobs --json` (issue 33 item 4): four embedded hosts, two on each of two
/// shared uplinks of softhca's, periodic BenchEx jobs started together, a real etcd. Each job's
/// period as resexd detected it live is within 5% of its iteration time as its monitor counted
/// it over the fair window (within 2% in 5 runs of 7, docs/fleet.md), the coordinator
/// published a score for both uplinks, the compatible pair runs faster under the adaptive
/// allocation than fair (on its link's grid) and the other pair no more than 5% slower.
#[test]
fn the_jobs_demo_detects_every_period_tells_the_uplinks_apart_and_the_compatible_pair_runs_faster()
{
    if !resex_fleet::local::installed_or_skip() {
        return;
    }
    // The default window (12 s) holds the detector's history (8.2 s) and its verdict's age
    // (2 s at most): the two periods compared are of the same stretch.
    let v = demo(&["--jobs", "--settle", "4"]);
    let jobs = v["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 4, "{v}");
    for j in jobs {
        let truth = j["true_period_ms"].as_f64().unwrap();
        let found = j["detected_period_ms"].as_f64();
        assert!(
            found.is_some_and(|p| (p - truth).abs() <= 0.05 * truth),
            "{}: detected {found:?} against {truth} ms",
            j["name"]
        );
        assert!(j["adaptive_iter_ms"].as_f64().unwrap() > 0.0, "{j}");
        // On its link's grid the compatible pair takes the uplink in turns: faster than fair
        // (1.19-1.29x measured with the default settle, 1.16-1.19x with this test's 4 s; the
        // issue's 1.15x is for a settled run), and the other pair no more than 5% slower.
        let speedup = j["speedup"].as_f64().unwrap();
        if j["link"] == "uplink-a" {
            assert!(speedup >= 1.05, "the compatible pair: {j}");
        } else {
            assert!(speedup >= 0.95, "the incompatible pair: {j}");
        }
    }
    let links = v["links"].as_array().unwrap();
    let names: Vec<&str> = links.iter().map(|l| l["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["uplink-a", "uplink-b"], "{v}");
    for l in links {
        let s = l["score"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&s) && l["jobs"] == 2, "{l}");
    }
    // Scored by each job's period alone: pair a fits the link in turns (1.00 measured), pair
    // b does not (0.63), whatever their stretched periods while they collide.
    let score = |k: usize| links[k]["score"].as_f64().unwrap();
    assert!(score(0) >= 0.9, "the compatible pair: {v}");
    assert!(score(1) < 0.8, "the incompatible pair: {v}");
    assert_eq!(v["adaptive"], true, "{v}");
}
