//! The governor (v3): our policy for what the ResEx paper leaves open, and one that holds when
//! tenants lie or do not run the agent.
//!
//! **Protection comes from the entitlement.** The engine's guard ([`crate::entitlement`])
//! makes every VM's guaranteed transmit rate its entitlement, and the port's committed tier
//! serves traffic within it first, each message by its deadline: a VM sending within its
//! entitlement is served about as if it were alone, whether or not it runs the agent. With
//! the rate lever (`lever = "rate"` or `"both"`, the default) that is all the governor does:
//! nothing above an entitlement can delay traffic within one by more than a packet, so a
//! ceiling or a cap on a VM in excess could only take its work without helping anyone (the
//! controller below stays at R = 1).
//!
//! On a host without the rate lever (`lever = "cpu"`, `governor-cpu.toml`), the CPU cap is
//! the only lever, and a controller holds back the VMs above their entitlement when one within
//! it is slowed down, never below their entitlement:
//!
//! - **The host judges.** A VM's *interference* is its I/O slowdown as the NIC measured it
//!   ([`crate::evidence::Evidence::host_slowdown`]: the mean sojourn of its work requests over
//!   their wire time plus their quiet wait), the same whether or not it runs the agent. Where
//!   the NIC measures nothing, it is the rise of the VM's latency report over its baseline,
//!   as the host credits it (the evidence module has discounted what the link contradicts).
//!   Only VMs within their entitlement count: a VM above it waits behind its own excess.
//! - **Congestion gates.** The controller rises only in an actuation period in which at least
//!   `congested_share` of the intervals had a link utilisation of at least
//!   `congestion_util`.
//! - **A proportional-integral controller sets R.** Its error is the worst interference minus
//!   `setpoint`; per period `ln R += kp x (e - e_prev) + ki x e`, the step clamped to
//!   `max_step` and `ln R` to `[0, ln max_rate]`; below the setpoint R falls again (work
//!   conservation). While nothing is measured for `report_timeout_ms`, `ln R` decays by
//!   `idle_decay` per period.
//! - **Aggressors are the VMs in excess,** weighed by how far above their entitlement they
//!   sent in congested periods (smoothed, 9/10 old), never by what anyone reports.
//! - **Caps.** An aggressor's cap is `base / (1 + (R - 1) x w)`; the guard keeps it at or
//!   above its CPU floor and the cap that keeps it at its entitlement.
//!
//! Charges in Resos follow the rate (`1 + (R - 1) x w`), so the ledger shows what interference
//! costs; FreeMarket's balance rule does not cut caps here.

use crate::config::{GovernorConfig, Lever};
use crate::interference::{interference, valid_report, Measure};
use crate::ledger::Account;
use crate::policy::{Ctx, Policy};
use crate::types::{CapReason, TxLimit, TxReason, VmId};
use std::collections::{BTreeMap, BTreeSet};

/// `ln R` below this snaps to 0 (so backing off ends).
const LOG_EPSILON: f64 = 1e-4;
/// Per congested period an aggressor's weight keeps this much of its old value: weights that
/// followed the ceilings they cause quickly would hand the charge back and forth.
const WEIGHT_MEMORY: f64 = 0.9;
/// Aggressor weights below this are dropped.
const WEIGHT_EPSILON: f64 = 1e-3;

/// The governor policy.
#[derive(Debug, Clone)]
pub struct Governor {
    cfg: GovernorConfig,
    timeout_intervals: u64,
    /// `ln R`: the controller's state.
    log_rate: f64,
    /// The last period's error (0 after a silence).
    e_prev: f64,
    /// Interval of the last measure of interference.
    last_measure: Option<u64>,
    /// The period so far: intervals, and those whose link utilisation reached
    /// `congestion_util`.
    util_n: u32,
    busy: u32,
    /// The period so far: the worst report-based interference and whose (VMs the NIC does
    /// not measure).
    reported: Option<(f64, VmId)>,
    /// Smoothed aggressor weights.
    weights: BTreeMap<VmId, f64>,
    /// The VM the limits are for (for reasons).
    victim: Option<VmId>,
    /// The levers.
    lever: Lever,
    /// Intervals per actuation period.
    per_period: u64,
}

impl Governor {
    /// From the `[governor]` section and the ledger's interval.
    pub fn new(cfg: GovernorConfig, interval_ms: u64) -> Self {
        let timeout_intervals = cfg.report_timeout_ms.div_ceil(interval_ms.max(1));
        Self {
            cfg,
            timeout_intervals,
            log_rate: 0.0,
            e_prev: 0.0,
            last_measure: None,
            util_n: 0,
            busy: 0,
            reported: None,
            weights: BTreeMap::new(),
            victim: None,
            lever: Lever::Cpu,
            per_period: 10,
        }
    }

    /// The levers it acts through (`per_period`: intervals per actuation period).
    pub fn with_lever(mut self, lever: Lever, per_period: u64) -> Self {
        self.lever = lever;
        self.per_period = per_period.max(1);
        self
    }

    /// The split of R into ceilings and caps: (largest R the ceilings use, R_tx, R_cpu).
    fn split(&self, floor_pct: f64) -> (f64, f64, f64) {
        let max_tx = 100.0 / floor_pct.max(0.1);
        let r = self.total_rate();
        match self.lever {
            Lever::Cpu => (1.0, 1.0, r),
            Lever::Rate => (max_tx, r.min(max_tx), 1.0),
            Lever::Both => {
                let rt = r.min(max_tx);
                (max_tx, rt, r / rt)
            }
        }
    }

    /// The largest total rate the controller may reach with these levers.
    fn max_total(&self, floor_pct: f64) -> f64 {
        let max_tx = 100.0 / floor_pct.max(0.1);
        match self.lever {
            Lever::Cpu => self.cfg.max_rate,
            Lever::Rate => max_tx,
            Lever::Both => max_tx * self.cfg.max_rate,
        }
    }

    /// The controller's total rate R.
    pub fn total_rate(&self) -> f64 {
        self.log_rate.exp()
    }

    fn measure(&self) -> Measure {
        Measure {
            baseline_reports: self.cfg.baseline_reports,
            follows_lower: self.cfg.baseline_follows_lower,
            stddev_floor: self.cfg.stddev_floor,
            max_intf: self.cfg.max_intf,
            use_stddev: false,
        }
    }

    /// The worst interference among the VMs within their entitlement this period: the NIC's
    /// slowdown where it measures, else the credited report.
    fn worst(&self, accounts: &[Account]) -> Option<(f64, VmId)> {
        let host = accounts
            .iter()
            .filter(|a| a.ent.within())
            .filter_map(|a| Some((a.evidence.host_slowdown?.min(self.cfg.max_intf), a.id())));
        host.chain(self.reported)
            .fold(None, |w: Option<(f64, VmId)>, (e, id)| match w {
                Some((we, _)) if we >= e => w,
                _ => Some((e, id)),
            })
    }

    /// One controller step at the end of a period; returns whether the period was congested.
    fn control(
        &mut self,
        interval: u64,
        worst: Option<(f64, VmId)>,
        saturated: bool,
        max_total: f64,
    ) -> bool {
        let congested = self.util_n > 0
            && f64::from(self.busy) >= self.cfg.congested_share * f64::from(self.util_n);
        let max_log = max_total.ln();
        match worst {
            Some((intf, victim)) => {
                self.last_measure = Some(interval);
                let e = intf - self.cfg.setpoint;
                let step = self.cfg.max_step;
                let mut dx = (self.cfg.kp * (e - self.e_prev) + self.cfg.ki * e).clamp(-step, step);
                if dx > 0.0 && (!congested || saturated) {
                    // The host sees no congestion, or the levers are at their floors already.
                    dx = 0.0;
                }
                self.log_rate = (self.log_rate + dx).clamp(0.0, max_log);
                self.e_prev = e;
                if intf > self.cfg.sla_threshold {
                    self.victim = Some(victim);
                }
            }
            None => {
                let silent = self
                    .last_measure
                    .is_none_or(|t| interval.saturating_sub(t) >= self.timeout_intervals);
                if silent {
                    self.log_rate *= self.cfg.idle_decay;
                    self.e_prev = 0.0;
                }
            }
        }
        if self.log_rate < LOG_EPSILON {
            self.log_rate = 0.0;
        }
        congested
    }

    /// New aggressor weights: each VM in excess by how far above its entitlement it sent this
    /// period (kept when nobody was above).
    fn reweigh(&mut self, accounts: &[Account]) {
        let excess: BTreeMap<VmId, f64> = accounts
            .iter()
            .filter(|a| a.ent.excess)
            .map(|a| (a.id(), (a.ent.period_bps - a.ent.tx_bps).max(0.0)))
            .filter(|&(_, x)| x > 0.0)
            .collect();
        let esum: f64 = excess.values().sum();
        if esum <= 0.0 {
            return;
        }
        let ids: BTreeSet<VmId> = self.weights.keys().chain(excess.keys()).copied().collect();
        for id in ids {
            let new = excess.get(&id).map_or(0.0, |e| e / esum);
            let old = self.weights.get(&id).copied().unwrap_or(0.0);
            let w = WEIGHT_MEMORY * old + (1.0 - WEIGHT_MEMORY) * new;
            if w < WEIGHT_EPSILON {
                self.weights.remove(&id);
            } else {
                self.weights.insert(id, w);
            }
        }
    }
}

impl Policy for Governor {
    fn name(&self) -> &'static str {
        "governor"
    }

    fn price(&mut self, ctx: &Ctx<'_>, accounts: &mut [Account]) {
        self.util_n += 1;
        if ctx.link_util >= self.cfg.congestion_util {
            self.busy += 1;
        }
        let m = self.measure();
        for acc in accounts.iter_mut() {
            let Some(report) = acc.report else { continue };
            if !valid_report(&report, self.cfg.min_report_samples) {
                continue;
            }
            let Some(intf) = interference(&m, &mut acc.baseline, &report) else {
                continue;
            };
            acc.intf = Some(intf);
            // Reports count only where the NIC measures nothing, and only for VMs within
            // their entitlement.
            if acc.evidence.host_slowdown.is_some() || !acc.ent.within() {
                continue;
            }
            if self.reported.is_none_or(|(w, _)| intf > w) {
                self.reported = Some((intf, acc.id()));
            }
        }
    }

    fn actuate(&mut self, ctx: &Ctx<'_>, accounts: &mut [Account]) {
        let floor = ctx.cfg.caps.floor_pct;
        let tx_floor = ctx.cfg.rates.floor_pct;
        // Anti-windup: every aggressor already at its floor means a higher rate does nothing.
        let (max_tx, rt, _) = self.split(tx_floor);
        let saturated = !self.weights.is_empty()
            && accounts.iter().all(|a| {
                !self.weights.contains_key(&a.id())
                    || match self.lever {
                        Lever::Rate => rt >= max_tx - 1e-9,
                        _ => a.cap <= floor.min(a.max_cap) + 1e-9,
                    }
            });
        // With the rate lever the committed tier protects: no controller (see above).
        let worst = if self.lever.rate() {
            None
        } else {
            self.worst(accounts)
        };
        let congested = self.control(ctx.interval, worst, saturated, self.max_total(tx_floor));
        if congested {
            self.reweigh(accounts);
        }
        let (_, r_tx, r_cpu) = self.split(tx_floor);
        for acc in accounts.iter_mut() {
            let w = if acc.ent.excess {
                self.weights.get(&acc.id()).copied().unwrap_or(0.0)
            } else {
                0.0
            };
            acc.rate = 1.0 + (r_cpu * r_tx - 1.0) * w;
            let cap_rate = 1.0 + (r_cpu - 1.0) * w;
            let reason = if acc.rate > acc.rate_at_decision + 1e-12 {
                CapReason::Interferer {
                    victim: self.victim.unwrap_or(acc.id()),
                    rate: acc.rate,
                }
            } else if acc.rate < acc.rate_at_decision - 1e-12 {
                CapReason::Decay { rate: acc.rate }
            } else {
                CapReason::EpochReplenish
            };
            acc.rate_at_decision = acc.rate;
            acc.proposal = Some((acc.max_cap / cap_rate, reason));
            if self.lever.rate() {
                acc.tx_proposal = Some(self.tx_of(ctx, acc.id(), r_tx, w, tx_floor));
            }
        }
        self.busy = 0;
        self.util_n = 0;
        self.reported = None;
    }

    fn proposes_tx(&self) -> bool {
        self.lever.rate()
    }
}

impl Governor {
    /// An aggressor's ceiling (none for everyone else); the guarantee is the guard's.
    fn tx_of(
        &self,
        ctx: &Ctx<'_>,
        id: VmId,
        r_tx: f64,
        w: f64,
        floor_pct: f64,
    ) -> (TxLimit, TxReason) {
        let frac = 1.0 / (1.0 + (r_tx - 1.0) * w);
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let max_bps = (frac < 1.0 - 1e-9).then(|| {
            (frac.max(floor_pct / 100.0) * ctx.link_bps)
                .round()
                .max(1.0) as u64
        });
        let reason = if max_bps.is_some() {
            TxReason::Limit {
                victim: self.victim.unwrap_or(id),
            }
        } else {
            TxReason::Release
        };
        (TxLimit::new(None, max_bps), reason)
    }
}
