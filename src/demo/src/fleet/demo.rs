//! The fleet demo's run: etcd and the hosts up, the guests measured alone, the shared uplink
//! set and allocated, the coordinator's host killed, etcd killed; what each step measured.

use crate::error::DemoError;
use crate::fleet::host::{FleetHost, Join};
use crate::fleet::report::FleetReport;
use crate::fleet::watch::{allocations, ceilings, detail, rate, throttled, wait};
use resex_embedded::GuestCommand;
use resex_fleet::etcd::Fleet;
use resex_fleet::local::LocalEtcd;
use resex_fleet::{FleetConfig, Topology};
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How many hosts the demo runs (they share this machine).
pub const HOSTS: RangeInclusive<usize> = 2..=6;

/// How the fleet demo is set up.
#[derive(Debug, Clone)]
pub struct FleetOptions {
    /// Hosts (within [`HOSTS`]).
    pub hosts: usize,
    /// The fleet lease's TTL, seconds (every etcd call waits a third of it).
    pub ttl: i64,
    /// How the guests' programs are started (the caller's binary, as `resex` does it).
    pub command: GuestCommand,
}

/// Where the demo says what it is doing.
pub trait Notes {
    /// What the demo is doing or has just measured (one line).
    fn progress(&mut self, line: &str);
    /// Something that makes the figures less telling (one line).
    fn warn(&mut self, line: &str);
}

/// Removes the demo's directory when the demo ends, however it ends.
pub(crate) struct RemoveOnDrop(pub(crate) PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs the demo: a local etcd (the installed binary), `o.hosts` embedded hosts each with a
/// resexd in this process, the coordinator's host killed midway and etcd near the end.
pub fn run(o: &FleetOptions, notes: &mut dyn Notes) -> Result<FleetReport, DemoError> {
    if !HOSTS.contains(&o.hosts) {
        return Err(DemoError::Hosts {
            hosts: o.hosts,
            min: *HOSTS.start(),
            max: *HOSTS.end(),
        });
    }
    if !resex_fleet::local::installed() {
        return Err(DemoError::NoEtcd);
    }
    let mut etcd = LocalEtcd::start()?;
    let url = etcd.url();
    notes.progress(&format!("etcd at {url}; starting {} hosts", o.hosts));
    let root = std::env::temp_dir().join(format!("resex-fleet-demo-{}", std::process::id()));
    let _clean = RemoveOnDrop(root.clone());
    let join = Join {
        url: &url,
        ttl: o.ttl,
        root: &root,
        command: &o.command,
    };
    let mut hosts = (1..=o.hosts)
        .map(|i| FleetHost::start(i, join))
        .collect::<Result<Vec<_>, _>>()?;
    let before = alone(&mut hosts, notes)?;
    let uplink = (before / 2.0).max(1.0).round();
    set_uplink(&hosts, &url, o.ttl, uplink)?;
    notes.progress(&format!(
        "{before:.0} Mb/s alone; a shared uplink of {uplink} Mb/s set in etcd"
    ));
    let (ceilings_mbps, allocated_mbps) = allocated(&hosts, &url, notes)?;
    let f = fail_over(&mut hosts, notes)?;
    let (fallback, stale) = lose_etcd(&mut etcd, &hosts, notes)?;
    let (allocations, rounds, round_ms) = totals(&mut hosts);
    Ok(FleetReport {
        hosts: o.hosts,
        ttl_s: o.ttl,
        uplink_mbps: uplink,
        before_mbps: before,
        allocated_mbps,
        ceilings_mbps,
        killed: f.killed,
        leader_failover_s: f.failover.as_secs_f64(),
        new_leader: f.new_leader,
        allocations_resumed_s: f.resumed.as_secs_f64(),
        etcd_loss_fallback_s: fallback.as_secs_f64(),
        stale_throttles_after_fallback: stale,
        allocations: allocations + f.allocations,
        rounds: rounds + f.rounds,
        round_ms,
    })
}

/// Waits for the fleet, starts the guests and measures them alone: their rate together,
/// Mb/s.
fn alone(hosts: &mut [FleetHost], notes: &mut dyn Notes) -> Result<f64, DemoError> {
    fleet_up(hosts)?;
    for h in hosts.iter_mut() {
        h.start_guest()?;
    }
    notes.progress("guests started; measuring them alone");
    wait("every guest sending", Duration::from_secs(60), || {
        for h in hosts.iter_mut() {
            h.check()?;
        }
        Ok(hosts.iter().all(|h| {
            h.daemon()
                .is_some_and(|d| d.snapshot().vms.iter().any(|v| v.bytes_per_s > 0.0))
        }))
    })?;
    // Each guest asks for 100 x 256 KiB a second (210 Mb/s); a guest still starting, or a
    // machine busy elsewhere, sends less: wait (10 s at most) for half of that.
    #[allow(clippy::cast_precision_loss)]
    let nominal = 100.0 * 262_144.0 * 8.0 / 1e6 * hosts.len() as f64;
    let mut before = 0.0;
    for _ in 0..5 {
        before = rate(hosts, Duration::from_secs(2));
        if before >= nominal / 2.0 {
            break;
        }
    }
    if before < nominal / 2.0 {
        notes.warn(&format!(
            "resex fleet demo: the guests send {before:.0} Mb/s of the {nominal:.0} they ask \
             for: this machine is busy; the figures below will show it"
        ));
    }
    notes.progress(&format!("alone: {}", detail(hosts)));
    Ok(before)
}

/// The admin's write of a shared uplink of `uplink` Mb/s over every host, as `resex fleet
/// topology set` does it.
fn set_uplink(hosts: &[FleetHost], url: &str, ttl: i64, uplink: f64) -> Result<(), DemoError> {
    let names: Vec<String> = hosts.iter().map(|h| format!("{:?}", h.name)).collect();
    let topo = Topology::from_toml(&format!(
        "valid_s = {}\n[[link]]\nname = \"uplink\"\ncapacity_mbps = {uplink}\nhosts = [{}]\n",
        ttl + 1,
        names.join(", ")
    ))?;
    set_topology(url, &topo)
}

/// Writes topology `t` into the fleet at `url` (again, up to five times, if etcd was slow).
pub(crate) fn set_topology(url: &str, t: &Topology) -> Result<(), DemoError> {
    let mut tries = 0;
    while let Err(e) =
        Fleet::connect(&FleetConfig::new(vec![url.to_owned()])).and_then(|mut f| f.set_topology(t))
    {
        tries += 1;
        if tries == 5 {
            return Err(e.into());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    Ok(())
}

/// Waits until every host is in the fleet and one of them coordinates.
pub(crate) fn fleet_up(hosts: &[FleetHost]) -> Result<(), DemoError> {
    wait("every host in the fleet", Duration::from_secs(20), || {
        Ok(hosts.iter().all(|h| h.state().connected) && hosts.iter().any(|h| h.state().leader))
    })?;
    Ok(())
}

/// Waits for every host's allocation; the ceilings of one coordinator round together and the
/// guests' rate under them, Mb/s.
fn allocated(
    hosts: &[FleetHost],
    url: &str,
    notes: &mut dyn Notes,
) -> Result<(f64, f64), DemoError> {
    wait("every host allocated", Duration::from_secs(15), || {
        Ok(hosts.iter().all(|h| h.state().ceilings > 0))
    })?;
    std::thread::sleep(Duration::from_secs(2));
    let ceilings_mbps = one_round(url, hosts.len()).unwrap_or_else(|| {
        // No read found every host's allocation of one round: the ceilings in force.
        notes.warn("resex fleet demo: the hosts' allocations never showed one round");
        ceilings(hosts)
    });
    let allocated = rate(hosts, Duration::from_secs(3));
    notes.progress(&format!(
        "{allocated:.0} Mb/s under the allocation: {}",
        detail(hosts)
    ));
    Ok((ceilings_mbps, allocated))
}

/// The ceilings of every host's allocation, together, Mb/s, once one read of etcd finds all
/// `hosts` allocations of the same coordinator round, each with ceilings (a round's fit the uplink;
/// the ceilings in force, read from each host's snapshot, may mix two rounds, as each host
/// reads its own when it polls). None: none did within 10 s.
fn one_round(url: &str, hosts: usize) -> Option<f64> {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(10) {
        if let Some((all, _)) = allocations(url) {
            let round = all.first().map(|a| a.round);
            let full = all
                .iter()
                .all(|a| Some(a.round) == round && !a.vms.is_empty());
            if all.len() == hosts && full {
                return Some(all.iter().flat_map(|a| &a.vms).map(|v| v.max_mbps).sum());
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    None
}

/// What killing the coordinator's host showed.
struct Failover {
    killed: String,
    failover: Duration,
    new_leader: String,
    resumed: Duration,
    /// The killed member's applied allocations and rounds.
    allocations: u64,
    rounds: u64,
}

/// Kills the coordinator's host; how long until another coordinates and every surviving
/// host has its allocation.
fn fail_over(hosts: &mut [FleetHost], notes: &mut dyn Notes) -> Result<Failover, DemoError> {
    let li = hosts
        .iter()
        .position(|h| h.state().leader)
        .ok_or(DemoError::NoCoordinator)?;
    let killed = hosts[li].name.clone();
    let applied_before: Vec<u64> = hosts.iter().map(|h| h.state().applied).collect();
    let t0 = Instant::now();
    let crashed = hosts[li].crash();
    notes.progress(&format!("coordinator {killed} killed"));
    wait("a new coordinator", Duration::from_secs(4 * 60), || {
        Ok(hosts.iter().any(|h| h.state().leader))
    })?;
    let failover = t0.elapsed();
    let new_leader = hosts
        .iter()
        .find(|h| h.state().leader)
        .map(|h| h.name.clone())
        .unwrap_or_default();
    wait("allocations resume", Duration::from_secs(20), || {
        Ok(hosts.iter().enumerate().all(|(k, h)| {
            k == li || (h.state().applied > applied_before[k] && h.state().ceilings > 0)
        }))
    })?;
    let resumed = t0.elapsed();
    notes.progress(&format!(
        "{new_leader} coordinates after {:.2} s; allocations resumed after {:.2} s",
        failover.as_secs_f64(),
        resumed.as_secs_f64()
    ));
    std::thread::sleep(Duration::from_secs(2));
    Ok(Failover {
        killed,
        failover,
        new_leader,
        resumed,
        allocations: crashed.applied,
        rounds: crashed.rounds,
    })
}

/// Kills etcd; how long until every host is back on its local policy, and the fleet ceilings
/// still in force then.
fn lose_etcd(
    etcd: &mut LocalEtcd,
    hosts: &[FleetHost],
    notes: &mut dyn Notes,
) -> Result<(Duration, usize), DemoError> {
    let t1 = Instant::now();
    etcd.kill();
    wait(
        "every host back on its local policy",
        Duration::from_secs(30),
        || {
            Ok(hosts
                .iter()
                .filter(|h| h.is_member())
                .all(|h| !h.state().connected && h.state().ceilings == 0))
        },
    )?;
    // The loop takes the lift at its next tick: give it a few.
    wait("the ceilings lifted", Duration::from_secs(1), || {
        Ok(throttled(hosts) == 0)
    })
    .ok();
    let fallback = t1.elapsed();
    let stale = throttled(hosts);
    notes.progress(&format!(
        "etcd killed: every host on its local policy after {:.2} s, {stale} stale ceilings",
        fallback.as_secs_f64()
    ));
    Ok((fallback, stale))
}

/// The surviving members' applied allocations, rounds and the last round's time (ms); then
/// every host stops.
fn totals(hosts: &mut [FleetHost]) -> (u64, u64, f64) {
    let (mut allocations, mut rounds, mut round_ms) = (0, 0, 0.0);
    for h in hosts.iter() {
        let s = h.state();
        allocations += s.applied;
        rounds += s.rounds;
        if s.rounds > 0 {
            #[allow(clippy::cast_precision_loss)]
            let ms = s.round_us as f64 / 1000.0;
            round_ms = ms;
        }
    }
    for h in hosts.iter_mut() {
        h.stop();
    }
    (allocations, rounds, round_ms)
}
