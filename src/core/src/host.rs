//! [`HostCore`]: the VM table, membership in pricing, the admin's pins (one path for every
//! lever, [`crate::lever`]), policy changes, and
//! the core's time base (which interval a time falls in).

use crate::config::CoreConfig;
pub use crate::error::CoreError;
use crate::info::VmInfo;
use crate::lever::{Intent, LeverKind};
use crate::output::{Intents, StepOutput};
use crate::vm::{Vm, VmView};
use crate::CpuSample;
use resex_common::VmId;
use resex_guestmem::GuestMemory;
use resex_ibmon::registry::Layout;
use resex_pricing::{Engine, PolicyConfig, VmUsage};
use resex_proto::Registration;
use std::sync::Arc;

/// A policy and the name it is shown under.
pub type NamedPolicy = (String, PolicyConfig);

/// The host core (see the crate's documentation).
pub struct HostCore {
    pub(crate) cfg: CoreConfig,
    /// Sorted by id.
    pub(crate) vms: Vec<Vm>,
    pub(crate) engine: Option<Engine>,
    pub(crate) policy_name: String,
    pub(crate) interval_ns: u64,
    /// Intervals are counted from here: the interval ending in `(t - iv, t]` for
    /// `t = base_ns + k iv` is `base_interval + k`.
    base_ns: u64,
    base_interval: u64,
    pub(crate) last: Option<u64>,
    pub(crate) out: StepOutput,
    pub(crate) usage: Vec<VmUsage>,
    /// Link bits counted since the last snapshot, and when that was.
    pub(crate) bits_since_snapshot: f64,
    pub(crate) snapshot_at_ns: u64,
    /// When the fleet's ceilings lapse (None: no fleet allocation in force).
    pub(crate) fleet_until_ns: Option<u64>,
    /// The time of the last step, ns on the driver's clock.
    pub(crate) last_now_ns: u64,
    /// VMs whose fleet ceiling follows a schedule (adaptive unfairness).
    pub(crate) fleet_adaptive: Vec<crate::adaptive::Scheduled>,
    /// Levers changed between steps (the fleet's), for the next step's rows (the journal).
    pub(crate) pending: Intents,
    /// The VM set changed since the last step: its rows are built afresh.
    pub(crate) rows_stale: bool,
}

impl std::fmt::Debug for HostCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "HostCore {{ {} VMs, policy {} }}",
            self.vms.len(),
            self.policy_name
        )
    }
}

impl HostCore {
    /// A core with no VM and no policy (monitoring only).
    pub fn new(cfg: CoreConfig) -> Self {
        let interval_ns = cfg.interval_ns.max(1);
        Self {
            cfg,
            vms: Vec::new(),
            engine: None,
            policy_name: "none".into(),
            interval_ns,
            base_ns: 0,
            base_interval: 0,
            last: None,
            out: StepOutput::default(),
            usage: Vec::new(),
            bits_since_snapshot: 0.0,
            snapshot_at_ns: 0,
            fleet_until_ns: None,
            last_now_ns: 0,
            fleet_adaptive: Vec::new(),
            pending: Intents::default(),
            rows_stale: true,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &CoreConfig {
        &self.cfg
    }

    /// The step's length in force, ns (the policy's interval, or the configured one).
    pub fn interval_ns(&self) -> u64 {
        self.interval_ns
    }

    /// The interval that ends in `(now - interval, now]` on the core's time base.
    pub fn interval_at(&self, now_ns: u64) -> u64 {
        self.base_interval + now_ns.saturating_sub(self.base_ns) / self.interval_ns
    }

    /// When the next interval ends: the time of the next step.
    pub fn next_step_ns(&self) -> u64 {
        let next = self.last.map_or(self.base_interval + 1, |l| l + 1);
        self.base_ns + (next - self.base_interval) * self.interval_ns
    }

    /// The last interval stepped.
    pub fn last_interval(&self) -> Option<u64> {
        self.last
    }

    /// The last step's output (empty before the first step).
    pub fn last_output(&self) -> &StepOutput {
        &self.out
    }

    /// The policy's name (`none`: monitoring only).
    pub fn policy_name(&self) -> &str {
        &self.policy_name
    }

    /// The pricing engine, when a policy is set.
    pub fn engine(&self) -> Option<&Engine> {
        self.engine.as_ref()
    }

    pub(crate) fn index(&self, id: VmId) -> Option<usize> {
        self.vms.binary_search_by_key(&id, |v| v.id).ok()
    }

    fn vm_mut(&mut self, id: VmId) -> Result<&mut Vm, CoreError> {
        let i = self.index(id).ok_or(CoreError::UnknownVm(id))?;
        Ok(&mut self.vms[i])
    }

    /// One VM.
    pub fn vm(&self, id: VmId) -> Option<VmView<'_>> {
        self.index(id).map(|i| VmView { vm: &self.vms[i] })
    }

    /// Every VM, in id order.
    pub fn vms(&self) -> impl Iterator<Item = VmView<'_>> {
        self.vms.iter().map(|vm| VmView { vm })
    }

    /// A VM by name.
    pub fn find(&self, name: &str) -> Option<VmId> {
        self.vms
            .iter()
            .find(|v| v.cold.info.name == name)
            .map(|v| v.id)
    }

    /// A VM appeared (its id must be new); it is priced from the next interval.
    pub fn add_vm(&mut self, id: VmId, info: VmInfo) -> Result<(), CoreError> {
        let at = match self.vms.binary_search_by_key(&id, |v| v.id) {
            Ok(_) => return Err(CoreError::DuplicateVm(id)),
            Err(at) => at,
        };
        let vm = Vm::new(id, info);
        if let Some(e) = &mut self.engine {
            if let Err(err) = e.add_vm(vm.spec(), self.last.map_or(1, |l| l + 1)) {
                tracing::error!("{}: {err}", vm.cold.info.name);
            }
        }
        self.vms.insert(at, vm);
        self.rows_stale = true;
        Ok(())
    }

    /// A VM is gone: its account is closed. Returns what the driver said about it.
    pub fn remove_vm(&mut self, id: VmId) -> Option<VmInfo> {
        let i = self.index(id)?;
        let vm = self.vms.remove(i);
        self.fleet_adaptive.retain(|k| k.vm != id);
        self.rows_stale = true;
        if let Some(e) = &mut self.engine {
            e.remove_vm(id);
        }
        Some(vm.cold.info)
    }

    /// The VM's guest memory (once the backend could map it).
    pub fn set_memory(&mut self, id: VmId, mem: Arc<dyn GuestMemory>) -> Result<(), CoreError> {
        self.vm_mut(id)?.mem = Some(mem);
        Ok(())
    }

    /// A CPU-time sample.
    pub fn cpu_sample(&mut self, id: VmId, s: CpuSample) -> Result<(), CoreError> {
        let vm = self.vm_mut(id)?;
        vm.cold.cpu.sample(s);
        vm.cpu_pct = vm.cold.cpu.pct();
        vm.row_idle = false;
        Ok(())
    }

    /// The NIC's cumulative times for the VM's work requests (see [`resex_common::NicTimes`]),
    /// where the driver can read them; priced from the next step.
    pub fn nic_sample(&mut self, id: VmId, t: resex_common::NicTimes) -> Result<(), CoreError> {
        let vm = self.vm_mut(id)?;
        vm.cold.nic.total = Some(t);
        vm.has_nic = true;
        Ok(())
    }

    /// A registration document, validated against the VM's RAM as `layout` (the registrar
    /// does that off the loop).
    pub fn register(
        &mut self,
        id: VmId,
        doc: &Registration,
        layout: Layout,
    ) -> Result<(), CoreError> {
        let limits = self.cfg.limits;
        let vm = self.vm_mut(id)?;
        if let Err(e) = vm
            .rings
            .install(doc, layout, vm.cold.info.ram_size, &limits)
        {
            vm.cold.rejections += 1;
            vm.cold.last_error = Some(e.to_string());
            return Err(e.into());
        }
        vm.cold.registrations += 1;
        tracing::info!(
            "{}: registered {} queue pairs",
            vm.cold.info.name,
            vm.rings.qps()
        );
        Ok(())
    }

    /// A registration the registrar refused, for the record.
    pub fn registration_refused(&mut self, id: VmId, error: String) -> Result<(), CoreError> {
        let vm = self.vm_mut(id)?;
        vm.cold.rejections += 1;
        vm.cold.last_error = Some(error);
        Ok(())
    }

    /// The admin's value for one of the VM's levers (`resex cap`, `resex rate`): set, and kept
    /// whatever the policy or the fleet decides; or, with `None`, lifted: the policy's value
    /// (under the fleet's ceiling) is in force again, or the original setting when the policy
    /// holds none. A VM without the lever is refused. Returns what was done, for people, and
    /// the intent.
    pub fn pin<K: LeverKind>(
        &mut self,
        name: &str,
        set: Option<K::Set>,
    ) -> Result<(String, Intent<K>), CoreError> {
        if let Some(s) = &set {
            K::check(s)?;
        }
        let id = self
            .find(name)
            .ok_or_else(|| CoreError::UnknownName(name.to_owned()))?;
        let account = self.engine.as_ref().and_then(|e| e.account(id));
        let i = self.index(id).ok_or(CoreError::UnknownVm(id))?;
        let vm = &mut self.vms[i];
        if !K::has(&vm.cold.info) {
            return Err(K::missing(name));
        }
        let policy = K::of_account(account, &vm.cold.info);
        let (msg, intent) = K::of_mut(&mut vm.cold.levers).pin(id, set, policy);
        tracing::info!("{name}: {msg}");
        Ok((msg, intent))
    }

    /// Switches policy (`None`: monitoring only). Every cap the core set goes back to its
    /// original setting first, so a new policy starts from a clean host (the admin's pins
    /// excepted: they stay); the returned intents do that. Every VM joins the new engine
    /// from the next interval, with its learned baseline.
    pub fn set_policy(&mut self, policy: Option<NamedPolicy>, now_ns: u64) -> Intents {
        let mut intents = Intents::default();
        for vm in &mut self.vms {
            // The fleet's ceiling, if any, stays: it is not the policy's.
            if let Some(i) = vm.cold.levers.cap.reset(vm.id) {
                intents.push(i);
            }
            if let Some(i) = vm.cold.levers.tx.reset(vm.id) {
                intents.push(i);
            }
        }
        let want_ns = match &policy {
            Some((_, cfg)) => cfg.ledger.interval_ms.max(1) * 1_000_000,
            None => self.cfg.interval_ns.max(1),
        };
        if want_ns != self.interval_ns {
            // Re-base: the next interval ends one new interval after now.
            self.base_interval = self.last.unwrap_or(self.interval_at(now_ns));
            self.base_ns = now_ns;
            self.interval_ns = want_ns;
        }
        match policy {
            Some((name, cfg)) => {
                let mut e = Engine::new(cfg);
                e.set_link_bps(self.cfg.link.bits_per_sec);
                e.set_header_bytes(self.cfg.link.header_bytes);
                let from = self.last.map_or(1, |l| l + 1);
                for vm in &self.vms {
                    if let Err(err) = e.add_vm(vm.spec(), from) {
                        tracing::error!("{}: {err}", vm.cold.info.name);
                    }
                }
                self.engine = Some(e);
                self.policy_name = name;
            }
            None => {
                self.engine = None;
                self.policy_name = "none".into();
            }
        }
        tracing::info!("policy: {}", self.policy_name);
        intents
    }

    /// Every cap and transmit limit the core set (pins included) back to its original
    /// setting: what a host does when it stops.
    pub fn restore_all(&mut self) -> Intents {
        let mut intents = Intents::default();
        self.fleet_until_ns = None;
        self.fleet_adaptive.clear();
        for vm in &mut self.vms {
            if let Some(i) = vm.cold.levers.cap.restore(vm.id) {
                intents.push(i);
            }
            if let Some(i) = vm.cold.levers.tx.restore(vm.id) {
                intents.push(i);
            }
        }
        intents
    }
}
