//! `resex fleet place` and the periodic jobs in `resex fleet status`, against the real etcd
//! with four hosts publishing summaries (two of them running a training job each). Needs
//! `--features fleet`; without etcd installed it says so and passes, unless
//! RESEX_REQUIRE_SYSTEM_DEPS=1 (CI).

#![cfg(feature = "fleet")]

use resex_fleet::etcd::{unix_ms, Fleet, Member};
use resex_fleet::local::LocalEtcd;
use resex_fleet::{FleetConfig, HostRecord, HostSummary, JobPeriod, Topology, VmSummary};
use std::process::Command;
use std::time::{Duration, Instant};

/// A host whose summary lists one VM, periodic (it needs `share` of a 1 000 Mb/s link for its
/// 200 ms iteration) or not.
fn member(e: &LocalEtcd, host: &str, share: Option<f64>) -> Member {
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
    let vm = VmSummary {
        name: format!("{host}-vm"),
        tx_mbps: 100.0,
        period: share.map(|s| JobPeriod {
            period_ms: 200.0,
            last_start_unix_ms: 1_790_000_000_020.0,
            bytes_per_period: s * 25e6,
            duty: 0.02,
            confidence: 0.9,
            latest_period_ms: None,
        }),
        ..VmSummary::default()
    };
    let h = host.to_string();
    Member::spawn_with(
        cfg,
        record,
        move || HostSummary {
            host: h.clone(),
            at_unix_ms: unix_ms(),
            policy: "none".into(),
            link_util: 0.1,
            vms: vec![vm.clone()],
        },
        |_| {},
    )
    .unwrap()
}

fn resex(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_resex"))
        .args(args)
        .env("RUST_LOG", "error")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn fleet_place_puts_a_job_where_it_fits_and_status_shows_the_links_jobs() {
    if !resex_fleet::local::installed_or_skip() {
        return;
    }
    let e = LocalEtcd::start().unwrap();
    let url = e.url();
    let dir = tempfile::tempdir().unwrap();
    let jobs = dir.path().join("jobs.toml");
    std::fs::write(
        &jobs,
        "[[job]]\nname = \"train-new\"\ncompute_ms = 100\nbytes = 12500000\n",
    )
    .unwrap();
    let place = [
        "fleet",
        "place",
        jobs.to_str().unwrap(),
        "--endpoints",
        &url,
    ];
    let (ok, _, err) = resex(&place);
    assert!(!ok && err.contains("no topology"), "{err}");
    let topo = Topology::from_toml(
        "[[link]]\nname = \"r1-up\"\ncapacity_mbps = 1000\nhosts = [\"a\", \"b\"]\n\
         [[link]]\nname = \"r2-up\"\ncapacity_mbps = 1000\nhosts = [\"c\", \"d\"]\n",
    )
    .unwrap();
    Fleet::connect(&FleetConfig::new(vec![url.clone()]))
        .unwrap()
        .set_topology(&topo)
        .unwrap();
    let _m = [
        member(&e, "a", Some(0.5)),
        member(&e, "b", None),
        member(&e, "c", Some(0.8)),
        member(&e, "d", None),
    ];
    // Every summary published, and a round that scored the links.
    let t = Instant::now();
    let status = loop {
        let (ok, out, err) = resex(&["fleet", "status", "--endpoints", &url]);
        assert!(ok, "{err}");
        if out.contains("link r1-up") && out.contains("link r2-up") && out.contains("4 live hosts")
        {
            break out;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "{out}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        status.contains("link r1-up: one periodic job: nothing to be compatible with; 1 periodic job (a/a-vm 200.0 ms)"),
        "{status}"
    );
    let (ok, out, err) = resex(&place);
    assert!(ok, "{err}");
    assert!(
        out.contains("train-new            -> b                    compatibility 1.00 (r1-up 1.00 with 2 jobs; 2 hosts with room)"),
        "{out}"
    );
    let mut json = place.to_vec();
    json.push("--json");
    let (ok, out, err) = resex(&json);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v[0]["host"], "b", "{v}");
    std::fs::write(&jobs, "[[job]]\nname = \"x\"\npreset = \"alexnet\"\n").unwrap();
    let (ok, _, err) = resex(&place);
    assert!(!ok && err.contains("unknown preset \"alexnet\""), "{err}");
}
