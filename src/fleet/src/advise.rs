//! The placement advisor on live data (feature `coordinator`): where new training jobs should
//! go, given the topology and the periodic jobs the hosts' detectors see now (their summaries'
//! `period`). `resex fleet place JOBS.toml` runs it.
//!
//! A new job is a shape: compute time and bytes per iteration (a preset of
//! [`resex_mlcompat::preset`], or given). On a host its period is compute plus bytes over the
//! narrowest link of the host's path (its pace), and on each link of the path its arc is its
//! bytes at that link's full rate, at the end of the period. A live host the topology lists,
//! with room (fewer periodic jobs than `max_jobs_per_host`), scores a job by its worst link:
//! for each link its traffic crosses, the circle's score ([`resex_mlcompat::compatibility`] on
//! the fleet's coarse circle, at the best rotation: the adaptive unfairness slides jobs into
//! place) of the link's heaviest periodic jobs with the new one; a link with no periodic job
//! scores 1 (and costs no score from the budget). Jobs are placed one at a time, the
//! heaviest first (its bytes per iteration), each on the best host (ties: the fewest periodic
//! jobs on its links, then the name), and counted there for the next. The same as the lab's
//! `resex_mlcompat::place`, on hosts instead of free links, with the jobs already running
//! fixed where they are.
//!
//! Bounded: at most [`MAX_NEW_JOBS`] jobs, [`MAX_LINK_JOBS`] jobs scored per link (the new one
//! and the heaviest already there), and [`MAX_LINK_SCORES`] circle scores per job (each link's
//! computed once per job and period); hosts left when the budget is spent are counted
//! (`not_evaluated`), not scored.

use crate::alloc::MAX_LINK_JOBS;
use crate::compat::{circle_config, job_on};
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
    /// Hosts with room left out because the job's budget of link scores was spent.
    pub not_evaluated: usize,
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

/// ms on the wire for `bytes` at `capacity_mbps`.
fn comm_ms(bytes: f64, capacity_mbps: f64) -> f64 {
    bytes * 8.0 / (capacity_mbps * 1e3)
}

/// The narrowest capacity on a host's path, Mb/s (the job's pace).
fn bottleneck(t: &Topology, links: &[usize]) -> f64 {
    links
        .iter()
        .map(|&l| t.links[l].capacity_mbps)
        .fold(f64::INFINITY, f64::min)
}

/// The new job on the circle of a link of `capacity_mbps`: a period of `period_ms` (set by its
/// narrowest link) with its bytes at this link's full rate at the end.
fn new_on(period_ms: f64, bytes: f64, capacity_mbps: f64) -> Job {
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let period_ns = (period_ms * 1e6).round().max(1.0) as u64;
    let arc = (comm_ms(bytes, capacity_mbps) / period_ms).clamp(0.0, 1.0);
    Job::single(period_ns, (1.0 - arc).min(0.999_999), 1.0, 1.0)
}

/// The periodic jobs already on a link: the heaviest few (what a score takes) and how many.
#[derive(Debug, Default)]
struct OnLink {
    heaviest: Vec<JobPeriod>,
    count: usize,
}

impl OnLink {
    fn add(&mut self, p: JobPeriod) {
        self.count += 1;
        let at = self
            .heaviest
            .partition_point(|h| h.bytes_per_period >= p.bytes_per_period);
        if at < MAX_LINK_JOBS - 1 {
            self.heaviest.insert(at, p);
            self.heaviest.truncate(MAX_LINK_JOBS - 1);
        }
    }
}

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
    let mut on_link: Vec<OnLink> = (0..t.links.len()).map(|_| OnLink::default()).collect();
    let mut per_host: HashMap<&str, usize> = HashMap::new();
    for s in summaries {
        let periodic: Vec<JobPeriod> = s
            .vms
            .iter()
            .filter_map(|v| v.period.filter(JobPeriod::plausible))
            .collect();
        *per_host.entry(s.host.as_str()).or_default() += periodic.len();
        for &l in paths.get(s.host.as_str()).into_iter().flatten() {
            for p in &periodic {
                on_link[l].add(*p);
            }
        }
    }
    // Hosts the topology lists (one it leaves out is more likely a mistake than a host on no
    // shared link).
    let mut hosts: Vec<&str> = summaries
        .iter()
        .map(|s| s.host.as_str())
        .filter(|h| paths.contains_key(h))
        .collect();
    hosts.sort_unstable();
    hosts.dedup();
    let cfg = circle_config();
    let mut out = Vec::with_capacity(shaped.len());
    for (job, (compute_ms, bytes)) in shaped {
        // Scores by (link, the job's period there): a job's period is set by its host's
        // narrowest link.
        let mut cache: HashMap<(usize, u64), f64> = HashMap::new();
        let mut scores = 0;
        let mut best: Option<(f64, usize, &str)> = None;
        let (mut candidates, mut not_evaluated) = (0, 0);
        'hosts: for &h in &hosts {
            if per_host.get(h).copied().unwrap_or(0) >= jobs.max_jobs_per_host {
                continue;
            }
            let links = paths.get(h).map_or(&[][..], Vec::as_slice);
            let narrowest = bottleneck(t, links);
            let period_ms = compute_ms + comm_ms(bytes, narrowest);
            let mut worst = 1.0_f64;
            for &l in links {
                let key = (l, period_ms.to_bits());
                let s = match cache.get(&key) {
                    Some(s) => *s,
                    None if on_link[l].heaviest.is_empty() => 1.0,
                    None if scores < MAX_LINK_SCORES => {
                        scores += 1;
                        let cap = t.links[l].capacity_mbps;
                        let s = link_score(&on_link[l].heaviest, period_ms, bytes, cap, &cfg);
                        cache.insert(key, s);
                        s
                    }
                    None => {
                        not_evaluated += 1; // the budget is spent: not a candidate
                        continue 'hosts;
                    }
                };
                worst = worst.min(s);
            }
            candidates += 1;
            let crowd: usize = links.iter().map(|&l| on_link[l].count).sum();
            let better = best
                .is_none_or(|(bs, bc, _)| worst > bs + 1e-9 || (worst >= bs - 1e-9 && crowd < bc));
            if better {
                best = Some((worst, crowd, h));
            }
        }
        let advice = match best {
            Some((score, _, h)) => {
                let links = paths.get(h).map_or(&[][..], Vec::as_slice);
                let period_ms = compute_ms + comm_ms(bytes, bottleneck(t, links));
                let detail = links
                    .iter()
                    .map(|&l| {
                        let s = cache.get(&(l, period_ms.to_bits())).copied().unwrap_or(1.0);
                        (t.links[l].name.clone(), on_link[l].count + 1, s)
                    })
                    .collect();
                for &l in links {
                    let cap = t.links[l].capacity_mbps;
                    on_link[l].add(JobPeriod {
                        period_ms,
                        last_start_unix_ms: 0.0,
                        bytes_per_period: bytes,
                        duty: (comm_ms(bytes, cap) / period_ms).min(1.0),
                        confidence: 1.0,
                        latest_period_ms: None,
                    });
                }
                *per_host.entry(h).or_default() += 1;
                JobAdvice {
                    job: job.name.clone(),
                    host: Some(h.to_owned()),
                    score,
                    links: detail,
                    candidates,
                    not_evaluated,
                }
            }
            None => JobAdvice {
                job: job.name.clone(),
                host: None,
                score: 0.0,
                links: Vec::new(),
                candidates,
                not_evaluated,
            },
        };
        out.push(advice);
    }
    Ok(out)
}

/// The circle's score of the link's heaviest jobs with the new one.
fn link_score(
    there: &[JobPeriod],
    period_ms: f64,
    bytes: f64,
    capacity_mbps: f64,
    cfg: &CircleConfig,
) -> f64 {
    // Rotated scores do not depend on where the arcs are now.
    let mut circle: Vec<Job> = there
        .iter()
        .map(|p| job_on(p, capacity_mbps, 0.0))
        .collect();
    circle.push(new_on(period_ms, bytes, capacity_mbps));
    // A group the circle cannot put on one perimeter is not vouched for.
    compatibility(&circle, cfg).map_or(0.0, |c| c.score)
}

#[cfg(test)]
mod tests;
