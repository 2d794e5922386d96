//! The whole real-time run: raised priorities, the embedded host with resexd, the phases, and
//! the host's figures over the run.

use crate::embedded::{host_config, EmbeddedDaemon};
use crate::error::DemoError;
use crate::live::guests::{lowered, priorities};
use crate::live::phases::{self, PhaseRun};
use crate::live::view::LiveView;
use crate::plan::{Demo, INTERFERER, VICTIM};
use crate::report::{DemoReport, HostReport};
use resex_embedded::cgroup::CapMode;
use resex_embedded::GuestCommand;
use resex_softhca::PortSample;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// How a real-time run is set up.
#[derive(Debug, Clone)]
pub struct LiveOptions {
    /// Cap mechanism.
    pub caps: CapMode,
    /// Run directory (None: a fresh one under the temporary directory, removed at the end).
    pub run_dir: Option<PathBuf>,
    /// Where each guest's log (agent, server, clients) is copied when it stops.
    pub keep_logs: Option<PathBuf>,
    /// softhca polls every doorbell record on a timer instead of waiting for the guests'
    /// doorbells.
    pub timer_polling: bool,
    /// softhca's port thread gets a cgroup of its own.
    pub port_cgroup: bool,
    /// How the guests' programs are started (the caller's binary, as `resex` does it).
    pub command: GuestCommand,
    /// Set (by a signal, by the caller's view): the run stops with [`DemoError::Interrupted`].
    pub stop: Arc<AtomicBool>,
}

/// Runs `demo` in real time as `o` says, showing it through `view`.
pub fn run(demo: &Demo, o: &LiveOptions, view: &mut dyn LiveView) -> Result<DemoReport, DemoError> {
    let (victim, interferer) = (demo.guest(VICTIM)?, demo.guest(INTERFERER)?);
    let temp = o.run_dir.is_none();
    let run_dir = o
        .run_dir
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join(format!("resex-demo-{}", std::process::id())));
    let rt = std::env::var_os("RESEX_NO_RT").is_none();
    if rt {
        // Every thread of the host side (the daemon's samplers and actuators, softhca's
        // control threads) inherits nice -10 from here: a lock one of them holds must not wait
        // behind the guests or a CPU hog while a real-time thread waits for it (seen: the
        // control loop and softhca both held up 1.4 s). Guests are put back to nice 0.
        let _ = resex_rt::raise_priority(None, -10);
    }
    // Stalls are counted per phase and summarised at the end, not logged in the table.
    let mut hc = host_config(
        &run_dir,
        o.caps,
        o.keep_logs.clone(),
        false,
        o.command.clone(),
    );
    hc.hca_doorbells = !o.timer_polling;
    hc.port_cgroup = o.port_cgroup;
    let mut node = EmbeddedDaemon::start(&demo.scenario, hc, rt)?;
    let priorities = priorities(&node, rt);
    if let Some(line) = lowered(rt, &priorities.0, &priorities.1) {
        view.warn(line);
    }
    view.started(&node.host.host_id, &node.api_socket());
    let port0 = node.host.hca_sample();
    let r = PhaseRun {
        plan: &demo.plan,
        secs: demo.secs,
        settle: demo.settle,
        victim: &victim,
        interferer: &interferer,
        stop: &o.stop,
    };
    let result = phases::run(&r, &mut node, view);
    view.finished();
    let host = host_report(node, &port0, priorities);
    if temp {
        let _ = std::fs::remove_dir_all(&run_dir);
    }
    Ok(DemoReport::live(result?, host))
}

/// Stops the host and its daemon; their figures over the run (`port0`: softhca's port at the
/// start; the priorities softhca's port thread and the daemon's loop got).
fn host_report(
    node: EmbeddedDaemon,
    port0: &PortSample,
    priorities: (String, String),
) -> HostReport {
    let stalls = node.host.hca_stalls();
    let port = node.host.hca_sample().since(port0);
    let summary = node.stop();
    #[allow(clippy::cast_precision_loss)]
    HostReport {
        softhca_priority: priorities.0,
        loop_priority: priorities.1,
        hca_stalled_s: stalls.stalled_seconds,
        hca_watched_s: stalls.seconds,
        hca_longest_ms: stalls.longest_us as f64 / 1000.0,
        hca_cpu_pct: port.cpu_share().map(|c| 100.0 * c),
        hca_wakeups_per_s: port.polls_per_s(),
        ticks: summary.ticks,
        tick_late_p50_us: summary.late_p50_us,
        tick_late_p99_us: summary.late_p99_us,
        tick_late_max_us: summary.late_max_us,
    }
}
