//! Hand-drawn placements, the baseline guarantee on seeded random cases, hostile input.

use super::{place, Link, NamedJob, Placement, Start, MAX_JOBS};
use crate::circle::{CircleConfig, Job};
use crate::error::{CircleError, PlaceError};
use crate::synth::SplitMix64;

const MS: u64 = 1_000_000;

fn job(name: &str, period_ms: u64, end: f64) -> NamedJob {
    NamedJob {
        name: name.into(),
        job: Job::single(period_ms * MS, 0.0, end, 1.0),
    }
}

fn links(n: usize, max_jobs: usize) -> Vec<Link> {
    (0..n)
        .map(|i| Link {
            name: format!("l{i}"),
            max_jobs,
        })
        .collect()
}

fn close(got: f64, want: f64, tol: f64) -> bool {
    (got - want).abs() <= tol
}

/// Every job on exactly one link, no link over its capacity, links in input order.
fn check_complete(p: &Placement, jobs: &[NamedJob], links: &[Link]) {
    assert_eq!(p.links.len(), links.len());
    let mut placed: Vec<&str> = Vec::new();
    for (plan, link) in p.links.iter().zip(links) {
        assert_eq!(plan.link, link.name);
        assert!(plan.jobs.len() <= link.max_jobs, "{plan:?}");
        assert!((0.0..=1.0).contains(&plan.score), "{plan:?}");
        if plan.score_error.is_none() {
            assert_eq!(plan.shifts_ns.len(), plan.jobs.len(), "{plan:?}");
        }
        placed.extend(plan.jobs.iter().map(String::as_str));
    }
    placed.sort_unstable();
    let mut want: Vec<&str> = jobs.iter().map(|j| j.name.as_str()).collect();
    want.sort_unstable();
    assert_eq!(placed, want);
    let worst = p.links.iter().map(|l| l.score).fold(1.0, f64::min);
    assert_eq!(p.worst_score, worst);
}

/// A, B communicate half of each 100 ms period, C, D 70 %. A and B together rotate apart
/// (score 1; 0.999 on the rotation grid), C and D cannot (0.7 + 0.7 > 1: 40 ms of their 140 ms collide at best, 1 - 4/14 =
/// 5/7). A light job beside a heavy one loses 20 ms of 120 ms (1 - 2/12 = 5/6) on both links:
/// the worst link is better (5/6 > 5/7) although the mean is lower (5/6 < 6/7). The advisor
/// pairs each light job with a heavy one; with the input A, C, B, D the round-robin baseline
/// puts A with B and C with D.
#[test]
fn light_jobs_go_beside_heavy_ones() {
    let jobs = [
        job("A", 100, 0.5),
        job("C", 100, 0.7),
        job("B", 100, 0.5),
        job("D", 100, 0.7),
    ];
    let links = links(2, 2);
    let p = place(&jobs, &links).unwrap();
    check_complete(&p, &jobs, &links);
    for plan in &p.links {
        let light = plan.jobs.iter().filter(|j| *j == "A" || *j == "B").count();
        assert_eq!(light, 1, "{p:#?}");
        assert!(close(plan.score, 5.0 / 6.0, 0.01), "{plan:?}");
    }
    assert!(close(p.worst_score, 5.0 / 6.0, 0.01), "{p:#?}");
    let mut pairs: Vec<Vec<String>> = p.baseline.links.iter().map(|l| l.jobs.clone()).collect();
    pairs.sort();
    assert_eq!(pairs, [["A", "B"], ["C", "D"]]);
    assert!(close(p.baseline.worst_score, 5.0 / 7.0, 0.01), "{p:#?}");
    assert!(close(p.baseline.mean_score, (1.0 + 5.0 / 7.0) / 2.0, 0.01));
    assert!(p.worst_score > p.baseline.worst_score + 0.1);
    // In the order A, B, C, D the baseline happens to pair them the same way: a tie.
    let jobs = [
        job("A", 100, 0.5),
        job("B", 100, 0.5),
        job("C", 100, 0.7),
        job("D", 100, 0.7),
    ];
    let p = place(&jobs, &links).unwrap();
    assert!(
        close(p.worst_score, p.baseline.worst_score, 1e-12),
        "{p:#?}"
    );
    assert_eq!(p.start, Start::Greedy);
}

/// Jobs that fit together whole: 60 % beside 40 % on each of two links, where the baseline's
/// input order puts the 60 % jobs together (20 ms of 120 ms collide: 5/6).
#[test]
fn a_fully_compatible_plan_where_the_baseline_collides() {
    let jobs = [
        job("h1", 100, 0.6),
        job("l1", 100, 0.4),
        job("h2", 100, 0.6),
        job("l2", 100, 0.4),
    ];
    let links = links(2, 2);
    let p = place(&jobs, &links).unwrap();
    check_complete(&p, &jobs, &links);
    assert!(close(p.worst_score, 1.0, 0.01), "{p:#?}");
    assert!(close(p.baseline.worst_score, 5.0 / 6.0, 0.01), "{p:#?}");
}

/// Seeded random cases (mixed periods, duties and demands, spare room or none): the advisor's
/// worst link is never below the baseline's, every job is placed once.
#[test]
fn never_worse_than_the_baseline() {
    let mut rng = SplitMix64::new(20);
    let periods = [60, 100, 120, 150, 200, 255, 270];
    for case in 0..24 {
        let n_links = 2 + (rng.next_u64() % 3) as usize;
        let per = 2 + (rng.next_u64() % 2) as usize;
        let n_jobs = n_links * per - (rng.next_u64() % 2) as usize;
        let jobs: Vec<NamedJob> = (0..n_jobs)
            .map(|i| {
                #[allow(clippy::cast_possible_truncation)] // below periods.len()
                let p = periods[(rng.next_u64() % periods.len() as u64) as usize];
                let start = rng.unit() * 0.9;
                let duty = 0.1 + 0.6 * rng.unit();
                NamedJob {
                    name: format!("j{i}"),
                    job: Job::single(p * MS, start, start + duty, 0.5 + rng.unit()),
                }
            })
            .collect();
        let links = links(n_links, per);
        let p = place(&jobs, &links).unwrap();
        check_complete(&p, &jobs, &links);
        assert!(
            p.worst_score >= p.baseline.worst_score - 1e-12,
            "case {case}: {p:#?}"
        );
        assert!(!p.budget_spent, "case {case}");
    }
}

/// A link with no room gets nothing; spare room elsewhere is used.
#[test]
fn links_with_no_room_and_spare_room() {
    let jobs = [job("a", 100, 0.5), job("b", 100, 0.5), job("c", 100, 0.5)];
    let links = vec![
        Link {
            name: "closed".into(),
            max_jobs: 0,
        },
        Link {
            name: "big".into(),
            max_jobs: 4,
        },
        Link {
            name: "small".into(),
            max_jobs: 1,
        },
    ];
    let p = place(&jobs, &links).unwrap();
    check_complete(&p, &jobs, &links);
    assert!(p.links[0].jobs.is_empty() && p.links[0].score == 1.0);
    assert_eq!(p.links[2].jobs.len(), 1);
    // No jobs at all: every link empty, every score 1.
    let p = place(&[], &links).unwrap();
    assert_eq!((p.mean_score, p.worst_score), (1.0, 1.0));
}

/// Three periods no circle of 4 096 slots rounds within 1 % (the shortest needs at least 20
/// slots; every two of them can be): the three together score 0 with the circle's reason, and
/// with room elsewhere the advisor splits them.
#[test]
fn a_group_the_circle_refuses_scores_zero_and_is_split() {
    let periods_ns = [100 * MS, 189_077_438, 244_308_006];
    let jobs: Vec<NamedJob> = periods_ns
        .iter()
        .enumerate()
        .map(|(i, &p)| NamedJob {
            name: format!("p{i}"),
            job: Job::single(p, 0.0, 0.1, 1.0),
        })
        .collect();
    let all: Vec<Job> = jobs.iter().map(|j| j.job.clone()).collect();
    let refused = crate::circle::compatibility(&all, &CircleConfig::default()).unwrap_err();
    assert!(
        matches!(refused, CircleError::NoCommonPerimeter { .. }),
        "{refused:?}"
    );
    let one = links(1, 3);
    let p = place(&jobs, &one).unwrap();
    assert_eq!(p.worst_score, 0.0);
    assert_eq!(p.links[0].score_error, Some(refused));
    assert!(p.links[0].shifts_ns.is_empty());
    let two = links(2, 3);
    let p = place(&jobs, &two).unwrap();
    check_complete(&p, &jobs, &two);
    assert!(p.worst_score > 0.0, "{p:#?}");
    assert!(p
        .links
        .iter()
        .all(|l| l.jobs.len() < 3 && l.score_error.is_none()));
}

#[test]
fn hostile_input_is_an_error() {
    let two = [job("a", 100, 0.5), job("b", 100, 0.5)];
    assert_eq!(place(&two, &[]), Err(PlaceError::NoLinks));
    assert_eq!(
        place(&two, &links(1, 1)),
        Err(PlaceError::NotEnoughRoom { jobs: 2, slots: 1 })
    );
    let mut nan = two.clone();
    nan[1].job.demand = f64::NAN;
    match place(&nan, &links(2, 2)) {
        Err(PlaceError::BadJob { job, reason }) => {
            assert_eq!(job, "b");
            assert!(matches!(reason, CircleError::BadDemand { job: 0, .. }));
        }
        other => panic!("{other:?}"),
    }
    let mut zero = two.clone();
    zero[0].job.period_ns = 0;
    assert!(matches!(
        place(&zero, &links(2, 2)),
        Err(PlaceError::BadJob { .. })
    ));
    let mut arc = two.clone();
    arc[0].job.arcs[0].end = f64::INFINITY;
    assert!(matches!(
        place(&arc, &links(2, 2)),
        Err(PlaceError::BadJob { .. })
    ));
    let same = [job("a", 100, 0.5), job("a", 100, 0.5)];
    assert!(matches!(
        place(&same, &links(2, 2)),
        Err(PlaceError::DuplicateJob { .. })
    ));
    let mut dup_links = links(2, 2);
    dup_links[1].name = "l0".into();
    assert!(matches!(
        place(&two, &dup_links),
        Err(PlaceError::DuplicateLink { .. })
    ));
    assert!(matches!(
        place(&two, &links(1, usize::MAX)),
        Err(PlaceError::LinkTooLarge { .. })
    ));
    let many: Vec<NamedJob> = (0..=MAX_JOBS)
        .map(|i| job(&format!("j{i}"), 100, 0.1))
        .collect();
    assert!(matches!(
        place(&many, &links(32, 32)),
        Err(PlaceError::TooManyJobs { .. })
    ));
    assert!(matches!(
        place(&two, &links(1000, 1)),
        Err(PlaceError::TooManyLinks { .. })
    ));
}

#[test]
fn placement_as_json() {
    let jobs = [job("a", 100, 0.5), job("b", 150, 0.3), job("c", 100, 0.7)];
    let p = place(&jobs, &links(2, 2)).unwrap();
    let v = serde_json::to_value(&p).unwrap();
    assert_eq!(v["worst_score"].as_f64(), Some(p.worst_score));
    assert!(
        v["baseline"]["worst_score"].is_number() && v["start"].is_string(),
        "{v}"
    );
    assert_eq!(v["links"].as_array().map(Vec::len), Some(2));
    // The inputs read back from JSON (unknown keys refused).
    let j: NamedJob = serde_json::from_value(serde_json::to_value(&jobs[0]).unwrap()).unwrap();
    assert_eq!(j, jobs[0]);
    let bad = serde_json::json!({"name": "l", "max_jobs": 2, "gbps": 1});
    assert!(serde_json::from_value::<Link>(bad).is_err());
}
