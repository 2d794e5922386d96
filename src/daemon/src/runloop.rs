//! The real-time loop: wake at the core's next interval boundary, tick the driver, record how
//! late the tick started, and at the end put every cap back. SCHED_FIFO at a modest priority
//! when allowed (root), else nice -10, and a 1 ns timer slack, so a busy host does not delay its ticks.

use crate::actuator::Actuator;
use crate::driver::Driver;
use crate::knob::{CapKnob, TxKnob};
use crate::metrics::LoopMetrics;
use crate::sampler::ns_since;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Tick lateness of a run.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct RunSummary {
    /// Ticks run.
    pub ticks: u64,
    /// Intervals skipped (the loop was more than an interval behind).
    pub skipped: u64,
    /// Lateness p50, us.
    pub late_p50_us: f64,
    /// Lateness p99, us.
    pub late_p99_us: f64,
    /// Lateness max, us.
    pub late_max_us: f64,
    /// Caps restored at exit.
    pub restored: usize,
    /// Transmit limits restored at exit.
    pub restored_tx: usize,
}

/// The loop's `SCHED_FIFO` priority when allowed (above softhca's port thread in the embedded
/// host: a tick is microseconds long).
pub const LOOP_FIFO_PRIORITY: i32 = 10;

fn set_realtime() -> resex_rt::Priority {
    let got = resex_rt::raise_priority(Some(LOOP_FIFO_PRIORITY), -10);
    if got.raised() {
        tracing::info!("control loop runs under {got}");
    } else {
        tracing::warn!("control loop runs at {got}: a busy host will delay its ticks");
    }
    got
}

/// What the loop runs with.
pub struct Loop {
    /// The driver.
    pub driver: Driver,
    /// The cap actuator (finished at the end: every recorded cap restored).
    pub actuator: Actuator<CapKnob>,
    /// The transmit-limit actuator (likewise).
    pub tx_actuator: Actuator<TxKnob>,
    /// Time zero of the core (shared with the sampler's CPU samples).
    pub clock: Instant,
    /// Set to stop.
    pub stop: Arc<AtomicBool>,
    /// SCHED_FIFO when allowed.
    pub realtime: bool,
    /// Histograms for the metrics endpoint, when it runs.
    pub metrics: Option<LoopMetrics>,
}

impl Loop {
    /// Runs until `stop`; returns the run's figures after restoring every cap.
    pub fn run(mut self) -> RunSummary {
        // 1 ns: the loop wakes on time instead of up to 50 us late.
        resex_rt::set_timer_slack(1);
        let priority = if self.realtime {
            set_realtime()
        } else {
            resex_rt::Priority::Normal("not asked for (realtime = false)".into())
        };
        self.driver.set_priority(priority.to_string());
        self.driver.publish(ns_since(self.clock));
        while !self.stop.load(Ordering::Acquire) {
            let due = self.driver.core.next_step_ns();
            let now = ns_since(self.clock);
            if now < due {
                // At most 50 ms at a time, so a stop is seen promptly even on long intervals.
                std::thread::sleep(Duration::from_nanos((due - now).min(50_000_000)));
                if ns_since(self.clock) < due {
                    continue;
                }
            }
            let t0 = Instant::now();
            let now = ns_since(self.clock);
            let late = now.saturating_sub(due);
            self.driver.tick(now);
            let took = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
            self.driver.record(late, took);
            if let Some(m) = &self.metrics {
                m.tick_lateness.observe(late as f64 / 1e9);
                m.scan.observe(took as f64 / 1e9);
            }
        }
        self.shutdown()
    }

    fn shutdown(mut self) -> RunSummary {
        // VMs with a cap in force get their original setting back through the actuator; the
        // final pass then finds whatever the store still holds (none, normally).
        let (capped, limited) = self.driver.restore_all();
        let (leftover, failed) = self.actuator.finish();
        for f in failed {
            tracing::error!("could not restore a cap: {f}");
        }
        let (leftover_tx, failed) = self.tx_actuator.finish();
        for f in failed {
            tracing::error!("could not restore a transmit limit: {f}");
        }
        let st = &mut self.driver.stats;
        let run = st.late_all.take_interval();
        RunSummary {
            ticks: st.ticks,
            skipped: st.skipped,
            late_p50_us: run.p50_ns as f64 / 1000.0,
            late_p99_us: run.p99_ns as f64 / 1000.0,
            late_max_us: run.max_ns as f64 / 1000.0,
            restored: capped + leftover,
            restored_tx: limited + leftover_tx,
        }
    }
}
