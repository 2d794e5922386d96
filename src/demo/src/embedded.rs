//! An embedded host with resexd on it, in this process ([`EmbeddedDaemon`]): what the demo's
//! real-time run and every host of the fleet demo are. One place builds the host's
//! configuration ([`host_config`]) and the daemon's for that host ([`daemon_config`]: its run
//! directory, state, API socket and the scenario's link), and starts and stops the pair.

use crate::error::DemoError;
use resex_backend::local::LocalBackend;
use resex_daemon::config::{Config, LinkConfig};
use resex_daemon::{DaemonHandle, RunSummary};
use resex_embedded::cgroup::CapMode;
use resex_embedded::{EmbeddedHost, GuestCommand, HostConfig};
use resex_scenario::Scenario;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A host configuration for `run_dir` whose guests run `command` (softhca's port thread asks
/// for real-time priority unless `RESEX_NO_RT` is set; `log_stalls`: log each stalled second,
/// else only count them).
pub fn host_config(
    run_dir: &Path,
    caps: CapMode,
    keep_logs: Option<PathBuf>,
    log_stalls: bool,
    command: GuestCommand,
) -> HostConfig {
    let ram_dir = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    HostConfig {
        run_dir: run_dir.to_owned(),
        ram_dir,
        cap_mode: caps,
        command,
        report_ms: 10,
        keep_logs,
        realtime: std::env::var_os("RESEX_NO_RT").is_none(),
        log_stalls,
        hca_doorbells: true,
        port_cgroup: false,
        clients_start_unix_ms: None,
        uplink: None,
    }
}

/// The daemon's view of the embedded host's link (softhca's model of the scenario's port).
pub fn scenario_link(s: &Scenario) -> LinkConfig {
    let l = resex_lab::link_of(s);
    LinkConfig::of(l.bits_per_sec, l.header_bytes)
}

/// The daemon's configuration for an embedded host of `scenario` in `run_dir`: its state in
/// `run_dir/state`, its API on `run_dir/resexd.sock`, the scenario's link; `realtime`: its loop
/// asks for real-time priority.
pub fn daemon_config(run_dir: &Path, scenario: &Scenario, realtime: bool) -> Config {
    Config {
        run_dir: Some(run_dir.to_owned()),
        state_dir: Some(run_dir.join("state")),
        api_socket: Some(api_socket(run_dir)),
        realtime,
        link: Some(scenario_link(scenario)),
        ..Default::default()
    }
}

/// The daemon's API socket in `run_dir`.
pub fn api_socket(run_dir: &Path) -> PathBuf {
    run_dir.join("resexd.sock")
}

/// An embedded host and the daemon that monitors it (no policy: the caller reloads one).
/// Dropped, the daemon stops first (restoring what it set), then the host.
#[derive(Debug)]
pub struct EmbeddedDaemon {
    /// The daemon.
    pub daemon: DaemonHandle,
    /// The host.
    pub host: EmbeddedHost,
    run_dir: PathBuf,
}

impl EmbeddedDaemon {
    /// Starts softhca for `scenario` as `host` says (no guests yet), then the daemon on the
    /// host's run directory ([`daemon_config`]; `realtime`: its loop asks for real-time
    /// priority).
    pub fn start(
        scenario: &Scenario,
        host: HostConfig,
        realtime: bool,
    ) -> Result<EmbeddedDaemon, DemoError> {
        let run_dir = host.run_dir.clone();
        let host = EmbeddedHost::new(scenario, host)?;
        let settings = resex_daemon::Settings {
            cfg: daemon_config(&run_dir, scenario, realtime),
            policy: None,
            limits: Default::default(),
        };
        let daemon = resex_daemon::start(settings, Arc::new(LocalBackend::new(&run_dir)))?;
        Ok(EmbeddedDaemon {
            daemon,
            host,
            run_dir,
        })
    }

    /// The run directory (domain records, sockets, the daemon's state).
    pub fn run_dir(&self) -> &Path {
        &self.run_dir
    }

    /// The daemon's API socket.
    pub fn api_socket(&self) -> PathBuf {
        api_socket(&self.run_dir)
    }

    /// Stops the daemon (every cap and limit it set put back), then the host's guests and
    /// softhca; the daemon's run figures.
    pub fn stop(self) -> RunSummary {
        let EmbeddedDaemon {
            daemon, mut host, ..
        } = self;
        let summary = daemon.stop();
        host.stop();
        summary
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_daemon_watches_the_hosts_run_directory_and_link() {
        let s = crate::plan::scenario().unwrap();
        let dir = Path::new("/tmp/resex-x");
        let c = daemon_config(dir, &s, false);
        assert_eq!(c.run_dir.as_deref(), Some(dir));
        assert_eq!(c.state_dir.as_deref(), Some(dir.join("state").as_path()));
        assert_eq!(c.api_socket, Some(dir.join("resexd.sock")));
        assert!(!c.realtime && daemon_config(dir, &s, true).realtime);
        // The paper's pair is on the 8 Gb/s testbed port.
        assert_eq!(c.link.map(|l| l.gbps), Some(scenario_link(&s).gbps));
        assert!((scenario_link(&s).gbps - 8.0).abs() < 1e-9, "{:?}", c.link);
    }

    #[test]
    fn a_host_configuration_keeps_what_it_was_given() {
        let cmd = GuestCommand {
            program: "/bin/resex".into(),
            agent_prefix: vec!["agent".into()],
            benchex_prefix: vec!["benchex".into()],
        };
        let h = host_config(Path::new("/tmp/r"), CapMode::Auto, None, true, cmd);
        assert_eq!(h.run_dir, Path::new("/tmp/r"));
        assert!(h.log_stalls && h.hca_doorbells && !h.port_cgroup);
        assert_eq!(h.report_ms, 10);
        assert_eq!(h.command.agent_prefix, ["agent"]);
    }
}
