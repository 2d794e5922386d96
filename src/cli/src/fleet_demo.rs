//! `resex fleet demo`: its options, its progress lines on stderr, its report on stdout. The
//! demo itself (a local etcd, N embedded hosts with resexd on a shared uplink, the
//! coordinator's host killed, etcd killed) is `resex_demo::fleet`'s.

use anyhow::{anyhow, Result};
use resex_demo::fleet::{FleetOptions, Notes};
use resex_demo::DemoError;

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

/// The demo's lines on stderr (progress only without `--json`).
struct Stderr {
    json: bool,
}

impl Notes for Stderr {
    fn progress(&mut self, line: &str) {
        if !self.json {
            eprintln!("== fleet demo: {line}");
        }
    }

    fn warn(&mut self, line: &str) {
        eprintln!("{line}");
    }
}

/// Runs the demo and prints what it measured.
pub fn run(a: &DemoArgs) -> Result<()> {
    let o = FleetOptions {
        hosts: a.hosts,
        ttl: a.ttl,
        command: crate::host::guest_command()?,
    };
    let r = resex_demo::fleet::run(&o, &mut Stderr { json: a.json }).map_err(|e| match e {
        DemoError::Hosts { hosts, min, max } => {
            anyhow!("--hosts {hosts} must be {min} to {max} (they share this machine)")
        }
        DemoError::NoEtcd => {
            anyhow!("resex fleet demo needs the etcd binary: apt-get install etcd-server (Debian)")
        }
        e => e.into(),
    })?;
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        println!("{}", serde_json::to_string_pretty(&r)?);
    }
    Ok(())
}
