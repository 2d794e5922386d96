//! The rate lever through resexd: the admin's transmit limit reaches the lever, is recorded
//! before it is set, and is put back when the daemon stops and when a daemon that crashed is
//! started again.
#![allow(missing_docs)]

use resex_backend::memory::{MemDomain, MemoryBackend};
use resex_common::TxLimit;
use resex_daemon::api::Admin;
use resex_daemon::config::Config;
use resex_guestmem::VecMemory;
use std::sync::Arc;
use std::time::Duration;

mod common;
use common::{eventually, in_dir};

fn backend(original: TxLimit) -> Arc<MemoryBackend> {
    let d = MemDomain::new("g", Arc::new(VecMemory::new(1 << 20)), None);
    *d.tx.lock().unwrap() = original;
    Arc::new(MemoryBackend::new(vec![d], Duration::ZERO))
}

fn start(dir: &std::path::Path, hv: Arc<MemoryBackend>) -> resex_daemon::DaemonHandle {
    common::start(in_dir(Config::default(), dir), hv)
}

const ORIGINAL: TxLimit = TxLimit {
    share_bps: None,
    max_bps: Some(25_000_000_000),
    weight: None,
};
const PINNED: TxLimit = TxLimit {
    share_bps: Some(1_000_000_000),
    max_bps: Some(4_000_000_000),
    weight: None,
};

#[test]
fn a_pinned_limit_reaches_the_lever_and_goes_back_when_the_daemon_stops() {
    let dir = tempfile::tempdir().unwrap();
    let hv = backend(ORIGINAL);
    let d = start(dir.path(), hv.clone());
    eventually("the VM found", || !d.snapshot().vms.is_empty());
    let v = &d.snapshot().vms[0];
    assert_eq!(v.tx_lever.as_deref(), Some("a limit in memory"));
    let msg = d.admin(Admin::Rate("g".into(), Some(PINNED))).unwrap();
    assert!(msg.contains("pinned by the admin"), "{msg}");
    let lever = || *hv.domain("g").unwrap().tx.lock().unwrap();
    eventually("the limit set", || lever() == PINNED);
    eventually("recorded as applied", || {
        std::fs::read_to_string(dir.path().join("state/rates.json"))
            .is_ok_and(|s| s.contains("4000000000"))
    });
    eventually("in the snapshot", || {
        d.snapshot().vms[0].tx_max_bps == Some(4_000_000_000)
    });
    assert!(d
        .admin(Admin::Rate("nobody".into(), None))
        .unwrap_err()
        .to_string()
        .contains("no VM named"));
    let run = d.stop();
    assert_eq!(run.restored_tx, 1, "{run:?}");
    assert_eq!(lever(), ORIGINAL, "the original setting is back");
}

#[test]
fn a_limit_a_crashed_daemon_left_is_put_back_at_the_next_start() {
    let dir = tempfile::tempdir().unwrap();
    let hv = backend(ORIGINAL);
    // What a daemon killed mid-throttling leaves: the lever set, the original on record.
    *hv.domain("g").unwrap().tx.lock().unwrap() = PINNED;
    std::fs::create_dir_all(dir.path().join("state")).unwrap();
    std::fs::write(
        dir.path().join("state/rates.json"),
        serde_json::json!({"g": {"name": "g", "backend": "memory",
            "original": {"share_bps": null, "max_bps": 25_000_000_000u64},
            "current": {"share_bps": 1_000_000_000u64, "max_bps": 4_000_000_000u64}}})
        .to_string(),
    )
    .unwrap();
    let d = start(dir.path(), hv.clone());
    eventually("restored at start", || {
        *hv.domain("g").unwrap().tx.lock().unwrap() == ORIGINAL
    });
    d.stop();
    let left: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("state/rates.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(left, serde_json::json!({}), "nothing left on record");
}

/// `[rates.vfs]` gives a VM whose record names no VF its lever (here softhca's guest port,
/// whose admin socket is real); `vf_lever = "none"` leaves a VM with an SR-IOV VF without one.
#[test]
fn the_config_names_the_vf_the_backend_does_not_know() {
    use resex_backend::cap::CapHandle;
    use resex_backend::cpu::CpuSource;
    use resex_backend::lever::Vf;
    use resex_backend::local::{publish, DomainRecord, LocalBackend};
    use resex_daemon::config::{VfEntry, VfLeverChoice};
    use resex_softhca::{LinkConfig, MonotonicClock, PortId, SoftHca};
    use std::sync::atomic::AtomicBool;

    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let hca = SoftHca::new(LinkConfig::resex_testbed(), 2);
    let ram = dir.path().join("g.ram");
    let mem = Arc::new(resex_guestmem::FileMemory::create(&ram, 1 << 20).unwrap());
    let vport = hca.add_guest(mem, PortId(0)).guest();
    hca.set_tx_limit(vport, ORIGINAL, 0);
    let admin = dir.path().join("hca-admin.sock");
    let stop = Arc::new(AtomicBool::new(false));
    let server = resex_embedded::sockets::serve_admin(
        &admin,
        hca.clone(),
        Arc::new(MonotonicClock::new()),
        stop.clone(),
    )
    .unwrap();
    let mut guests = Vec::new();
    for (id, name, vf) in [
        (1, "g", None),
        (
            2,
            "sriov",
            Some(Vf::Pci {
                addr: "0000:03:00.2".into(),
            }),
        ),
    ] {
        let guest = std::process::Command::new("sleep")
            .arg("600")
            .spawn()
            .unwrap();
        let pid = guest.id();
        guests.push(guest);
        let r = DomainRecord {
            entitled_bps: None,
            cpu_floor_pct: None,
            id,
            name: name.into(),
            host: "cfg".into(),
            vcpus: 1,
            ram_file: ram.clone(),
            ram_size: 1 << 20,
            pid,
            cpu: CpuSource::Proc(pid),
            cap: CapHandle::Sigstop(pid),
            channel: dir.path().join("no-agent.sock"),
            sla_threshold: None,
            weight: 1.0,
            vf,
        };
        publish(&run, &r).unwrap();
    }
    let mut cfg = Config {
        run_dir: Some(run.clone()),
        api_socket: Some(dir.path().join("api.sock")),
        state_dir: Some(dir.path().join("state")),
        realtime: false,
        ..Config::default()
    };
    cfg.rates.vf_lever = VfLeverChoice::None;
    cfg.rates.vfs.insert(
        "g".into(),
        VfEntry(Vf::Soft {
            socket: admin.clone(),
            vport: vport.0,
        }),
    );
    let d = resex_daemon::start(
        resex_daemon::Settings {
            cfg,
            policy: None,
            limits: Default::default(),
        },
        Arc::new(LocalBackend::new(&run)),
    )
    .unwrap();
    eventually("both VMs found", || d.snapshot().vms.len() == 2);
    let s = d.snapshot();
    let lever = |n: &str| {
        s.vms
            .iter()
            .find(|v| v.name == n)
            .and_then(|v| v.tx_lever.clone())
    };
    assert_eq!(
        lever("g").as_deref(),
        Some(&*format!("softhca vport {}", vport.0))
    );
    assert_eq!(lever("sriov"), None, "vf_lever = none");
    let e = d
        .admin(Admin::Rate("sriov".into(), Some(PINNED)))
        .unwrap_err()
        .to_string();
    assert!(e.contains("no rate lever for VM sriov"), "{e}");
    d.admin(Admin::Rate("g".into(), Some(PINNED))).unwrap();
    eventually("the limit in softhca", || {
        hca.tx_limit(vport).unwrap() == PINNED
    });
    let run_summary = d.stop();
    assert_eq!(run_summary.restored_tx, 1, "{run_summary:?}");
    assert_eq!(hca.tx_limit(vport).unwrap(), ORIGINAL);
    stop.store(true, std::sync::atomic::Ordering::Release);
    server.join().unwrap();
    for mut g in guests {
        g.kill().unwrap();
        g.wait().unwrap();
    }
}
