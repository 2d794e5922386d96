//! What scoring the links' periodic jobs adds to the coordinator's round, in process (no etcd):
//! 1 000 hosts x 64 VMs, racks of 20 hosts under a spine (51 links), one VM in 8 a training
//! job (six iteration times from 100 to 600 ms, as measured: within 0.4%; each link scores its
//! 8 heaviest). Planner::round with the
//! periods and without them, alternating, medians of 5; and `compat::score_links` alone.
//! `cargo bench -p resex-fleet --features coordinator --bench compat`

#![allow(missing_docs, clippy::cast_precision_loss)]

use resex_fleet::{compat, HostSummary, JobPeriod, Planner, Topology, VmSummary};
use std::time::Instant;

const HOSTS: usize = 1000;
const VMS: usize = 64;

fn summary(h: usize, periodic: bool) -> HostSummary {
    HostSummary {
        host: format!("h{h}"),
        at_unix_ms: 0,
        policy: "governor".into(),
        link_util: 0.5,
        vms: (0..VMS)
            .map(|v| VmSummary {
                name: format!("h{h}-vm{v}"),
                tx_mbps: ((h * 7 + v * 13) % 1000) as f64,
                cpu_pct: 50.0,
                cap_pct: None,
                tx_share_mbps: None,
                tx_max_mbps: None,
                lat_p99_us: None,
                intf_pct: None,
                entitled_mbps: None,
                period: (periodic && v % 8 == 0).then(|| JobPeriod {
                    // Six iteration times, as measured (within 0.4%).
                    period_ms: [100.0, 150.0, 200.0, 300.0, 400.0, 600.0][(h + v / 8) % 6]
                        * (1.0 + 0.002 * ((h % 5) as f64 - 2.0)),
                    last_start_unix_ms: 1.79e12 + ((h * 17) % 100) as f64,
                    bytes_per_period: 1e6 * ((h + v) % 50 + 1) as f64,
                    duty: 0.05,
                    confidence: 0.9,
                    latest_period_ms: None,
                }),
            })
            .collect(),
    }
}

fn topology() -> Topology {
    let all: Vec<String> = (0..HOSTS).map(|h| format!("\"h{h}\"")).collect();
    let mut t = format!(
        "[[link]]\nname = \"spine\"\ncapacity_mbps = {}\nhosts = [{}]\n",
        4000 * HOSTS,
        all.join(",")
    );
    for (r, rack) in all.chunks(20).enumerate() {
        t.push_str(&format!(
            "[[link]]\nname = \"rack{r}\"\ncapacity_mbps = {}\nhosts = [{}]\n",
            rack.len() * VMS * 250,
            rack.join(",")
        ));
    }
    Topology::from_toml(&t).unwrap()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let t = topology();
    let plain: Vec<HostSummary> = (0..HOSTS).map(|h| summary(h, false)).collect();
    let jobs: Vec<HostSummary> = (0..HOSTS).map(|h| summary(h, true)).collect();
    let (mut a, mut b) = (Planner::default(), Planner::default());
    let (mut without, mut with) = (Vec::new(), Vec::new());
    let mut scored = 0;
    for _ in 0..5 {
        let s = Instant::now();
        a.round(&t, &plain, "h0", 0).unwrap();
        without.push(s.elapsed().as_secs_f64());
        let s = Instant::now();
        let (_, rep) = b.round(&t, &jobs, "h0", 0).unwrap();
        with.push(s.elapsed().as_secs_f64());
        scored = rep.links.iter().filter(|l| l.score.is_some()).count();
    }
    let refs: Vec<&HostSummary> = jobs.iter().collect();
    let mut alone = Vec::new();
    for _ in 0..5 {
        let s = Instant::now();
        std::hint::black_box(compat::score_links(&t, &refs, 0));
        alone.push(s.elapsed().as_secs_f64());
    }
    let worst = worst_cases();
    let (w, p) = (median(without), median(with));
    println!(
        "coordinator round, {HOSTS} hosts x {VMS} VMs, {} links ({scored} scored, 8 jobs each)",
        t.links.len()
    );
    println!("  without periods      {:>8.1} ms", w * 1e3);
    println!(
        "  with 1 VM in 8 periodic {:>5.1} ms  ({:.2}x)",
        p * 1e3,
        p / w
    );
    println!("  score_links alone    {:>8.1} ms", median(alone) * 1e3);
    println!("worst cases: 64 links of 8 hosts, each host one job needing a share of its link");
    for (share, ms) in worst {
        println!(
            "  {:>3.0}% of the link each: score_links {ms:>7.1} ms (32 links scored)",
            share * 100.0
        );
    }
}

/// `score_links` on 64 links of 8 single-job hosts, each job needing `share` of the link for
/// a 200 ms period (equal periods: the circle's largest), medians of 3.
fn worst_cases() -> Vec<(f64, f64)> {
    let mut toml = String::new();
    for l in 0..64 {
        let hosts: Vec<String> = (0..8).map(|h| format!("\"l{l}h{h}\"")).collect();
        toml.push_str(&format!(
            "[[link]]\nname = \"l{l}\"\ncapacity_mbps = 1000\nhosts = [{}]\n",
            hosts.join(",")
        ));
    }
    let t = Topology::from_toml(&toml).unwrap();
    [0.05, 0.3, 0.5, 0.9]
        .into_iter()
        .map(|share| {
            let s: Vec<HostSummary> = (0..64 * 8)
                .map(|i| {
                    let mut h = summary(i, false);
                    h.host = format!("l{}h{}", i / 8, i % 8);
                    h.vms.truncate(1);
                    h.vms[0].period = Some(JobPeriod {
                        period_ms: 200.0,
                        last_start_unix_ms: 1.79e12 + (i % 8) as f64,
                        bytes_per_period: share * 25e6,
                        duty: 0.02,
                        confidence: 0.9,
                        latest_period_ms: None,
                    });
                    h
                })
                .collect();
            let refs: Vec<&HostSummary> = s.iter().collect();
            let runs: Vec<f64> = (0..3)
                .map(|_| {
                    let t0 = Instant::now();
                    std::hint::black_box(compat::score_links(&t, &refs, 0));
                    t0.elapsed().as_secs_f64() * 1e3
                })
                .collect();
            (share, median(runs))
        })
        .collect()
}
