//! The lab fabric on whole lab hosts at scale (issue 20, item 1): the scale benchmark's
//! leaf-spine (`resex_fabric::generate::leaf_spine`: 4-worker ring jobs at 5% of the presets'
//! bytes, 100 Gb/s NICs, 2:1 ToR uplinks), every host a `LabHost` (rings, softhca, the
//! monitor, the core). Prints wall time, peak memory (VmHWM), iterations and the mean
//! slowdown, beside the fluid model's on the same spec.
//! `cargo bench -p resex-lab --bench fabric_hosts [-- HOSTS VMS SECONDS DT_US]`.

use resex_fabric::{generate::leaf_spine_from_args, run, RunOptions};
use resex_lab::fabric::{run_on_hosts, HostsOptions};
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let spec = leaf_spine_from_args(&args);
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
    let hwm = resex_rt::peak_rss_mib().unwrap_or(f64::NAN);
    let t = Instant::now();
    let fluid = run(&spec, &opts).expect("fluid run");
    let fluid_wall = t.elapsed().as_secs_f64();
    println!(
        "fabric on lab hosts: {} ({} flows), {} virtual s, dt {} us: {wall:.2} s wall, peak RSS \
         {hwm:.0} MiB, {} steps, {} iterations, mean slowdown vs alone {:.3}; fluid model: \
         {fluid_wall:.2} s wall, {} iterations, mean slowdown {:.3}",
        spec.name,
        r.fabric.flows,
        spec.duration_s,
        spec.dt_us,
        r.fabric.steps,
        r.fabric.iterations(),
        r.fabric.mean_slowdown(),
        fluid.iterations(),
        fluid.mean_slowdown()
    );
}
