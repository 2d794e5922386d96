//! What the coordinator hands out: one [`Allocation`] per host (`PREFIX/alloc/HOST`), a ceiling
//! for each of its VMs that crosses a congested link, valid for a while, and the [`RoundReport`]
//! of each round. A host applies its allocation over its local policy and lifts it when it
//! lapses or when the fleet is lost. The round that computes them is `crate::plan` (feature
//! `coordinator`: it links the DRUM solver; a reader of the fleet, `resex top`, does not).

use crate::error::FleetError;
use serde::{Deserialize, Serialize};

/// The largest allocation accepted, bytes.
pub const MAX_ALLOC_BYTES: usize = 1536 << 10;

/// One VM's ceiling.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VmAlloc {
    /// The VM.
    pub vm: String,
    /// Its transmit ceiling, Mb/s.
    pub max_mbps: f64,
}

/// A host's allocation (`PREFIX/alloc/HOST`).
///
/// A host refuses one older than twice its `valid_ms` by `at_unix_ms` (a coordinator's clock
/// may be off by up to `valid_ms`): a left-over allocation is never applied anew.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Allocation {
    /// The host.
    pub host: String,
    /// The coordinator that wrote it.
    pub coordinator: String,
    /// The coordinator's round.
    pub round: u64,
    /// When, Unix ms (the coordinator's clock).
    pub at_unix_ms: u64,
    /// It lapses this long after the host reads it, ms.
    pub valid_ms: u64,
    /// Ceilings; VMs not listed have none from the fleet.
    pub vms: Vec<VmAlloc>,
    /// VMs whose ceiling follows a schedule instead (periodic jobs on a compatible link).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub adaptive: Vec<VmSchedule>,
}

/// One periodic job's timing: its target arc on its link's grid (`VmSchedule::grid`), else as
/// its host's detector measured it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct JobArc {
    /// Its period, ms.
    pub period_ms: f64,
    /// When its latest arc began, Unix ms.
    pub last_start_unix_ms: f64,
    /// How long its arc lasts on the link, ms.
    pub arc_ms: f64,
    /// What it sends per period, bytes (0: not given, as by an older coordinator).
    #[serde(default)]
    pub bytes: f64,
}

impl JobArc {
    fn plausible(&self) -> bool {
        self.period_ms.is_finite()
            && (0.001..=600_000.0).contains(&self.period_ms)
            && self.last_start_unix_ms.is_finite()
            && (0.0..=1e14).contains(&self.last_start_unix_ms)
            && self.arc_ms.is_finite()
            && (0.0..=self.period_ms).contains(&self.arc_ms)
            && self.bytes.is_finite()
            && (0.0..=1e15).contains(&self.bytes)
    }
}

/// The most other jobs a schedule lists.
pub const MAX_SCHEDULE_OTHERS: usize = MAX_LINK_JOBS - 1;

/// A VM's ceiling as a schedule: on a grid the job in its target arc gets the larger share of
/// `pool`, else the job further into its arc (each host evaluates it every step;
/// `resex_core::adaptive`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VmSchedule {
    /// The VM.
    pub vm: String,
    /// The compatible link.
    pub link: String,
    /// What the link's compatible jobs share, Mb/s.
    pub pool_mbps: f64,
    /// A job's weight is `1 + gain x progress`.
    pub gain: f64,
    /// This VM's job.
    pub me: JobArc,
    /// The link's other compatible jobs.
    pub others: Vec<JobArc>,
    /// The arcs are targets on the link's grid (`crate::compat`'s grid: one period, arcs end
    /// to end): a job's weight is `1 + gain` in its target arc and 1 outside it, whatever its
    /// progress. False: the arcs are as measured, weights by progress.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub grid: bool,
}

impl VmSchedule {
    /// Whether a reader takes it (`Allocation::parse` refuses an allocation with one that is
    /// not; the coordinator hands out none).
    pub(crate) fn plausible(&self) -> bool {
        self.pool_mbps.is_finite()
            && self.pool_mbps > 0.0
            && self.pool_mbps < 1e9
            && (0.0..=100.0).contains(&self.gain)
            && self.me.plausible()
            && self.others.len() <= MAX_SCHEDULE_OTHERS
            && self.others.iter().all(JobArc::plausible)
    }
}

impl Allocation {
    /// Read back from `key` (bounded, checked: a hostile value lifts nothing and sets nothing).
    pub fn parse(key: &str, v: &[u8]) -> Result<Self, FleetError> {
        let a: Self = crate::record::parse(key, v, MAX_ALLOC_BYTES)?;
        let bad = |reason: String| FleetError::BadValue {
            key: key.into(),
            reason,
        };
        if a.vms.len() > crate::record::MAX_VMS {
            return Err(bad(format!("{} VMs", a.vms.len())));
        }
        if !(1..=600_000).contains(&a.valid_ms) {
            return Err(bad(format!("valid_ms {} must be 1..=600000", a.valid_ms)));
        }
        if let Some(v) = a
            .vms
            .iter()
            .find(|v| !(v.max_mbps.is_finite() && v.max_mbps > 0.0 && v.max_mbps < 1e9))
        {
            return Err(bad(format!("{}: ceiling {} Mb/s", v.vm, v.max_mbps)));
        }
        if a.adaptive.len() > crate::record::MAX_VMS {
            return Err(bad(format!("{} schedules", a.adaptive.len())));
        }
        if let Some(s) = a.adaptive.iter().find(|s| !s.plausible()) {
            return Err(bad(format!("{}: a schedule out of range", s.vm)));
        }
        Ok(a)
    }

    /// Whether it is too old to apply at `now_unix_ms` (see the type's documentation).
    #[must_use]
    pub fn stale(&self, now_unix_ms: u64) -> bool {
        now_unix_ms
            > self
                .at_unix_ms
                .saturating_add(self.valid_ms.saturating_mul(2))
    }

    /// The ceilings in bits per second, as the host's core takes them.
    #[must_use]
    pub fn ceilings_bps(&self) -> Vec<(String, u64)> {
        self.vms
            .iter()
            // Parsed ceilings are under 1e9 Mb/s: the product fits a u64.
            .map(|v| {
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let bps = (v.max_mbps * 1e6).round().max(1.0) as u64;
                (v.vm.clone(), bps)
            })
            .collect()
    }
}

/// A round as the coordinator saw it.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct RoundReport {
    /// The round.
    pub round: u64,
    /// Hosts with a summary that cross a topology link (at most [`MAX_ROUND_VMS`] VMs in all).
    pub hosts: usize,
    /// Their VMs.
    pub vms: usize,
    /// Links with a positive price.
    pub congested: usize,
    /// Per-VM ceilings handed out.
    pub allocations: usize,
    /// Solver iterations this round.
    pub iterations: u32,
    /// Whether the prices settled.
    pub converged: bool,
    /// The worst link load over capacity after the allocation (1 at most).
    pub max_overload: f64,
    /// Each topology link that periodic jobs cross: how compatible they are (the circle).
    #[serde(default)]
    pub links: Vec<LinkCompat>,
    /// Links with periodic jobs beyond those listed.
    #[serde(default)]
    pub links_left_out: usize,
    /// Schedules handed out (periodic jobs on compatible links).
    #[serde(default)]
    pub schedules: usize,
}

impl LinkCompat {
    /// One line for people, the verdict first: `up: compatibility 1.00 rotated, 0.50 as they
    /// run; 2 periodic jobs (a/ja 200.0 ms, b/jb 200.0 ms), shifts 0.0, 100.0 ms`.
    #[must_use]
    pub fn line(&self) -> String {
        let jobs: Vec<String> = self
            .jobs
            .iter()
            .map(|j| format!("{}/{} {:.1} ms", j.host, j.vm, j.period_ms))
            .collect();
        let more = if self.jobs_left_out > 0 {
            format!(" and {} more", self.jobs_left_out)
        } else {
            String::new()
        };
        let n = self.jobs.len().saturating_add(self.jobs_left_out);
        let list = format!(
            "{n} periodic job{} ({}{more})",
            if n == 1 { "" } else { "s" },
            jobs.join(", ")
        );
        match (self.score, self.score_as_given) {
            (Some(best), Some(now)) => {
                let shifts: Vec<String> = self
                    .jobs
                    .iter()
                    .map(|j| j.shift_ms.map_or("-".into(), |s| format!("{s:.1}")))
                    .collect();
                format!(
                    "{}: compatibility {best:.2} rotated, {now:.2} as they run; {list}, shifts {} ms",
                    self.link,
                    shifts.join(", ")
                )
            }
            _ => format!(
                "{}: {}; {list}",
                self.link,
                self.why_not.as_deref().unwrap_or("not scored")
            ),
        }
    }
}

impl RoundReport {
    /// Read back from `key` (bounded, checked: a hostile value is refused).
    pub fn parse(key: &str, v: &[u8]) -> Result<Self, FleetError> {
        let r: Self = crate::record::parse(key, v, MAX_ALLOC_BYTES)?;
        let bad = |reason: String| FleetError::BadValue {
            key: key.into(),
            reason,
        };
        if r.links.len() > crate::topology::MAX_LINKS {
            return Err(bad(format!("{} links", r.links.len())));
        }
        if let Some(l) = r
            .links
            .iter()
            .find(|l| l.jobs.len() > MAX_LINK_JOBS || l.jobs_left_out > MAX_ROUND_VMS)
        {
            return Err(bad(format!(
                "{}: {} jobs, {} left out",
                l.link,
                l.jobs.len(),
                l.jobs_left_out
            )));
        }
        Ok(r)
    }
}

/// The most periodic jobs scored together on one link (the heaviest by bytes per period).
pub const MAX_LINK_JOBS: usize = 8;

/// A periodic job crossing a link.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct LinkJob {
    /// Its host.
    pub host: String,
    /// The VM.
    pub vm: String,
    /// Its period, ms.
    pub period_ms: f64,
    /// The rotation that makes the link's jobs most compatible: its arcs moved later by this
    /// much, ms (None: the link was not scored).
    pub shift_ms: Option<f64>,
}

/// The periodic jobs on one link and their congestion compatibility.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct LinkCompat {
    /// The topology link.
    pub link: String,
    /// The periodic jobs crossing it (at most [`MAX_LINK_JOBS`], the heaviest).
    pub jobs: Vec<LinkJob>,
    /// Periodic jobs crossing it beyond those scored.
    #[serde(default)]
    pub jobs_left_out: usize,
    /// The fraction of their communication that fits the link at the best rotation found, 0 to
    /// 1 (1: fully compatible); None when not scored (see `why_not`).
    pub score: Option<f64>,
    /// The same as they run now (their measured phases on the Unix clock).
    pub score_as_given: Option<f64>,
    /// Why it was not scored.
    pub why_not: Option<String>,
}

/// The most a VM may ask for, Mb/s (a hostile summary's 1e308 must not overflow the solve).
pub const MAX_DEMAND_MBPS: f64 = 1e7;

/// The most VMs one round allocates over (the rest of the hosts wait).
pub const MAX_ROUND_VMS: usize = 2_000_000;

#[cfg(test)]
mod tests {
    use super::*;

    fn link(n: usize, score: Option<f64>) -> LinkCompat {
        LinkCompat {
            link: "up".into(),
            jobs: (0..n)
                .map(|i| LinkJob {
                    host: format!("h{i}"),
                    vm: format!("j{i}"),
                    period_ms: 200.0,
                    shift_ms: score.map(|_| 100.0 * i as f64),
                })
                .collect(),
            jobs_left_out: 0,
            score,
            score_as_given: score.map(|s| s / 2.0),
            why_not: score.is_none().then(|| "one periodic job".into()),
        }
    }

    #[test]
    fn a_links_line_gives_the_verdict_first() {
        assert_eq!(
            link(2, Some(1.0)).line(),
            "up: compatibility 1.00 rotated, 0.50 as they run; 2 periodic jobs (h0/j0 200.0 ms, \
             h1/j1 200.0 ms), shifts 0.0, 100.0 ms"
        );
        let mut one = link(1, None);
        one.jobs_left_out = 3;
        assert_eq!(
            one.line(),
            "up: one periodic job; 4 periodic jobs (h0/j0 200.0 ms and 3 more)"
        );
    }

    #[test]
    fn a_round_report_read_back_is_bounded() {
        let r = RoundReport {
            links: vec![link(2, Some(0.9))],
            ..RoundReport::default()
        };
        let v = serde_json::to_vec(&r).unwrap();
        assert_eq!(RoundReport::parse("k", &v).unwrap(), r);
        let old = br#"{"round":1,"hosts":0,"vms":0,"congested":0,"allocations":0,"iterations":0,"converged":true,"max_overload":0.0}"#;
        assert!(
            RoundReport::parse("k", old).unwrap().links.is_empty(),
            "an older coordinator's"
        );
        let crowded = RoundReport {
            links: vec![link(MAX_LINK_JOBS + 1, Some(0.9))],
            ..RoundReport::default()
        };
        let e = RoundReport::parse("k", &serde_json::to_vec(&crowded).unwrap()).unwrap_err();
        assert!(e.to_string().contains("9 jobs"), "{e}");
        assert!(RoundReport::parse("k", b"{}").is_err());
        // A count no coordinator writes: refused (and never added unchecked).
        let mut huge = link(1, None);
        huge.jobs_left_out = usize::MAX;
        assert!(huge
            .line()
            .contains(&format!("{} periodic jobs", usize::MAX)));
        let r = RoundReport {
            links: vec![huge],
            ..RoundReport::default()
        };
        assert!(RoundReport::parse("k", &serde_json::to_vec(&r).unwrap()).is_err());
    }
}
