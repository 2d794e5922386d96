//! The fleet on the lab fabric (issue 33): the fabric's lab hosts as one fleet under the
//! coordinator's round, the same function resexd's elected host runs
//! ([`Planner::round`]), every round period of virtual time.
//!
//! Each host's summary is made as resexd makes it: the core's snapshot, each VM's period from
//! the same detector ([`resex_core::periods`], fed every interval), each VM's rate over the
//! period from the monitor's byte totals ([`PeriodRates`]). Summaries and allocations cross as
//! JSON and are read back and checked as etcd's readers read them ([`HostSummary::parse`],
//! [`Allocation::parse`], the host and staleness checks); each host's allocation is applied by
//! the same conversion as resexd's ([`FleetGrant::of`]) through its driver, and the core
//! follows its schedules step by step as it does live.
//!
//! What differs from live: no etcd (no leases, no election: one coordinator, [`COORDINATOR`]);
//! every host publishes its summary, and reads its allocation, at the round itself (live, each
//! at its own phase within the publish period); the detector runs in line (live, on its own
//! thread, paced); Unix time is virtual, from [`EPOCH_UNIX_MS`].

use super::{HostsError, Node};
use resex_core::grant::FleetGrant;
use resex_fleet::plan::Planner;
use resex_fleet::record::{HostSummary, PeriodRates};
use resex_fleet::topology::Topology;
use resex_fleet::{keys, Allocation, RoundReport};
use serde::{Deserialize, Serialize};

/// The virtual Unix time of the fabric's zero, ms (2027-01-15).
pub const EPOCH_UNIX_MS: u64 = 1_800_000_000_000;

/// The coordinator's name in its round reports.
pub const COORDINATOR: &str = "lab";

/// The key prefix the values are read back under (for their error messages).
const PREFIX: &str = "/resex/lab";

/// The fleet a fabric's hosts run under.
#[derive(Debug, Clone)]
pub struct FleetOptions {
    /// The topology as the admin writes it (its hosts are the fabric's host names).
    pub topology: Topology,
    /// A round every this many virtual ms (resexd's default publish period: 1 000).
    pub round_ms: u64,
}

impl FleetOptions {
    /// Rounds at resexd's default publish period.
    #[must_use]
    pub fn new(topology: Topology) -> Self {
        Self {
            topology,
            round_ms: 1000,
        }
    }
}

/// One round as the coordinator saw and decided it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetRound {
    /// When, virtual Unix ms.
    pub at_unix_ms: u64,
    /// The hosts' summaries as read back.
    pub summaries: Vec<HostSummary>,
    /// Its allocations (none when the round could not allocate).
    pub allocations: Vec<Allocation>,
    /// Its report (None: the round could not allocate: see `error`).
    pub report: Option<RoundReport>,
    /// Why it could not.
    pub error: Option<String>,
}

/// The fleet as the fabric runs it.
pub(super) struct LabFleet {
    opts: FleetOptions,
    planner: Planner,
    next_ns: u64,
    rates: Vec<PeriodRates>,
    pub(super) rounds: Vec<FleetRound>,
}

impl LabFleet {
    /// The fleet over `nodes`, whose detectors start now.
    pub(super) fn new(opts: FleetOptions, nodes: &mut [Node]) -> Self {
        for n in nodes.iter_mut() {
            n.host.detect_periods(EPOCH_UNIX_MS * 1_000_000);
        }
        let round_ns = opts.round_ms.max(1).saturating_mul(1_000_000);
        Self {
            opts,
            planner: Planner::default(),
            next_ns: round_ns,
            rates: vec![PeriodRates::default(); nodes.len()],
            rounds: Vec::new(),
        }
    }

    /// Runs the round due at `t` (the hosts have moved to `t`), if one is.
    pub(super) fn at(&mut self, nodes: &mut [Node], t: u64) -> Result<(), HostsError> {
        if t < self.next_ns {
            return Ok(());
        }
        let round_ns = self.opts.round_ms.max(1).saturating_mul(1_000_000);
        self.next_ns = (t / round_ns + 1).saturating_mul(round_ns);
        self.round(nodes, t)
    }

    fn round(&mut self, nodes: &mut [Node], t: u64) -> Result<(), HostsError> {
        let now_ms = EPOCH_UNIX_MS + t / 1_000_000;
        let summaries = self.summaries(nodes, t, now_ms)?;
        let (allocations, report, error) =
            match self
                .planner
                .round(&self.opts.topology, &summaries, COORDINATOR, now_ms)
            {
                Ok((a, r)) => (a, Some(r), None),
                // As live: this round allocates nothing new; what is in force lapses.
                Err(e) => (Vec::new(), None, Some(e.to_string())),
            };
        if report.is_some() {
            for n in nodes.iter_mut() {
                let mine = allocations.iter().find(|a| a.host == n.name);
                let grant = read_back(mine, &n.name, now_ms)?;
                let c = grant.map(|a| FleetGrant::of(&a, EPOCH_UNIX_MS * 1_000_000).at(t));
                n.host.driver.set_fleet(c, t);
            }
        }
        self.rounds.push(FleetRound {
            at_unix_ms: now_ms,
            summaries,
            allocations,
            report,
            error,
        });
        Ok(())
    }

    /// Every host's summary at `t`, as the coordinator reads it back.
    fn summaries(
        &mut self,
        nodes: &mut [Node],
        t: u64,
        now_ms: u64,
    ) -> Result<Vec<HostSummary>, HostsError> {
        let mut out = Vec::with_capacity(nodes.len());
        for (n, rates) in nodes.iter_mut().zip(&mut self.rates) {
            let snap = n.host.snapshot(t);
            let s = rates.summary(&n.name, &snap, now_ms);
            let key = keys::summary(PREFIX, &n.name);
            let bytes = serde_json::to_vec(&s).map_err(|e| fleet_err(n, e.to_string()))?;
            out.push(HostSummary::parse(&key, &bytes).map_err(|e| fleet_err(n, e.to_string()))?);
        }
        Ok(out)
    }

    /// The rounds run.
    pub(super) fn into_rounds(self) -> Vec<FleetRound> {
        self.rounds
    }
}

/// A host's allocation as it reads it back (JSON, checked, its own, not stale); `None`: none
/// (it lifts what it had).
fn read_back(
    a: Option<&Allocation>,
    host: &str,
    now_ms: u64,
) -> Result<Option<Allocation>, HostsError> {
    let Some(a) = a else { return Ok(None) };
    let key = keys::alloc(PREFIX, host);
    let bad = |reason: String| HostsError::Fleet {
        host: host.into(),
        reason,
    };
    let bytes = serde_json::to_vec(a).map_err(|e| bad(e.to_string()))?;
    let back = Allocation::parse(&key, &bytes).map_err(|e| bad(e.to_string()))?;
    if back.host != host || back.stale(now_ms) {
        return Err(bad(format!("{key}: not this host's, or stale")));
    }
    Ok(Some(back))
}

fn fleet_err(n: &Node, reason: String) -> HostsError {
    HostsError::Fleet {
        host: n.name.clone(),
        reason,
    }
}

/// The allocations a fresh coordinator makes from `rounds`' summaries, round after round: the
/// same as those recorded when the decisions came from the same code and the same inputs
/// alone.
pub fn replay(
    topology: &Topology,
    rounds: &[FleetRound],
) -> Result<Vec<Vec<Allocation>>, resex_fleet::error::FleetError> {
    let mut planner = Planner::default();
    let mut out = Vec::with_capacity(rounds.len());
    for r in rounds {
        match planner.round(topology, &r.summaries, COORDINATOR, r.at_unix_ms) {
            Ok((a, _)) => out.push(a),
            // A round that could not allocate then cannot now.
            Err(_) if r.error.is_some() => out.push(Vec::new()),
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}
