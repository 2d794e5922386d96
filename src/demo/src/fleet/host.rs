//! One host of the fleet demo ([`FleetHost`]): an embedded host with resexd
//! ([`EmbeddedDaemon`]), one light guest, and the daemon as a member of the fleet.

use crate::embedded::{host_config, EmbeddedDaemon};
use crate::error::DemoError;
use resex_daemon::DaemonHandle;
use resex_embedded::cgroup::CapMode;
use resex_embedded::{GuestCommand, HostConfig};
use resex_fleet::etcd::{unix_ms, Member, MemberState};
use resex_fleet::{FleetConfig, HostRecord, PeriodRates};
use resex_scenario::Scenario;
use std::path::Path;

/// A host's scenario: one guest whose BenchEx server sends 256 KiB replies 100 times a second.
fn scenario(name: &str) -> Result<Scenario, DemoError> {
    Scenario::from_toml(&format!(
        r#"
name = "{name}"
[link]
preset = "testbed"
[[guest]]
name = "bulk"
ram = "64MiB"
[guest.benchex]
buffer = "256KiB"
rate = 100.0
clients = 1
polling = "adaptive"
"#
    ))
    .map_err(|source| DemoError::Scenario {
        what: "the demo's scenario",
        source,
    })
}

/// Where a host joins the fleet.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Join<'a> {
    /// etcd's client URL.
    pub url: &'a str,
    /// The lease's TTL, s.
    pub ttl: i64,
    /// Under this directory each host has its own run directory.
    pub root: &'a Path,
    /// How the guests' programs are started.
    pub command: &'a GuestCommand,
}

/// A host of the fleet demo. Dropped, it leaves the fleet and stops.
pub(crate) struct FleetHost {
    /// `hostN`.
    pub name: String,
    scenario: Scenario,
    node: Option<EmbeddedDaemon>,
    member: Option<Member>,
}

impl FleetHost {
    /// Starts host `i` (an embedded host, its daemon, its fleet member; no guest yet).
    pub fn start(i: usize, j: Join<'_>) -> Result<FleetHost, DemoError> {
        let name = format!("host{i}");
        let sc = scenario(&format!("fleet-{name}"))?;
        Self::start_on(name, sc, j, |_| {})
    }

    /// Starts host `name` on scenario `sc` (its first guest is the one it runs), its host
    /// configuration changed by `edit` (an uplink, say).
    pub fn start_on(
        name: String,
        sc: Scenario,
        j: Join<'_>,
        edit: impl FnOnce(&mut HostConfig),
    ) -> Result<FleetHost, DemoError> {
        let run_dir = j.root.join(&name);
        let mut hc = host_config(&run_dir, CapMode::Auto, None, false, j.command.clone());
        // Several hosts share this machine's two CPUs: nobody asks for real-time priority.
        hc.realtime = false;
        edit(&mut hc);
        let node = EmbeddedDaemon::start(&sc, hc, false)?;
        let member = join(&name, &node.daemon, j)?;
        Ok(FleetHost {
            name,
            scenario: sc,
            node: Some(node),
            member: Some(member),
        })
    }

    /// Starts the host's guest.
    pub fn start_guest(&mut self) -> Result<(), DemoError> {
        self.start_guest_at(None)
    }

    /// Starts the host's guest, its clients' first order at Unix time `at_ms` when given.
    pub fn start_guest_at(&mut self, at_ms: Option<u64>) -> Result<(), DemoError> {
        if let Some(n) = self.node.as_mut() {
            n.host.start_clients_at(at_ms);
            n.host.start_guest(&self.scenario.guests[0])?;
        }
        Ok(())
    }

    /// Checks that the host's guests still run.
    pub fn check(&mut self) -> Result<(), DemoError> {
        if let Some(n) = self.node.as_mut() {
            n.host.check()?;
        }
        Ok(())
    }

    /// The daemon, while the host runs.
    pub fn daemon(&self) -> Option<&DaemonHandle> {
        self.node.as_ref().map(|n| &n.daemon)
    }

    /// The member's state (the default once it has left).
    pub fn state(&self) -> MemberState {
        self.member.as_ref().map(Member::state).unwrap_or_default()
    }

    /// True while the host is a member of the fleet.
    pub fn is_member(&self) -> bool {
        self.member.is_some()
    }

    /// Crashes the member (no revoke: its lease runs out, as with kill -9) and stops the host;
    /// the member's state at the crash.
    pub fn crash(&mut self) -> MemberState {
        let state = self.member.take().map(|m| {
            let s = m.state();
            m.crash();
            s
        });
        self.stop();
        state.unwrap_or_default()
    }

    /// Leaves the fleet, stops the daemon, then the host.
    pub fn stop(&mut self) {
        if let Some(m) = self.member.take() {
            m.leave();
        }
        if let Some(n) = self.node.take() {
            n.stop();
        }
    }
}

impl Drop for FleetHost {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The daemon `d` of host `name` joins the fleet: its summaries out, its allocations in.
fn join(name: &str, d: &DaemonHandle, j: Join<'_>) -> Result<Member, DemoError> {
    let fcfg = FleetConfig {
        host: Some(name.to_owned()),
        ttl_s: j.ttl,
        publish_ms: 500,
        ..FleetConfig::new(vec![j.url.to_string()])
    };
    let record = HostRecord {
        host: name.to_owned(),
        pid: std::process::id(),
        started_unix_ms: unix_ms(),
        metrics: None,
        backend: "embedded".into(),
        version: env!("CARGO_PKG_VERSION").into(),
    };
    let snap = d.snapshots();
    let n = name.to_owned();
    let summary = {
        let mut rates = PeriodRates::default();
        move || rates.summary(&n, &snap(), unix_ms())
    };
    Ok(Member::start_with(fcfg, record, summary, d.fleet_sink())?)
}
