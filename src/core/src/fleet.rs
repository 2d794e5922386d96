//! The fleet's transmit ceilings (issue 22): the coordinator's per-VM allocation, applied on top
//! of the local policy until it expires.
//!
//! A VM's limit is the local policy's with its ceiling lowered to the fleet's and its share no
//! higher than that ([`combine`]); the admin's pin still wins over both. An allocation is valid
//! until `until_ns` on the driver's clock: a host that stops hearing from the fleet (etcd lost,
//! the coordinator gone) lifts every fleet ceiling by then at the latest, so nothing stays
//! throttled by a stale decision. The ceiling is the transmit [`crate::lever::Lever`]'s; each
//! change is an intent like any other (the journal records it, with
//! [`crate::lever::Cause::Fleet`] or [`crate::lever::Cause::FleetLifted`]).

use crate::adaptive::{Schedule, Scheduled};
use crate::host::HostCore;
pub use crate::lever::combine;
use crate::lever::{tx_ceiling, LeverKind, Tx};
use crate::output::Intents;
use resex_common::VmId;
use std::collections::HashMap;

/// The fleet's ceilings for this host's VMs, by name, valid until `until_ns`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FleetCeilings {
    /// (VM name, ceiling in bits per second).
    pub vms: Vec<(String, u64)>,
    /// When they lapse (the driver's clock).
    pub until_ns: u64,
    /// VMs whose ceiling follows a schedule instead (periodic jobs on a compatible link: the
    /// one further into its communication gets the larger share), re-evaluated every step.
    pub adaptive: Vec<(String, Schedule)>,
}

/// The most scheduled VMs a host takes.
pub const MAX_SCHEDULED: usize = 64;

/// What [`HostCore::set_fleet`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FleetApplied {
    /// VMs whose ceiling is now the fleet's.
    pub applied: usize,
    /// Named VMs this host does not have, or that have no rate lever.
    pub skipped: usize,
}

impl HostCore {
    /// Applies the fleet's ceilings (`None`: lift them all: the local policy alone again).
    pub fn set_fleet(&mut self, c: Option<FleetCeilings>) -> (Intents, FleetApplied) {
        let mut intents = Intents::default();
        let mut done = FleetApplied::default();
        let mut want: HashMap<&str, u64> = c
            .as_ref()
            .map(|c| {
                c.vms
                    .iter()
                    .map(|(n, b)| (n.as_str(), (*b).max(1)))
                    .collect()
            })
            .unwrap_or_default();
        // A scheduled VM's first ceiling is its schedule's at the allocation's arrival; the
        // steps move it from there. What its host saw of its job stays while the fleet's
        // allocations last (a lost or lapsed fleet forgets it).
        let mut before = std::mem::take(&mut self.fleet_adaptive);
        if c.is_none() {
            before.clear();
        }
        let now = self.last_now_ns;
        for (name, s) in c.iter().flat_map(|c| &c.adaptive).take(MAX_SCHEDULED) {
            let Some(id) = self.find(name) else { continue };
            let Some(info) = self.vm(id).map(|v| v.info()) else {
                continue;
            };
            // Once per VM, and only where a rate lever exists.
            if !Tx::has(info) || self.fleet_adaptive.iter().any(|k| k.vm == id) {
                continue;
            }
            let floor_bps = info.entitlement.tx_bps.unwrap_or(0).min(s.pool_bps);
            let watch = before
                .iter()
                .position(|k| k.vm == id)
                .map(|p| before.swap_remove(p).watch)
                .unwrap_or_default();
            let mut k = Scheduled {
                vm: id,
                schedule: s.clone(),
                watch,
                floor_bps,
                last_bps: 0,
                active: true,
            };
            k.last_bps = k.ceiling(now);
            want.insert(name.as_str(), k.last_bps);
            self.fleet_adaptive.push(k);
        }
        // The VMs this round left out, still watched, in the room left (bounded).
        let room = MAX_SCHEDULED.saturating_sub(self.fleet_adaptive.len());
        let kept: Vec<Scheduled> = before
            .into_iter()
            .filter(|k| self.index(k.vm).is_some())
            .take(room)
            .map(|k| Scheduled { active: false, ..k })
            .collect();
        self.fleet_adaptive.extend(kept);
        // In VM id order: the step's scan, also in id order, walks both together.
        self.fleet_adaptive.sort_unstable_by_key(|k| k.vm);
        let named = want.len();
        self.fleet_until_ns = c.as_ref().map(|c| c.until_ns);
        for i in 0..self.vms.len() {
            let id = self.vms[i].id;
            let new = want.get(self.vms[i].cold.info.name.as_str()).copied();
            let account = self.engine.as_ref().and_then(|e| e.account(id));
            let vm = &mut self.vms[i];
            if !Tx::has(&vm.cold.info) {
                continue;
            }
            if new.is_some() {
                done.applied += 1;
            }
            let policy = Tx::of_account(account, &vm.cold.info);
            if let Some(i) = vm
                .cold
                .levers
                .tx
                .set_ceiling(id, new.map(tx_ceiling), policy)
            {
                intents.push(i);
            }
        }
        // Bounded: one per VM and lever at most between two steps.
        self.pending
            .tx
            .retain(|p| !intents.tx.iter().any(|i| i.vm == p.vm));
        self.pending.tx.extend_from_slice(&intents.tx);
        done.skipped = named - done.applied.min(named);
        (intents, done)
    }

    /// Moves each scheduled VM's fleet ceiling to its schedule's value at `now_ns` (only when
    /// it changed: at most a twentieth of the pool per change); called at each step.
    pub(crate) fn follow_schedules(&mut self, now_ns: u64) -> Intents {
        let mut intents = Intents::default();
        for k in 0..self.fleet_adaptive.len() {
            let s = &mut self.fleet_adaptive[k];
            if !s.active {
                continue;
            }
            let (id, bps) = (s.vm, s.ceiling(now_ns));
            if bps == s.last_bps {
                continue;
            }
            s.last_bps = bps;
            let Some(i) = self.index(id) else { continue };
            let account = self.engine.as_ref().and_then(|e| e.account(id));
            let vm = &mut self.vms[i];
            let policy = Tx::of_account(account, &vm.cold.info);
            if let Some(x) = vm
                .cold
                .levers
                .tx
                .set_ceiling(id, Some(tx_ceiling(bps)), policy)
            {
                intents.push(x);
            }
        }
        // Bounded: one per VM and lever at most between two steps (the latest wins).
        self.pending
            .tx
            .retain(|p| !intents.tx.iter().any(|i| i.vm == p.vm));
        self.pending.tx.extend_from_slice(&intents.tx);
        intents
    }

    /// Records what a scheduled VM sent in the interval ending at `now_ns` (its job's arc, as
    /// its host sees it); called from the step's scan, in VM id order, for VMs that sent:
    /// `cursor` walks `scheduled` (in id order too) alongside, so a step costs one pass.
    pub(crate) fn observe_scheduled(
        scheduled: &mut [Scheduled],
        cursor: &mut usize,
        vm: VmId,
        now_ns: u64,
        bytes: u64,
    ) {
        while scheduled.get(*cursor).is_some_and(|k| k.vm < vm) {
            *cursor += 1;
        }
        if let Some(k) = scheduled.get_mut(*cursor).filter(|k| k.vm == vm) {
            k.schedule.observe(&mut k.watch, now_ns, bytes);
        }
    }

    /// Lifts the fleet's ceilings once they lapse; called at each step.
    pub(crate) fn expire_fleet(&mut self, now_ns: u64) -> Intents {
        match self.fleet_until_ns {
            Some(u) if now_ns >= u => {
                tracing::info!("fleet: the allocation lapsed; the local policy alone");
                self.set_fleet(None).0
            }
            _ => Intents::default(),
        }
    }

    /// Whether a fleet allocation is in force.
    #[must_use]
    pub fn fleet_active(&self) -> bool {
        self.fleet_until_ns.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use resex_common::TxLimit;

    #[test]
    fn the_fleet_lowers_the_ceiling_and_the_share_under_it() {
        let none = TxLimit::NONE;
        assert_eq!(combine(none, None), none);
        assert_eq!(
            combine(none, Some(100)),
            TxLimit {
                share_bps: None,
                max_bps: Some(100),
                weight: None,
            }
        );
        let p = TxLimit {
            share_bps: Some(300),
            max_bps: Some(500),
            weight: None,
        };
        assert_eq!(
            combine(p, Some(200)),
            TxLimit {
                share_bps: Some(200),
                max_bps: Some(200),
                weight: None,
            }
        );
        assert_eq!(combine(p, Some(900)), p);
    }
}
