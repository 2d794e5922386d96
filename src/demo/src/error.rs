//! Why a demo could not run: [`DemoError`].

use std::path::PathBuf;
use std::time::Duration;

/// What stops a demo.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// A total run time too short for its phases.
    #[error("a demo of {duration} s is too short: at least {min} s, one per phase")]
    TooShort {
        /// The run time asked for, s.
        duration: f64,
        /// The shortest, s.
        min: f64,
    },
    /// A built-in scenario does not parse.
    #[error("{what}")]
    Scenario {
        /// Which scenario.
        what: &'static str,
        /// Why.
        #[source]
        source: resex_scenario::ScenarioError,
    },
    /// The built-in scenario lacks one of the demo's guests.
    #[error("the built-in scenario's {0}")]
    MissingGuest(&'static str),
    /// A built-in policy file does not parse.
    #[error(transparent)]
    Policy(#[from] resex_pricing::ConfigError),
    /// The embedded host.
    #[error(transparent)]
    Host(#[from] resex_embedded::HostError),
    /// The daemon did not start.
    #[error(transparent)]
    Daemon(#[from] resex_daemon::control::DaemonError),
    /// A phase of the lab run.
    #[error("phase {phase}")]
    Lab {
        /// The phase.
        phase: &'static str,
        /// Why.
        #[source]
        source: resex_lab::LabError,
    },
    /// A guest did not register (or send its first report) in time.
    #[error(
        "guest `{name}` did not register (and report) within {} s; its log {}:\n{tail}",
        within.as_secs(),
        log.display()
    )]
    NotRegistered {
        /// The guest.
        name: String,
        /// How long it was given.
        within: Duration,
        /// Its log file.
        log: PathBuf,
        /// The log's last lines (or why it could not be read).
        tail: String,
    },
    /// The run was stopped (a signal, or the dashboard quit).
    #[error("interrupted")]
    Interrupted,
    /// A phase ended before its figures' first snapshot.
    #[error("phase too short to measure")]
    PhaseTooShort,
    /// The fleet demo's host count is outside what one machine can share.
    #[cfg(feature = "fleet")]
    #[error("{hosts} hosts: the fleet demo runs {min} to {max} (they share this machine)")]
    Hosts {
        /// Hosts asked for.
        hosts: usize,
        /// The fewest.
        min: usize,
        /// The most.
        max: usize,
    },
    /// The etcd binary is not installed.
    #[cfg(feature = "fleet")]
    #[error("the fleet demo needs the etcd binary: apt-get install etcd-server (Debian)")]
    NoEtcd,
    /// The fleet (etcd, a member, the topology).
    #[cfg(feature = "fleet")]
    #[error(transparent)]
    Fleet(#[from] resex_fleet::FleetError),
    /// Something the fleet demo waits for did not happen in time.
    #[cfg(feature = "fleet")]
    #[error("{what}: not within {limit:?}")]
    Timeout {
        /// What it waited for.
        what: &'static str,
        /// How long.
        limit: Duration,
    },
    /// No host of the fleet coordinated when the demo came to kill the coordinator.
    #[cfg(feature = "fleet")]
    #[error("no coordinator")]
    NoCoordinator,
}
