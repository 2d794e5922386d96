//! `resex lab owed`: what every guest is owed on small random hosts, under the policies named,
//! host by host and summed up against the entitlement goals.

use super::compare::load_policy;
use super::emit::emit;
use anyhow::{bail, Context, Result};
use clap::Args;
use resex_lab::compare::random::{self, RandomGuest, Worst};
use serde::Serialize;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;

/// Options of `resex lab owed`.
#[derive(Debug, Args)]
pub struct OwedArgs {
    /// Random hosts to draw (2-6 guests each, as the entitlement proptest draws them).
    #[arg(long, default_value_t = 25)]
    pub hosts: u32,
    /// Seed of the draw (the same seed, the same hosts).
    #[arg(long, default_value_t = 29)]
    pub seed: u64,
    /// Policies: names under --policies or files.
    #[arg(long, value_delimiter = ',', default_value = "governor")]
    pub policy: Vec<String>,
    /// Directory of policy files.
    #[arg(long, default_value = "policies")]
    pub policies: PathBuf,
    /// A guest within its entitlement meets the goal at most this many times its mean
    /// latency with no policy.
    #[arg(long, default_value_t = 1.10)]
    pub latency_goal: f64,
    /// A guest that demands its entitlement meets the goal with at least this share of it.
    #[arg(long, default_value_t = 0.9)]
    pub share_goal: f64,
    /// Print the hosts and the summary as JSON.
    #[arg(long)]
    pub json: bool,
}

/// One host under one policy.
#[derive(Debug, Serialize)]
struct PolicyLine {
    policy: String,
    #[serde(flatten)]
    worst: Worst,
}

/// One host.
#[derive(Debug, Serialize)]
struct HostLine {
    host: u32,
    guests: Vec<RandomGuest>,
    policies: Vec<PolicyLine>,
}

/// One policy over every host.
#[derive(Debug, Serialize)]
struct Summary {
    policy: String,
    /// Hosts with a guest within its entitlement above the latency goal.
    hosts_over_latency_goal: u32,
    /// Hosts with a guest that demands its entitlement below the share goal.
    hosts_under_share_goal: u32,
    /// The highest latency ratio and its host.
    worst_latency_x: Option<(f64, u32)>,
    /// The least share and its host.
    least_share: Option<(f64, u32)>,
}

/// The whole report (`--json`).
#[derive(Debug, Serialize)]
struct Report {
    seed: u64,
    latency_goal: f64,
    share_goal: f64,
    hosts: Vec<HostLine>,
    summary: Vec<Summary>,
}

pub fn run(a: &OwedArgs) -> Result<()> {
    if a.hosts == 0 {
        bail!("--hosts must be at least 1");
    }
    if !(a.latency_goal.is_finite() && a.latency_goal > 0.0) {
        bail!("--latency-goal must be > 0");
    }
    if !(a.share_goal.is_finite() && a.share_goal >= 0.0) {
        bail!("--share-goal must be >= 0");
    }
    let policies = a
        .policy
        .iter()
        .map(|p| load_policy(p, &a.policies, None))
        .collect::<Result<Vec<_>>>()?;
    let mut rng = fastrand::Rng::with_seed(a.seed);
    let progress = a.json && std::io::stderr().is_terminal();
    // The table's lines go out host by host (its progress); a closed pipe ends the run.
    let mut table = (!a.json).then(|| std::io::stdout().lock());
    if let Some(out) = table.as_mut() {
        let head = format!(
            "{:<5} {:<14} {:<16} {:<14} guests",
            "host", "policy", "worst latency", "least share"
        );
        if closed(writeln!(out, "{head}"))? {
            return Ok(());
        }
    }
    let mut hosts = Vec::new();
    for h in 1..=a.hosts {
        if progress {
            eprint!("\rhost {h} of {}", a.hosts);
        }
        let guests = random::draw_host(&mut rng);
        let line = one_host(h, guests, &policies)?;
        if let Some(out) = table.as_mut() {
            if closed(print_host(out, &line))? {
                return Ok(());
            }
        }
        hosts.push(line);
    }
    if progress {
        eprintln!();
    }
    drop(table);
    let summary = summarise(&hosts, a.latency_goal, a.share_goal);
    let r = Report {
        seed: a.seed,
        latency_goal: a.latency_goal,
        share_goal: a.share_goal,
        hosts,
        summary,
    };
    emit(a.json, &r, |out| print_summary(out, &r.summary, a))
}

/// Whether a write found the pipe closed (`| head` had enough); any other error is one.
fn closed(w: std::io::Result<()>) -> Result<bool> {
    match w {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(true),
        r => r.map(|()| false).map_err(Into::into),
    }
}

/// Host `h` of `guests` with no policy and under each policy.
fn one_host(
    h: u32,
    guests: Vec<RandomGuest>,
    policies: &[(String, resex_pricing::PolicyConfig)],
) -> Result<HostLine> {
    let s = random::scenario(&guests).with_context(|| format!("host {h}: {guests:?}"))?;
    let none = random::run(&s, None).with_context(|| format!("host {h} with no policy"))?;
    let mut lines = Vec::new();
    for p in policies {
        let r = random::run(&s, Some(p.clone())).with_context(|| format!("host {h}, {}", p.0))?;
        lines.push(PolicyLine {
            policy: p.0.clone(),
            worst: random::worst(&random::verdicts(&s, &none, &r)),
        });
    }
    Ok(HostLine {
        host: h,
        guests,
        policies: lines,
    })
}

/// A guest in a few characters: its reply size, its load (`loop` or tenths of its
/// entitlement), `+agent` or `+lies`.
fn label(g: &RandomGuest) -> String {
    let size = if g.reply >= 1 << 20 {
        format!("{}MiB", g.reply >> 20)
    } else {
        format!("{}KiB", g.reply >> 10)
    };
    let load = if g.load_tenths == 0 {
        "loop".to_owned()
    } else {
        format!("0.{}", g.load_tenths)
    };
    let agent = match (g.agent, g.lies) {
        (_, true) => "+lies",
        (true, false) => "+agent",
        _ => "",
    };
    format!("{size}@{load}{agent}")
}

fn print_host(out: &mut impl Write, h: &HostLine) -> std::io::Result<()> {
    let guests: Vec<String> = h
        .guests
        .iter()
        .enumerate()
        .map(|(i, g)| format!("g{i} {}", label(g)))
        .collect();
    for (k, p) in h.policies.iter().enumerate() {
        let lat = p
            .worst
            .latency_x
            .as_ref()
            .map_or("-".into(), |(x, g)| format!("{x:.2}x {g}"));
        let share = p
            .worst
            .share
            .as_ref()
            .map_or("-".into(), |(x, g)| format!("{x:.3} {g}"));
        let host = if k == 0 {
            h.host.to_string()
        } else {
            String::new()
        };
        let guests = if k == 0 {
            guests.join(", ")
        } else {
            String::new()
        };
        let line = format!("{host:<5} {:<14} {lat:<16} {share:<14} {guests}", p.policy);
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}

/// Each policy over every host.
fn summarise(hosts: &[HostLine], latency_goal: f64, share_goal: f64) -> Vec<Summary> {
    let Some(first) = hosts.first() else {
        return Vec::new();
    };
    (0..first.policies.len())
        .map(|k| {
            let lat = |h: &HostLine| {
                h.policies[k]
                    .worst
                    .latency_x
                    .as_ref()
                    .map(|x| (x.0, h.host))
            };
            let share = |h: &HostLine| h.policies[k].worst.share.as_ref().map(|x| (x.0, h.host));
            #[allow(clippy::cast_possible_truncation)]
            let count =
                |f: &dyn Fn(&HostLine) -> bool| hosts.iter().filter(|h| f(h)).count() as u32;
            Summary {
                policy: first.policies[k].policy.clone(),
                hosts_over_latency_goal: count(&|h| lat(h).is_some_and(|x| x.0 > latency_goal)),
                hosts_under_share_goal: count(&|h| share(h).is_some_and(|x| x.0 < share_goal)),
                worst_latency_x: hosts
                    .iter()
                    .filter_map(lat)
                    .max_by(|a, b| a.0.total_cmp(&b.0)),
                least_share: hosts
                    .iter()
                    .filter_map(share)
                    .min_by(|a, b| a.0.total_cmp(&b.0)),
            }
        })
        .collect()
}

fn print_summary(out: &mut dyn Write, s: &[Summary], a: &OwedArgs) -> std::io::Result<()> {
    writeln!(
        out,
        "\n{} hosts, seed {}: hosts with a guest within its entitlement above {:.2}x its mean \
         with no policy, and with a guest that demands its entitlement below {:.2} of it",
        a.hosts, a.seed, a.latency_goal, a.share_goal
    )?;
    writeln!(
        out,
        "{:<14} {:>6} {:<20} {:>6} least (host)",
        "policy", "over", "worst (host)", "under"
    )?;
    for p in s {
        let w = p
            .worst_latency_x
            .map_or("-".into(), |(x, h)| format!("{x:.2}x ({h})"));
        let l = p
            .least_share
            .map_or("-".into(), |(x, h)| format!("{x:.3} ({h})"));
        let line = format!(
            "{:<14} {:>6} {w:<20} {:>6} {l}",
            p.policy, p.hosts_over_latency_goal, p.hosts_under_share_goal
        );
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(n: u32, lat: Option<f64>, share: Option<f64>) -> HostLine {
        HostLine {
            host: n,
            guests: Vec::new(),
            policies: vec![PolicyLine {
                policy: "governor".into(),
                worst: Worst {
                    latency_x: lat.map(|x| (x, "g0".into())),
                    share: share.map(|x| (x, "g1".into())),
                },
            }],
        }
    }

    #[test]
    fn the_summary_counts_hosts_beyond_the_goals_and_names_the_worst() {
        let hosts = [
            host(1, Some(1.05), Some(0.95)),
            host(2, Some(1.85), None),
            host(3, Some(1.20), Some(0.88)),
            host(4, None, Some(0.91)),
        ];
        let s = summarise(&hosts, 1.10, 0.9);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].hosts_over_latency_goal, 2);
        assert_eq!(s[0].hosts_under_share_goal, 1);
        assert_eq!(s[0].worst_latency_x, Some((1.85, 2)));
        assert_eq!(s[0].least_share, Some((0.88, 3)));
        assert!(summarise(&[], 1.1, 0.9).is_empty());
    }

    #[test]
    fn a_guest_label_says_its_size_load_and_agent() {
        let g = |reply, load_tenths, agent, lies| RandomGuest {
            reply,
            load_tenths,
            agent,
            lies,
        };
        assert_eq!(label(&g(4 << 10, 0, false, false)), "4KiB@loop");
        assert_eq!(label(&g(1 << 20, 6, true, false)), "1MiB@0.6+agent");
        assert_eq!(label(&g(256 << 10, 1, true, true)), "256KiB@0.1+lies");
    }
}
