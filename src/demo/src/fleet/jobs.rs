//! `resex fleet demo --jobs` (issue 33 item 4): periodic jobs on real processes. Four embedded
//! hosts in this process, two on each of two shared uplinks (softhca's [`Uplink`]: their
//! guests' packets take it in turns), one job each: a BenchEx client that asks for a burst of
//! replies, waits for all of them, thinks, and asks again (compute, then communicate, as a
//! data-parallel training job does). The jobs of one uplink are compatible (each on the wire
//! under half its iteration), those of the other are not. Every job starts at the same instant
//! (they collide). The fleet runs fair first (`[compat] adaptive = false`: DRUM and the uplink's
//! own turns), then adaptive: each host's resexd detects its job's period live, the
//! coordinator scores both uplinks and hands the compatible jobs' hosts their schedules.
//! With `--fair-only` the second window is fair as well: a control for how far the jobs drift
//! apart on their own between the two windows.
//!
//! Iteration times are counted by the hosts' monitors: a job's bytes over a window divided by
//! the bytes of one iteration (its burst of replies).

use crate::error::DemoError;
use crate::fleet::demo::{fleet_up, set_topology, Notes};
use crate::fleet::host::{FleetHost, Join};
use crate::fleet::watch::wait;
use resex_api::VmSnap;
use resex_embedded::GuestCommand;
use resex_fleet::etcd::{unix_ms, Fleet};
use resex_fleet::local::LocalEtcd;
use resex_fleet::{FleetConfig, RoundReport, Topology};
use resex_scenario::Scenario;
use resex_softhca::Uplink;
use serde::Serialize;
use std::time::{Duration, Instant};

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
    /// Seconds the adaptive allocation has before it is measured.
    pub settle_s: f64,
    /// Whether the second window runs the adaptive allocation (false: fair again, a control
    /// for how far the jobs drift apart on their own).
    pub adaptive: bool,
}

/// One job's figures.
#[derive(Debug, Clone, Serialize)]
pub struct JobReport {
    /// Its guest's name.
    pub name: String,
    /// The uplink it crosses.
    pub link: String,
    /// Its iteration time as it ran in the fair window, ms: the monitor's exact byte count over
    /// the window divided by one iteration's bytes (the same figure as `fair_iter_ms`; the
    /// truth the detected period is compared with).
    pub true_period_ms: f64,
    /// The period resexd detected in that window, ms: the median of its verdicts read every
    /// half second in the window's last two thirds (None: none found).
    pub detected_period_ms: Option<f64>,
    /// Its iteration time under the fair allocation, ms.
    pub fair_iter_ms: f64,
    /// Under the adaptive allocation, ms.
    pub adaptive_iter_ms: f64,
    /// Fair over adaptive (above 1: adaptive is faster).
    pub speedup: f64,
}

/// One uplink's score as the coordinator published it.
#[derive(Debug, Clone, Serialize)]
pub struct LinkScore {
    /// The topology link.
    pub name: String,
    /// Its circle score, rotated (None: not scored; see the round report).
    pub score: Option<f64>,
    /// Periodic jobs the coordinator saw on it.
    pub jobs: usize,
}

/// What the jobs demo measured (`resex fleet demo --jobs --json`).
#[derive(Debug, Clone, Serialize)]
pub struct JobsReport {
    /// Each uplink's rate, Mb/s.
    pub uplink_mbps: f64,
    /// Each measurement window, s.
    pub window_s: f64,
    /// The jobs.
    pub jobs: Vec<JobReport>,
    /// The uplinks' scores (the fair phase's last round).
    pub links: Vec<LinkScore>,
    /// Schedules the coordinator handed out in the adaptive phase's last round.
    pub schedules: usize,
    /// The coordinator's rounds in the second window, and how many handed out schedules (a
    /// round hands none while the link's score is under the threshold or a job's period is
    /// not found).
    pub rounds: Rounds,
    /// Whether the second window ran the adaptive allocation (false: `--fair-only`, the
    /// control; its `adaptive_iter_ms` are then fair too).
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
polling = "adaptive"
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

/// Each job's iteration time over `window`, ms, from its monitor's exact byte count.
#[allow(clippy::cast_precision_loss)]
fn iteration_ms(
    hosts: &[FleetHost],
    window: Duration,
    url: &str,
) -> (Vec<f64>, Rounds, Vec<Option<f64>>) {
    let bytes = |hosts: &[FleetHost]| -> Vec<u64> {
        job_vms(hosts)
            .iter()
            .map(|v| v.as_ref().map_or(0, |v| v.tx_bytes_total))
            .collect()
    };
    let (b0, t0) = (bytes(hosts), Instant::now());
    let (rounds, periods) = watch(hosts, url, window);
    let (b1, dt) = (bytes(hosts), t0.elapsed().as_secs_f64());
    let ms = b0
        .iter()
        .zip(&b1)
        .zip(JOBS)
        .map(|((a, b), j)| {
            let iterations = b.saturating_sub(*a) as f64 / (j.burst * REPLY) as f64;
            if iterations > 0.0 {
                dt * 1000.0 / iterations
            } else {
                f64::INFINITY
            }
        })
        .collect();
    (ms, rounds, periods)
}

/// The coordinator's rounds seen in a window.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Rounds {
    /// Rounds seen (the round report read every half second).
    pub seen: u64,
    /// Of those, rounds that handed out schedules.
    pub with_schedules: u64,
}

/// Reads the round report and the jobs' detected periods every half second for `window`:
/// the rounds (each counted once) and each job's detected period, the median of the readings
/// in the window's last two thirds (the detector's verdicts over the stretch the window
/// counts; a look that takes a multiple of the period, as the detector does now and then when
/// two jobs take turns being ahead, or finds none for a few seconds, as it does now and then
/// for an incompatible pair that all but fills its link, is a few readings of many).
fn watch(hosts: &[FleetHost], url: &str, window: Duration) -> (Rounds, Vec<Option<f64>>) {
    let t = Instant::now();
    let mut r = Rounds::default();
    let mut last = None;
    let mut readings: Vec<Vec<f64>> = vec![Vec::new(); JOBS.len()];
    while t.elapsed() < window {
        std::thread::sleep(Duration::from_millis(500).min(window.saturating_sub(t.elapsed())));
        if let Some(rep) = round(url).filter(|rep| Some(rep.round) != last) {
            last = Some(rep.round);
            r.seen += 1;
            r.with_schedules += u64::from(rep.schedules > 0);
        }
        if t.elapsed() * 3 >= window {
            for (k, v) in job_vms(hosts).iter().enumerate() {
                if let Some(p) = v.as_ref().and_then(detected) {
                    readings[k].push(p);
                }
            }
        }
    }
    (r, readings.into_iter().map(median).collect())
}

/// The median of `v` (None when empty).
fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some(0.5 * (v[n / 2 - 1] + v[n / 2])),
    }
}

/// Runs the jobs demo (see the module's documentation).
pub fn run_jobs(o: &JobsOptions, notes: &mut dyn Notes) -> Result<JobsReport, DemoError> {
    if !resex_fleet::local::installed() {
        return Err(DemoError::NoEtcd);
    }
    let etcd = LocalEtcd::start()?;
    let url = etcd.url();
    let root = std::env::temp_dir().join(format!("resex-fleet-jobs-{}", std::process::id()));
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
    set_topology(&url, &topology(o.ttl, false)?)?;
    start_together(&mut hosts, notes)?;
    let links = scored(&url, &hosts, notes)?;
    let window = seconds(o.window_s, 1.0);
    let (fair, _, periods) = iteration_ms(&hosts, window, &url);
    notes.progress(&format!("fair: {}", describe(&fair)));
    if o.adaptive {
        set_topology(&url, &topology(o.ttl, true)?)?;
        wait("the adaptive schedules", Duration::from_secs(30), || {
            Ok(round(&url).is_some_and(|r| r.schedules > 0))
        })?;
        notes.progress(&format!(
            "adaptive schedules in force; {:.0} s for the jobs to slide apart",
            o.settle_s
        ));
    } else {
        notes.progress(&format!(
            "the control: fair again for {:.0} s, then measured as the adaptive window is",
            o.settle_s
        ));
    }
    settle(&mut hosts, seconds(o.settle_s, 0.0))?;
    let (adaptive, rounds, _) = iteration_ms(&hosts, window, &url);
    let schedules = round(&url).map_or(0, |r| r.schedules);
    let second = if o.adaptive { "adaptive" } else { "fair again" };
    notes.progress(&format!("{second}: {}", describe(&adaptive)));
    let jobs = JOBS
        .iter()
        .enumerate()
        .map(|(k, j)| JobReport {
            name: j.name.into(),
            link: j.link.into(),
            true_period_ms: fair[k],
            detected_period_ms: periods[k],
            fair_iter_ms: fair[k],
            adaptive_iter_ms: adaptive[k],
            speedup: fair[k] / adaptive[k],
        })
        .collect();
    for h in &mut hosts {
        h.stop();
    }
    drop(etcd);
    Ok(JobsReport {
        uplink_mbps: UPLINK_MBPS,
        window_s: window.as_secs_f64(),
        jobs,
        links,
        schedules,
        rounds,
        adaptive: o.adaptive,
    })
}

/// Waits for the fleet, then starts every job at one instant (3 s ahead: every client has
/// connected by then) and waits for every monitor to see it send.
fn start_together(hosts: &mut [FleetHost], notes: &mut dyn Notes) -> Result<(), DemoError> {
    fleet_up(hosts)?;
    let at = unix_ms() + 3000;
    for h in hosts.iter_mut() {
        h.start_guest_at(Some(at))?;
    }
    notes.progress("jobs started together; waiting for every period to be detected");
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
