//! The anchor issue 29 names, Justitia (NSDI '22), beside the governor on the same hosts
//! (`tools/baselines/justitia.toml`, `src/pricing/src/justitia.rs`): Justitia paces the
//! elephants by AIMD on the others' latency, down to their share by count. On the
//! three-victims host that helps the victims a little and costs the aggressor most of its
//! work; on the pair (one 64 KiB victim, one 2 MiB closed loop) the floor is half the link,
//! where the port already split it, so the victim gains nothing and the aggressor still loses
//! two fifths. The governor keeps every victim within 1.10x of its latency alone and the
//! aggressor at 0.9 or more of its work on both.

use resex_lab::compare::{run as compare, CompareConfig, CompareRow};
use resex_pricing::PolicyConfig;
use resex_scenario::Scenario;

fn file(rel: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn rows(scenario: &str) -> Vec<CompareRow> {
    let s =
        Scenario::from_toml(&file(&format!("tools/scenarios/compare/{scenario}.toml"))).unwrap();
    let policies = [
        ("justitia", "tools/baselines/justitia.toml"),
        ("governor", "policies/governor.toml"),
    ]
    .map(|(n, f)| (n.to_owned(), PolicyConfig::from_toml(&file(f)).unwrap()));
    compare(&[s], &policies, &CompareConfig::of_seconds(4.0), |_, _| {}).unwrap()
}

fn get<'a>(rows: &'a [CompareRow], policy: &str) -> &'a CompareRow {
    rows.iter().find(|r| r.policy == policy).unwrap()
}

#[test]
fn justitia_trades_the_aggressors_work_for_part_of_the_protection_the_governor_gives() {
    let r = rows("three-victims");
    let (none, j, g) = (get(&r, "none"), get(&r, "justitia"), get(&r, "governor"));
    let worst = |r: &CompareRow| r.victim_mean_x.unwrap();
    let kept = |r: &CompareRow| r.aggressor_kept.unwrap();
    assert!(worst(none) > 1.5, "{}", worst(none));
    assert!(worst(j) < worst(none) - 0.2, "Justitia helps: {}", worst(j));
    assert!(worst(j) > 1.10, "but not to the goal: {}", worst(j));
    assert!(kept(j) < 0.5, "at the aggressor's cost: {}", kept(j));
    assert!(
        worst(g) <= 1.10 && kept(g) >= 0.9,
        "{} {}",
        worst(g),
        kept(g)
    );
}

#[test]
fn justitias_floor_leaves_a_lone_victim_where_the_port_had_it() {
    let r = rows("pair");
    let (none, j, g) = (get(&r, "none"), get(&r, "justitia"), get(&r, "governor"));
    let worst = |r: &CompareRow| r.victim_mean_x.unwrap();
    assert!(
        worst(j) >= worst(none) - 0.05,
        "{} {}",
        worst(j),
        worst(none)
    );
    assert!(j.aggressor_kept.unwrap() < 0.7, "{:?}", j.aggressor_kept);
    assert!(worst(g) <= 1.10, "{}", worst(g));
}
