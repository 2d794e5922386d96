//! Live period detection end to end through resexd: a guest that sends in bursts, one burst
//! every 100 ms, and a guest that sends nothing; the daemon's period detector (its own thread,
//! fed from the loop) finds the first one's period and says why the second has none, in the
//! API (what `resex status` prints).
#![allow(missing_docs, clippy::cast_possible_truncation)]

use resex_backend::memory::{MemDomain, MemoryBackend};
use resex_daemon::config::Config;
use resex_guestmem::VecMemory;
use resex_ibmon::synth::{SynthConfig, SynthGuest};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;
use common::{in_dir, post_writes, start, until};

const PERIOD: Duration = Duration::from_millis(100);

/// Posts a burst of 16 RDMA WRITEs of 64 KiB at the start of every period (absolute
/// deadlines, so the mean period is exact whatever the sleeps' jitter).
fn burst_every_period(mem: Arc<VecMemory>, mut synth: SynthGuest, stop: Arc<AtomicBool>) {
    let t0 = Instant::now();
    let mut k = 1u32;
    while !stop.load(Ordering::Acquire) {
        // Four doorbells 3 ms apart: the monitor counts the 16 WRITEs as they complete.
        for _ in 0..4 {
            post_writes(&mut synth, &*mem, 4, 65536);
            std::thread::sleep(Duration::from_millis(3));
        }
        if let Some(d) = (t0 + PERIOD * k).checked_duration_since(Instant::now()) {
            std::thread::sleep(d);
        }
        k += 1;
    }
}

#[test]
fn resexd_finds_a_bursty_guests_period_and_says_why_a_silent_one_has_none() {
    let cfg = SynthConfig {
        qps: 1,
        shared_cq: true,
        wqe_cnt: 256,
        cqe_cnt: 256,
        ..SynthConfig::default()
    };
    let mem = Arc::new(VecMemory::new(1 << 20));
    let synth = SynthGuest::new(&*mem, &cfg).unwrap();
    let doc = synth.registration().clone();
    let quiet_mem = Arc::new(VecMemory::new(1 << 20));
    let quiet = SynthGuest::new(&*quiet_mem, &cfg).unwrap();
    let hv = Arc::new(MemoryBackend::new(
        vec![
            MemDomain::new("job", mem.clone(), Some(doc)),
            MemDomain::new("quiet", quiet_mem, Some(quiet.registration().clone())),
        ],
        Duration::ZERO,
    ));
    let dir = tempfile::tempdir().unwrap();
    let periods = "snapshot_ms = 50\n[periods]\nwindow = 1024\nevery_ms = 200\n";
    let cfg = in_dir(Config::from_toml(periods).unwrap(), dir.path());
    let d = start(cfg, hv);
    until("both registered", &d, |s| {
        s.vms.len() == 2 && s.vms.iter().all(|v| v.state == "registered")
    });
    let stop = Arc::new(AtomicBool::new(false));
    let feeder = {
        let stop = stop.clone();
        std::thread::spawn(move || burst_every_period(mem, synth, stop))
    };
    let found = |s: &resex_api::Snapshot| {
        s.vms
            .iter()
            .find(|v| v.name == "job")
            .and_then(|v| v.period.as_ref())
            .and_then(|p| p.found.filter(|_| p.samples >= 1000))
    };
    // A full window of bursts, then a verdict on it.
    until("the job's period found over a full window", &d, |s| {
        found(s).is_some()
    });
    let s = resex_api::ApiClient::connect(&dir.path().join("api.sock"))
        .unwrap()
        .status()
        .unwrap();
    stop.store(true, Ordering::Release);
    feeder.join().unwrap();
    let p = found(&s).expect("the API serves the period");
    eprintln!("the job: {p:?}");
    assert!(
        (p.period_ms - 100.0).abs() <= 5.0,
        "period {:.1} ms against 100 ms: {p:?}",
        p.period_ms
    );
    assert!((0.0..100.0).contains(&p.phase_ms), "{p:?}");
    // 16 x 64 KiB a period.
    assert!(
        (p.bytes_per_period - 16.0 * 65536.0).abs() < 0.1 * 16.0 * 65536.0,
        "{p:?}"
    );
    let quiet = s.vms.iter().find(|v| v.name == "quiet").unwrap();
    let why = quiet.period.as_ref().and_then(|p| p.why_not.clone());
    assert_eq!(why.as_deref(), Some("the VM sent nothing"), "{quiet:?}");
    d.stop();
}
