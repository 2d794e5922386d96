//! The coordinator's DRUM round through the real etcd: a topology, three hosts whose bulk VMs
//! overload one uplink, allocations read back by every host, a hostile allocation refused, and
//! every ceiling lifted when etcd is lost. Without etcd installed these tests say so and pass,
//! unless RESEX_REQUIRE_SYSTEM_DEPS=1 (CI), where they fail.

#![cfg(feature = "etcd")]

use resex_fleet::etcd::{unix_ms, Fleet, Member};
use resex_fleet::local::{block_on, LocalEtcd};
use resex_fleet::{FleetConfig, HostRecord, HostSummary, JobPeriod, Topology, VmSummary};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn etcd() -> Option<LocalEtcd> {
    resex_fleet::local::installed_or_skip().then(|| LocalEtcd::start().unwrap())
}

/// A VM's summary: its rate, and whether it reports latency.
fn vm(name: &str, tx_mbps: f64, reporting: bool) -> VmSummary {
    VmSummary {
        name: name.into(),
        tx_mbps,
        cpu_pct: 10.0,
        cap_pct: None,
        tx_share_mbps: None,
        tx_max_mbps: None,
        lat_p99_us: reporting.then_some(40.0),
        intf_pct: None,
        entitled_mbps: None,
        period: None,
    }
}

/// Writes (or with `None` deletes) a key directly, as another tool on the same etcd would.
fn raw(e: &LocalEtcd, key: &str, value: Option<&str>) {
    block_on(async {
        let mut c = etcd_client::Client::connect([e.url()], None).await.unwrap();
        match value {
            Some(v) => c.put(key, v, None).await.map(drop),
            None => c.delete(key, None).await.map(drop),
        }
        .unwrap();
    });
}

fn wait(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) -> Duration {
    let t = Instant::now();
    while !ok() {
        assert!(t.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    t.elapsed()
}

/// What a host's daemon was told last: its ceilings by VM (None: lifted).
type Told = Arc<Mutex<Vec<Option<Vec<(String, u64)>>>>>;

fn member(e: &LocalEtcd, host: &str, vms: &[(&str, f64, bool)]) -> (Member, Told) {
    let vms: Vec<VmSummary> = vms.iter().map(|&(n, tx, r)| vm(n, tx, r)).collect();
    member_with(e, host, vms)
}

fn member_with(e: &LocalEtcd, host: &str, vms: Vec<VmSummary>) -> (Member, Told) {
    let cfg = FleetConfig {
        host: Some(host.into()),
        ttl_s: 2,
        publish_ms: 200,
        ..FleetConfig::new(vec![e.url()])
    };
    let record = HostRecord {
        host: host.into(),
        pid: std::process::id(),
        started_unix_ms: unix_ms(),
        metrics: None,
        backend: "local".into(),
        version: "test".into(),
    };
    let h = host.to_string();
    let told: Told = Arc::default();
    let t = told.clone();
    let m = Member::spawn_with(
        cfg,
        record,
        move || HostSummary {
            host: h.clone(),
            at_unix_ms: unix_ms(),
            policy: "none".into(),
            link_util: 0.9,
            vms: vms.clone(),
        },
        move |a| {
            t.lock()
                .unwrap()
                .push(a.map(resex_fleet::Allocation::ceilings_bps));
        },
    )
    .unwrap();
    (m, told)
}

fn last(t: &Told) -> Option<Option<Vec<(String, u64)>>> {
    t.lock().unwrap().last().cloned()
}

#[test]
fn the_coordinator_allocates_an_overloaded_uplink_and_a_lost_fleet_lifts_it() {
    let Some(mut e) = etcd() else { return };
    let mut f = Fleet::connect(&FleetConfig::new(vec![e.url()])).unwrap();
    let topo = Topology::from_toml(
        "valid_s = 3\n[[link]]\nname = \"tor-up\"\ncapacity_mbps = 1000\nhosts = [\"n1\", \"n2\"]\n",
    )
    .unwrap();
    f.set_topology(&topo).unwrap();
    assert_eq!(f.topology().unwrap().as_ref(), Some(&topo));
    let (a, ta) = member(&e, "n1", &[("a-bulk", 900.0, false), ("a-rpc", 20.0, true)]);
    let (b, tb) = member(&e, "n2", &[("b-bulk", 900.0, false)]);
    // n3 crosses no shared link: no allocation.
    let (c, tc) = member(&e, "n3", &[("c-bulk", 5000.0, false)]);
    wait("a leader", Duration::from_secs(10), || {
        a.state().leader || b.state().leader || c.state().leader
    });
    let got = |t: &Told, vm: &str| -> Option<f64> {
        last(t)
            .flatten()?
            .into_iter()
            .find(|(n, _)| n == vm)
            .map(|(_, bps)| bps as f64 / 1e6)
    };
    // A round that ran before n2's first summary gives n1 the whole uplink; each host reads
    // its allocation in its own period, so wait for a round that saw both.
    let near = |x: Option<f64>, want: f64, tol: f64| x.is_some_and(|x| (x - want).abs() < tol);
    wait(
        "allocations on n1 and n2 from one round",
        Duration::from_secs(10),
        || near(got(&tb, "b-bulk"), 488.0, 3.0) && near(got(&ta, "a-bulk"), 488.0, 3.0),
    );
    let got = |t: &Told, vm: &str| got(t, vm).unwrap();
    // The reporting VM keeps what it asked (20 x 1.2); the bulk VMs split the rest.
    assert!((got(&ta, "a-rpc") - 24.0).abs() < 0.5, "{:?}", last(&ta));
    assert!((got(&ta, "a-bulk") - 488.0).abs() < 3.0, "{:?}", last(&ta));
    assert!((got(&tb, "b-bulk") - 488.0).abs() < 3.0, "{:?}", last(&tb));
    assert!(last(&tc).is_none(), "n3 crosses no shared link");
    let (allocs, round) = f.allocations().unwrap();
    assert_eq!(allocs.len(), 2);
    let round = round.unwrap();
    assert_eq!(
        (round.hosts, round.vms, round.congested),
        (2, 3, 1),
        "{round:?}"
    );
    let leader = [&a, &b, &c].into_iter().find(|m| m.state().leader).unwrap();
    let s = leader.state();
    assert!(s.rounds >= 1 && s.round_allocations == 3, "{s:?}");
    eprintln!("round: {} us, solve {} us", s.round_us, s.solve_us);
    // The admin removes the topology: the coordinator withdraws every allocation and the
    // hosts lift their ceilings; set again, they come back.
    raw(&e, "/resex/v1/topology", None);
    wait("withdrawn", Duration::from_secs(5), || {
        matches!(last(&ta), Some(None)) && matches!(last(&tb), Some(None))
    });
    assert!(f.allocations().unwrap().0.is_empty());
    f.set_topology(&topo).unwrap();
    wait("allocated again", Duration::from_secs(5), || {
        matches!(last(&ta), Some(Some(_))) && matches!(last(&tb), Some(Some(_)))
    });
    // etcd lost: every host lifts what the fleet set, within one TTL (2 s).
    let lost = Instant::now();
    e.kill();
    wait("n1 and n2 lift", Duration::from_secs(2), || {
        matches!(last(&ta), Some(None)) && matches!(last(&tb), Some(None))
    });
    eprintln!("ceilings lifted {:?} after etcd stopped", lost.elapsed());
    assert_eq!(a.state().ceilings, 0);
}

#[test]
fn a_hostile_allocation_is_refused_and_lifts_nothing_it_should_not() {
    let Some(e) = etcd() else { return };
    let (a, ta) = member(&e, "solo", &[("v", 10.0, false)]);
    wait("solo leads", Duration::from_secs(10), || a.state().leader);
    // No topology: the coordinator allocates nothing (and says nothing each round).
    std::thread::sleep(Duration::from_millis(600));
    assert!(last(&ta).is_none());
    assert_eq!(a.state().rounds, 0);
    // Somebody writes garbage where the host's allocation lives: refused, nothing applied.
    raw(
        &e,
        "/resex/v1/alloc/solo",
        Some(
            r#"{"host":"solo","coordinator":"x","round":1,"at_unix_ms":0,"valid_ms":1000,"vms":[{"vm":"v","max_mbps":-5}]}"#,
        ),
    );
    std::thread::sleep(Duration::from_millis(600));
    assert!(last(&ta).is_none(), "{:?}", last(&ta));
    assert!(a.state().connected, "a bad value does not drop the session");
    // A well-formed allocation left over from long ago is not applied anew.
    raw(
        &e,
        "/resex/v1/alloc/solo",
        Some(
            r#"{"host":"solo","coordinator":"x","round":9,"at_unix_ms":1000,"valid_ms":5000,"vms":[{"vm":"v","max_mbps":5}]}"#,
        ),
    );
    std::thread::sleep(Duration::from_millis(600));
    assert!(last(&ta).is_none(), "{:?}", last(&ta));
    // A fresh one (a coordinator that then hangs: no newer round) is applied, and once its
    // valid_ms pass with nothing newer the view stops counting its ceilings, as the core
    // lets them lapse.
    let fresh = format!(
        r#"{{"host":"solo","coordinator":"x","round":10,"at_unix_ms":{},"valid_ms":800,"vms":[{{"vm":"v","max_mbps":5}}]}}"#,
        unix_ms()
    );
    raw(&e, "/resex/v1/alloc/solo", Some(&fresh));
    wait("applied", Duration::from_secs(3), || {
        matches!(last(&ta), Some(Some(_))) && a.state().ceilings == 1
    });
    wait("lapsed in the view", Duration::from_secs(3), || {
        a.state().ceilings == 0
    });
    // Lapsed, not lifted: the daemon was told nothing new (its core lets the ceilings lapse).
    assert!(matches!(last(&ta), Some(Some(_))), "{:?}", last(&ta));
}

#[test]
fn a_deposed_coordinators_writes_are_refused() {
    let Some(e) = etcd() else { return };
    let cfg = FleetConfig::new(vec![e.url()]);
    let p = cfg.prefix.clone();
    let mut f = Fleet::connect(&cfg).unwrap();
    let topo = Topology::from_toml(
        "[[link]]\nname = \"up\"\ncapacity_mbps = 1000\nhosts = [\"n1\", \"n2\"]\n",
    )
    .unwrap();
    f.set_topology(&topo).unwrap();
    block_on(async {
        let mut c = etcd_client::Client::connect([e.url()], None).await.unwrap();
        for h in ["n1", "n2"] {
            let s = HostSummary {
                host: h.into(),
                at_unix_ms: unix_ms(),
                policy: "none".into(),
                link_util: 0.9,
                vms: vec![vm(&format!("{h}-bulk"), 900.0, false)],
            };
            let v = serde_json::to_vec(&s).unwrap();
            c.put(resex_fleet::keys::summary(&p, h), v, None)
                .await
                .unwrap();
        }
        let lease = c.lease_grant(30, None).await.unwrap().id();
        let won = c
            .election_client()
            .campaign(resex_fleet::keys::election(&p), "n1", lease)
            .await
            .unwrap();
        let key = won.leader().unwrap().key().to_vec();
        let mut st = resex_fleet::coord::CoordState::default();
        st.fence = Some((key.clone(), won.leader().unwrap().rev()));
        use resex_fleet::coord::coordinate;
        // Elected: the round's allocations are written.
        let r = coordinate(&mut c, &cfg, "n1", lease, &mut st, unix_ms())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(r.report.allocations, 2);
        let n1 = resex_fleet::keys::alloc(&p, "n1");
        let before = c.get(n1.as_str(), None).await.unwrap().kvs()[0].mod_revision();
        // Deposed (its election key deleted, as an admin or a lost lease would): the next
        // round's writes are refused, and nothing it wrote changes.
        c.delete(key, None).await.unwrap();
        let err = coordinate(&mut c, &cfg, "n1", lease, &mut st, unix_ms())
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("no longer holds the election"), "{err}");
        let after = c.get(n1.as_str(), None).await.unwrap().kvs()[0].mod_revision();
        assert_eq!(before, after);
    });
}

#[test]
fn periodic_jobs_on_a_shared_link_are_scored_and_the_score_published() {
    let Some(e) = etcd() else { return };
    let mut f = Fleet::connect(&FleetConfig::new(vec![e.url()])).unwrap();
    let topo = Topology::from_toml(
        "[[link]]\nname = \"tor-up\"\ncapacity_mbps = 1000\nhosts = [\"n1\", \"n2\"]\n",
    )
    .unwrap();
    f.set_topology(&topo).unwrap();
    // Two training jobs, each needing the whole uplink for a quarter of its 200 ms, both
    // starting now at the same instant of their period.
    let job = |name: &str| VmSummary {
        period: Some(JobPeriod {
            period_ms: 200.0,
            last_start_unix_ms: 1_790_000_000_040.0,
            bytes_per_period: 0.25 * 125e6 * 0.2,
            duty: 0.02,
            confidence: 0.9,
            latest_period_ms: None,
        }),
        ..vm(name, 250.0, false)
    };
    let (a, _) = member_with(&e, "n1", vec![job("train-a")]);
    let (b, _) = member_with(&e, "n2", vec![job("train-b"), vm("web", 5.0, true)]);
    let mut scored = || {
        f.status()
            .ok()
            .and_then(|s| s.round)
            .and_then(|r| r.links.into_iter().next())
            .filter(|l| l.jobs.len() == 2)
    };
    wait("the uplink's jobs scored", Duration::from_secs(10), || {
        scored().is_some()
    });
    let l = scored().unwrap();
    assert_eq!(l.link, "tor-up");
    assert!(l.score.unwrap() > 0.99, "{l:?}");
    assert!((l.score_as_given.unwrap() - 0.5).abs() < 0.02, "{l:?}");
    let mut vms: Vec<&str> = l.jobs.iter().map(|j| j.vm.as_str()).collect();
    vms.sort_unstable();
    assert_eq!(vms, ["train-a", "train-b"], "the web VM is not periodic");
    drop((a, b));
}
