//! Congestion compatibility of the periodic jobs on each topology link (feature
//! `coordinator`): the jobs the hosts' detectors found (their summaries' `period`), grouped by
//! the links their hosts' traffic crosses, scored with the circle
//! ([`resex_mlcompat::compatibility`]: the fraction of their communication that fits the
//! link at the best rotation, and as they run now). Pure and bounded: one pass over the
//! summaries, at most [`MAX_LINK_JOBS`] jobs per link (the heaviest by bytes per period),
//! [`MAX_SCORED_LINKS`] links scored per round on a coarse circle ([`circle_config`]), and
//! [`MAX_REPORTED_LINKS`] listed.

use crate::alloc::{JobArc, LinkCompat, LinkJob, VmSchedule, MAX_LINK_JOBS};
use crate::record::{HostSummary, JobPeriod};
use crate::topology::Topology;
use resex_mlcompat::{compatibility, CircleConfig, Job, Periodicity};
use std::collections::HashMap;

mod grid;
pub(crate) use grid::Grid;
pub use grid::{GRID_BEHIND, GRID_LATE_ROUNDS, GRID_PROBE, GRID_SLACK, SAME_BYTES};

/// The most links scored per round (the rest say so; a round starts where the last stopped).
pub const MAX_SCORED_LINKS: usize = 32;

/// The most links a round report lists (scored ones first; the rest are counted).
pub const MAX_REPORTED_LINKS: usize = 256;

/// The longest VM name a report carries (longer ones are clipped).
pub const MAX_NAME: usize = 128;

/// The circle the fleet scores on: coarser than the lab's default (1 024 slots, 64 shifts, 2
/// sweeps), so 32 links of 8 jobs each take a fraction of a second in the round, which runs
/// within a third of the coordinator's lease.
#[must_use]
pub fn circle_config() -> CircleConfig {
    CircleConfig {
        max_slots: 1024,
        rotation_steps: 64,
        max_sweeps: 2,
        max_jobs: MAX_LINK_JOBS,
        ..CircleConfig::default()
    }
}

/// A periodic job on a link, with what the circle needs.
struct Candidate<'a> {
    host: &'a str,
    vm: &'a str,
    period: JobPeriod,
}

/// Every link with at least one periodic job, in topology order, at most
/// [`MAX_REPORTED_LINKS`] (scored ones first) and the number left out; at most
/// [`MAX_SCORED_LINKS`] scored, starting at link `first` (a round passes where the last
/// stopped, so every link is scored in turn).
#[must_use]
pub fn score_links(
    t: &Topology,
    summaries: &[&HostSummary],
    first: usize,
) -> (Vec<LinkCompat>, usize) {
    let cfg = circle_config();
    let per_link = candidates(t, summaries);
    let n = t.links.len().max(1);
    let mut scored = 0;
    let mut out: Vec<(usize, LinkCompat)> = Vec::new();
    for k in 0..t.links.len() {
        let l = (first + k) % n;
        let jobs = &per_link[l];
        if jobs.heaviest.is_empty() {
            continue;
        }
        let link = &t.links[l];
        let mut c = LinkCompat {
            link: link.name.clone(),
            jobs: jobs
                .heaviest
                .iter()
                .map(|j| LinkJob {
                    host: j.host.into(),
                    vm: clip(j.vm),
                    period_ms: j.period.period_ms,
                    shift_ms: None,
                })
                .collect(),
            jobs_left_out: jobs.left_out,
            ..LinkCompat::default()
        };
        if jobs.heaviest.len() < 2 {
            c.why_not = Some("one periodic job: nothing to be compatible with".into());
        } else if scored >= MAX_SCORED_LINKS {
            c.why_not = Some(format!(
                "not scored this round: {MAX_SCORED_LINKS} links a round at most"
            ));
        } else {
            scored += 1;
            score(&mut c, &jobs.heaviest, link.capacity_mbps, &cfg);
        }
        out.push((l, c));
    }
    // Scored first, then topology order; a bounded list.
    out.sort_by_key(|(l, c)| (c.score.is_none(), *l));
    let left_out = out.len().saturating_sub(MAX_REPORTED_LINKS);
    out.truncate(MAX_REPORTED_LINKS);
    (out.into_iter().map(|(_, c)| c).collect(), left_out)
}

/// `name`, at most [`MAX_NAME`] bytes (on a character boundary).
fn clip(name: &str) -> String {
    let mut end = name.len().min(MAX_NAME);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    name[..end].to_owned()
}

/// A link's periodic jobs: the heaviest [`MAX_LINK_JOBS`] by bytes per period, and how many
/// more there are.
#[derive(Default)]
struct LinkJobs<'a> {
    heaviest: Vec<Candidate<'a>>,
    left_out: usize,
}

impl<'a> LinkJobs<'a> {
    fn add(&mut self, c: Candidate<'a>) {
        let at = self
            .heaviest
            .partition_point(|h| h.period.bytes_per_period >= c.period.bytes_per_period);
        if at >= MAX_LINK_JOBS {
            self.left_out += 1;
            return;
        }
        self.heaviest.insert(at, c);
        if self.heaviest.len() > MAX_LINK_JOBS {
            self.heaviest.pop();
            self.left_out += 1;
        }
    }
}

/// Each link's periodic jobs (implausible figures skipped): one pass over the summaries, each
/// periodic VM onto the links of its host's path.
fn candidates<'a>(t: &Topology, summaries: &[&'a HostSummary]) -> Vec<LinkJobs<'a>> {
    let paths = t.paths();
    let mut per_link: Vec<LinkJobs<'a>> = (0..t.links.len()).map(|_| LinkJobs::default()).collect();
    for s in summaries {
        let Some(path) = paths.get(s.host.as_str()) else {
            continue;
        };
        for v in &s.vms {
            let Some(p) = v.period.filter(JobPeriod::plausible) else {
                continue;
            };
            for &l in path {
                per_link[l].add(Candidate {
                    host: &s.host,
                    vm: &v.name,
                    period: p,
                });
            }
        }
    }
    per_link
}

fn score(c: &mut LinkCompat, jobs: &[Candidate<'_>], capacity_mbps: f64, cfg: &CircleConfig) {
    let reference = jobs
        .iter()
        .map(|j| j.period.last_start_unix_ms)
        .fold(f64::MIN, f64::max);
    // Jobs measured at one period stay at one period alone: their periods alone differ by
    // their measured arcs, whose noise (a few intervals) would otherwise split them.
    let measured: Vec<JobPeriod> = jobs.iter().map(|j| j.period).collect();
    let mut alone: Vec<JobPeriod> = measured.iter().map(|p| alone(p, capacity_mbps)).collect();
    pool_periods(&mut alone, &period_groups(&measured));
    same_periods(&mut alone);
    let circle: Vec<Job> = alone
        .iter()
        .map(|p| placed(p, capacity_mbps, reference))
        .collect();
    let result = compatibility(&circle, cfg);
    tracing::debug!(
        link = %c.link,
        measured = ?measured.iter().map(|p| (p.period_ms, p.duty * p.period_ms, p.bytes_per_period)).collect::<Vec<_>>(),
        alone = ?alone.iter().map(|p| (p.period_ms, p.duty * p.period_ms)).collect::<Vec<_>>(),
        score = ?result.as_ref().map(|r| r.score).ok(),
        "circle"
    );
    match result {
        Ok(r) => {
            c.score = Some(r.score);
            c.score_as_given = Some(r.score_as_given);
            for (job, shift) in c.jobs.iter_mut().zip(&r.shifts_ns) {
                job.shift_ms = Some(*shift as f64 / 1e6);
            }
        }
        Err(e) => c.why_not = Some(e.to_string()),
    }
}

/// How far below `[compat] threshold` the score of a link already on a grid (scheduled on one
/// last round, the same jobs, each sending within [`SAME_BYTES`] of the bytes it was drawn
/// with) may fall before the link is fair again. Live, the periods of the jobs of one
/// grid are measured up to 15% apart on a busy 2-core machine (316 and 291 ms for one pair,
/// 355 and 307 for another, identical jobs), so they fall into two periods and the circle
/// scores them 0.81 for a few rounds; at one threshold the schedules stopped and started again
/// with each such reading (the pair fell back into step in between: 4 to 11 of 32 rounds held
/// schedules, and the pair ran 0.94-1.04x of fair). An incompatible pair scores 0.6-0.67.
pub const KEEP_MARGIN: f64 = 0.15;

/// The least score at which a link's jobs are compatible: `threshold`, or
/// `threshold - KEEP_MARGIN` for a link already on a grid (hysteresis).
fn entry_score(threshold: f64, scheduled: bool) -> f64 {
    if scheduled {
        threshold - KEEP_MARGIN
    } else {
        threshold
    }
}

/// The schedules of the jobs on compatible links (a score, this round's or the last one
/// computed for the same jobs, at least `[compat] threshold`), by host: each job's ceiling
/// follows its target arc on the link's grid when the jobs share one period (`grid`), its
/// progress against the others' otherwise (`resex_core::adaptive`), within the link's pool,
/// its capacity less the DRUM allocations `x` (per host, per VM, in the order of
/// `summaries`) of the VMs on it that are not among the jobs (at least a tenth of it); arcs at
/// the pool's rate. A job on several compatible links gets the first's. One pass over the
/// summaries along each host's path. A link on a grid keeps it (and its schedules) while its score
/// stays no more than [`KEEP_MARGIN`] under the threshold and the grid holds (hysteresis: see
/// there).
#[must_use]
pub(crate) fn schedules(
    t: &Topology,
    links: &[LinkCompat],
    scores: &HashMap<String, f64>,
    summaries: &[&HostSummary],
    x: &[Vec<f64>],
    grids: &mut HashMap<String, Grid>,
    now_unix_ms: f64,
) -> HashMap<String, Vec<VmSchedule>> {
    let index: HashMap<&str, usize> = t
        .links
        .iter()
        .enumerate()
        .map(|(i, l)| (l.name.as_str(), i))
        .collect();
    // The compatible links, by topology index, and their jobs (host, clipped VM name); those
    // under the threshold, in only by the margin of the grid they are on.
    let mut compatible: HashMap<usize, &LinkCompat> = HashMap::new();
    let mut by_margin = std::collections::HashSet::new();
    for c in links {
        // Whether the grid still holds for these jobs is checked below, once, where it is kept.
        let on_grid = grids.contains_key(&c.link);
        let score = scores.get(&c.link).copied();
        let ok = score.is_some_and(|s| s >= entry_score(t.compat.threshold, on_grid));
        if let (true, Some(&l)) = (ok && c.jobs.len() >= 2, index.get(c.link.as_str())) {
            compatible.insert(l, c);
            if score.is_some_and(|s| s < t.compat.threshold) {
                by_margin.insert(l);
            }
        }
    }
    if compatible.is_empty() {
        grids.clear();
        return HashMap::new();
    }
    let paths = t.paths();
    let mut taken = vec![0.0; t.links.len()];
    let mut arcs: HashMap<usize, Vec<(&str, &str, JobPeriod)>> = HashMap::new();
    for (s, xs) in summaries.iter().zip(x) {
        let Some(path) = paths.get(s.host.as_str()) else {
            continue;
        };
        for (v, x) in s.vms.iter().zip(xs) {
            let name = clip(&v.name);
            for &l in path {
                let Some(c) = compatible.get(&l) else {
                    continue;
                };
                let is_job = c.jobs.iter().any(|j| j.host == s.host && j.vm == name);
                match v.period.filter(JobPeriod::plausible) {
                    Some(p) if is_job => arcs.entry(l).or_default().push((&s.host, &v.name, p)),
                    _ => taken[l] += x,
                }
            }
        }
    }
    let mut out: HashMap<String, Vec<VmSchedule>> = HashMap::new();
    let mut next_grids = HashMap::new();
    let mut scheduled = std::collections::HashSet::new();
    let mut order: Vec<usize> = arcs.keys().copied().collect();
    order.sort_unstable();
    for l in order {
        let jobs = &arcs[&l];
        if jobs.len() < 2 {
            continue;
        }
        let link = &t.links[l];
        let pool = (link.capacity_mbps - taken[l]).max(0.1 * link.capacity_mbps);
        // One period: every job at its target on the link's grid, kept while the link stays
        // compatible with the same jobs sending the same bytes (it follows their periods
        // itself); otherwise each job as measured.
        let measured: Vec<JobPeriod> = jobs.iter().map(|j| j.2).collect();
        // A link's grid reads its jobs at their fundamental (a pair that alternates repeats
        // every two iterations, and its detector may take that for its period).
        let measured = match grids.get(&link.name) {
            Some(g) => g.fundamentals(&measured),
            None => measured,
        };
        let grid = match grids
            .remove(&link.name)
            .filter(|g| g.serves(jobs.iter().map(|(h, v, _)| (*h, *v))) && g.holds_for(&measured))
        {
            Some(mut g) => {
                g.follow(&measured, now_unix_ms);
                Some(g)
            }
            // In by the margin of a grid that no longer holds (other jobs, or bytes moved): fair.
            None if by_margin.contains(&l) => continue,
            None => Grid::draw(jobs, pool, now_unix_ms),
        };
        if let Some(g) = &grid {
            let seen: Vec<f64> = measured.iter().map(grid::seen_period).collect();
            tracing::debug!(link = %link.name, period_ms = g.period_ms, ?seen, "grid");
        }
        let timing: Vec<JobArc> = match &grid {
            Some(g) => g.arcs(),
            None => jobs.iter().map(|(_, _, p)| arc(p, pool)).collect(),
        };
        let on_grid = grid.is_some();
        if let Some(g) = grid {
            next_grids.insert(link.name.clone(), g);
        }
        for (i, (host, vm, _)) in jobs.iter().enumerate() {
            if !scheduled.insert((*host, *vm)) {
                continue;
            }
            let others = timing
                .iter()
                .enumerate()
                .filter(|(k, _)| *k != i)
                .map(|(_, a)| *a)
                .take(crate::alloc::MAX_SCHEDULE_OTHERS)
                .collect();
            let s = VmSchedule {
                vm: (*vm).to_owned(),
                link: link.name.clone(),
                pool_mbps: pool,
                gain: t.compat.gain,
                me: timing[i],
                others,
                grid: on_grid,
            };
            // Never one its host would refuse (with the whole allocation): a hostile summary's
            // figures stay out.
            if s.plausible() {
                out.entry((*host).to_owned()).or_default().push(s);
            }
        }
    }
    *grids = next_grids;
    out
}

/// A job's timing on a link of `capacity_mbps`: its latest period as its host saw it (see
/// `JobPeriod::timing_period_ms`), its arc as long as its bytes need there (at least its duty
/// of the period, at most the period).
fn arc(p: &JobPeriod, capacity_mbps: f64) -> JobArc {
    let wire_ms = p.bytes_per_period * 8.0 / (capacity_mbps * 1e3);
    let period_ms = p.timing_period_ms();
    JobArc {
        period_ms,
        last_start_unix_ms: p.last_start_unix_ms,
        arc_ms: wire_ms.max(p.duty * p.period_ms).min(period_ms),
        bytes: p.bytes_per_period,
    }
}

/// A periodic job on the circle of a link of `capacity_mbps`: its arc as long as its bytes
/// per period need there, at least its duty, starting where its latest arc began relative to
/// `reference_unix_ms` (the jobs of one circle share one reference, near their latest arcs:
/// a period's error then moves a phase by that error times a few periods only).
pub(crate) fn job_on(p: &JobPeriod, capacity_mbps: f64, reference_unix_ms: f64) -> Job {
    placed(&alone(p, capacity_mbps), capacity_mbps, reference_unix_ms)
}

/// `p` on the circle as given, its phase relative to `reference_unix_ms`.
fn placed(p: &JobPeriod, capacity_mbps: f64, reference_unix_ms: f64) -> Job {
    let phase_ms = (p.last_start_unix_ms - reference_unix_ms).rem_euclid(p.period_ms);
    Job::from_periodicity(&periodicity(p, phase_ms), capacity_mbps * 1e6 / 8.0)
}

/// Periods this close (relative to the shorter) are one period: live periods of identical
/// jobs that share a link differ by a few percent (measured: 343 and 355 ms for one job run
/// twice), and on the circle two periods 3% apart are two periods whose arcs meet every
/// thirty-odd iterations (such a pair scored 0.81 where it fits in turns).
pub const SAME_PERIOD: f64 = 0.05;

/// Jobs whose periods are within [`SAME_PERIOD`] of the shortest of their group take the
/// group's mean period, each keeping its arc's length (groups in order of period; bounded:
/// a sort and one pass).
pub(crate) fn same_periods(ps: &mut [JobPeriod]) {
    let groups = period_groups(ps);
    pool_periods(ps, &groups);
}

/// The groups of jobs whose periods are within [`SAME_PERIOD`] of the shortest of their
/// group, in order of period.
fn period_groups(ps: &[JobPeriod]) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..ps.len()).collect();
    order.sort_by(|a, b| ps[*a].period_ms.total_cmp(&ps[*b].period_ms));
    let mut groups = Vec::new();
    let mut k = 0;
    while k < order.len() {
        let lo = ps[order[k]].period_ms;
        let mut e = k + 1;
        while e < order.len() && ps[order[e]].period_ms <= lo * (1.0 + SAME_PERIOD) {
            e += 1;
        }
        groups.push(order[k..e].to_vec());
        k = e;
    }
    groups
}

/// Each group's jobs take its mean period, each keeping its arc's length.
fn pool_periods(ps: &mut [JobPeriod], groups: &[Vec<usize>]) {
    for g in groups.iter().filter(|g| g.len() > 1) {
        #[allow(clippy::cast_precision_loss)]
        let mean = g.iter().map(|&i| ps[i].period_ms).sum::<f64>() / g.len() as f64;
        for &i in g {
            let arc_ms = ps[i].duty * ps[i].period_ms;
            ps[i].period_ms = mean;
            ps[i].duty = (arc_ms / mean).min(1.0);
        }
    }
}

/// The job as it would run alone on a link of `capacity_mbps`: jobs that collide are measured
/// at a stretched period (their arcs take longer while they share), in which two arcs at the
/// link's rate always fit. Its time off the wire (the period less its measured arc) plus its
/// bytes at the link's rate is its period alone (measured live: 307 ms stretched, 156 ms
/// alone). A job measured at no more than its wire time is taken as measured.
fn alone(p: &JobPeriod, capacity_mbps: f64) -> JobPeriod {
    let wire_ms = p.bytes_per_period * 8.0 / (capacity_mbps * 1e3);
    let measured_arc = p.duty * p.period_ms;
    if !(wire_ms.is_finite() && wire_ms > 0.0) || measured_arc <= wire_ms {
        return *p;
    }
    let period_ms = (p.period_ms - (measured_arc - wire_ms)).max(wire_ms);
    JobPeriod {
        period_ms,
        duty: (wire_ms / period_ms).min(1.0),
        ..*p
    }
}

/// What the detector said, as the circle takes it (the summary keeps no demand: it is the
/// bytes per period over the on intervals).
fn periodicity(p: &JobPeriod, phase_ms: f64) -> Periodicity {
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let ns = |ms: f64| (ms * 1e6).round() as u64; // plausible: under 10 minutes
    let period_s = p.period_ms / 1e3;
    let on_s = p.duty * period_s;
    Periodicity {
        period_ns: ns(p.period_ms).max(1),
        duty: p.duty,
        demand_bytes_per_s: if on_s > 0.0 {
            p.bytes_per_period / on_s
        } else {
            0.0
        },
        phase_ns: ns(phase_ms.min(p.period_ms)) % ns(p.period_ms).max(1),
        bytes_per_period: p.bytes_per_period,
        confidence: p.confidence,
        periods_seen: 0.0,
        samples_used: 0,
    }
}

#[cfg(test)]
mod tests;
