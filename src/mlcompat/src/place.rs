//! The placement advisor (issue 20, item 5c): which training jobs should share which link, so
//! that the jobs on every link are as compatible as the circle can make them.
//!
//! # Input and output
//!
//! Jobs ([`NamedJob`]: a name and a [`Job`]) and links ([`Link`]: a name and how many jobs it
//! takes). The result, [`Placement`], gives every link its jobs, their compatibility score
//! ([`compatibility`] with [`CircleConfig::default`]; 1 for no job or one) and the rotations
//! that reach it, the mean and the worst score over the links (empty links count, at 1), and
//! the same figures for the naive [`Baseline`]: the jobs in input order dealt round-robin over
//! the links, skipping full ones.
//!
//! # Algorithm
//!
//! 1. *Greedy*: jobs by decreasing weight, duty x demand (the summed length of its arcs, at
//!    most one period, times its demand; ties in input order). Each goes to the link with room
//!    whose score with it added is highest; ties (within 1e-9) go to the link with fewer jobs,
//!    then the first in input order. An empty link scores 1, so the heaviest jobs spread out
//!    first.
//! 2. *Swaps*: for every pair of links and every job on each, swapping the two jobs is
//!    accepted when the lower of the two links' scores rises, or stays equal while their sum
//!    rises (by more than 1e-9). Other links are untouched, so the worst score over all links
//!    never falls. At most [`MAX_SWEEPS`] sweeps; a sweep that accepts nothing ends the pass.
//! 3. The swap pass also runs from the baseline (unless the greedy start spent the budget),
//!    and the better of the two results (the higher worst score, then the higher mean; ties:
//!    the greedy one) is returned. The result is therefore never worse than the baseline on its
//!    worst link, by construction.
//!
//! Swaps alone do not move a job to a link with spare room; with room to spare, the greedy
//! step's spreading is all there is.
//!
//! # When the circle refuses a group
//!
//! Every job is first checked alone ([`compatibility`] of the job by itself), so a zero
//! period, a NaN or negative demand, a bad arc or a period too short to slot is a
//! [`PlaceError::BadJob`] before anything is placed; a link taking more jobs than the circle
//! scores at once is [`PlaceError::LinkTooLarge`]. What remains possible for a group of valid
//! jobs is [`CircleError::NoCommonPerimeter`]: no unified circle within the slot bound rounds
//! their periods closely enough. `score_as_given` is not available then (it is computed on the
//! circle that could not be built), so such a group scores **0**, with the reason in
//! [`LinkPlan::score_error`]: the advisor cannot vouch for the group and keeps it apart when it
//! can. The reason is recorded on the link in the result.
//!
//! # Bounded work
//!
//! At most [`MAX_JOBS`] jobs, [`MAX_LINKS`] links and `CircleConfig::default().max_jobs` (32)
//! jobs per link. Each group's score is computed once and remembered. Greedy: at most one
//! score per (job, link), so at most `MAX_JOBS x MAX_LINKS`; the baseline: one per link; the
//! swap passes (both starts together): at most [`MAX_SWAP_EVALUATIONS`] new scores and
//! [`MAX_SWEEPS`] sweeps of at most jobs^2 / 2 candidate swaps each. One score's own work is
//! bounded by the circle's caps (see [`crate::circle`]).

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::circle::{compatibility, CircleConfig, Job};
use crate::error::{CircleError, PlaceError};

/// The most jobs placed at once.
pub const MAX_JOBS: usize = 64;
/// The most links.
pub const MAX_LINKS: usize = 32;
/// The most sweeps of the swap pass, per start.
pub const MAX_SWEEPS: usize = 4;
/// The most new group scores the swap passes may compute (both starts together); when spent,
/// the passes stop where they are ([`Placement::budget_spent`]).
pub const MAX_SWAP_EVALUATIONS: usize = 4096;

/// Score differences below this are float noise, not improvements.
const EPS: f64 = 1e-9;

/// A job to place: its name and its shape on the circle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamedJob {
    /// The job's name (unique).
    pub name: String,
    /// Its period, arcs and demand (demand as a fraction of the link's capacity).
    pub job: Job,
}

/// A link jobs can be placed on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Link {
    /// The link's name (unique).
    pub name: String,
    /// The most jobs it takes (0: none; at most `CircleConfig::default().max_jobs`).
    pub max_jobs: usize,
}

/// One link's jobs and how compatible they are.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LinkPlan {
    /// The link's name.
    pub link: String,
    /// Its jobs, in input order.
    pub jobs: Vec<String>,
    /// Their compatibility score at the best rotation found, in [0, 1]; 1 for no job or one;
    /// 0 when the circle refused the group (see `score_error`).
    pub score: f64,
    /// Each job's rotation (same order as `jobs`), ns: its arcs moved later by this much.
    /// Empty when the circle refused the group.
    pub shifts_ns: Vec<u64>,
    /// Why the circle refused the group (only [`CircleError::NoCommonPerimeter`] is expected).
    /// It makes the plan serialisable only: [`CircleError`] deserialises from `'static` text.
    pub score_error: Option<CircleError>,
}

/// The naive assignment's figures: jobs in input order, round-robin over the links with room.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Baseline {
    /// Mean score over the links.
    pub mean_score: f64,
    /// Lowest score over the links.
    pub worst_score: f64,
    /// Its links.
    pub links: Vec<LinkPlan>,
}

/// Which start the returned plan came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Start {
    /// The greedy placement, then swaps.
    Greedy,
    /// The baseline, then swaps (it did better than the greedy start).
    Baseline,
}

/// The advisor's answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Placement {
    /// Every link, in input order, with its jobs.
    pub links: Vec<LinkPlan>,
    /// Mean score over the links (empty links count, at 1).
    pub mean_score: f64,
    /// Lowest score over the links.
    pub worst_score: f64,
    /// The naive assignment, for comparison.
    pub baseline: Baseline,
    /// Which start `links` came from.
    pub start: Start,
    /// Swaps accepted on the way to `links` (from its start).
    pub swaps: usize,
    /// Swap sweeps run, both starts together.
    pub sweeps: usize,
    /// Groups scored by the circle (groups of two jobs or more, each once).
    pub evaluations: usize,
    /// The swap passes stopped because [`MAX_SWAP_EVALUATIONS`] was spent.
    pub budget_spent: bool,
}

/// A group's verdict, remembered.
#[derive(Debug, Clone)]
struct Eval {
    score: f64,
    shifts_ns: Vec<u64>,
    error: Option<CircleError>,
}

/// Scores groups of jobs (sorted job indices), each group once.
struct Scorer<'a> {
    jobs: &'a [NamedJob],
    cfg: CircleConfig,
    memo: HashMap<Vec<usize>, Eval>,
    evaluations: usize,
}

impl<'a> Scorer<'a> {
    fn new(jobs: &'a [NamedJob]) -> Self {
        Self {
            jobs,
            cfg: CircleConfig::default(),
            memo: HashMap::new(),
            evaluations: 0,
        }
    }

    /// Whether scoring `group` costs nothing (trivial or remembered).
    fn known(&self, group: &[usize]) -> bool {
        group.len() < 2 || self.memo.contains_key(group)
    }

    /// The verdict on `group` (sorted job indices).
    fn eval(&mut self, group: &[usize]) -> Eval {
        if group.len() < 2 {
            return Eval {
                score: 1.0,
                shifts_ns: vec![0; group.len()],
                error: None,
            };
        }
        if let Some(e) = self.memo.get(group) {
            return e.clone();
        }
        self.evaluations += 1;
        let jobs: Vec<Job> = group.iter().map(|&i| self.jobs[i].job.clone()).collect();
        let e = match compatibility(&jobs, &self.cfg) {
            Ok(c) => Eval {
                score: c.score,
                shifts_ns: c.shifts_ns,
                error: None,
            },
            Err(err) => Eval {
                score: 0.0,
                shifts_ns: Vec::new(),
                error: Some(err),
            },
        };
        self.memo.insert(group.to_vec(), e.clone());
        e
    }

    fn score(&mut self, group: &[usize]) -> f64 {
        self.eval(group).score
    }
}

/// Duty x demand: the job's share of a full link over its period.
fn weight(job: &Job) -> f64 {
    let duty: f64 = job.arcs.iter().map(|a| a.end - a.start).sum();
    duty.clamp(0.0, 1.0) * job.demand
}

/// `group` with `job` added, sorted.
fn with(group: &[usize], job: usize) -> Vec<usize> {
    let mut g = group.to_vec();
    let at = g.partition_point(|&x| x < job);
    g.insert(at, job);
    g
}

/// `group` with `out` replaced by `inn`, sorted.
fn replaced(group: &[usize], out: usize, inn: usize) -> Vec<usize> {
    let g: Vec<usize> = group.iter().copied().filter(|&x| x != out).collect();
    with(&g, inn)
}

/// Checks the input: counts, names, capacities, each job alone on the circle.
fn validate(jobs: &[NamedJob], links: &[Link], cfg: &CircleConfig) -> Result<(), PlaceError> {
    if links.is_empty() {
        return Err(PlaceError::NoLinks);
    }
    if jobs.len() > MAX_JOBS {
        return Err(PlaceError::TooManyJobs {
            got: jobs.len(),
            max: MAX_JOBS,
        });
    }
    if links.len() > MAX_LINKS {
        return Err(PlaceError::TooManyLinks {
            got: links.len(),
            max: MAX_LINKS,
        });
    }
    let mut seen = HashSet::new();
    for j in jobs {
        if !seen.insert(j.name.as_str()) {
            return Err(PlaceError::DuplicateJob {
                name: j.name.clone(),
            });
        }
    }
    let mut seen = HashSet::new();
    for l in links {
        if !seen.insert(l.name.as_str()) {
            return Err(PlaceError::DuplicateLink {
                name: l.name.clone(),
            });
        }
        if l.max_jobs > cfg.max_jobs {
            return Err(PlaceError::LinkTooLarge {
                link: l.name.clone(),
                max_jobs: l.max_jobs,
                max: cfg.max_jobs,
            });
        }
    }
    // Each max_jobs <= 32 and at most MAX_LINKS links: no overflow.
    let slots: usize = links.iter().map(|l| l.max_jobs).sum();
    if jobs.len() > slots {
        return Err(PlaceError::NotEnoughRoom {
            jobs: jobs.len(),
            slots,
        });
    }
    for j in jobs {
        if let Err(reason) = compatibility(std::slice::from_ref(&j.job), cfg) {
            return Err(PlaceError::BadJob {
                job: j.name.clone(),
                reason,
            });
        }
    }
    Ok(())
}

/// Jobs in input order, round-robin over the links, skipping full ones.
fn round_robin(n: usize, links: &[Link]) -> Result<Vec<Vec<usize>>, PlaceError> {
    let mut plan = vec![Vec::new(); links.len()];
    let mut next = 0;
    for j in 0..n {
        let l = (0..links.len())
            .map(|k| (next + k) % links.len())
            .find(|&l| plan[l].len() < links[l].max_jobs)
            .ok_or(PlaceError::NotEnoughRoom {
                jobs: n,
                slots: links.iter().map(|l| l.max_jobs).sum(),
            })?;
        plan[l].push(j);
        next = l + 1;
    }
    Ok(plan)
}

/// The greedy placement (step 1 of the module's algorithm).
fn greedy(s: &mut Scorer, links: &[Link]) -> Result<Vec<Vec<usize>>, PlaceError> {
    let weights: Vec<f64> = s.jobs.iter().map(|j| weight(&j.job)).collect();
    let mut order: Vec<usize> = (0..s.jobs.len()).collect();
    order.sort_by(|&a, &b| weights[b].total_cmp(&weights[a]).then(a.cmp(&b)));
    let mut plan: Vec<Vec<usize>> = vec![Vec::new(); links.len()];
    for &j in &order {
        let mut best: Option<(usize, f64)> = None;
        for (l, link) in links.iter().enumerate() {
            if plan[l].len() >= link.max_jobs {
                continue;
            }
            let score = s.score(&with(&plan[l], j));
            let better = match best {
                None => true,
                Some((b, bs)) => {
                    score > bs + EPS || (score >= bs - EPS && plan[l].len() < plan[b].len())
                }
            };
            if better {
                best = Some((l, score));
            }
        }
        let Some((l, _)) = best else {
            return Err(PlaceError::NotEnoughRoom {
                jobs: s.jobs.len(),
                slots: links.iter().map(|l| l.max_jobs).sum(),
            });
        };
        plan[l] = with(&plan[l], j);
    }
    Ok(plan)
}

/// What a swap pass did.
struct Improved {
    swaps: usize,
    sweeps: usize,
    budget_spent: bool,
}

/// The swap pass (step 2): at most [`MAX_SWEEPS`] sweeps, and no new score once
/// `s.evaluations` reaches `limit`.
fn improve(s: &mut Scorer, plan: &mut [Vec<usize>], limit: usize) -> Improved {
    let mut out = Improved {
        swaps: 0,
        sweeps: 0,
        budget_spent: false,
    };
    let m = plan.len();
    while out.sweeps < MAX_SWEEPS {
        out.sweeps += 1;
        let mut improved = false;
        for a in 0..m {
            for b in a + 1..m {
                // Swaps keep both lengths: the indices stay valid as the groups change.
                for i in 0..plan[a].len() {
                    for k in 0..plan[b].len() {
                        let (x, y) = (plan[a][i], plan[b][k]);
                        let (na, nb) = (replaced(&plan[a], x, y), replaced(&plan[b], y, x));
                        if s.evaluations >= limit && !(s.known(&na) && s.known(&nb)) {
                            out.budget_spent = true;
                            return out;
                        }
                        let (sa, sb) = (s.score(&plan[a]), s.score(&plan[b]));
                        let (ta, tb) = (s.score(&na), s.score(&nb));
                        let (old_min, new_min) = (sa.min(sb), ta.min(tb));
                        let accept = new_min > old_min + EPS
                            || (new_min >= old_min - EPS && ta + tb > sa + sb + EPS);
                        if accept {
                            plan[a] = na;
                            plan[b] = nb;
                            out.swaps += 1;
                            improved = true;
                        }
                    }
                }
            }
        }
        if !improved {
            break;
        }
    }
    out
}

/// The links' plans and their mean and worst scores.
fn assess(s: &mut Scorer, links: &[Link], plan: &[Vec<usize>]) -> (Vec<LinkPlan>, f64, f64) {
    let plans: Vec<LinkPlan> = links
        .iter()
        .zip(plan)
        .map(|(link, group)| {
            let e = s.eval(group);
            LinkPlan {
                link: link.name.clone(),
                jobs: group.iter().map(|&j| s.jobs[j].name.clone()).collect(),
                score: e.score,
                shifts_ns: e.shifts_ns,
                score_error: e.error,
            }
        })
        .collect();
    let worst = plans.iter().map(|p| p.score).fold(1.0, f64::min);
    let mean = plans.iter().map(|p| p.score).sum::<f64>() / plans.len().max(1) as f64;
    (plans, mean, worst)
}

/// Places `jobs` on `links` so that the jobs sharing each link are as compatible as possible
/// (the worst link first), beside the naive round-robin baseline. The method and its bounds are
/// in the module's documentation.
///
/// # Errors
///
/// [`PlaceError`]: no links, too many jobs or links, duplicate names, a link taking more jobs
/// than the circle scores, fewer places than jobs, or a job the circle refuses even alone.
pub fn place(jobs: &[NamedJob], links: &[Link]) -> Result<Placement, PlaceError> {
    let mut s = Scorer::new(jobs);
    validate(jobs, links, &s.cfg)?;
    let base = round_robin(jobs.len(), links)?;
    let (base_links, base_mean, base_worst) = assess(&mut s, links, &base);
    let mut plan = greedy(&mut s, links)?;
    let limit = s.evaluations + MAX_SWAP_EVALUATIONS;
    let g = improve(&mut s, &mut plan, limit);
    let (links_g, mean_g, worst_g) = assess(&mut s, links, &plan);
    let mut from_base = base.clone();
    let b = if g.budget_spent {
        None
    } else {
        Some(improve(&mut s, &mut from_base, limit))
    };
    let sweeps = g.sweeps + b.as_ref().map_or(0, |b| b.sweeps);
    let budget_spent = g.budget_spent || b.as_ref().is_some_and(|b| b.budget_spent);
    let (links_b, mean_b, worst_b) = assess(&mut s, links, &from_base);
    let baseline_better =
        worst_b > worst_g + EPS || (worst_b >= worst_g - EPS && mean_b > mean_g + EPS);
    let (plans, mean, worst, start, swaps) = if baseline_better {
        let swaps = b.as_ref().map_or(0, |b| b.swaps);
        (links_b, mean_b, worst_b, Start::Baseline, swaps)
    } else {
        (links_g, mean_g, worst_g, Start::Greedy, g.swaps)
    };
    Ok(Placement {
        links: plans,
        mean_score: mean,
        worst_score: worst,
        baseline: Baseline {
            mean_score: base_mean,
            worst_score: base_worst,
            links: base_links,
        },
        start,
        swaps,
        sweeps,
        evaluations: s.evaluations,
        budget_spent,
    })
}

#[cfg(test)]
mod tests;
