//! A host in the fleet (feature `etcd`): it registers its record under a lease, keeps the lease
//! alive, publishes its summary every period, campaigns in etcd's election for the
//! coordinator, runs the coordinator's round while it leads, and hands its own allocation to
//! its caller. All of it runs on one thread of its own with a single-threaded tokio runtime, so
//! resexd's loop never waits for etcd.
//!
//! When etcd stops answering (a keep-alive or a write fails, or takes longer than a third of
//! the TTL), the member drops its session: it is no longer connected and no longer the leader
//! (its caller lifts the fleet's ceilings and falls back to local policy), and it tries again
//! every second. When etcd is back it registers anew under a new lease and campaigns again:
//! the fleet re-forms.

use crate::alloc::Allocation;
use crate::client::{connect, etcd, runtime, unix_ms, Fleet};
use crate::config::FleetConfig;
use crate::coord::{coordinate, read_alloc, CoordState};
use crate::error::FleetError;
use crate::keys;
use crate::record::{HostRecord, HostSummary};
use etcd_client::PutOptions;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What a member knows of itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemberState {
    /// Registered under a live lease.
    pub connected: bool,
    /// Won the election: coordinates the fleet.
    pub leader: bool,
    /// The current lease.
    pub lease: Option<i64>,
    /// Sessions started (1 + re-registrations after losing etcd).
    pub sessions: u64,
    /// Summaries published.
    pub published: u64,
    /// Unix ms of the last change of `connected` or `leader`.
    pub changed_unix_ms: u64,
    /// Coordinator rounds this member ran.
    pub rounds: u64,
    /// The last round's wall time (read, solve, write), us.
    pub round_us: u64,
    /// The last round's solve alone, us.
    pub solve_us: u64,
    /// Per-VM ceilings the last round handed out, fleet-wide.
    pub round_allocations: usize,
    /// Allocations (rounds) this host applied.
    pub applied: u64,
    /// Ceilings in the allocation in force on this host (0: none, the local policy alone, or
    /// the allocation lapsed: `valid_ms` after it was read with nothing newer, as the core lets
    /// it lapse).
    pub ceilings: usize,
}

/// A host in the fleet (see the module's documentation).
pub struct Member {
    stop: Arc<AtomicBool>,
    crash: Arc<AtomicBool>,
    state: Arc<Mutex<MemberState>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Member {{ {:?} }}", self.state())
    }
}

type Summarise = Box<dyn FnMut() -> HostSummary + Send>;
/// What the member does with this host's allocation: `Some` when a new one is read, `None`
/// when it is gone or the fleet is lost (lift every fleet ceiling).
pub type OnAlloc = Box<dyn FnMut(Option<&Allocation>) + Send>;

impl Member {
    /// Joins the fleet: connects (a clear error when etcd is not reachable at start), then
    /// runs on its own thread. `summary` is called every publish period.
    pub fn start(
        cfg: FleetConfig,
        record: HostRecord,
        summary: impl FnMut() -> HostSummary + Send + 'static,
    ) -> Result<Self, FleetError> {
        Self::start_with(cfg, record, summary, |_| {})
    }

    /// As [`Member::start`], with what to do with this host's allocations (see [`OnAlloc`]).
    pub fn start_with(
        cfg: FleetConfig,
        record: HostRecord,
        summary: impl FnMut() -> HostSummary + Send + 'static,
        on_alloc: impl FnMut(Option<&Allocation>) + Send + 'static,
    ) -> Result<Self, FleetError> {
        cfg.validate()?;
        // Fail fast and clearly when etcd is not there at all.
        drop(Fleet::connect(&cfg)?);
        Self::spawn_with(cfg, record, summary, on_alloc)
    }

    /// Joins the fleet whether or not etcd answers now: the member keeps trying every second
    /// (resexd runs on its local policy meanwhile). Allocations are read but go nowhere.
    pub fn spawn(
        cfg: FleetConfig,
        record: HostRecord,
        summary: impl FnMut() -> HostSummary + Send + 'static,
    ) -> Result<Self, FleetError> {
        Self::spawn_with(cfg, record, summary, |_| {})
    }

    /// As [`Member::spawn`], with what to do with this host's allocations (see [`OnAlloc`]).
    pub fn spawn_with(
        cfg: FleetConfig,
        record: HostRecord,
        summary: impl FnMut() -> HostSummary + Send + 'static,
        on_alloc: impl FnMut(Option<&Allocation>) + Send + 'static,
    ) -> Result<Self, FleetError> {
        cfg.validate()?;
        let mut on_alloc: OnAlloc = Box::new(on_alloc);
        let stop = Arc::new(AtomicBool::new(false));
        let crash = Arc::new(AtomicBool::new(false));
        let state = Arc::new(Mutex::new(MemberState::default()));
        let (s, c, st) = (stop.clone(), crash.clone(), state.clone());
        let mut summary: Summarise = Box::new(summary);
        let thread = std::thread::Builder::new()
            .name("resex-fleet".into())
            .spawn(move || {
                let rt = match runtime() {
                    Ok(rt) => rt,
                    Err(e) => {
                        tracing::error!("fleet: {e}");
                        return;
                    }
                };
                rt.block_on(run(cfg, record, &mut summary, &mut on_alloc, s, c, st));
            })
            .map_err(|e| FleetError::Etcd(format!("thread: {e}")))?;
        Ok(Self {
            stop,
            crash,
            state,
            thread: Some(thread),
        })
    }

    /// Its state now.
    #[must_use]
    pub fn state(&self) -> MemberState {
        *self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Leaves the fleet: revokes the lease (its keys go at once; another host takes over).
    pub fn leave(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    /// Stops as a crash would: no revoke, no more keep-alives; the lease runs out after its
    /// TTL (what `kill -9` does to a resexd, for tests in one process).
    pub fn crash(mut self) {
        self.crash.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn set(state: &Mutex<MemberState>, f: impl FnOnce(&mut MemberState)) {
    let mut s = state
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let before = (s.connected, s.leader);
    f(&mut s);
    if (s.connected, s.leader) != before {
        s.changed_unix_ms = unix_ms();
    }
}

async fn run(
    cfg: FleetConfig,
    record: HostRecord,
    summary: &mut Summarise,
    on_alloc: &mut OnAlloc,
    stop: Arc<AtomicBool>,
    crash: Arc<AtomicBool>,
    state: Arc<Mutex<MemberState>>,
) {
    // etcd down for an hour is not a log flood.
    let mut lost = resex_common::LogLimiter::default();
    // The lease of the session etcd was lost in: etcd keeps leases across its restarts, so it
    // is revoked when we reconnect (its record and election key go at once, rather than after
    // its TTL) or when we leave.
    let mut stale: Option<i64> = None;
    let mut coord = CoordState::default();
    loop {
        if crash.load(Ordering::SeqCst) {
            return;
        }
        if stop.load(Ordering::SeqCst) {
            if let Some(l) = stale {
                revoke(&cfg, l).await;
            }
            return;
        }
        set(&state, |s| s.sessions += 1);
        let mut ctx = Session {
            cfg: &cfg,
            record: &record,
            summary,
            on_alloc,
            coord: &mut coord,
            applied: None,
            applied_until: None,
        };
        let r = session(&mut ctx, &stop, &crash, &state, &mut stale).await;
        if ctx.applied.is_some() {
            // The fleet is lost (or we leave): nothing it decided stays in force.
            (ctx.on_alloc)(None);
            set(&state, |s| s.ceilings = 0);
        }
        match r {
            Ok(()) => return,
            Err(e) => {
                set(&state, |s| {
                    stale = s.lease.or(stale);
                    s.connected = false;
                    s.leader = false;
                    s.lease = None;
                });
                if lost.hit().is_some() {
                    tracing::warn!("fleet: lost etcd ({e}); local policy until it is back");
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// Best effort: revokes `lease` (a second at most).
async fn revoke(cfg: &FleetConfig, lease: i64) {
    let t = Duration::from_secs(1);
    if let Ok(Ok(mut c)) = tokio::time::timeout(t, connect(cfg)).await {
        let _ = tokio::time::timeout(t, c.lease_revoke(lease)).await;
    }
}

/// What a session works with.
struct Session<'a> {
    cfg: &'a FleetConfig,
    record: &'a HostRecord,
    summary: &'a mut Summarise,
    on_alloc: &'a mut OnAlloc,
    coord: &'a mut CoordState,
    /// The (coordinator, round) of the allocation in force.
    applied: Option<(String, u64)>,
    /// When it was read, and how long it holds without a newer one.
    applied_until: Option<Instant>,
}

/// What a call that took longer than `third` (of the lease's TTL) fails with.
fn timed(
    what: &'static str,
    third: Duration,
) -> impl Fn(tokio::time::error::Elapsed) -> FleetError {
    move |_| FleetError::Etcd(format!("{what}: no answer in {third:?}"))
}

/// Joins the fleet: revokes the last session's lease (`stale`), takes a new one, registers
/// this host's record under it and starts its keep-alive. Each call waits at most `third`.
async fn join(
    c: &mut etcd_client::Client,
    cfg: &FleetConfig,
    record: &HostRecord,
    stale: &mut Option<i64>,
    third: Duration,
) -> Result<
    (
        i64,
        etcd_client::LeaseKeeper,
        etcd_client::LeaseKeepAliveStream,
    ),
    FleetError,
> {
    if let Some(old) = *stale {
        // Gone already (expired) is fine; unreachable fails the session as any call would.
        let r = tokio::time::timeout(third, c.lease_revoke(old))
            .await
            .map_err(timed("revoke", third))?;
        if let Err(e) = r {
            if !e.to_string().contains("not found") {
                return Err(etcd(e));
            }
        }
        *stale = None;
    }
    let lease = tokio::time::timeout(third, c.lease_grant(cfg.ttl_s, None))
        .await
        .map_err(timed("lease", third))?
        .map_err(etcd)?
        .id();
    // Revoked at the next session or at leave if this one fails from here on.
    *stale = Some(lease);
    let value = serde_json::to_vec(record).map_err(|e| FleetError::Etcd(e.to_string()))?;
    tokio::time::timeout(
        third,
        c.put(
            keys::host(&cfg.prefix, &record.host),
            value,
            Some(PutOptions::new().with_lease(lease)),
        ),
    )
    .await
    .map_err(timed("register", third))?
    .map_err(etcd)?;
    let (keeper, acks) = tokio::time::timeout(third, c.lease_keep_alive(lease))
        .await
        .map_err(timed("keep-alive", third))?
        .map_err(etcd)?;
    Ok((lease, keeper, acks))
}

/// Renews the lease (an expired one ends the session) and, while this host coordinates
/// (`election` named), checks it still holds the election (someone may have deleted its key).
async fn keep_alive(
    c: &mut etcd_client::Client,
    (keeper, acks): (
        &mut etcd_client::LeaseKeeper,
        &mut etcd_client::LeaseKeepAliveStream,
    ),
    lease: i64,
    election: Option<&String>,
    host: &str,
    third: Duration,
) -> Result<(), FleetError> {
    tokio::time::timeout(third, keeper.keep_alive())
        .await
        .map_err(timed("keep-alive", third))?
        .map_err(etcd)?;
    let ack = tokio::time::timeout(third, acks.message())
        .await
        .map_err(timed("keep-alive", third))?
        .map_err(etcd)?;
    match ack {
        Some(a) if a.ttl() > 0 => {}
        _ => return Err(FleetError::Etcd(format!("lease {lease:x} expired"))),
    }
    if let Some(name) = election {
        let r = tokio::time::timeout(third, c.leader(name.clone()))
            .await
            .map_err(timed("leader", third))?
            .map_err(etcd)?;
        if r.kv().map(etcd_client::KeyValue::value) != Some(host.as_bytes()) {
            return Err(FleetError::Etcd(format!(
                "{host} no longer holds the election"
            )));
        }
    }
    Ok(())
}

/// This host's allocation as read this period: handed to the caller when it is new, let lapse
/// when the one in force is past its validity; a value that does not parse is refused (the
/// local policy alone).
fn apply(
    ctx: &mut Session<'_>,
    state: &Mutex<MemberState>,
    a: Result<Option<Allocation>, FleetError>,
) -> Result<(), FleetError> {
    let a = match a {
        Ok(a) => a,
        Err(FleetError::BadValue { key, reason }) => {
            if ctx.coord.bad_alloc.hit().is_some() {
                tracing::warn!("fleet: {key}: {reason}; refused, the local policy alone");
            }
            None
        }
        Err(e) => return Err(e),
    };
    let id = a.as_ref().map(|a| (a.coordinator.clone(), a.round));
    if id == ctx.applied && ctx.applied_until.is_some_and(|u| Instant::now() >= u) {
        // The core has let it lapse (nothing newer came in time): so does the view.
        ctx.applied_until = None;
        set(state, |s| s.ceilings = 0);
    }
    if id != ctx.applied {
        ctx.applied_until = a
            .as_ref()
            .map(|a| Instant::now() + Duration::from_millis(a.valid_ms));
        (ctx.on_alloc)(a.as_ref());
        ctx.applied = id;
        let n = a.as_ref().map_or(0, |a| a.vms.len());
        set(state, |s| {
            s.ceilings = n;
            s.applied += u64::from(a.is_some());
        });
    }
    Ok(())
}

async fn session(
    ctx: &mut Session<'_>,
    stop: &AtomicBool,
    crash: &AtomicBool,
    state: &Mutex<MemberState>,
    stale: &mut Option<i64>,
) -> Result<(), FleetError> {
    let (cfg, record) = (ctx.cfg, ctx.record);
    // Not the coordinator until this session's campaign is won.
    ctx.coord.fence = None;
    let third = Duration::from_millis(u64::try_from(cfg.ttl_s).unwrap_or(5) * 1000 / 3);
    let timed = |what: &'static str| timed(what, third);
    let mut c = connect(cfg).await?;
    let (lease, mut keeper, mut acks) = join(&mut c, cfg, record, stale, third).await?;
    set(state, |s| {
        s.connected = true;
        s.lease = Some(lease);
    });
    let host = &record.host;
    tracing::info!(
        "fleet: {host} joined under lease {lease:x} (TTL {} s)",
        cfg.ttl_s
    );
    let with_lease = || Some(PutOptions::new().with_lease(lease));
    let mut elections = c.election_client();
    let name = keys::election(&cfg.prefix);
    let campaign = elections.campaign(name.clone(), host.as_str(), lease);
    tokio::pin!(campaign);
    let mut campaigning = true;
    let mut keep = tokio::time::interval(third);
    let mut publish = tokio::time::interval(Duration::from_millis(cfg.publish_ms));
    let mut poll = tokio::time::interval(Duration::from_millis(50));
    loop {
        tokio::select! {
            _ = poll.tick() => {
                if crash.load(Ordering::SeqCst) {
                    return Ok(());
                }
                if stop.load(Ordering::SeqCst) {
                    let _ = tokio::time::timeout(Duration::from_secs(1), c.lease_revoke(lease)).await;
                    set(state, |s| { s.connected = false; s.leader = false; s.lease = None; });
                    tracing::info!("fleet: {host} left");
                    return Ok(());
                }
            }
            _ = keep.tick() => {
                let leads = state.lock().unwrap_or_else(std::sync::PoisonError::into_inner).leader;
                keep_alive(&mut c, (&mut keeper, &mut acks), lease, leads.then_some(&name), host, third).await?;
            }
            _ = publish.tick() => {
                let s = (ctx.summary)();
                let v = serde_json::to_vec(&s).map_err(|e| FleetError::Etcd(e.to_string()))?;
                let leads = state.lock().unwrap_or_else(std::sync::PoisonError::into_inner).leader;
                let coord = &mut *ctx.coord;
                // One deadline for the whole period's work (publish, the round, the read), so a
                // keep-alive is never more than two thirds of the TTL late.
                let work = async {
                    c.put(keys::summary(&cfg.prefix, host), v, with_lease())
                        .await
                        .map_err(etcd)?;
                    let r = if leads {
                        coordinate(&mut c, cfg, host, lease, coord, unix_ms()).await?
                    } else {
                        None
                    };
                    Ok::<_, FleetError>((r, read_alloc(&mut c, cfg, host).await))
                };
                let (r, a) = tokio::time::timeout(third, work)
                    .await
                    .map_err(timed("publish"))??;
                set(state, |s| s.published += 1);
                if let Some(r) = r {
                    set(state, |s| {
                        s.rounds += 1;
                        s.round_us = u64::try_from(r.took.as_micros()).unwrap_or(u64::MAX);
                        s.solve_us = u64::try_from(r.solve.as_micros()).unwrap_or(u64::MAX);
                        s.round_allocations = r.report.allocations;
                    });
                }
                apply(ctx, state, a)?;
            }
            won = &mut campaign, if campaigning => {
                campaigning = false;
                let won = won.map_err(etcd)?;
                // Every write of this coordinator is fenced by the key it won with.
                ctx.coord.fence = won.leader().map(|k| (k.key().to_vec(), k.rev()));
                set(state, |s| s.leader = true);
                tracing::info!("fleet: {host} coordinates the fleet");
            }
        }
    }
}
