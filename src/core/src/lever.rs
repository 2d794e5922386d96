//! The levers the core turns, one type for all of them: a VM's CPU cap ([`Cap`]) and its
//! transmit limit in its port's scheduler ([`Tx`]).
//!
//! A [`Lever`] holds what is in force, the admin's pin, the fleet's ceiling and why it last
//! changed; every change is an [`Intent`] to the actuator, with its [`Cause`]. The rules are the
//! same for every lever: the admin's pin wins over everything; otherwise the policy's value
//! under the fleet's ceiling is in force; a new policy, or the host stopping, puts the original
//! setting back (a pin survives a new policy, not the host stopping). What differs between
//! levers (what "original" is, how a value sits under a ceiling, what the actuator is told) is
//! the [`LeverKind`]. A third lever is one more kind, not a third copy of the rules.

use crate::error::CoreError;
use crate::info::VmInfo;
use resex_common::{TxLimit, VmId};
use resex_pricing::{Account, CapReason, TxReason};
use std::fmt;

/// What differs between levers.
pub trait LeverKind: Copy + PartialEq + fmt::Debug + 'static {
    /// What is in force ([`Self::ORIGINAL`]: whatever the VM had before the core set anything).
    type Value: Copy + PartialEq + fmt::Debug;
    /// What the admin pins, the policy decides and the actuator sets.
    type Set: Copy + PartialEq + fmt::Debug;
    /// Why the policy set it.
    type Reason: Copy + PartialEq + fmt::Debug + fmt::Display;
    /// The VM's original setting.
    const ORIGINAL: Self::Value;
    /// The admin's pin as the value in force.
    fn pinned(s: Self::Set) -> Self::Value;
    /// The policy's decision as the value in force.
    fn decided(s: Self::Set, info: &VmInfo) -> Self::Value;
    /// The policy's present value for a VM, from its account (none: the original setting).
    fn of_account(a: Option<&Account>, info: &VmInfo) -> Self::Value;
    /// What the actuator sets for a value (`None`: put the original setting back).
    fn to_set(v: Self::Value) -> Option<Self::Set>;
    /// `v` under a ceiling.
    fn under(v: Self::Value, ceiling: Option<Self::Value>) -> Self::Value;
    /// Refuses a pin the lever cannot hold.
    fn check(s: &Self::Set) -> Result<(), CoreError>;
    /// Whether the VM has this lever at all.
    fn has(info: &VmInfo) -> bool;
    /// The refusal for a VM without it.
    fn missing(name: &str) -> CoreError;
    /// The message for a pin, with the value pinned.
    fn pin_msg(v: Self::Value) -> String;
    /// The message for a lifted pin, with the value now in force.
    fn unpin_msg(v: Self::Value) -> String;
    /// The VM's lever of this kind.
    fn of(l: &Levers) -> &Lever<Self>;
    /// The same, to change.
    fn of_mut(l: &mut Levers) -> &mut Lever<Self>;
    /// The intents of this kind.
    fn intents(i: &mut Intents) -> &mut Vec<Intent<Self>>;
}

/// Why a lever changes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Cause<R> {
    /// The policy decided it.
    Policy(R),
    /// The admin pinned it (`resex cap`, `resex rate`).
    Pinned,
    /// The admin lifted a pin (the policy's value, or the original setting, is back).
    Unpinned,
    /// A new policy starts from the VMs' original settings.
    PolicyChanged,
    /// The host is stopping: every lever goes back to its original setting.
    Shutdown,
    /// The fleet's coordinator allocated a ceiling.
    Fleet,
    /// The fleet's ceiling was lifted (lapsed, or the fleet was lost): the local policy alone.
    FleetLifted,
}

impl<R: fmt::Display> fmt::Display for Cause<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cause::Policy(r) => r.fmt(f),
            Cause::Pinned => f.write_str("pinned by the admin"),
            Cause::Unpinned => f.write_str("unpinned by the admin"),
            Cause::PolicyChanged => f.write_str("policy changed: original setting"),
            Cause::Shutdown => f.write_str("stopping: original setting"),
            Cause::Fleet => f.write_str("the fleet's allocation"),
            Cause::FleetLifted => f.write_str("fleet allocation lifted: local policy"),
        }
    }
}

/// A lever's value to set on a VM.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Intent<K: LeverKind> {
    /// Which VM.
    pub vm: VmId,
    /// The value; [`LeverKind::ORIGINAL`]: the VM's original setting.
    pub value: K::Value,
    /// Why.
    pub cause: Cause<K::Reason>,
}

/// One lever of one VM.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Lever<K: LeverKind> {
    value: K::Value,
    pinned: Option<K::Value>,
    ceiling: Option<K::Value>,
    /// Why it last changed, and to what (kept as the cause: no string per step).
    why: Option<(Cause<K::Reason>, K::Value)>,
}

impl<K: LeverKind> Default for Lever<K> {
    fn default() -> Self {
        Self {
            value: K::ORIGINAL,
            pinned: None,
            ceiling: None,
            why: None,
        }
    }
}

impl<K: LeverKind> Lever<K> {
    /// What is in force.
    pub fn value(&self) -> K::Value {
        self.value
    }
    /// The admin's pin.
    pub fn pinned(&self) -> Option<K::Value> {
        self.pinned
    }
    /// The fleet's ceiling.
    pub fn ceiling(&self) -> Option<K::Value> {
        self.ceiling
    }
    /// Why it last changed, for people.
    pub fn reason(&self) -> Option<String> {
        self.why.map(|(cause, v)| match cause {
            Cause::Pinned => K::pin_msg(v),
            Cause::Unpinned => K::unpin_msg(v),
            c => c.to_string(),
        })
    }
    /// What the core would set without the admin's pin: `policy` under the ceiling.
    fn unpinned(&self, policy: K::Value) -> K::Value {
        K::under(policy, self.ceiling)
    }
    fn change(&mut self, vm: VmId, value: K::Value, cause: Cause<K::Reason>) -> Intent<K> {
        self.value = value;
        self.why = Some((cause, value));
        Intent { vm, value, cause }
    }
    /// The policy's decision, under the ceiling; `None` while the admin's pin holds.
    pub(crate) fn decide(
        &mut self,
        vm: VmId,
        s: K::Set,
        reason: K::Reason,
        info: &VmInfo,
    ) -> Option<Intent<K>> {
        if self.pinned.is_some() {
            return None;
        }
        let v = self.unpinned(K::decided(s, info));
        Some(self.change(vm, v, Cause::Policy(reason)))
    }
    /// The admin pins (`Some`) or lifts the pin (`None`: `policy` under the ceiling is back).
    pub(crate) fn pin(
        &mut self,
        vm: VmId,
        s: Option<K::Set>,
        policy: K::Value,
    ) -> (String, Intent<K>) {
        let (v, cause) = match s {
            Some(s) => (K::pinned(s), Cause::Pinned),
            None => (self.unpinned(policy), Cause::Unpinned),
        };
        self.pinned = s.map(K::pinned);
        let intent = self.change(vm, v, cause);
        (self.reason().unwrap_or_default(), intent)
    }
    /// A new ceiling (`None`: lifted) over `policy`; an intent when the value in force changes.
    pub(crate) fn set_ceiling(
        &mut self,
        vm: VmId,
        c: Option<K::Value>,
        policy: K::Value,
    ) -> Option<Intent<K>> {
        if self.ceiling == c {
            return None;
        }
        self.ceiling = c;
        if self.pinned.is_some() {
            return None; // the admin's value wins; the ceiling applies when the pin is lifted
        }
        let v = self.unpinned(policy);
        let cause = if c.is_some() {
            Cause::Fleet
        } else {
            Cause::FleetLifted
        };
        (v != self.value).then(|| self.change(vm, v, cause))
    }
    /// A new policy: the original setting (under the ceiling) unless pinned.
    pub(crate) fn reset(&mut self, vm: VmId) -> Option<Intent<K>> {
        let keep = self.unpinned(K::ORIGINAL);
        (self.pinned.is_none() && self.value != keep)
            .then(|| self.change(vm, keep, Cause::PolicyChanged))
    }
    /// The host stops: pin and ceiling dropped, the original setting back.
    pub(crate) fn restore(&mut self, vm: VmId) -> Option<Intent<K>> {
        self.pinned = None;
        self.ceiling = None;
        if self.value == K::ORIGINAL {
            return None;
        }
        // The reason stays the last one given while the host ran.
        self.value = K::ORIGINAL;
        Some(Intent {
            vm,
            value: K::ORIGINAL,
            cause: Cause::Shutdown,
        })
    }
}

/// Every lever of a VM.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Levers {
    /// Its CPU cap.
    pub cap: Lever<Cap>,
    /// Its transmit limit.
    pub tx: Lever<Tx>,
}

/// The CPU cap: percent of one physical CPU (`None`: the original setting, uncapped by the
/// core), through the backend.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cap;

impl LeverKind for Cap {
    type Value = Option<f64>;
    type Set = f64;
    type Reason = CapReason;
    const ORIGINAL: Option<f64> = None;
    fn pinned(p: f64) -> Option<f64> {
        Some(p)
    }
    fn decided(p: f64, info: &VmInfo) -> Option<f64> {
        // A cap at the VM's full size is no cap: the original setting.
        (p < info.full_cap() - 1e-9).then_some(p)
    }
    fn of_account(a: Option<&Account>, info: &VmInfo) -> Option<f64> {
        a.and_then(|a| Self::decided(a.cap, info))
    }
    fn to_set(v: Option<f64>) -> Option<f64> {
        v
    }
    fn under(v: Option<f64>, ceiling: Option<Option<f64>>) -> Option<f64> {
        match (v, ceiling.flatten()) {
            (Some(v), Some(c)) => Some(v.min(c)),
            (v, c) => v.or(c),
        }
    }
    fn check(p: &f64) -> Result<(), CoreError> {
        if p.is_finite() && *p > 0.0 {
            Ok(())
        } else {
            Err(CoreError::BadCap(*p))
        }
    }
    fn has(_: &VmInfo) -> bool {
        true
    }
    fn missing(name: &str) -> CoreError {
        CoreError::UnknownName(name.to_owned())
    }
    fn pin_msg(v: Option<f64>) -> String {
        match v {
            Some(p) => format!("pinned at {p}% by the admin"),
            None => "pinned at the original setting by the admin".to_owned(),
        }
    }
    fn unpin_msg(v: Option<f64>) -> String {
        match v {
            Some(c) => format!("unpinned by the admin: the policy's cap {c:.1}%"),
            None => "unpinned by the admin: original setting".to_owned(),
        }
    }
    fn of(l: &Levers) -> &Lever<Self> {
        &l.cap
    }
    fn of_mut(l: &mut Levers) -> &mut Lever<Self> {
        &mut l.cap
    }
    fn intents(i: &mut Intents) -> &mut Vec<Intent<Self>> {
        &mut i.caps
    }
}

/// The transmit limit: the VM's guaranteed rate, ceiling and weight in its port's transmit
/// scheduler ([`TxLimit::NONE`]: the original setting), through the rate lever. A ceiling over
/// it (the fleet's) is a [`TxLimit`] with only `max_bps` set.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tx;

impl LeverKind for Tx {
    type Value = TxLimit;
    type Set = TxLimit;
    type Reason = TxReason;
    const ORIGINAL: TxLimit = TxLimit::NONE;
    fn pinned(t: TxLimit) -> TxLimit {
        t
    }
    fn decided(t: TxLimit, _: &VmInfo) -> TxLimit {
        t
    }
    fn of_account(a: Option<&Account>, _: &VmInfo) -> TxLimit {
        a.map_or(TxLimit::NONE, |a| a.tx)
    }
    fn to_set(v: TxLimit) -> Option<TxLimit> {
        (!v.is_none()).then_some(v)
    }
    fn under(v: TxLimit, ceiling: Option<TxLimit>) -> TxLimit {
        combine(v, ceiling.and_then(|c| c.max_bps))
    }
    fn check(t: &TxLimit) -> Result<(), CoreError> {
        let bad_share = t.share_bps == Some(0)
            || matches!((t.share_bps, t.max_bps), (Some(s), Some(m)) if s > m);
        if bad_share || t.max_bps == Some(0) {
            Err(CoreError::BadTx(*t))
        } else {
            Ok(())
        }
    }
    fn has(info: &VmInfo) -> bool {
        info.tx_lever.is_some()
    }
    fn missing(name: &str) -> CoreError {
        CoreError::NoTxLever(name.to_owned())
    }
    fn pin_msg(t: TxLimit) -> String {
        format!("transmit {t}, pinned by the admin")
    }
    fn unpin_msg(t: TxLimit) -> String {
        format!("unpinned by the admin: transmit {t}")
    }
    fn of(l: &Levers) -> &Lever<Self> {
        &l.tx
    }
    fn of_mut(l: &mut Levers) -> &mut Lever<Self> {
        &mut l.tx
    }
    fn intents(i: &mut Intents) -> &mut Vec<Intent<Self>> {
        &mut i.tx
    }
}

/// A ceiling of `bps` bits per second, as a transmit limit.
pub fn tx_ceiling(bps: u64) -> TxLimit {
    TxLimit::new(None, Some(bps))
}

/// What to actuate: a step's changes, or those outside a step (a policy change, the fleet, the
/// host stopping).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Intents {
    /// Caps.
    pub caps: Vec<Intent<Cap>>,
    /// Transmit limits.
    pub tx: Vec<Intent<Tx>>,
}

impl Intents {
    /// True when there is nothing to do.
    pub fn is_empty(&self) -> bool {
        self.caps.is_empty() && self.tx.is_empty()
    }

    /// Forgets them all (the buffers are kept).
    pub fn clear(&mut self) {
        self.caps.clear();
        self.tx.clear();
    }

    /// Adds one.
    pub fn push<K: LeverKind>(&mut self, i: Intent<K>) {
        K::intents(self).push(i);
    }
}

/// The local policy's limit under the fleet's ceiling.
#[must_use]
pub fn combine(policy: TxLimit, fleet: Option<u64>) -> TxLimit {
    let Some(f) = fleet else {
        return policy;
    };
    let max = policy.max_bps.map_or(f, |m| m.min(f)).max(1);
    TxLimit {
        share_bps: policy.share_bps.map(|s| s.min(max)),
        max_bps: Some(max),
        weight: policy.weight,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VM: VmId = VmId(7);

    fn info() -> VmInfo {
        VmInfo::new("g", 2, 1 << 30)
    }

    fn limit(share: u64, max: u64) -> TxLimit {
        TxLimit::new(Some(share), Some(max))
    }

    #[test]
    fn the_pin_wins_over_the_policy_and_the_ceiling_until_it_is_lifted() {
        let mut l = Lever::<Tx>::default();
        let i = l.decide(VM, limit(300, 500), TxReason::Release, &info());
        assert_eq!(i.map(|i| i.value), Some(limit(300, 500)));
        let (msg, i) = l.pin(VM, Some(limit(10, 20)), limit(300, 500));
        assert_eq!((i.value, i.cause), (limit(10, 20), Cause::Pinned));
        assert_eq!(msg, "transmit share 10bit max 20bit, pinned by the admin");
        assert_eq!(l.reason().as_deref(), Some(msg.as_str()));
        assert!(l
            .decide(VM, limit(1, 2), TxReason::Release, &info())
            .is_none());
        assert!(l
            .set_ceiling(VM, Some(tx_ceiling(200)), limit(300, 500))
            .is_none());
        assert_eq!(l.value(), limit(10, 20), "the pin holds");
        // Lifted: the policy's value under the fleet's ceiling.
        let (msg, i) = l.pin(VM, None, limit(300, 500));
        assert_eq!((i.value, i.cause), (limit(200, 200), Cause::Unpinned));
        assert!(msg.starts_with("unpinned by the admin: transmit"), "{msg}");
        // A new policy starts from the original setting, under the ceiling still.
        let i = l.reset(VM).unwrap();
        assert_eq!((i.value, i.cause), (tx_ceiling(200), Cause::PolicyChanged));
        assert!(l.reset(VM).is_none(), "nothing left to reset");
        let i = l.set_ceiling(VM, None, TxLimit::NONE).unwrap();
        assert_eq!((i.value, i.cause), (TxLimit::NONE, Cause::FleetLifted));
    }

    #[test]
    fn a_new_policy_keeps_the_pin_and_the_host_stopping_drops_everything() {
        let mut l = Lever::<Cap>::default();
        l.pin(VM, Some(40.0), None);
        assert!(l.reset(VM).is_none());
        assert_eq!((l.value(), l.pinned()), (Some(40.0), Some(Some(40.0))));
        let i = l.restore(VM).unwrap();
        assert_eq!((i.value, i.cause), (None, Cause::Shutdown));
        let after = Lever::<Cap> {
            why: l.why,
            ..Default::default()
        };
        assert_eq!(l, after, "no pin, no ceiling, the original setting");
        assert!(l.restore(VM).is_none(), "restored once");
        assert_eq!(
            l.reason().as_deref(),
            Some("pinned at 40% by the admin"),
            "the last reason given while the host ran"
        );
    }

    #[test]
    fn a_cap_at_the_vms_full_size_is_the_original_setting() {
        let mut l = Lever::<Cap>::default();
        let i = l.decide(VM, 200.0, CapReason::EpochReplenish, &info());
        assert_eq!(i.unwrap().value, None);
        let i = l.decide(VM, 150.0, CapReason::EpochReplenish, &info());
        assert_eq!(i.unwrap().value, Some(150.0));
        assert_eq!(Cap::to_set(Some(150.0)), Some(150.0));
        assert_eq!(Tx::to_set(TxLimit::NONE), None);
        assert_eq!(Cap::under(Some(150.0), Some(Some(90.0))), Some(90.0));
        assert_eq!(Cap::under(None, Some(Some(90.0))), Some(90.0));
        assert_eq!(Cap::under(Some(150.0), None), Some(150.0));
        assert!(Cap::check(&0.0).is_err() && Cap::check(&f64::NAN).is_err());
        assert!(Tx::check(&limit(5, 4)).is_err() && Tx::check(&limit(4, 5)).is_ok());
    }

    #[test]
    fn an_unchanged_ceiling_is_no_intent() {
        let mut l = Lever::<Tx>::default();
        assert!(l.set_ceiling(VM, None, TxLimit::NONE).is_none());
        let c = Some(tx_ceiling(100));
        assert!(l.set_ceiling(VM, c, TxLimit::NONE).is_some());
        assert!(l.set_ceiling(VM, c, TxLimit::NONE).is_none());
        // A new ceiling over a value it does not change is recorded, with no intent.
        let mut l = Lever::<Tx>::default();
        l.decide(VM, limit(10, 50), TxReason::Release, &info());
        assert!(l
            .set_ceiling(VM, Some(tx_ceiling(80)), limit(10, 50))
            .is_none());
        assert_eq!(l.ceiling(), Some(tx_ceiling(80)));
    }
}
