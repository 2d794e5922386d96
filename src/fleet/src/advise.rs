//! The placement advisor on live data (feature `coordinator`): where new training jobs should
//! go, given the topology and the periodic jobs the hosts' detectors see now (their summaries'
//! `period`). `resex fleet place JOBS.toml` runs it.
//!
//! A new job is a shape: compute time and bytes per iteration (a preset of
//! [`resex_mlcompat::preset`], or given), which on a link of capacity C is a period of compute
//! plus bytes / C with one arc at the link's full rate at its end. A live host with room (fewer
//! periodic jobs than `max_jobs_per_host`) scores a job by its worst link: for each topology
//! link its traffic crosses, the circle's score ([`resex_mlcompat::compatibility`], at the best
//! rotation: the adaptive unfairness slides jobs into place) of the link's periodic jobs with
//! the new one; a link with no periodic job scores 1. Jobs are placed one at a time, the
//! heaviest first (its bytes per iteration), each on the best host (ties: the fewest periodic
//! jobs on its links, then the name), and counted there for the next. The same as the lab's
//! `resex_mlcompat::place`, on hosts instead of free links, with the jobs already running
//! fixed where they are.
//!
//! Bounded: at most [`MAX_NEW_JOBS`] jobs, [`MAX_LINK_JOBS`] jobs scored per link (the new one
//! and the heaviest already there), and [`MAX_LINK_SCORES`] link scores per job (each link's
//! score is computed once per job).

use crate::alloc::MAX_LINK_JOBS;
use crate::compat::job_on;
use crate::record::{HostSummary, JobPeriod};
use crate::topology::Topology;
use resex_mlcompat::{compatibility, preset, CircleConfig, Job};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// The most new jobs advised at once.
pub const MAX_NEW_JOBS: usize = 64;
/// The most link scores computed per job.
pub const MAX_LINK_SCORES: usize = 512;

/// A job to place: `preset`, or `compute_ms` and `bytes`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NewJob {
    /// Its name.
    pub name: String,
    /// A preset's name (`vgg19`, `bert`, ...).
    #[serde(default)]
    pub preset: Option<String>,
    /// Compute per iteration, ms.
    #[serde(default)]
    pub compute_ms: Option<f64>,
    /// Bytes it sends per iteration.
    #[serde(default)]
    pub bytes: Option<f64>,
}

/// `JOBS.toml`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct JobsFile {
    /// The most periodic jobs a host takes (those running included).
    #[serde(default = "one")]
    pub max_jobs_per_host: usize,
    /// The jobs.
    #[serde(default)]
    pub job: Vec<NewJob>,
}

fn one() -> usize {
    1
}

/// Why the jobs cannot be advised.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum AdviseError {
    /// A job's shape is missing, mixed or out of range.
    #[error("job {name:?}: {why}")]
    BadJob {
        /// The job.
        name: String,
        /// What is wrong.
        why: String,
    },
    /// More jobs than [`MAX_NEW_JOBS`].
    #[error("{0} jobs, at most {MAX_NEW_JOBS} at once")]
    TooMany(usize),
    /// Two jobs with one name.
    #[error("job {0:?} is named twice")]
    Duplicate(String),
}

/// Where one job should go.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobAdvice {
    /// The job.
    pub job: String,
    /// The host (None: no live host has room).
    pub host: Option<String>,
    /// Its worst link's score there (1: no link it crosses carries another periodic job).
    pub score: f64,
    /// Each link of that host: its name, periodic jobs on it with this one, and the score.
    pub links: Vec<(String, usize, f64)>,
    /// Hosts with room that were considered.
    pub candidates: usize,
}

impl NewJob {
    /// Compute time and bytes per iteration.
    fn shape(&self) -> Result<(f64, f64), AdviseError> {
        let bad = |why: String| AdviseError::BadJob {
            name: self.name.clone(),
            why,
        };
        match (&self.preset, self.compute_ms, self.bytes) {
            (Some(p), None, None) => {
                let p = preset::preset(p).ok_or_else(|| {
                    bad(format!(
                        "unknown preset {p:?}; known: {}",
                        preset::names().join(", ")
                    ))
                })?;
                Ok((p.compute_ns as f64 / 1e6, p.comm_bytes as f64))
            }
            (None, Some(c), Some(b)) => {
                if !(c.is_finite() && (0.0..=600_000.0).contains(&c)) {
                    return Err(bad(format!("compute_ms {c} is not in [0, 600000]")));
                }
                if !(b.is_finite() && b > 0.0 && b <= 1e15) {
                    return Err(bad(format!("bytes {b} is not in (0, 1e15]")));
                }
                Ok((c, b))
            }
            _ => Err(bad("give either preset, or compute_ms and bytes".into())),
        }
    }
}

/// A periodic job on the circle of a link of `capacity_mbps`: compute, then its bytes at the
/// link's full rate.
fn new_on(compute_ms: f64, bytes: f64, capacity_mbps: f64) -> Job {
    let comm_ms = bytes * 8.0 / (capacity_mbps * 1e3);
    let period_ms = compute_ms + comm_ms;
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let period_ns = (period_ms * 1e6).round().max(1.0) as u64;
    Job::single(period_ns, compute_ms / period_ms, 1.0, 1.0)
}

/// The jobs already on each link: (their figures, heaviest first).
type LinkJobs = Vec<Vec<JobPeriod>>;

/// Where each of `jobs` should go, in the order placed (the heaviest first).
///
/// # Errors
///
/// [`AdviseError`]: too many jobs, a name given twice, or a job without a valid shape.
pub fn advise(
    t: &Topology,
    summaries: &[HostSummary],
    jobs: &JobsFile,
) -> Result<Vec<JobAdvice>, AdviseError> {
    if jobs.job.len() > MAX_NEW_JOBS {
        return Err(AdviseError::TooMany(jobs.job.len()));
    }
    let mut seen = std::collections::HashSet::new();
    let mut shaped = Vec::with_capacity(jobs.job.len());
    for j in &jobs.job {
        if !seen.insert(j.name.as_str()) {
            return Err(AdviseError::Duplicate(j.name.clone()));
        }
        shaped.push((j, j.shape()?));
    }
    shaped.sort_by(|a, b| b.1 .1.total_cmp(&a.1 .1).then(a.0.name.cmp(&b.0.name)));
    let paths = t.paths();
    let mut on_link: LinkJobs = vec![Vec::new(); t.links.len()];
    let mut per_host: HashMap<&str, usize> = HashMap::new();
    for s in summaries {
        let periodic: Vec<JobPeriod> = s
            .vms
            .iter()
            .filter_map(|v| v.period.filter(JobPeriod::plausible))
            .collect();
        *per_host.entry(s.host.as_str()).or_default() += periodic.len();
        for &l in paths.get(s.host.as_str()).into_iter().flatten() {
            on_link[l].extend(&periodic);
        }
    }
    let mut hosts: Vec<&str> = summaries.iter().map(|s| s.host.as_str()).collect();
    hosts.sort_unstable();
    hosts.dedup();
    let cfg = CircleConfig::default();
    let mut out = Vec::with_capacity(shaped.len());
    for (job, (compute_ms, bytes)) in shaped {
        let mut cache: HashMap<usize, f64> = HashMap::new();
        let mut best: Option<(f64, usize, &str)> = None;
        let mut candidates = 0;
        for &h in &hosts {
            if per_host.get(h).copied().unwrap_or(0) >= jobs.max_jobs_per_host {
                continue;
            }
            candidates += 1;
            let links = paths.get(h).map_or(&[][..], Vec::as_slice);
            let mut worst = 1.0_f64;
            for &l in links {
                let s = match cache.get(&l) {
                    Some(s) => *s,
                    None if cache.len() < MAX_LINK_SCORES => {
                        let s = link_score(
                            &on_link[l],
                            compute_ms,
                            bytes,
                            t.links[l].capacity_mbps,
                            &cfg,
                        );
                        cache.insert(l, s);
                        s
                    }
                    None => 0.0, // not evaluated: never preferred
                };
                worst = worst.min(s);
            }
            let crowd: usize = links.iter().map(|&l| on_link[l].len()).sum();
            let better = best
                .is_none_or(|(bs, bc, _)| worst > bs + 1e-9 || (worst >= bs - 1e-9 && crowd < bc));
            if better {
                best = Some((worst, crowd, h));
            }
        }
        let advice = match best {
            Some((score, _, h)) => {
                let links = paths.get(h).map_or(&[][..], Vec::as_slice);
                let placed = JobPeriod {
                    period_ms: 0.0, // replaced per link below
                    last_start_unix_ms: 0.0,
                    bytes_per_period: bytes,
                    duty: 0.0,
                    confidence: 1.0,
                };
                let detail = links
                    .iter()
                    .map(|&l| {
                        (
                            t.links[l].name.clone(),
                            on_link[l].len() + 1,
                            cache.get(&l).copied().unwrap_or(0.0),
                        )
                    })
                    .collect();
                for &l in links {
                    on_link[l].push(as_period(placed, compute_ms, t.links[l].capacity_mbps));
                }
                *per_host.entry(h).or_default() += 1;
                JobAdvice {
                    job: job.name.clone(),
                    host: Some(h.to_owned()),
                    score,
                    links: detail,
                    candidates,
                }
            }
            None => JobAdvice {
                job: job.name.clone(),
                host: None,
                score: 0.0,
                links: Vec::new(),
                candidates,
            },
        };
        out.push(advice);
    }
    Ok(out)
}

/// A placed job as the detector would see it on a link of `capacity_mbps`.
fn as_period(mut p: JobPeriod, compute_ms: f64, capacity_mbps: f64) -> JobPeriod {
    let comm_ms = p.bytes_per_period * 8.0 / (capacity_mbps * 1e3);
    p.period_ms = compute_ms + comm_ms;
    p.duty = comm_ms / p.period_ms;
    p
}

/// The circle's score of the link's heaviest jobs with the new one (1 with none there).
fn link_score(
    there: &[JobPeriod],
    compute_ms: f64,
    bytes: f64,
    capacity_mbps: f64,
    cfg: &CircleConfig,
) -> f64 {
    if there.is_empty() {
        return 1.0;
    }
    let mut heaviest: Vec<&JobPeriod> = there.iter().collect();
    heaviest.sort_by(|a, b| b.bytes_per_period.total_cmp(&a.bytes_per_period));
    heaviest.truncate(MAX_LINK_JOBS - 1);
    // Rotated scores do not depend on where the arcs are now.
    let mut circle: Vec<Job> = heaviest
        .iter()
        .map(|p| job_on(p, capacity_mbps, 0.0))
        .collect();
    circle.push(new_on(compute_ms, bytes, capacity_mbps));
    // A group the circle cannot put on one perimeter is not vouched for.
    compatibility(&circle, cfg).map_or(0.0, |c| c.score)
}

#[cfg(test)]
mod tests;
