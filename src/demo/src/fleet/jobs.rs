//! `resex fleet demo --jobs` (issue 33 item 4): periodic jobs on real processes. Four embedded
//! hosts in this process, two on each of two shared uplinks (softhca's [`Uplink`]: their
//! guests' packets take it in turns), one job each: a BenchEx client that asks for a burst of
//! replies, waits for all of them, thinks, and asks again (compute, then communicate, as a
//! data-parallel training job does). The jobs of one uplink are compatible (each on the wire
//! under half its iteration), those of the other are not. Every job starts at the same instant
//! (they collide). Two runs from scratch on one timeline: fair (`[compat] adaptive = false`:
//! DRUM and the uplink's own turns), the control, then adaptive: each host's resexd detects
//! its job's period live, the coordinator scores both uplinks and hands the compatible jobs'
//! hosts their schedules. Each run is measured over a window as long after its start as the
//! other's. With `--fair-only` the second run is fair as well (how far two fair runs differ).
//!
//! Iteration times are counted by the hosts' monitors: a job's bytes over a window divided by
//! the bytes of one iteration (its burst of replies).

use crate::error::DemoError;
use crate::fleet::demo::{fleet_up, set_topology, Notes};
use crate::fleet::host::{FleetHost, Join};
use crate::fleet::watch::{allocations, wait};
use measure::iteration_ms;
pub use measure::Rounds;
use resex_api::VmSnap;
use resex_embedded::GuestCommand;
use resex_fleet::etcd::{unix_ms, Fleet};
use resex_fleet::local::LocalEtcd;
use resex_fleet::{FleetConfig, RoundReport, Topology};
use resex_scenario::Scenario;
use resex_softhca::Uplink;
use serde::Serialize;
use std::time::{Duration, Instant};

mod measure;

/// Each uplink's rate, Mb/s.
pub const UPLINK_MBPS: f64 = 100.0;

/// Bytes of one reply: small, so that a job's communication is a run of 1 ms intervals with
/// bytes (1.3 ms each on the uplink) that the detector sees as one arc.
const REPLY: u64 = 16 << 10;

/// One job of the demo.
#[derive(Debug, Clone, Copy)]
struct JobSpec {
    name: &'static str,
    link: &'static str,
    /// Its compute phase, ms.
    think_ms: f64,
    /// Replies per iteration.
    burst: u64,
}

/// The two pairs: `a*` on the wire 94 ms of about 244 ms alone (compatible: they interleave,
/// with 23% of the period to spare),
/// `b*` 126 ms of about 156 ms (not: together they need more than the link).
const JOBS: [JobSpec; 4] = [
    JobSpec {
        name: "job-a1",
        link: "uplink-a",
        think_ms: 150.0,
        burst: 72,
    },
    JobSpec {
        name: "job-a2",
        link: "uplink-a",
        think_ms: 150.0,
        burst: 72,
    },
    JobSpec {
        name: "job-b1",
        link: "uplink-b",
        think_ms: 30.0,
        burst: 96,
    },
    JobSpec {
        name: "job-b2",
        link: "uplink-b",
        think_ms: 30.0,
        burst: 96,
    },
];

/// How the jobs demo is set up.
#[derive(Debug, Clone)]
pub struct JobsOptions {
    /// The fleet lease's TTL, seconds.
    pub ttl: i64,
    /// How the guests' programs are started.
    pub command: GuestCommand,
    /// Seconds each measurement window lasts.
    pub window_s: f64,
    /// Seconds from the jobs' start to the window, in each run (later if the periods are not
    /// yet found and both uplinks scored by then).
    pub settle_s: f64,
    /// Whether the second run is adaptive (false: fair again, a control for how far two fair
    /// runs differ).
    pub adaptive: bool,
}

/// One job's figures.
#[derive(Debug, Clone, Serialize)]
pub struct JobReport {
    /// Its guest's name.
    pub name: String,
    /// The uplink it crosses.
    pub link: String,
    /// Its iteration time in the second run's window over the stretches the detector looked
    /// at, ms: for each verdict read, the monitor's exact byte count over that verdict's
    /// stretch (interpolated between readings 100 ms apart) divided by one iteration's bytes;
    /// the median (None: no verdict was read in the window, its stretch within the byte
    /// counts, read from 12 s before the window). The truth the detected period is compared with (a job's iterations speed
    /// up or slow down as it drifts or slides apart from its neighbour). Read once settled:
    /// soon after the start, the incompatible pair's jobs take turns being ahead and are read
    /// at a multiple of their period more often (docs/fleet.md).
    pub true_period_ms: Option<f64>,
    /// The period resexd detected, ms: the median of its fresh verdicts read in the second
    /// run's window (their stretches within the byte counts, read from 12 s before it), of its
    /// held ones when it has no fresh one (None: none).
    pub detected_period_ms: Option<f64>,
    /// The period of its link's grid in the second run's window, ms: the median over the
    /// rounds in which its host held a schedule on a grid for it (None: never on one). A job
    /// that slides late on its grid takes a long iteration that its byte count holds and
    /// its detected period, which the grid's arcs repeat at, does not.
    pub grid_period_ms: Option<f64>,
    /// Its iteration time in the fair run's window over the stretches the detector looked at
    /// (as `true_period_ms`, in the fair run), ms.
    pub fair_true_period_ms: Option<f64>,
    /// The period resexd detected in the fair run's window (as `detected_period_ms`), ms.
    pub fair_detected_period_ms: Option<f64>,
    /// Its iteration time in the fair run's window, ms.
    pub fair_iter_ms: f64,
    /// In the second run's window (adaptive unless `--fair-only`), ms.
    pub adaptive_iter_ms: f64,
    /// Rounds of the second run's window in which its host held a schedule for it (the
    /// adaptive allocation acting on it; 0 for a job on an incompatible link).
    pub scheduled_rounds: u64,
    /// Fair over adaptive (above 1: adaptive is faster).
    pub speedup: f64,
}

/// One uplink's score as the coordinator published it.
#[derive(Debug, Clone, Serialize)]
pub struct LinkScore {
    /// The topology link.
    pub name: String,
    /// Its circle score, rotated: the median of the scores of the coordinator's rounds read in
    /// the second run's window (its round report read every half second, each new round
    /// once: the first read may be the round in force as the window began, and rounds between
    /// two reads are missed; `first_score` when none of them scored it; None: not scored).
    pub score: Option<f64>,
    /// Its score in the first round that scored both uplinks (jobs a few seconds old: their
    /// periods from a short history, the pairs still colliding).
    pub first_score: Option<f64>,
    /// The lowest and the highest of the window's scores (None: no round read in it scored
    /// the link).
    pub score_range: Option<(f64, f64)>,
    /// Rounds of the window whose scores `score` is the median of.
    pub window_rounds: usize,
    /// Periodic jobs the coordinator saw on it (in the first round that scored both uplinks).
    pub jobs: usize,
}

/// What the jobs demo measured (`resex fleet demo --jobs --json`).
#[derive(Debug, Clone, Serialize)]
pub struct JobsReport {
    /// Each uplink's rate, Mb/s.
    pub uplink_mbps: f64,
    /// Each measurement window, s (`--window`).
    pub window_s: f64,
    /// How long each run's window lasted, s (fair, then the second run): each runs on, up to
    /// twice `window_s`, until every job has a period read and both uplinks have been scored.
    pub windows_s: [f64; 2],
    /// The jobs.
    pub jobs: Vec<JobReport>,
    /// The uplinks' scores in the second run's window (see [`LinkScore`]).
    pub links: Vec<LinkScore>,
    /// Schedules the coordinator handed out in the second run's last round.
    pub schedules: usize,
    /// When each run's window began, seconds after its jobs' start (fair, then the second
    /// run): the same unless finding the periods and scoring the links took longer than
    /// `--settle` in one of them.
    pub window_after_start_s: [f64; 2],
    /// The coordinator's rounds in the second window, and how many handed out schedules (a
    /// round hands none while the link's score is under the threshold or a job's period is
    /// not found).
    pub rounds: Rounds,
    /// Whether the second run was adaptive (false: `--fair-only`, the control; its
    /// `adaptive_iter_ms` are then fair too).
    pub adaptive: bool,
}

/// A job's scenario: one guest whose client runs it.
fn scenario(host: &str, j: &JobSpec) -> Result<Scenario, DemoError> {
    Scenario::from_toml(&format!(
        r#"
name = "jobs-{host}"
[link]
preset = "100g"
[[guest]]
name = "{}"
ram = "64MiB"
[guest.benchex]
buffer = "{REPLY}"
rate = 0.0
window = 8
think_ms = {}
burst = {}
polling = "batch"
"#,
        j.name, j.think_ms, j.burst
    ))
    .map_err(|source| DemoError::Scenario {
        what: "the jobs demo's scenario",
        source,
    })
}

/// The topology: each pair's uplink; adaptive unfairness on or off.
fn topology(ttl: i64, adaptive: bool) -> Result<Topology, DemoError> {
    Ok(Topology::from_toml(&format!(
        "valid_s = {}\n\
         [[link]]\nname = \"uplink-a\"\ncapacity_mbps = {UPLINK_MBPS}\nhosts = [\"host1\", \"host2\"]\n\
         [[link]]\nname = \"uplink-b\"\ncapacity_mbps = {UPLINK_MBPS}\nhosts = [\"host3\", \"host4\"]\n\
         [compat]\nadaptive = {adaptive}\n",
        ttl + 1
    ))?)
}

/// The coordinator's last round report, if one is there.
fn round(url: &str) -> Option<RoundReport> {
    Fleet::connect(&FleetConfig::new(vec![url.to_owned()]))
        .and_then(|mut f| f.round())
        .ok()
        .flatten()
}

/// Each job's VM on its host, now.
fn job_vms(hosts: &[FleetHost]) -> Vec<Option<VmSnap>> {
    hosts
        .iter()
        .zip(JOBS)
        .map(|(h, j)| {
            h.daemon()
                .and_then(|d| d.snapshot().vms.iter().find(|v| v.name == j.name).cloned())
        })
        .collect()
}

/// A VM's detected period, ms.
fn detected(v: &VmSnap) -> Option<f64> {
    v.period
        .as_ref()
        .and_then(|p| p.found.as_ref())
        .map(|f| f.period_ms)
}

/// Runs the jobs demo (see the module's documentation).
pub fn run_jobs(o: &JobsOptions, notes: &mut dyn Notes) -> Result<JobsReport, DemoError> {
    if !resex_fleet::local::installed() {
        return Err(DemoError::NoEtcd);
    }
    let kind = |adaptive: bool| if adaptive { "adaptive" } else { "fair" };
    notes.progress("run 1 of 2: fair, the control");
    let fair = run_once(o, false, 1, notes)?;
    notes.progress(&format!("fair: {}", describe(&fair.iter_ms)));
    notes.progress(&format!("run 2 of 2: {}", kind(o.adaptive)));
    // As long after its start as the fair run's, if that one began late.
    let late = JobsOptions {
        settle_s: o.settle_s.max(fair.after_start_s),
        ..o.clone()
    };
    let second = run_once(&late, o.adaptive, 2, notes)?;
    notes.progress(&format!(
        "{}: {}",
        kind(o.adaptive),
        describe(&second.iter_ms)
    ));
    let jobs = JOBS
        .iter()
        .enumerate()
        .map(|(k, j)| JobReport {
            name: j.name.into(),
            link: j.link.into(),
            true_period_ms: second.periods[k].map(|p| p.1),
            detected_period_ms: second.periods[k].map(|p| p.0),
            grid_period_ms: second.grid_ms[k],
            fair_true_period_ms: fair.periods[k].map(|p| p.1),
            fair_detected_period_ms: fair.periods[k].map(|p| p.0),
            fair_iter_ms: fair.iter_ms[k],
            adaptive_iter_ms: second.iter_ms[k],
            speedup: fair.iter_ms[k] / second.iter_ms[k],
            scheduled_rounds: second.scheduled[k],
        })
        .collect();
    Ok(JobsReport {
        uplink_mbps: UPLINK_MBPS,
        window_s: seconds(o.window_s, 1.0).as_secs_f64(),
        jobs,
        links: second.links,
        schedules: second.schedules,
        window_after_start_s: [fair.after_start_s, second.after_start_s],
        windows_s: [fair.window_s, second.window_s],
        rounds: second.rounds,
        adaptive: o.adaptive,
    })
}

/// What one run measured.
struct Run {
    /// When its window began, seconds after the jobs' start.
    after_start_s: f64,
    /// How long its window lasted, s.
    window_s: f64,
    /// Each job's rounds in the window in which its host held a schedule for it.
    scheduled: Vec<u64>,
    /// Each job's grid period in the window, ms (see [`JobReport::grid_period_ms`]).
    grid_ms: Vec<Option<f64>>,
    /// Each job's iteration time over the window, ms.
    iter_ms: Vec<f64>,
    /// Each job's detected period against its truth (see [`measure::Periods`]).
    periods: measure::Periods,
    /// The uplinks' scores over the window (see [`LinkScore`]).
    links: Vec<LinkScore>,
    /// The coordinator's rounds in the window.
    rounds: Rounds,
    /// Schedules handed out in the window's last round.
    schedules: usize,
}

/// One run from scratch: a fresh etcd and four hosts, every job started at one instant, the
/// fleet fair or adaptive from the start; every period found and both uplinks scored; the
/// window `o.settle_s` seconds after the jobs' start (or then, if later). Both runs keep this timeline: two jobs of
/// one period that start together drift apart under fair sharing too (noise walks their
/// offset, which fair sharing neither pulls in nor pushes out), so fair is measured as long
/// after the start as adaptive is.
fn run_once(
    o: &JobsOptions,
    adaptive: bool,
    n: u32,
    notes: &mut dyn Notes,
) -> Result<Run, DemoError> {
    let etcd = LocalEtcd::start()?;
    let url = etcd.url();
    let root = std::env::temp_dir().join(format!("resex-fleet-jobs-{}-{n}", std::process::id()));
    let _clean = crate::fleet::demo::RemoveOnDrop(root.clone());
    let join = Join {
        url: &url,
        ttl: o.ttl,
        root: &root,
        command: &o.command,
    };
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let bps = (UPLINK_MBPS * 1e6) as u64;
    let uplinks = [Uplink::new(bps), Uplink::new(bps)];
    notes.progress(&format!(
        "etcd at {url}; four hosts, two on each of two {UPLINK_MBPS} Mb/s uplinks"
    ));
    let mut hosts = Vec::new();
    for (i, j) in JOBS.iter().enumerate() {
        let name = format!("host{}", i + 1);
        let up = uplinks[i / 2].clone();
        let sc = scenario(&name, j)?;
        hosts.push(FleetHost::start_on(name, sc, join, |hc| {
            hc.uplink = Some(up);
        })?);
    }
    set_topology(&url, &topology(o.ttl, adaptive)?)?;
    let start = start_together(&mut hosts, notes)?;
    all_detected(&mut hosts, notes)?;
    let links = scored(&url, &hosts, notes)?;
    if adaptive {
        wait("the adaptive schedules", Duration::from_secs(30), || {
            Ok(round(&url).is_some_and(|r| r.schedules > 0))
        })?;
        notes.progress("adaptive schedules in force");
    }
    let begin = start + seconds(o.settle_s, 0.0);
    notes.progress(&format!(
        "the window {:.0} s after the jobs' start, {:.0} s long",
        o.settle_s, o.window_s
    ));
    // The byte counts are read from LEAD before the window (later: the window begins LEAD
    // after they are first read), so a verdict read early in the window has its stretch counted.
    settle(
        &mut hosts,
        begin
            .checked_sub(measure::LEAD)
            .map_or(Duration::ZERO, |b| {
                b.saturating_duration_since(Instant::now())
            }),
    )?;
    let after_start_s = (start.elapsed() + measure::LEAD).as_secs_f64();
    // The window runs on until every period is read and both uplinks scored.
    let measure::Measured {
        iter_ms,
        rounds,
        periods,
        scheduled,
        grid_ms,
        scores,
        window_s,
    } = iteration_ms(&hosts, seconds(o.window_s, 1.0), &url);
    let links = links
        .into_iter()
        .map(|l| {
            let w = measure::window_score(&scores, &l.name, l.score);
            LinkScore {
                score: w.median,
                score_range: w.range,
                window_rounds: w.rounds,
                ..l
            }
        })
        .collect();
    let schedules = round(&url).map_or(0, |r| r.schedules);
    for h in &mut hosts {
        h.stop();
    }
    drop(etcd);
    Ok(Run {
        after_start_s,
        window_s,
        scheduled,
        grid_ms,
        iter_ms,
        periods,
        links,
        rounds,
        schedules,
    })
}

/// Waits for the fleet, then starts every job at one instant (3 s ahead: every client has
/// connected by then); returns [`WARM`] after it, with the instant they started.
fn start_together(hosts: &mut [FleetHost], notes: &mut dyn Notes) -> Result<Instant, DemoError> {
    fleet_up(hosts)?;
    let at = unix_ms() + 3000;
    for h in hosts.iter_mut() {
        h.start_guest_at(Some(at))?;
    }
    let start = Instant::now() + Duration::from_millis(at.saturating_sub(unix_ms()));
    notes.progress("jobs started together; waiting for every period to be detected");
    settle(
        hosts,
        (start + WARM).saturating_duration_since(Instant::now()),
    )?;
    Ok(start)
}

/// How long after the jobs start their periods are first looked for.
const WARM: Duration = Duration::from_secs(2);

/// Waits until every job's period is detected.
fn all_detected(hosts: &mut [FleetHost], notes: &mut dyn Notes) -> Result<(), DemoError> {
    let mut said = Instant::now();
    let r = wait(
        "every job detected periodic",
        Duration::from_secs(90),
        || {
            for h in hosts.iter_mut() {
                h.check()?;
            }
            let vms = job_vms(hosts);
            if said.elapsed() >= Duration::from_secs(10) {
                said = Instant::now();
                notes.progress(&states(&vms));
            }
            Ok(vms.iter().all(|v| v.as_ref().and_then(detected).is_some()))
        },
    );
    if r.is_err() {
        notes.warn(&format!("resex fleet demo: {}", states(&job_vms(hosts))));
    }
    r.map(|_| ())
}

/// Each job's rate and period verdict, for a progress line.
#[allow(clippy::cast_precision_loss)]
fn states(vms: &[Option<VmSnap>]) -> String {
    JOBS.iter()
        .zip(vms)
        .map(|(j, v)| match v {
            None => format!("{}: not seen", j.name),
            Some(v) => {
                let p = v.period.as_ref();
                let verdict = match p.and_then(|p| p.found.as_ref()) {
                    Some(f) => format!("period {:.1} ms", f.period_ms),
                    None => format!(
                        "not periodic: {}",
                        p.and_then(|p| p.why_not.clone()).unwrap_or_default()
                    ),
                };
                format!(
                    "{}: {:.0} Mb/s, {verdict}",
                    j.name,
                    v.bytes_per_s * 8.0 / 1e6
                )
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Waits until the coordinator has scored both uplinks; their scores.
fn scored(
    url: &str,
    hosts: &[FleetHost],
    notes: &mut dyn Notes,
) -> Result<Vec<LinkScore>, DemoError> {
    let mut links = Vec::new();
    wait("both uplinks scored", Duration::from_secs(60), || {
        let Some(r) = round(url) else {
            return Ok(false);
        };
        links = r
            .links
            .iter()
            .map(|l| LinkScore {
                name: l.link.clone(),
                score: l.score,
                first_score: l.score,
                score_range: None,
                window_rounds: 0,
                jobs: l.jobs.len(),
            })
            .collect();
        Ok(links.len() == 2 && links.iter().all(|l| l.score.is_some() && l.jobs == 2))
    })?;
    let periods: Vec<String> = job_vms(hosts)
        .iter()
        .zip(JOBS)
        .map(|(v, j)| {
            let p = v.as_ref().and_then(detected);
            format!(
                "{} {}",
                j.name,
                p.map_or("-".into(), |p| format!("{p:.1} ms"))
            )
        })
        .collect();
    let scores: Vec<String> = links
        .iter()
        .map(|l| format!("{} {:.2}", l.name, l.score.unwrap_or(f64::NAN)))
        .collect();
    notes.progress(&format!(
        "periods {}; scores {}",
        periods.join(", "),
        scores.join(", ")
    ));
    Ok(links)
}

/// Lets `d` pass, checking every second that the guests still run.
fn settle(hosts: &mut [FleetHost], d: Duration) -> Result<(), DemoError> {
    let t = Instant::now();
    while t.elapsed() < d {
        for h in hosts.iter_mut() {
            h.check()?;
        }
        std::thread::sleep(Duration::from_secs(1).min(d.saturating_sub(t.elapsed())));
    }
    Ok(())
}

/// `s` seconds, at least `min` and at most 600 (NaN: `min`).
fn seconds(s: f64, min: f64) -> Duration {
    Duration::from_secs_f64(if s.is_nan() { min } else { s.clamp(min, 600.0) })
}

/// Each job's iteration time, for a progress line.
fn describe(ms: &[f64]) -> String {
    JOBS.iter()
        .zip(ms)
        .map(|(j, m)| format!("{} {m:.1} ms", j.name))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_jobs_scenarios_and_topologies_are_valid() {
        for (i, j) in JOBS.iter().enumerate() {
            let s = scenario(&format!("host{}", i + 1), j).unwrap();
            assert_eq!(s.guests[0].name, j.name);
            assert_eq!(s.guests[0].benchex.burst, j.burst);
        }
        let fair = topology(3, false).unwrap();
        assert!(!fair.compat.adaptive);
        assert_eq!(fair.links.len(), 2);
        assert!(topology(3, true).unwrap().compat.adaptive);
        assert_eq!(describe(&[1.0; 4]).matches("1.0 ms").count(), 4);
        assert_eq!(seconds(f64::INFINITY, 1.0), Duration::from_secs(600));
        assert_eq!(seconds(f64::NAN, 1.0), Duration::from_secs(1));
        assert_eq!(seconds(-3.0, 0.0), Duration::ZERO);
    }
}
