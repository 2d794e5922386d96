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
use std::time::{Duration, Instant, SystemTime};

fn unix_ms() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        * 1e3
}

mod common;
use common::{in_dir, post_writes, start, until};

const PERIOD: Duration = Duration::from_millis(100);

/// Posts a burst of 16 RDMA WRITEs of 64 KiB at the start of every period (absolute
/// deadlines, so the mean period is exact whatever the sleeps' jitter).
fn burst_every_period(
    mem: Arc<VecMemory>,
    mut synth: SynthGuest,
    t0: Instant,
    stop: Arc<AtomicBool>,
) {
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
    // The bursts begin at t0 + k periods.
    let (t0, t0_unix_ms) = (Instant::now(), unix_ms());
    let feeder = {
        let stop = stop.clone();
        std::thread::spawn(move || burst_every_period(mem, synth, t0, stop))
    };
    // Three verdicts over a full window, as `resex status` reads them (the API socket): their
    // median against the truth (a loaded machine's sleeps can disturb one window).
    let api = dir.path().join("api.sock");
    let mut verdicts: Vec<(resex_api::PeriodFound, resex_api::Snapshot)> = Vec::new();
    let t = Instant::now();
    while verdicts.len() < 3 {
        let found: Vec<_> = verdicts.iter().map(|(p, _)| p).collect();
        assert!(t.elapsed() < Duration::from_secs(90), "{found:?}");
        std::thread::sleep(Duration::from_millis(50));
        let s = resex_api::ApiClient::connect(&api)
            .unwrap()
            .status()
            .unwrap();
        let job = s
            .vms
            .iter()
            .find(|v| v.name == "job")
            .and_then(|v| v.period.clone());
        let Some(p) = job.and_then(|p| p.found.filter(|_| p.samples >= 1000)) else {
            continue;
        };
        if verdicts.iter().all(|(q, _)| q != &p) {
            verdicts.push((p, s));
        }
    }
    stop.store(true, Ordering::Release);
    feeder.join().unwrap();
    let mut periods: Vec<f64> = verdicts.iter().map(|(p, _)| p.period_ms).collect();
    periods.sort_by(f64::total_cmp);
    for (p, _) in &verdicts {
        let off = (p.last_start_unix_ms - t0_unix_ms).rem_euclid(100.0);
        eprintln!("the job: {p:?}, {off:.1} ms after a burst's start");
    }
    assert!(
        (periods[1] - 100.0).abs() <= 5.0,
        "median period {:.2} ms against 100 ms: {periods:?}",
        periods[1]
    );
    let (p, s) = verdicts
        .iter()
        .find(|(p, _)| (p.period_ms - 100.0).abs() <= 5.0)
        .unwrap();
    // Its latest arc began at a burst (within 20 ms: the counts are of 1 ms intervals, the
    // first completion follows the first doorbell).
    let off = (p.last_start_unix_ms - t0_unix_ms).rem_euclid(100.0);
    assert!(
        off.min(100.0 - off) < 20.0,
        "{off:.1} ms off a burst: {p:?}"
    );
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
