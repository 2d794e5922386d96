//! The fabric at scale (issue 20, item 1): 100 hosts x 32 VMs (800 four-worker ring jobs on a
//! 2:1 leaf-spine), 10 virtual seconds. Prints wall time, steps, peak memory (VmHWM) and the
//! iterations done. `cargo bench -p resex-fabric --bench scale [-- HOSTS VMS SECONDS DT_US]`.

use resex_fabric::{generate::leaf_spine_from_args, run, RunOptions};
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let spec = leaf_spine_from_args(&args);
    let t = Instant::now();
    let r = run(&spec, &RunOptions::default()).expect("run");
    let wall = t.elapsed().as_secs_f64();
    println!(
        "fabric scale: {} ({} flows, {} links), {} virtual s, dt {} us: {wall:.2} s wall, {} \
         steps, {} iterations, mean slowdown vs alone {:.3}, peak RSS {:.0} MiB",
        spec.name,
        r.flows,
        r.links,
        spec.duration_s,
        spec.dt_us,
        r.steps,
        r.iterations(),
        r.mean_slowdown(),
        resex_rt::peak_rss_mib().unwrap_or(f64::NAN)
    );
}
