//! `resex ibmon watch`: scan every interval, print rates every report period.

use super::{load, WatchArgs};
use resex_ibmon::Counters;
use serde::Serialize;
use std::time::{Duration, Instant};

#[derive(Serialize)]
struct Rates {
    qpn: u32,
    wqes_per_s: f64,
    mtus_per_s: f64,
    tx_mb_per_s: f64,
    rx_read_mb_per_s: f64,
    recv_mb_per_s: f64,
    errors: u64,
    overruns: u64,
    anomalies: u64,
}

#[derive(Serialize)]
struct Tick {
    elapsed_s: f64,
    scans: u64,
    scan_us_mean: f64,
    qps: Vec<Rates>,
}

fn rates(qpn: u32, d: &Counters, total: &Counters, secs: f64) -> Rates {
    let per = |v: u64| v as f64 / secs;
    Rates {
        qpn,
        wqes_per_s: per(d.wqes),
        mtus_per_s: per(d.mtus),
        tx_mb_per_s: per(d.tx_bytes) / 1e6,
        rx_read_mb_per_s: per(d.rx_read_bytes) / 1e6,
        recv_mb_per_s: per(d.recv_bytes) / 1e6,
        errors: total.errors,
        overruns: total.overruns,
        anomalies: total.anomalies,
    }
}

pub fn run(a: &WatchArgs) -> anyhow::Result<()> {
    let load::Guest {
        mem,
        mlx5: mut mon,
        rxe,
    } = load::open(&a.target)?;
    if rxe.rings().next().is_some() {
        eprintln!(
            "note: watch rates the mlx5 QPs only; the soft-RoCE rings are counted by \
             `resex ibmon scan --state FILE` and by resexd"
        );
    }
    if !a.from_start {
        mon.skip_to_now(&mem);
    }
    let start = Instant::now();
    let mut last = mon.counters().to_vec();
    let mut last_t = start;
    let mut next_scan = start;
    let mut next_report = start + a.report;
    let (mut scans, mut scan_time) = (0u64, Duration::ZERO);
    let mut reports = 0u64;
    if !a.json {
        eprintln!(
            "watching {} every {:?}; a report every {:?} (Ctrl-C to stop)",
            a.target.ram.display(),
            a.interval,
            a.report
        );
    }
    loop {
        let t0 = Instant::now();
        mon.scan(&mem, a.target.budget);
        scan_time += t0.elapsed();
        scans += 1;
        let now = Instant::now();
        if now >= next_report {
            let secs = now.duration_since(last_t).as_secs_f64().max(1e-9);
            let qps: Vec<Rates> = mon
                .layout()
                .qps
                .iter()
                .zip(mon.counters().iter().zip(&last))
                .map(|(q, (c, l))| rates(q.qpn, &(*c - *l), c, secs))
                .collect();
            let tick = Tick {
                elapsed_s: now.duration_since(start).as_secs_f64(),
                scans,
                scan_us_mean: scan_time.as_secs_f64() * 1e6 / scans.max(1) as f64,
                qps,
            };
            print_tick(&tick, a.json);
            last = mon.counters().to_vec();
            last_t = now;
            (scans, scan_time) = (0, Duration::ZERO);
            reports += 1;
            if a.count.is_some_and(|c| reports >= c) {
                return Ok(());
            }
            next_report += a.report;
        }
        next_scan += a.interval;
        let now = Instant::now();
        if next_scan > now {
            std::thread::sleep(next_scan - now);
        } else {
            next_scan = now; // late: do not try to catch up with a burst
        }
    }
}

fn print_tick(t: &Tick, json: bool) {
    if json {
        println!("{}", serde_json::to_string(t).unwrap_or_default());
        return;
    }
    println!(
        "t={:>7.2}s  {} scans, {:.1} us/scan",
        t.elapsed_s, t.scans, t.scan_us_mean
    );
    println!(
        "  {:<8} {:>12} {:>12} {:>10} {:>10} {:>10} {:>7} {:>8} {:>9}",
        "QPN",
        "WQE/s",
        "MTU/s",
        "TX MB/s",
        "READ MB/s",
        "RECV MB/s",
        "errors",
        "overruns",
        "anomalies"
    );
    for q in &t.qps {
        println!(
            "  {:<8} {:>12.0} {:>12.0} {:>10.2} {:>10.2} {:>10.2} {:>7} {:>8} {:>9}",
            format!("{:#x}", q.qpn),
            q.wqes_per_s,
            q.mtus_per_s,
            q.tx_mb_per_s,
            q.rx_read_mb_per_s,
            q.recv_mb_per_s,
            q.errors,
            q.overruns,
            q.anomalies
        );
    }
}
