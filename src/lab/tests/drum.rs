//! The DRUM policy in the lab, on the shipped compare scenarios (4 s each): what each of its
//! levers does, as measured.

use resex_lab::compare::{run as compare, CompareConfig, CompareRow};
use resex_pricing::PolicyConfig;
use resex_scenario::Scenario;

const SCENARIOS: [&str; 6] = [
    "bursty",
    "five-victims",
    "lying",
    "pair",
    "three-victims",
    "two-aggressors",
];

fn rows(policies: &[&str]) -> Vec<CompareRow> {
    let root = env!("CARGO_MANIFEST_DIR");
    let scenarios: Vec<Scenario> = SCENARIOS
        .iter()
        .map(|n| {
            let p = format!("{root}/../../tools/scenarios/compare/{n}.toml");
            Scenario::load(std::path::Path::new(&p)).unwrap()
        })
        .collect();
    let policies: Vec<(String, PolicyConfig)> = policies
        .iter()
        .map(|p| {
            let text = std::fs::read_to_string(format!("{root}/../../policies/{p}.toml")).unwrap();
            ((*p).to_owned(), PolicyConfig::from_toml(&text).unwrap())
        })
        .collect();
    let cfg = CompareConfig::of_seconds(4.0);
    compare(&scenarios, &policies, &cfg, |_, _| {}).unwrap()
}

#[test]
fn drum_on_shares_keeps_victims_near_alone_and_aggressors_their_work() {
    let rows = rows(&["drum-rate", "drum"]);
    for r in rows.iter().filter(|r| r.policy == "drum-rate") {
        for v in &r.victims {
            let (mean, p99) = (v.mean_x.unwrap(), v.p99_x.unwrap());
            assert!(
                mean <= 1.25 && p99 <= 1.5,
                "{}: victim {} at {mean} / {p99} of alone",
                r.scenario,
                v.name
            );
        }
        let kept = r.aggressor_kept.unwrap();
        assert!(kept >= 0.95, "{}: kept {kept}", r.scenario);
        assert_eq!(r.aggressor_cap_min, 100.0, "{}: no cap", r.scenario);
    }
    // With z as caps too, the victims stay near alone but the aggressors are capped (a cap is
    // not work conserving): the CPU lever's trade-off, where the shares alone had none. The
    // guard keeps each cap at or above what holds the aggressor at its entitlement.
    for s in ["pair", "two-aggressors", "three-victims"] {
        let r = rows
            .iter()
            .find(|r| r.scenario == s && r.policy == "drum")
            .unwrap();
        let mean = r.victim_mean_x.unwrap();
        assert!(mean <= 1.25, "{s}: victim {mean}");
        assert!(r.aggressor_cap_min < 100.0, "{s}: {}", r.aggressor_cap_min);
        let kept = r.aggressor_kept.unwrap();
        if s == "two-aggressors" {
            // Each aggressor sends barely above its entitlement (a third of the link): the
            // guard leaves the caps little room.
            assert!(kept >= 0.9, "{s}: kept {kept}");
        } else {
            assert!(kept < 0.9, "{s}: kept {kept}");
        }
    }
    // The scenarios hurt without a policy.
    let none = rows
        .iter()
        .find(|r| r.scenario == "pair" && r.policy == "none")
        .unwrap();
    assert!(none.victim_mean_x.unwrap() > 1.3);
}
