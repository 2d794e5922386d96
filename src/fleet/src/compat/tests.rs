use super::*;
use crate::record::VmSummary;

/// A 1 000 Mb/s link: 125 MB/s, 25 MB in a 200 ms period.
const LINK_BYTES_PER_200MS: f64 = 25e6;

/// A job whose latest arc began `start_ms` after a common instant.
fn job(name: &str, period_ms: f64, start_ms: f64, wire_share: f64) -> VmSummary {
    VmSummary {
        name: name.into(),
        period: Some(JobPeriod {
            period_ms,
            last_start_unix_ms: 1_790_000_000_000.0 + start_ms,
            bytes_per_period: wire_share * LINK_BYTES_PER_200MS * period_ms / 200.0,
            duty: 0.01, // posted at once: the arc is what its bytes need on the wire
            confidence: 0.9,
            latest_period_ms: None,
        }),
        ..VmSummary::default()
    }
}

fn summary(host: &str, vms: Vec<VmSummary>) -> HostSummary {
    HostSummary {
        host: host.into(),
        at_unix_ms: 0,
        policy: String::new(),
        link_util: 0.0,
        vms,
    }
}

fn topo() -> Topology {
    Topology::from_toml(
        "[[link]]\nname = \"up\"\ncapacity_mbps = 1000\nhosts = [\"a\", \"b\"]\n\
         [[link]]\nname = \"c-up\"\ncapacity_mbps = 1000\nhosts = [\"c\"]\n\
         [[link]]\nname = \"quiet\"\ncapacity_mbps = 1000\nhosts = [\"d\"]\n",
    )
    .unwrap()
}

fn scores(s: &[HostSummary]) -> Vec<LinkCompat> {
    let refs: Vec<&HostSummary> = s.iter().collect();
    score_links(&topo(), &refs, 0).0
}

#[test]
fn two_jobs_that_collide_now_but_fit_rotated_score_one_at_best() {
    // Each needs the whole link for a quarter of its 200 ms; both start at 0 now.
    let s = vec![
        summary("a", vec![job("ja", 200.0, 0.0, 0.25)]),
        summary("b", vec![job("jb", 200.0, 0.0, 0.25)]),
        summary("c", vec![job("alone", 100.0, 10.0, 0.5)]),
        summary("d", vec![]),
    ];
    let l = scores(&s);
    assert_eq!(
        l.len(),
        2,
        "the link without periodic jobs is not listed: {l:?}"
    );
    let up = &l[0];
    assert_eq!(up.link, "up");
    let best = up.score.unwrap();
    let now = up.score_as_given.unwrap();
    assert!(best > 0.99, "{up:?}");
    assert!(
        (now - 0.5).abs() < 0.02,
        "half their communication collides: {up:?}"
    );
    let shift = (up.jobs[1].shift_ms.unwrap() - up.jobs[0].shift_ms.unwrap()).abs();
    assert!((50.0..=150.0).contains(&shift), "rotated apart: {up:?}");
    assert_eq!(l[1].link, "c-up");
    assert!(l[1].score.is_none());
    assert!(l[1]
        .why_not
        .as_deref()
        .unwrap()
        .contains("one periodic job"));
}

#[test]
fn jobs_that_cannot_fit_score_below_one_however_rotated() {
    let s = vec![
        summary("a", vec![job("ja", 200.0, 0.0, 0.6)]),
        summary("b", vec![job("jb", 200.0, 30.0, 0.6)]),
    ];
    let up = &scores(&s)[0];
    let best = up.score.unwrap();
    // 1.2 links' worth of demand-time, 0.2 above capacity at best: 1 - 0.2 / 1.2.
    assert!((best - 0.833).abs() < 0.02, "{up:?}");
    assert!(up.score_as_given.unwrap() <= best + 1e-9);
}

#[test]
fn implausible_periods_are_skipped_and_a_crowded_link_is_bounded() {
    let mut bad = job("bad", 200.0, 0.0, 0.25);
    bad.period.as_mut().unwrap().last_start_unix_ms = f64::INFINITY;
    let mut nan = job("nan", f64::NAN, 0.0, 0.25);
    nan.period.as_mut().unwrap().bytes_per_period = 1.0;
    let many: Vec<VmSummary> = (0..12)
        .map(|i| job(&format!("j{i}"), 200.0, 0.0, 0.01 * f64::from(i + 1)))
        .collect();
    let s = vec![summary("a", vec![bad, nan]), summary("b", many)];
    let up = &scores(&s)[0];
    assert_eq!(up.jobs.len(), MAX_LINK_JOBS);
    assert_eq!(up.jobs_left_out, 12 - MAX_LINK_JOBS);
    assert_eq!(up.jobs[0].vm, "j11", "the heaviest first: {up:?}");
    assert!(up.jobs.iter().all(|j| j.vm != "bad" && j.vm != "nan"));
    assert!(up.score.is_some(), "{up:?}");
}

#[test]
fn the_report_is_bounded_rotates_the_links_scored_and_clips_names() {
    // 300 two-host links, each with two compatible jobs.
    let mut toml = String::new();
    let mut s = Vec::new();
    for i in 0..300 {
        toml.push_str(&format!(
            "[[link]]\nname = \"l{i}\"\ncapacity_mbps = 1000\nhosts = [\"a{i}\", \"b{i}\"]\n"
        ));
        s.push(summary(
            &format!("a{i}"),
            vec![job(&"x".repeat(1000), 200.0, 0.0, 0.25)],
        ));
        s.push(summary(&format!("b{i}"), vec![job("jb", 200.0, 0.0, 0.25)]));
    }
    let t = Topology::from_toml(&toml).unwrap();
    let refs: Vec<&HostSummary> = s.iter().collect();
    let (links, left_out) = score_links(&t, &refs, 0);
    assert_eq!(
        (links.len(), left_out),
        (MAX_REPORTED_LINKS, 300 - MAX_REPORTED_LINKS)
    );
    let scored: Vec<&str> = links
        .iter()
        .filter(|l| l.score.is_some())
        .map(|l| l.link.as_str())
        .collect();
    assert_eq!(scored.len(), MAX_SCORED_LINKS);
    assert_eq!((scored[0], scored[MAX_SCORED_LINKS - 1]), ("l0", "l31"));
    assert!(links
        .iter()
        .all(|l| l.jobs.iter().all(|j| j.vm.len() <= MAX_NAME)));
    // The next round goes on from there.
    let (links, _) = score_links(&t, &refs, MAX_SCORED_LINKS);
    let first = links.iter().find(|l| l.score.is_some()).unwrap();
    assert_eq!(first.link, "l32");
    let report = crate::alloc::RoundReport {
        links,
        ..Default::default()
    };
    assert!(serde_json::to_vec(&report).unwrap().len() < crate::alloc::MAX_ALLOC_BYTES);
}

/// A job measured as `resex fleet demo --jobs` measured its jobs on a 100 Mb/s uplink: its
/// period stretched by a collision, its arc (`duty`) as long as it took while sharing.
fn stretched(name: &str, period_ms: f64, duty: f64, bytes: f64) -> VmSummary {
    VmSummary {
        name: name.into(),
        period: Some(JobPeriod {
            period_ms,
            last_start_unix_ms: 1_790_000_000_000.0,
            bytes_per_period: bytes,
            duty,
            confidence: 0.8,
            latest_period_ms: None,
        }),
        ..VmSummary::default()
    }
}

#[test]
fn colliding_jobs_are_scored_by_their_periods_alone() {
    let t = Topology::from_toml(
        "[[link]]\nname = \"up\"\ncapacity_mbps = 100\nhosts = [\"a\", \"b\"]\n",
    )
    .unwrap();
    let score = |j: VmSummary| {
        let s = [
            summary("a", vec![j.clone()]),
            summary(
                "b",
                vec![VmSummary {
                    name: "other".into(),
                    ..j
                }],
            ),
        ];
        let refs: Vec<&HostSummary> = s.iter().collect();
        score_links(&t, &refs, 0).0[0].score.unwrap()
    };
    // Pair b: 307 ms with an arc of 0.89 of it while colliding; 1.5 MiB is 126 ms at 100 Mb/s:
    // 156 ms alone, and two 126 ms arcs do not fit (measured as it ran, they did: 1.00).
    let b = score(stretched("jb", 307.0, 0.89, 1.5 * 1_048_576.0));
    assert!(b < 0.9, "the incompatible pair scores {b}");
    // Pair a: 264 ms, 0.6 of it on, 1.1 MiB (92 ms): 198 ms alone, two arcs fit.
    let a = score(stretched("ja", 264.0, 0.6, 1.1 * 1_048_576.0));
    assert!(a >= 0.9, "the compatible pair scores {a}");
    // Measured at its wire time or less (posted at once), a job is taken as measured.
    let p = stretched("x", 200.0, 0.01, 1e6).period.unwrap();
    assert_eq!(alone(&p, 100.0), p);
}

#[test]
fn periods_a_few_percent_apart_are_one_period() {
    let t = Topology::from_toml(
        "[[link]]\nname = \"up\"\ncapacity_mbps = 100\nhosts = [\"a\", \"b\"]\n",
    )
    .unwrap();
    // One job run twice, measured 343 and 355 ms (3.5% apart), 94 ms on the wire each: they
    // fit in turns.
    let bytes = 1_179_648.0;
    let s = [
        summary("a", vec![stretched("a1", 343.0, 0.28, bytes)]),
        summary("b", vec![stretched("a2", 355.0, 0.27, bytes)]),
    ];
    let refs: Vec<&HostSummary> = s.iter().collect();
    let score = score_links(&t, &refs, 0).0[0].score.unwrap();
    assert!(score >= 0.99, "scored {score}");
    // The grouping: within 5% of the group's shortest, the mean; arcs keep their length.
    let p = |period_ms: f64| JobPeriod {
        period_ms,
        last_start_unix_ms: 0.0,
        bytes_per_period: 1.0,
        duty: 50.0 / period_ms,
        confidence: 1.0,
        latest_period_ms: None,
    };
    let mut ps = [p(209.0), p(100.0), p(104.0), p(200.0), p(300.0), p(211.0)];
    same_periods(&mut ps);
    let got: Vec<f64> = ps.iter().map(|p| p.period_ms).collect();
    assert_eq!(got, [204.5, 102.0, 102.0, 204.5, 300.0, 211.0]);
    assert!(ps
        .iter()
        .all(|p| (p.duty * p.period_ms - 50.0).abs() < 1e-9));
}

#[test]
fn jobs_measured_at_one_period_stay_one_period_alone() {
    // The lab's pair a, measured at 315 ms each while they collide, 96 and 94 ms on a 1 Gb/s
    // link, arcs measured 132 and 148 ms: alone, 279 and 261 ms (6% apart) scored 0.82 as two
    // periods; at one period two 95 ms arcs fit in turns.
    let t = Topology::from_toml(
        "[[link]]\nname = \"up\"\ncapacity_mbps = 1000\nhosts = [\"a\", \"b\"]\n",
    )
    .unwrap();
    let s = [
        summary("a", vec![stretched("a1", 315.0, 0.42, 12.0e6)]),
        summary("b", vec![stretched("a2", 315.0, 0.47, 11.8e6)]),
    ];
    let refs: Vec<&HostSummary> = s.iter().collect();
    let score = score_links(&t, &refs, 0).0[0].score.unwrap();
    assert!(score >= 0.99, "scored {score}");
}
