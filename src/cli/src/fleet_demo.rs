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
    #[arg(long, default_value_t = 3, conflicts_with = "jobs")]
    pub hosts: usize,
    /// The fleet lease's TTL, seconds (every etcd call waits a third of it).
    #[arg(long, default_value_t = 3)]
    pub ttl: i64,
    /// Print JSON only.
    #[arg(long)]
    pub json: bool,
    /// Periodic jobs instead: four hosts, two on each of two shared uplinks (one pair of jobs
    /// compatible, one not), run twice from scratch on one timeline, fair (the control) and
    /// with adaptive unfairness; each job's detected period and iteration times (about two
    /// minutes).
    #[arg(long)]
    pub jobs: bool,
    /// With --jobs: seconds each measurement window lasts (at least 11: the detector's history
    /// and a few of its verdicts).
    #[arg(long, default_value_t = 16.0, requires = "jobs")]
    pub window: f64,
    /// With --jobs: seconds from the jobs' start to the window, in each run (later if the
    /// periods are not yet found and both uplinks scored by then; the JSON's
    /// `window_after_start_s` says when each began).
    #[arg(long, default_value_t = 30.0, requires = "jobs")]
    pub settle: f64,
    /// With --jobs: the second run fair as well (a control: how far two fair runs differ);
    /// its iteration times stay under `adaptive_iter_ms`.
    #[arg(long, requires = "jobs")]
    pub fair_only: bool,
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
    if a.jobs {
        return jobs(a);
    }
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
    print(a.json, &r)
}

/// The shortest `--window`: the detector's history (8.2 s) and a verdict's age (up to 2 s),
/// with room for a few readings (the byte counts are read from before the window, so every
/// verdict read in it is compared; a shorter window holds few verdicts and rounds).
const MIN_WINDOW_S: f64 = 11.0;

/// `--jobs`: the periodic jobs, fair then adaptive.
fn jobs(a: &DemoArgs) -> Result<()> {
    if !(a.window.is_finite() && (MIN_WINDOW_S..=600.0).contains(&a.window)) {
        return Err(anyhow!(
            "--window {} must be {MIN_WINDOW_S} to 600 seconds (the detector's history, 8.2 s, \
             and a few of its verdicts)",
            a.window
        ));
    }
    if !(a.settle.is_finite() && (0.0..=600.0).contains(&a.settle)) {
        return Err(anyhow!("--settle {} must be 0 to 600 seconds", a.settle));
    }
    let o = resex_demo::fleet::jobs::JobsOptions {
        ttl: a.ttl,
        command: crate::host::guest_command()?,
        window_s: a.window,
        settle_s: a.settle,
        adaptive: !a.fair_only,
    };
    let r = resex_demo::fleet::jobs::run_jobs(&o, &mut Stderr { json: a.json }).map_err(
        |e| match e {
            DemoError::NoEtcd => anyhow!(
                "resex fleet demo needs the etcd binary: apt-get install etcd-server (Debian)"
            ),
            e => e.into(),
        },
    )?;
    print(a.json, &r)
}

/// The report on stdout: one line of JSON, or indented.
fn print(json: bool, r: &impl serde::Serialize) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string(r)?);
    } else {
        println!("{}", serde_json::to_string_pretty(r)?);
    }
    Ok(())
}
