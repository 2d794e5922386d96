//! The fabric at scale (issue 20, item 1): 100 hosts x 32 VMs (800 four-worker ring jobs on a
//! 2:1 leaf-spine), 10 virtual seconds. Prints wall time, steps, peak memory (VmHWM) and the
//! iterations done. `cargo bench -p resex-fabric --bench scale [-- HOSTS VMS SECONDS DT_US]`.

use resex_fabric::{generate::leaf_spine, run, RunOptions};
use std::time::Instant;

fn hwm_mib() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let l = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = l.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let arg = |i: usize, d: f64| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let (hosts, vms) = (arg(0, 100.0) as usize, arg(1, 32.0) as usize);
    let mut spec = leaf_spine(hosts, vms, 10, 1);
    spec.duration_s = arg(2, 10.0);
    spec.dt_us = arg(3, spec.dt_us);
    let t = Instant::now();
    let r = run(&spec, &RunOptions::default()).expect("run");
    let wall = t.elapsed().as_secs_f64();
    let iters: usize = r.jobs.iter().map(|j| j.iter_ms.len()).sum();
    let slow: Vec<f64> = r
        .jobs
        .iter()
        .filter_map(|j| Some(j.mean_after(1)? / j.alone_ms))
        .collect();
    let mean_slow = slow.iter().sum::<f64>() / slow.len().max(1) as f64;
    println!(
        "fabric scale: {hosts} hosts x {vms} VMs ({} flows, {} links), {} virtual s, dt {} us: \
         {wall:.2} s wall, {} steps, {iters} iterations, mean slowdown vs alone {mean_slow:.3}, \
         peak RSS {:.0} MiB",
        r.flows,
        r.links,
        spec.duration_s,
        spec.dt_us,
        r.steps,
        hwm_mib().unwrap_or(f64::NAN)
    );
}
