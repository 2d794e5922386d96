//! [`HostCore`]: the VM table, membership in pricing, the admin's pins, policy changes, and
//! the core's time base (which interval a time falls in).

use crate::config::CoreConfig;
use crate::output::{CapCause, CapIntent, Intents, StepOutput, TxCause, TxIntent};
use crate::vm::{Vm, VmInfo, VmView};
use crate::CpuSample;
use resex_common::{TxLimit, VmId};
use resex_guestmem::GuestMemory;
use resex_ibmon::registry::{Layout, RegistrationError};
use resex_pricing::{Engine, PolicyConfig, VmUsage};
use resex_proto::Registration;
use std::sync::Arc;

/// A policy and the name it is shown under.
pub type NamedPolicy = (String, PolicyConfig);

/// What the core refuses (nothing is changed).
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CoreError {
    /// A VM id given twice.
    #[error("{0} is known already")]
    DuplicateVm(VmId),
    /// An id the core does not know.
    #[error("no VM {0}")]
    UnknownVm(VmId),
    /// A name the core does not know.
    #[error("no VM named `{0}`")]
    UnknownName(String),
    /// A step for an interval that was priced already.
    #[error("interval {got} at {now_ns} ns is not after the last step's {last}")]
    NotAfter {
        /// The time given.
        now_ns: u64,
        /// Its interval.
        got: u64,
        /// The last interval stepped.
        last: u64,
    },
    /// A cap that is not a positive percent.
    #[error("cap {0} must be a positive percent of one CPU")]
    BadCap(f64),
    /// A transmit limit whose share is above its ceiling, or zero.
    #[error("transmit limit {0}: a share must be above 0 and at most the ceiling")]
    BadTx(TxLimit),
    /// The VM has no rate lever.
    #[error(
        "no rate lever for VM {0} (no VF known for it, or one resexd cannot set: its log says why)"
    )]
    NoTxLever(String),
    /// A registration that does not fit the VM (new QPs are validated again on their own).
    #[error(transparent)]
    Registration(#[from] RegistrationError),
}

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
    /// Transmit limits set between steps, for the next step's rows (the journal).
    pub(crate) pending_tx: Vec<crate::output::TxIntent>,
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
            pending_tx: Vec::new(),
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
        self.vms.iter().find(|v| v.info.name == name).map(|v| v.id)
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
                tracing::error!("{}: {err}", vm.info.name);
            }
        }
        self.vms.insert(at, vm);
        Ok(())
    }

    /// A VM is gone: its account is closed. Returns what the driver said about it.
    pub fn remove_vm(&mut self, id: VmId) -> Option<VmInfo> {
        let i = self.index(id)?;
        let vm = self.vms.remove(i);
        if let Some(e) = &mut self.engine {
            e.remove_vm(id);
        }
        Some(vm.info)
    }

    /// The VM's guest memory (once the backend could map it).
    pub fn set_memory(&mut self, id: VmId, mem: Arc<dyn GuestMemory>) -> Result<(), CoreError> {
        self.vm_mut(id)?.mem = Some(mem);
        Ok(())
    }

    /// A CPU-time sample.
    pub fn cpu_sample(&mut self, id: VmId, s: CpuSample) -> Result<(), CoreError> {
        self.vm_mut(id)?.cpu.sample(s);
        Ok(())
    }

    /// The NIC's cumulative times for the VM's work requests (see [`resex_common::NicTimes`]),
    /// where the driver can read them; priced from the next step.
    pub fn nic_sample(&mut self, id: VmId, t: resex_common::NicTimes) -> Result<(), CoreError> {
        self.vm_mut(id)?.nic.total = Some(t);
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
            .install(&vm.info.name, doc, layout, vm.info.ram_size, &limits)
        {
            vm.rejections += 1;
            vm.last_error = Some(e.to_string());
            return Err(e.into());
        }
        vm.registrations += 1;
        tracing::info!(
            "{}: registered {} queue pairs",
            vm.info.name,
            vm.rings.qps()
        );
        Ok(())
    }

    /// A registration the registrar refused, for the record.
    pub fn registration_refused(&mut self, id: VmId, error: String) -> Result<(), CoreError> {
        let vm = self.vm_mut(id)?;
        vm.rejections += 1;
        vm.last_error = Some(error);
        Ok(())
    }

    /// The admin's cap: set (and kept whatever the policy decides) or, with `None`, lifted:
    /// the policy's cap for the VM is in force again (its original setting when the policy
    /// holds none). Returns what was done, for people, and the intent.
    pub fn pin(&mut self, name: &str, pct: Option<f64>) -> Result<(String, CapIntent), CoreError> {
        if let Some(p) = pct {
            if !(p.is_finite() && p > 0.0) {
                return Err(CoreError::BadCap(p));
            }
        }
        let id = self
            .find(name)
            .ok_or_else(|| CoreError::UnknownName(name.to_owned()))?;
        let policy_cap = self
            .engine
            .as_ref()
            .and_then(|e| e.account(id))
            .map(|a| a.cap);
        let vm = self.vm_mut(id)?;
        let (cap, cause, msg) = match pct {
            Some(p) => (
                Some(p),
                CapCause::Pinned,
                format!("pinned at {p}% by the admin"),
            ),
            None => match policy_cap.filter(|&c| c < vm.info.full_cap() - 1e-9) {
                Some(c) => (
                    Some(c),
                    CapCause::Unpinned,
                    format!("unpinned by the admin: the policy's cap {c:.1}%"),
                ),
                None => (
                    None,
                    CapCause::Unpinned,
                    "unpinned by the admin: original setting".to_owned(),
                ),
            },
        };
        vm.pinned = pct;
        vm.cap = cap;
        vm.cap_reason = Some(msg.clone());
        tracing::info!("{name}: {msg}");
        Ok((msg, CapIntent { vm: id, cap, cause }))
    }

    /// Switches policy (`None`: monitoring only). Every cap the core set goes back to its
    /// original setting first, so a new policy starts from a clean host (the admin's pins
    /// excepted: they stay); the returned intents do that. Every VM joins the new engine
    /// from the next interval, with its learned baseline.
    pub fn set_policy(&mut self, policy: Option<NamedPolicy>, now_ns: u64) -> Intents {
        let mut intents = Intents::default();
        for vm in &mut self.vms {
            if vm.pinned.is_none() && vm.cap.take().is_some() {
                vm.cap_reason = Some(CapCause::PolicyChanged.to_string());
                intents.caps.push(CapIntent {
                    vm: vm.id,
                    cap: None,
                    cause: CapCause::PolicyChanged,
                });
            }
            // The fleet's ceiling, if any, stays: it is not the policy's.
            let keep = crate::fleet::combine(TxLimit::NONE, vm.tx_fleet);
            if vm.tx_pinned.is_none() && vm.tx != keep {
                vm.tx = keep;
                vm.tx_reason = Some(TxCause::PolicyChanged.to_string());
                intents.tx.push(TxIntent {
                    vm: vm.id,
                    tx: keep,
                    cause: TxCause::PolicyChanged,
                });
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
                        tracing::error!("{}: {err}", vm.info.name);
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
        for vm in &mut self.vms {
            vm.pinned = None;
            vm.tx_pinned = None;
            vm.tx_fleet = None;
            if vm.cap.take().is_some() {
                intents.caps.push(CapIntent {
                    vm: vm.id,
                    cap: None,
                    cause: CapCause::Shutdown,
                });
            }
            if !vm.tx.is_none() {
                vm.tx = TxLimit::NONE;
                intents.tx.push(TxIntent {
                    vm: vm.id,
                    tx: TxLimit::NONE,
                    cause: TxCause::Shutdown,
                });
            }
        }
        intents
    }

    /// The admin's transmit limit: set (and kept whatever the policy decides) or, with `None`,
    /// lifted: the policy's limit for the VM is in force again (none when the policy holds
    /// none). A VM without a rate lever is refused.
    pub fn pin_tx(
        &mut self,
        name: &str,
        tx: Option<TxLimit>,
    ) -> Result<(String, TxIntent), CoreError> {
        if let Some(t) = tx {
            let bad_share = t.share_bps == Some(0)
                || matches!((t.share_bps, t.max_bps), (Some(s), Some(m)) if s > m);
            if bad_share || t.max_bps == Some(0) {
                return Err(CoreError::BadTx(t));
            }
        }
        let id = self
            .find(name)
            .ok_or_else(|| CoreError::UnknownName(name.to_owned()))?;
        let policy_tx = self
            .engine
            .as_ref()
            .and_then(|e| e.account(id))
            .map_or(TxLimit::NONE, |a| a.tx);
        let vm = self.vm_mut(id)?;
        if vm.info.tx_lever.is_none() {
            return Err(CoreError::NoTxLever(name.to_owned()));
        }
        let (limit, cause, msg) = match tx {
            Some(t) => (
                t,
                TxCause::Pinned,
                format!("transmit {t}, pinned by the admin"),
            ),
            None => (
                crate::fleet::combine(policy_tx, vm.tx_fleet),
                TxCause::Unpinned,
                format!(
                    "unpinned by the admin: transmit {}",
                    crate::fleet::combine(policy_tx, vm.tx_fleet)
                ),
            ),
        };
        vm.tx_pinned = tx;
        vm.tx = limit;
        vm.tx_reason = Some(msg.clone());
        tracing::info!("{name}: {msg}");
        Ok((
            msg,
            TxIntent {
                vm: id,
                tx: limit,
                cause,
            },
        ))
    }
}
