//! DRUM as a resex policy: the utility maximisation of Shen et al. (`resex-drum`) on one host,
//! whose applications are its VMs.
//!
//! Each actuation period, from what the monitor counted exactly (bytes per VM) and the CPU the
//! VMs used:
//! - a VM's **demand** is its link rate over the period (a fraction of the link), as a peak
//!   that decays by `demand_memory` per period; VMs whose demand is below `min_demand` are
//!   idle and leave the problem (their limits are lifted, their caps restored);
//! - its **a_j**, the CPU its CQ service takes per unit of link rate, is its CPU (in CPUs) over
//!   its link rate, clamped to `[a_min, a_max]` and smoothed by `a_memory`: the paper's
//!   `z = A x`, measured instead of drawn;
//! - its **weight** is its class's (`[drum.weights]`: `light` for VMs the host sees sending
//!   within their entitlement, `bulk` for the others) times its configured weight; whether a
//!   VM runs the agent plays no part.
//!
//! The host's problem is then the paper's problem (4) for these VMs: maximise the top-k
//! weighted alpha-fair utility of the WQE rates x (fractions of the link, `sum x <=
//! link_capacity`) plus the CQ latency utility `-beta sum z^-2` (z in CPUs, `sum z <=
//! cpu_capacity_pct / 100` when the host's CPUs are oversubscribed), with `z_j = a_j x_j`. `iterations` ADMM
//! iterations run per period, warm-started from the last period's x, z and u ([`host`]).
//!
//! The levers: **x is the VM's transmit limit** (`rate_as`: a work-conserving `tx_share` of
//! x of the link, a `tx_max` ceiling, or both), in steps of `rate_step`; **z is its CPU share**:
//! its cap is `100 z` percent, in steps of `cap_step_pct` (clamped by the engine to
//! `[caps.floor_pct, 100 x vCPUs]`). `lever = "rate"` sets only limits, `"cpu"` only caps,
//! `"both"` (the default) both. Charges in Resos stay at rate 1: DRUM prices with u, not with
//! the ledger.

pub mod config;
pub mod host;

use crate::config::Lever;
use crate::ledger::Account;
use crate::policy::{Ctx, Policy};
use crate::types::{CapReason, TxLimit, TxReason, VmId};
use config::{DrumConfig, RateAs};
use host::{DrumHost, Shape, VmInput};

/// The z capacity without a host-wide CPU limit: more CPUs than any host has, so it never binds.
const UNBOUNDED_CPUS: f64 = 1e9;

/// What the policy tracks of one VM.
#[derive(Debug, Clone, Copy, Default)]
struct Track {
    /// The period so far: bytes sent.
    bytes: u64,
    /// The period so far: the sum of the intervals' CPU percent.
    cpu_sum: f64,
    /// The decaying peak of its link rate (fraction of the link).
    demand: f64,
    /// Smoothed CPU per unit of link rate (`None` until it first sent).
    a: Option<f64>,
}

/// The DRUM policy.
#[derive(Debug)]
pub struct Drum {
    cfg: DrumConfig,
    lever: Lever,
    per_period: u64,
    /// One per account, in the accounts' (id) order.
    tracks: Vec<(VmId, Track)>,
    host: DrumHost,
    inputs: Vec<VmInput>,
    /// Solves that failed (a bug: inputs are validated); every VM is released when one does.
    failures: u64,
}

impl Drum {
    /// From the `[drum]` section, the levers, intervals per actuation period and the interval.
    pub fn new(cfg: DrumConfig, lever: Lever, per_period: u64) -> Self {
        Self {
            cfg,
            lever,
            per_period: per_period.max(1),
            tracks: Vec::new(),
            host: DrumHost::default(),
            inputs: Vec::new(),
            failures: 0,
        }
    }

    /// The host's solve (its state and last summary).
    pub fn host(&self) -> &DrumHost {
        &self.host
    }

    /// Solves that failed.
    pub fn failures(&self) -> u64 {
        self.failures
    }

    /// Makes `tracks` one per account, in order (VMs that stay keep theirs): only when the VM
    /// set changed.
    fn sync(&mut self, accounts: &[Account]) {
        let same = self.tracks.len() == accounts.len()
            && self.tracks.iter().zip(accounts).all(|(t, a)| t.0 == a.id());
        if same {
            return;
        }
        let old = std::mem::take(&mut self.tracks);
        self.tracks = accounts
            .iter()
            .map(|a| {
                let t = old
                    .binary_search_by_key(&a.id(), |t| t.0)
                    .map_or_else(|_| Track::default(), |i| old[i].1);
                (a.id(), t)
            })
            .collect();
    }

    /// Updates every VM's demand and a_j from the period; fills `self.inputs` with the active
    /// VMs; returns the z capacity (CPUs; without a host-wide limit, one that cannot bind).
    fn measure(&mut self, ctx: &Ctx<'_>, accounts: &[Account]) -> f64 {
        self.sync(accounts);
        let c = &self.cfg;
        let period_s = (self.per_period * ctx.cfg.ledger.interval_ms) as f64 / 1000.0;
        let link_bits = (ctx.link_bps * period_s).max(1.0);
        self.inputs.clear();
        for (acc, (_, t)) in accounts.iter().zip(&mut self.tracks) {
            let rate = t.bytes as f64 * 8.0 / link_bits;
            let cpu = t.cpu_sum / self.per_period as f64 / 100.0;
            t.demand = rate.max(t.demand * c.demand_memory);
            if rate > 0.0 {
                let a = (cpu / rate).clamp(c.a_min, c.a_max);
                t.a = Some(t.a.map_or(a, |old| c.a_memory * old + (1.0 - c.a_memory) * a));
            }
            t.bytes = 0;
            t.cpu_sum = 0.0;
            let (Some(a), true) = (t.a, t.demand >= c.min_demand && t.demand > 0.0) else {
                continue;
            };
            let class = if acc.ent.within() {
                c.weights.light
            } else {
                c.weights.bulk
            };
            self.inputs.push(VmInput {
                vm: acc.id(),
                a,
                weight: class * acc.spec.weight,
            });
        }
        if c.cpu_capacity_pct > 0.0 {
            c.cpu_capacity_pct / 100.0
        } else {
            UNBOUNDED_CPUS
        }
    }
}

/// A VM's transmit limit for rate x (fraction of the link).
fn limit(cfg: &DrumConfig, ctx: &Ctx<'_>, x: f64) -> TxLimit {
    let step = cfg.rate_step;
    let q = ((x / step).round() * step).clamp(step, 1.0);
    let floor = ctx.cfg.rates.floor_pct / 100.0;
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let bps = |f: f64| Some(((f * ctx.link_bps).round() as u64).max(1));
    match cfg.rate_as {
        RateAs::Share => TxLimit::new(bps(q), None),
        RateAs::Ceiling => TxLimit::new(None, bps(q.max(floor))),
        RateAs::Both => TxLimit::new(bps(q), bps(q.max(floor))),
    }
}

impl Policy for Drum {
    fn name(&self) -> &'static str {
        "drum"
    }

    fn price(&mut self, _ctx: &Ctx<'_>, accounts: &mut [Account]) {
        self.sync(accounts);
        for (acc, (_, t)) in accounts.iter_mut().zip(&mut self.tracks) {
            t.bytes = t.bytes.saturating_add(acc.bytes);
            t.cpu_sum += acc.cpu_pct;
            acc.rate = 1.0;
        }
    }

    fn actuate(&mut self, ctx: &Ctx<'_>, accounts: &mut [Account]) {
        let z_capacity = self.measure(ctx, accounts);
        let shape = Shape {
            alpha: self.cfg.alpha,
            k: self.cfg.k,
            beta: self.cfg.beta,
            rho: self.cfg.rho,
            x_capacity: self.cfg.link_capacity,
            z_capacity,
        };
        let solved = if self.inputs.is_empty() {
            None
        } else {
            match self.host.solve(&self.inputs, shape, self.cfg.iterations) {
                Ok(st) => Some(st),
                Err(_) => {
                    self.failures += 1;
                    None
                }
            }
        };
        let cap_step = self.cfg.cap_step_pct;
        let mut j = 0;
        for acc in accounts.iter_mut() {
            let here = solved.and_then(|st| {
                (st.vms.get(j) == Some(&acc.id())).then(|| (st.host.x[j], st.host.z[j]))
            });
            let Some((x, z)) = here else {
                // Idle (or no solution): nothing is held back.
                acc.proposal = Some((
                    acc.max_cap,
                    CapReason::Allocation {
                        cpu_pct: acc.max_cap,
                    },
                ));
                if self.lever.rate() {
                    acc.tx_proposal = Some((TxLimit::NONE, TxReason::Release));
                }
                continue;
            };
            j += 1;
            let cap = if self.lever.cpu() {
                ((100.0 * z / cap_step).round() * cap_step).max(cap_step)
            } else {
                acc.max_cap
            };
            acc.proposal = Some((cap, CapReason::Allocation { cpu_pct: 100.0 * z }));
            if self.lever.rate() {
                let tx = limit(&self.cfg, ctx, x);
                acc.tx_proposal = Some((
                    tx,
                    TxReason::Allocation {
                        link_pct: 100.0 * x,
                    },
                ));
            }
        }
    }

    fn proposes_tx(&self) -> bool {
        self.lever.rate()
    }
}
