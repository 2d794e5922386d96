//! Open-loop replay: a recorded trace through a policy ("what would this policy have done to
//! yesterday?"). Caps decided here do not feed back into the usage, which is what was recorded.

use crate::config::PolicyConfig;
use crate::engine::{Engine, PricingError};
use crate::trace::Trace;
use crate::types::{AccountRow, IntervalInput, VmId, VmSpec, VmUsage};
use serde::Serialize;
use std::collections::BTreeMap;

/// The output columns, in order.
pub const COLUMNS: [&str; 11] = [
    "interval",
    "vm",
    "allotment",
    "balance",
    "charge_cpu",
    "charge_io",
    "rate",
    "cap",
    "intf_pct",
    "interferer",
    "reason",
];

/// One output line: an interval and a VM.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplayRow<'a> {
    /// Interval.
    pub interval: u64,
    /// VM name.
    pub vm: &'a str,
    /// Allotment this epoch.
    pub allotment: f64,
    /// Balance after the interval.
    pub balance: f64,
    /// CPU charge.
    pub charge_cpu: f64,
    /// I/O charge.
    pub charge_io: f64,
    /// Rate.
    pub rate: f64,
    /// Cap in force, percent of one physical CPU.
    pub cap: f64,
    /// Interference the VM reported (fraction).
    pub intf_pct: Option<f64>,
    /// The VM it blamed.
    pub interferer: Option<&'a str>,
    /// Why the cap changed this interval.
    pub reason: Option<String>,
}

impl ReplayRow<'_> {
    /// The row as CSV fields (numbers rounded for people: Resos to 3 decimals, rates to 4).
    pub fn csv_fields(&self) -> [String; 11] {
        [
            self.interval.to_string(),
            self.vm.to_owned(),
            format!("{:.3}", self.allotment),
            format!("{:.3}", self.balance),
            format!("{:.3}", self.charge_cpu),
            format!("{:.3}", self.charge_io),
            format!("{:.4}", self.rate),
            format!("{:.3}", self.cap),
            self.intf_pct.map(|v| format!("{v:.4}")).unwrap_or_default(),
            self.interferer.unwrap_or_default().to_owned(),
            self.reason.clone().unwrap_or_default(),
        ]
    }
}

/// A replay that stopped.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("line {line}: {source}")]
pub struct ReplayError {
    /// The trace line being priced.
    pub line: u64,
    /// What the engine refused.
    #[source]
    pub source: PricingError,
}

/// Replays `trace` under `cfg`, calling `sink` with every output row in interval, then name,
/// order. A VM is priced from its first row to its last; an interval in between without a row
/// for it is an interval in which it used nothing. VMs get ids in name order, so the order of
/// rows within an interval has no effect.
pub fn replay(
    cfg: &PolicyConfig,
    trace: &Trace,
    mut sink: impl FnMut(&ReplayRow<'_>),
) -> Result<(), ReplayError> {
    // name -> (id, first interval, last interval)
    let mut span: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for r in &trace.rows {
        span.entry(r.vm.as_str())
            .and_modify(|s| s.1 = r.interval)
            .or_insert((r.interval, r.interval));
    }
    let names: Vec<&str> = span.keys().copied().collect();
    let id_of = |name: &str| -> VmId {
        // Position in the sorted name list; traces hold far fewer than 2^32 VMs.
        VmId(u32::try_from(names.binary_search(&name).unwrap_or(0)).unwrap_or(u32::MAX))
    };
    let mut engine = Engine::new(cfg.clone());
    let mut usage: Vec<VmUsage> = Vec::new();
    let mut k = 0;
    while k < trace.rows.len() {
        let interval = trace.rows[k].interval;
        let first_line = trace.rows[k].line;
        let mut end = k;
        while end < trace.rows.len() && trace.rows[end].interval == interval {
            end += 1;
        }
        let rows = &trace.rows[k..end];
        for r in rows {
            if span[r.vm.as_str()].0 == interval {
                let mut spec = VmSpec::new(id_of(&r.vm).0, r.vm.clone(), r.vcpus);
                if let Some(w) = r.weight {
                    spec.weight = w;
                }
                engine
                    .add_vm(spec, interval)
                    .map_err(|source| ReplayError {
                        line: r.line,
                        source,
                    })?;
            }
        }
        usage.clear();
        usage.extend(rows.iter().map(|r| VmUsage {
            vm: id_of(&r.vm),
            cpu_pct: r.cpu_pct,
            mtus: r.mtus,
            bytes: row_bytes(cfg, trace, r),
            report: r.report,
            nic: None,
        }));
        usage.sort_by_key(|u| u.vm);
        let link_util = rows.iter().find_map(|r| r.link_util);
        let out = engine
            .step(&IntervalInput {
                interval,
                link_util,
                usage: &usage,
            })
            .map_err(|source| ReplayError {
                line: first_line,
                source,
            })?;
        for row in &out.rows {
            sink(&to_replay_row(interval, row, &names));
        }
        for (name, (_, last)) in &span {
            if *last == interval {
                engine.remove_vm(id_of(name));
            }
        }
        k = end;
    }
    Ok(())
}

/// A row's bytes: the trace's, or, in a trace without a `bytes` column, `mtus` full packets of
/// the policy's path MTU (a policy that attributes by bytes, as IOShares does, would otherwise
/// see none and charge no one).
fn row_bytes(cfg: &PolicyConfig, trace: &Trace, r: &crate::trace::TraceRow) -> u64 {
    if trace.has_bytes {
        r.bytes
    } else {
        r.mtus.saturating_mul(u64::from(cfg.ledger.path_mtu))
    }
}

fn to_replay_row<'a>(interval: u64, r: &AccountRow, names: &[&'a str]) -> ReplayRow<'a> {
    let name = |id: VmId| names.get(id.0 as usize).copied().unwrap_or("?");
    ReplayRow {
        interval,
        vm: name(r.vm),
        allotment: r.allotment,
        balance: r.balance,
        charge_cpu: r.charge_cpu,
        charge_io: r.charge_io,
        rate: r.rate,
        cap: r.cap,
        intf_pct: r.intf_pct,
        interferer: r.interferer.map(name),
        reason: r.reason.map(|reason| match reason {
            crate::types::CapReason::Interferer { victim, rate } => {
                format!("interferer of {}: rate {rate:.3}", name(victim))
            }
            other => other.to_string(),
        }),
    }
}
