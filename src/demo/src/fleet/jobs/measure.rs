//! What the jobs demo measures in a window: each job's iteration time from its monitor's exact
//! byte count, the coordinator's rounds, and each job's detected period against its iteration
//! time over the stretch the detector looked at.

use super::{allocations, job_vms, JobSpec, JOBS, REPLY};
use crate::fleet::host::FleetHost;
use resex_api::VmSnap;
use serde::Serialize;
use std::time::{Duration, Instant};

/// How long before the window the jobs' byte counts are read from: longer than the detector's
/// history (8 192 intervals of 1 ms) and a verdict's age (resexd looks every 2 s), so that
/// every verdict read in the
/// window has its whole stretch counted (without it only verdicts read in the window's second
/// half could be compared: fewer for a pair that all but fills its link, found periodic in
/// some looks only).
pub(super) const LEAD: Duration = Duration::from_secs(12);

/// The most a window lasts when it runs on ([`iteration_ms`]), in windows.
pub(super) const MAX_RUN_ON: f64 = 2.0;

/// What a window measured ([`iteration_ms`]).
pub(super) struct Measured {
    /// Each job's iteration time over the window, ms.
    pub iter_ms: Vec<f64>,
    /// The coordinator's rounds.
    pub rounds: Rounds,
    /// Each job's detected period and its truth over the same stretches.
    pub periods: Periods,
    /// Each job's rounds under a schedule.
    pub scheduled: Vec<u64>,
    /// Each job's grid period over those rounds, ms (the median; None: never on a grid).
    pub grid_ms: Vec<Option<f64>>,
    /// Each scored link's scores.
    pub scores: LinkScores,
    /// How long the window lasted, s.
    pub window_s: f64,
}

/// Reads the byte counts for [`LEAD`], then for `window` (and on until every job
/// has a period read and every uplink has been scored, up to [`MAX_RUN_ON`] windows: a pair
/// that all but fills its link is found periodic in some looks only, on a busy machine for
/// tens of seconds at a time): each job's iteration time over the window, ms, from its
/// monitor's exact byte count; the coordinator's rounds; each job's detected period and its
/// truth over the same stretches ([`Periods`]); each job's rounds under a schedule.
pub(super) fn iteration_ms(hosts: &[FleetHost], window: Duration, url: &str) -> Measured {
    let w = watch(hosts, url, window, window.mul_f64(MAX_RUN_ON));
    let ms = JOBS
        .iter()
        .enumerate()
        .map(|(k, j)| {
            sent_in_window(&w.series, k).map_or(f64::INFINITY, |(b, ms)| iteration_over(*j, b, ms))
        })
        .collect();
    let periods = w
        .readings
        .iter()
        .zip(JOBS)
        .enumerate()
        .map(|(k, (rs, j))| compare(rs, &w.series, k, j))
        .collect();
    Measured {
        iter_ms: ms,
        rounds: w.rounds,
        periods,
        grid_ms: w.grid_ms.into_iter().map(median).collect(),
        scheduled: w.scheduled,
        window_s: w.series.last().map_or(0.0, |(t, _)| t / 1000.0),
        scores: w.scores,
    }
}

/// Job `k`'s bytes sent from the first reading in the window (at 0 ms or later) to the last,
/// and the milliseconds between them (None: no reading in the window).
fn sent_in_window(series: &Series, k: usize) -> Option<(u64, f64)> {
    let (t0, b0) = series.iter().find(|(t, _)| *t >= 0.0)?;
    let (t1, b1) = series.last()?;
    Some((b1.get(k)?.saturating_sub(*b0.get(k)?), t1 - t0))
}

/// A job's iteration time, ms, from the bytes it sent over `ms` milliseconds.
#[allow(clippy::cast_precision_loss)]
fn iteration_over(j: JobSpec, bytes: u64, ms: f64) -> f64 {
    let iterations = bytes as f64 / (j.burst * REPLY) as f64;
    if iterations > 0.0 {
        ms / iterations
    } else {
        f64::INFINITY
    }
}

/// Each job's detected period (the median of its fresh verdicts read in the window whose
/// stretch lies in the byte counts read, from [`LEAD`] before it; of its held ones when it has
/// none) and its iteration time as the monitor counted it
/// over each of those stretches (the median): a job whose iterations speed up or slow down within the window (two jobs drifting
/// apart) is compared over what the detector looked at. None: no verdict's stretch lay in it.
pub(super) type Periods = Vec<Option<(f64, f64)>>;

/// Each scored link's scores, one per round read, in the order first seen.
pub(super) type LinkScores = Vec<(String, Vec<f64>)>;

/// The jobs' byte counts through a window: ms since it began (negative before it, from
/// [`LEAD`] on), each job's bytes.
type Series = Vec<(f64, Vec<u64>)>;

/// One verdict read: its period and the stretch it looked at, ms since the window began.
#[derive(Debug, Clone, Copy)]
struct Reading {
    period_ms: f64,
    from_ms: f64,
    to_ms: f64,
    /// Not a verdict held over looks that found none.
    fresh: bool,
}

/// Job `k`'s detected period against its truth over the same stretches (see [`Periods`]).
fn compare(rs: &[Reading], series: &Series, k: usize, j: JobSpec) -> Option<(f64, f64)> {
    let at = |t: f64| bytes_at(series, k, t);
    let pairs: Vec<(bool, f64, f64)> = rs
        .iter()
        .filter_map(|r| {
            let (a, b) = (at(r.from_ms)?, at(r.to_ms)?);
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let sent = (b - a).max(0.0) as u64;
            let truth = iteration_over(j, sent, r.to_ms - r.from_ms);
            truth.is_finite().then_some((r.fresh, r.period_ms, truth))
        })
        .collect();
    let any_fresh = pairs.iter().any(|p| p.0);
    let (found, truth): (Vec<f64>, Vec<f64>) = pairs
        .iter()
        .filter(|p| p.0 || !any_fresh)
        .map(|p| (p.1, p.2))
        .unzip();
    Some((median(found)?, median(truth)?))
}

/// Job `k`'s bytes at `t` ms into the window, interpolated between the readings around it
/// (None: outside them).
#[allow(clippy::cast_precision_loss)]
fn bytes_at(series: &Series, k: usize, t: f64) -> Option<f64> {
    let i = series.iter().position(|(s, _)| *s >= t)?;
    let (t1, b1) = (series[i].0, series[i].1[k] as f64);
    if i == 0 {
        return (t1 == t).then_some(b1);
    }
    let (t0, b0) = (series[i - 1].0, series[i - 1].1[k] as f64);
    Some(b0 + (b1 - b0) * (t - t0) / (t1 - t0).max(1e-9))
}

/// The coordinator's rounds seen in a window.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Rounds {
    /// Rounds seen (the round report read every half second).
    pub seen: u64,
    /// Of those, rounds that handed out schedules.
    pub with_schedules: u64,
}

/// What [`watch`] saw in a window.
struct Watched {
    /// The rounds (each counted once).
    rounds: Rounds,
    /// The jobs' byte counts.
    series: Series,
    /// Each job's verdicts read in the window whose stretch lies in the byte counts.
    readings: Vec<Vec<Reading>>,
    /// Each job's rounds in which its host's allocation held a schedule for it.
    scheduled: Vec<u64>,
    /// Each job's grid period in each of those rounds whose schedule was on a grid, ms.
    grid_ms: Vec<Vec<f64>>,
    /// Each scored link's scores, one per round read.
    scores: LinkScores,
}

/// How often [`watch`] reads the jobs' byte counts and verdicts, ms.
const READ_MS: u64 = 100;

/// Reads of the byte counts per read of the coordinator's allocations and round report.
const READS_PER_ROUND_READ: u32 = 5;

/// Reads the jobs' byte counts and period verdicts every [`READ_MS`] for `window` (resexd's
/// intervals are 1 ms; see [`reading`]), and the coordinator's allocations and round report
/// every [`READS_PER_ROUND_READ`] reads (each new round counted once; rounds published between
/// two reads are missed).
fn watch(hosts: &[FleetHost], url: &str, window: Duration, most: Duration) -> Watched {
    let t = Instant::now() + LEAD;
    let mut in_window = 0u32;
    let mut w = Watched {
        rounds: Rounds::default(),
        series: Vec::new(),
        readings: vec![Vec::new(); JOBS.len()],
        scheduled: vec![0; JOBS.len()],
        grid_ms: vec![Vec::new(); JOBS.len()],
        scores: Vec::new(),
    };
    let mut last = None;
    loop {
        let (now, vms) = (ms_since(t), job_vms(hosts));
        let bytes = vms
            .iter()
            .map(|v| v.as_ref().map_or(0, |v| v.tx_bytes_total));
        w.series.push((now, bytes.collect()));
        // The counts reach back to the first reading.
        let lead_ms = -w.series[0].0;
        for (k, v) in vms.iter().enumerate() {
            if let Some(x) = v.as_ref().and_then(|v| reading(v, now, lead_ms)) {
                w.readings[k].push(x);
            }
        }
        let done = ms_since(t) / 1000.0;
        if done >= most.as_secs_f64() || (done >= window.as_secs_f64() && seen_all(&w)) {
            break;
        }
        let until = if done < window.as_secs_f64() {
            window
        } else {
            most
        };
        let left = (t + until).saturating_duration_since(Instant::now());
        std::thread::sleep(Duration::from_millis(READ_MS).min(left));
        if now >= 0.0 {
            if in_window.is_multiple_of(READS_PER_ROUND_READ) {
                count_round(url, &mut last, &mut w);
            }
            in_window += 1;
        }
    }
    w
}

/// Whether every job has a period read and every uplink of the jobs has been scored.
fn seen_all(w: &Watched) -> bool {
    w.readings.iter().all(|r| !r.is_empty())
        && JOBS
            .iter()
            .all(|j| w.scores.iter().any(|(l, _)| l == j.link))
}

/// Milliseconds from `t` to now (negative before it).
fn ms_since(t: Instant) -> f64 {
    let now = Instant::now();
    match now.checked_duration_since(t) {
        Some(d) => d.as_secs_f64() * 1000.0,
        None => -(t - now).as_secs_f64() * 1000.0,
    }
}

/// Reads the coordinator's allocations and round report; a new round is counted, with each
/// job whose host's allocation holds a schedule for it (and its grid's period, if on one).
fn count_round(url: &str, last: &mut Option<u64>, w: &mut Watched) {
    let Some((allocations, Some(rep))) = allocations(url) else {
        return;
    };
    if Some(rep.round) == *last {
        return;
    }
    *last = Some(rep.round);
    w.rounds.seen += 1;
    w.rounds.with_schedules += u64::from(rep.schedules > 0);
    for (k, j) in JOBS.iter().enumerate() {
        let host = format!("host{}", k + 1);
        let held = allocations
            .iter()
            .filter(|a| a.host == host)
            .find_map(|a| a.adaptive.iter().find(|s| s.vm == j.name));
        w.scheduled[k] += u64::from(held.is_some());
        if let Some(s) = held.filter(|s| s.grid) {
            w.grid_ms[k].push(s.me.period_ms);
        }
    }
    for l in &rep.links {
        let Some(score) = l.score else { continue };
        match w.scores.iter_mut().find(|(name, _)| *name == l.link) {
            Some((_, v)) => v.push(score),
            None => w.scores.push((l.link.clone(), vec![score])),
        }
    }
}

/// A link's scores over a window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct WindowScore {
    /// The median of the rounds' scores (`first`, the score once both links were scored, when
    /// no round read in the window scored it).
    pub median: Option<f64>,
    /// The lowest and the highest (None: no round).
    pub range: Option<(f64, f64)>,
    /// Rounds read that scored it.
    pub rounds: usize,
}

/// Link `link`'s scores over a window, from the rounds read in it.
pub(super) fn window_score(
    scores: &[(String, Vec<f64>)],
    link: &str,
    first: Option<f64>,
) -> WindowScore {
    let seen = scores
        .iter()
        .find(|(name, _)| name == link)
        .map_or(&[][..], |(_, v)| v.as_slice());
    let lo = seen.iter().copied().reduce(f64::min);
    let hi = seen.iter().copied().reduce(f64::max);
    WindowScore {
        median: median(seen.to_vec()).or(first),
        range: lo.zip(hi),
        rounds: seen.len(),
    }
}

/// A VM's verdict read `now` ms into the window (None before it), if its stretch began at most
/// `lead_ms` before the window (the byte counts reach back that far). A verdict
/// held over looks that found none (`why_not` beside it) is not fresh: its age is the latest
/// look's, so its stretch is placed up to a few looks late; it is compared only when a job has
/// no fresh one in the window (a pair that all but fills its link is found aperiodic in some
/// looks, the more so on a busy machine).
#[allow(clippy::cast_precision_loss)]
fn reading(v: &VmSnap, now: f64, lead_ms: f64) -> Option<Reading> {
    let p = v.period.as_ref()?;
    let to_ms = now - p.age_ms as f64;
    let from_ms = to_ms - p.samples as f64;
    (now >= 0.0 && from_ms >= -lead_ms).then_some(Reading {
        period_ms: p.found.as_ref()?.period_ms,
        from_ms,
        to_ms,
        fresh: p.why_not.is_none(),
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_runs_on_until_every_period_is_read_and_every_uplink_scored() {
        let r = Reading {
            period_ms: 300.0,
            from_ms: 0.0,
            to_ms: 1.0,
            fresh: true,
        };
        let mut w = Watched {
            rounds: Rounds::default(),
            series: Vec::new(),
            readings: vec![vec![r]; JOBS.len()],
            scheduled: vec![0; JOBS.len()],
            grid_ms: vec![Vec::new(); JOBS.len()],
            scores: vec![("uplink-a".into(), vec![1.0])],
        };
        assert!(!seen_all(&w), "uplink-b not scored");
        w.scores.push(("uplink-b".into(), vec![0.6]));
        assert!(seen_all(&w));
        w.readings[3].clear();
        assert!(!seen_all(&w), "job-b2 has no period read");
    }

    #[test]
    fn a_links_score_is_the_median_of_its_windows_rounds() {
        let scores = vec![
            ("uplink-a".to_owned(), vec![1.0, 0.825, 1.0, 1.0]),
            ("uplink-b".to_owned(), vec![0.63]),
        ];
        // One low round (a job's period read short once) does not make the window's score.
        let w = |median, range, rounds| WindowScore {
            median,
            range,
            rounds,
        };
        assert_eq!(
            window_score(&scores, "uplink-a", Some(0.7)),
            w(Some(1.0), Some((0.825, 1.0)), 4)
        );
        assert_eq!(
            window_score(&scores, "uplink-b", None),
            w(Some(0.63), Some((0.63, 0.63)), 1)
        );
        // No round of the window scored it: the score once both were scored.
        assert_eq!(
            window_score(&scores, "uplink-c", Some(0.7)),
            w(Some(0.7), None, 0)
        );
        assert_eq!(window_score(&[], "uplink-a", None), w(None, None, 0));
    }

    #[test]
    fn a_detected_period_is_compared_with_the_iterations_counted_over_its_own_stretch() {
        // Job a1 (72 replies of 16 KiB an iteration): one iteration every 350 ms for the first
        // 4 s, then every 250 ms.
        let per = 72 * REPLY;
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let sent = |t: f64| {
            let its = if t <= 4000.0 {
                t / 350.0
            } else {
                4000.0 / 350.0 + (t - 4000.0) / 250.0
            };
            (its * per as f64) as u64
        };
        let series: Series = (0..=20)
            .map(|k| {
                let t = f64::from(k) * 500.0;
                (t, vec![sent(t), 0, 0, 0])
            })
            .collect();
        assert_eq!(bytes_at(&series, 0, 250.0), Some(0.5 * sent(500.0) as f64));
        assert_eq!(bytes_at(&series, 0, -1.0), None);
        assert_eq!(bytes_at(&series, 0, 10_001.0), None);
        // A verdict over the last 5 s (250 ms iterations) is compared with 250 ms, not with the
        // window's mean; one reaching before the window is not read.
        let r = Reading {
            period_ms: 252.0,
            from_ms: 5000.0,
            to_ms: 10_000.0,
            fresh: true,
        };
        let (found, truth) = compare(&[r], &series, 0, JOBS[0]).unwrap();
        assert_eq!(found, 252.0);
        assert!((truth - 250.0).abs() < 0.5, "{truth}");
        assert_eq!(compare(&[], &series, 0, JOBS[0]), None);
        // A held verdict counts only when no fresh one is there.
        let held = Reading {
            period_ms: 500.0,
            fresh: false,
            ..r
        };
        assert_eq!(
            compare(&[held, r, r], &series, 0, JOBS[0]).unwrap().0,
            252.0
        );
        assert_eq!(compare(&[held], &series, 0, JOBS[0]).unwrap().0, 500.0);
        let v = VmSnap {
            period: Some(resex_api::PeriodSnap {
                found: Some(resex_api::PeriodFound {
                    period_ms: 300.0,
                    ..Default::default()
                }),
                why_not: None,
                samples: 8192,
                age_ms: 100,
            }),
            ..Default::default()
        };
        assert!(
            reading(&v, 8000.0, 0.0).is_none(),
            "its stretch began before the window"
        );
        let r = reading(&v, 9000.0, 0.0).unwrap();
        assert_eq!((r.from_ms, r.to_ms, r.fresh), (708.0, 8900.0, true));
        // With the byte counts read from 12 s before the window: a verdict read early in it.
        let r = reading(&v, 1000.0, 10_000.0).unwrap();
        assert_eq!((r.from_ms, r.to_ms), (-7292.0, 900.0));
        assert!(
            reading(&v, -1.0, 10_000.0).is_none(),
            "read before the window"
        );
        assert!(reading(&v, 1000.0, 7000.0).is_none(), "before the counts");
        let mut held = v.clone();
        held.period.as_mut().unwrap().why_not = Some("held".into());
        assert!(
            !reading(&held, 9000.0, 0.0).unwrap().fresh,
            "held over a look"
        );
        held.period.as_mut().unwrap().found = None;
        assert!(reading(&held, 9000.0, 0.0).is_none(), "none found");
        // The iteration time over the window leaves the lead out: from the first reading at 0
        // ms or later.
        let lead: Series = vec![
            (-500.0, vec![0, 0, 0, 0]),
            (0.0, vec![per, 0, 0, 0]),
            (700.0, vec![3 * per, 0, 0, 0]),
        ];
        assert_eq!(sent_in_window(&lead, 0), Some((2 * per, 700.0)));
        assert_eq!(sent_in_window(&lead[..1].to_vec(), 0), None);
    }
}
