//! The ResEx paper's experiments (section VII, Figs. 1 and 3-9) as lab runs: the scenarios
//! under `tools/scenarios/paper/` and the paper pair, varied as each figure varies them.
//! Fig. 2 (latency split by the number of servers) is not modelled yet.

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
    }
}

fn with_interferer(s: &Scenario, buffer: u64, cap: Option<f64>) -> Scenario {
    let mut s = s.clone();
    for g in s.guests.iter_mut().filter(|g| g.name != "reporting") {
        g.benchex.buffer = Size(buffer);
        g.cap = cap;
    }
    s
}

/// Runs every experiment; `policy(name)` gives a policy's configuration; `progress` is told
/// each case as it starts.
pub fn run(
    sc: &PaperScenarios,
    base: &LabConfig,
    policy: &dyn Fn(&str) -> Result<PolicyConfig, LabError>,
    mut progress: impl FnMut(&str, &str),
) -> Result<Vec<Row>, LabError> {
    let mut rows = Vec::new();
    let mut go = |figure: &'static str,
                  case: String,
                  s: &Scenario,
                  pol: Option<&str>|
     -> Result<(), LabError> {
        progress(figure, &case);
        let cfg = LabConfig {
            policy: match pol {
                Some(p) => Some((p.to_owned(), policy(p)?)),
                None => None,
            },
            ..base.clone()
        };
        let r = LabHost::new(s, cfg)?.run(|_, _| {})?;
        rows.push(row(figure, case, &r));
        Ok(())
    };
    go("1", "alone".into(), &sc.alone, None)?;
    go("1", "interfered (2 MiB)".into(), &sc.interfered, None)?;
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
