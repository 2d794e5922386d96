//! The pricing step for 1 024 VMs per interval (target: <= 50 us), for both shipped policies.
//!
//! `cargo bench -p resex-pricing` prints one line per case: the median and the best of 15 runs
//! of 2 000 consecutive intervals (two epochs of cap decisions with the default 1 ms / 10 ms).

#![allow(clippy::cast_possible_truncation)]

use resex_pricing::{
    Engine, IntervalInput, LatencyReport, PolicyConfig, PolicyKind, VmId, VmSpec, VmUsage,
};
use std::hint::black_box;
use std::time::Instant;

const VMS: u32 = 1024;
const INTERVALS: u64 = 2000;

fn usage(i: u64, reports: bool) -> Vec<VmUsage> {
    (0..VMS)
        .map(|v| {
            let mut u = VmUsage::new(
                VmId(v),
                f64::from((v * 7 + i as u32) % 100),
                u64::from((v * 13 + i as u32) % 700),
            );
            // A tenth of the VMs report each interval; their latency rises and falls.
            if reports && (u64::from(v) + i).is_multiple_of(10) {
                u.report = Some(LatencyReport {
                    count: 50,
                    mean_ns: 10_000.0 + ((i / 100) % 3) as f64 * 2_000.0,
                    stddev_ns: 1_000.0,
                    p99_ns: 25_000.0,
                    ..LatencyReport::default()
                });
            }
            u
        })
        .collect()
}

fn run(kind: PolicyKind) -> (f64, f64) {
    let inputs: Vec<Vec<VmUsage>> = (0..20).map(|i| usage(i, true)).collect();
    let mut times = Vec::new();
    for _ in 0..15 {
        let mut e = Engine::new(PolicyConfig::defaults(kind));
        for v in 0..VMS {
            e.add_vm(VmSpec::new(v, format!("vm{v}"), 1 + v % 4), 0)
                .unwrap();
        }
        let start = Instant::now();
        for i in 0..INTERVALS {
            let out = e
                .step(&IntervalInput {
                    interval: i,
                    link_util: None,
                    usage: &inputs[(i % 20) as usize],
                })
                .unwrap();
            black_box(out.decisions.len());
        }
        times.push(start.elapsed().as_secs_f64() * 1e6 / INTERVALS as f64);
    }
    times.sort_by(f64::total_cmp);
    (times[times.len() / 2], times[0])
}

fn main() {
    println!("pricing step, {VMS} VMs, {INTERVALS} intervals per run (target <= 50 us)");
    for kind in [PolicyKind::Freemarket, PolicyKind::Ioshares] {
        let (median, best) = run(kind);
        println!("  {kind:?}: median {median:.1} us per interval, best {best:.1} us");
    }
}
