//! The layering, as a rule checked from cargo's own dependency graph: `cargo tree -p CRATE -e
//! normal` resolves each crate on its own, with the features it asks for (resolver 2), which
//! is what its binary links. Guest crates never link host crates; resexd links no lab crate
//! and none of DRUM's experiments; `resex top` links no solver; the scenario format links
//! nothing but `resex-common`; the host core parses no guest bytes itself (no `resex-mlx5`);
//! the demo's library (`resex-demo`) draws no terminal: the dashboard is the binary's.

use std::collections::BTreeMap;
use std::process::Command;

/// The resex crates `krate` links (normal dependencies, itself included), each with the
/// features it is built with.
fn links(krate: &str) -> BTreeMap<String, String> {
    tree(krate, None)
}

/// The resex crates `krate` depends on itself (and itself).
fn direct(krate: &str) -> BTreeMap<String, String> {
    tree(krate, Some("1"))
}

fn tree(krate: &str, depth: Option<&str>) -> BTreeMap<String, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["tree", "-p", krate, "-e", "normal", "--prefix", "none"])
        .args(["--format", "{p}|{f}"])
        .args(depth.map(|d| ["--depth", d]).iter().flatten())
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree -p {krate}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut m = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let (pkg, features) = line.split_once('|').unwrap_or((line, ""));
        let name = pkg.split_whitespace().next().unwrap_or("");
        // Ours, and the third-party crates a rule names (etcd's client: the fleet's feature).
        if name.starts_with("resex") || name == "benchex" || name == "etcd-client" {
            let f = features.trim_end_matches(" (*)").to_owned();
            let e = m.entry(name.to_owned()).or_insert_with(String::new);
            if e.is_empty() {
                *e = f;
            }
        }
    }
    m
}

fn assert_links_none(krate: &str, forbidden: &[&str], why: &str) {
    let l = links(krate);
    assert!(l.contains_key(krate), "{krate} not in its own tree: {l:?}");
    let bad: Vec<&str> = forbidden
        .iter()
        .copied()
        .filter(|f| l.contains_key(*f))
        .collect();
    assert!(bad.is_empty(), "{krate} links {bad:?}: {why}");
}

/// Crates that run on the host (or only in the lab), never in a guest.
const HOST: [&str; 15] = [
    "resex-core",
    "resex-daemon",
    "resex-ibmon",
    "resex-pricing",
    "resex-backend",
    "resex-softhca",
    "resex-embedded",
    "resex-lab",
    "resex-fabric",
    "resex-mlcompat",
    "resex-fleet",
    "resex-drum",
    "resex-top",
    "resex-api",
    "resex-demo",
];

/// The lab's crates: experiments, virtual time, scenarios, the demo. (`resex-mlcompat`, the
/// period detector and the circle, is not one: resexd detects periods live.)
const LAB: [&str; 5] = [
    "resex-lab",
    "resex-fabric",
    "resex-scenario",
    "resex-embedded",
    "resex-demo",
];

#[test]
fn guest_crates_link_no_host_crate() {
    for guest in ["resex-agent", "resex-shim", "benchex", "resex-preload"] {
        assert_links_none(guest, &HOST, "a guest binary carries no host code");
    }
}

#[test]
fn resexd_links_no_lab_crate_and_none_of_drums_experiments() {
    assert_links_none("resex-daemon", &LAB, "the daemon is not the lab");
    let l = links("resex-daemon");
    let drum = l.get("resex-drum").map_or("", String::as_str);
    assert!(
        !drum.split(',').any(|f| f == "lab"),
        "resexd links DRUM with its `lab` feature (the paper's experiments): {drum:?}"
    );
}

#[test]
fn the_fleet_is_a_feature_of_resexd() {
    assert_links_none(
        "resex-daemon",
        &["resex-fleet", "etcd-client"],
        "resexd joins a fleet only when built with `--features fleet`",
    );
}

#[test]
fn top_links_no_solver_and_no_host_core() {
    assert_links_none(
        "resex-top",
        &["resex-drum", "resex-core", "resex-pricing", "resex-ibmon"],
        "the dashboard reads the API and the fleet's records",
    );
}

#[test]
fn the_demo_library_links_no_dashboard() {
    assert_links_none(
        "resex-demo",
        &["resex-top", "resex-cli"],
        "the demo's library runs the demo; `resex` shows it",
    );
}

#[test]
fn the_scenario_format_links_only_common() {
    let l = links("resex-scenario");
    let ours: Vec<&String> = l.keys().filter(|k| *k != "resex-scenario").collect();
    assert_eq!(ours, ["resex-common"], "a format crate");
}

#[test]
fn the_host_core_parses_no_guest_bytes_itself() {
    let d = direct("resex-core");
    assert!(d.contains_key("resex-ibmon"), "{d:?}");
    assert!(
        !d.contains_key("resex-mlx5"),
        "resex-core depends on resex-mlx5 itself: guest rings are ibmon's"
    );
    assert_links_none(
        "resex-core",
        &["resex-softhca", "resex-shim"],
        "the core reads guest memory, it runs no device",
    );
}

#[test]
fn a_forbidden_link_is_seen() {
    // The rules above can fail: the daemon does link the host core.
    let r = std::panic::catch_unwind(|| {
        assert_links_none("resex-daemon", &["resex-core"], "test");
    });
    assert!(r.is_err());
}
