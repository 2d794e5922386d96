//! `resex fleet status|targets|topology|demo`: the fleet as etcd holds it (live hosts under
//! their leases, the coordinator, lease ages, VM counts, the top senders fleet-wide, the last
//! allocation round), Prometheus `file_sd` targets for every live host's `/metrics`, the
//! topology the coordinator allocates over, and a whole fleet on this machine
//! (`crate::fleet_demo`, over `resex_demo::fleet`). Needs a build with `--features fleet`.

use anyhow::Result;
use clap::{Args, Subcommand};

/// `resex fleet ...`
#[derive(Debug, Subcommand)]
pub enum FleetCommand {
    /// Hosts, leader, lease ages, per-host VM counts, top aggressors fleet-wide.
    Status(FleetArgs),
    /// Prometheus `file_sd` JSON for every live host's `/metrics`.
    Targets(FleetArgs),
    /// The shared links the coordinator allocates over: `set FILE.toml` or `show`.
    Topology(TopologyArgs),
    /// A fleet on this machine: a local etcd, N embedded hosts with light guests on a shared
    /// uplink; the coordinator's host is killed midway and etcd near the end.
    Demo(DemoArgs),
    /// Where new training jobs should go: the hosts whose links they share most compatibly
    /// with the periodic jobs running now (JOBS.toml: `max_jobs_per_host`, `[[job]] name` and
    /// `preset`, or `compute_ms` and `bytes`; see docs/fleet.md).
    Place(PlaceArgs),
}

/// `resex fleet place`.
#[derive(Debug, Args)]
pub struct PlaceArgs {
    /// The new jobs (TOML).
    pub file: std::path::PathBuf,
    #[command(flatten)]
    pub fleet: FleetArgs,
}

/// `resex fleet topology`.
#[derive(Debug, Args)]
pub struct TopologyArgs {
    /// `set` (from FILE) or `show`.
    #[arg(value_parser = ["set", "show"])]
    pub action: String,
    /// The topology (TOML: `[[link]] name, capacity_mbps, hosts`; see docs/fleet.md).
    pub file: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub fleet: FleetArgs,
}

#[cfg(feature = "fleet")]
pub use crate::fleet_demo::DemoArgs;

/// `resex fleet demo` (a build without the fleet feature says so).
#[cfg(not(feature = "fleet"))]
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Hosts.
    #[arg(long, default_value_t = 3)]
    pub hosts: usize,
    /// Print JSON only.
    #[arg(long)]
    pub json: bool,
}

/// Where the fleet is.
#[derive(Debug, Args)]
pub struct FleetArgs {
    /// etcd's client URLs (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "http://127.0.0.1:2379")]
    pub endpoints: Vec<String>,
    /// The fleet's key prefix.
    #[arg(long, default_value = resex_fleet::keys::DEFAULT_PREFIX)]
    pub prefix: String,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// TLS: the CA of etcd's certificate (PEM; endpoints are then https://).
    #[arg(long, value_name = "PEM")]
    pub ca_file: Option<std::path::PathBuf>,
    /// TLS: a client certificate (PEM), with --key-file.
    #[arg(long, value_name = "PEM", requires = "key_file")]
    pub cert_file: Option<std::path::PathBuf>,
    /// TLS: the client certificate's key (PEM).
    #[arg(long, value_name = "PEM", requires = "cert_file")]
    pub key_file: Option<std::path::PathBuf>,
}

/// Runs it.
pub fn run(c: FleetCommand) -> Result<()> {
    imp::run(c)
}

#[cfg(not(feature = "fleet"))]
mod imp {
    use super::FleetCommand;
    use anyhow::{bail, Result};

    pub fn run(_: FleetCommand) -> Result<()> {
        bail!("{}", resex_fleet::connect_error())
    }
}

#[cfg(feature = "fleet")]
mod imp {
    use super::{FleetArgs, FleetCommand, PlaceArgs};
    use anyhow::{bail, Context, Result};
    use resex_fleet::etcd::Fleet;
    use resex_fleet::{FleetConfig, FleetStatus};

    fn connect(a: &FleetArgs) -> Result<Fleet> {
        let cfg = FleetConfig {
            prefix: a.prefix.clone(),
            ca_file: a.ca_file.clone(),
            cert_file: a.cert_file.clone(),
            key_file: a.key_file.clone(),
            ..FleetConfig::new(a.endpoints.clone())
        };
        Ok(Fleet::connect(&cfg)?)
    }

    fn status(a: &FleetArgs) -> Result<FleetStatus> {
        Ok(connect(a)?.status()?)
    }

    pub fn run(c: FleetCommand) -> Result<()> {
        match c {
            FleetCommand::Demo(a) => return crate::fleet_demo::run(&a),
            FleetCommand::Place(a) => return place(&a),
            FleetCommand::Topology(t) => {
                let mut f = connect(&t.fleet)?;
                if t.action == "set" {
                    let Some(path) = &t.file else {
                        bail!("resex fleet topology set FILE.toml");
                    };
                    let text = std::fs::read_to_string(path)
                        .with_context(|| format!("reading {}", path.display()))?;
                    let topo = resex_fleet::Topology::from_toml(&text)
                        .with_context(|| path.display().to_string())?;
                    f.set_topology(&topo)?;
                    println!(
                        "topology set: {} links over {} hosts",
                        topo.links.len(),
                        topo.paths().len()
                    );
                } else {
                    match f.topology()? {
                        Some(topo) => println!("{}", serde_json::to_string_pretty(&topo)?),
                        None => println!("no topology: the coordinator allocates nothing"),
                    }
                }
            }
            FleetCommand::Targets(a) => {
                println!("{}", serde_json::to_string_pretty(&status(&a)?.targets())?);
            }
            FleetCommand::Status(a) => {
                let s = status(&a)?;
                if a.json {
                    println!("{}", serde_json::to_string(&s)?);
                    return Ok(());
                }
                println!(
                    "fleet {}: {} live hosts, coordinator {}",
                    s.prefix,
                    s.hosts.len(),
                    s.leader.as_deref().unwrap_or("none")
                );
                println!(
                    "{:<20} {:>7} {:>9} {:>8} {:>5} {:>9} {:>6}  metrics",
                    "host", "pid", "lease s", "up s", "VMs", "tx Mb/s", "link"
                );
                for h in &s.hosts {
                    let lease = match (h.lease_ttl_left_s, h.lease_granted_s) {
                        (Some(l), Some(g)) => format!("{l}/{g}"),
                        _ => "-".into(),
                    };
                    println!(
                        "{:<20} {:>7} {:>9} {:>8.0} {:>5} {:>9.1} {:>5.0}%  {}{}",
                        h.host,
                        h.pid,
                        lease,
                        h.up_s,
                        h.vms,
                        h.tx_mbps,
                        h.link_util * 100.0,
                        h.metrics.as_deref().unwrap_or("-"),
                        if h.leader { "  (coordinator)" } else { "" }
                    );
                }
                if !s.top_aggressors.is_empty() {
                    println!("top senders fleet-wide:");
                    for t in &s.top_aggressors {
                        println!("  {:<20} {:<20} {:>9.1} Mb/s", t.host, t.vm, t.tx_mbps);
                    }
                }
                for r in &s.refused {
                    println!("refused: {r}");
                }
                // The round the view read (one read: the ceilings below are read after it).
                let (allocs, _) = connect(&a)?.allocations()?;
                let round = &s.round;
                match round {
                    Some(r) => println!(
                        "allocation round {}: {} hosts, {} VMs, {} congested links, {} ceilings \
                         ({} iterations{}), worst link at {:.0}%",
                        r.round,
                        r.hosts,
                        r.vms,
                        r.congested,
                        r.allocations,
                        r.iterations,
                        if r.converged { "" } else { ", not settled" },
                        r.max_overload * 100.0
                    ),
                    None => println!("no allocation round (no topology, or no coordinator)"),
                }
                for l in round.iter().flat_map(|r| &r.links) {
                    println!("  link {}", l.line());
                }
                if let Some(n) = round.as_ref().map(|r| r.links_left_out).filter(|n| *n > 0) {
                    println!("  and {n} more links with periodic jobs");
                }
                for al in allocs.iter().filter(|al| !al.vms.is_empty()) {
                    for v in &al.vms {
                        println!(
                            "  ceiling {:<20} {:<20} {:>9.1} Mb/s",
                            al.host, v.vm, v.max_mbps
                        );
                    }
                }
            }
        }
        Ok(())
    }

    /// `resex fleet place JOBS.toml`.
    fn place(a: &PlaceArgs) -> Result<()> {
        let text = std::fs::read_to_string(&a.file)
            .with_context(|| format!("reading {}", a.file.display()))?;
        let jobs: resex_fleet::advise::JobsFile =
            toml::from_str(&text).with_context(|| format!("parsing {}", a.file.display()))?;
        let mut f = connect(&a.fleet)?;
        let Some(topo) = f.topology()? else {
            bail!("no topology: set one first (resex fleet topology set FILE.toml)");
        };
        let summaries = f.summaries()?;
        let advice = resex_fleet::advise::advise(&topo, &summaries, &jobs)
            .with_context(|| a.file.display().to_string())?;
        if a.fleet.json {
            println!("{}", serde_json::to_string(&advice)?);
            return Ok(());
        }
        println!(
            "{} jobs over {} live hosts ({} links; at most {} periodic jobs a host)",
            advice.len(),
            summaries.len(),
            topo.links.len(),
            jobs.max_jobs_per_host
        );
        for j in &advice {
            match &j.host {
                Some(h) => {
                    let links: Vec<String> = j
                        .links
                        .iter()
                        .map(|(l, n, s)| format!("{l} {s:.2} with {n} jobs"))
                        .collect();
                    println!(
                        "  {:<20} -> {h:<20} compatibility {:.2} ({}; {} hosts with room)",
                        j.job,
                        j.score,
                        if links.is_empty() {
                            "crosses no shared link".to_owned()
                        } else {
                            links.join(", ")
                        },
                        j.candidates
                    );
                }
                None => println!("  {:<20} -> no live host has room", j.job),
            }
        }
        Ok(())
    }
}
