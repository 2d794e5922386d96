//! The engine: the VM set, the ledger and a policy, stepped one interval at a time.

use crate::config::PolicyConfig;
use crate::config::PolicyKind;
use crate::entitlement;
use crate::ledger::{Account, Allotter, EpochClock};
use crate::policy::{Ctx, Policy};
use crate::types::{
    AccountRow, CapDecision, EngineOutput, IntervalInput, TxDecision, VmId, VmSpec,
};
use crate::{freemarket::FreeMarket, governor::Governor, ioshares::IoShares};
use thiserror::Error;

/// Input the engine refuses (the caller's bug or a corrupt trace; nothing is changed).
#[derive(Debug, Error, PartialEq)]
pub enum PricingError {
    /// Intervals must increase.
    #[error("interval {got} is not after the last priced interval {last}")]
    IntervalNotIncreasing {
        /// The interval given.
        got: u64,
        /// The last one priced.
        last: u64,
    },
    /// Usage for a VM that was never added.
    #[error("usage for {0}, which is not registered with the pricing engine")]
    UnknownVm(VmId),
    /// Two usage entries for one VM in one interval.
    #[error("two usage entries for {0} in interval {1}")]
    DuplicateUsage(VmId, u64),
    /// A VM added twice.
    #[error("{0} is already registered with the pricing engine")]
    DuplicateVm(VmId),
    /// A number that is negative, infinite or NaN.
    #[error("{vm}: `{field}` = {value} is not a finite, non-negative number")]
    BadNumber {
        /// Which VM.
        vm: VmId,
        /// Which field.
        field: &'static str,
        /// Its value.
        value: f64,
    },
    /// A VM with no vCPU or a weight that is not positive.
    #[error("{0}: vcpus must be 1 or more and weight a finite number above 0")]
    BadSpec(VmId),
}

/// What is left of an account when its VM leaves.
#[derive(Debug, Clone, PartialEq)]
pub struct Departure {
    /// The VM.
    pub spec: VmSpec,
    /// Its balance when it left.
    pub balance: f64,
    /// Its allotment prorated to the intervals of this epoch it was present for.
    pub allotment_used_period: f64,
}

/// The pricing engine (one per host).
#[derive(Debug)]
pub struct Engine {
    cfg: PolicyConfig,
    clock: EpochClock,
    allotter: Allotter,
    policy: Box<dyn Policy>,
    /// Sorted by VM id.
    accounts: Vec<Account>,
    /// Total weight the current epoch's shares were computed over.
    epoch_weight: f64,
    last: Option<u64>,
    out: EngineOutput,
    /// Account index of each usage entry of the interval being filled (reused).
    slots: Vec<usize>,
    /// The host link's rate, bits per second.
    link_bps: f64,
    /// Header bytes per packet on the wire (a VM's rate against its entitlement counts them).
    header_bytes: u32,
}

impl Engine {
    /// An engine for a validated policy configuration.
    pub fn new(cfg: PolicyConfig) -> Self {
        let policy = build(&cfg);
        Self::with_policy(cfg, policy)
    }

    /// An engine with a policy of the caller's (the configuration still supplies the ledger,
    /// cap bounds and timing).
    pub fn with_policy(cfg: PolicyConfig, policy: Box<dyn Policy>) -> Self {
        Self {
            clock: EpochClock::new(&cfg),
            allotter: Allotter::new(&cfg),
            cfg,
            policy,
            accounts: Vec::new(),
            epoch_weight: 0.0,
            last: None,
            out: EngineOutput::default(),
            slots: Vec::new(),
            link_bps: 0.0,
            header_bytes: 0,
        }
    }

    /// The host link's rate, bits per second, transmit limits are set against (default: the
    /// policy's `ledger.link_bytes_per_sec`).
    pub fn set_link_bps(&mut self, bps: u64) {
        self.link_bps = bps as f64;
    }

    /// Header bytes per packet on the wire (default 0: payload only).
    pub fn set_header_bytes(&mut self, bytes: u32) {
        self.header_bytes = bytes;
    }

    fn link_bps(&self) -> f64 {
        if self.link_bps > 0.0 {
            self.link_bps
        } else {
            self.cfg.ledger.link_bytes_per_sec as f64 * 8.0
        }
    }

    /// The configuration.
    pub fn config(&self) -> &PolicyConfig {
        &self.cfg
    }

    /// The policy's name.
    pub fn policy_name(&self) -> &'static str {
        self.policy.name()
    }

    /// The accounts, in VM-id order.
    pub fn accounts(&self) -> &[Account] {
        &self.accounts
    }

    /// One account.
    pub fn account(&self, vm: VmId) -> Option<&Account> {
        self.index(vm).map(|i| &self.accounts[i])
    }

    fn index(&self, vm: VmId) -> Option<usize> {
        self.accounts.binary_search_by_key(&vm, Account::id).ok()
    }

    /// Registers a VM, priced from interval `from` on. Joining mid-epoch prorates its allotment
    /// for the rest of that epoch; its I/O share is taken against the VMs already present.
    pub fn add_vm(&mut self, spec: VmSpec, from: u64) -> Result<(), PricingError> {
        if spec.vcpus == 0 || !(spec.weight.is_finite() && spec.weight > 0.0) {
            return Err(PricingError::BadSpec(spec.id));
        }
        let at = match self.accounts.binary_search_by_key(&spec.id, Account::id) {
            Ok(_) => return Err(PricingError::DuplicateVm(spec.id)),
            Err(at) => at,
        };
        let mut acc = Account::new(spec, from);
        let in_current_epoch = self
            .last
            .is_some_and(|l| self.clock.epoch(l) == self.clock.epoch(from));
        if in_current_epoch {
            let w = self.allotter.weight(&acc.spec);
            acc.allotment = self
                .allotter
                .allotment(&acc.spec, self.epoch_weight + w, from, from);
            acc.balance = acc.allotment;
        }
        self.accounts.insert(at, acc);
        Ok(())
    }

    /// Closes a VM's account.
    pub fn remove_vm(&mut self, vm: VmId) -> Option<Departure> {
        let i = self.index(vm)?;
        let acc = self.accounts.remove(i);
        let used = match self.last {
            Some(l) => {
                let start = self.clock.epoch_start(l).max(acc.joined);
                let end = self.clock.epoch_start(l) + self.clock.per_epoch;
                let present = (l + 1).saturating_sub(start) as f64;
                let allotted = end.saturating_sub(start) as f64;
                if allotted > 0.0 {
                    acc.allotment * present / allotted
                } else {
                    0.0
                }
            }
            None => 0.0,
        };
        Some(Departure {
            balance: acc.balance,
            allotment_used_period: used,
            spec: acc.spec,
        })
    }

    fn replenish(&mut self, interval: u64) {
        self.epoch_weight = self
            .accounts
            .iter()
            .map(|a| self.allotter.weight(&a.spec))
            .sum();
        for acc in &mut self.accounts {
            acc.allotment =
                self.allotter
                    .allotment(&acc.spec, self.epoch_weight, acc.joined, interval);
            acc.balance = acc.allotment;
            acc.cuts = 0;
        }
    }

    fn fill(&mut self, input: &IntervalInput<'_>) -> Result<u64, PricingError> {
        for acc in &mut self.accounts {
            acc.seen = false;
        }
        let mut total = 0u64;
        let mut slots = std::mem::take(&mut self.slots);
        slots.clear();
        for (k, u) in input.usage.iter().enumerate() {
            // Fast path: callers usually list VMs in id order.
            let i = match self.accounts.get(k) {
                Some(a) if a.id() == u.vm => k,
                _ => self.index(u.vm).ok_or(PricingError::UnknownVm(u.vm))?,
            };
            if !(u.cpu_pct.is_finite() && u.cpu_pct >= 0.0) {
                return Err(PricingError::BadNumber {
                    vm: u.vm,
                    field: "cpu_pct",
                    value: u.cpu_pct,
                });
            }
            slots.push(i);
            let acc = &mut self.accounts[i];
            if acc.seen {
                return Err(PricingError::DuplicateUsage(u.vm, input.interval));
            }
            acc.seen = true;
            total = total.saturating_add(u.mtus);
        }
        // Validated: now write.
        for acc in &mut self.accounts {
            acc.cpu_pct = 0.0;
            acc.mtus = 0;
            acc.bytes = 0;
            acc.report = None;
            acc.nic = None;
            acc.intf = None;
            acc.interferer = None;
            acc.proposal = None;
            acc.tx_proposal = None;
        }
        for (u, &i) in input.usage.iter().zip(&slots) {
            let acc = &mut self.accounts[i];
            acc.cpu_pct = u.cpu_pct;
            acc.mtus = u.mtus;
            acc.bytes = u.bytes;
            acc.report = u.report;
            acc.nic = u.nic;
            acc.ent
                .count(u.bytes, u.mtus, self.cfg.ledger.path_mtu, self.header_bytes);
        }
        self.slots = slots;
        Ok(total)
    }

    /// Prices one interval. On error nothing changes.
    pub fn step(&mut self, input: &IntervalInput<'_>) -> Result<&EngineOutput, PricingError> {
        let i = input.interval;
        self.check(input)?;
        let total_mtus = self.fill(input)?;
        let epoch_start = self
            .last
            .is_none_or(|l| self.clock.epoch(l) != self.clock.epoch(i));
        let actuation = self
            .last
            .is_none_or(|l| l / self.clock.per_actuation != i / self.clock.per_actuation);
        if epoch_start {
            self.replenish(i);
        }
        self.last = Some(i);
        let link_util = input.link_util.unwrap_or_else(|| {
            let l = &self.cfg.ledger;
            let capacity = l.link_bytes_per_sec as f64 * l.interval_ms as f64 / 1000.0;
            total_mtus as f64 * f64::from(l.path_mtu) / capacity
        });
        let ctx = Ctx {
            cfg: &self.cfg,
            interval: i,
            epoch_start,
            epoch_left: self.clock.left_after(i),
            link_util,
            total_mtus,
            link_bps: self.link_bps(),
        };
        if !self.cfg.as_published {
            observe(&mut self.accounts, link_util);
        }
        self.policy.price(&ctx, &mut self.accounts);
        for acc in &mut self.accounts {
            acc.charge();
        }
        self.out.decisions.clear();
        self.out.tx_decisions.clear();
        if actuation {
            let period_s =
                self.clock.per_actuation as f64 * self.cfg.ledger.interval_ms as f64 / 1000.0;
            actuate(&ctx, period_s, &mut *self.policy, &mut self.accounts);
            self.decide();
        }
        self.out.interval = i;
        self.out.link_util = link_util;
        self.rows(actuation);
        Ok(&self.out)
    }

    /// Refuses an interval that is not after the last, or a link utilisation that is not a
    /// finite, non-negative number.
    fn check(&self, input: &IntervalInput<'_>) -> Result<(), PricingError> {
        if let Some(last) = self.last.filter(|&l| input.interval <= l) {
            return Err(PricingError::IntervalNotIncreasing {
                got: input.interval,
                last,
            });
        }
        match input.link_util {
            Some(u) if !(u.is_finite() && u >= 0.0) => Err(PricingError::BadNumber {
                vm: VmId(u32::MAX),
                field: "link_util",
                value: u,
            }),
            _ => Ok(()),
        }
    }

    /// The proposals of an actuation boundary that change a VM's limit or cap, clamped, into
    /// the accounts and the output's decisions (a proposal that changes nothing is dropped).
    fn decide(&mut self) {
        let floor = self.cfg.caps.floor_pct;
        for acc in &mut self.accounts {
            if let Some((tx, reason)) = acc.tx_proposal {
                if tx != acc.tx {
                    acc.tx = tx;
                    self.out.tx_decisions.push(TxDecision {
                        vm: acc.id(),
                        tx,
                        reason,
                    });
                } else {
                    acc.tx_proposal = None;
                }
            }
            let Some((proposed, reason)) = acc.proposal else {
                continue;
            };
            let cap = if proposed.is_finite() {
                proposed.clamp(floor.min(acc.max_cap), acc.max_cap)
            } else {
                acc.max_cap
            };
            if (cap - acc.cap).abs() > 1e-9 {
                acc.cap = cap;
                self.out.decisions.push(CapDecision {
                    vm: acc.id(),
                    cap_pct: cap,
                    reason,
                });
            } else {
                acc.proposal = None;
            }
        }
    }

    /// One row per account into the output (a reason only at an actuation boundary).
    fn rows(&mut self, actuation: bool) {
        self.out.rows.clear();
        self.out
            .rows
            .extend(self.accounts.iter().map(|a| AccountRow {
                vm: a.id(),
                allotment: a.allotment,
                balance: a.balance,
                charge_cpu: a.charge_cpu,
                charge_io: a.charge_io,
                rate: a.rate,
                cap: a.cap,
                intf_pct: a.intf,
                interferer: a.interferer,
                reason: if actuation {
                    a.proposal.map(|(_, r)| r)
                } else {
                    None
                },
            }));
    }
}

/// An actuation boundary before the decisions: entitlements assigned and measured, the policy's
/// proposals (as ceilings on the rate lever when it proposes caps only), the guard over them.
/// `period_s`: the actuation period, seconds.
fn actuate(ctx: &Ctx<'_>, period_s: f64, policy: &mut dyn Policy, accounts: &mut [Account]) {
    let cfg = ctx.cfg;
    let lever = cfg.lever();
    entitlement::assign(accounts, ctx.link_bps, cfg.caps.floor_pct);
    entitlement::measure(lever, accounts, period_s);
    policy.actuate(ctx, accounts);
    if lever.rate() && !policy.proposes_tx() {
        as_ceilings(ctx, lever, accounts);
    }
    if !cfg.as_published {
        entitlement::enforce(lever, accounts);
    }
}

/// A cap-deciding policy on the rate lever: each cap proposal becomes a ceiling at the same
/// fraction of the link (none when uncapped; at least `rates.floor_pct`); with the rate lever
/// alone the cap itself stays at its ceiling.
fn as_ceilings(
    ctx: &crate::policy::Ctx<'_>,
    lever: crate::config::Lever,
    accounts: &mut [Account],
) {
    use crate::types::{TxLimit, TxReason};
    let floor = ctx.cfg.rates.floor_pct / 100.0;
    for acc in accounts {
        let Some((cap, reason)) = acc.proposal else {
            continue;
        };
        let frac = if cap.is_finite() {
            (cap / acc.max_cap).clamp(0.0, 1.0)
        } else {
            1.0
        };
        let tx = if frac >= 1.0 - 1e-9 {
            TxLimit::NONE
        } else {
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let max = (frac.max(floor) * ctx.link_bps).round() as u64;
            TxLimit {
                share_bps: None,
                max_bps: Some(max.max(1)),
                weight: None,
            }
        };
        let why = if tx.is_none() {
            TxReason::Release
        } else {
            TxReason::Ceiling(reason)
        };
        acc.tx_proposal = Some((tx, why));
        if !lever.cpu() {
            acc.proposal = Some((acc.max_cap, reason));
        }
    }
}

/// The policy a configuration selects.
fn build(cfg: &PolicyConfig) -> Box<dyn Policy> {
    match cfg.policy {
        PolicyKind::Freemarket => Box::new(FreeMarket),
        PolicyKind::Ioshares => Box::new(IoShares::new(
            cfg.ioshares.clone().unwrap_or_default(),
            cfg.intervals_per_actuation(),
            cfg.ledger.interval_ms,
        )),
        PolicyKind::Drum => Box::new(crate::drum::Drum::new(
            cfg.drum.clone().unwrap_or_default(),
            cfg.lever(),
            cfg.intervals_per_actuation(),
        )),
        PolicyKind::Progress => Box::new(crate::progress::Progress::new(
            cfg.progress.clone().unwrap_or_default(),
        )),
        PolicyKind::Justitia => Box::new(crate::justitia::Justitia::new(
            cfg.justitia.clone().unwrap_or_default(),
        )),
        PolicyKind::Governor => Box::new(
            Governor::new(
                cfg.governor.clone().unwrap_or_default(),
                cfg.ledger.interval_ms,
            )
            .with_lever(cfg.lever(), cfg.intervals_per_actuation()),
        ),
    }
}

/// One interval of every account: evidence gathered, and this interval's reports judged
/// (and discounted where the host contradicts them) before the policy sees them.
fn observe(accounts: &mut [Account], util: f64) {
    for a in accounts.iter_mut() {
        a.evidence.observe(a.nic, util);
        if let Some(r) = a.report {
            a.report = Some(a.evidence.judge(&r));
        }
    }
}
