//! `resex demo`: the main job. An embedded host with the paper's pair (a 64 KiB reporting VM and
//! a 2 MiB interfering VM), the daemon, and four phases: `base` (the reporting VM alone),
//! `interfered` (both, no policy), `freemarket` and `ioshares`. Prints a live table (the
//! dashboard arrives with `resex top`) and, at the end, one line per phase.

use crate::host::{scenario_link, start_host};
use anyhow::{bail, Context, Result};
use clap::Args;
use resex_api::{Snapshot, VmSnap};
use resex_backend::local::LocalBackend;
use resex_embedded::cgroup::CapMode;
use resex_embedded::EmbeddedHost;
use resex_pricing::PolicyConfig;
use resex_scenario::Scenario;
use serde::Serialize;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SCENARIO: &str = include_str!("../../../tools/scenarios/paper-pair.toml");
const FREEMARKET: &str = include_str!("../../../policies/freemarket.toml");
const IOSHARES: &str = include_str!("../../../policies/ioshares.toml");
const VICTIM: &str = "reporting";
const INTERFERER: &str = "interfering";

/// Options of `resex demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// No live table: run the phases and print the results.
    #[arg(long)]
    pub headless: bool,
    /// Total seconds, split evenly between the four phases.
    #[arg(long, default_value_t = 40.0)]
    pub duration: f64,
    /// Print the results as JSON.
    #[arg(long)]
    pub json: bool,
    /// Cap mechanism: auto, cgroup-v2, cgroup-v1 or sigstop.
    #[arg(long, default_value = "auto")]
    pub caps: CapMode,
    /// Run directory (default: a fresh one under /tmp, removed at exit).
    #[arg(long)]
    pub run_dir: Option<PathBuf>,
    /// Copy each guest's log (agent, server, clients) into DIR when it stops.
    #[arg(long, value_name = "DIR")]
    pub keep_logs: Option<PathBuf>,
}

/// One phase's figures.
#[derive(Debug, Clone, Serialize)]
pub struct Phase {
    /// base, interfered, freemarket, ioshares.
    pub name: &'static str,
    /// The reporting VM's mean server latency over the phase, us (null when it reported
    /// nothing in the phase's measured part; the demo then says so on stderr).
    pub victim_mean_us: Option<f64>,
    /// The count-weighted mean of its reports' p99, us.
    pub victim_p99_us: Option<f64>,
    /// What the interfering VM sent, Mbit/s.
    pub interferer_mbps: f64,
    /// Its mean cap over the phase, percent of one CPU (100 x vCPUs when uncapped; null when it
    /// is not running).
    pub interferer_cap_mean: Option<f64>,
}

#[derive(Serialize)]
struct Output<'a> {
    phases: &'a [Phase],
}

fn vm<'a>(s: &'a Snapshot, name: &str) -> Option<&'a VmSnap> {
    s.vms.iter().find(|v| v.name == name)
}

fn wait_registered(
    d: &resex_daemon::DaemonHandle,
    host: &mut EmbeddedHost,
    name: &str,
    reports: bool,
) -> Result<()> {
    let start = Instant::now();
    loop {
        host.check()?;
        let s = d.snapshot();
        if let Some(v) = vm(&s, name) {
            if v.state == "registered" && (!reports || v.reports > 0) {
                return Ok(());
            }
        }
        if start.elapsed() > Duration::from_secs(20) {
            let log = host
                .guests()
                .iter()
                .find(|g| g.spec.name == name)
                .map(|g| {
                    g.record
                        .channel
                        .with_file_name(format!("{name}.log"))
                        .display()
                        .to_string()
                })
                .unwrap_or_default();
            bail!("guest `{name}` did not register (and report) within 20 s; its log: {log}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn row(s: &Snapshot) -> String {
    let mut out = String::new();
    for v in &s.vms {
        out.push_str(&format!(
            "  {:<12} cpu {:>5.1}%  cap {:>6}  MTU/s {:>8.0}  MB/s {:>7.1}  lat mean {:>8}  p99 {:>8}  rate {:>6}  bal {:>10}\n",
            v.name,
            v.cpu_pct,
            v.cap_pct.map_or("-".into(), |c| format!("{c:.0}%")),
            v.mtus_per_s,
            v.bytes_per_s / 1e6,
            v.lat_mean_us.map_or("-".into(), |x| format!("{x:.1}us")),
            v.lat_p99_us.map_or("-".into(), |x| format!("{x:.1}us")),
            v.rate.map_or("-".into(), |x| format!("{x:.2}")),
            v.balance.map_or("-".into(), |x| format!("{x:.0}")),
        ));
    }
    out
}

fn policy(text: &str) -> Result<PolicyConfig> {
    Ok(PolicyConfig::from_toml(text)?)
}

pub fn run(a: DemoArgs) -> Result<()> {
    if !(a.duration.is_finite() && a.duration >= 4.0) {
        bail!("--duration must be at least 4 seconds (one per phase)");
    }
    let scenario = Scenario::from_toml(SCENARIO).context("the built-in scenario")?;
    let spec = |n: &str| {
        scenario
            .guests
            .iter()
            .find(|g| g.name == n)
            .cloned()
            .context("the built-in scenario's guests")
    };
    let (victim, interferer) = (spec(VICTIM)?, spec(INTERFERER)?);
    let temp = a.run_dir.is_none();
    let run_dir = a
        .run_dir
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join(format!("resex-demo-{}", std::process::id())));
    let (mut host, stop) = start_host(&scenario, &run_dir, a.caps, a.keep_logs.clone())?;
    let cfg = resex_daemon::config::Config {
        run_dir: Some(run_dir.clone()),
        state_dir: Some(run_dir.join("state")),
        api_socket: Some(run_dir.join("resexd.sock")),
        realtime: std::env::var_os("RESEX_NO_RT").is_none(),
        link: Some(scenario_link(&scenario)),
        ..Default::default()
    };
    let d = resex_daemon::start(
        resex_daemon::Settings {
            cfg,
            policy: None,
            limits: Default::default(),
        },
        Arc::new(LocalBackend::new(&run_dir)),
    )?;
    // On a terminal the dashboard shows the run; elsewhere (or with --headless) a plain table.
    let dashboard = !a.headless && std::io::stdout().is_terminal();
    if !a.headless {
        println!(
            "resex demo: embedded host {}, daemon API {}",
            host.host_id,
            run_dir.join("resexd.sock").display()
        );
    }
    let done = Arc::new(AtomicBool::new(false));
    let top = if dashboard {
        let opts = resex_top::term::TopOptions {
            socket: run_dir.join("resexd.sock"),
            interval: Duration::from_millis(250),
            points: 4 * 600,
            until: Some(done.clone()),
        };
        let stop = stop.clone();
        Some(std::thread::spawn(move || {
            let r = resex_top::term::run(&opts);
            // Quitting the dashboard ends the demo.
            if !matches!(r, Ok(resex_top::term::Ended::Done)) {
                stop.store(true, Ordering::Release);
            }
            r
        }))
    } else {
        None
    };
    let result = phases(
        &a,
        !a.headless && !dashboard,
        &mut host,
        &d,
        &victim,
        &interferer,
        &stop,
    );
    done.store(true, Ordering::Release);
    if let Some(t) = top {
        match t.join() {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => eprintln!("resex demo: the dashboard failed: {e}"),
            Err(_) => eprintln!("resex demo: the dashboard panicked"),
        }
    }
    let summary = d.stop();
    host.stop();
    if temp {
        let _ = std::fs::remove_dir_all(&run_dir);
    }
    let phases = result?;
    if a.json {
        println!("{}", serde_json::to_string(&Output { phases: &phases })?);
    } else {
        println!("\nphase         victim mean   victim p99   interferer Mb/s   interferer cap");
        for p in &phases {
            println!(
                "{:<12} {:>12} {:>12} {:>17.0} {:>16}",
                p.name,
                p.victim_mean_us.map_or("-".into(), |x| format!("{x:.1}us")),
                p.victim_p99_us.map_or("-".into(), |x| format!("{x:.1}us")),
                p.interferer_mbps,
                p.interferer_cap_mean
                    .map_or("-".into(), |c| format!("{c:.0}%"))
            );
        }
        println!(
            "daemon: {} ticks of 1 ms; lateness p50 {:.0} us, p99 {:.0} us, max {:.0} us; caps restored at exit",
            summary.ticks, summary.late_p50_us, summary.late_p99_us, summary.late_max_us
        );
    }
    Ok(())
}

/// A phase: its name, its policy (name, file text), whether the interferer runs.
type PhasePlan = (&'static str, Option<(&'static str, &'static str)>, bool);

fn phases(
    a: &DemoArgs,
    live_table: bool,
    host: &mut EmbeddedHost,
    d: &resex_daemon::DaemonHandle,
    victim: &resex_scenario::GuestSpec,
    interferer: &resex_scenario::GuestSpec,
    stop: &AtomicBool,
) -> Result<Vec<Phase>> {
    let secs = a.duration / 4.0;
    let settle = (secs * 0.25).min(2.0);
    host.start_guest(victim)?;
    wait_registered(d, host, VICTIM, true)?;
    let plan: [PhasePlan; 4] = [
        ("base", None, false),
        ("interfered", None, true),
        ("freemarket", Some(("freemarket", FREEMARKET)), true),
        ("ioshares", Some(("ioshares", IOSHARES)), true),
    ];
    let mut out = Vec::new();
    for (name, pol, with_interferer) in plan {
        if with_interferer && !host.guests().iter().any(|g| g.spec.name == INTERFERER) {
            host.start_guest(interferer)?;
            wait_registered(d, host, INTERFERER, false)?;
        }
        d.reload(match pol {
            Some((n, text)) => Some((n.to_owned(), policy(text)?)),
            None => None,
        });
        if live_table {
            println!("phase {name}: {secs:.0} s");
        }
        let t0 = Instant::now();
        let mut s0 = None;
        let mut caps = Vec::new();
        let mut last_print = Instant::now();
        while t0.elapsed().as_secs_f64() < secs {
            if stop.load(Ordering::Acquire) {
                bail!("interrupted");
            }
            host.check()?;
            std::thread::sleep(Duration::from_millis(100));
            let s = d.snapshot();
            if t0.elapsed().as_secs_f64() >= settle {
                if s0.is_none() {
                    s0 = Some((s.clone(), Instant::now()));
                }
                if let Some(v) = vm(&s, INTERFERER) {
                    caps.push(v.cap_pct.unwrap_or(100.0 * f64::from(v.vcpus)));
                }
            }
            if live_table && last_print.elapsed() >= Duration::from_secs(1) {
                last_print = Instant::now();
                print!("{}", row(&s));
            }
        }
        let s1 = d.snapshot();
        let (s0, at) = s0.context("phase too short to measure")?;
        let dt = at.elapsed().as_secs_f64().max(1e-3);
        let (v0, v1) = (vm(&s0, VICTIM), vm(&s1, VICTIM));
        let (mean, p99) = match (v0, v1) {
            (Some(a0), Some(a1)) if a1.lat_requests_total > a0.lat_requests_total => {
                let n = (a1.lat_requests_total - a0.lat_requests_total) as f64;
                (
                    Some((a1.lat_sum_us - a0.lat_sum_us) / n),
                    Some((a1.lat_p99_sum_us - a0.lat_p99_sum_us) / n),
                )
            }
            _ => {
                eprintln!(
                    "resex demo: warning: the reporting VM sent no latency reports during phase {name}"
                );
                (None, None)
            }
        };
        let mbps = match (vm(&s0, INTERFERER), vm(&s1, INTERFERER)) {
            (Some(i0), Some(i1)) => {
                i1.tx_bytes_total.saturating_sub(i0.tx_bytes_total) as f64 * 8.0 / dt / 1e6
            }
            _ => 0.0,
        };
        let cap_mean = (!caps.is_empty()).then(|| caps.iter().sum::<f64>() / caps.len() as f64);
        out.push(Phase {
            name,
            victim_mean_us: mean,
            victim_p99_us: p99,
            interferer_mbps: mbps,
            interferer_cap_mean: cap_mean,
        });
    }
    Ok(out)
}
