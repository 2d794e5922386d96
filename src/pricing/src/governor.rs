//! The governor: our policy for what the ResEx paper leaves open.
//!
//! - **The host judges congestion, not the guest.** A report only raises a charge in an
//!   actuation period in which the host itself saw the link saturated: at least
//!   `congested_share` of its intervals had a utilisation (the monitor's bytes and headers over
//!   the link's rate) of at least `congestion_util`. Interference on an RDMA link is a matter of
//!   bursts (a 2 MiB write holds the port for 2 ms), so the test is per interval, not a mean. A
//!   guest reporting false latency while the link never fills taxes nobody.
//! - **The charge is split by share.** An aggressor is a VM, not a victim this period, that sent
//!   more than its fair share (by weight, among the VMs that sent) of the period's MTUs. Each
//!   aggressor's weight is its excess over its fair share, normalised over the aggressors and
//!   smoothed over periods (9/10 old, 1/10 new), judged only in congested periods (a VM a cap
//!   silenced keeps its weight); its rate is `1 + (R - 1) x weight`.
//! - **A proportional-integral controller sets R.** Its error is the worst victim's
//!   interference (the relative rise of its mean latency over its learned baseline) minus
//!   `setpoint`; per actuation period `ln R += kp x (e - e_prev) + ki x e`, the step clamped to
//!   `max_step` and `ln R` to `[0, ln max_rate]`. (The stddev, which IOShares also uses, jumps
//!   with a single slow request and would make the loop kick.) Working on `ln R`
//!   makes each step a cap *factor*, so the loop behaves the same at 90% and at 5% caps. Below
//!   the setpoint the error is negative and R falls again: aggressors get back whatever the
//!   victim does not need (work conservation), and the caps settle instead of sawing. While no
//!   VM has reported for `report_timeout_ms`, `ln R` decays by `idle_decay` per period.
//!
//! Caps are `base / rate`. Every VM is still charged in Resos at its rate (the ledger shows what
//! interference costs), but FreeMarket's balance rule does not cut caps here: its cuts act on
//! the same cap, hold it down after the victim has recovered and are all lifted at once by the
//! epoch's replenish, which in the lab made a one-second sawtooth of the aggressor's cap.

use crate::config::GovernorConfig;
use crate::interference::{interference, valid_report, Measure};
use crate::ledger::Account;
use crate::policy::{Ctx, Policy};
use crate::types::{CapReason, VmId};
use std::collections::{BTreeMap, BTreeSet};

/// `ln R` below this snaps to 0 (so backing off ends).
const LOG_EPSILON: f64 = 1e-4;
/// Per congested period an aggressor's weight keeps this much of its old value: shares react
/// to the caps they cause (a capped aggressor's share falls), so weights that followed them
/// quickly would hand the charge back and forth between aggressors.
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
    /// Interval of the last usable report.
    last_report: Option<u64>,
    /// The period so far: intervals, and those whose link utilisation reached
    /// `congestion_util`.
    util_n: u32,
    busy: u32,
    /// The period so far: MTUs per VM.
    mtus: BTreeMap<VmId, u64>,
    /// The period so far: the worst error and whose.
    worst: Option<(f64, VmId)>,
    /// The period so far: VMs above their SLA.
    victims: BTreeSet<VmId>,
    /// Smoothed aggressor weights.
    weights: BTreeMap<VmId, f64>,
    /// The victim the charges are for (for reasons).
    victim: Option<VmId>,
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
            last_report: None,
            util_n: 0,
            busy: 0,
            mtus: BTreeMap::new(),
            worst: None,
            victims: BTreeSet::new(),
            weights: BTreeMap::new(),
            victim: None,
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

    /// One controller step at the end of a period; returns whether the period was congested.
    fn control(&mut self, interval: u64, saturated: bool) -> bool {
        let congested = self.util_n > 0
            && f64::from(self.busy) >= self.cfg.congested_share * f64::from(self.util_n);
        let max_log = self.cfg.max_rate.ln();
        match self.worst {
            Some((e, victim)) => {
                let step = self.cfg.max_step;
                let mut dx = (self.cfg.kp * (e - self.e_prev) + self.cfg.ki * e).clamp(-step, step);
                if dx > 0.0 && (!congested || saturated) {
                    // The host sees no congestion (a report alone cannot raise a charge), or
                    // the caps are at the floor already.
                    dx = 0.0;
                }
                self.log_rate = (self.log_rate + dx).clamp(0.0, max_log);
                self.e_prev = e;
                if e > 0.0 {
                    self.victim = Some(victim);
                }
            }
            None => {
                let silent = self
                    .last_report
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

    /// New aggressor weights from the period's MTUs (kept when nobody exceeded a fair share).
    fn reweigh(&mut self, accounts: &[Account]) {
        let sent: Vec<(VmId, f64, u64)> = accounts
            .iter()
            .filter_map(|a| {
                let m = self.mtus.get(&a.id()).copied().unwrap_or(0);
                (m > 0).then_some((a.id(), a.spec.weight.max(f64::MIN_POSITIVE), m))
            })
            .collect();
        let total: u64 = sent.iter().map(|s| s.2).sum();
        let wsum: f64 = sent.iter().map(|s| s.1).sum();
        let mut excess = BTreeMap::new();
        let mut esum = 0.0;
        for &(id, w, m) in &sent {
            if self.victims.contains(&id) || total == 0 {
                continue;
            }
            let share = m as f64 / total as f64;
            let over = share - w / wsum;
            if over > 0.0 {
                excess.insert(id, over);
                esum += over;
            }
        }
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
        // The largest sender this interval, for the row's "blamed" column.
        let top = accounts
            .iter()
            .filter(|a| a.mtus > 0)
            .max_by(|a, b| a.mtus.cmp(&b.mtus).then(b.id().cmp(&a.id())))
            .map(Account::id);
        for acc in accounts.iter_mut() {
            *self.mtus.entry(acc.id()).or_insert(0) += acc.mtus;
            let Some(report) = acc.report else { continue };
            if !valid_report(&report, self.cfg.min_report_samples) {
                continue;
            }
            self.last_report = Some(ctx.interval);
            let Some(intf) = interference(&m, &mut acc.baseline, &report) else {
                continue;
            };
            acc.intf = Some(intf);
            let sla = acc.spec.sla_threshold.unwrap_or(self.cfg.sla_threshold);
            if intf > sla {
                self.victims.insert(acc.id());
                acc.interferer = top.filter(|&t| t != acc.id());
            }
            let e = intf - self.cfg.setpoint.min(sla);
            if self.worst.is_none_or(|(w, _)| e > w) {
                self.worst = Some((e, acc.id()));
            }
        }
    }

    fn actuate(&mut self, ctx: &Ctx<'_>, accounts: &mut [Account]) {
        // Anti-windup: when every aggressor's cap is already at the floor, a higher rate cannot
        // do more, so the controller does not integrate upwards.
        let floor = ctx.cfg.caps.floor_pct;
        let saturated = !self.weights.is_empty()
            && accounts.iter().all(|a| {
                !self.weights.contains_key(&a.id()) || a.cap <= floor.min(a.max_cap) + 1e-9
            });
        let congested = self.control(ctx.interval, saturated);
        if congested {
            // Shares are judged only while the link is contended: an aggressor that a cap
            // silenced keeps its weight (or it would get its cap back and return at once).
            self.reweigh(accounts);
        }
        let extra = self.total_rate() - 1.0;
        for acc in accounts.iter_mut() {
            let w = if self.victims.contains(&acc.id()) {
                0.0
            } else {
                self.weights.get(&acc.id()).copied().unwrap_or(0.0)
            };
            acc.rate = 1.0 + extra * w;
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
            acc.proposal = Some((acc.max_cap / acc.rate, reason));
        }
        self.busy = 0;
        self.util_n = 0;
        self.mtus.clear();
        self.worst = None;
        self.victims.clear();
    }
}
