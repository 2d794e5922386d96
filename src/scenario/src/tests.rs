//! Parsing, validation and defaults of scenario files.

use super::*;

const PAIR: &str = r#"
name = "pair"
policy = "ioshares"
[[guest]]
name = "reporting"
[guest.benchex]
buffer = "64KiB"
[[guest]]
name = "interfering"
ram = "96MiB"
[guest.benchex]
buffer = "2MiB"
rate = 0
"#;

/// Each guest check, in the order they are made: one bad setting, one problem named.
#[test]
fn every_guest_check_names_its_problem() {
    let cases: &[(&str, &str)] = &[
        ("name = \"Bad Name\"", "name must be 1-32"),
        ("vcpus = 0", "vcpus = 0 must be 1..=64"),
        ("cap = 250.0", "cap = 250 must be in (0, 100]"),
        (
            "ram = \"1MiB\"",
            "ram = 1048576 bytes: this workload needs at least",
        ),
        ("start_s = -1.0", "start_s = -1 must be >= 0"),
        (
            "report_scale = 0.0",
            "report_scale = 0 must be in (0, 1000]",
        ),
        (
            "report_scale_from_s = -2.0",
            "report_scale_from_s = -2 must be >= 0",
        ),
        ("weight = 0.0", "weight = 0 must be > 0"),
        ("cpu_floor = 0.0", "cpu_floor = 0 must be in (0, 100]"),
        (
            "tx_share = \"2Gbit\"\ntx_max = \"1Gbit\"",
            "tx_share = 2000000000 bit/s is above tx_max",
        ),
        (
            "turns = { at_s = -1.0, buffer = \"64KiB\", rate = 10.0 }",
            "turns.at_s = -1 must be >= 0",
        ),
        (
            "turns = { at_s = 1.0, buffer = \"32B\", rate = 10.0 }",
            "turns.buffer = 32 must be 64 B..64 MiB",
        ),
    ];
    for (setting, problem) in cases {
        let text = PAIR.replacen(
            "name = \"reporting\"",
            &format!("name = \"reporting\"\n{setting}"),
            1,
        );
        let text = if setting.starts_with("name") {
            text.replacen("name = \"reporting\"\n", "", 1)
        } else {
            text
        };
        let err = Scenario::from_toml(&text).map(|s| s.validate());
        let msg = match err {
            Ok(Err(e)) | Err(e) => e.to_string(),
            Ok(Ok(())) => String::new(),
        };
        assert!(msg.contains(problem), "{setting}: got `{msg}`");
    }
    let twice = PAIR.replace("name = \"interfering\"", "name = \"reporting\"");
    let e = Scenario::from_toml(&twice)
        .and_then(|s| s.validate())
        .unwrap_err();
    assert!(
        e.to_string().contains("guest `reporting`: appears twice"),
        "{e}"
    );
}

#[test]
fn the_problem_is_typed() {
    let twice = PAIR.replace("name = \"interfering\"", "name = \"reporting\"");
    let e = Scenario::from_toml(&twice).unwrap_err();
    assert!(
        matches!(
            &e,
            ScenarioError::Invalid {
                problem: Problem::Guest {
                    problem: GuestProblem::Twice,
                    ..
                },
                ..
            }
        ),
        "{e:?}"
    );
    let e =
        Scenario::from_toml(&PAIR.replace("name = \"pair\"", "name = \"pair\"\nduration_s = 0.0"))
            .unwrap_err();
    assert_eq!(
        e.to_string(),
        "scenario `pair`: duration_s = 0 must be in (0, 86400]"
    );
    let e = Scenario::from_toml(&PAIR.replace("96MiB", "1MiB")).unwrap_err();
    assert_eq!(
        e.to_string(),
        "scenario `pair`: guest `interfering`: ram = 1048576 bytes: this workload needs at \
             least 16793600 (and at most 16 GiB)"
    );
}

#[test]
fn parses_with_defaults() {
    let s = Scenario::from_toml(PAIR).unwrap();
    assert_eq!(s.guests.len(), 2);
    assert_eq!(s.guests[0].ram, Size(64 << 20));
    assert_eq!(s.guests[1].benchex.buffer, Size(2 << 20));
    assert_eq!(s.guests[1].benchex.rate, 0.0);
    assert_eq!(s.link.preset, "testbed");
    assert_eq!(
        s.policy_path(Path::new("policies")),
        Some(PathBuf::from("policies/ioshares.toml"))
    );
}

#[test]
fn refuses_unknown_keys_bad_names_and_impossible_sizes() {
    let e = Scenario::from_toml(&PAIR.replace("policy =", "polcy =")).unwrap_err();
    assert!(e.to_string().contains("polcy"), "{e}");
    let e = Scenario::from_toml(&PAIR.replace("\"interfering\"", "\"reporting\"")).unwrap_err();
    assert!(e.to_string().contains("appears twice"), "{e}");
    let e = Scenario::from_toml(&PAIR.replace("96MiB", "1MiB")).unwrap_err();
    assert!(e.to_string().contains("needs at least"), "{e}");
    let e = Scenario::from_toml(&PAIR.replace("\"pair\"", "\"a b\"")).unwrap_err();
    assert!(e.to_string().contains("name must be"), "{e}");
}

#[test]
fn transmit_limits_are_rates_with_units() {
    let with = PAIR.replace(
        "name = \"interfering\"",
        "name = \"interfering\"\ntx_share = \"500Mbit\"\ntx_max = 2000000000",
    );
    let s = Scenario::from_toml(&with).unwrap();
    let t = s.guests[1].tx();
    assert_eq!(
        (t.share_bps, t.max_bps),
        (Some(500_000_000), Some(2_000_000_000))
    );
    assert!(s.guests[0].tx().is_none());
    let e = Scenario::from_toml(&with.replace("500Mbit", "3Gbit")).unwrap_err();
    assert!(e.to_string().contains("above tx_max"), "{e}");
    let e = Scenario::from_toml(&with.replace("500Mbit", "fast")).unwrap_err();
    assert!(e.to_string().contains("not a rate"), "{e}");
}

/// PAIR with `settings` in the first guest's `[guest.benchex]`.
fn with_benchex(settings: &str) -> String {
    PAIR.replacen(
        "buffer = \"64KiB\"",
        &format!("buffer = \"64KiB\"\n{settings}"),
        1,
    )
}

#[test]
fn a_periodic_job_parses_and_plain_workloads_serialize_as_before() {
    let s = Scenario::from_toml(&with_benchex("rate = 0\nthink_ms = 20.0\nburst = 4")).unwrap();
    let w = &s.guests[0].benchex;
    assert_eq!((w.think_ms, w.burst), (20.0, 4));
    assert!(w.periodic());
    let text = toml::to_string(w).unwrap();
    assert!(
        text.contains("think_ms = 20.0") && text.contains("burst = 4"),
        "{text}"
    );
    let plain = Scenario::from_toml(PAIR).unwrap();
    let w = &plain.guests[0].benchex;
    assert_eq!((w.think_ms, w.burst), (0.0, 1));
    assert!(!w.periodic());
    let text = toml::to_string(w).unwrap();
    assert!(
        !text.contains("think_ms") && !text.contains("burst"),
        "{text}"
    );
}

#[test]
fn a_periodic_job_that_cannot_work_is_refused() {
    let cases: &[(&str, GuestProblem)] = &[
        ("rate = 0\nthink_ms = -1.0", GuestProblem::Think(-1.0)),
        (
            "rate = 0\nthink_ms = 60001.0",
            GuestProblem::Think(60_001.0),
        ),
        (
            "rate = 0\nthink_ms = 5.0\nburst = 0",
            GuestProblem::Burst(0),
        ),
        (
            "rate = 0\nthink_ms = 5.0\nburst = 4097",
            GuestProblem::Burst(4097),
        ),
        ("think_ms = 5.0", GuestProblem::ThinkOpenLoop(1000.0)),
        ("rate = 0\nburst = 2", GuestProblem::BurstWithoutThink(2)),
        ("rate = 0\nthink_ms = 1e-9", GuestProblem::Think(1e-9)),
    ];
    for (settings, want) in cases {
        match Scenario::from_toml(&with_benchex(settings)).unwrap_err() {
            ScenarioError::Invalid {
                problem: Problem::Guest { guest, problem },
                ..
            } => assert_eq!(
                (guest.as_str(), &problem),
                ("reporting", want),
                "{settings}"
            ),
            e => panic!("{settings}: {e:?}"),
        }
    }
    let nan = Scenario::from_toml(&with_benchex("rate = 0\nthink_ms = nan")).unwrap_err();
    assert!(
        nan.to_string()
            .contains("benchex.think_ms = NaN must be 0 or in [0.001, 60000]"),
        "{nan}"
    );
    let e = Scenario::from_toml(&with_benchex("think_ms = 5.0")).unwrap_err();
    assert_eq!(
        e.to_string(),
        "scenario `pair`: guest `reporting`: benchex.think_ms (a periodic job) runs closed \
             loop only: rate must be 0, not 1000"
    );
}

#[test]
fn the_shipped_scenarios_load() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/scenarios");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "toml") {
            Scenario::load(&p).unwrap_or_else(|e| panic!("{e}"));
            n += 1;
        }
    }
    assert!(n >= 2, "scenarios in {}", dir.display());
}

#[test]
fn a_workload_offers_its_rate_from_every_client() {
    let mut w = Scenario::from_toml(PAIR).unwrap().guests[0].benchex.clone();
    w.rate = 250.0;
    w.clients = 4;
    assert_eq!(w.orders_per_s(), 1000.0);
    w.rate = 0.0;
    assert_eq!(w.orders_per_s(), 0.0, "a closed loop offers no rate");
}
