//! The demo's own health: whether the host gave its time-critical threads the time they need,
//! so that a phase's real-time figures measure the design and not a busy machine.
//!
//! Per phase it watches what a busy host does to the demo (the daemon loop's tick lateness from
//! each snapshot, softhca's stalled seconds) and why (CPU steal and the run queue from
//! `/proc/stat`: [`crate::procstat`]). The verdict rests on the effects: a phase is overloaded
//! when softhca was held up for [`STALL_MS`] ms or more in more than [`MAX_STALLED_FRACTION`]
//! of its seconds (every guest's I/O stops while it is), when the loop's ticks were late by
//! more than [`MAX_LATE_P99_US`] at p99 (half an interval: prices and caps lag the traffic),
//! when one tick was more than [`MAX_FREEZE_US`] late (the loop runs under `SCHED_FIFO`: only
//! the machine stops it that long, and the guests' backlog from such a freeze takes seconds to
//! clear), or when the hypervisor under this machine stole more than [`MAX_STEAL_PCT`] of its
//! CPU time. The real-time run adds what the phase's own figures show: a guest that sent
//! nothing, or a reporting VM whose latency was its queue's ([`MAX_BACKLOG_S`]) when resex did
//! not make that queue.

use crate::procstat::{cpu_pressure_us, proc_stat, CpuTimes};
use resex_api::Snapshot;
use resex_softhca::{PortSample, StallSummary};
use serde::Serialize;

/// softhca's stall threshold (its `thread::STALL`), ms.
pub const STALL_MS: u64 = 20;
/// Above this fraction of stalled seconds a phase's latencies are the host's.
pub const MAX_STALLED_FRACTION: f64 = 0.2;
/// Above this tick lateness p99 (mean over the phase's snapshot windows), us.
pub const MAX_LATE_P99_US: f64 = 500.0;
/// Above this lateness of a single tick the host froze, us.
pub const MAX_FREEZE_US: f64 = 100_000.0;
/// Above this CPU steal, percent of all CPUs' time.
pub const MAX_STEAL_PCT: f64 = 5.0;
/// Above this many seconds' worth of offered orders waiting at the reporting VM, with a mean
/// latency as long as their wait, its latency is its queue's: 25 ms at the demo's 1000
/// orders/s, a hundred times its latency alone, and above the estimate's own error (its
/// reports come every 10 ms).
pub const MAX_BACKLOG_S: f64 = 0.025;

/// A phase's health.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Health {
    /// The figures are not the design's: the host was too busy (see `reasons`).
    pub host_overloaded: bool,
    /// What crossed its threshold, one phrase each.
    pub reasons: Vec<String>,
    /// The control loop's tick lateness p99, us (mean over the phase's snapshot windows).
    pub tick_late_p99_us: f64,
    /// The worst single tick's lateness, us.
    pub tick_late_max_us: f64,
    /// Seconds in which softhca's port thread was held up 20 ms or more.
    pub hca_stalled_s: u64,
    /// Seconds softhca watched.
    pub hca_watched_s: u64,
    /// CPU softhca's port thread used, percent of one CPU (null where `/proc` cannot say).
    pub hca_cpu_pct: Option<f64>,
    /// Seconds of the phase softhca's thread never got to count (held up throughout).
    pub hca_missing_s: u64,
    /// CPU steal, percent of all CPUs' time (null where /proc/stat cannot be read).
    pub steal_pct: Option<f64>,
    /// How busy all CPUs were (this demo included), percent of all CPUs' time.
    pub cpu_busy_pct: Option<f64>,
    /// Runnable threads, mean of the samples (this demo's included).
    pub run_queue_mean: Option<f64>,
    /// CPUs online.
    pub cpus: usize,
    /// Time in which some runnable task waited for a CPU, percent of the phase's wall time
    /// (`/proc/pressure/cpu`; null where the kernel has no PSI).
    pub cpu_pressure_pct: Option<f64>,
    /// Orders waiting at the reporting VM at the start of the phase's measured part,
    /// estimated from the rate its clients offer and what it served (taken as zero at the base
    /// phase's settle time; a little below zero is the estimate's error; null: not measured).
    pub victim_backlog_start_orders: Option<f64>,
    /// The same at the phase's end.
    pub victim_backlog_orders: Option<f64>,
    /// Orders the reporting VM served per second in the phase's measured part.
    pub victim_orders_per_s: Option<f64>,
    /// The daemon held the reporting VM back in the phase (a CPU cap below its vCPUs or a
    /// transmit ceiling below twice its replies' rate).
    pub victim_held_back: bool,
    /// Its latency was its queue's (more than [`MAX_BACKLOG_S`] of orders waiting at the
    /// measured part's start or end, its mean latency as long as their wait). The phase is
    /// flagged for it unless the queue was resex's: made in a phase that held the VM back, or
    /// inherited from one and not grown by the host.
    pub victim_queued: bool,
    /// Reasons from the phase's own figures ([`Health::with_reason`]), kept across judging.
    #[serde(skip)]
    pub extra: Vec<String>,
}

/// Watches one phase.
#[derive(Debug)]
pub struct PhaseWatch {
    cpu0: Option<CpuTimes>,
    pressure0: Option<u64>,
    stalls0: StallSummary,
    port0: PortSample,
    late_p99: Vec<f64>,
    late_max: f64,
    run_queue: Vec<u32>,
    last_uptime_ms: Option<u64>,
    started: std::time::Instant,
}

impl PhaseWatch {
    /// Starts watching; `stalls` and `port` are softhca's counts now.
    pub fn start(stalls: StallSummary, port: PortSample) -> Self {
        Self {
            cpu0: proc_stat().map(|(c, _)| c),
            pressure0: cpu_pressure_us(),
            stalls0: stalls,
            port0: port,
            late_p99: Vec::new(),
            late_max: 0.0,
            run_queue: Vec::new(),
            last_uptime_ms: None,
            started: std::time::Instant::now(),
        }
    }

    /// One look: the daemon's latest snapshot (each new one adds its lateness window) and the
    /// run queue now.
    pub fn sample(&mut self, s: &Snapshot) {
        if self.last_uptime_ms != Some(s.uptime_ms) && s.host.ticks > 0 {
            self.last_uptime_ms = Some(s.uptime_ms);
            self.late_p99.push(s.host.tick_late_p99_us);
            self.late_max = self.late_max.max(s.host.tick_late_max_us);
        }
        if let Some((_, r)) = proc_stat() {
            self.run_queue.push(r);
        }
    }

    /// The phase's health; `stalls` and `port` are softhca's counts now.
    pub fn finish(self, stalls: StallSummary, port: PortSample) -> Health {
        let cpu1 = proc_stat().map(|(c, _)| c);
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        #[allow(clippy::cast_precision_loss)]
        let (steal_pct, cpu_busy_pct) = match (self.cpu0, cpu1) {
            (Some(a), Some(b)) if b.total > a.total => {
                let dt = (b.total - a.total) as f64;
                (
                    Some(100.0 * b.steal.saturating_sub(a.steal) as f64 / dt),
                    Some(100.0 * (1.0 - b.idle.saturating_sub(a.idle) as f64 / dt)),
                )
            }
            _ => (None, None),
        };
        #[allow(clippy::cast_precision_loss)]
        let mean = |xs: &[f64]| (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64);
        let run_queue: Vec<f64> = self.run_queue.iter().map(|&r| f64::from(r)).collect();
        let st = stalls.since(&self.stalls0);
        let wall_us = self.started.elapsed().as_secs_f64().max(1e-3) * 1e6;
        #[allow(clippy::cast_precision_loss)]
        let cpu_pressure_pct = self
            .pressure0
            .zip(cpu_pressure_us())
            .map(|(a, b)| 100.0 * b.saturating_sub(a) as f64 / wall_us);
        // softhca counts a second when it ends one: seconds of the phase it never counted, it
        // spent held up.
        let missing = self
            .started
            .elapsed()
            .as_secs()
            .saturating_sub(st.seconds + 1);
        judge(Health {
            host_overloaded: false,
            reasons: Vec::new(),
            hca_missing_s: missing,
            tick_late_p99_us: mean(&self.late_p99).unwrap_or(0.0),
            tick_late_max_us: self.late_max,
            hca_stalled_s: st.stalled_seconds,
            hca_watched_s: st.seconds,
            hca_cpu_pct: port.since(&self.port0).cpu_share().map(|c| 100.0 * c),
            steal_pct,
            cpu_busy_pct,
            run_queue_mean: mean(&run_queue),
            cpus,
            cpu_pressure_pct,
            victim_backlog_start_orders: None,
            victim_backlog_orders: None,
            victim_orders_per_s: None,
            victim_held_back: false,
            victim_queued: false,
            extra: Vec::new(),
        })
    }
}

/// Fills in the verdict from the figures.
pub fn judge(mut h: Health) -> Health {
    let mut reasons = Vec::new();
    if h.hca_missing_s > 0 {
        reasons.push(format!(
            "softhca's thread did not run through {} s of the phase",
            h.hca_missing_s
        ));
    }
    #[allow(clippy::cast_precision_loss)]
    if h.hca_watched_s > 0 && h.hca_stalled_s as f64 > MAX_STALLED_FRACTION * h.hca_watched_s as f64
    {
        reasons.push(format!(
            "softhca was held up {STALL_MS} ms or more in {} of {} s (traced: it waited to run \
             while the guests' threads held the CPUs; `--port-cgroup` gives it a cgroup of its own)",
            h.hca_stalled_s, h.hca_watched_s
        ));
    }
    if h.tick_late_p99_us > MAX_LATE_P99_US {
        reasons.push(format!(
            "the control loop's ticks were {:.0} us late at p99",
            h.tick_late_p99_us
        ));
    }
    if h.tick_late_max_us > MAX_FREEZE_US {
        reasons.push(format!(
            "the host froze: one tick was {:.0} ms late (the loop runs under SCHED_FIFO, which \
             no guest can hold up, and spins on no other thread: the kernel or the hypervisor \
             stopped it; of such stops traced here, one was the hypervisor not running this \
             VM's CPU{})",
            h.tick_late_max_us / 1000.0,
            h.steal_pct
                .map_or(String::new(), |s| format!(", steal {s:.1}% of the phase"))
        ));
    }
    if let Some(s) = h.steal_pct.filter(|&s| s > MAX_STEAL_PCT) {
        reasons.push(format!("the hypervisor stole {s:.0}% of the CPUs"));
    }
    reasons.extend(h.extra.iter().cloned());
    h.host_overloaded = !reasons.is_empty();
    h.reasons = reasons;
    h
}

impl Health {
    /// Adds what the phase's own figures show of a host too busy to run the guests (a guest
    /// that sent nothing at all), and judges again.
    pub fn with_reason(mut self, reason: String) -> Health {
        self.extra.push(reason);
        judge(self)
    }

    /// The one line a phase gets when its figures are the host's, not the design's.
    pub fn warning(&self, phase: &str) -> Option<String> {
        self.host_overloaded.then(|| {
            let why = self.reasons.join("; ");
            let pressure = self.cpu_pressure_pct.map_or(String::new(), |p| {
                format!(", a task waiting for a CPU {p:.0}% of the time")
            });
            let busy = match (self.cpu_busy_pct, self.run_queue_mean) {
                (Some(b), Some(q)) => format!(
                    " (CPUs {b:.0}% busy, {q:.1} runnable threads on {} CPUs{pressure})",
                    self.cpus
                ),
                _ => String::new(),
            };
            format!(
                "resex demo: phase {phase}: host overloaded, its figures measure this machine, \
                 not resex: {why}{busy}"
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn healthy() -> Health {
        Health {
            host_overloaded: false,
            reasons: vec![],
            tick_late_p99_us: 40.0,
            tick_late_max_us: 900.0,
            hca_stalled_s: 1,
            hca_watched_s: 10,
            hca_cpu_pct: Some(4.0),
            hca_missing_s: 0,
            steal_pct: Some(0.0),
            cpu_busy_pct: Some(70.0),
            run_queue_mean: Some(2.5),
            cpus: 2,
            cpu_pressure_pct: Some(10.0),
            victim_backlog_start_orders: Some(1.0),
            victim_backlog_orders: Some(3.0),
            victim_orders_per_s: Some(1000.0),
            victim_held_back: false,
            victim_queued: false,
            extra: vec![],
        }
    }

    #[test]
    fn a_healthy_phase_is_not_flagged() {
        let h = judge(healthy());
        assert!(!h.host_overloaded);
        assert!(h.warning("base").is_none());
    }

    #[test]
    fn each_threshold_flags_the_phase_with_its_reason() {
        let stalled = judge(Health {
            hca_stalled_s: 3,
            ..healthy()
        });
        assert!(stalled.host_overloaded);
        assert!(
            stalled.reasons[0].contains("3 of 10 s"),
            "{:?}",
            stalled.reasons
        );
        let late = judge(Health {
            tick_late_p99_us: 2000.0,
            ..healthy()
        });
        assert!(
            late.reasons[0].contains("2000 us late"),
            "{:?}",
            late.reasons
        );
        let stolen = judge(Health {
            steal_pct: Some(12.0),
            ..healthy()
        });
        assert!(
            stolen.reasons[0].contains("stole 12%"),
            "{:?}",
            stolen.reasons
        );
        let froze = judge(Health {
            tick_late_max_us: 1_400_000.0,
            ..healthy()
        });
        assert!(
            froze.reasons[0].contains("1400 ms late"),
            "{:?}",
            froze.reasons
        );
        let all = judge(Health {
            hca_stalled_s: 9,
            tick_late_p99_us: 2000.0,
            tick_late_max_us: 1_400_000.0,
            steal_pct: Some(12.0),
            ..healthy()
        });
        assert_eq!(all.reasons.len(), 4);
        let missing = judge(Health {
            hca_missing_s: 3,
            ..healthy()
        });
        assert!(
            missing.reasons[0].contains("did not run through 3 s"),
            "{:?}",
            missing.reasons
        );
        let silent = judge(healthy()).with_reason("the reporting VM sent no report".into());
        assert!(silent.host_overloaded);
        assert_eq!(silent.reasons, ["the reporting VM sent no report"]);
        // Judged again, nothing doubles.
        let both = judge(Health {
            hca_stalled_s: 9,
            ..healthy()
        })
        .with_reason("a".into())
        .with_reason("b".into());
        assert_eq!(both.reasons.len(), 3, "{:?}", both.reasons);
        let line = all.warning("ioshares").unwrap();
        assert!(
            line.starts_with("resex demo: phase ioshares: host overloaded"),
            "{line}"
        );
        assert!(!line.contains('\n'));
    }

    #[test]
    fn a_phase_is_judged_on_its_own_stalls() {
        let mut w = PhaseWatch::start(
            StallSummary {
                seconds: 10,
                stalled_seconds: 8,
                longest_us: 50_000,
            },
            PortSample::new(Some(1_000_000_000), 10),
        );
        let snap = |uptime_ms, p99| Snapshot {
            uptime_ms,
            host: resex_api::HostSnap {
                ticks: 1,
                tick_late_p99_us: p99,
                tick_late_max_us: p99 * 2.0,
                ..Default::default()
            },
            ..Default::default()
        };
        w.sample(&snap(100, 10.0));
        w.sample(&snap(100, 10.0)); // the same snapshot again: not counted twice
        w.sample(&snap(200, 30.0));
        std::thread::sleep(std::time::Duration::from_millis(20));
        let h = w.finish(
            StallSummary {
                seconds: 20,
                stalled_seconds: 8,
                longest_us: 50_000,
            },
            PortSample::new(Some(1_001_000_000), 30),
        );
        // 1 ms of CPU in at least 20 ms of wall time.
        let cpu = h.hca_cpu_pct.unwrap();
        assert!(cpu > 0.0 && cpu <= 5.0, "{cpu}");
        assert_eq!(
            (h.hca_stalled_s, h.hca_watched_s, h.hca_missing_s),
            (0, 10, 0)
        );
        assert_eq!(h.tick_late_p99_us, 20.0);
        assert_eq!(h.tick_late_max_us, 60.0);
        // Judged on the phase's own figures: no stall, tick or missing-second reason. The
        // machine's real steal over these 20 ms is read from /proc/stat and is not the test's
        // to set (a VM whose hypervisor stole 25% of them failed here), so it is left out.
        let own = judge(Health {
            steal_pct: None,
            ..h.clone()
        });
        assert!(!own.host_overloaded, "{h:?}");
    }
}
