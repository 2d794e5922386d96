//! The Resos ledger: one account per VM, allotments per epoch, charges per interval.
//!
//! Allotment per epoch = CPU Resos (1 per CPU percent per interval, x vCPUs: 100 x 1 000 =
//! 100 000 for one vCPU and 1 ms intervals) + the VM's share of the link's MTUs per epoch
//! (equal, or by weight). A VM present for only part of an epoch (it arrived late, or the engine
//! started mid-epoch) gets that fraction of it. Leftovers are discarded at the epoch's end.

use crate::config::{IoSplit, PolicyConfig};
use crate::types::{Baseline, CapReason, LatencyReport, TxLimit, TxReason, VmId, VmSpec};

/// Baseline learning state of one VM (IOShares).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BaselineState {
    /// Reports averaged so far while learning.
    pub learned: u32,
    /// Sum of the learned reports' means.
    pub sum_mean: f64,
    /// Sum of the learned reports' stddevs.
    pub sum_stddev: f64,
    /// The baseline, once configured or learned.
    pub baseline: Option<Baseline>,
}

/// One VM's account and its state as the policies see it.
#[derive(Debug, Clone, PartialEq)]
pub struct Account {
    /// The VM.
    pub spec: VmSpec,
    /// First interval the VM is priced in.
    pub joined: u64,
    /// This epoch's allotment (Resos).
    pub allotment: f64,
    /// What is left of it (never below zero).
    pub balance: f64,
    /// Resos per CPU percent and per MTU.
    pub rate: f64,
    /// The cap in force (last decided), percent of one physical CPU.
    pub cap: f64,
    /// The cap's ceiling: 100 x vCPUs.
    pub max_cap: f64,
    /// Balance-rule cuts this epoch.
    pub cuts: u32,
    /// This interval's CPU use, percent.
    pub cpu_pct: f64,
    /// This interval's MTUs.
    pub mtus: u64,
    /// This interval's bytes.
    pub bytes: u64,
    /// The report that arrived this interval (as the host credits it: see [`crate::evidence`]).
    pub report: Option<LatencyReport>,
    /// What the NIC measured of its work requests this interval, where it measures them.
    pub nic: Option<resex_common::NicTimes>,
    /// The host's evidence against its reports.
    pub evidence: crate::evidence::Evidence,
    /// This interval's CPU charge.
    pub charge_cpu: f64,
    /// This interval's I/O charge.
    pub charge_io: f64,
    /// Interference this interval's report showed.
    pub intf: Option<f64>,
    /// The VM this interval's report blamed.
    pub interferer: Option<VmId>,
    /// IOShares baseline state.
    pub baseline: BaselineState,
    /// The last VM whose report named this VM an interferer in the current actuation period.
    pub named_by: Option<VmId>,
    /// The rate at the last cap decision.
    pub rate_at_decision: f64,
    /// The policy's proposed cap at an actuation boundary (before clamping), and why.
    pub proposal: Option<(f64, CapReason)>,
    /// The transmit limit in force (last decided).
    pub tx: TxLimit,
    /// The policy's proposed transmit limit at an actuation boundary, and why.
    pub tx_proposal: Option<(TxLimit, TxReason)>,
    /// Its entitlement in force and its rate against it (the guard's state).
    pub ent: crate::types::Entitled,
    /// Set once this interval's usage was filled (catches duplicates).
    pub(crate) seen: bool,
}

impl Account {
    pub(crate) fn new(spec: VmSpec, joined: u64) -> Self {
        let max_cap = 100.0 * f64::from(spec.vcpus.max(1));
        let baseline = BaselineState {
            baseline: spec.baseline,
            ..BaselineState::default()
        };
        Self {
            spec,
            joined,
            allotment: 0.0,
            balance: 0.0,
            rate: 1.0,
            cap: max_cap,
            max_cap,
            cuts: 0,
            cpu_pct: 0.0,
            mtus: 0,
            bytes: 0,
            report: None,
            nic: None,
            evidence: crate::evidence::Evidence::default(),
            charge_cpu: 0.0,
            charge_io: 0.0,
            intf: None,
            interferer: None,
            baseline,
            named_by: None,
            rate_at_decision: 1.0,
            proposal: None,
            tx: TxLimit::NONE,
            tx_proposal: None,
            ent: crate::types::Entitled::default(),
            seen: false,
        }
    }

    /// The VM's id.
    pub fn id(&self) -> VmId {
        self.spec.id
    }

    /// Charges this interval's usage at the VM's rate; the balance stops at zero.
    pub fn charge(&mut self) {
        self.charge_cpu = self.cpu_pct * self.rate;
        // u64 -> f64: exact below 2^53 MTUs per interval, far beyond any link.
        self.charge_io = self.mtus as f64 * self.rate;
        self.balance = (self.balance - self.charge_cpu - self.charge_io).max(0.0);
    }
}

/// The epoch arithmetic of one configuration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EpochClock {
    /// Intervals per epoch.
    pub per_epoch: u64,
    /// Intervals per actuation period.
    pub per_actuation: u64,
}

impl EpochClock {
    /// From a validated configuration.
    pub fn new(cfg: &PolicyConfig) -> Self {
        Self {
            per_epoch: cfg.intervals_per_epoch(),
            per_actuation: cfg.intervals_per_actuation(),
        }
    }

    /// The epoch an interval belongs to.
    pub fn epoch(&self, interval: u64) -> u64 {
        interval / self.per_epoch
    }

    /// First interval of the interval's epoch.
    pub fn epoch_start(&self, interval: u64) -> u64 {
        self.epoch(interval) * self.per_epoch
    }

    /// Fraction of the epoch still to come after `interval` has been priced.
    pub fn left_after(&self, interval: u64) -> f64 {
        let done = interval % self.per_epoch + 1;
        (self.per_epoch - done) as f64 / self.per_epoch as f64
    }
}

/// Allotment arithmetic.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Allotter {
    clock: EpochClock,
    link_mtus: f64,
    split: IoSplit,
}

impl Allotter {
    /// From a validated configuration.
    pub fn new(cfg: &PolicyConfig) -> Self {
        Self {
            clock: EpochClock::new(cfg),
            link_mtus: cfg.link_mtus_per_epoch(),
            split: cfg.ledger.io_split,
        }
    }

    /// A VM's weight under the configured split.
    pub fn weight(&self, spec: &VmSpec) -> f64 {
        match self.split {
            IoSplit::Equal => 1.0,
            IoSplit::Weight => spec.weight,
        }
    }

    /// The allotment of a VM with `weight` out of `total_weight`, present from `joined`, for the
    /// epoch that contains `interval`.
    pub fn allotment(&self, spec: &VmSpec, total_weight: f64, joined: u64, interval: u64) -> f64 {
        let start = self.clock.epoch_start(interval);
        let end = start + self.clock.per_epoch;
        let from = joined.max(start).min(end);
        let fraction = (end - from) as f64 / self.clock.per_epoch as f64;
        let cpu = 100.0 * f64::from(spec.vcpus.max(1)) * self.clock.per_epoch as f64;
        let io = if total_weight > 0.0 {
            self.link_mtus * self.weight(spec) / total_weight
        } else {
            0.0
        };
        (cpu + io) * fraction
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PolicyKind;

    #[test]
    fn paper_allotment_for_one_vcpu_alone_is_cpu_plus_whole_link() {
        let cfg = PolicyConfig::defaults(PolicyKind::Freemarket);
        let a = Allotter::new(&cfg);
        let spec = VmSpec::new(1, "a", 1);
        assert_eq!(a.allotment(&spec, 1.0, 0, 0), 100_000.0 + 1_048_576.0);
        assert_eq!(a.allotment(&spec, 2.0, 0, 0), 100_000.0 + 524_288.0);
    }

    #[test]
    fn late_arrival_is_prorated() {
        let cfg = PolicyConfig::defaults(PolicyKind::Freemarket);
        let a = Allotter::new(&cfg);
        let spec = VmSpec::new(1, "a", 2);
        // Joins at interval 1 750: a quarter of epoch 1 is left.
        let full = 200_000.0 + 1_048_576.0;
        assert_eq!(a.allotment(&spec, 1.0, 1750, 1750), full / 4.0);
        // The next epoch is whole again.
        assert_eq!(a.allotment(&spec, 1.0, 1750, 2000), full);
    }

    #[test]
    fn weights_split_the_link() {
        let mut cfg = PolicyConfig::defaults(PolicyKind::Freemarket);
        cfg.ledger.io_split = IoSplit::Weight;
        let a = Allotter::new(&cfg);
        let mut spec = VmSpec::new(1, "a", 1);
        spec.weight = 3.0;
        assert_eq!(a.allotment(&spec, 4.0, 0, 0), 100_000.0 + 786_432.0);
    }

    #[test]
    fn epoch_left_counts_the_interval_just_priced() {
        let cfg = PolicyConfig::defaults(PolicyKind::Freemarket);
        let c = EpochClock::new(&cfg);
        assert_eq!(c.left_after(0), 0.999);
        assert_eq!(c.left_after(999), 0.0);
        assert_eq!(c.left_after(1899), 0.1);
    }
}
