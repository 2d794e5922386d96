//! `resex fleet status|targets`: the fleet as etcd holds it (live hosts under their leases,
//! the coordinator, lease ages, VM counts, the top senders fleet-wide), and Prometheus
//! `file_sd` targets for every live host's `/metrics`. Needs a build with `--features fleet`.

use anyhow::Result;
use clap::{Args, Subcommand};

/// `resex fleet ...`
#[derive(Debug, Subcommand)]
pub enum FleetCommand {
    /// Hosts, leader, lease ages, per-host VM counts, top aggressors fleet-wide.
    Status(FleetArgs),
    /// Prometheus `file_sd` JSON for every live host's `/metrics`.
    Targets(FleetArgs),
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
    use super::{FleetArgs, FleetCommand};
    use anyhow::Result;
    use resex_fleet::etcd::Fleet;
    use resex_fleet::{FleetConfig, FleetStatus};

    fn status(a: &FleetArgs) -> Result<FleetStatus> {
        let cfg = FleetConfig {
            prefix: a.prefix.clone(),
            ..FleetConfig::new(a.endpoints.clone())
        };
        Ok(Fleet::connect(&cfg)?.status()?)
    }

    pub fn run(c: FleetCommand) -> Result<()> {
        match c {
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
            }
        }
        Ok(())
    }
}
