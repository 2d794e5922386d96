//! The coordinator's round over etcd (feature `etcd`), and a host reading its allocation.
//!
//! Every publish period the elected host reads the topology and every summary, runs
//! [`crate::Planner::round`] and writes each host's [`Allocation`] under its own lease, in
//! transactions of at most [`TXN_OPS`] operations and [`TXN_BYTES`] (etcd refuses more than 128
//! operations or 1.5 MiB in one), then its [`RoundReport`]. An allocation of a host that is no
//! longer in the round is deleted; without a (valid) topology every allocation is. A round whose
//! inputs cannot be solved allocates nothing new and keeps the session; an etcd call that fails
//! or times out fails the session like any other call.
//!
//! Every write is fenced by the election: each transaction holds only if the coordinator's
//! election key still exists with the creation revision its campaign won with
//! ([`CoordState::fence`]). A coordinator deposed between two of its checks (its key deleted,
//! another host elected) has its writes refused, and its session ends.

use crate::alloc::{Allocation, RoundReport};
use crate::client::{etcd, get_prefix};
use crate::config::FleetConfig;
use crate::error::FleetError;
use crate::keys;
use crate::plan::Planner;
use crate::record::HostSummary;
use crate::topology::Topology;
use etcd_client::{Client, Compare, CompareOp, PutOptions, Txn, TxnOp};
use std::collections::HashSet;
use std::time::{Duration, Instant};

/// Operations per transaction (etcd refuses more than 128).
pub const TXN_OPS: usize = 100;

/// Bytes per transaction (etcd refuses requests over 1.5 MiB).
pub const TXN_BYTES: usize = 1 << 20;

/// The coordinator's memory between rounds.
#[derive(Debug, Default)]
pub struct CoordState {
    /// The warm start.
    pub planner: Planner,
    /// Hosts that got an allocation last round.
    written: HashSet<String>,
    /// Refused values, logged at a bounded rate.
    log: resex_common::LogLimiter,
    /// A refused allocation of this host's, logged at a bounded rate.
    pub(crate) bad_alloc: resex_common::LogLimiter,
    /// The election key this host won with and its creation revision: every write holds only
    /// while it is unchanged (`None`: unfenced, as in the scale bench).
    pub fence: Option<(Vec<u8>, i64)>,
}

/// A round's outcome, with its wall time.
#[derive(Debug, Clone)]
pub struct Round {
    /// What the planner saw and did.
    pub report: RoundReport,
    /// Read, solve and write, wall time.
    pub took: Duration,
    /// The solve alone.
    pub solve: Duration,
}

/// One coordinator round; `Ok(None)` when there is no topology (nothing to allocate over).
pub async fn coordinate(
    c: &mut Client,
    cfg: &FleetConfig,
    me: &str,
    lease: i64,
    st: &mut CoordState,
    now_unix_ms: u64,
) -> Result<Option<Round>, FleetError> {
    let t0 = Instant::now();
    let p = &cfg.prefix;
    let r = c.get(keys::topology(p), None).await.map_err(etcd)?;
    let topo = match r
        .kvs()
        .first()
        .map(|kv| Topology::parse(&keys::topology(p), kv.value()))
    {
        Some(Ok(t)) => t,
        other => {
            if let Some(Err(e)) = other {
                if st.log.hit().is_some() {
                    tracing::warn!("fleet: {e}; no allocation until the topology is fixed");
                }
            }
            // Nothing to allocate over: what was allocated goes (hosts lift it at once).
            withdraw(c, p, st).await?;
            return Ok(None);
        }
    };
    let mut summaries = Vec::new();
    for (k, v, _) in get_prefix(c, &keys::summaries(p)).await? {
        match HostSummary::parse(&k, &v) {
            // A summary must sit under its own host's key.
            Ok(s) if k == keys::summary(p, &s.host) => summaries.push(s),
            Ok(s) => {
                if st.log.hit().is_some() {
                    tracing::warn!("fleet: {k} holds host {}'s summary; skipped", s.host);
                }
            }
            Err(e) => {
                if st.log.hit().is_some() {
                    tracing::warn!("fleet: {e}; skipped");
                }
            }
        }
    }
    let t1 = Instant::now();
    let (allocs, report) = match st.planner.round(&topo, &summaries, me, now_unix_ms) {
        Ok(r) => r,
        // A problem the inputs made (not etcd's): this round allocates nothing new; the
        // session, and the allocations in force until they lapse, stay.
        Err(e) => {
            if st.log.hit().is_some() {
                tracing::warn!("fleet: round {}: {e}", st.planner.round);
            }
            return Ok(None);
        }
    };
    let solve = t1.elapsed();
    let put = || Some(PutOptions::new().with_lease(lease));
    let mut now: HashSet<String> = HashSet::with_capacity(allocs.len());
    let mut batch = Batch::new(st.fence.clone());
    for a in &allocs {
        let v = serde_json::to_vec(a).map_err(|e| FleetError::Etcd(e.to_string()))?;
        now.insert(a.host.clone());
        let k = keys::alloc(p, &a.host);
        batch
            .push(c, k.len() + v.len(), TxnOp::put(k, v, put()))
            .await?;
    }
    for gone in st.written.difference(&now) {
        let k = keys::alloc(p, gone);
        batch.push(c, k.len(), TxnOp::delete(k, None)).await?;
    }
    let mut v = serde_json::to_vec(&report).map_err(|e| FleetError::Etcd(e.to_string()))?;
    if v.len() > crate::alloc::MAX_ALLOC_BYTES {
        // Too large for readers (and etcd's request limit): the report without its links.
        let mut brief = report.clone();
        brief.links_left_out = brief.links_left_out.saturating_add(brief.links.len());
        brief.links.clear();
        v = serde_json::to_vec(&brief).map_err(|e| FleetError::Etcd(e.to_string()))?;
    }
    let k = keys::round(p);
    batch
        .push(c, k.len() + v.len(), TxnOp::put(k, v, put()))
        .await?;
    batch.flush(c).await?;
    st.written = now;
    Ok(Some(Round {
        report,
        took: t0.elapsed(),
        solve,
    }))
}

/// Operations sent in transactions of at most [`TXN_OPS`] operations and [`TXN_BYTES`] bytes,
/// each fenced by the election key when there is one.
struct Batch {
    ops: Vec<TxnOp>,
    bytes: usize,
    fence: Option<(Vec<u8>, i64)>,
}

impl Batch {
    fn new(fence: Option<(Vec<u8>, i64)>) -> Self {
        Self {
            ops: Vec::new(),
            bytes: 0,
            fence,
        }
    }

    async fn push(&mut self, c: &mut Client, bytes: usize, op: TxnOp) -> Result<(), FleetError> {
        if !self.ops.is_empty() && (self.ops.len() == TXN_OPS || self.bytes + bytes > TXN_BYTES) {
            self.flush(c).await?;
        }
        self.ops.push(op);
        self.bytes += bytes;
        Ok(())
    }

    async fn flush(&mut self, c: &mut Client) -> Result<(), FleetError> {
        if !self.ops.is_empty() {
            let mut txn = Txn::new();
            if let Some((key, rev)) = &self.fence {
                txn = txn.when([Compare::create_revision(
                    key.clone(),
                    CompareOp::Equal,
                    *rev,
                )]);
            }
            let r = c
                .txn(txn.and_then(std::mem::take(&mut self.ops)))
                .await
                .map_err(etcd)?;
            if !r.succeeded() {
                self.bytes = 0;
                return Err(FleetError::Etcd(
                    "this host no longer holds the election: its writes were refused".into(),
                ));
            }
        }
        self.bytes = 0;
        Ok(())
    }
}

/// Deletes every allocation this coordinator wrote, and its round report.
async fn withdraw(c: &mut Client, p: &str, st: &mut CoordState) -> Result<(), FleetError> {
    if st.written.is_empty() {
        return Ok(());
    }
    let mut batch = Batch::new(st.fence.clone());
    for h in st.written.drain() {
        let k = keys::alloc(p, &h);
        batch.push(c, k.len(), TxnOp::delete(k, None)).await?;
    }
    let k = keys::round(p);
    batch.push(c, k.len(), TxnOp::delete(k, None)).await?;
    batch.flush(c).await
}

/// This host's allocation, if the coordinator wrote one.
pub async fn read_alloc(
    c: &mut Client,
    cfg: &FleetConfig,
    host: &str,
) -> Result<Option<Allocation>, FleetError> {
    let key = keys::alloc(&cfg.prefix, host);
    let r = c.get(key.clone(), None).await.map_err(etcd)?;
    match r.kvs().first() {
        None => Ok(None),
        Some(kv) => {
            let a = Allocation::parse(&key, kv.value())?;
            if a.host != host {
                return Err(FleetError::BadValue {
                    key,
                    reason: format!("an allocation for {}", a.host),
                });
            }
            if a.stale(crate::client::unix_ms()) {
                return Err(FleetError::BadValue {
                    key,
                    reason: format!(
                        "written at {} ms, older than twice its {} ms validity",
                        a.at_unix_ms, a.valid_ms
                    ),
                });
            }
            Ok(Some(a))
        }
    }
}
