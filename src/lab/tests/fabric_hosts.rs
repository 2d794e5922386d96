//! The lab fabric on whole lab hosts (`resex_lab::fabric`): the paper's jobs with real rings,
//! softhca, the monitor and the host core on every host, the links between them the fabric's.

use resex_fabric::paper::{group_spec, PaperConfig, Scheme};
use resex_fabric::{FabricError, FabricSpec, RunOptions};
use resex_lab::fabric::{run_on_hosts, HostsError, HostsOptions, HostsResult, OnHostsError};
use resex_mlcompat::{detect, DetectConfig};

fn spec(jobs: &[&str], scheme: Scheme) -> FabricSpec {
    group_spec(jobs, scheme, &PaperConfig::default()).unwrap()
}

fn run(spec: &FabricSpec, secs: f64, traffic: bool) -> HostsResult {
    let opts = RunOptions {
        duration_s: Some(secs),
        traffic,
        ..RunOptions::default()
    };
    run_on_hosts(spec, &opts, &HostsOptions::default(), |_, _| {}).unwrap()
}

#[test]
fn one_job_alone_runs_at_its_alone_time_and_the_monitor_counts_every_byte() {
    // One VGG19 job: two workers on either side of the bottleneck.
    let mut s = spec(&["vgg19", "vgg19"], Scheme::Fair);
    s.jobs.truncate(1);
    let r = run(&s, 1.5, true);
    let j = &r.fabric.jobs[0];
    let mean = j.mean_after(1).unwrap();
    println!(
        "alone: {mean:.2} ms against {:.2} ms in the fluid model's terms",
        j.alone_ms
    );
    // The wire's headers (30 B per 4 KiB packet), completion latencies, DCQCN at line rate.
    assert!(
        (mean / j.alone_ms - 1.0).abs() < 0.03,
        "{mean} against {}",
        j.alone_ms
    );
    // Every byte of every finished iteration was counted by the host's monitor, from the rings.
    let iters = j.iter_ms.len() as u64;
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let per_iter = j.flow_bytes.round() as u64;
    assert_eq!(r.fabric.traffic.len(), 2);
    for v in &r.fabric.traffic {
        let counted: u64 = v.bytes.iter().sum();
        assert!(
            counted >= per_iter * iters && counted <= per_iter * (iters + 1),
            "{}: {counted} bytes counted, {iters} iterations of {per_iter}",
            v.vm
        );
    }
    // Each host's own result: its worker's packets through the core's counts.
    assert_eq!(r.hosts.len(), 2);
    for h in &r.hosts {
        assert!(h.vms[0].mtus > 0 && h.vms[0].tx_mbps > 1000.0, "{h:?}");
    }
}

#[test]
fn periods_are_found_in_the_monitors_counts() {
    let r = run(&spec(&["bert", "vgg19"], Scheme::Fair), 3.0, true);
    for v in &r.fabric.traffic {
        let job = r.fabric.jobs.iter().find(|j| j.name == v.job).unwrap();
        let it = job.mean_after(1).unwrap();
        let p = detect(&v.bytes, 1_000_000, &DetectConfig::default()).unwrap();
        let found = p.period_ns as f64 / 1e6;
        println!("{}: period {found:.2} ms, iterations {it:.2} ms", v.vm);
        assert!((found / it - 1.0).abs() < 0.05, "{}: {found} vs {it}", v.vm);
    }
}

#[test]
fn unfairness_slides_compatible_jobs_apart_on_lab_hosts() {
    let s = |scheme| spec(&["vgg19", "vgg19"], scheme);
    let fair = run(&s(Scheme::Fair), 4.0, false);
    let unfair = run(&s(Scheme::Unfair), 4.0, false);
    for (f, u) in fair.fabric.jobs.iter().zip(&unfair.fabric.jobs) {
        let (f, u) = (f.mean_after(8).unwrap(), u.mean_after(8).unwrap());
        println!("fair {f:.1} ms, unfair {u:.1} ms: {:.2}x", f / u);
        assert!(f / u >= 1.2, "fair {f} unfair {u}");
    }
}

#[test]
fn what_lab_hosts_cannot_run_is_refused_in_one_line() {
    let opts = RunOptions {
        duration_s: Some(0.01),
        ..RunOptions::default()
    };
    let mut s = spec(&["vgg19", "vgg19"], Scheme::Fair);
    s.net.mtu = 1024.0;
    let e = run_on_hosts(&s, &opts, &HostsOptions::default(), |_, _| {}).unwrap_err();
    assert!(e.to_string().contains("MTU is 4096"), "{e}");
    assert!(
        matches!(e, HostsError::OnHosts(OnHostsError::Mtu { mtu }) if mtu == 1024.0),
        "{e:?}"
    );
    let mut s = spec(&["vgg19", "vgg19"], Scheme::Fair);
    s.dt_us = 3.0;
    let e = run_on_hosts(&s, &opts, &HostsOptions::default(), |_, _| {}).unwrap_err();
    assert!(e.to_string().contains("must divide"), "{e}");
    assert!(
        matches!(e, HostsError::OnHosts(OnHostsError::Step { .. })),
        "{e:?}"
    );
    let s = spec(&["vgg19", "vgg19"], Scheme::Fair);
    let long = RunOptions {
        duration_s: Some(2e4),
        ..RunOptions::default()
    };
    let e = run_on_hosts(&s, &long, &HostsOptions::default(), |_, _| {}).unwrap_err();
    assert_eq!(e.to_string(), "duration 20000 s: must be in (0, 1e4]");
    assert!(
        matches!(e, HostsError::Fabric(FabricError::Duration { max, .. }) if max == 1e4),
        "{e:?}"
    );
}
