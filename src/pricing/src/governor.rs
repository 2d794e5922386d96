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
//!
//! **Two levers** (`lever = "both"`, the shipped default; `"cpu"` is the cap-only governor
//! above, `"rate"` never caps):
//! - **Shares first.** The VMs that report their latency (latency-sensitive: they reported
//!   within `report_timeout_ms`) form a class, and each gets the class's guaranteed transmit
//!   share: `share_headroom x` the largest demand among them (a VM's demand is its peak rate,
//!   decaying by `demand_memory` per period; at least `share_min_mbps`), rounded up to a power
//!   of two of Mbit/s and lowered only when the demand falls below half of it, so weights stay
//!   put. One share for the class, not one per VM: with weights of their own, a small
//!   latency-sensitive VM would wait behind the larger ones' longer turns (in the lab, a 4 KiB
//!   VM beside 64 and 256 KiB ones: p99 6.8 x alone); with one, they alternate packet by packet
//!   as they do with no setting, and together come before everyone else. Shares are work
//!   conserving: an aggressor gets every bit the class does not use, so it keeps its
//!   throughput, while a victim's packets wait for at most one of the aggressor's. This alone
//!   brings victims back to their latency alone.
//! - **Ceilings when shares are not enough.** The controller's R (above) acts on the aggressors'
//!   transmit ceilings first: `tx_max = link / (1 + (R_tx - 1) x weight)` with
//!   `R_tx = min(R, 100 / rates.floor_pct)`, down to `rates.floor_pct` of the link.
//! - **The CPU cap last.** Only the part of R beyond the ceilings' range, `R / R_tx`, lowers
//!   caps, as above.

use crate::config::{GovernorConfig, Lever};
use crate::interference::{interference, valid_report, Measure};
use crate::ledger::Account;
use crate::policy::{Ctx, Policy};
use crate::types::{CapReason, TxLimit, TxReason, VmId};
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
    /// The levers.
    lever: Lever,
    /// Intervals per actuation period.
    per_period: u64,
    /// The period so far: bytes per VM.
    bytes: BTreeMap<VmId, u64>,
    /// Each VM's demand, bits per second (a decaying peak).
    demand: BTreeMap<VmId, f64>,
    /// Interval of each VM's last usable report (the latency-sensitive VMs).
    reported: BTreeMap<VmId, u64>,
    /// The shares in force, bits per second.
    shares: BTreeMap<VmId, u64>,
    /// The latency-sensitive class's share, bits per second.
    class_share: Option<u64>,
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
            lever: Lever::Cpu,
            per_period: 10,
            bytes: BTreeMap::new(),
            demand: BTreeMap::new(),
            reported: BTreeMap::new(),
            shares: BTreeMap::new(),
            class_share: None,
        }
    }

    /// The levers it acts through (`per_period`: intervals per actuation period).
    pub fn with_lever(mut self, lever: Lever, per_period: u64) -> Self {
        self.lever = lever;
        self.per_period = per_period.max(1);
        self
    }

    /// The largest R the ceilings can use, and the split of R into ceilings and caps.
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

    /// Demands from the period's bytes, and the shares of the latency-sensitive VMs.
    fn protect(&mut self, ctx: &Ctx<'_>, accounts: &[Account]) {
        let period_s = (self.per_period * ctx.cfg.ledger.interval_ms) as f64 / 1000.0;
        let m = self.cfg.demand_memory;
        for acc in accounts {
            let b = self.bytes.get(&acc.id()).copied().unwrap_or(0);
            let now = b as f64 * 8.0 / period_s.max(1e-9);
            let d = self.demand.entry(acc.id()).or_insert(0.0);
            *d = now.max(*d * m);
        }
        self.demand
            .retain(|id, _| accounts.binary_search_by_key(id, Account::id).is_ok());
        self.reported
            .retain(|_, t| ctx.interval.saturating_sub(*t) < self.timeout_intervals);
        // The latency-sensitive class: every VM that reported lately. They all get the class's
        // share (twice the largest demand among them), so among themselves they alternate packet
        // by packet as they would with no setting, and together they come before everyone else.
        let want = accounts
            .iter()
            .filter(|a| self.reported.contains_key(&a.id()))
            .map(|a| self.demand.get(&a.id()).copied().unwrap_or(0.0) * self.cfg.share_headroom)
            .fold(self.cfg.share_min_mbps * 1e6, f64::max);
        // A power of two of Mbit/s, at most the link.
        let mbps = (want / 1e6).max(1.0);
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let q = ((2f64.powf(mbps.log2().ceil())) * 1e6).min(ctx.link_bps.max(1e6)) as u64;
        let next = match self.class_share {
            Some(c) if q <= c && q * 2 > c => c,
            _ => q,
        };
        self.class_share = Some(next);
        self.shares.clear();
        for acc in accounts {
            if self.reported.contains_key(&acc.id()) {
                self.shares.insert(acc.id(), next);
            }
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
    fn control(&mut self, interval: u64, saturated: bool, max_total: f64) -> bool {
        let congested = self.util_n > 0
            && f64::from(self.busy) >= self.cfg.congested_share * f64::from(self.util_n);
        let max_log = max_total.ln();
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
            *self.bytes.entry(acc.id()).or_insert(0) += acc.bytes;
            let Some(report) = acc.report else { continue };
            if !valid_report(&report, self.cfg.min_report_samples) {
                continue;
            }
            self.last_report = Some(ctx.interval);
            self.reported.insert(acc.id(), ctx.interval);
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
        let floor = ctx.cfg.caps.floor_pct;
        let tx_floor = ctx.cfg.rates.floor_pct;
        // Anti-windup: when every aggressor is already at its floor (the caps' with the CPU
        // lever, the ceilings' with the rate lever alone), a higher rate cannot do more, so the
        // controller does not integrate upwards.
        let (max_tx, rt, _) = self.split(tx_floor);
        let saturated = !self.weights.is_empty()
            && accounts.iter().all(|a| {
                !self.weights.contains_key(&a.id())
                    || match self.lever {
                        Lever::Rate => rt >= max_tx - 1e-9,
                        _ => a.cap <= floor.min(a.max_cap) + 1e-9,
                    }
            });
        let congested = self.control(ctx.interval, saturated, self.max_total(tx_floor));
        if congested {
            // Shares are judged only while the link is contended: an aggressor that a cap
            // silenced keeps its weight (or it would get its cap back and return at once).
            self.reweigh(accounts);
        }
        if self.lever.rate() {
            self.protect(ctx, accounts);
        }
        let (_, r_tx, r_cpu) = self.split(tx_floor);
        for acc in accounts.iter_mut() {
            let w = if self.victims.contains(&acc.id()) {
                0.0
            } else {
                self.weights.get(&acc.id()).copied().unwrap_or(0.0)
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
        self.mtus.clear();
        self.bytes.clear();
        self.worst = None;
        self.victims.clear();
    }

    fn proposes_tx(&self) -> bool {
        self.lever.rate()
    }
}

impl Governor {
    /// A VM's transmit limit: its share, if latency-sensitive, and its ceiling, if an
    /// aggressor the controller holds back.
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
        let tx = TxLimit {
            share_bps: self.shares.get(&id).copied(),
            max_bps,
            weight: None,
        };
        let reason = if max_bps.is_some() {
            TxReason::Limit {
                victim: self.victim.unwrap_or(id),
            }
        } else if tx.share_bps.is_some() {
            TxReason::Protect { victim: id }
        } else {
            TxReason::Release
        };
        (tx, reason)
    }
}
