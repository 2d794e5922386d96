//! `resex lab compare`: policies side by side on the same scenarios, as one table.

use anyhow::{bail, Context, Result};
use clap::Args;
use resex_lab::compare::{CompareConfig, CompareRow};
use resex_lab::LabConfig;
use resex_pricing::PolicyConfig;
use resex_scenario::Scenario;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

/// Options of `resex lab compare`.
#[derive(Debug, Args)]
pub struct CompareArgs {
    /// Scenarios (default: every .toml in tools/scenarios/compare, by name).
    pub scenarios: Vec<PathBuf>,
    /// Policies to compare: names under --policies (or of a baseline under tools/baselines,
    /// e.g. `justitia`), or files.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "freemarket,ioshares-paper,ioshares,governor-cpu,governor"
    )]
    pub policy: Vec<String>,
    /// Directory of policy files.
    #[arg(long, default_value = "policies")]
    pub policies: PathBuf,
    /// Set every policy's `caps.floor_pct` to this (the same floor for all).
    #[arg(long, value_name = "PCT")]
    pub floor: Option<f64>,
    /// Virtual seconds per run.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The convergence band: the victim's mean within (1 + this) x its base.
    #[arg(long, default_value_t = 0.10)]
    pub within: f64,
    /// Print the rows as JSON.
    #[arg(long)]
    pub json: bool,
    /// Write the trade-off plot (victim latency against the aggressors' work kept, one point
    /// per policy and scenario) as DIR/tradeoff.svg.
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
    /// Also rerun each scenario with no policy and under each policy with each guest's agent
    /// off, on and lying (3x its latency): what running the agent or lying gains a guest and
    /// costs the others (two more runs per guest and policy, `none` included).
    #[arg(long)]
    pub gaming: bool,
}

/// The default scenarios: every `.toml` in `tools/scenarios/compare`, by name.
fn default_scenarios() -> Result<Vec<PathBuf>> {
    let dir = Path::new("tools/scenarios/compare");
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| {
            format!(
                "listing {} (run from the repository, or name scenarios)",
                dir.display()
            )
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    v.sort();
    Ok(v)
}

/// Baselines to compare with that are not shipped policies (`justitia`), by name when
/// `--policies` has no such file.
const BASELINES: &str = "tools/baselines";

pub(crate) fn load_policy(
    name: &str,
    dir: &Path,
    floor: Option<f64>,
) -> Result<(String, PolicyConfig)> {
    let path = if name.contains('/') || name.ends_with(".toml") {
        PathBuf::from(name)
    } else {
        let shipped = dir.join(format!("{name}.toml"));
        let baseline = Path::new(BASELINES).join(format!("{name}.toml"));
        if !shipped.exists() && baseline.exists() {
            baseline
        } else {
            shipped
        }
    };
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut cfg =
        PolicyConfig::from_toml(&text).with_context(|| format!("policy {}", path.display()))?;
    if let Some(f) = floor {
        cfg.caps.floor_pct = f;
        cfg.validate()
            .with_context(|| format!("--floor {f} with {}", path.display()))?;
    }
    let label = path
        .file_stem()
        .map_or_else(|| name.to_owned(), |s| s.to_string_lossy().into_owned());
    Ok((label, cfg))
}

pub fn compare(a: &CompareArgs) -> Result<()> {
    if !(a.duration.is_finite() && a.duration > 0.0) {
        bail!("--duration must be > 0 seconds");
    }
    let paths = if a.scenarios.is_empty() {
        default_scenarios()?
    } else {
        a.scenarios.clone()
    };
    if paths.is_empty() {
        bail!("no scenarios to compare");
    }
    let scenarios = paths
        .iter()
        .map(|p| Scenario::load(p).with_context(|| p.display().to_string()))
        .collect::<Result<Vec<_>>>()?;
    let policies = a
        .policy
        .iter()
        .map(|p| load_policy(p, &a.policies, a.floor))
        .collect::<Result<Vec<_>>>()?;
    let cfg = CompareConfig {
        lab: LabConfig {
            seed: a.seed,
            duration_s: Some(a.duration),
            ..LabConfig::default()
        },
        converge_within: a.within,
        gaming: a.gaming,
    };
    let tty = std::io::stderr().is_terminal();
    let rows = resex_lab::compare::run(&scenarios, &policies, &cfg, |s, p| {
        if tty {
            eprint!("\r\x1b[Klab compare: {s}: {p}");
        }
    })?;
    if tty {
        eprintln!();
    }
    if let Some(dir) = &a.plot {
        let path = super::tradeoff::tradeoff(&rows, dir)?;
        if tty {
            eprintln!("plot: {}", path.display());
        }
    }
    super::emit::emit(a.json, &rows, |out| table(out, &rows, a))
}

fn table(out: &mut dyn Write, rows: &[CompareRow], a: &CompareArgs) -> std::io::Result<()> {
    let x = |v: Option<f64>, d: usize| v.map_or("-".to_owned(), |v| format!("{v:.d$}"));
    writeln!(
        out,
        "{} s virtual per run, seed {}; latency from the first aggressor's start (the time before \
         is the warm-up), over the victims alone; mean x and p99 x: the worst victim's; \
         converged: every victim's 10-period mean within {:.0}% of its base{}",
        a.duration,
        a.seed,
        a.within * 100.0,
        a.floor.map_or(String::new(), |f| format!(
            "; every policy's cap floor {f}%"
        ))
    )?;
    let sw = rows
        .iter()
        .map(|r| r.scenario.len())
        .max()
        .unwrap_or(0)
        .max(8);
    let pw = rows
        .iter()
        .map(|r| r.policy.len())
        .max()
        .unwrap_or(0)
        .max(6);
    writeln!(
        out,
        "{:<sw$} {:<pw$} {:>7} {:>7} {:>9} {:>5} {:>7} {:>8} {:>6} {:>6} {:>7} {:>7}  victims: mean x / p99 x",
        "scenario",
        "policy",
        "mean x",
        "p99 x",
        "aggr Mb/s",
        "kept",
        "aggr x",
        "converge",
        "osc pp",
        "cap %",
        "cap min",
        "tx max%"
    )?;
    for r in rows {
        let victims: Vec<String> = r
            .victims
            .iter()
            .map(|v| format!("{} {}/{}", v.name, x(v.mean_x, 2), x(v.p99_x, 2)))
            .collect();
        writeln!(
            out,
            "{:<sw$} {:<pw$} {:>7} {:>7} {:>9.0} {:>5} {:>7} {:>8} {:>6.2} {:>6.1} {:>7.1} {:>7.1}  {}",
            r.scenario,
            r.policy,
            x(r.victim_mean_x, 3),
            x(r.victim_p99_x, 3),
            r.aggressor_mbps,
            x(r.aggressor_kept, 2),
            x(r.aggressor_lat_x, 2),
            r.converge_s
                .map_or("never".to_owned(), |c| format!("{c:.2}s")),
            r.cap_osc_pp.max(r.rate_osc_pp),
            r.aggressor_cap_mean,
            r.aggressor_cap_min,
            r.aggressor_tx_mean_pct,
            victims.join(", ")
        )?;
    }
    owed_table(out, rows)?;
    gaming_table(out, rows)
}

/// Every guest's rate against what it is owed: the least such share per row, and who.
fn owed_table(out: &mut dyn Write, rows: &[CompareRow]) -> std::io::Result<()> {
    writeln!(
        out,
        "\nowed: each guest's rate on the wire after the start over the lesser of its demand and \
         its entitlement (kept); the least among guests that demand their entitlement"
    )?;
    for r in rows {
        let least = r
            .owed
            .iter()
            .filter(|o| o.demand_mbps.is_none_or(|d| d >= o.entitled_mbps))
            .min_by(|a, b| a.kept.total_cmp(&b.kept));
        let all: Vec<String> = r
            .owed
            .iter()
            .map(|o| {
                format!(
                    "{} {:.0}/{:.0} {:.2}",
                    o.name, o.mbps, o.entitled_mbps, o.kept
                )
            })
            .collect();
        writeln!(
            out,
            "{} {}: least {}  ({})",
            r.scenario,
            r.policy,
            least.map_or("-".to_owned(), |o| format!("{} {:.2}", o.name, o.kept)),
            all.join(", ")
        )?;
    }
    Ok(())
}

/// The gaming lines, when measured: per row the largest gain and harm, and whose.
fn gaming_table(out: &mut dyn Write, rows: &[CompareRow]) -> std::io::Result<()> {
    if rows.iter().all(|r| r.gaming.is_none()) {
        return Ok(());
    }
    writeln!(
        out,
        "\ngaming: the largest own gain (throughput or latency) and harm to another guest from \
         running the agent (on vs off) or lying (3x vs honest)"
    )?;
    for r in rows {
        let Some(g) = &r.gaming else { continue };
        for by in ["agent", "lying"] {
            let lines = g.iter().filter(|l| l.by == by);
            let gain = lines
                .clone()
                .map(|l| (l.own_throughput_gain.max(l.own_latency_gain), &l.vm))
                .max_by(|a, b| a.0.total_cmp(&b.0));
            let harm = lines
                .map(|l| (l.worst_harm_to_others, &l.vm))
                .max_by(|a, b| a.0.total_cmp(&b.0));
            let f = |x: Option<(f64, &String)>| {
                x.map_or("-".to_owned(), |(v, n)| format!("{:+.1}% ({n})", v * 100.0))
            };
            writeln!(
                out,
                "{} {} by {by}: gain {}, harm {}",
                r.scenario,
                r.policy,
                f(gain),
                f(harm)
            )?;
        }
    }
    Ok(())
}
