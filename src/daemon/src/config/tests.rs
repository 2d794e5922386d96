//! The configuration's tests.

use super::*;

#[test]
fn defaults_and_errors() {
    let c = Config::default();
    assert_eq!(c.backend, "local");
    assert_eq!(c.scan_budget, 16384);
    let e = Config::from_toml("backend = \"vmware\"")
        .unwrap_err()
        .to_string();
    assert!(e.contains("vmware"), "{e}");
    let e = Config::from_toml("polcy = \"x\"").unwrap_err().to_string();
    assert!(e.contains("polcy"), "{e}");
    let example = include_str!("../../../../tools/resexd.toml");
    Config::from_toml(example).unwrap();
    assert_eq!(c.link(), resex_core::HostLink::default());
    let c = Config::from_toml("[link]\ngbps = 100\n").unwrap();
    assert_eq!(c.link().bits_per_sec, 100_000_000_000);
    assert_eq!(c.link().header_bytes, 58);
    assert!(matches!(
        Config::from_toml("[link]\ngbps = 0\n"),
        Err(ConfigError::LinkRate { gbps }) if gbps == 0.0
    ));
    let e = Config::from_toml("backend = \"vmware\"").unwrap_err();
    assert!(
        matches!(&e, ConfigError::UnknownBackend { name } if name == "vmware"),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        "backend `vmware` is unknown (local, kvm, xen)"
    );
    let e = Config::from_toml("snapshot_ms = 0\n").unwrap_err();
    assert!(
        matches!(
            e,
            ConfigError::Zero {
                setting: "snapshot_ms"
            }
        ),
        "{e:?}"
    );
    assert!(Config::from_toml("[link]\ngbs = 1\n").is_err());
}

#[cfg(not(feature = "fleet"))]
#[test]
fn a_fleet_section_is_refused_without_the_fleet() {
    let e = Config::from_toml("[fleet]\nendpoints = [\"http://127.0.0.1:2379\"]\n").unwrap_err();
    assert!(matches!(e, ConfigError::NoFleet), "{e}");
    assert!(e.to_string().contains("--features fleet"), "{e}");
    assert!(Config::default().fleet.is_none());
}

#[cfg(feature = "fleet")]
#[test]
fn the_fleet_section_is_checked() {
    let c = Config::from_toml("[fleet]\nendpoints = [\"http://127.0.0.1:2379\"]\nhost = \"n1\"\n")
        .unwrap();
    let f = c.fleet.unwrap();
    assert_eq!((f.ttl_s, f.publish_ms), (5, 1000));
    let e = Config::from_toml("[fleet]\nendpoints = [\"x\"]\nhost = \"n1\"\nttl_s = 0\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("[fleet]") && e.contains("ttl_s"), "{e}");
    assert!(matches!(
        Config::from_toml("[fleet]\nendpoints = [\"x\"]\nhost = \"n1\"\nttl_s = 0\n"),
        Err(ConfigError::Fleet(resex_fleet::FleetError::Setting(
            resex_fleet::SettingError::Ttl { ttl_s: 0 }
        )))
    ));
    assert!(Config::from_toml("[fleet]\nendpoint = [\"x\"]\n").is_err());
    assert!(Config::default().fleet.is_none());
}

#[test]
fn the_vms_section_grants_entitlements_over_the_backend() {
    let c = Config::from_toml(
        "[vms.web-1]\nentitlement = \"2Gbit\"\ncpu_floor = 20\n[vms.db]\nentitlement = 500000000\n",
    )
    .unwrap();
    assert_eq!(c.vms["web-1"].entitlement, Some(2_000_000_000));
    assert_eq!(c.vms["web-1"].cpu_floor, Some(20.0));
    assert_eq!(c.vms["db"].entitlement, Some(500_000_000));
    let mut d = resex_backend::DomainInfo {
        entitled_bps: Some(1),
        cpu_floor_pct: Some(5.0),
        key: "db".into(),
        id: 1,
        name: "db".into(),
        vcpus: 1,
        ram_size: 1 << 20,
        weight: 1.0,
        sla_threshold: None,
    };
    c.vms["db"].apply(&mut d);
    assert_eq!(d.entitled_bps, Some(500_000_000), "the config wins");
    assert_eq!(d.cpu_floor_pct, Some(5.0), "what it does not say stays");
}

#[test]
fn the_rates_section_names_vfs_by_vm() {
    let c = Config::default();
    assert_eq!(c.rates.vf_lever, VfLeverChoice::Auto, "auto by default");
    assert!(c.vfs_by_name().is_empty());
    let c = Config::from_toml(
        r#"
[rates]
vf_lever = "legacy"
[rates.vfs]
web-1 = "03:00.2"
db = { kind = "function", devlink = "netdevsim/netdevsim1", vf = 3 }
"#,
    )
    .unwrap();
    assert_eq!(c.rates.vf_lever.mechanism(), Some(Mechanism::Legacy));
    let m = c.vfs_by_name();
    assert_eq!(
        m["web-1"],
        Vf::Pci {
            addr: "0000:03:00.2".into()
        }
    );
    assert_eq!(
        m["db"],
        Vf::Function {
            devlink: "netdevsim/netdevsim1".into(),
            netdev: None,
            vf: 3
        }
    );
    let none = Config::from_toml("[rates]\nvf_lever = \"none\"\n").unwrap();
    assert_eq!(none.rates.vf_lever.mechanism(), None);
}

#[test]
fn invalid_rates_are_refused_with_the_reason() {
    for (text, want) in [
        ("[rates]\nvf_lever = \"tc\"\n", "unknown variant `tc`"),
        ("[vms.a]\nentitlement = \"fast\"\n", "fast"),
        ("[vms.a]\nentitlement = 0\n", "above 0"),
        ("[vms.a]\ncpu_floor = -5\n", "cpu_floor"),
        ("[vms.a]\nshare = 5\n", "share"),
        ("[rates]\nvf_levr = \"auto\"\n", "vf_levr"),
        ("[rates.vfs]\na = \"0000:03:00.9\"\n", "not a PCI address"),
        ("[rates.vfs]\na = \"../../etc\"\n", "not a PCI address"),
        ("[rates.vfs]\na = 7\n", "a PCI address or a table"),
        (
            "[rates.vfs]\na = { kind = \"function\", devlink = \"netdevsim1\", vf = 0 }\n",
            "not a devlink instance",
        ),
        (
            "[rates.vfs]\na = { kind = \"function\", devlink = \"a/b\", vf = -1 }\n",
            "vf",
        ),
        (
            "[rates.vfs]\na = { kind = \"pci\", addr = \"0000:03:00.2\", bar = 1 }\n",
            "bar",
        ),
        ("[rates.vfs]\na = { kind = \"usb\" }\n", "usb"),
    ] {
        let e = Config::from_toml(text).unwrap_err().to_string();
        assert!(e.contains(want), "{text}: {e}");
    }
}

#[test]
fn the_period_detector_is_on_by_default_and_its_settings_are_checked() {
    let c = Config::default();
    assert_eq!(c.periods, PeriodsConfig::default());
    assert!(c.periods.enabled);
    assert_eq!(c.periods.window, 8192);
    let c = Config::from_toml("[periods]\nenabled = false\n").unwrap();
    assert!(!c.periods.enabled);
    assert_eq!(c.periods.window, 8192, "the other keys keep their defaults");
    for (text, want) in [
        (
            "window = 10",
            "[periods] window must be 64 to 65536 intervals",
        ),
        ("every_ms = 5", "[periods] every_ms must be at least 100"),
        ("per_second = 0", "[periods] per_second must be 1 to 10000"),
    ] {
        let e = Config::from_toml(&format!("[periods]\n{text}\n")).unwrap_err();
        assert_eq!(e.to_string(), want);
    }
    let e = Config::from_toml("[periods]\nwindw = 1\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("windw"), "{e}");
}
