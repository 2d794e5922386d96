//! resexd's tick lateness with a fast and with a slow backend (every call 50 ms, as a busy
//! libvirt): the loop never waits for the backend, so the two should read alike. Prints a
//! table; not a timed test.
//!
//! `cargo bench -p resex-daemon --bench tick` (`-- --vms 256 --seconds 5 --delay-ms 50`)

#![allow(missing_docs, clippy::cast_possible_truncation)]

use resex_backend::memory::{MemDomain, MemoryBackend};
use resex_daemon::config::Config;
use resex_guestmem::VecMemory;
use resex_ibmon::synth::{SynthConfig, SynthGuest, Wr};
use resex_mlx5::consts::send_op;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

struct Args {
    vms: usize,
    seconds: f64,
    delay_ms: u64,
}

fn args() -> Args {
    let mut a = Args {
        vms: 256,
        seconds: 5.0,
        delay_ms: 50,
    };
    let v: Vec<String> = std::env::args().collect();
    let mut i = 1;
    while i < v.len() {
        let next = v.get(i + 1).cloned().unwrap_or_default();
        match v[i].as_str() {
            "--vms" => a.vms = next.parse().expect("--vms N"),
            "--seconds" => a.seconds = next.parse().expect("--seconds S"),
            "--delay-ms" => a.delay_ms = next.parse().expect("--delay-ms MS"),
            _ => {
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    a
}

/// `n` guests with two QPs each; a feeder thread keeps every one busy (4 WQEs, 1 CQE per QP
/// per millisecond).
fn guests(n: usize) -> (Vec<MemDomain>, Vec<(Arc<VecMemory>, SynthGuest)>) {
    let cfg = SynthConfig {
        qps: 2,
        shared_cq: true,
        wqe_cnt: 256,
        cqe_cnt: 256,
        ..SynthConfig::default()
    };
    let mut doms = Vec::new();
    let mut feed = Vec::new();
    for i in 0..n {
        let mem = Arc::new(VecMemory::new(512 << 10));
        let g = SynthGuest::new(&*mem, &cfg).unwrap();
        doms.push(MemDomain::new(
            &format!("vm{i}"),
            mem.clone(),
            Some(g.registration().clone()),
        ));
        feed.push((mem, g));
    }
    (doms, feed)
}

/// What a run measured after its warm-up: per 100 ms window of the daemon's snapshots, the
/// tick lateness p50, p99 and max.
struct Measured {
    ticks: u64,
    skipped: u64,
    p50_median: f64,
    p99_median: f64,
    p99_worst: f64,
    max_worst: f64,
    registered: usize,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn run(a: &Args, delay: Duration) -> Measured {
    let (doms, feed) = guests(a.vms);
    let hv = Arc::new(MemoryBackend::new(doms, delay));
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config {
        run_dir: Some(dir.path().to_owned()),
        api_socket: Some(dir.path().join("api.sock")),
        state_dir: Some(dir.path().join("state")),
        ..Config::default()
    };
    let d = resex_daemon::start(
        resex_daemon::Settings {
            cfg,
            policy: None,
            limits: Default::default(),
        },
        hv,
    )
    .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let feed = Arc::new(Mutex::new(feed));
    let feeder = {
        let (stop, feed) = (stop.clone(), feed.clone());
        std::thread::spawn(move || {
            let wr = |signaled| Wr {
                opcode: send_op::RDMA_WRITE,
                sges: vec![4096],
                inline: false,
                signaled,
            };
            while !stop.load(Ordering::Acquire) {
                for (mem, g) in feed.lock().unwrap().iter_mut() {
                    for qp in 0..2 {
                        for k in 0..4 {
                            g.post(&**mem, qp, &wr(k == 3));
                        }
                        g.ring_doorbells(&**mem);
                        g.complete(&**mem, qp, usize::MAX, false);
                        g.poll(&**mem, qp, usize::MAX, None);
                    }
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    };
    // Warm-up: threads start, the first VMs register.
    std::thread::sleep(Duration::from_secs(2));
    let first = d.snapshot();
    let (mut p50, mut p99, mut max) = (Vec::new(), Vec::new(), Vec::new());
    let mut last_up = first.uptime_ms;
    let end = std::time::Instant::now() + Duration::from_secs_f64(a.seconds);
    while std::time::Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
        let s = d.snapshot();
        if s.uptime_ms != last_up {
            last_up = s.uptime_ms;
            p50.push(s.host.tick_late_p50_us);
            p99.push(s.host.tick_late_p99_us);
            max.push(s.host.tick_late_max_us);
        }
    }
    let last = d.snapshot();
    let registered = last.vms.iter().filter(|v| v.state == "registered").count();
    stop.store(true, Ordering::Release);
    feeder.join().unwrap();
    d.stop();
    Measured {
        ticks: last.host.ticks - first.host.ticks,
        skipped: last.host.ticks_skipped - first.host.ticks_skipped,
        p50_median: median(p50),
        p99_median: median(p99.clone()),
        p99_worst: p99.iter().copied().fold(0.0, f64::max),
        max_worst: max.iter().copied().fold(0.0, f64::max),
        registered,
    }
}

fn main() {
    let a = args();
    println!(
        "resexd tick lateness: {} VMs (2 QPs each, busy), {} s per row after a 2 s warm-up;",
        a.vms, a.seconds
    );
    println!("per 100 ms window: median p50, median p99, worst p99, worst max (us)");
    println!(
        "{:<22} {:>6} {:>7} {:>8} {:>8} {:>9} {:>9} {:>6}",
        "backend", "ticks", "skipped", "p50", "p99", "p99 worst", "max worst", "reg"
    );
    for (name, delay) in [
        ("every call immediate".to_owned(), Duration::ZERO),
        (
            format!("every call {} ms", a.delay_ms),
            Duration::from_millis(a.delay_ms),
        ),
    ] {
        let m = run(&a, delay);
        println!(
            "{name:<22} {:>6} {:>7} {:>8.1} {:>8.1} {:>9.1} {:>9.1} {:>6}",
            m.ticks, m.skipped, m.p50_median, m.p99_median, m.p99_worst, m.max_worst, m.registered
        );
    }
}
