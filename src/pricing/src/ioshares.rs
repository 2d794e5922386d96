//! IOShares (paper Algorithm 2): a VM whose reported latency rose above its SLA charges its
//! neighbours for the interference.
//!
//! Two attributions (`mode`):
//! - **`paper`**, the paper's rule, below: the neighbour with the most MTUs in the interval is
//!   the interferer. With several latency-sensitive VMs this names whichever happened to send
//!   most in that interval: a small innocent VM is charged (and capped to the floor) for a large
//!   one's bursts. `policies/ioshares-paper.toml`, what `resex lab paper` runs.
//! - **`share`** (the default): every neighbour that is not itself a victim in the actuation
//!   period (only a VM within its entitlement can be one) and sends above its entitlement (the
//!   host's measure) is charged `IntfPercent x`
//!   its share of the link's *capacity* while the victim waited (its bytes over the link's rate, smoothed over intervals: `share_memory`). The
//!   aggressor holding the link pays; a VM that sent little pays little; a VM that reports
//!   interference pays nothing for that period; and on a quiet link every share is small, so
//!   a report alone (a lying guest) cannot drive a neighbour's rate up much.
//!
//! The paper's rule, in detail.
//! Per report (in VM-id order):
//! `IntfPercent = max((mean - base_mean) / base_mean, (stddev - base_stddev) / base_stddev)`;
//! above the VM's SLA threshold the interferer is the *other* VM with the most MTUs this interval
//! (ties: lower id), `IOShare = its MTUs / all MTUs`, `r' = IOShare x IntfPercent`, and its rate
//! rises by `r'` at once (it is charged at the new rate this interval). At each actuation
//! boundary the cap is `base x cut_factor ^ cuts / rate`, which is the paper's
//! `cap_prev x rate_prev / (rate_prev + r')`; a VM no report named during the period decays
//! towards rate 1 (`1 + (rate - 1) x decay`), unless reports have merely gone missing (then
//! rates hold until `report_timeout_ms` passes without any report).

use crate::config::{IoSharesConfig, IoSharesMode};
use crate::interference::{interference, valid_report, Measure};
use crate::ledger::{Account, BaselineState};
use crate::policy::{apply_balance_rule, balance_cap, Ctx, Policy};
use crate::types::{CapReason, LatencyReport, VmId};
use std::collections::BTreeSet;

/// Rates within this distance of 1 snap to 1 (so decay ends).
const RATE_EPSILON: f64 = 1e-3;

/// The IOShares policy.
#[derive(Debug, Clone)]
pub struct IoShares {
    cfg: IoSharesConfig,
    timeout_intervals: u64,
    /// Interval of the last accepted report from any VM.
    last_report: Option<u64>,
    /// A report was accepted in the current actuation period.
    reported_this_period: bool,
    /// (interferer index, victim, r') collected during a pass; reused.
    raises: Vec<(usize, VmId, f64)>,
    /// `share` mode: each VM's smoothed share of the link's capacity.
    link_share: std::collections::BTreeMap<VmId, f64>,
    /// `share` mode: VMs whose reports showed interference above their SLA this period.
    victims: BTreeSet<VmId>,
}

impl IoShares {
    /// From the `[ioshares]` section and the ledger's timing.
    pub fn new(cfg: IoSharesConfig, _per_actuation: u64, interval_ms: u64) -> Self {
        let timeout_intervals = cfg.report_timeout_ms.div_ceil(interval_ms.max(1));
        Self {
            cfg,
            timeout_intervals,
            last_report: None,
            reported_this_period: false,
            raises: Vec::new(),
            link_share: std::collections::BTreeMap::new(),
            victims: BTreeSet::new(),
        }
    }

    /// `share` mode: updates each VM's smoothed share of the link's capacity.
    fn smooth_shares(&mut self, ctx: &Ctx<'_>, accounts: &[Account]) {
        let capacity = ctx.link_bps * ctx.cfg.ledger.interval_ms as f64 / 1000.0;
        let m = self.cfg.share_memory;
        for acc in accounts {
            let now = if capacity > 0.0 {
                (acc.bytes as f64 * 8.0 / capacity).min(1.0)
            } else {
                0.0
            };
            let s = self.link_share.entry(acc.id()).or_insert(0.0);
            *s = m * *s + (1.0 - m) * now;
        }
        self.link_share
            .retain(|id, _| accounts.binary_search_by_key(id, Account::id).is_ok());
    }

    fn measure(&self) -> Measure {
        Measure {
            baseline_reports: self.cfg.baseline_reports,
            follows_lower: self.cfg.baseline_follows_lower,
            stddev_floor: self.cfg.stddev_floor,
            max_intf: self.cfg.max_intf,
            use_stddev: true,
        }
    }

    /// Interference shown by `r` against the VM's baseline, learning the baseline first.
    /// `None` while the baseline is still being learned.
    fn interference(&self, state: &mut BaselineState, r: &LatencyReport) -> Option<f64> {
        interference(&self.measure(), state, r)
    }
}

/// Indices of the two VMs with the most MTUs (ties: lower id, i.e. lower index).
fn top_two(accounts: &[Account]) -> (Option<usize>, Option<usize>) {
    let mut first: Option<usize> = None;
    let mut second: Option<usize> = None;
    for (i, acc) in accounts.iter().enumerate() {
        match first {
            None => first = Some(i),
            Some(f) if acc.mtus > accounts[f].mtus => {
                second = first;
                first = Some(i);
            }
            Some(_) => match second {
                Some(s) if acc.mtus <= accounts[s].mtus => {}
                _ => second = Some(i),
            },
        }
    }
    (first, second)
}

impl Policy for IoShares {
    fn name(&self) -> &'static str {
        "ioshares"
    }

    fn price(&mut self, ctx: &Ctx<'_>, accounts: &mut [Account]) {
        if self.cfg.mode == IoSharesMode::Share {
            self.price_by_share(ctx, accounts);
            return;
        }
        let (first, second) = top_two(accounts);
        let mut raises = std::mem::take(&mut self.raises);
        raises.clear();
        for i in 0..accounts.len() {
            let Some(report) = accounts[i].report else {
                continue;
            };
            if !valid_report(&report, self.cfg.min_report_samples) {
                continue;
            }
            self.last_report = Some(ctx.interval);
            self.reported_this_period = true;
            let Some(intf) = self.interference(&mut accounts[i].baseline, &report) else {
                continue;
            };
            let acc = &mut accounts[i];
            acc.intf = Some(intf);
            let sla = acc.spec.sla_threshold.unwrap_or(self.cfg.sla_threshold);
            if intf <= sla || ctx.total_mtus == 0 {
                continue;
            }
            let culprit = if first == Some(i) { second } else { first };
            let Some(c) = culprit.filter(|&c| accounts[c].mtus > 0) else {
                continue;
            };
            let share = accounts[c].mtus as f64 / ctx.total_mtus as f64;
            accounts[i].interferer = Some(accounts[c].id());
            raises.push((c, accounts[i].id(), share * intf));
        }
        // Applied in victim-id order: the same inputs always sum the same way.
        for &(c, victim, r) in &raises {
            let acc = &mut accounts[c];
            acc.rate = (acc.rate + r).min(self.cfg.max_rate);
            acc.named_by = Some(victim);
        }
        self.raises = raises;
    }

    fn actuate(&mut self, ctx: &Ctx<'_>, accounts: &mut [Account]) {
        self.victims.clear();
        let silent_too_long = match self.last_report {
            None => true,
            Some(t) => ctx.interval.saturating_sub(t) >= self.timeout_intervals,
        };
        let may_decay = self.reported_this_period || silent_too_long;
        for acc in accounts.iter_mut() {
            let cut = apply_balance_rule(ctx, acc);
            let named = acc.named_by.take();
            if named.is_none() && may_decay && acc.rate > 1.0 {
                acc.rate = 1.0 + (acc.rate - 1.0) * self.cfg.decay;
                if acc.rate - 1.0 < RATE_EPSILON {
                    acc.rate = 1.0;
                }
            }
            let reason = if cut {
                CapReason::LowBalance {
                    balance: acc.balance,
                    allotment: acc.allotment,
                }
            } else if let Some(victim) = named {
                CapReason::Interferer {
                    victim,
                    rate: acc.rate,
                }
            } else if acc.rate < acc.rate_at_decision {
                CapReason::Decay { rate: acc.rate }
            } else {
                CapReason::EpochReplenish
            };
            acc.rate_at_decision = acc.rate;
            acc.proposal = Some((balance_cap(ctx, acc) / acc.rate, reason));
        }
        self.reported_this_period = false;
    }
}

impl IoShares {
    /// `share` mode's pricing pass.
    fn price_by_share(&mut self, ctx: &Ctx<'_>, accounts: &mut [Account]) {
        self.smooth_shares(ctx, accounts);
        let mut raises = std::mem::take(&mut self.raises);
        raises.clear();
        let mut intfs = Vec::new();
        let m = self.measure();
        for (i, acc) in accounts.iter_mut().enumerate() {
            let Some(report) = acc.report else {
                continue;
            };
            if !valid_report(&report, self.cfg.min_report_samples) {
                continue;
            }
            self.last_report = Some(ctx.interval);
            self.reported_this_period = true;
            let Some(intf) = interference(&m, &mut acc.baseline, &report) else {
                continue;
            };
            acc.intf = Some(intf);
            let sla = acc.spec.sla_threshold.unwrap_or(self.cfg.sla_threshold);
            // Only a VM within its entitlement can be a victim: a VM above it waits behind its
            // own excess, and reporting must not shield it from its charge (else running the
            // agent would buy an aggressor its throughput).
            if intf > sla && acc.ent.within() {
                self.victims.insert(acc.id());
                intfs.push((i, intf));
            }
        }
        // Victims first (all of them), then their charges: a victim is never charged.
        for &(i, intf) in &intfs {
            let victim = accounts[i].id();
            let mut top: Option<(usize, f64)> = None;
            for (j, acc) in accounts.iter().enumerate() {
                // Only a VM above its entitlement is charged (the host's measure): a VM
                // within it is owed what it sends.
                if j == i || self.victims.contains(&acc.id()) || acc.ent.within() {
                    continue;
                }
                let share = self.link_share.get(&acc.id()).copied().unwrap_or(0.0);
                if share <= 0.0 {
                    continue;
                }
                raises.push((j, victim, share * intf));
                if top.is_none_or(|(_, s)| share > s) {
                    top = Some((j, share));
                }
            }
            if let Some((j, _)) = top {
                accounts[i].interferer = Some(accounts[j].id());
            }
        }
        for &(c, victim, r) in &raises {
            let acc = &mut accounts[c];
            acc.rate = (acc.rate + r).min(self.cfg.max_rate);
            acc.named_by = Some(victim);
        }
        self.raises = raises;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Baseline, VmSpec};

    fn acc(id: u32, mtus: u64) -> Account {
        let mut a = Account::new(VmSpec::new(id, format!("v{id}"), 1), 0);
        a.mtus = mtus;
        a
    }

    #[test]
    fn top_two_breaks_ties_by_lower_id() {
        let v = vec![acc(1, 5), acc(2, 9), acc(3, 9), acc(4, 1)];
        assert_eq!(top_two(&v), (Some(1), Some(2)));
        let v = vec![acc(1, 0), acc(2, 0)];
        assert_eq!(top_two(&v), (Some(0), Some(1)));
        assert_eq!(top_two(&[]), (None, None));
    }

    #[test]
    fn baseline_is_learned_from_the_first_reports() {
        let p = IoShares::new(
            IoSharesConfig {
                baseline_reports: 2,
                ..IoSharesConfig::default()
            },
            10,
            1,
        );
        let mut s = BaselineState::default();
        let r = |m, sd| LatencyReport {
            count: 10,
            mean_ns: m,
            stddev_ns: sd,
            ..LatencyReport::default()
        };
        assert_eq!(p.interference(&mut s, &r(100.0, 10.0)), None);
        assert_eq!(p.interference(&mut s, &r(300.0, 30.0)), None);
        assert_eq!(
            s.baseline,
            Some(Baseline {
                mean_ns: 200.0,
                stddev_ns: 20.0
            })
        );
        // Mean +50%, stddev +100%: the larger rise wins.
        assert_eq!(p.interference(&mut s, &r(300.0, 40.0)), Some(1.0));
        // A faster report lowers the baseline (baseline_follows_lower).
        assert_eq!(p.interference(&mut s, &r(150.0, 20.0)), Some(0.0));
        assert_eq!(s.baseline.map(|b| b.mean_ns), Some(150.0));
    }
}
