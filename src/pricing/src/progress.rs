//! Adaptive unfairness through the rate lever (issue 20, item 5a), the paper's
//! `R_AI (1 + progress)` rule on one host's transmit scheduler: a VM in the middle of a burst
//! (a training job's communication phase) gets a transmit share that grows with how far into
//! the burst it is, so of two periodic jobs that collide, the one nearer the end finishes first
//! and the two slide apart over the next iterations; jobs that cannot fit take turns.
//!
//! Everything comes from the monitor's exact bytes per interval, no help from the guest: a
//! burst is a run of intervals with bytes ending after `gap_intervals` without; its expected
//! size is learned from the finished ones (bursts under `min_burst_bytes` are not learned);
//! progress is the burst's bytes so far over that size, capped at 1 and rounded to `step`.
//! A burst that grows past twice its learned size loses its progress (a VM that never pauses
//! cannot hold the top share).
//!
//! Each actuation, while some VM is in a burst of learned size, every VM sending gets a share
//! of the link by weight (fractions summing to 1): a bursting VM `1 + gain x progress`; any
//! other VM sending (a latency-sensitive VM, a steady sender, a VM past twice its burst size)
//! the weight of the most advanced burst, so it is never behind any job and never ahead of all
//! (one steady sender against one job splits the link as it would without the policy).
//! Without such a burst every share is lifted (the scheduler's round robin). A share matters
//! only against other shares: a VM without one weighs the least, so no VM sending is left
//! without. CPU caps stay at the maximum; prices are FreeMarket's (1 for all).

use crate::config::ProgressConfig;
use crate::ledger::Account;
use crate::policy::{Ctx, Policy};
use crate::types::{CapReason, TxReason};
use resex_common::{TxLimit, VmId};
use std::collections::HashMap;

/// One VM's burst state.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Burst {
    /// Bytes of the burst under way (0: none).
    bytes: u64,
    /// Intervals without bytes since the last with.
    quiet: u32,
    /// Expected burst size, bytes (0: not learned yet).
    size: f64,
}

/// The policy.
#[derive(Debug, Clone)]
pub struct Progress {
    cfg: ProgressConfig,
    vms: HashMap<VmId, Burst>,
}

impl Progress {
    /// A policy with these settings.
    #[must_use]
    pub fn new(cfg: ProgressConfig) -> Self {
        Self {
            cfg,
            vms: HashMap::new(),
        }
    }

    /// A VM's progress in its burst, rounded (`None`: not in a burst, its size not learned, or
    /// a burst already twice its learned size: a VM that never pauses is not a periodic job
    /// near the end of its phase, and keeps no advantage).
    fn progress(&self, b: &Burst) -> Option<f64> {
        if b.bytes == 0 || b.size <= 0.0 || b.bytes as f64 > 2.0 * b.size {
            return None;
        }
        let p = (b.bytes as f64 / b.size).min(1.0);
        // The epsilon keeps 0.3 / 0.1 from rounding down to 2.
        Some((p / self.cfg.step).floor() * self.cfg.step)
    }
}

impl Policy for Progress {
    fn name(&self) -> &'static str {
        "progress"
    }

    fn price(&mut self, _ctx: &Ctx<'_>, accounts: &mut [Account]) {
        let gap = self.cfg.gap_intervals;
        if self.vms.len() > accounts.len() {
            // VMs left (accounts are in id order).
            self.vms
                .retain(|id, _| accounts.binary_search_by_key(id, Account::id).is_ok());
        }
        for acc in accounts.iter_mut() {
            acc.rate = 1.0;
            let b = self.vms.entry(acc.id()).or_default();
            if acc.bytes > 0 {
                b.bytes = b.bytes.saturating_add(acc.bytes);
                b.quiet = 0;
            } else if b.bytes > 0 {
                b.quiet += 1;
                if b.quiet >= gap {
                    if b.bytes >= self.cfg.min_burst_bytes {
                        let last = b.bytes as f64;
                        b.size = if b.size > 0.0 {
                            (1.0 - self.cfg.ewma) * b.size + self.cfg.ewma * last
                        } else {
                            last
                        };
                    }
                    b.bytes = 0;
                }
            }
        }
    }

    fn actuate(&mut self, ctx: &Ctx<'_>, accounts: &mut [Account]) {
        let gain = self.cfg.gain;
        // Bursting VMs by progress; then every other VM sending weighs as the most advanced
        // burst: never behind any job (a steady sender against one job: 50/50, as without the
        // policy), and never ahead of all of them.
        let mut weights: Vec<Option<(f64, f64)>> = accounts
            .iter()
            .map(|a| {
                let b = self.vms.get(&a.id())?;
                self.progress(b).map(|p| (1.0 + gain * p, p))
            })
            .collect();
        let top = weights.iter().flatten().map(|w| w.0).fold(0.0, f64::max);
        if top > 0.0 {
            for (w, a) in weights.iter_mut().zip(accounts.iter()) {
                if w.is_none() && self.vms.get(&a.id()).is_some_and(|b| b.bytes > 0) {
                    *w = Some((top, -1.0));
                }
            }
        }
        let total: f64 = weights.iter().flatten().map(|w| w.0).sum();
        for (acc, w) in accounts.iter_mut().zip(weights) {
            acc.proposal = Some((acc.max_cap, CapReason::EpochReplenish));
            acc.tx_proposal = Some(match w {
                Some((w, p)) if total > 0.0 => {
                    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                    let share = ((w / total * ctx.link_bps).round() as u64).max(1);
                    (
                        TxLimit {
                            share_bps: Some(share),
                            max_bps: None,
                            weight: None,
                        },
                        TxReason::Progress {
                            progress_pct: p.max(0.0) * 100.0,
                        },
                    )
                }
                _ => (TxLimit::NONE, TxReason::Release),
            });
        }
    }

    fn proposes_tx(&self) -> bool {
        true
    }
}
