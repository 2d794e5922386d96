//! The lab's driver of the host core: what happens at the end of each virtual interval, minus
//! the models. The guests' CPU time is sampled at the interval's end, the core steps at that
//! time, and its cap intents are applied to the vCPU models after the actuator delay. It adds
//! nothing to what the core decides: the same trace through resexd's driver gives the same
//! decisions (a test holds the two to that).

use resex_api::Snapshot;
use resex_common::{TxLimit, VmId};
use resex_core::{
    CoreConfig, CpuSample, FleetApplied, FleetCeilings, HostCore, Intents, NamedPolicy, StepOutput,
    VmInfo,
};
use resex_guestmem::GuestMemory;
use resex_ibmon::registry::validate;
use resex_proto::Registration;
use std::collections::VecDeque;
use std::sync::Arc;

/// Why the driver refused something.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// The monitor refused a registration.
    #[error("{vm}: registration refused: {why}")]
    Registration {
        /// Which VM.
        vm: String,
        /// Why.
        why: String,
    },
    /// The core refused.
    #[error(transparent)]
    Core(#[from] resex_core::CoreError),
}

/// What the driver applies to a guest after the actuator delay.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Action {
    /// A CPU cap (None: uncapped) on its vCPU.
    Cap(Option<f64>),
    /// A transmit limit on its port in softhca's scheduler.
    Tx(TxLimit),
}

/// The driver.
#[derive(Debug)]
pub struct LabDriver {
    core: HostCore,
    delay_ns: u64,
    /// Caps and limits decided and not applied yet: (when, VM, what).
    pending: VecDeque<(u64, VmId, Action)>,
    samples: Vec<(VmId, CpuSample)>,
}

impl LabDriver {
    /// A driver with a policy (`None`: monitoring only) and an actuator delay.
    pub fn new(cfg: CoreConfig, policy: Option<NamedPolicy>, actuator_delay_ns: u64) -> Self {
        let mut core = HostCore::new(cfg);
        // No cap is in force yet: there is nothing to restore.
        let _ = core.set_policy(policy, 0);
        Self {
            core,
            delay_ns: actuator_delay_ns,
            pending: VecDeque::new(),
            samples: Vec::new(),
        }
    }

    /// The core.
    pub fn core(&self) -> &HostCore {
        &self.core
    }

    /// A guest starts: it appears with its memory and registers its rings (and mailbox).
    pub fn add(
        &mut self,
        id: VmId,
        info: VmInfo,
        mem: Arc<dyn GuestMemory>,
        doc: &Registration,
    ) -> Result<(), DriverError> {
        let layout = validate(doc, info.ram_size, &self.core.config().limits).map_err(|e| {
            DriverError::Registration {
                vm: info.name.clone(),
                why: e.to_string(),
            }
        })?;
        self.core.add_vm(id, info)?;
        self.core.set_memory(id, mem)?;
        self.core.register(id, doc, layout)?;
        Ok(())
    }

    /// A CPU-time sample outside an interval's end (a guest's zero when it starts).
    pub fn cpu_sample(&mut self, id: VmId, s: CpuSample) -> Result<(), DriverError> {
        Ok(self.core.cpu_sample(id, s)?)
    }

    /// The NIC's times for a guest's work requests, read before an interval's end.
    pub fn nic_sample(&mut self, id: VmId, t: resex_common::NicTimes) -> Result<(), DriverError> {
        Ok(self.core.nic_sample(id, t)?)
    }

    /// The end of an interval at `now_ns`: each guest's total CPU time, read now, then the
    /// core's step; its cap and transmit-limit intents are queued for `now + delay`.
    pub fn interval_end(
        &mut self,
        now_ns: u64,
        cpu_total_ns: impl IntoIterator<Item = (VmId, u64)>,
    ) -> Result<&StepOutput, DriverError> {
        self.samples.clear();
        self.samples
            .extend(cpu_total_ns.into_iter().map(|(id, total_ns)| {
                (
                    id,
                    CpuSample {
                        total_ns,
                        at_ns: now_ns,
                    },
                )
            }));
        for &(id, s) in &self.samples {
            self.core.cpu_sample(id, s)?;
        }
        let out = self.core.step(now_ns)?;
        queue(&mut self.pending, now_ns + self.delay_ns, &out.intents);
        Ok(self.core.last_output())
    }

    /// The fleet's ceilings from `now_ns` (`None`: lifted), as resexd's driver takes them; the
    /// transmit limits they change are queued like a step's.
    pub fn set_fleet(&mut self, c: Option<FleetCeilings>, now_ns: u64) -> FleetApplied {
        let (intents, done) = self.core.set_fleet(c);
        queue(&mut self.pending, now_ns + self.delay_ns, &intents);
        done
    }

    /// The API's snapshot of the core at `now_ns` (what resexd publishes; the fleet's summary
    /// is made from it).
    pub fn snapshot(&mut self, now_ns: u64) -> Snapshot {
        self.core.snapshot(now_ns)
    }

    /// When the next queued action takes effect.
    pub fn next_action_ns(&self) -> Option<u64> {
        self.pending.front().map(|p| p.0)
    }

    /// The next action due at `now_ns`, if any.
    pub fn pop_due(&mut self, now_ns: u64) -> Option<(VmId, Action)> {
        if self.pending.front().is_some_and(|p| p.0 <= now_ns) {
            self.pending.pop_front().map(|p| (p.1, p.2))
        } else {
            None
        }
    }
}

/// Intents into the pending actions, due `at`.
fn queue(pending: &mut VecDeque<(u64, VmId, Action)>, at: u64, intents: &Intents) {
    for i in &intents.caps {
        pending.push_back((at, i.vm, Action::Cap(i.value)));
    }
    for i in &intents.tx {
        pending.push_back((at, i.vm, Action::Tx(i.value)));
    }
}
