//! The demo's real-time run: an embedded host (softhca, real guest processes), resexd on it,
//! and the four phases; each phase watched for the host's own health.

use super::health::PhaseWatch;
use super::{DemoArgs, Phase, Plan, INTERFERER, VICTIM};
use crate::host::{host_config, scenario_link, start_host};
use anyhow::{bail, Context, Result};
use resex_api::{Snapshot, VmSnap};
use resex_backend::local::LocalBackend;
use resex_embedded::EmbeddedHost;
use resex_scenario::Scenario;
use serde::Serialize;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The whole run's host figures.
#[derive(Debug, Clone, Serialize)]
pub struct HostReport {
    /// What softhca's port thread runs at.
    pub softhca_priority: String,
    /// What the daemon's control loop runs at.
    pub loop_priority: String,
    /// Seconds in which softhca was held up 20 ms or more, of `hca_watched_s`.
    pub hca_stalled_s: u64,
    /// Seconds softhca watched.
    pub hca_watched_s: u64,
    /// Its longest hold-up, ms.
    pub hca_longest_ms: f64,
    /// CPU its port thread used over the run, percent of one CPU (null: `/proc` could not say).
    pub hca_cpu_pct: Option<f64>,
    /// Its wake-ups per second over the run.
    pub hca_wakeups_per_s: f64,
    /// The daemon's ticks.
    pub ticks: u64,
    /// Their lateness over the run, us: p50, p99, max.
    pub tick_late_p50_us: f64,
    /// p99.
    pub tick_late_p99_us: f64,
    /// max.
    pub tick_late_max_us: f64,
}

impl HostReport {
    /// One line.
    pub fn line(&self) -> String {
        format!(
            "host: daemon {} ticks of 1 ms, late p50 {:.0} us, p99 {:.0} us, max {:.0} us ({}); \
             softhca ({}) used {} of a CPU ({:.0} wake-ups/s), held up 20 ms or more in {} of \
             {} s, longest {:.1} ms; caps restored",
            self.ticks,
            self.tick_late_p50_us,
            self.tick_late_p99_us,
            self.tick_late_max_us,
            self.loop_priority,
            self.softhca_priority,
            self.hca_cpu_pct.map_or("?".into(), |c| format!("{c:.1}%")),
            self.hca_wakeups_per_s,
            self.hca_stalled_s,
            self.hca_watched_s,
            self.hca_longest_ms,
        )
    }
}

/// A real-time run's results.
pub struct LiveRun {
    /// The phases.
    pub phases: Vec<Phase>,
    /// The host.
    pub host: HostReport,
}

fn vm<'a>(s: &'a Snapshot, name: &str) -> Option<&'a VmSnap> {
    s.vms.iter().find(|v| v.name == name)
}

/// How long a guest may take to register before the demo gives up on it.
const REGISTER_WITHIN: Duration = Duration::from_secs(60);

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
        // Generous: on a loaded 2-CPU machine a guest's start can wait behind everything else;
        // a guest that never registers still fails here, with the end of its log.
        if start.elapsed() > REGISTER_WITHIN {
            let log = host
                .guests()
                .iter()
                .find(|g| g.spec.name == name)
                .map(|g| g.record.channel.with_file_name(format!("{name}.log")))
                .unwrap_or_default();
            let tail = std::fs::read_to_string(&log)
                .map(|t| {
                    let lines: Vec<&str> = t.lines().collect();
                    lines[lines.len().saturating_sub(5)..].join("\n")
                })
                .unwrap_or_else(|e| format!("(unreadable: {e})"));
            bail!(
                "guest `{name}` did not register (and report) within {} s; its log {}:\n{tail}",
                REGISTER_WITHIN.as_secs(),
                log.display()
            );
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

/// Waits (a second at most) for both time-critical threads to say what priority they got.
fn priorities(
    host: &EmbeddedHost,
    d: &resex_daemon::DaemonHandle,
    asked: bool,
) -> (String, String) {
    let start = Instant::now();
    loop {
        let hca = host.hca_priority();
        let lp = d.snapshot().host.loop_priority.clone();
        if ((hca.is_some() || !asked) && !lp.is_empty()) || start.elapsed() > Duration::from_secs(1)
        {
            let hca = match hca {
                Some(p) if host.has_port_group() => format!("{p}, {}", host.port_group()),
                Some(p) => p.to_string(),
                None if asked => "normal priority (the thread did not say)".to_owned(),
                None => "normal priority (not asked for: RESEX_NO_RT)".to_owned(),
            };
            return (hca, lp);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

pub fn run(
    a: &DemoArgs,
    scenario: &Scenario,
    plan: &Plan,
    secs: f64,
    settle: f64,
) -> Result<LiveRun> {
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
    let rt = std::env::var_os("RESEX_NO_RT").is_none();
    if rt {
        // Every thread of the host side (the daemon's samplers and actuators, softhca's
        // control threads) inherits nice -10 from here: a lock one of them holds must not wait
        // behind the guests or a CPU hog while a real-time thread waits for it (seen: the
        // control loop and softhca both held up 1.4 s). Guests are put back to nice 0.
        let _ = resex_rt::raise_priority(None, -10);
    }
    // Stalls are counted per phase and summarised at the end, not logged in the table.
    let mut hc = host_config(&run_dir, a.caps, a.keep_logs.clone(), false)?;
    hc.hca_doorbells = !a.timer_polling;
    hc.port_cgroup = a.port_cgroup;
    let (mut host, stop) = start_host(scenario, hc)?;
    let cfg = resex_daemon::config::Config {
        run_dir: Some(run_dir.clone()),
        state_dir: Some(run_dir.join("state")),
        api_socket: Some(run_dir.join("resexd.sock")),
        realtime: rt,
        link: Some(scenario_link(scenario)),
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
    let (hca_priority, loop_priority) = priorities(&host, &d, rt);
    let lowered: Vec<String> = [
        ("softhca's port", &hca_priority),
        ("the control loop", &loop_priority),
    ]
    .into_iter()
    .filter(|(_, p)| rt && !(p.starts_with("SCHED_FIFO") || p.starts_with("nice")))
    .map(|(who, p)| format!("{who} ({p})"))
    .collect();
    if !lowered.is_empty() {
        eprintln!(
            "resex demo: could not raise the priority of {}: on a busy host the figures will \
             suffer (run as root, or see `resex demo --lab`)",
            lowered.join(" or ")
        );
    }
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
    let mut warnings = Vec::new();
    let port0 = host.hca_sample();
    let result = phases(
        PhaseRun {
            plan,
            secs,
            settle,
            live_table: !a.headless && !dashboard,
            // Under the dashboard a line would tear its screen: said after it ends.
            defer_warnings: dashboard,
        },
        &mut host,
        &d,
        (&victim, &interferer),
        &stop,
        &mut warnings,
    );
    done.store(true, Ordering::Release);
    if let Some(t) = top {
        match t.join() {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => eprintln!("resex demo: the dashboard failed: {e}"),
            Err(_) => eprintln!("resex demo: the dashboard panicked"),
        }
    }
    for w in warnings {
        eprintln!("{w}");
    }
    let stalls = host.hca_stalls();
    let port = host.hca_sample().since(&port0);
    let summary = d.stop();
    host.stop();
    if temp {
        let _ = std::fs::remove_dir_all(&run_dir);
    }
    #[allow(clippy::cast_precision_loss)]
    let host = HostReport {
        softhca_priority: hca_priority,
        loop_priority,
        hca_stalled_s: stalls.stalled_seconds,
        hca_watched_s: stalls.seconds,
        hca_longest_ms: stalls.longest_us as f64 / 1000.0,
        hca_cpu_pct: port.cpu_share().map(|c| 100.0 * c),
        hca_wakeups_per_s: port.polls_per_s(),
        ticks: summary.ticks,
        tick_late_p50_us: summary.late_p50_us,
        tick_late_p99_us: summary.late_p99_us,
        tick_late_max_us: summary.late_max_us,
    };
    Ok(LiveRun {
        phases: result?,
        host,
    })
}

/// How the phases run.
struct PhaseRun<'a> {
    plan: &'a Plan,
    secs: f64,
    settle: f64,
    live_table: bool,
    defer_warnings: bool,
}

fn phases(
    r: PhaseRun<'_>,
    host: &mut EmbeddedHost,
    d: &resex_daemon::DaemonHandle,
    (victim, interferer): (&resex_scenario::GuestSpec, &resex_scenario::GuestSpec),
    stop: &AtomicBool,
    warnings: &mut Vec<String>,
) -> Result<Vec<Phase>> {
    host.start_guest(victim)?;
    wait_registered(d, host, VICTIM, true)?;
    let mut out = Vec::new();
    for (k, (name, pol)) in r.plan.iter().enumerate() {
        // The interferer joins after the base phase and stays.
        if k > 0 && !host.guests().iter().any(|g| g.spec.name == INTERFERER) {
            host.start_guest(interferer)?;
            wait_registered(d, host, INTERFERER, false)?;
        }
        d.reload(pol.as_ref().map(|(n, c)| ((*n).to_owned(), c.clone())));
        if r.live_table {
            println!("phase {name}: {:.0} s", r.secs);
        }
        let t0 = Instant::now();
        let mut s0 = None;
        // The host's health is watched from the phase's start: a freeze during the settle
        // time leaves a backlog in the measured part.
        let mut watch = PhaseWatch::start(host.hca_stalls(), host.hca_sample());
        let mut caps = Vec::new();
        let mut last_print = Instant::now();
        while t0.elapsed().as_secs_f64() < r.secs {
            if stop.load(Ordering::Acquire) {
                bail!("interrupted");
            }
            host.check()?;
            std::thread::sleep(Duration::from_millis(100));
            let s = d.snapshot();
            watch.sample(&s);
            if t0.elapsed().as_secs_f64() >= r.settle {
                if s0.is_none() {
                    s0 = Some((s.clone(), Instant::now()));
                }
                if let Some(v) = vm(&s, INTERFERER) {
                    caps.push(v.cap_pct.unwrap_or(100.0 * f64::from(v.vcpus)));
                }
            }
            if r.live_table && last_print.elapsed() >= Duration::from_secs(1) {
                last_print = Instant::now();
                print!("{}", row(&s));
            }
        }
        let s1 = d.snapshot();
        let (s0, at) = s0.context("phase too short to measure")?;
        let mut health = watch.finish(host.hca_stalls(), host.hca_sample());
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
                // Registered, reporting before, silent now: its guest did not get to run.
                health = health.with_reason("the reporting VM sent no latency report".into());
                (None, None)
            }
        };
        let mbps = match (vm(&s0, INTERFERER), vm(&s1, INTERFERER)) {
            (Some(i0), Some(i1)) => {
                i1.tx_bytes_total.saturating_sub(i0.tx_bytes_total) as f64 * 8.0 / dt / 1e6
            }
            _ => 0.0,
        };
        if k > 0 && mbps == 0.0 {
            health = health.with_reason("the interfering VM sent nothing".into());
        }
        if let Some(w) = health.warning(name) {
            if r.defer_warnings {
                warnings.push(w);
            } else {
                eprintln!("{w}");
            }
        }
        let cap_mean = (!caps.is_empty()).then(|| caps.iter().sum::<f64>() / caps.len() as f64);
        out.push(Phase {
            name,
            victim_mean_us: mean,
            victim_p99_us: p99,
            interferer_mbps: mbps,
            interferer_cap_mean: cap_mean,
            host_overloaded: health.host_overloaded,
            health: Some(health),
        });
    }
    Ok(out)
}
