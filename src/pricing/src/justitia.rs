//! Justitia (Zhang et al., NSDI '22, "Software Multi-Tenancy in Hardware Kernel-Bypass
//! Networks") as a baseline on the rate lever: the anchor issue 29 asks us to beat. Not a
//! shipped policy (its file is `tools/baselines/justitia.toml`); it runs as published, with no
//! entitlements (Justitia has none) and no latency reports (it trusts no tenant either).
//!
//! What Justitia does at a sender, and how each part maps onto a host here:
//! - **Flows by message size.** An application whose messages are large is
//!   bandwidth-sensitive (an *elephant*, paced); the others are latency-sensitive (never
//!   paced). Here each VM is a flow, and its mean message is its bytes per completed work
//!   request as the host counts them (smoothed); at least `bulk_message_bytes` (Justitia's
//!   large chunk, 1 MB) makes it an elephant.
//! - **Split connection, message-level shaping.** Justitia splits elephants' messages into
//!   chunks so a small message waits behind at most a chunk. The port scheduler here already
//!   takes turns packet by packet, finer than any chunk: nothing to add.
//! - **Latency monitoring with a target.** Justitia measures the tail latency of its own
//!   probes against an operator's absolute target. Here the host measures, passively, every
//!   latency-sensitive VM's own work requests (the NIC's sojourn and wire times, as
//!   [`crate::evidence`] reads them): over the last `window_intervals`, its mean sojourn over
//!   its quiet level (wire time plus its quietest wait per request) minus 1 is its slowdown,
//!   and the target is `target_slowdown` of it (10%, the goal) for the worst one: a
//!   per-VM target Justitia's operator could not know, so the baseline is, if anything,
//!   favoured.
//! - **AIMD on the elephants' virtual link.** While elephants and latency-sensitive VMs are
//!   both active, per actuation period the elephants' aggregate rate (the *virtual link*)
//!   halves (`decrease`) when the target is missed, never below the elephants' share by count
//!   (`n_elephants / n_active`, Justitia's lower bound), and grows by `increase_pct` of the
//!   link when it is met; with only one kind active it is the whole link. Each elephant gets
//!   an equal part as its ceiling (Justitia's tokens, round robin). CPU caps stay at the
//!   maximum; prices are 1.
//!
//! Where Justitia cannot protect (what `docs/tradeoff.md` measures): a latency-sensitive VM
//! with large messages is paced as an elephant; a greedy VM with small messages is never
//! paced; and a VM's class is its own choice of message size.

use crate::config::JustitiaConfig;
use crate::ledger::Account;
use crate::policy::{Ctx, Policy};
use crate::types::{CapReason, TxReason};
use resex_common::{NicTimes, TxLimit, VmId};
use std::collections::{BTreeMap, VecDeque};

/// One VM as Justitia sees it.
#[derive(Debug, Clone, Default, PartialEq)]
struct Flow {
    /// Smoothed mean message, bytes (`None`: nothing completed yet).
    message: Option<f64>,
    /// Bytes and completions since the message size was last updated.
    bytes: u64,
    wqes: u64,
    /// The NIC's times of the last `window_intervals` intervals.
    window: VecDeque<NicTimes>,
    /// Intervals since it last sent.
    idle: u32,
    /// Its quietest mean wait per request over a window, ns.
    quiet_wait: Option<f64>,
}

/// The baseline.
#[derive(Debug, Clone)]
pub struct Justitia {
    cfg: JustitiaConfig,
    /// The elephants' virtual link, fraction of the link.
    link: f64,
    flows: BTreeMap<VmId, Flow>,
}

impl Justitia {
    /// The baseline with these settings.
    #[must_use]
    pub fn new(cfg: JustitiaConfig) -> Self {
        Self {
            cfg,
            link: 1.0,
            flows: BTreeMap::new(),
        }
    }

    /// The elephants' virtual link in force, fraction of the link.
    #[must_use]
    pub fn virtual_link(&self) -> f64 {
        self.link
    }

    /// One interval of one VM.
    fn observe(&mut self, acc: &Account) {
        let cfg = &self.cfg;
        let f = self.flows.entry(acc.id()).or_default();
        let nic = acc.nic.unwrap_or_default();
        f.idle = if acc.bytes > 0 {
            0
        } else {
            f.idle.saturating_add(1)
        };
        f.bytes = f.bytes.saturating_add(acc.bytes);
        f.wqes = f.wqes.saturating_add(nic.wqes);
        if f.wqes > 0 {
            let m = f.bytes as f64 / f.wqes as f64;
            f.message = Some(f.message.map_or(m, |s| (1.0 - cfg.ewma) * s + cfg.ewma * m));
            f.bytes = 0;
            f.wqes = 0;
        }
        f.window.push_back(nic);
        while f.window.len() > cfg.window_intervals as usize {
            f.window.pop_front();
        }
    }

    /// True for an active elephant (`Some(false)`: active and latency-sensitive; `None`:
    /// idle, or not classified yet).
    fn elephant(&self, f: &Flow) -> Option<bool> {
        if f.idle >= self.cfg.idle_intervals {
            return None;
        }
        f.message.map(|m| m >= self.cfg.bulk_message_bytes as f64)
    }
}

/// A latency-sensitive VM's slowdown over its window, as the evidence module measures one
/// (`None`: nothing completed in it).
fn slowdown(f: &mut Flow) -> Option<f64> {
    let w = f.window.iter().fold(NicTimes::default(), |s, t| s.plus(t));
    crate::evidence::slowdown(&w, &mut f.quiet_wait).map(|(s, _)| s)
}

impl Policy for Justitia {
    fn name(&self) -> &'static str {
        "justitia"
    }

    fn price(&mut self, _ctx: &Ctx<'_>, accounts: &mut [Account]) {
        if self.flows.len() > accounts.len() {
            self.flows
                .retain(|id, _| accounts.binary_search_by_key(id, Account::id).is_ok());
        }
        for acc in accounts.iter_mut() {
            acc.rate = 1.0;
            self.observe(acc);
        }
    }

    fn actuate(&mut self, ctx: &Ctx<'_>, accounts: &mut [Account]) {
        let classes: Vec<Option<bool>> = accounts
            .iter()
            .map(|a| self.flows.get(&a.id()).and_then(|f| self.elephant(f)))
            .collect();
        let big = classes.iter().filter(|c| **c == Some(true)).count();
        let small = classes.iter().filter(|c| **c == Some(false)).count();
        let mut worst: Option<f64> = None;
        for (a, c) in accounts.iter().zip(&classes) {
            if *c != Some(false) {
                continue;
            }
            if let Some(s) = self.flows.get_mut(&a.id()).and_then(slowdown) {
                worst = Some(worst.map_or(s, |w: f64| w.max(s)));
            }
        }
        self.link = if big > 0 && small > 0 {
            let floor = big as f64 / (big + small) as f64;
            if worst.is_some_and(|w| w > self.cfg.target_slowdown) {
                (self.link * self.cfg.decrease).max(floor)
            } else {
                (self.link + self.cfg.increase_pct / 100.0).min(1.0)
            }
        } else {
            1.0
        };
        let paced = self.link < 1.0 - 1e-9;
        for (acc, c) in accounts.iter_mut().zip(classes) {
            acc.proposal = Some((acc.max_cap, CapReason::EpochReplenish));
            acc.tx_proposal = Some(if paced && c == Some(true) {
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let max = ((self.link * ctx.link_bps / big as f64).round() as u64).max(1);
                (
                    TxLimit {
                        share_bps: None,
                        max_bps: Some(max),
                        weight: None,
                    },
                    TxReason::Justitia {
                        virtual_link_pct: self.link * 100.0,
                    },
                )
            } else {
                (TxLimit::NONE, TxReason::Release)
            });
        }
    }

    fn proposes_tx(&self) -> bool {
        true
    }
}
