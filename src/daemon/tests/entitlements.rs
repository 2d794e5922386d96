//! What the admin grants, end to end through resexd: `[vms.NAME]` over what the backend says,
//! the rest of the link split equally, and the API (`resex status`) showing each VM's
//! entitlement beside what it uses.

use resex_backend::memory::{MemDomain, MemoryBackend};
use resex_daemon::config::Config;
use resex_guestmem::VecMemory;
use std::sync::Arc;
use std::time::Duration;

mod common;
use common::{eventually, in_dir};

#[test]
fn the_config_grants_entitlements_and_the_api_shows_them_beside_use() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = MemDomain::new("a", Arc::new(VecMemory::new(1 << 20)), None);
    // The backend says 3 Gb/s; the config wins.
    a.info.entitled_bps = Some(3_000_000_000);
    let b = MemDomain::new("b", Arc::new(VecMemory::new(1 << 20)), None);
    let c = MemDomain::new("c", Arc::new(VecMemory::new(1 << 20)), None);
    let hv = Arc::new(MemoryBackend::new(vec![a, b, c], Duration::ZERO));
    let cfg = Config::from_toml(
        "[link]\ngbps = 8\n[vms.a]\nentitlement = \"1Gbit\"\n[vms.b]\ncpu_floor = 20\n",
    )
    .unwrap();
    let cfg = in_dir(cfg, dir.path());
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../policies/governor.toml"
    ))
    .unwrap();
    let policy = resex_pricing::PolicyConfig::from_toml(&text).unwrap();
    let d = resex_daemon::start(
        resex_daemon::Settings {
            cfg,
            policy: Some(("governor".into(), policy)),
            limits: Default::default(),
        },
        hv,
    )
    .unwrap();
    eventually("three VMs found", || d.snapshot().vms.len() == 3);
    eventually("the policy has measured them", || {
        d.snapshot().vms.iter().all(|v| v.excess.is_some())
    });
    // What `resex status` reads: the API socket.
    let s = resex_api::ApiClient::connect(&dir.path().join("api.sock"))
        .unwrap()
        .status()
        .unwrap();
    let vm = |n: &str| s.vms.iter().find(|v| v.name == n).unwrap().clone();
    assert_eq!(
        vm("a").entitled_bps,
        1e9,
        "the config wins over the backend"
    );
    // What the configured one leaves (7 Gb/s) split between the other two.
    assert_eq!(vm("b").entitled_bps, 3.5e9);
    assert_eq!(vm("c").entitled_bps, 3.5e9);
    assert_eq!(vm("b").cpu_floor_pct, Some(20.0));
    // c: the policy's floor.
    assert_eq!(vm("c").cpu_floor_pct, Some(10.0));
    for n in ["a", "b", "c"] {
        let v = vm(n);
        // Nothing is sent: within the entitlement, nothing discounted.
        assert_eq!((v.tx_rate_bps, v.excess), (Some(0.0), Some(false)), "{n}");
        assert_eq!(v.report_discounted, None);
    }
    // And what Prometheus scrapes.
    let m = resex_daemon::metrics::encode(&s, &resex_daemon::metrics::LoopMetrics::default());
    for want in [
        "resex_vm_entitled_bps{vm=\"a\"} 1000000000",
        "resex_vm_cpu_floor_percent{vm=\"b\"} 20",
        "resex_vm_excess{vm=\"c\"} 0",
    ] {
        assert!(m.contains(want), "{want} in {m}");
    }
    d.stop();
}
