//! `resex fleet demo`: a whole fleet on this machine. A local etcd (the installed binary), N
//! embedded hosts each with a resexd (in this process) and one light guest whose BenchEx
//! server sends 256 KiB replies 100 times a second, all crossing one shared uplink of half
//! their demand. The elected coordinator allocates the uplink (per-VM ceilings on softhca's
//! ports); midway the coordinator's host dies (its fleet session crashes: no revoke, its
//! lease runs out, as with kill -9) and another takes over; near the end etcd is killed and
//! every host must lift what the fleet set. Prints what it measured.

use crate::host::host_config;
use anyhow::{bail, Context, Result};
use resex_daemon::DaemonHandle;
use resex_embedded::cgroup::CapMode;
use resex_embedded::EmbeddedHost;
use resex_fleet::etcd::{unix_ms, Member};
use resex_fleet::local::LocalEtcd;
use resex_fleet::{FleetConfig, HostRecord, PeriodRates, Topology};
use resex_scenario::Scenario;
use serde::Serialize;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `resex fleet demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Hosts (2 to 6).
    #[arg(long, default_value_t = 3)]
    pub hosts: usize,
    /// The fleet lease's TTL, seconds (every etcd call waits a third of it).
    #[arg(long, default_value_t = 3)]
    pub ttl: i64,
    /// Print JSON only.
    #[arg(long)]
    pub json: bool,
}

/// What the demo measured.
#[derive(Debug, Serialize)]
pub struct DemoReport {
    /// Hosts started.
    pub hosts: usize,
    /// The lease TTL, s.
    pub ttl_s: i64,
    /// The shared uplink's capacity, Mb/s (half the guests' demand alone).
    pub uplink_mbps: f64,
    /// The guests' rate together before the topology was set, Mb/s.
    pub before_mbps: f64,
    /// Their rate under the coordinator's allocation, Mb/s.
    pub allocated_mbps: f64,
    /// The ceilings the allocation put in force, together, Mb/s (at most the uplink).
    pub ceilings_mbps: f64,
    /// The coordinator whose host was killed.
    pub killed: String,
    /// Seconds until another host led.
    pub leader_failover_s: f64,
    /// The new coordinator.
    pub new_leader: String,
    /// Seconds from the kill until every surviving host had the new coordinator's allocation.
    pub allocations_resumed_s: f64,
    /// Seconds from etcd's death until every host had lifted the fleet's ceilings.
    pub etcd_loss_fallback_s: f64,
    /// VMs still under a fleet ceiling after the fallback (must be 0).
    pub stale_throttles_after_fallback: usize,
    /// Allocations the hosts applied (one per host per coordinator round that changed it).
    pub allocations: u64,
    /// Coordinator rounds, all coordinators together.
    pub rounds: u64,
    /// The last coordinator's round time (read, solve, write), ms.
    pub round_ms: f64,
}

struct DemoHost {
    name: String,
    host: Option<EmbeddedHost>,
    daemon: Option<DaemonHandle>,
    member: Option<Member>,
}

impl DemoHost {
    fn stop(&mut self) {
        if let Some(m) = self.member.take() {
            m.leave();
        }
        if let Some(d) = self.daemon.take() {
            d.stop();
        }
        if let Some(mut h) = self.host.take() {
            h.stop();
        }
    }
}

impl Drop for DemoHost {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Removes the demo's directory when the demo ends, however it ends.
struct RemoveOnDrop(std::path::PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn scenario(name: &str) -> Result<Scenario> {
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
    .context("the demo's scenario")
}

fn say(json: bool, msg: &str) {
    if !json {
        eprintln!("== fleet demo: {msg}");
    }
}

fn wait(what: &str, limit: Duration, mut ok: impl FnMut() -> Result<bool>) -> Result<Duration> {
    let t = Instant::now();
    while !ok()? {
        if t.elapsed() > limit {
            bail!("{what}: not within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(t.elapsed())
}

fn start_host(i: usize, url: &str, ttl: i64, root: &std::path::Path) -> Result<DemoHost> {
    let name = format!("host{i}");
    let run_dir = root.join(&name);
    let mut hc = host_config(&run_dir, CapMode::Auto, None, false)?;
    // Several hosts share this machine's two CPUs: nobody asks for real-time priority.
    hc.realtime = false;
    let sc = scenario(&format!("fleet-{name}"))?;
    let host = EmbeddedHost::new(&sc, hc)?;
    let link = crate::host::scenario_link(&sc);
    let cfg = resex_daemon::config::Config {
        run_dir: Some(run_dir.clone()),
        state_dir: Some(run_dir.join("state")),
        api_socket: Some(run_dir.join("resexd.sock")),
        realtime: false,
        link: Some(link),
        ..Default::default()
    };
    let d = resex_daemon::start(
        resex_daemon::Settings {
            cfg,
            policy: None,
            limits: Default::default(),
        },
        Arc::new(resex_backend::local::LocalBackend::new(&run_dir)),
    )?;
    let fcfg = FleetConfig {
        host: Some(name.clone()),
        ttl_s: ttl,
        publish_ms: 500,
        ..FleetConfig::new(vec![url.to_string()])
    };
    let record = HostRecord {
        host: name.clone(),
        pid: std::process::id(),
        started_unix_ms: unix_ms(),
        metrics: None,
        backend: "embedded".into(),
        version: env!("CARGO_PKG_VERSION").into(),
    };
    let snap = d.snapshots();
    let n = name.clone();
    let member = Member::start_with(
        fcfg,
        record,
        {
            let mut rates = PeriodRates::default();
            move || rates.summary(&n, &snap(), unix_ms())
        },
        d.fleet_sink(),
    )?;
    Ok(DemoHost {
        name,
        host: Some(host),
        daemon: Some(d),
        member: Some(member),
    })
}

/// The guests' transmit rate together over `over`, Mb/s, from the monitors' exact byte
/// totals.
fn rate(hosts: &[DemoHost], over: Duration) -> f64 {
    let total = || -> u64 {
        hosts
            .iter()
            .filter_map(|h| h.daemon.as_ref())
            .flat_map(|d| d.snapshot().vms.clone())
            .map(|v| v.tx_bytes_total)
            .sum()
    };
    let (b0, t0) = (total(), Instant::now());
    std::thread::sleep(over);
    let (b1, dt) = (total(), t0.elapsed().as_secs_f64());
    b1.saturating_sub(b0) as f64 * 8.0 / 1e6 / dt
}

/// The fleet's ceilings in force together, Mb/s.
fn ceilings(hosts: &[DemoHost]) -> f64 {
    hosts
        .iter()
        .filter_map(|h| h.daemon.as_ref())
        .flat_map(|d| d.snapshot().vms.clone())
        .filter_map(|v| v.tx_max_bps)
        .map(|b| b as f64 / 1e6)
        .sum()
}

/// Each host's VMs now: rate and ceiling, for the progress lines.
fn detail(hosts: &[DemoHost]) -> String {
    let mut out = Vec::new();
    for h in hosts {
        let Some(d) = &h.daemon else { continue };
        for v in &d.snapshot().vms {
            out.push(format!(
                "{}/{} {:.0} Mb/s (ceiling {})",
                h.name,
                v.name,
                v.bytes_per_s * 8.0 / 1e6,
                v.tx_max_bps
                    .map_or("none".into(), |b| format!("{:.0}", b as f64 / 1e6))
            ));
        }
    }
    out.join(", ")
}

/// VMs under a transmit ceiling right now.
fn throttled(hosts: &[DemoHost]) -> usize {
    hosts
        .iter()
        .filter_map(|h| h.daemon.as_ref())
        .map(|d| {
            d.snapshot()
                .vms
                .iter()
                .filter(|v| v.tx_max_bps.is_some())
                .count()
        })
        .sum()
}

fn state(h: &DemoHost) -> resex_fleet::etcd::MemberState {
    h.member.as_ref().map(Member::state).unwrap_or_default()
}

/// Runs the demo.
pub fn run(a: &DemoArgs) -> Result<()> {
    if !(2..=6).contains(&a.hosts) {
        bail!(
            "--hosts {} must be 2 to 6 (they share this machine)",
            a.hosts
        );
    }
    if !resex_fleet::local::installed() {
        bail!("resex fleet demo needs the etcd binary: apt-get install etcd-server (Debian)");
    }
    let r = demo(a)?;
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        println!("{}", serde_json::to_string_pretty(&r)?);
    }
    Ok(())
}

fn demo(a: &DemoArgs) -> Result<DemoReport> {
    let json = a.json;
    let mut etcd = LocalEtcd::start()?;
    let url = etcd.url();
    say(json, &format!("etcd at {url}; starting {} hosts", a.hosts));
    let root = std::env::temp_dir().join(format!("resex-fleet-demo-{}", std::process::id()));
    let _clean = RemoveOnDrop(root.clone());
    let mut hosts = (1..=a.hosts)
        .map(|i| start_host(i, &url, a.ttl, &root))
        .collect::<Result<Vec<_>>>()?;
    wait("every host in the fleet", Duration::from_secs(20), || {
        Ok(hosts.iter().all(|h| state(h).connected) && hosts.iter().any(|h| state(h).leader))
    })?;
    for h in &mut hosts {
        let spec = scenario("x")?.guests[0].clone();
        h.host.as_mut().context("host")?.start_guest(&spec)?;
    }
    say(json, "guests started; measuring them alone");
    wait("every guest sending", Duration::from_secs(60), || {
        for h in &mut hosts {
            if let Some(x) = h.host.as_mut() {
                x.check()?;
            }
        }
        Ok(hosts.iter().all(|h| {
            h.daemon
                .as_ref()
                .is_some_and(|d| d.snapshot().vms.iter().any(|v| v.bytes_per_s > 0.0))
        }))
    })?;
    // Each guest asks for 100 x 256 KiB a second (210 Mb/s); a guest still starting, or a
    // machine busy elsewhere, sends less: wait (10 s at most) for half of that.
    let nominal = 100.0 * 262_144.0 * 8.0 / 1e6 * hosts.len() as f64;
    let mut before = 0.0;
    for _ in 0..5 {
        before = rate(&hosts, Duration::from_secs(2));
        if before >= nominal / 2.0 {
            break;
        }
    }
    if before < nominal / 2.0 {
        eprintln!(
            "resex fleet demo: the guests send {before:.0} Mb/s of the {nominal:.0} they ask \
             for: this machine is busy; the figures below will show it"
        );
    }
    say(json, &format!("alone: {}", detail(&hosts)));
    let uplink = (before / 2.0).max(1.0).round();
    let topo = Topology::from_toml(&format!(
        "valid_s = {}\n[[link]]\nname = \"uplink\"\ncapacity_mbps = {uplink}\nhosts = [{}]\n",
        a.ttl + 1,
        hosts
            .iter()
            .map(|h| format!("{:?}", h.name))
            .collect::<Vec<_>>()
            .join(", ")
    ))?;
    // The admin's write, as `resex fleet topology set` does it (again if etcd was slow).
    let mut tries = 0;
    while let Err(e) = resex_fleet::etcd::Fleet::connect(&FleetConfig::new(vec![url.clone()]))
        .and_then(|mut f| f.set_topology(&topo))
    {
        tries += 1;
        if tries == 5 {
            return Err(e.into());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    say(
        json,
        &format!("{before:.0} Mb/s alone; a shared uplink of {uplink} Mb/s set in etcd"),
    );
    wait("every host allocated", Duration::from_secs(15), || {
        Ok(hosts.iter().all(|h| state(h).ceilings > 0))
    })?;
    std::thread::sleep(Duration::from_secs(2));
    let ceilings_mbps = ceilings(&hosts);
    let allocated = rate(&hosts, Duration::from_secs(3));
    say(
        json,
        &format!(
            "{allocated:.0} Mb/s under the allocation: {}",
            detail(&hosts)
        ),
    );

    // The coordinator's host dies.
    let li = hosts
        .iter()
        .position(|h| state(h).leader)
        .context("no coordinator")?;
    let killed = hosts[li].name.clone();
    let applied_before: Vec<u64> = hosts.iter().map(|h| state(h).applied).collect();
    let mut allocations = 0;
    let mut rounds = 0;
    let t0 = Instant::now();
    if let Some(m) = hosts[li].member.take() {
        let s = m.state();
        allocations += s.applied;
        rounds += s.rounds;
        m.crash();
    }
    hosts[li].stop();
    say(json, &format!("coordinator {killed} killed"));
    wait("a new coordinator", Duration::from_secs(4 * 60), || {
        Ok(hosts.iter().any(|h| state(h).leader))
    })?;
    let failover = t0.elapsed();
    let new_leader = hosts
        .iter()
        .find(|h| state(h).leader)
        .map(|h| h.name.clone())
        .unwrap_or_default();
    wait("allocations resume", Duration::from_secs(20), || {
        Ok(hosts.iter().enumerate().all(|(k, h)| {
            k == li || (state(h).applied > applied_before[k] && state(h).ceilings > 0)
        }))
    })?;
    let resumed = t0.elapsed();
    say(
        json,
        &format!(
            "{new_leader} coordinates after {:.2} s; allocations resumed after {:.2} s",
            failover.as_secs_f64(),
            resumed.as_secs_f64()
        ),
    );
    std::thread::sleep(Duration::from_secs(2));

    // etcd dies.
    let t1 = Instant::now();
    etcd.kill();
    wait(
        "every host back on its local policy",
        Duration::from_secs(30),
        || {
            Ok(hosts
                .iter()
                .filter(|h| h.member.is_some())
                .all(|h| !state(h).connected && state(h).ceilings == 0))
        },
    )?;
    // The loop takes the lift at its next tick: give it a few.
    wait("the ceilings lifted", Duration::from_secs(1), || {
        Ok(throttled(&hosts) == 0)
    })
    .ok();
    let fallback = t1.elapsed();
    let stale = throttled(&hosts);
    say(
        json,
        &format!(
            "etcd killed: every host on its local policy after {:.2} s, {stale} stale ceilings",
            fallback.as_secs_f64()
        ),
    );
    let mut round_ms = 0.0;
    for h in &hosts {
        let s = state(h);
        allocations += s.applied;
        rounds += s.rounds;
        if s.rounds > 0 {
            round_ms = s.round_us as f64 / 1000.0;
        }
    }
    for h in &mut hosts {
        h.stop();
    }
    Ok(DemoReport {
        hosts: a.hosts,
        ttl_s: a.ttl,
        uplink_mbps: uplink,
        before_mbps: before,
        allocated_mbps: allocated,
        ceilings_mbps,
        killed,
        leader_failover_s: failover.as_secs_f64(),
        new_leader,
        allocations_resumed_s: resumed.as_secs_f64(),
        etcd_loss_fallback_s: fallback.as_secs_f64(),
        stale_throttles_after_fallback: stale,
        allocations,
        rounds,
        round_ms,
    })
}
