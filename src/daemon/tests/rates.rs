//! The rate lever through resexd: the admin's transmit limit reaches the lever, is recorded
//! before it is set, and is put back when the daemon stops and when a daemon that crashed is
//! started again.
#![allow(missing_docs)]

use resex_backend::memory::{MemDomain, MemoryBackend};
use resex_common::TxLimit;
use resex_daemon::config::Config;
use resex_guestmem::VecMemory;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn backend(original: TxLimit) -> Arc<MemoryBackend> {
    let d = MemDomain::new("g", Arc::new(VecMemory::new(1 << 20)), None);
    *d.tx.lock().unwrap() = original;
    Arc::new(MemoryBackend::new(vec![d], Duration::ZERO))
}

fn start(dir: &std::path::Path, hv: Arc<MemoryBackend>) -> resex_daemon::DaemonHandle {
    let cfg = Config {
        run_dir: Some(dir.to_owned()),
        api_socket: Some(dir.join("api.sock")),
        state_dir: Some(dir.join("state")),
        realtime: false,
        ..Config::default()
    };
    resex_daemon::start(
        resex_daemon::Settings {
            cfg,
            policy: None,
            limits: Default::default(),
        },
        hv,
    )
    .unwrap()
}

fn eventually(what: &str, ok: impl Fn() -> bool) {
    let t = Instant::now();
    while !ok() {
        assert!(t.elapsed() < Duration::from_secs(30), "{what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

const ORIGINAL: TxLimit = TxLimit {
    share_bps: None,
    max_bps: Some(25_000_000_000),
};
const PINNED: TxLimit = TxLimit {
    share_bps: Some(1_000_000_000),
    max_bps: Some(4_000_000_000),
};

#[test]
fn a_pinned_limit_reaches_the_lever_and_goes_back_when_the_daemon_stops() {
    let dir = tempfile::tempdir().unwrap();
    let hv = backend(ORIGINAL);
    let d = start(dir.path(), hv.clone());
    eventually("the VM found", || !d.snapshot().vms.is_empty());
    let v = &d.snapshot().vms[0];
    assert_eq!(v.tx_lever.as_deref(), Some("a limit in memory"));
    let msg = d.pin_tx("g", Some(PINNED)).unwrap();
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
        .pin_tx("nobody", None)
        .unwrap_err()
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
