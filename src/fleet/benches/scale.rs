//! The fleet's etcd load at scale (issue 22, item 6, the part that exists): N simulated hosts
//! each grant a lease and write their record and a 64-VM summary into the real etcd (a local
//! one, the installed binary), then one read round of what a coordinator reads every period:
//! every summary (`get --prefix`) parsed into the fleet view, and the coordinator's whole DRUM
//! round (topology and summaries read, the allocation solved, one allocation per host written
//! in transactions). Prints the write rate, the bytes held and both round times for 100 and
//! 1000 hosts. The topology: racks of 20 hosts, each rack's uplink at half its VMs' demand, one
//! spine under all of them (two links on every host's path).
//! `cargo bench -p resex-fleet --features etcd --bench scale [-- HOSTS,HOSTS VMS]`

use resex_fleet::etcd::{unix_ms, Fleet};
use resex_fleet::local::LocalEtcd;
use resex_fleet::{keys, FleetConfig, HostRecord, HostSummary, VmSummary};
use std::time::Instant;

fn summary(h: usize, vms: usize) -> HostSummary {
    HostSummary {
        host: format!("h{h}"),
        at_unix_ms: unix_ms(),
        policy: "governor".into(),
        link_util: 0.5,
        vms: (0..vms)
            .map(|v| VmSummary {
                name: format!("h{h}-vm{v}"),
                tx_mbps: ((h * 7 + v * 13) % 1000) as f64,
                cpu_pct: 50.0,
                cap_pct: Some(80.0),
                tx_share_mbps: Some(1000.0),
                tx_max_mbps: None,
                lat_p99_us: Some(120.0),
                intf_pct: Some(3.0),
                entitled_mbps: None,
                period: None,
            })
            .collect(),
    }
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let sizes: Vec<usize> = args.first().map_or_else(
        || vec![100, 1000],
        |s| s.split(',').filter_map(|x| x.parse().ok()).collect(),
    );
    let vms: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(64);
    let etcd = match LocalEtcd::start() {
        Ok(e) => e,
        Err(e) => {
            println!("fleet scale: {e}");
            return;
        }
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for &n in &sizes {
        let prefix = format!("/bench{n}");
        let cfg = FleetConfig {
            prefix: prefix.clone(),
            ..FleetConfig::new(vec![etcd.url()])
        };
        let t = Instant::now();
        let bytes = rt.block_on(async {
            let mut c = etcd_client::Client::connect([etcd.url()], None)
                .await
                .unwrap();
            let mut bytes = 0usize;
            for h in 0..n {
                let lease = c.lease_grant(60, None).await.unwrap().id();
                let opts = || Some(etcd_client::PutOptions::new().with_lease(lease));
                let rec = HostRecord {
                    host: format!("h{h}"),
                    pid: 1,
                    started_unix_ms: unix_ms(),
                    metrics: Some(format!("10.0.{}.{}:9464", h / 250, h % 250)),
                    backend: "kvm".into(),
                    version: "bench".into(),
                };
                let r = serde_json::to_vec(&rec).unwrap();
                let s = serde_json::to_vec(&summary(h, vms)).unwrap();
                bytes += r.len() + s.len();
                c.put(keys::host(&prefix, &rec.host), r, opts())
                    .await
                    .unwrap();
                c.put(keys::summary(&prefix, &rec.host), s, opts())
                    .await
                    .unwrap();
            }
            bytes
        });
        let write = t.elapsed().as_secs_f64();
        let mut f = Fleet::connect(&cfg).unwrap();
        let mut rounds = Vec::new();
        for _ in 0..5 {
            let t = Instant::now();
            let s = f.status().unwrap();
            rounds.push(t.elapsed().as_secs_f64());
            assert_eq!(s.hosts.len(), n);
        }
        rounds.sort_by(f64::total_cmp);
        // The coordinator's DRUM round over racks of 20 hosts and a spine.
        let racks = n.div_ceil(20);
        let mut topo = String::from("[[link]]\nname = \"spine\"\ncapacity_mbps = ");
        topo.push_str(&format!("{}\nhosts = [", 4000 * n));
        topo.push_str(
            &(0..n)
                .map(|h| format!("\"h{h}\""))
                .collect::<Vec<_>>()
                .join(","),
        );
        topo.push_str("]\n");
        for r in 0..racks {
            let hosts: Vec<String> = (r * 20..((r + 1) * 20).min(n))
                .map(|h| format!("\"h{h}\""))
                .collect();
            topo.push_str(&format!(
                "[[link]]\nname = \"rack{r}\"\ncapacity_mbps = {}\nhosts = [{}]\n",
                hosts.len() as f64 * vms as f64 * 250.0,
                hosts.join(",")
            ));
        }
        let topo = resex_fleet::Topology::from_toml(&topo).unwrap();
        f.set_topology(&topo).unwrap();
        let mut coord = Vec::new();
        let mut last = None;
        let mut first_iters = 0;
        rt.block_on(async {
            let mut c = etcd_client::Client::connect([etcd.url()], None)
                .await
                .unwrap();
            let lease = c.lease_grant(60, None).await.unwrap().id();
            let mut st = resex_fleet::coord::CoordState::default();
            for _ in 0..5 {
                let r =
                    resex_fleet::coord::coordinate(&mut c, &cfg, "h0", lease, &mut st, unix_ms())
                        .await
                        .unwrap()
                        .unwrap();
                coord.push((r.took.as_secs_f64(), r.solve.as_secs_f64()));
                if first_iters == 0 {
                    first_iters = r.report.iterations;
                }
                last = Some(r.report);
            }
        });
        let (cold, cold_iters) = (coord[0], first_iters);
        coord.sort_by(|a, b| a.0.total_cmp(&b.0));
        let rep = last.unwrap();
        println!(
            "fleet scale: {n} hosts x {vms} VMs: the coordinator's DRUM round ({} links, {} VMs, \
             {} ceilings): cold {:.3} s (solve {:.4} s, {cold_iters} iterations), warm median \
             {:.3} s (solve {:.4} s, {} iterations{}), max {:.3} s",
            topo.links.len(),
            rep.vms,
            rep.allocations,
            cold.0,
            cold.1,
            coord[2].0,
            coord[2].1,
            rep.iterations,
            if rep.converged { "" } else { ", not settled" },
            coord[4].0
        );
        println!(
            "fleet scale: {n} hosts x {vms} VMs: {} puts + {n} leases in {write:.2} s \
             ({:.0} writes/s, one at a time), {:.1} MB held; a read round (every record, \
             summary and lease TTL, parsed into the view): min {:.3} s, median {:.3} s",
            2 * n,
            (3 * n) as f64 / write,
            bytes as f64 / 1e6,
            rounds[0],
            rounds[2]
        );
    }
}
