//! The ResEx paper's experiments (section VII, Figs. 1-9) as lab runs: the scenarios under
//! `tools/scenarios/paper/` and the paper pair, varied as each figure varies them. Fig. 2 runs
//! 1-8 copies of the reporting VM, alone and with the 2 MiB interferer, and splits their
//! latency into queued, computing and waiting time.

use crate::host::{LabConfig, LabError, LabHost};
use crate::result::LabResult;
use resex_pricing::PolicyConfig;
use resex_scenario::{Scenario, Size};
use serde::Serialize;

/// One point of one figure.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// Which figure.
    pub figure: &'static str,
    /// The case.
    pub case: String,
    /// The policy.
    pub policy: String,
    /// The reporting VM's mean latency, us.
    pub victim_mean_us: Option<f64>,
    /// Its p99, us.
    pub victim_p99_us: Option<f64>,
    /// The other VM's throughput, Mb/s (None: alone).
    pub other_mbps: Option<f64>,
    /// The other VM's mean cap, %.
    pub other_cap_mean: Option<f64>,
    /// The other VM's lowest Resos balance.
    pub other_balance_min: Option<f64>,
    /// Fig. 2's split of the reporting VMs' latency: queued, computing, waiting for the
    /// completion (means per order, us; averaged over the reporting VMs).
    pub split_us: Option<[f64; 3]>,
}

/// The scenarios the experiments start from.
#[derive(Debug, Clone)]
pub struct PaperScenarios {
    /// The reporting VM alone.
    pub alone: Scenario,
    /// With the 2 MiB interferer from the start.
    pub interfered: Scenario,
    /// The paper pair (the interferer starts at 2 s, so a policy learns the quiet latency).
    pub pair: Scenario,
    /// Two 64 KiB VMs.
    pub same: Scenario,
    /// A slow 2 MiB VM.
    pub slow: Scenario,
}

fn row(figure: &'static str, case: String, r: &LabResult) -> Row {
    let v = r.vms.iter().find(|v| v.name == "reporting");
    let o = r.vms.iter().find(|v| v.name != "reporting");
    Row {
        figure,
        case,
        policy: r.policy.clone(),
        victim_mean_us: v.and_then(|v| v.lat_mean_us),
        victim_p99_us: v.and_then(|v| v.lat_p99_us),
        other_mbps: o.map(|o| o.tx_mbps),
        other_cap_mean: o.map(|o| o.cap_mean),
        other_balance_min: o.and_then(|o| o.balance_min),
        split_us: v.and_then(split_of),
    }
}

fn split_of(v: &crate::result::VmResult) -> Option<[f64; 3]> {
    Some([v.queue_us?, v.compute_us?, v.wait_us?])
}

/// Fig. 2's row: the reporting VMs (all but `interfering`) averaged.
fn row_many(case: String, r: &LabResult) -> Row {
    let vs: Vec<_> = r.vms.iter().filter(|v| v.name != "interfering").collect();
    let o = r.vms.iter().find(|v| v.name == "interfering");
    let mean = |f: &dyn Fn(&crate::result::VmResult) -> Option<f64>| {
        let xs: Vec<f64> = vs.iter().filter_map(|v| f(v)).collect();
        #[allow(clippy::cast_precision_loss)]
        (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
    };
    let split = (|| {
        Some([
            mean(&|v| v.queue_us)?,
            mean(&|v| v.compute_us)?,
            mean(&|v| v.wait_us)?,
        ])
    })();
    Row {
        figure: "2",
        case,
        policy: r.policy.clone(),
        victim_mean_us: mean(&|v| v.lat_mean_us),
        victim_p99_us: mean(&|v| v.lat_p99_us),
        other_mbps: o.map(|o| o.tx_mbps),
        other_cap_mean: o.map(|o| o.cap_mean),
        other_balance_min: o.and_then(|o| o.balance_min),
        split_us: split,
    }
}

/// `n` copies of the reporting VM (`reporting-1` ...), with the interferer when `interfered`.
fn servers(sc: &PaperScenarios, n: usize, interfered: bool) -> Scenario {
    let mut s = sc.alone.clone();
    let proto = s.guests[0].clone();
    s.guests = (1..=n)
        .map(|i| {
            let mut g = proto.clone();
            g.name = format!("reporting-{i}");
            g
        })
        .collect();
    if interfered {
        s.guests.extend(
            sc.interfered
                .guests
                .iter()
                .filter(|g| g.name == "interfering")
                .cloned(),
        );
    }
    s
}

fn with_interferer(s: &Scenario, buffer: u64, cap: Option<f64>) -> Scenario {
    let mut s = s.clone();
    for g in s.guests.iter_mut().filter(|g| g.name != "reporting") {
        g.benchex.buffer = Size(buffer);
        g.cap = cap;
    }
    s
}

/// The policy file each of the paper's policies is run from: IOShares as the paper has it
/// (`ioshares-paper`: the interval's top sender is the interferer), FreeMarket as shipped.
pub fn paper_file(policy: &str) -> &str {
    match policy {
        "ioshares" => "ioshares-paper",
        p => p,
    }
}

/// Runs every experiment; `policy(file)` gives a policy's configuration by its file's name
/// (see [`paper_file`]), run as published (no entitlement guard, reports believed: the
/// paper's system had neither); `progress` is told each case as it starts.
pub fn run(
    sc: &PaperScenarios,
    base: &LabConfig,
    policy: &dyn Fn(&str) -> Result<PolicyConfig, LabError>,
    mut progress: impl FnMut(&str, &str),
) -> Result<Vec<Row>, LabError> {
    let mut rows = Vec::new();
    // One run of `s` under `pol`, summarised by `summary` (one row per case).
    type Summary = fn(&'static str, String, &LabResult) -> Row;
    let mut go = |figure: &'static str,
                  case: String,
                  s: &Scenario,
                  pol: Option<&str>,
                  summary: Summary|
     -> Result<(), LabError> {
        progress(figure, &case);
        let cfg = LabConfig {
            policy: match pol {
                Some(p) => Some((p.to_owned(), {
                    let mut c = policy(paper_file(p))?;
                    c.as_published = true;
                    c
                })),
                None => None,
            },
            ..base.clone()
        };
        let r = LabHost::new(s, cfg)?.run(|_, _| {})?;
        rows.push(summary(figure, case, &r));
        Ok(())
    };
    let one: Summary = row;
    let many: Summary = |_, case, r| row_many(case, r);
    go("1", "alone".into(), &sc.alone, None, one)?;
    go("1", "interfered (2 MiB)".into(), &sc.interfered, None, one)?;
    for n in [1usize, 2, 4, 8] {
        for interfered in [false, true] {
            let case = format!(
                "{n} server{}{}",
                if n > 1 { "s" } else { "" },
                if interfered {
                    " + 2 MiB interferer"
                } else {
                    ""
                }
            );
            go("2", case, &servers(sc, n, interfered), None, many)?;
        }
    }
    let mut go = |figure, case, s: &Scenario, pol| go(figure, case, s, pol, one);
    const KIB: u64 = 1024;
    for ratio in [2u64, 4, 8, 16, 32] {
        let cap = 100.0 / ratio as f64;
        let s = with_interferer(&sc.interfered, 64 * KIB * ratio, Some(cap));
        go(
            "3",
            format!("ratio {ratio} ({} KiB), cap {cap}%", 64 * ratio),
            &s,
            None,
        )?;
    }
    for cap in [100.0, 50.0, 25.0, 12.5, 6.25, 3.125] {
        let s = with_interferer(&sc.interfered, 2048 * KIB, Some(cap));
        go("4", format!("2 MiB interferer capped at {cap}%"), &s, None)?;
    }
    go("5/6", "paper pair".into(), &sc.pair, Some("freemarket"))?;
    go("7", "paper pair".into(), &sc.pair, Some("ioshares"))?;
    for p in ["freemarket", "ioshares"] {
        go("8", "64KB-64KB".into(), &sc.same, Some(p))?;
        go("8", "64KB-2MB-nointf (10/s)".into(), &sc.slow, Some(p))?;
    }
    for kib in [256u64, 512, 1024, 2048] {
        let s = with_interferer(&sc.pair, kib * KIB, None);
        for p in ["freemarket", "ioshares"] {
            go("9", format!("interferer {kib} KiB"), &s, Some(p))?;
        }
    }
    Ok(rows)
}
