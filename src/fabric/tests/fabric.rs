//! The fabric: exact times alone, fair sharing, strict priority, determinism, periods found in
//! its per-VM traffic, the paper's experiment's shape, and clear errors.

use resex_fabric::error::JobError;
use resex_fabric::error::NetError;
use resex_fabric::paper::{group, PaperConfig};
use resex_fabric::spec::{CcSpec, NetSpec};
use resex_fabric::{
    run, FabricError, FabricLink, FabricSpec, HostSpec, JobSpec, RouteSpec, RunOptions,
};

fn host(n: &str) -> HostSpec {
    HostSpec {
        name: n.into(),
        nic_gbps: 50.0,
        tor: None,
    }
}

/// `jobs` two-worker jobs (compute, MB) across one 50 Gb/s link.
fn shared(jobs: &[(f64, f64)], prio: bool) -> FabricSpec {
    let mut s = FabricSpec {
        name: "t".into(),
        description: String::new(),
        duration_s: 2.0,
        dt_us: 5.0,
        seed: 1,
        cc: CcSpec::default(),
        net: NetSpec {
            priority_queues: prio,
            ..NetSpec::default()
        },
        hosts: Vec::new(),
        tors: Vec::new(),
        links: vec![
            FabricLink {
                name: "l1".into(),
                gbps: 50.0,
                priority_queues: None,
                record: true,
            },
            FabricLink {
                name: "l1r".into(),
                gbps: 50.0,
                priority_queues: None,
                record: false,
            },
        ],
        routes: Vec::new(),
        jobs: Vec::new(),
        chunk_kib: None,
    };
    for (i, &(c, mb)) in jobs.iter().enumerate() {
        let (a, b) = (format!("a{i}"), format!("b{i}"));
        s.hosts.push(host(&a));
        s.hosts.push(host(&b));
        s.routes.push(RouteSpec {
            from: a.clone(),
            to: b.clone(),
            links: vec!["l1".into()],
            both_ways: false,
        });
        s.routes.push(RouteSpec {
            from: b.clone(),
            to: a.clone(),
            links: vec!["l1r".into()],
            both_ways: false,
        });
        let mut j = JobSpec::of_preset(&format!("j{i}"), "vgg19", &[&a, &b]);
        j.preset = None;
        j.compute_ms = Some(c);
        j.comm_mb = Some(mb);
        j.priority = u8::try_from(i).unwrap();
        s.jobs.push(j);
    }
    s
}

#[test]
fn a_job_alone_takes_compute_plus_wire_time() {
    // 20 ms compute, 62.5 MB at 6.25 GB/s = 10 ms.
    let r = run(&shared(&[(20.0, 62.5)], false), &RunOptions::default()).unwrap();
    let j = &r.jobs[0];
    assert_eq!(j.alone_ms, 30.0);
    assert!(j.iter_ms.len() >= 60, "{}", j.iter_ms.len());
    for t in &j.iter_ms {
        assert!((t - 30.0).abs() < 0.01, "{t}");
    }
    assert_eq!(j.cnps, 0);
    // The link's record: full while communicating, a third of the time.
    let s = &r.series[0];
    let mean: f64 = s.util.iter().map(|b| b[0]).sum::<f64>() / s.util.len() as f64;
    assert!((mean - 1.0 / 3.0).abs() < 0.02, "{mean}");
}

#[test]
fn a_pipeline_job_sends_one_way_only() {
    // The same job one way: one flow (a to b), its iterations as the ring's alone, and the
    // link back carries nothing.
    let mut s = shared(&[(20.0, 62.5)], false);
    s.jobs[0].pattern = resex_fabric::spec::Pattern::Pipeline;
    let r = run(&s, &RunOptions::default()).unwrap();
    assert_eq!(r.flows, 1);
    let j = &r.jobs[0];
    assert_eq!(j.vms, ["j0/w0@a0"]);
    assert_eq!(j.alone_ms, 30.0);
    assert!(
        j.iter_ms.iter().all(|t| (t - 30.0).abs() < 0.01),
        "{:?}",
        j.iter_ms
    );
}

#[test]
fn two_equal_jobs_started_together_share_fairly_and_slow_down() {
    let r = run(
        &shared(&[(20.0, 62.5), (20.0, 62.5)], false),
        &RunOptions::default(),
    )
    .unwrap();
    let (a, b) = (&r.jobs[0], &r.jobs[1]);
    assert_eq!(a.iter_ms, b.iter_ms, "symmetric jobs, symmetric results");
    let m = a.mean_after(2).unwrap();
    assert!(m > 38.0, "both communicating at once: {m} ms");
    assert!(a.cnps > 0);
}

#[test]
fn strict_priority_keeps_the_first_class_at_its_alone_time() {
    let r = run(
        &shared(&[(20.0, 62.5), (20.0, 62.5)], true),
        &RunOptions::default(),
    )
    .unwrap();
    let first = r.jobs[0].mean_after(0).unwrap();
    assert!((first - 30.0).abs() < 0.05, "{first}");
    // The second waits behind the first only once: then it slides into the first's compute.
    let second = r.jobs[1].mean_after(2).unwrap();
    assert!((second - 30.0).abs() < 0.05, "{second}");
}

#[test]
fn runs_repeat_exactly() {
    let s = FabricSpec::from_toml(include_str!(
        "../../../tools/scenarios/fabric/two-jobs.toml"
    ))
    .unwrap();
    let o = RunOptions {
        duration_s: Some(1.5),
        ..RunOptions::default()
    };
    let a = run(&s, &o).unwrap();
    let b = run(&s, &o).unwrap();
    assert_eq!(a, b);
    assert_eq!(a.jobs.len(), 2);
    assert!(a.jobs.iter().all(|j| j.iter_ms.len() >= 3));
}

#[test]
fn the_period_is_found_in_the_fabrics_exact_traffic() {
    // Two compatible jobs of one period (23 + 6.4 ms, 17 + 12.4 ms) that start overlapping
    // and slide apart: then each runs at its own time again.
    let mut s = shared(&[(23.0, 40.0), (17.0, 77.5)], false);
    s.duration_s = 1.5;
    s.jobs[1].start_ms = 7.0;
    let r = run(
        &s,
        &RunOptions {
            traffic: true,
            ..RunOptions::default()
        },
    )
    .unwrap();
    for j in &r.jobs {
        let truth = j.mean_after(3).unwrap();
        let vm = r.traffic.iter().find(|v| v.job == j.name).unwrap();
        let p = resex_mlcompat::detect(
            &vm.bytes,
            1_000_000,
            &resex_mlcompat::DetectConfig::default(),
        )
        .unwrap();
        let found = p.period_ns as f64 / 1e6;
        assert!(
            (found / truth - 1.0).abs() < 0.05,
            "{}: found {found} ms, runs {truth} ms",
            j.name
        );
    }
}

#[test]
fn the_papers_experiment_has_its_shape() {
    let cfg = PaperConfig {
        iterations: 20,
        ..PaperConfig::default()
    };
    // Compatible: unfairness and the adaptive scheme speed both jobs up by 1.2x or more.
    let (row, _) = group(&["dlrm", "dlrm"], &cfg).unwrap();
    assert_eq!(row.compat_score, Some(1.0));
    for (u, a) in row.unfair_speedup.iter().zip(&row.adaptive_speedup) {
        assert!(*u >= 1.2 && *a >= 1.2, "{row:?}");
    }
    // Incompatible: the adaptive scheme hurts no job by more than 5%.
    let (row, _) = group(&["bert", "vgg19"], &cfg).unwrap();
    assert!(row.compat_score.unwrap() < 1.0);
    for s in &row.adaptive_speedup {
        assert!(*s >= 0.95, "{row:?}");
    }
}

#[test]
fn mistakes_get_clear_errors() {
    let mut s = shared(&[(20.0, 10.0)], false);
    s.jobs[0].workers[1] = "nowhere".into();
    let e = run(&s, &RunOptions::default()).unwrap_err();
    assert!(
        matches!(e, FabricError::Unknown { what: "host", .. }),
        "{e}"
    );
    let mut s = shared(&[(20.0, 10.0)], false);
    s.jobs[0].workers.truncate(1);
    let e = run(&s, &RunOptions::default()).unwrap_err();
    assert!(e.to_string().contains("two or more workers"), "{e}");
    assert!(
        matches!(
            e,
            FabricError::Job {
                problem: JobError::TooFewWorkers { workers: 1 },
                ..
            }
        ),
        "{e:?}"
    );
    let mut s = shared(&[(20.0, 10.0)], false);
    s.jobs[0].preset = Some("alexnet".into());
    s.jobs[0].compute_ms = None;
    let e = run(&s, &RunOptions::default()).unwrap_err().to_string();
    assert!(e.contains("alexnet") && e.contains("vgg19"), "{e}");
    let mut s = shared(&[(20.0, 10.0)], false);
    s.hosts.push(host("a0"));
    assert!(matches!(
        run(&s, &RunOptions::default()),
        Err(FabricError::Duplicate { .. })
    ));
    let mut s = shared(&[(20.0, 10.0)], false);
    s.links[0].gbps = f64::NAN;
    assert!(matches!(
        run(&s, &RunOptions::default()),
        Err(FabricError::Rate { what: "link", .. })
    ));
    let mut s = shared(&[(20.0, 10.0)], false);
    s.dt_us = 0.0;
    let e = run(&s, &RunOptions::default()).unwrap_err();
    assert!(
        matches!(e, FabricError::Step { dt_us } if dt_us == 0.0),
        "{e:?}"
    );
    assert_eq!(e.to_string(), "dt_us 0: must be 0.1..=1000");
    let e = run(
        &shared(&[(20.0, 10.0)], false),
        &RunOptions {
            duration_s: Some(2e5),
            ..RunOptions::default()
        },
    )
    .unwrap_err();
    assert_eq!(e.to_string(), "duration 200000 s: must be in (0, 1e5]");
    // [net]'s values are checked, each with its name.
    for (what, set) in [
        (
            "kmax_kb",
            (|n: &mut resex_fabric::spec::NetSpec| n.kmax_kb = 1.0) as fn(&mut _),
        ),
        ("kmin_kb", |n| n.kmin_kb = f64::NAN),
        ("pmax", |n| n.pmax = 2.0),
        ("buffer_kb", |n| n.buffer_kb = 0.0),
        ("mtu", |n| n.mtu = 0.0),
    ] {
        let mut s = shared(&[(20.0, 10.0)], false);
        set(&mut s.net);
        let e = run(&s, &RunOptions::default()).unwrap_err();
        assert!(matches!(e, FabricError::Net(_)), "{what}: {e:?}");
        assert!(e.to_string().contains(what), "{what}: {e}");
    }
    let mut s = shared(&[(20.0, 10.0)], false);
    s.net.kmax_kb = 1.0;
    assert!(matches!(
        run(&s, &RunOptions::default()),
        Err(FabricError::Net(NetError::Thresholds { kmax_kb, .. })) if kmax_kb == 1.0
    ));
    let e =
        FabricSpec::from_toml("name = \"x\"\nduration_s = 1\n[[host]]\nname = \"a\"\nbogus = 1\n")
            .unwrap_err();
    assert!(e.to_string().contains("bogus"), "{e}");
}
