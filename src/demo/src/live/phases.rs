//! The real-time run's phases, one after the other on a running host: the reporting VM first,
//! the interferer from the second phase on, each phase's policy reloaded into the daemon; each
//! phase's figures from the daemon's snapshots at its settle time and its end, and its health.

use crate::embedded::EmbeddedDaemon;
use crate::error::DemoError;
use crate::health::PhaseWatch;
use crate::live::backlog::{Backlog, PhaseBacklog};
use crate::live::guests::{vm, wait_registered};
use crate::live::view::LiveView;
use crate::phase::Phase;
use crate::plan::{Plan, INTERFERER, VICTIM};
use resex_api::Snapshot;
use resex_scenario::GuestSpec;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How the phases run.
pub(crate) struct PhaseRun<'a> {
    /// The phases.
    pub plan: &'a Plan,
    /// Each one's length, s.
    pub secs: f64,
    /// Its start left out of its figures, s.
    pub settle: f64,
    /// The reporting VM.
    pub victim: &'a GuestSpec,
    /// The interfering VM.
    pub interferer: &'a GuestSpec,
    /// Set: the run stops.
    pub stop: &'a AtomicBool,
}

/// Runs the phases on `node`.
pub(crate) fn run(
    r: &PhaseRun<'_>,
    node: &mut EmbeddedDaemon,
    view: &mut dyn LiveView,
) -> Result<Vec<Phase>, DemoError> {
    node.host.start_guest(r.victim)?;
    wait_registered(node, VICTIM, true)?;
    let mut backlog = Backlog::new(r.victim.benchex.orders_per_s());
    let mut out = Vec::new();
    for (k, (name, pol)) in r.plan.iter().enumerate() {
        // The interferer joins after the base phase and stays.
        if k > 0 && !node.host.guests().iter().any(|g| g.spec.name == INTERFERER) {
            node.host.start_guest(r.interferer)?;
            wait_registered(node, INTERFERER, false)?;
        }
        let policy = pol.as_ref().map(|(n, c)| ((*n).to_owned(), c.clone()));
        node.daemon.reload(policy);
        view.phase(name, r.secs);
        let w = watch(r, node, view)?;
        let phase = w.figures(name, k, node, &mut backlog);
        if let Some(line) = phase.health.as_ref().and_then(|h| h.warning(name)) {
            view.warn(line);
        }
        out.push(phase);
    }
    Ok(out)
}

/// What watching one phase gathered.
struct Watched {
    /// The snapshot at the settle time, and when it was taken.
    s0: (Arc<Snapshot>, Instant),
    /// The snapshot at the end.
    s1: Arc<Snapshot>,
    /// The interferer's cap in each sample after the settle time.
    caps: Vec<f64>,
    /// The daemon held the reporting VM back in a sample of the phase.
    victim_limited: bool,
    /// The host's health through the phase.
    watch: PhaseWatch,
}

/// Watches one phase for its length.
fn watch(
    r: &PhaseRun<'_>,
    node: &mut EmbeddedDaemon,
    view: &mut dyn LiveView,
) -> Result<Watched, DemoError> {
    let t0 = Instant::now();
    let mut s0 = None;
    // The host's health is watched from the phase's start: a freeze during the settle time
    // leaves a backlog in the measured part.
    let mut watch = PhaseWatch::start(node.host.hca_stalls(), node.host.hca_sample());
    let mut caps = Vec::new();
    let mut victim_limited = false;
    while t0.elapsed().as_secs_f64() < r.secs {
        if r.stop.load(Ordering::Acquire) {
            return Err(DemoError::Interrupted);
        }
        node.host.check()?;
        std::thread::sleep(Duration::from_millis(100));
        let s = node.daemon.snapshot();
        watch.sample(&s);
        // Through the settle time too: a queue built then is in the measured part's start.
        victim_limited |= vm(&s, VICTIM).is_some_and(|v| held_back(v, r.victim));
        if t0.elapsed().as_secs_f64() >= r.settle {
            if s0.is_none() {
                s0 = Some((s.clone(), Instant::now()));
            }
            if let Some(v) = vm(&s, INTERFERER) {
                caps.push(v.cap_pct.unwrap_or(100.0 * f64::from(v.vcpus)));
            }
        }
        view.snapshot(&s);
    }
    let s1 = node.daemon.snapshot();
    Ok(Watched {
        s0: s0.ok_or(DemoError::PhaseTooShort)?,
        s1,
        caps,
        victim_limited,
        watch,
    })
}

/// The daemon held the reporting VM back: a CPU cap below its vCPUs, or a transmit ceiling
/// below twice what its replies need. A backlog then is resex's doing, not the host's.
#[allow(clippy::cast_precision_loss)]
fn held_back(v: &resex_api::VmSnap, spec: &GuestSpec) -> bool {
    let w = &spec.benchex;
    let needs_bps = w.orders_per_s() * w.buffer.0 as f64 * 8.0;
    v.cap_pct.is_some_and(|c| c < 100.0 * f64::from(v.vcpus))
        || v.tx_max_bps.is_some_and(|m| (m as f64) < 2.0 * needs_bps)
}

impl Watched {
    /// The phase's figures (`k`: its index) and its health (`backlog`: the reporting VM's,
    /// kept across the phases).
    #[allow(clippy::cast_precision_loss)]
    fn figures(
        self,
        name: &'static str,
        k: usize,
        node: &EmbeddedDaemon,
        backlog: &mut Backlog,
    ) -> Phase {
        let (s0, at) = self.s0;
        let s1 = self.s1;
        let mut health = self
            .watch
            .finish(node.host.hca_stalls(), node.host.hca_sample());
        let dt = at.elapsed().as_secs_f64().max(1e-3);
        let latency = victim_latency(&s0, &s1);
        if latency.is_none() {
            // Registered, reporting before, silent now: its guest did not get to run.
            health = health.with_reason("the reporting VM sent no latency report".into());
        }
        let mbps = match (vm(&s0, INTERFERER), vm(&s1, INTERFERER)) {
            (Some(i0), Some(i1)) => {
                i1.tx_bytes_total.saturating_sub(i0.tx_bytes_total) as f64 * 8.0 / dt / 1e6
            }
            _ => 0.0,
        };
        if k > 0 && mbps == 0.0 {
            health = health.with_reason("the interfering VM sent nothing".into());
        }
        health.victim_held_back = self.victim_limited;
        if let Some(b) = victim_backlog(&s0, &s1, latency.map(|l| l.0), backlog) {
            health.victim_backlog_start_orders = Some(b.start);
            health.victim_backlog_orders = Some(b.end);
            health.victim_orders_per_s = Some(b.served_per_s);
            health.victim_queued = b.queued();
            // A backlog resex made (by holding the VM back, in this phase or in the one that
            // left it) is the design's figure, and the story is judged on it.
            if let Some(reason) = backlog.blame(b, self.victim_limited) {
                health = health.with_reason(reason);
            }
        }
        let caps = &self.caps;
        let cap_mean = (!caps.is_empty()).then(|| caps.iter().sum::<f64>() / caps.len() as f64);
        Phase {
            name,
            victim_mean_us: latency.map(|l| l.0),
            victim_p99_us: latency.map(|l| l.1),
            interferer_mbps: mbps,
            interferer_cap_mean: cap_mean,
            host_overloaded: health.host_overloaded,
            health: Some(health),
        }
    }
}

/// The reporting VM's backlog at `s0` and `s1`, what it served per second in between, and
/// its mean latency there, `latency_us` (None: it is not in both, or no time passed).
#[allow(clippy::cast_precision_loss)]
fn victim_backlog(
    s0: &Snapshot,
    s1: &Snapshot,
    latency_us: Option<f64>,
    backlog: &mut Backlog,
) -> Option<PhaseBacklog> {
    let (a0, a1) = (vm(s0, VICTIM)?, vm(s1, VICTIM)?);
    let dt = s1.uptime_ms.checked_sub(s0.uptime_ms).filter(|&d| d > 0)? as f64 / 1000.0;
    Some(PhaseBacklog {
        start: backlog.at(s0.uptime_ms, a0.lat_requests_total),
        end: backlog.at(s1.uptime_ms, a1.lat_requests_total),
        served_per_s: a1.lat_requests_total.saturating_sub(a0.lat_requests_total) as f64 / dt,
        offered_per_s: backlog.offered_per_s(),
        latency_us,
    })
}

/// The reporting VM's mean latency and the mean of its reports' p99 between two snapshots, us
/// (None: it reported nothing in between).
#[allow(clippy::cast_precision_loss)]
fn victim_latency(s0: &Snapshot, s1: &Snapshot) -> Option<(f64, f64)> {
    let (a0, a1) = (vm(s0, VICTIM)?, vm(s1, VICTIM)?);
    (a1.lat_requests_total > a0.lat_requests_total).then(|| {
        let n = (a1.lat_requests_total - a0.lat_requests_total) as f64;
        (
            (a1.lat_sum_us - a0.lat_sum_us) / n,
            (a1.lat_p99_sum_us - a0.lat_p99_sum_us) / n,
        )
    })
}
