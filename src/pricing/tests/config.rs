//! The shipped policy files, and policy files that must be refused with a useful message.

use resex_pricing::{ConfigError, PolicyConfig, PolicyKind};

fn shipped(name: &str) -> String {
    let path = format!("{}/../../policies/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn shipped_files_are_the_documented_defaults() {
    for kind in [
        PolicyKind::Freemarket,
        PolicyKind::Ioshares,
        PolicyKind::Governor,
        PolicyKind::Drum,
    ] {
        let name = match kind {
            PolicyKind::Freemarket => "freemarket.toml",
            PolicyKind::Ioshares => "ioshares.toml",
            PolicyKind::Governor => "governor.toml",
            PolicyKind::Drum => "drum.toml",
            PolicyKind::Progress => unreachable!("its own test: it acts every interval"),
            PolicyKind::Justitia => unreachable!("a baseline, not shipped: its own test"),
        };
        let cfg = PolicyConfig::from_toml(&shipped(name)).unwrap();
        assert_eq!(cfg, PolicyConfig::defaults(kind), "{name}");
        assert_eq!(cfg.link_mtus_per_epoch(), 1_048_576.0);
        assert_eq!(cfg.intervals_per_epoch(), 1000);
        assert_eq!(cfg.intervals_per_actuation(), 10);
    }
}

#[test]
fn every_key_is_explained_in_the_policies_readme() {
    let readme = shipped("README.md");
    for file in [
        "freemarket.toml",
        "ioshares.toml",
        "governor.toml",
        "ioshares-paper.toml",
        "governor-cpu.toml",
        "freemarket-rate.toml",
        "ioshares-rate.toml",
        "drum.toml",
        "drum-rate.toml",
        "progress.toml",
    ] {
        for line in shipped(file).lines() {
            let line = line.trim();
            if line.starts_with('#') || line.starts_with('[') || line.is_empty() {
                continue;
            }
            let key = line.split('=').next().unwrap().trim();
            assert!(readme.contains(&format!("`{key}`")), "README lacks `{key}`");
        }
    }
}

#[test]
fn the_variants_differ_from_the_defaults_in_one_key() {
    let paper = PolicyConfig::from_toml(&shipped("ioshares-paper.toml")).unwrap();
    let mut want = PolicyConfig::defaults(PolicyKind::Ioshares);
    want.ioshares.as_mut().unwrap().mode = resex_pricing::IoSharesMode::Paper;
    assert_eq!(paper, want);
    let cpu = PolicyConfig::from_toml(&shipped("governor-cpu.toml")).unwrap();
    let mut want = PolicyConfig::defaults(PolicyKind::Governor);
    want.lever = Some(resex_pricing::Lever::Cpu);
    assert_eq!(cpu, want);
    for (file, kind) in [
        ("freemarket-rate.toml", PolicyKind::Freemarket),
        ("ioshares-rate.toml", PolicyKind::Ioshares),
        ("drum-rate.toml", PolicyKind::Drum),
    ] {
        let cfg = PolicyConfig::from_toml(&shipped(file)).unwrap();
        let mut want = PolicyConfig::defaults(kind);
        want.lever = Some(resex_pricing::Lever::Rate);
        assert_eq!(cfg, want, "{file}");
    }
    assert_eq!(
        PolicyConfig::defaults(PolicyKind::Governor).lever(),
        resex_pricing::Lever::Both
    );
    assert_eq!(
        PolicyConfig::from_toml("policy = \"freemarket\"\nlever = \"rate\"\n")
            .unwrap()
            .lever(),
        resex_pricing::Lever::Rate
    );
    assert!(PolicyConfig::from_toml("policy = \"freemarket\"\nlever = \"nic\"\n").is_err());
}

#[test]
fn minimal_file_takes_the_defaults() {
    let cfg = PolicyConfig::from_toml("policy = \"ioshares\"\n").unwrap();
    assert_eq!(cfg, PolicyConfig::defaults(PolicyKind::Ioshares));
}

#[test]
fn unknown_keys_are_named() {
    let err = PolicyConfig::from_toml("policy = \"freemarket\"\n[caps]\nfloor = 5\n").unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("unknown field `floor`"), "{msg}");
    assert!(
        msg.contains("floor_pct"),
        "the message lists the valid keys: {msg}"
    );
    let err = PolicyConfig::from_toml("policy = \"auction\"\n").unwrap_err();
    assert!(err.to_string().contains("auction"), "{err}");
}

#[test]
fn out_of_range_values_name_key_and_range() {
    let cases = [
        ("[caps]\nfloor_pct = 0.5", "caps.floor_pct", "1.0..=100.0"),
        ("[ledger]\npath_mtu = 1000", "ledger.path_mtu", "4096"),
        (
            "[balance_rule]\ncut_factor = 1.5",
            "balance_rule.cut_factor",
            "0.0 < x <= 1.0",
        ),
        (
            "[ioshares]\nsla_threshold = 0",
            "ioshares.sla_threshold",
            "0.0 < x",
        ),
        ("[ioshares]\ndecay = -0.1", "ioshares.decay", "0.0..=1.0"),
        (
            "[ioshares]\nmax_rate = 0.5",
            "ioshares.max_rate",
            "1.0..=1000.0",
        ),
    ];
    for (body, key, range) in cases {
        let text = format!("policy = \"ioshares\"\n{body}\n");
        let err = PolicyConfig::from_toml(&text).unwrap_err();
        assert!(
            matches!(err, ConfigError::OutOfRange { .. }),
            "{body}: {err}"
        );
        let msg = err.to_string();
        assert!(msg.contains(key) && msg.contains(range), "{body}: {msg}");
    }
}

#[test]
fn inconsistent_files_are_refused() {
    let err =
        PolicyConfig::from_toml("policy = \"freemarket\"\n[ioshares]\ndecay = 0.5\n").unwrap_err();
    assert_eq!(
        err,
        ConfigError::SectionWithoutPolicy {
            section: "ioshares",
            article: "an"
        }
    );
    assert_eq!(
        err.to_string(),
        "an `[ioshares]` section needs `policy = \"ioshares\"`"
    );
    let err = PolicyConfig::from_toml("policy = \"freemarket\"\n[caps]\nactuation_period_ms = 7\n")
        .unwrap_err();
    assert!(
        matches!(err, ConfigError::ActuationPeriod { period: 7, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("actuation_period_ms"), "{err}");
    let err = PolicyConfig::from_toml(
        "policy = \"freemarket\"\n[ledger]\ninterval_ms = 10\nepoch_ms = 1005\n",
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            ConfigError::NotAMultiple {
                key: "ledger.epoch_ms",
                value: 1005,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn governor_sections_and_ranges_are_checked() {
    let bad = |text: &str| PolicyConfig::from_toml(text).unwrap_err().to_string();
    let e = bad("policy = \"ioshares\"\n[governor]\nkp = 1.0\n");
    assert!(e.contains("`[governor]` section needs"), "{e}");
    let e = bad("policy = \"governor\"\n[governor]\nki = 0.0\n");
    assert!(
        e.contains("governor.ki") && e.contains("0.0 < x <= 100.0"),
        "{e}"
    );
    let e = bad("policy = \"governor\"\n[governor]\nsetpoint = 0.5\n");
    assert!(
        e.contains("must not exceed `governor.sla_threshold`"),
        "{e}"
    );
    let e = bad("policy = \"governor\"\n[governor]\ncongested_share = 2.0\n");
    assert!(e.contains("governor.congested_share"), "{e}");
}

#[test]
fn the_progress_file_is_the_defaults_acting_every_interval() {
    let cfg = PolicyConfig::from_toml(&shipped("progress.toml")).unwrap();
    let mut want = PolicyConfig::defaults(PolicyKind::Progress);
    want.caps.actuation_period_ms = 1;
    assert_eq!(cfg, want);
    assert_eq!(cfg.lever(), resex_pricing::Lever::Rate);
    let bad = shipped("progress.toml").replace("gain = 10.0", "gain = -1.0");
    let e = PolicyConfig::from_toml(&bad).unwrap_err().to_string();
    assert!(e.contains("progress.gain"), "{e}");
    let stray = shipped("freemarket.toml") + "\n[progress]\ngain = 2.0\n";
    assert!(PolicyConfig::from_toml(&stray).is_err());
}

#[test]
fn only_a_baseline_is_flagged_as_protecting_no_tenant() {
    let dir = format!("{}/../../policies", env!("CARGO_MANIFEST_DIR"));
    let mut files = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_some_and(|x| x == "toml") {
            let cfg = PolicyConfig::from_toml(&std::fs::read_to_string(&path).unwrap()).unwrap();
            assert_eq!(cfg.unguarded(), None, "{}", path.display());
            files += 1;
        }
    }
    assert!(files >= 6, "{files} policy files in {dir}");
    let path = format!(
        "{}/../../tools/baselines/justitia.toml",
        env!("CARGO_MANIFEST_DIR")
    );
    let cfg = PolicyConfig::from_toml(&std::fs::read_to_string(path).unwrap()).unwrap();
    let line = cfg
        .unguarded()
        .expect("the Justitia baseline guards nothing");
    assert!(
        line.contains("justitia") && line.contains("no entitlement guard"),
        "{line}"
    );
}
