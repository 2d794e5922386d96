//! The step: scan every VM, drain its mailbox, build usage, measure the link, price, decide.
//!
//! Per VM, in id order: its rings are scanned (`resex_ibmon::scan_all`, which prefetches a few
//! VMs ahead, so the cache misses of different VMs overlap), its mailbox drained (following the
//! guest's writer, one status byte a tick; every block every [`FULL_DRAIN_EVERY`] ticks), its
//! CPU percent taken from its last samples. The link's utilisation is
//! the bits the monitors counted (payload plus headers) over the link's capacity in the
//! interval. Every VM's usage goes to the engine (when there is a policy); its cap decisions become intents, except for VMs
//! the admin pinned. No allocation once the VM set is stable (buffers are reused), and the rows
//! are kept between steps: an idle VM whose row already says so is not written again (a change
//! of the VM set rebuilds them all).

use crate::error::CoreError;
use crate::host::HostCore;
use crate::lever::{Cap, Intent, Tx};
use crate::output::{Priced, RowSlot, StepOutput, VmRow};
use crate::vm::Vm;
use resex_common::LatencyReport;
use resex_common::VmId;
use resex_ibmon::mailbox;
use resex_ibmon::scan_all;
use resex_pricing::{IntervalInput, VmUsage};

/// Every this many intervals a VM's whole mailbox is looked at; the ticks between follow the
/// guest's writer (one status byte a tick).
pub const FULL_DRAIN_EVERY: u64 = 16;

impl HostCore {
    /// Steps the interval that ends at `now_ns` (see [`HostCore::interval_at`]); intervals
    /// skipped since the last step are gaps (nothing was measured in them: a late loop).
    pub fn step(&mut self, now_ns: u64) -> Result<&StepOutput, CoreError> {
        let interval = self.interval_at(now_ns);
        if let Some(last) = self.last {
            if interval <= last {
                return Err(CoreError::NotAfter {
                    now_ns,
                    got: interval,
                    last,
                });
            }
        }
        self.last = Some(interval);
        self.last_now_ns = now_ns;
        let budget = self.cfg.scan_budget;
        let link = self.cfg.link;
        self.out.interval = interval;
        self.out.intents.clear();
        let lapsed = self.expire_fleet(now_ns);
        self.out.intents.tx.extend_from_slice(&lapsed.tx);
        if !self.fleet_adaptive.is_empty() {
            let moved = self.follow_schedules(now_ns);
            self.out.intents.tx.extend_from_slice(&moved.tx);
        }
        self.usage.clear();
        let mut bits = 0.0;
        // Usage is the engine's input: none is built without a policy.
        let priced = self.engine.is_some();
        // Rows are kept between steps while the VM set stays: a VM idle now whose row is
        // already its idle row is not written again.
        let fresh = std::mem::take(&mut self.rows_stale);
        if fresh {
            self.out.rows.clear();
        }
        let (rows, usage) = (&mut self.out.rows, &mut self.usage);
        let scheduled = &mut self.fleet_adaptive;
        let mut cursor = 0;
        let mut i = 0;
        // One pass of ibmon's pipeline over every VM's rings; the rest of a VM's interval
        // (mailbox, CPU, NIC times) right after its scan.
        scan_all(&mut self.vms, budget, |vm, moved| {
            // Most VMs, most ticks: nothing counted, and no counter is copied or compared.
            let moved = moved.flatten().filter(|d| !d.is_zero());
            let report = vm.drain_mailbox(interval);
            if let Some(d) = &moved {
                bits += link.bits(d);
                if !scheduled.is_empty() {
                    Self::observe_scheduled(scheduled, &mut cursor, vm.id, now_ns, d.tx_bytes);
                }
            }
            let nic = if vm.has_nic {
                vm.cold.nic.take_interval()
            } else {
                None
            };
            if priced {
                usage.push(VmUsage {
                    vm: vm.id,
                    cpu_pct: vm.cpu_pct,
                    mtus: moved.map_or(0, |d| d.mtus),
                    bytes: moved.map_or(0, |d| d.tx_bytes),
                    report,
                    nic,
                });
            }
            let idle = report.is_none() && moved.is_none();
            if fresh || !(idle && vm.row_idle) {
                let row = VmRow::new(vm.id, vm.cpu_pct, moved.unwrap_or_default(), report);
                match rows.get_mut(i) {
                    Some(r) if !fresh => *r = row,
                    _ => rows.push(row),
                }
            }
            if vm.row_idle != idle {
                vm.row_idle = idle;
            }
            i += 1;
        });
        self.bits_since_snapshot += bits;
        self.out.link_util = link.utilisation(bits, self.interval_ns);
        self.price(interval);
        // Levers changed between steps (the fleet's) show in this step's rows (the journal).
        mark_pending(&mut self.vms, &mut self.out.rows, &mut self.pending.caps);
        mark_pending(&mut self.vms, &mut self.out.rows, &mut self.pending.tx);
        Ok(&self.out)
    }

    /// The pricing part of a step: the engine's rows into the step's rows, its decisions into
    /// intents.
    fn price(&mut self, interval: u64) {
        let Some(engine) = &mut self.engine else {
            return;
        };
        let input = IntervalInput {
            interval,
            link_util: Some(self.out.link_util),
            usage: &self.usage,
        };
        let out = match engine.step(&input) {
            Ok(o) => o,
            Err(err) => {
                tracing::error!("pricing: {err}");
                return;
            }
        };
        // Both in id order: one merge walk.
        let mut r = 0;
        for er in &out.rows {
            while r < self.out.rows.len() && self.out.rows[r].vm < er.vm {
                r += 1;
            }
            if let Some(row) = self.out.rows.get_mut(r).filter(|row| row.vm == er.vm) {
                if let Some(vm) = self.vms.get_mut(r) {
                    vm.row_idle = false;
                }
                row.priced = Some(Priced {
                    balance: er.balance,
                    allotment: er.allotment,
                    rate: er.rate,
                    cap: er.cap,
                });
            }
        }
        let caps = out.decisions.iter().map(|d| (d.vm, d.cap_pct, d.reason));
        decide::<Cap>(&mut self.vms, &mut self.out, caps);
        let tx = out.tx_decisions.iter().map(|d| (d.vm, d.tx, d.reason));
        decide::<Tx>(&mut self.vms, &mut self.out, tx);
    }
}

impl Vm {
    /// Drains the VM's latency mailbox, if it has one: each tick the block the guest's writer
    /// fills next; every [`FULL_DRAIN_EVERY`] ticks (each VM on its own tick) every block, for
    /// reports written out of turn. Returns the reports merged.
    #[inline]
    fn drain_mailbox(&mut self, interval: u64) -> Option<LatencyReport> {
        // Most VMs have no mailbox (no agent): one test, no call.
        self.rings.mailbox()?;
        self.drain_registered(interval)
    }

    #[inline(never)]
    fn drain_registered(&mut self, interval: u64) -> Option<LatencyReport> {
        let (mem, mb) = (self.mem.as_deref()?, self.rings.mailbox()?);
        let d = if (interval + u64::from(self.id.0)).is_multiple_of(FULL_DRAIN_EVERY) {
            mailbox::drain_all(mem, mb, &mut self.mailbox_next)
        } else {
            mailbox::drain_next(mem, mb, &mut self.mailbox_next)
        };
        self.cold.reports += u64::from(d.valid);
        if d.bad > 0 {
            self.cold.bad_reports += u64::from(d.bad);
            if let Some(k) = self.cold.log_mailbox.hit() {
                tracing::warn!(
                    "{}: {} mailbox blocks refused [{k}]",
                    self.cold.info.name,
                    d.bad
                );
            }
        }
        if let Some(r) = d.report {
            self.take_report(r);
        }
        d.report
    }
}

/// The policy's decisions for one lever (in id order) into the VMs' levers, the step's intents
/// and rows. The admin's pin wins; a VM without the lever has none to set.
fn decide<K: RowSlot>(
    vms: &mut [Vm],
    out: &mut StepOutput,
    decisions: impl Iterator<Item = (VmId, K::Set, K::Reason)>,
) {
    let mut r = 0;
    for (id, set, reason) in decisions {
        while r < vms.len() && vms[r].id < id {
            r += 1;
        }
        let Some(vm) = vms.get_mut(r).filter(|v| v.id == id) else {
            continue;
        };
        if !K::has(&vm.cold.info) {
            continue;
        }
        let Some(intent) = K::of_mut(&mut vm.cold.levers).decide(id, set, reason, &vm.cold.info)
        else {
            continue;
        };
        out.intents.push(intent);
        // Rows and VMs are in the same order and of the same length.
        if let Some(row) = out.rows.get_mut(r) {
            *K::slot(row) = Some(intent);
            vm.row_idle = false;
        }
    }
}

/// Changes made between steps into this step's rows (a change the step made itself stays).
fn mark_pending<K: RowSlot>(vms: &mut [Vm], rows: &mut [VmRow], pending: &mut Vec<Intent<K>>) {
    for i in pending.drain(..) {
        if let Ok(r) = rows.binary_search_by_key(&i.vm, |r| r.vm) {
            K::slot(&mut rows[r]).get_or_insert(i);
            if let Some(vm) = vms.get_mut(r) {
                vm.row_idle = false;
            }
        }
    }
}
