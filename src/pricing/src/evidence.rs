//! The host's own evidence against a guest's latency report: a report is a tenant's claim, and
//! a claim the host's observation contradicts is discounted before any policy sees it.
//!
//! Per VM, between two of its reports, the engine gathers what the host knows for sure:
//! - **the NIC's times** for the VM's work requests, where the NIC measures them
//!   ([`resex_common::NicTimes`]: each request's sojourn from its doorbell to its completion,
//!   and the part the wire alone needed). The wait beyond the wire, per request, against the
//!   lowest such wait seen in any report period (its quiet level), is how much longer the
//!   host saw the VM's I/O take: its *host rise*;
//! - without NIC times, **the link**: whether the host saw it congested (utilisation of at
//!   least [`CONGESTED_UTIL`] in at least [`CONGESTED_SHARE`] of the intervals).
//!
//! A report claims a rise of its mean over the VM's learned quiet latency (the
//! [`BaselineLearner`]: the first reports, then the lowest). The host credits at most
//! [`HOST_FACTOR`] x its host rise plus [`SLACK`] of the baseline (the application's own
//! compute and the receiving side, which the NIC does not see, may add a little), or, without
//! NIC times, the whole claim in a congested period and at most [`SLACK`] in a quiet one. A
//! report claiming more is *discounted*: every latency figure in it is scaled down to the
//! credited mean, and the verdict is kept for people (`resex status`). So a guest that says 3x
//! while its sends complete as fast as ever moves no policy; an honest victim whose I/O the
//! host sees delayed keeps its whole report.

use crate::baseline::BaselineLearner;
use crate::types::LatencyReport;
use resex_common::NicTimes;
use serde::Serialize;

/// A link at least this busy in an interval is congested.
pub const CONGESTED_UTIL: f64 = 0.9;
/// A report period is congested when at least this share of its intervals were.
pub const CONGESTED_SHARE: f64 = 0.1;
/// How much of the host's measured rise a report may claim.
pub const HOST_FACTOR: f64 = 1.5;
/// What a report may claim beyond the host's measure, as a fraction of its baseline.
pub const SLACK: f64 = 0.05;

/// What the host made of a VM's last report.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Verdict {
    /// The rise of the report's mean over the VM's quiet latency, ns.
    pub claimed_ns: f64,
    /// The rise the host credits, ns.
    pub credited_ns: f64,
    /// The rise of its I/O wait the NIC measured, ns (`None`: no NIC times).
    pub host_ns: Option<f64>,
    /// The report was scaled down to the credited rise.
    pub discounted: bool,
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "reports +{:.0} us", self.claimed_ns / 1000.0)?;
        match self.host_ns {
            Some(h) => write!(f, ", the NIC sees +{:.0} us", h / 1000.0)?,
            None => f.write_str(", the link was not congested")?,
        }
        write!(f, ": credited +{:.0} us", self.credited_ns / 1000.0)
    }
}

/// One VM's evidence (the engine keeps one per account).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Evidence {
    /// NIC times since the last report.
    nic: NicTimes,
    /// Whether the NIC measures this VM at all.
    measured: bool,
    /// Intervals since the last report, and the congested ones.
    intervals: u32,
    congested: u32,
    /// The lowest wait beyond the wire per request over report periods, ns.
    quiet_wait_ns: Option<f64>,
    /// The VM's quiet latency, from its reports.
    learner: BaselineLearner,
    /// The host's verdict on its last report.
    pub verdict: Option<Verdict>,
    /// Its I/O slowdown over the last report period as the NIC measured it: the mean sojourn
    /// over the wire time plus the quiet wait, minus 1 (`None`: no NIC times, or no request).
    pub host_slowdown: Option<f64>,
}

/// A VM's I/O slowdown over `nic` as the NIC measured it: its mean sojourn over its wire time
/// plus its quiet wait, minus 1; and its rise, the wait beyond the quiet one, ns. The quiet
/// wait (the lowest mean wait per request seen so far) follows `nic`. `None`: no request.
pub(crate) fn slowdown(nic: &NicTimes, quiet_wait_ns: &mut Option<f64>) -> Option<(f64, f64)> {
    let wait = nic.wait_ns()?;
    let quiet = quiet_wait_ns.map_or(wait, |q| q.min(wait));
    *quiet_wait_ns = Some(quiet);
    let n = nic.wqes as f64;
    let ideal = nic.wire_ns as f64 / n + quiet;
    Some((
        nic.sojourn_ns as f64 / n / ideal.max(1.0) - 1.0,
        (wait - quiet).max(0.0),
    ))
}

impl Evidence {
    /// One interval: the NIC's times for it (if measured) and the link's utilisation.
    pub(crate) fn observe(&mut self, nic: Option<NicTimes>, link_util: f64) {
        if let Some(t) = nic {
            self.measured = true;
            self.nic = self.nic.plus(&t);
        }
        self.intervals += 1;
        if link_util >= CONGESTED_UTIL {
            self.congested += 1;
        }
    }

    /// The end of a period in which the NIC measured something: the quiet wait and the
    /// slowdown. Returns the host rise, ns.
    fn close_period(&mut self) -> Option<f64> {
        let (slowdown, rise) = slowdown(&self.nic, &mut self.quiet_wait_ns)?;
        self.host_slowdown = Some(slowdown);
        Some(rise)
    }

    /// A report arrived: the verdict, and the report as the host credits it.
    pub(crate) fn judge(&mut self, r: &LatencyReport) -> LatencyReport {
        let host = if self.measured {
            Some(self.close_period().unwrap_or(0.0))
        } else {
            None
        };
        let congested =
            f64::from(self.congested) >= CONGESTED_SHARE * f64::from(self.intervals.max(1));
        self.nic = NicTimes::default();
        self.intervals = 0;
        self.congested = 0;
        self.learner.learn(r);
        let Some(base) = self.learner.baseline() else {
            self.verdict = None;
            return *r;
        };
        let claimed = (r.mean_ns - base.mean_ns).max(0.0);
        let slack = SLACK * base.mean_ns;
        let credit = match host {
            Some(h) => HOST_FACTOR * h + slack,
            None if congested => claimed,
            None => slack,
        };
        let credited = claimed.min(credit);
        let discounted = credited < claimed - 1e-9 && r.mean_ns > 0.0;
        self.verdict = Some(Verdict {
            claimed_ns: claimed,
            credited_ns: credited,
            host_ns: host,
            discounted,
        });
        if !discounted {
            return *r;
        }
        let k = ((base.mean_ns + credited) / r.mean_ns).clamp(0.0, 1.0);
        LatencyReport {
            count: r.count,
            mean_ns: r.mean_ns * k,
            stddev_ns: r.stddev_ns * k,
            p50_ns: r.p50_ns * k,
            p99_ns: r.p99_ns * k,
            p999_ns: r.p999_ns * k,
        }
    }
}
