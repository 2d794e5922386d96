//! The lab fabric on whole lab hosts at scale (issue 20, item 1): the scale benchmark's
//! leaf-spine (`resex_fabric::generate::leaf_spine`: 4-worker ring jobs at 5% of the presets'
//! bytes, 100 Gb/s NICs, 2:1 ToR uplinks), every host a `LabHost` (rings, softhca, the
//! monitor, the core). Prints wall time, peak memory (VmHWM), iterations and the mean
//! slowdown, beside the fluid model's on the same spec.
//! `cargo bench -p resex-lab --bench fabric_hosts [-- HOSTS VMS SECONDS DT_US]`.

use resex_fabric::{generate::leaf_spine, run, RunOptions};
use resex_lab::fabric::{run_on_hosts, HostsOptions};
use std::time::Instant;

fn hwm_mib() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let l = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = l.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

fn summary(r: &resex_fabric::FabricResult) -> (usize, f64) {
    let iters: usize = r.jobs.iter().map(|j| j.iter_ms.len()).sum();
    let slow: Vec<f64> = r
        .jobs
        .iter()
        .filter_map(|j| Some(j.mean_after(1)? / j.alone_ms))
        .collect();
    (iters, slow.iter().sum::<f64>() / slow.len().max(1) as f64)
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
    let opts = RunOptions::default();
    let t = Instant::now();
    let mut last = 0;
    let r = run_on_hosts(&spec, &opts, &HostsOptions::default(), |now, end| {
        let pct = now * 10 / end.max(1);
        if pct > last {
            last = pct;
            eprintln!(
                "  {}% of {} virtual s after {:.1} s wall",
                pct * 10,
                spec.duration_s,
                t.elapsed().as_secs_f64()
            );
        }
    })
    .expect("run on lab hosts");
    let wall = t.elapsed().as_secs_f64();
    let hwm = hwm_mib().unwrap_or(f64::NAN);
    let (iters, slow) = summary(&r.fabric);
    let t = Instant::now();
    let fluid = run(&spec, &opts).expect("fluid run");
    let fluid_wall = t.elapsed().as_secs_f64();
    let (fluid_iters, fluid_slow) = summary(&fluid);
    println!(
        "fabric on lab hosts: {hosts} hosts x {vms} VMs ({} flows), {} virtual s, dt {} us: \
         {wall:.2} s wall, peak RSS {hwm:.0} MiB, {} steps, {iters} iterations, mean slowdown vs \
         alone {slow:.3}; fluid model: {fluid_wall:.2} s wall, {fluid_iters} iterations, mean \
         slowdown {fluid_slow:.3}",
        r.fabric.flows, spec.duration_s, spec.dt_us, r.fabric.steps
    );
}
