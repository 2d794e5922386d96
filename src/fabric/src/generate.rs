//! Large fabrics built in code: a leaf-spine of `hosts` hosts under ToRs of `per_tor`, each
//! host running `vms` VMs, every VM a worker of a 4-worker ring job whose workers sit on four
//! different hosts (two racks apart when there are racks), the jobs cycling through the presets
//! with seeded starts and jitter. The scale benchmark runs it.

use crate::spec::{FabricSpec, HostSpec, JobSpec, TorSpec};

/// Workers per generated job.
pub const WORKERS: usize = 4;

/// The scale benchmarks' fabric from their arguments `[HOSTS VMS SECONDS DT_US]` (default 100
/// hosts x 32 VMs, 10 virtual s, the leaf-spine's step), racks of 10.
#[must_use]
pub fn leaf_spine_from_args(args: &[String]) -> FabricSpec {
    let arg = |i: usize, d: f64| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let (hosts, vms) = (arg(0, 100.0) as usize, arg(1, 32.0) as usize);
    let mut spec = leaf_spine(hosts, vms, 10, 1);
    spec.duration_s = arg(2, 10.0);
    spec.dt_us = arg(3, spec.dt_us);
    spec
}

/// The leaf-spine (see the module's documentation). `vms * hosts` must be a multiple of 4.
#[must_use]
pub fn leaf_spine(hosts: usize, vms: usize, per_tor: usize, seed: u64) -> FabricSpec {
    let per_tor = per_tor.max(1);
    let racks = hosts.div_ceil(per_tor);
    let tors = (0..racks)
        .map(|t| TorSpec {
            name: format!("t{t}"),
            // 2:1 oversubscribed: half the rack's NIC rate.
            up_gbps: 50.0 * per_tor as f64 / 2.0,
        })
        .collect();
    let host_specs: Vec<HostSpec> = (0..hosts)
        .map(|h| HostSpec {
            name: format!("h{h}"),
            nic_gbps: 100.0,
            tor: Some(format!("t{}", h / per_tor)),
        })
        .collect();
    let presets = resex_mlcompat::preset::names();
    let mut rng = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut jobs = Vec::new();
    // Worker w of job j: host (j + w * stride) mod hosts, one slot of that host's VMs each.
    let total = hosts * vms;
    let stride = (hosts / WORKERS).max(1);
    for j in 0..total / WORKERS {
        let base = j % hosts;
        let workers: Vec<String> = (0..WORKERS)
            .map(|w| format!("h{}", (base + w * stride) % hosts))
            .collect();
        let w: Vec<&str> = workers.iter().map(String::as_str).collect();
        let mut job = JobSpec::of_preset(&format!("j{j}"), presets[j % presets.len()], &w);
        rng = crate::job::xorshift(rng);
        job.start_ms = (rng % 100_000) as f64 / 100.0;
        job.jitter = 0.05;
        // Smaller jobs than the presets (a scale test wants many iterations, not big bytes).
        job.comm_scale = 0.05;
        jobs.push(job);
    }
    FabricSpec {
        name: format!("leaf-spine {hosts} hosts x {vms} VMs"),
        description: "generated".into(),
        duration_s: 10.0,
        // 10 µs: the scale figure (same iterations within 0.02% of a 5 µs step).
        dt_us: 10.0,
        seed,
        cc: crate::spec::CcSpec::default(),
        net: crate::spec::NetSpec::default(),
        hosts: host_specs,
        tors,
        links: Vec::new(),
        routes: Vec::new(),
        jobs,
        chunk_kib: None,
    }
}
