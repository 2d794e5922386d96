use super::*;
use crate::record::VmSummary;

/// 1 000 Mb/s: 125 MB/s, 25 MB per 200 ms.
const MB_PER_200MS: f64 = 25e6;

fn vm(name: &str, period: Option<(f64, f64)>) -> VmSummary {
    VmSummary {
        name: name.into(),
        period: period.map(|(share, start_ms)| JobPeriod {
            period_ms: 200.0,
            last_start_unix_ms: 1_790_000_000_000.0 + start_ms,
            bytes_per_period: share * MB_PER_200MS,
            duty: 0.02,
            confidence: 0.9,
            latest_period_ms: None,
        }),
        ..VmSummary::default()
    }
}

fn host(name: &str, vms: Vec<VmSummary>) -> HostSummary {
    HostSummary {
        host: name.into(),
        at_unix_ms: 0,
        policy: String::new(),
        link_util: 0.0,
        vms,
    }
}

fn topo() -> Topology {
    Topology::from_toml(
        "[[link]]\nname = \"r1-up\"\ncapacity_mbps = 1000\nhosts = [\"a\", \"b\"]\n\
         [[link]]\nname = \"r2-up\"\ncapacity_mbps = 1000\nhosts = [\"c\", \"d\"]\n",
    )
    .unwrap()
}

fn fleet() -> Vec<HostSummary> {
    vec![
        host("a", vec![vm("half", Some((0.5, 100.0))), vm("web", None)]),
        host("b", vec![]),
        host("c", vec![vm("heavy", Some((0.8, 0.0)))]),
        host("d", vec![vm("web", None)]),
    ]
}

/// A job needing the link for half of a 200 ms iteration on 1 000 Mb/s.
fn half(name: &str) -> NewJob {
    NewJob {
        name: name.into(),
        preset: None,
        compute_ms: Some(100.0),
        bytes: Some(0.5 * MB_PER_200MS),
    }
}

fn file(jobs: Vec<NewJob>) -> JobsFile {
    JobsFile {
        max_jobs_per_host: 1,
        job: jobs,
    }
}

#[test]
fn a_job_goes_where_it_fits_beside_what_runs_and_the_next_one_where_it_hurts_least() {
    let got = advise(&topo(), &fleet(), &file(vec![half("new-1"), half("new-2")])).unwrap();
    let first = &got[0];
    assert_eq!(first.host.as_deref(), Some("b"), "{got:?}");
    assert!(first.score > 0.99, "half + half fits rotated: {first:?}");
    assert_eq!(first.links, [("r1-up".to_string(), 2, first.score)]);
    assert_eq!(first.candidates, 2, "a and c already run a job each");
    // r1-up now carries two halves: a third would be 1.5 links' worth; beside the 0.8 job on
    // r2-up it is 1.3, the lesser harm.
    let second = &got[1];
    assert_eq!(second.host.as_deref(), Some("d"), "{got:?}");
    assert!(
        (second.score - (1.0 - 0.3 / 1.3)).abs() < 0.02,
        "{second:?}"
    );
    assert_eq!(second.candidates, 1);
}

#[test]
fn no_room_is_said_and_the_heaviest_job_goes_first() {
    let mut jobs = vec![half("small"), half("big"), half("third")];
    jobs[1].bytes = Some(0.6 * MB_PER_200MS);
    let got = advise(&topo(), &fleet(), &file(jobs)).unwrap();
    let order: Vec<&str> = got.iter().map(|a| a.job.as_str()).collect();
    assert_eq!(order, ["big", "small", "third"]);
    assert!(got[2].host.is_none() && got[2].candidates == 0, "{got:?}");
}

#[test]
fn presets_and_refusals() {
    let vgg = NewJob {
        name: "v".into(),
        preset: Some("vgg19".into()),
        compute_ms: None,
        bytes: None,
    };
    let got = advise(&topo(), &fleet(), &file(vec![vgg.clone()])).unwrap();
    assert_eq!(got[0].host.as_deref(), Some("b"), "{got:?}");
    for (bad, want) in [
        (
            NewJob {
                preset: Some("alexnet".into()),
                ..vgg.clone()
            },
            "unknown preset \"alexnet\"",
        ),
        (
            NewJob {
                compute_ms: Some(10.0),
                ..vgg.clone()
            },
            "give either preset, or compute_ms and bytes",
        ),
        (
            NewJob {
                bytes: Some(f64::NAN),
                ..half("n")
            },
            "bytes NaN",
        ),
    ] {
        let e = advise(&topo(), &fleet(), &file(vec![bad]))
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{e}");
    }
    let e = advise(&topo(), &fleet(), &file(vec![half("x"), half("x")])).unwrap_err();
    assert_eq!(e, AdviseError::Duplicate("x".into()));
    let many: Vec<NewJob> = (0..=MAX_NEW_JOBS).map(|i| half(&format!("j{i}"))).collect();
    assert!(matches!(
        advise(&topo(), &fleet(), &file(many)),
        Err(AdviseError::TooMany(_))
    ));
}

#[test]
fn hosts_outside_the_topology_are_not_candidates() {
    let mut f = fleet();
    f.push(host("zz-unlisted", vec![]));
    let got = advise(&topo(), &f, &file(vec![half("n")])).unwrap();
    assert_eq!(got[0].host.as_deref(), Some("b"), "{got:?}");
    assert_eq!(got[0].candidates, 2);
}

#[test]
fn empty_links_cost_no_budget_and_a_spent_budget_is_counted_not_scored_zero() {
    // 600 one-host links; the first 520 hosts (by name) run a job needing 80% of theirs.
    let names: Vec<String> = (0..600).map(|i| format!("h{i:03}")).collect();
    let mut toml = String::new();
    for n in &names {
        toml.push_str(&format!(
            "[[link]]\nname = \"{n}-up\"\ncapacity_mbps = 1000\nhosts = [\"{n}\"]\n"
        ));
    }
    let t = Topology::from_toml(&toml).unwrap();
    let summaries: Vec<HostSummary> = names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            host(
                n,
                if i < 520 {
                    vec![vm("j", Some((0.8, 0.0)))]
                } else {
                    vec![]
                },
            )
        })
        .collect();
    let jobs = JobsFile {
        max_jobs_per_host: 2,
        job: vec![half("n")],
    };
    let got = advise(&t, &summaries, &jobs).unwrap();
    let a = &got[0];
    assert!(
        a.score > 0.99,
        "an empty link scores 1 without a circle: {a:?}"
    );
    assert_eq!(a.host.as_deref(), Some("h520"));
    assert_eq!(a.not_evaluated, 520 - MAX_LINK_SCORES, "{a:?}");
    assert_eq!(a.candidates, 600 - a.not_evaluated);
}

#[test]
fn a_jobs_period_is_set_by_its_hosts_narrowest_link() {
    // e behind a 100 Mb/s rack link and the 1 Gb/s spine.
    let t = Topology::from_toml(
        "[[link]]\nname = \"spine\"\ncapacity_mbps = 1000\nhosts = [\"e\", \"f\"]\n\
         [[link]]\nname = \"rack\"\ncapacity_mbps = 100\nhosts = [\"e\"]\n",
    )
    .unwrap();
    let paths = t.paths();
    assert_eq!(bottleneck(&t, &paths["e"]), 100.0);
    // 100 ms of compute and 12.5 MB: 1 s on the rack link, so an iteration of 1.1 s, of which
    // its bytes take 100 ms on the spine (not a 200 ms iteration, half of it on the spine).
    let period_ms = 100.0 + comm_ms(0.5 * MB_PER_200MS, bottleneck(&t, &paths["e"]));
    assert!((period_ms - 1100.0).abs() < 1e-9);
    let on_spine = new_on(period_ms, 0.5 * MB_PER_200MS, 1000.0);
    assert_eq!(on_spine.period_ns, 1_100_000_000);
    let arc = &on_spine.arcs[0];
    assert!(
        (arc.end - arc.start - 100.0 / 1100.0).abs() < 1e-9,
        "{arc:?}"
    );
    let got = advise(
        &t,
        &[host("e", vec![]), host("f", vec![])],
        &file(vec![half("n")]),
    )
    .unwrap();
    assert_eq!(
        got[0].links.len(),
        2,
        "e, with more links, by name: {got:?}"
    );
}
