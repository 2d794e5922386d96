//! The fleet against the real etcd binary (Debian etcd-server), on loopback: membership under
//! a lease, the election, a crashed leader replaced, etcd lost and back. Without etcd installed
//! these tests say so and pass, unless RESEX_REQUIRE_SYSTEM_DEPS=1 (CI), where they fail.

#![cfg(feature = "etcd")]

use resex_fleet::etcd::{unix_ms, Fleet, Member};
use resex_fleet::local::{block_on, LocalEtcd};
use resex_fleet::{FleetConfig, HostRecord, HostSummary, VmSummary};
use std::time::{Duration, Instant};

/// The real etcd, or `None` (with a line) when it is not installed outside CI.
fn etcd() -> Option<LocalEtcd> {
    resex_fleet::local::installed_or_skip().then(|| LocalEtcd::start().unwrap())
}

fn cfg(e: &LocalEtcd, host: &str, ttl: i64) -> FleetConfig {
    FleetConfig {
        host: Some(host.into()),
        ttl_s: ttl,
        publish_ms: 200,
        ..FleetConfig::new(vec![e.url()])
    }
}

fn member(e: &LocalEtcd, host: &str, ttl: i64) -> Member {
    let record = HostRecord {
        host: host.into(),
        pid: std::process::id(),
        started_unix_ms: unix_ms(),
        metrics: Some(format!("127.0.0.1:{}", 9000 + host.len())),
        backend: "local".into(),
        version: "test".into(),
    };
    let h = host.to_string();
    Member::start(cfg(e, host, ttl), record, move || HostSummary {
        host: h.clone(),
        at_unix_ms: unix_ms(),
        policy: "none".into(),
        link_util: 0.5,
        vms: vec![VmSummary {
            name: format!("{h}-vm"),
            tx_mbps: 100.0 * h.len() as f64,
            cpu_pct: 10.0,
            cap_pct: None,
            tx_share_mbps: None,
            tx_max_mbps: None,
            lat_p99_us: None,
            intf_pct: None,
            entitled_mbps: None,
            period: None,
        }],
    })
    .unwrap()
}

fn wait(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) -> Duration {
    let t = Instant::now();
    while !ok() {
        assert!(t.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    t.elapsed()
}

#[test]
fn hosts_register_under_leases_and_one_leads() {
    let Some(e) = etcd() else { return };
    let a = member(&e, "h1", 3);
    wait("h1 leads", Duration::from_secs(10), || a.state().leader);
    let b = member(&e, "host-two", 3);
    wait("h2 joins", Duration::from_secs(10), || b.state().connected);
    wait("summaries", Duration::from_secs(10), || {
        b.state().published >= 2
    });
    assert!(!b.state().leader);
    // A follower waits in the election for as long as the leader lives, in one session.
    std::thread::sleep(Duration::from_secs(4));
    let s = b.state();
    assert!(s.connected && !s.leader && s.sessions == 1, "{s:?}");
    let mut f = Fleet::connect(&FleetConfig::new(vec![e.url()])).unwrap();
    let s = f.status().unwrap();
    assert_eq!(s.leader.as_deref(), Some("h1"));
    let names: Vec<&str> = s.hosts.iter().map(|h| h.host.as_str()).collect();
    assert_eq!(names, ["h1", "host-two"]);
    for h in &s.hosts {
        assert_eq!(h.vms, 1, "{h:?}");
        assert_eq!(h.lease_granted_s, Some(3));
        assert!(h.lease_ttl_left_s.unwrap() > 0);
    }
    assert_eq!(s.top_aggressors[0].vm, "host-two-vm");
    assert_eq!(s.targets().len(), 2);
    // Leaving revokes the lease: the host is gone at once, and the other takes over.
    a.leave();
    let mut f2 = Fleet::connect(&FleetConfig::new(vec![e.url()])).unwrap();
    wait("h1 gone", Duration::from_secs(2), || {
        f2.status().unwrap().hosts.len() == 1
    });
    wait("host-two leads", Duration::from_secs(5), || {
        b.state().leader
    });
    b.leave();
}

#[test]
fn a_crashed_leader_is_replaced_within_two_ttls() {
    let Some(e) = etcd() else { return };
    let ttl = 2;
    let a = member(&e, "lead", ttl);
    wait("lead leads", Duration::from_secs(10), || a.state().leader);
    let b = member(&e, "next", ttl);
    wait("next joins", Duration::from_secs(10), || {
        b.state().connected
    });
    let crashed = Instant::now();
    a.crash();
    wait("next leads", Duration::from_secs(2 * 2 + 1), || {
        b.state().leader
    });
    let took = crashed.elapsed();
    eprintln!("new leader {took:?} after the crash (TTL {ttl} s)");
    assert!(took <= Duration::from_secs(2 * 2), "{took:?}");
}

#[test]
fn losing_etcd_drops_leadership_within_a_ttl_and_the_fleet_reforms() {
    let Some(mut e) = etcd() else { return };
    let ttl = 3;
    let a = member(&e, "solo", ttl);
    wait("solo leads", Duration::from_secs(10), || a.state().leader);
    let lost = Instant::now();
    e.kill();
    wait("fallback", Duration::from_secs(3 + 1), || {
        let s = a.state();
        !s.leader && !s.connected
    });
    eprintln!(
        "fallback {:?} after etcd stopped (TTL {ttl} s)",
        lost.elapsed()
    );
    assert!(lost.elapsed() <= Duration::from_secs(3));
    e.restart().unwrap();
    wait("re-formed", Duration::from_secs(15), || a.state().leader);
    assert!(a.state().sessions >= 2);
}

#[test]
fn no_etcd_is_one_clear_error() {
    let port = resex_fleet::local::free_port().unwrap();
    let cfg = FleetConfig {
        host: Some("h".into()),
        ..FleetConfig::new(vec![format!("http://127.0.0.1:{port}")])
    };
    let rec = HostRecord {
        host: "h".into(),
        pid: 1,
        started_unix_ms: 0,
        metrics: None,
        backend: String::new(),
        version: String::new(),
    };
    let err = Member::start(cfg, rec, || unreachable!())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("not reachable") && err.contains(&port.to_string()),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn the_view_reads_more_hosts_than_one_page() {
    let Some(e) = etcd() else { return };
    let n = 300; // more than resex_fleet::etcd::PAGE
    block_on(async {
        let mut c = etcd_client::Client::connect([e.url()], None).await.unwrap();
        for h in 0..n {
            let rec = HostRecord {
                host: format!("h{h:03}"),
                pid: 1,
                started_unix_ms: 0,
                metrics: None,
                backend: String::new(),
                version: String::new(),
            };
            let v = serde_json::to_vec(&rec).unwrap();
            c.put(format!("/resex/v1/hosts/{}", rec.host), v, None)
                .await
                .unwrap();
        }
        // A hostile value among them is listed as refused, not trusted.
        c.put("/resex/v1/hosts/zzz", "{not json", None)
            .await
            .unwrap();
    });
    let s = Fleet::connect(&FleetConfig::new(vec![e.url()]))
        .unwrap()
        .status()
        .unwrap();
    assert_eq!(s.hosts.len(), n);
    assert_eq!(s.hosts[299].host, "h299");
    assert_eq!(s.refused.len(), 1, "{:?}", s.refused);
}

#[test]
fn a_leader_whose_election_key_is_deleted_steps_down_and_campaigns_again() {
    let Some(e) = etcd() else { return };
    let a = member(&e, "h1", 3);
    wait("h1 leads", Duration::from_secs(10), || a.state().leader);
    block_on(async {
        let mut c = etcd_client::Client::connect([e.url()], None).await.unwrap();
        let opts = etcd_client::DeleteOptions::new().with_prefix();
        c.delete("/resex/v1/election", Some(opts)).await.unwrap();
    });
    // Noticed at the next keep-alive (TTL / 3), a new session, leading again.
    wait("a new session", Duration::from_secs(5), || {
        a.state().sessions >= 2
    });
    wait("h1 leads again", Duration::from_secs(5), || {
        a.state().leader
    });
}
