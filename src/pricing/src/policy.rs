//! The `Policy` trait, the context it is given, and FreeMarket's balance rule (used by both
//! shipped policies).

use crate::config::PolicyConfig;
use crate::ledger::Account;

/// What a policy knows about the interval being priced, besides the accounts.
#[derive(Debug, Clone, Copy)]
pub struct Ctx<'a> {
    /// The policy file.
    pub cfg: &'a PolicyConfig,
    /// The interval being priced.
    pub interval: u64,
    /// True on the first priced interval of an epoch (balances were just replenished).
    pub epoch_start: bool,
    /// Fraction of the epoch still to come after this interval.
    pub epoch_left: f64,
    /// Host link utilisation in [0, 1] (measured or computed from the MTUs).
    pub link_util: f64,
    /// MTUs of all VMs in this interval.
    pub total_mtus: u64,
    /// The host link's rate, bits per second (transmit limits are set against it).
    pub link_bps: f64,
}

/// A pricing policy.
///
/// Per interval the engine records usage into the accounts, calls [`Policy::price`] (set each
/// VM's rate; note interference), charges `cpu_pct x rate + mtus x rate`, and, at most once per
/// actuation period, calls [`Policy::actuate`], where the policy proposes a cap and a reason per
/// VM (`Account::proposal`) and, if it uses the rate lever, a transmit limit
/// (`Account::tx_proposal`). The engine clamps cap proposals to `[floor, 100 x vCPUs]` and emits
/// the ones that change a cap or a limit. Accounts are always in VM-id order. Policies are pure: no I/O, no
/// clock, no randomness.
pub trait Policy: Send + std::fmt::Debug {
    /// The name policy files use.
    fn name(&self) -> &'static str;
    /// Sets this interval's rates (and the `intf` / `interferer` notes).
    fn price(&mut self, ctx: &Ctx<'_>, accounts: &mut [Account]);
    /// Proposes caps at an actuation boundary (after this interval's charges).
    fn actuate(&mut self, ctx: &Ctx<'_>, accounts: &mut [Account]);
    /// True when the policy proposes transmit limits itself; otherwise, with the rate lever,
    /// the engine turns its cap proposals into ceilings (the same fraction of the link).
    fn proposes_tx(&self) -> bool {
        false
    }
}

/// FreeMarket's rule (paper Algorithm 1, section VI-B): when the balance is below
/// `low_balance` of the allotment while more than `min_epoch_left` of the epoch remains, cut the
/// cap once more. Returns true when it cut.
pub fn apply_balance_rule(ctx: &Ctx<'_>, acc: &mut Account) -> bool {
    let rule = &ctx.cfg.balance_rule;
    if acc.allotment > 0.0
        && acc.balance < rule.low_balance * acc.allotment
        && ctx.epoch_left > rule.min_epoch_left
    {
        acc.cuts = acc.cuts.saturating_add(1);
        true
    } else {
        false
    }
}

/// The cap after the balance rule's cuts: `base x cut_factor ^ cuts`.
pub fn balance_cap(ctx: &Ctx<'_>, acc: &Account) -> f64 {
    // Beyond 10 000 cuts the factor is 0 for every allowed cut factor below 1; the floor applies.
    let cuts = i32::try_from(acc.cuts.min(10_000)).unwrap_or(10_000);
    acc.max_cap * ctx.cfg.balance_rule.cut_factor.powi(cuts)
}
