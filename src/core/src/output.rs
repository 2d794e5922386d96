//! What a step returns: one row per VM and the caps to actuate.

use resex_common::{LatencyReport, TxLimit, VmId};
use resex_ibmon::Counters;
use resex_pricing::{CapReason, TxReason};
use std::fmt;

/// Why a cap changes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CapCause {
    /// The policy decided it.
    Policy(CapReason),
    /// The admin pinned the cap (`resex cap VM PCT`).
    Pinned,
    /// The admin lifted a pin (the policy's cap, or the original setting, is back).
    Unpinned,
    /// A new policy starts from the VMs' original settings.
    PolicyChanged,
    /// The host is stopping: every cap goes back to its original setting.
    Shutdown,
}

impl fmt::Display for CapCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CapCause::Policy(r) => r.fmt(f),
            CapCause::Pinned => f.write_str("pinned by the admin"),
            CapCause::Unpinned => f.write_str("unpinned by the admin"),
            CapCause::PolicyChanged => f.write_str("policy changed: original setting"),
            CapCause::Shutdown => f.write_str("stopping: original setting"),
        }
    }
}

/// A cap to set on a VM.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CapIntent {
    /// Which VM.
    pub vm: VmId,
    /// The cap, percent of one physical CPU; `None`: the VM's original setting.
    pub cap: Option<f64>,
    /// Why.
    pub cause: CapCause,
}

/// Why a transmit limit changes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TxCause {
    /// The policy decided it.
    Policy(TxReason),
    /// The admin pinned it (`resex rate VM ...`).
    Pinned,
    /// The admin lifted a pin (the policy's limit, or none, is back).
    Unpinned,
    /// A new policy starts from the VMs' original settings.
    PolicyChanged,
    /// The host is stopping: every limit goes back to its original setting.
    Shutdown,
    /// The fleet's coordinator allocated a ceiling.
    Fleet,
    /// The fleet's ceiling was lifted (lapsed, or the fleet was lost): the local policy alone.
    FleetLifted,
}

impl fmt::Display for TxCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TxCause::Policy(r) => r.fmt(f),
            TxCause::Pinned => f.write_str("pinned by the admin"),
            TxCause::Unpinned => f.write_str("unpinned by the admin"),
            TxCause::PolicyChanged => f.write_str("policy changed: original setting"),
            TxCause::Shutdown => f.write_str("stopping: original setting"),
            TxCause::Fleet => f.write_str("the fleet's allocation"),
            TxCause::FleetLifted => f.write_str("fleet allocation lifted: local policy"),
        }
    }
}

/// A transmit limit to set on a VM's port (the rate lever).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TxIntent {
    /// Which VM.
    pub vm: VmId,
    /// The limit; [`TxLimit::NONE`]: the VM's original setting.
    pub tx: TxLimit,
    /// Why.
    pub cause: TxCause,
}

/// What to actuate outside a step (a policy change, the host stopping).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Intents {
    /// Caps.
    pub caps: Vec<CapIntent>,
    /// Transmit limits.
    pub tx: Vec<TxIntent>,
}

impl Intents {
    /// True when there is nothing to do.
    pub fn is_empty(&self) -> bool {
        self.caps.is_empty() && self.tx.is_empty()
    }
}

/// A VM's line in the pricing engine after a step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Priced {
    /// Balance after this interval's charges, Resos.
    pub balance: f64,
    /// The VM's allotment this epoch, Resos.
    pub allotment: f64,
    /// Its charge rate.
    pub rate: f64,
    /// The cap the engine holds for it, percent of one CPU.
    pub cap: f64,
}

/// One VM's interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VmRow {
    /// Which VM.
    pub vm: VmId,
    /// CPU percent in force (from the last two CPU samples).
    pub cpu_pct: f64,
    /// What the monitor counted in this interval.
    pub delta: Counters,
    /// The latency reports that arrived in this interval, merged.
    pub report: Option<LatencyReport>,
    /// The engine's line, when the VM is priced.
    pub priced: Option<Priced>,
    /// A cap changed this interval.
    pub cap_set: Option<CapIntent>,
    /// A transmit limit changed this interval.
    pub tx_set: Option<TxIntent>,
}

/// The result of one step.
#[derive(Debug, Clone, Default)]
pub struct StepOutput {
    /// The interval priced (its end is `now`).
    pub interval: u64,
    /// Link utilisation in the interval, from the monitor's byte and packet counts.
    pub link_util: f64,
    /// One row per VM, in id order.
    pub rows: Vec<VmRow>,
    /// Caps to set, in id order.
    pub intents: Vec<CapIntent>,
    /// Transmit limits to set, in id order.
    pub tx_intents: Vec<TxIntent>,
}
