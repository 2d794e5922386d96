//! One VM as the core keeps it.

use crate::cpu::CpuMeter;
use crate::info::VmInfo;
use crate::lever::Levers;
use resex_common::{LatencyReport, LogLimiter, NicTimes, TxLimit, VmId};
use resex_guestmem::GuestMemory;
use resex_ibmon::{Counters, Queueing, ScanTarget, VmRings};
use resex_pricing::{BaselineLearner, VmSpec};
use std::sync::Arc;

/// One VM. In declaration order (`repr(C)`): what a step reads for every VM, its rings (their
/// hot head first) last; what only the admin, snapshots, reports, the NIC's samples and
/// pricing read is behind one pointer, so that the core's array of VMs is dense (a step walks
/// it like a stream: an idle VM's step reads its first 128 bytes, a busy one's 96 more).
#[repr(C)]
pub(crate) struct Vm {
    pub(crate) id: VmId,
    /// The mailbox block the guest's writer fills next (where the host looks each tick).
    pub(crate) mailbox_next: u32,
    /// Its row in the core's last output is its idle row (nothing counted, no report, no
    /// price, no lever change) with its present CPU percent: an idle step need not write it.
    pub(crate) row_idle: bool,
    pub(crate) mem: Option<Arc<dyn GuestMemory>>,
    /// The NIC measures its work requests (`cold.nic` has a sample).
    pub(crate) has_nic: bool,
    /// Its CPU percent in force (the CPU meter's, kept here for the step).
    pub(crate) cpu_pct: f64,
    pub(crate) rings: VmRings,
    pub(crate) cold: Box<VmCold>,
}

/// What a step does not read for every VM.
pub(crate) struct VmCold {
    pub(crate) cpu: CpuMeter,
    /// What the NIC measured of its work requests (where the driver can read it).
    pub(crate) nic: NicMeter,
    pub(crate) info: VmInfo,
    pub(crate) learner: BaselineLearner,
    pub(crate) last_report: Option<LatencyReport>,
    /// Its CPU cap and transmit limit: in force, pinned, the fleet's ceiling, why.
    pub(crate) levers: Levers,
    pub(crate) registrations: u64,
    pub(crate) rejections: u64,
    pub(crate) last_error: Option<String>,
    pub(crate) reports: u64,
    pub(crate) bad_reports: u64,
    /// Requests, count x mean and count x p99 over all reports (ns).
    pub(crate) lat_totals: (u64, f64, f64),
    pub(crate) log_mailbox: LogLimiter,
    /// Counters and CPU sample at the last snapshot.
    pub(crate) at_snapshot: Option<(Counters, Option<crate::CpuSample>, Queueing)>,
}

/// A VM's NIC times: the driver's cumulative samples into deltas per interval.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct NicMeter {
    /// The last sample (`None`: the NIC measures nothing for this VM).
    pub(crate) total: Option<NicTimes>,
    /// The total at the last step.
    at_step: NicTimes,
}

impl NicMeter {
    /// What was added since the last step.
    pub(crate) fn take_interval(&mut self) -> Option<NicTimes> {
        let t = self.total?;
        let d = t.since(&self.at_step);
        self.at_step = t;
        Some(d)
    }
}

impl Vm {
    pub(crate) fn new(id: VmId, info: VmInfo) -> Self {
        let rings = VmRings::new(info.name.as_str());
        let cold = VmCold {
            cpu: CpuMeter::default(),
            nic: NicMeter::default(),
            info,
            learner: BaselineLearner::default(),
            last_report: None,
            levers: Levers::default(),
            registrations: 0,
            rejections: 0,
            last_error: None,
            reports: 0,
            bad_reports: 0,
            lat_totals: (0, 0.0, 0.0),
            log_mailbox: LogLimiter::default(),
            at_snapshot: None,
        };
        Self {
            id,
            mailbox_next: 0,
            row_idle: false,
            mem: None,
            has_nic: false,
            cpu_pct: 0.0,
            rings,
            cold: Box::new(cold),
        }
    }

    /// The engine's view of this VM (its learned baseline included).
    pub(crate) fn spec(&self) -> VmSpec {
        VmSpec {
            id: self.id,
            name: self.cold.info.name.clone(),
            vcpus: self.cold.info.vcpus.max(1),
            weight: self.cold.info.weight,
            sla_threshold: self.cold.info.sla_threshold,
            baseline: self.cold.learner.baseline(),
            entitlement: self.cold.info.entitlement,
        }
    }

    /// Takes a merged report.
    pub(crate) fn take_report(&mut self, r: LatencyReport) {
        self.cold.last_report = Some(r);
        self.cold.learner.learn(&r);
        let c = r.count as f64;
        self.cold.lat_totals.0 += r.count;
        self.cold.lat_totals.1 += c * r.mean_ns;
        self.cold.lat_totals.2 += c * r.p99_ns;
    }

    /// `registered`, `rejected` or `waiting`.
    pub(crate) fn state(&self) -> &'static str {
        if self.cold.registrations > 0 {
            "registered"
        } else if self.cold.rejections > 0 {
            "rejected"
        } else {
            "waiting"
        }
    }
}

/// What the core's step scans of a VM: its rings, once its memory is known.
impl ScanTarget for Vm {
    type Memory = dyn GuestMemory;
    type Rings = VmRings;
    fn parts(&mut self) -> Option<(&mut VmRings, &(dyn GuestMemory + 'static))> {
        let mem = self.mem.as_deref()?;
        Some((&mut self.rings, mem))
    }
}

/// A read-only view of one VM.
#[derive(Clone, Copy)]
pub struct VmView<'a> {
    pub(crate) vm: &'a Vm,
}

impl std::fmt::Debug for VmView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "VmView({} {})", self.vm.id, self.vm.cold.info.name)
    }
}

impl<'a> VmView<'a> {
    /// Its id.
    pub fn id(&self) -> VmId {
        self.vm.id
    }
    /// What the driver said about it.
    pub fn info(&self) -> &'a VmInfo {
        &self.vm.cold.info
    }
    /// Everything its monitors counted.
    pub fn total(&self) -> Counters {
        self.vm.rings.total()
    }
    /// Its levers (in force, pinned, the fleet's ceiling, why).
    pub fn levers(&self) -> &'a Levers {
        &self.vm.cold.levers
    }
    /// The cap the core decided (None: the original setting).
    pub fn cap(&self) -> Option<f64> {
        self.vm.cold.levers.cap.value()
    }
    /// The admin's pinned cap.
    pub fn pinned(&self) -> Option<f64> {
        self.vm.cold.levers.cap.pinned().flatten()
    }
    /// The transmit limit the core decided.
    pub fn tx(&self) -> TxLimit {
        self.vm.cold.levers.tx.value()
    }
    /// Queue pairs monitored.
    pub fn qps(&self) -> usize {
        self.vm.rings.qps()
    }
    /// Reports accepted and mailbox blocks refused.
    pub fn reports(&self) -> (u64, u64) {
        (self.vm.cold.reports, self.vm.cold.bad_reports)
    }
    /// Monitors attached at the rings' present position (the rings were already live).
    pub fn attached_live(&self) -> u64 {
        self.vm.rings.attached_live()
    }
    /// The QPs of those monitors, with what they missed.
    pub fn late_qps(&self) -> &[resex_ibmon::LateQp] {
        self.vm.rings.late()
    }
    /// Its learned quiet latency.
    pub fn baseline(&self) -> Option<resex_pricing::Baseline> {
        self.vm.cold.learner.baseline()
    }
}
