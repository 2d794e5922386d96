//! `resex fleet demo --json` (issue 22, item 5): a local etcd, two embedded hosts with guests on
//! a shared uplink, the coordinator's host killed, etcd killed. Needs `--features fleet`;
//! without etcd installed it says so and passes, unless RESEX_REQUIRE_SYSTEM_DEPS=1 (CI).

#![cfg(feature = "fleet")]

use std::process::Command;

#[test]
fn the_fleet_demo_allocates_fails_over_and_leaves_no_stale_throttle() {
    if !resex_fleet::local::installed_or_skip() {
        return;
    }
    let out = Command::new(env!("CARGO_BIN_EXE_resex"))
        .args(["fleet", "demo", "--hosts", "2", "--json"])
        .env("RUST_LOG", "error")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    eprintln!("{v}");
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
