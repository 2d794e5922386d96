//! What a step returns: one row per VM and the lever changes to actuate.

pub use crate::lever::Intents;
use crate::lever::{Cap, Cause, Intent, LeverKind, Tx};
use resex_common::{LatencyReport, VmId};
use resex_ibmon::Counters;
use resex_pricing::{CapReason, TxReason};

/// Why a cap changes.
pub type CapCause = Cause<CapReason>;
/// A cap to set on a VM (`value`: percent of one physical CPU; `None`: the original setting).
pub type CapIntent = Intent<Cap>;
/// Why a transmit limit changes.
pub type TxCause = Cause<TxReason>;
/// A transmit limit to set on a VM's port (`value`; `TxLimit::NONE`: the original setting).
pub type TxIntent = Intent<Tx>;

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

impl VmRow {
    /// A VM's row before pricing and lever changes.
    pub(crate) fn new(
        vm: VmId,
        cpu_pct: f64,
        delta: Counters,
        report: Option<LatencyReport>,
    ) -> Self {
        Self {
            vm,
            cpu_pct,
            delta,
            report,
            priced: None,
            cap_set: None,
            tx_set: None,
        }
    }
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
    /// Caps and transmit limits to set, each in id order.
    pub intents: Intents,
}

/// Where a step's row shows a change of one lever.
pub(crate) trait RowSlot: LeverKind {
    /// A step row's change of this lever.
    fn slot(row: &mut VmRow) -> &mut Option<Intent<Self>>;
}

impl RowSlot for Cap {
    fn slot(row: &mut VmRow) -> &mut Option<Intent<Self>> {
        &mut row.cap_set
    }
}

impl RowSlot for Tx {
    fn slot(row: &mut VmRow) -> &mut Option<Intent<Self>> {
        &mut row.tx_set
    }
}
