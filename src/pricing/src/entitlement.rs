//! Entitlements: what the admin grants each VM, and the guard that holds every policy to it.
//!
//! A VM's entitlement is a guaranteed transmit rate (its VF's `tx_share`) and a CPU floor,
//! from the admin's configuration; a VM without a configured rate gets an equal split of what
//! the configured ones leave of the link, and a VM without a floor the policy's
//! `caps.floor_pct`. It is the one input that decides how much a VM is protected: not whether
//! it runs the agent, not what its reports say.
//!
//! The guard runs in the engine around every policy's actuation, so no policy can break it:
//! - **Measured by the host alone.** Each VM's transmit rate on the wire (the monitor's exact
//!   bytes plus a header per packet), smoothed over about [`RATE_MEMORY_S`]; it is *in excess*
//!   while that rate is above its entitlement (hysteresis: it leaves excess below
//!   [`LEAVE_EXCESS`] of it).
//! - **The guarantee is the entitlement.** With the rate lever every VM's guaranteed rate
//!   (`share_bps`) is its entitlement, whatever the policy proposes; a policy's own shares
//!   become weights in the split of the excess (`weight`, relative to the largest), where they
//!   cannot take anything that is guaranteed.
//! - **Ceilings and caps only on what is in excess.** A VM within its entitlement gets no
//!   ceiling and no cap. A VM in excess may get the policy's ceiling, never below 1.1x its
//!   entitlement (a ceiling at it would pace a closed loop below it), and the policy's cap,
//!   never below its CPU floor nor below the cap that was last seen to hold it under its
//!   entitlement (the guard cap, learned: a period in which a cap held it below its
//!   entitlement raises it, in proportion to the shortfall).
//! - **A ceiling at the entitlement does not end the excess.** A VM whose ceiling holds it at
//!   its entitlement still demands more: it stays in excess while it sends above half of it,
//!   so a cap may take the CPU it spends beyond what its entitlement needs (on the embedded
//!   host, a spinning guest's CPU is its neighbours' latency), never below the guard cap.
//!
//! Policies may read [`Entitled::excess`] (the governor and IOShares charge only VMs in
//! excess), but need not: the guard applies either way.

use crate::config::Lever;
use crate::ledger::Account;
use crate::types::{CapReason, TxLimit, TxReason};
pub use crate::types::{Entitled, Entitlement};

/// Time constant of the smoothed transmit rate, seconds.
pub const RATE_MEMORY_S: f64 = 0.1;
/// A VM in excess leaves it once its smoothed rate is below this fraction of its entitlement.
pub const LEAVE_EXCESS: f64 = 0.9;
/// A ceiling up to this multiple of the entitlement holds a VM at it ([`held_by_ceiling`]).
const HELD_CEILING: f64 = 1.1;
/// A VM held by such a ceiling leaves excess only below this fraction of its entitlement.
const HELD_LEAVE: f64 = 0.5;
/// Under such a ceiling, a cap is taken to hold it below its entitlement only below this
/// fraction of it (the ceiling's pacing alone keeps it at 0.7-0.95 of it on the embedded host)...
const HELD_SHORT: f64 = 0.6;
/// ... and the guard cap decays while it sends above this fraction.
const HELD_MEETS: f64 = 0.7;
/// Headroom of the learned guard cap over the cap that would just meet the entitlement.
const GUARD_HEADROOM: f64 = 1.25;
/// The guard cap decays towards the floor by this factor per period while the VM sends well
/// above its entitlement (so a policy may bite again).
const GUARD_DECAY: f64 = 0.98;

/// Every VM's entitlement in force, bits/s, from what is configured (`None`: the default): the
/// configured rate, or an equal split of what the configured rates leave of `link_bps`.
pub fn split(configured: impl Iterator<Item = Option<u64>> + Clone, link_bps: f64) -> Vec<f64> {
    let set: f64 = configured.clone().flatten().map(|b| b as f64).sum();
    let unset = configured.clone().filter(Option::is_none).count();
    let share = if unset > 0 {
        (link_bps - set).max(0.0) / unset as f64
    } else {
        0.0
    };
    configured.map(|c| c.map_or(share, |b| b as f64)).collect()
}

/// Sets every account's entitlement in force ([`split`]); floors: configured, or
/// `floor_pct`.
pub(crate) fn assign(accounts: &mut [Account], link_bps: f64, floor_pct: f64) {
    let tx = split(accounts.iter().map(|a| a.spec.entitlement.tx_bps), link_bps);
    for (a, tx) in accounts.iter_mut().zip(tx) {
        let e = a.spec.entitlement;
        a.ent.tx_bps = tx;
        a.ent.cpu_floor_pct = e.cpu_floor_pct.unwrap_or(floor_pct).min(a.max_cap);
        if a.ent.guard_cap < a.ent.cpu_floor_pct {
            a.ent.guard_cap = a.ent.cpu_floor_pct;
        }
    }
}

/// At an actuation boundary, before the policy acts: each VM's rate over the period that
/// ended, whether it is in excess, and its guard cap.
pub(crate) fn measure(lever: Lever, accounts: &mut [Account], period_s: f64) {
    let memory = (-period_s / RATE_MEMORY_S).exp();
    for a in accounts {
        let ent = &mut a.ent;
        let r = ent.bits / period_s.max(1e-9);
        ent.bits = 0.0;
        ent.period_bps = r;
        ent.rate_bps = memory * ent.rate_bps + (1.0 - memory) * r;
        let e = ent.tx_bps;
        let held = lever.rate() && held_by_ceiling(a.tx, e);
        if ent.rate_bps > e {
            ent.excess = true;
        } else if ent.rate_bps < LEAVE_EXCESS * e && !(held && ent.rate_bps >= HELD_LEAVE * e) {
            ent.excess = false;
        }
        // The cap in force held it below its entitlement: the guard cap rises to what would
        // have met it (CPU in proportion to the rate), at least by a quarter. Under a ceiling at
        // its entitlement the rate is short of it anyway (the ceiling's pacing): only a
        // smoothed rate below [`HELD_SHORT`] of it is the cap's (one period of a VM that sends
        // large messages may carry none), the quarter is per rate memory, and while it meets
        // its entitlement the guard cap decays, so a cap may bite again.
        let capped = a.cap < a.max_cap - 1e-9;
        let (rate, short, step) = if held {
            let step = 1.25f64.powf(period_s / RATE_MEMORY_S);
            (ent.rate_bps, HELD_SHORT * e, step)
        } else {
            (r, e, 1.25)
        };
        if capped && rate < short {
            let need = a.cap * GUARD_HEADROOM * e / rate.max(e / 10.0);
            ent.guard_cap = need.max(ent.guard_cap * step).min(a.max_cap);
        } else if r > 1.5 * e || (held && rate >= HELD_MEETS * e) {
            ent.guard_cap = (ent.guard_cap * GUARD_DECAY).max(ent.cpu_floor_pct);
        }
    }
}

/// True when a ceiling at about the VM's entitlement is in force: its demand was above its
/// entitlement when it was set, and while it sends near it the ceiling, not its demand, is what
/// keeps it within (it stays in excess, so a cap may still take the CPU it spends beyond what
/// its entitlement needs, never below the guard cap).
fn held_by_ceiling(tx: TxLimit, entitled_bps: f64) -> bool {
    tx.max_bps
        .is_some_and(|m| (m as f64) <= HELD_CEILING * entitled_bps)
}

/// After the policy acted: its proposals held to every VM's entitlement.
pub(crate) fn enforce(lever: Lever, accounts: &mut [Account]) {
    if lever.cpu() {
        for a in accounts.iter_mut() {
            guard_cap(a);
        }
    }
    if lever.rate() {
        let weights = excess_weights(accounts);
        for (a, w) in accounts.iter_mut().zip(weights) {
            guard_tx(a, w);
        }
    }
}

/// The policy's cap held to the VM's entitlement.
fn guard_cap(a: &mut Account) {
    let ent = &a.ent;
    let why = CapReason::Entitlement {
        rate_bps: ent.rate_bps,
        entitled_bps: ent.tx_bps,
    };
    match a.proposal {
        Some((p, reason)) => {
            let lowest = if ent.excess {
                ent.cpu_floor_pct.max(ent.guard_cap)
            } else {
                a.max_cap
            };
            let p = if p.is_finite() { p } else { a.max_cap };
            a.proposal = Some(if p < lowest - 1e-9 {
                (lowest, why)
            } else {
                (p, reason)
            });
        }
        // A cap in force on a VM the guard now protects is lifted even if the policy is silent.
        None if !ent.excess && a.cap < a.max_cap - 1e-9 => a.proposal = Some((a.max_cap, why)),
        None => {}
    }
}

/// Each VM's weight in the excess from the policy's shares (relative to the largest; 1 for a
/// VM without one), or `None` for all when the policy proposes no shares.
fn excess_weights(accounts: &mut [Account]) -> Vec<Option<u32>> {
    for a in accounts.iter_mut() {
        if let Some(p) = a.tx_proposal {
            a.ent.policy_tx = Some(p);
        }
    }
    let share = |a: &Account| a.ent.policy_tx.and_then(|(t, _)| t.share_bps);
    let max = accounts.iter().filter_map(share).max().unwrap_or(0);
    accounts
        .iter()
        .map(|a| {
            (max > 0).then(|| {
                let s = share(a).unwrap_or(0) as f64;
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let w = (100.0 * s / max as f64).round() as u32;
                w.clamp(1, 100)
            })
        })
        .collect()
}

/// The lowest ceiling the guard lets a policy set on a VM entitled to `entitled_bps`:
/// [`HELD_CEILING`] times it, so the ceiling still holds the VM at its entitlement
/// ([`held_by_ceiling`]) but a VM that demands its entitlement gets all of it. A ceiling
/// exactly at the entitlement paces a closed loop below it: its bucket refills only so far
/// while it computes between messages (a 4 MiB closed loop beside four guests got 0.878 of its
/// entitlement under `ioshares-rate`'s ceiling at it; 0.92 or more at 1.1x).
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn ceiling_floor(entitled_bps: f64) -> u64 {
    (entitled_bps.max(0.0) * HELD_CEILING).floor() as u64
}

/// The policy's transmit limit held to the VM's entitlement: the guarantee is the
/// entitlement, a ceiling applies only in excess and never below [`ceiling_floor`].
fn guard_tx(a: &mut Account, weight: Option<u32>) {
    let ent = &a.ent;
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let entitled = (ent.tx_bps >= 1.0).then(|| ent.tx_bps.round() as u64);
    let (wish, reason) = ent.policy_tx.unwrap_or((TxLimit::NONE, TxReason::Release));
    let max_bps = match wish.max_bps {
        Some(m) if ent.excess => Some(m.max(ceiling_floor(ent.tx_bps))),
        _ => None,
    };
    let tx = TxLimit {
        share_bps: entitled,
        max_bps,
        weight,
    };
    // The guard's own reason where it changed the policy's ceiling, or where the policy
    // released a limit the entitlement keeps.
    let clamped = wish.max_bps.is_some() && max_bps != wish.max_bps;
    let kept = matches!(reason, TxReason::Release) && !tx.is_none();
    let reason = if clamped || kept {
        TxReason::Entitlement {
            rate_bps: ent.rate_bps,
            entitled_bps: ent.tx_bps,
        }
    } else {
        reason
    };
    a.tx_proposal = Some((tx, reason));
}
