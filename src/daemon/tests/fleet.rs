//! The fleet with real processes (issue 22, item 3): the real etcd binary and three resexd on
//! loopback. The coordinator allocates over a topology; kill -9 it: another host leads within
//! two lease TTLs and allocations continue from it; kill etcd:
//! every host falls back to its local policy within one TTL; start etcd again: the fleet
//! re-forms; restart the killed host: it joins again under its name; SIGTERM: hosts leave at
//! once (their leases revoked). Needs `--features fleet`; without etcd installed the test says
//! so and passes, unless RESEX_REQUIRE_SYSTEM_DEPS=1 (CI).

#![cfg(feature = "fleet")]

use resex_fleet::etcd::Fleet;
use resex_fleet::local::LocalEtcd;
use resex_fleet::{FleetConfig, FleetStatus};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const TTL: u64 = 2;

struct Host {
    name: String,
    dir: PathBuf,
    child: Child,
}

fn resexd(dir: &Path, name: &str, etcd: &str) -> Child {
    std::fs::create_dir_all(dir).unwrap();
    Command::new(env!("CARGO_BIN_EXE_resexd"))
        .args(["--backend", "local", "--run-dir"])
        .arg(dir.join("run"))
        .arg("--state-dir")
        .arg(dir.join("state"))
        .arg("--api")
        .arg(dir.join("api.sock"))
        .args([
            "--fleet",
            etcd,
            "--fleet-host",
            name,
            "--fleet-ttl",
            &TTL.to_string(),
        ])
        .env("RUST_LOG", "resex_fleet=info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("stderr.log")).unwrap())
        .spawn()
        .unwrap()
}

fn status(url: &str) -> Option<FleetStatus> {
    Fleet::connect(&FleetConfig::new(vec![url.to_string()]))
        .ok()?
        .status()
        .ok()
}

fn wait_for(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) -> Duration {
    let t = Instant::now();
    while !ok() {
        assert!(t.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(25));
    }
    t.elapsed()
}

fn log(h: &Host) -> String {
    std::fs::read_to_string(h.dir.join("stderr.log")).unwrap_or_default()
}

#[test]
fn three_resexd_survive_a_killed_leader_and_a_lost_etcd() {
    if !resex_fleet::local::installed_or_skip() {
        return;
    }
    let mut etcd = LocalEtcd::start().unwrap();
    let url = etcd.url();
    let tmp = tempfile::tempdir().unwrap();
    let mut hosts: Vec<Host> = ["h1", "h2", "h3"]
        .iter()
        .map(|n| {
            let dir = tmp.path().join(n);
            Host {
                name: (*n).to_string(),
                child: resexd(&dir, n, &url),
                dir,
            }
        })
        .collect();
    let three = |s: &FleetStatus| s.hosts.len() == 3 && s.leader.is_some();
    wait_for("three hosts and a leader", Duration::from_secs(30), || {
        status(&url).is_some_and(|s| three(&s))
    });
    let s = status(&url).unwrap();
    assert!(
        s.hosts.iter().all(|h| h.lease_granted_s == Some(2)),
        "{s:?}"
    );
    // A topology: the coordinator allocates over it every second, to every host on its links.
    let mut admin = Fleet::connect(&FleetConfig::new(vec![url.clone()])).unwrap();
    admin
        .set_topology(
            &resex_fleet::Topology::from_toml(
                "[[link]]\nname = \"up\"\ncapacity_mbps = 1000\nhosts = [\"h1\", \"h2\", \"h3\"]\n",
            )
            .unwrap(),
        )
        .unwrap();
    let by = |url: &str, who: &str| {
        Fleet::connect(&FleetConfig::new(vec![url.to_string()]))
            .and_then(|mut f| f.allocations())
            .is_ok_and(|(a, _)| a.len() >= 2 && a.iter().all(|a| a.coordinator == who))
    };
    let leader = s.leader.clone().unwrap();
    wait_for("allocations", Duration::from_secs(10), || by(&url, &leader));

    // kill -9 the coordinator.
    let i = hosts.iter().position(|h| h.name == leader).unwrap();
    hosts[i].child.kill().unwrap();
    hosts[i].child.wait().unwrap();
    let failover = wait_for("a new leader", Duration::from_secs(2 * TTL + 2), || {
        status(&url).is_some_and(|s| s.leader.as_deref().is_some_and(|l| l != leader))
    });
    eprintln!("leader {leader} killed: a new leader after {failover:?} (TTL {TTL} s)");
    assert!(failover <= Duration::from_secs(2 * TTL), "{failover:?}");
    // Allocations continue, from the new coordinator (the old one's went with its lease).
    let new_leader = status(&url).unwrap().leader.unwrap();
    let resumed = wait_for(
        "allocations resume",
        Duration::from_secs(2 * TTL + 2),
        || by(&url, &new_leader),
    );
    eprintln!("allocations from {new_leader} after another {resumed:?}");
    wait_for(
        "the dead host's record gone",
        Duration::from_secs(TTL + 2),
        || status(&url).is_some_and(|s| s.hosts.len() == 2),
    );

    // Lose etcd: every live host falls back within one TTL.
    let lost = Instant::now();
    etcd.kill();
    for (k, h) in hosts.iter().enumerate() {
        if k == i {
            continue;
        }
        wait_for(
            &format!("{} falls back", h.name),
            Duration::from_secs(TTL + 2),
            || log(h).contains("local policy until it is back"),
        );
    }
    let fallback = lost.elapsed();
    eprintln!("etcd killed: every host on its local policy after {fallback:?}");
    assert!(fallback <= Duration::from_secs(TTL + 1), "{fallback:?}");

    // etcd back: the fleet re-forms.
    etcd.restart().unwrap();
    // Re-formed: both hosts registered anew (fresh summaries) and one of them leads.
    let fresh = |s: &FleetStatus| {
        s.hosts
            .iter()
            .all(|h| h.summary_age_ms.is_some_and(|a| a < 1500))
    };
    let reform = wait_for("the fleet re-forms", Duration::from_secs(20), || {
        status(&url).is_some_and(|s| s.hosts.len() == 2 && s.leader.is_some() && fresh(&s))
    });
    eprintln!("etcd back: two hosts and a leader after {reform:?}");

    // The killed host restarts under its name and joins.
    hosts[i].child = resexd(&hosts[i].dir, &leader, &url);
    wait_for("the restarted host joins", Duration::from_secs(20), || {
        status(&url).is_some_and(|s| three(&s) && s.hosts.iter().any(|h| h.host == leader))
    });

    // SIGTERM: each leaves at once (lease revoked), well before its TTL would run out.
    for h in &mut hosts {
        let pid = h.child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    }
    for h in &mut hosts {
        assert!(h.child.wait().unwrap().success(), "{}: {}", h.name, log(h));
    }
    let s = status(&url).unwrap();
    assert!(s.hosts.is_empty() && s.leader.is_none(), "{s:?}");
}
