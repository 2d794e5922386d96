//! The DRUM policy's per-host solve for 1 024 VMs against the 1 ms tick budget.
//!
//! `cargo bench -p resex-pricing --bench drum` steps an engine with `policies/drum.toml`'s
//! defaults (3 ADMM iterations per 10 ms actuation period) through 3 000 intervals of 1 024 VMs
//! that all send (their rates and CPU vary, the link is oversubscribed), and prints the time of
//! the intervals that end a period (the measurement, the solve and the decisions) and of the
//! others, median and worst, plus the solve's last relative primal residual. The budget is the
//! whole tick: 1 ms.

#![allow(clippy::cast_possible_truncation)]

use resex_pricing::{Engine, IntervalInput, PolicyConfig, PolicyKind, VmId, VmSpec, VmUsage};
use std::hint::black_box;
use std::time::Instant;

const VMS: u32 = 1024;
const INTERVALS: u64 = 3000;

fn usage(i: u64) -> Vec<VmUsage> {
    (0..VMS)
        .map(|v| {
            let mut u = VmUsage::new(VmId(v), f64::from(20 + (v * 7 + i as u32) % 80), 0);
            // 1 GiB/s over 1 ms is 1 073 741 bytes: together the VMs ask for about 3 links.
            u.bytes = u64::from(1000 + (v * 13 + i as u32 * 7) % 5000);
            u
        })
        .collect()
}

fn percentile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * q).round() as usize]
}

fn main() {
    let inputs: Vec<Vec<VmUsage>> = (0..50).map(usage).collect();
    let cfg = PolicyConfig::defaults(PolicyKind::Drum);
    let per = cfg.intervals_per_actuation();
    let iterations = cfg.drum.as_ref().map_or(0, |d| d.iterations);
    let mut e = Engine::new(cfg);
    for v in 0..VMS {
        e.add_vm(VmSpec::new(v, format!("vm{v}"), 1 + v % 4), 0)
            .unwrap();
    }
    let (mut solve, mut other) = (Vec::new(), Vec::new());
    for i in 0..INTERVALS {
        let start = Instant::now();
        let out = e
            .step(&IntervalInput {
                interval: i,
                link_util: None,
                usage: &inputs[(i % 50) as usize],
            })
            .unwrap();
        black_box(out.tx_decisions.len());
        let us = start.elapsed().as_secs_f64() * 1e6;
        if i % per == 0 {
            solve.push(us);
        } else {
            other.push(us);
        }
    }
    println!(
        "DRUM policy, {VMS} VMs, {iterations} ADMM iterations per period, {INTERVALS} intervals \
         (budget: 1 000 us per tick)"
    );
    let (sm, sw) = (percentile(&mut solve, 0.5), percentile(&mut solve, 1.0));
    let s99 = percentile(&mut solve, 0.99);
    println!("  intervals that solve: median {sm:.0} us, p99 {s99:.0} us, worst {sw:.0} us");
    let (om, ow) = (percentile(&mut other, 0.5), percentile(&mut other, 1.0));
    println!("  other intervals:      median {om:.0} us, worst {ow:.0} us");
}
