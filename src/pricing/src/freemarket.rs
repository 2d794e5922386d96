//! FreeMarket (paper Algorithm 1): one price for everyone, and a gradual cap cut for a VM that
//! runs low on Resos early in the epoch.

use crate::ledger::Account;
use crate::policy::{apply_balance_rule, balance_cap, Ctx, Policy};
use crate::types::CapReason;

/// Rate 1 for all VMs; the cap is `base x 0.9 ^ cuts`, where a cut happens once per actuation
/// period while the balance is under 10% of the allotment and more than 10% of the epoch
/// remains; the epoch's replenish lifts every cut.
#[derive(Debug, Clone, Copy, Default)]
pub struct FreeMarket;

impl Policy for FreeMarket {
    fn name(&self) -> &'static str {
        "freemarket"
    }

    fn price(&mut self, _ctx: &Ctx<'_>, accounts: &mut [Account]) {
        for acc in accounts {
            acc.rate = 1.0;
        }
    }

    fn actuate(&mut self, ctx: &Ctx<'_>, accounts: &mut [Account]) {
        for acc in accounts {
            let reason = if apply_balance_rule(ctx, acc) {
                CapReason::LowBalance {
                    balance: acc.balance,
                    allotment: acc.allotment,
                }
            } else {
                CapReason::EpochReplenish
            };
            acc.proposal = Some((balance_cap(ctx, acc), reason));
        }
    }
}
