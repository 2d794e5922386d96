//! What `resex-agent --discover` costs and how soon it registers:
//! - one scan of this machine's real `/proc` and of a `/proc` of our making with 4 RDMA
//!   processes among 60, without RDMA netlink (every process's `maps` read: the worst case;
//!   with it, only the processes owning RDMA resources are read);
//! - from a new process's queues appearing to the host receiving the registration, with the
//!   default 50 ms scan and a host on the agent's real Unix channel (20 times).
#![allow(missing_docs)]

use resex_agent::discover::fixture::{accepting_host, fake_proc, qp_queues};
use resex_agent::discover::rdma_nl::NetlinkError;
use resex_agent::discover::serve::{run, Options};
use resex_agent::discover::watch::Watcher;
use resex_agent::session::{ChannelStatus, UnixChannel};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

fn scan_cost(root: &Path, what: &str) {
    // No RDMA netlink (as on this machine): every process's `maps` is read, the worst case.
    let mut w = Watcher::new(root, Box::new(|| Err(NetlinkError::Unsupported)));
    w.scan();
    let n = 200;
    let t = Instant::now();
    for _ in 0..n {
        w.scan();
    }
    let procs = std::fs::read_dir(root)
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
                .count()
        })
        .unwrap_or(0);
    println!(
        "scan of {what} ({procs} processes, {} queues): {:.1} us per scan",
        w.rings().len(),
        t.elapsed().as_secs_f64() * 1e6 / f64::from(n)
    );
}

fn registration_latency() {
    let root = tempfile::tempdir().unwrap();
    let sock = root.path().join("agent.sock");
    let chan = UnixChannel::bind(&sock).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let opts = Options {
        proc_root: root.path().to_path_buf(),
        ..Options::new(Duration::from_millis(50), 1024, None)
    };
    let agent = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let status = Arc::new(ChannelStatus::default());
            run(
                Box::new(chan),
                &opts,
                Box::new(|| Err(NetlinkError::Unsupported)),
                &stop,
                status,
            )
        })
    };
    let (tx, rx) = mpsc::channel();
    accepting_host(&sock, tx);
    rx.recv_timeout(Duration::from_secs(5)).unwrap();
    let mut ms = Vec::new();
    for i in 0..20u32 {
        // Queues appear at a random point of the scan period.
        std::thread::sleep(Duration::from_millis(u64::from(i * 7 % 50)));
        let t = Instant::now();
        fake_proc(root.path(), 100 + i, &qp_queues(0x100_000, 0));
        let (reg, at) = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(reg.rings.len(), 3);
        ms.push((at - t).as_secs_f64() * 1e3);
        std::fs::remove_dir_all(root.path().join((100 + i).to_string())).unwrap();
        rx.recv_timeout(Duration::from_secs(5)).unwrap();
    }
    stop.store(true, Ordering::Release);
    let _ = agent.join();
    ms.sort_by(f64::total_cmp);
    println!(
        "queues appear -> host has the registration (50 ms scan, 20 times): min {:.1} ms, median {:.1} ms, max {:.1} ms",
        ms[0],
        ms[ms.len() / 2],
        ms[ms.len() - 1]
    );
}

fn main() {
    scan_cost(Path::new("/proc"), "this machine's /proc");
    let root = tempfile::tempdir().unwrap();
    for pid in 1..=56 {
        fake_proc(root.path(), pid, &[]);
    }
    for pid in 57..=60 {
        fake_proc(root.path(), pid, &qp_queues(0x100_000, 0));
    }
    scan_cost(root.path(), "a /proc of our making");
    registration_latency();
}
