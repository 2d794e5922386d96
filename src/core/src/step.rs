//! The step: scan every VM, drain its mailbox, build usage, measure the link, price, decide.
//!
//! Per VM, in id order: its monitors are scanned (the VM two places ahead is prefetched
//! meanwhile, so the cache misses of different VMs overlap), its mailbox drained (following the
//! guest's writer, one status byte a tick; every block every [`FULL_DRAIN_EVERY`] ticks), its
//! CPU percent taken from its last samples. The link's utilisation is
//! the bits the monitors counted (payload plus headers) over the link's capacity in the
//! interval. Every VM's usage goes to the engine; its cap decisions become intents, except for VMs
//! the admin pinned. No allocation once the VM set is stable (buffers are reused).

use crate::host::{CoreError, HostCore};
use crate::output::{CapCause, CapIntent, Priced, StepOutput, TxCause, TxIntent, VmRow};
use resex_ibmon::batch::{RINGS_AHEAD, STATE_AHEAD};
use resex_ibmon::mailbox;
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
        let budget = self.cfg.scan_budget;
        let link = self.cfg.link;
        self.out.interval = interval;
        self.out.rows.clear();
        self.out.intents.clear();
        self.out.tx_intents.clear();
        let lapsed = self.expire_fleet(now_ns);
        self.out.tx_intents.extend_from_slice(&lapsed.tx);
        self.usage.clear();
        let mut bits = 0.0;
        let n = self.vms.len();
        for i in 0..n {
            // scan_all's pipeline (a VM here has several monitors and a mailbox, so the core
            // runs it itself): monitor state STATE_AHEAD VMs ahead, guest lines RINGS_AHEAD.
            if let Some(ahead) = self.vms.get(i + STATE_AHEAD) {
                if let Some(m) = &ahead.mem {
                    ahead.rings.prefetch_state(&**m);
                }
            }
            if let Some(ahead) = self.vms.get(i + RINGS_AHEAD) {
                if let Some(m) = &ahead.mem {
                    ahead.rings.prefetch(&**m);
                }
            }
            let vm = &mut self.vms[i];
            let mut row = VmRow {
                vm: vm.id,
                cpu_pct: vm.cpu.pct(),
                delta: Default::default(),
                report: None,
                priced: None,
                cap_set: None,
                tx_set: None,
            };
            if let Some(mem) = &vm.mem {
                row.delta = vm.rings.scan(&vm.info.name, &**mem, budget);
                if let Some(mb) = &vm.rings.mailbox {
                    // Each tick the block the writer fills next; every FULL_DRAIN_EVERY ticks
                    // (each VM on its own tick) every block, for reports written out of turn.
                    let d = if (interval + u64::from(vm.id.0)).is_multiple_of(FULL_DRAIN_EVERY) {
                        mailbox::drain_all(&**mem, mb, &mut vm.mailbox_next)
                    } else {
                        mailbox::drain_next(&**mem, mb, &mut vm.mailbox_next)
                    };
                    vm.reports += u64::from(d.valid);
                    if d.bad > 0 {
                        vm.bad_reports += u64::from(d.bad);
                        if let Some(k) = vm.log_mailbox.hit() {
                            tracing::warn!(
                                "{}: {} mailbox blocks refused [{k}]",
                                vm.info.name,
                                d.bad
                            );
                        }
                    }
                    if let Some(r) = d.report {
                        vm.take_report(r);
                    }
                    row.report = d.report;
                }
            }
            bits += link.bits(&row.delta);
            let nic = vm.nic.take_interval();
            self.usage.push(VmUsage {
                vm: vm.id,
                cpu_pct: row.cpu_pct,
                mtus: row.delta.mtus,
                bytes: row.delta.tx_bytes,
                report: row.report,
                nic,
            });
            self.out.rows.push(row);
        }
        self.bits_since_snapshot += bits;
        self.out.link_util = link.utilisation(bits, self.interval_ns);
        self.price(interval);
        // Limits changed between steps (the fleet's) show in this step's rows (the journal).
        for i in self.pending_tx.drain(..) {
            if let Ok(r) = self.out.rows.binary_search_by_key(&i.vm, |r| r.vm) {
                self.out.rows[r].tx_set.get_or_insert(i);
            }
        }
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
                row.priced = Some(Priced {
                    balance: er.balance,
                    allotment: er.allotment,
                    rate: er.rate,
                    cap: er.cap,
                });
            }
        }
        let mut r = 0;
        for d in &out.decisions {
            while r < self.vms.len() && self.vms[r].id < d.vm {
                r += 1;
            }
            let Some(vm) = self.vms.get_mut(r).filter(|v| v.id == d.vm) else {
                continue;
            };
            if vm.pinned.is_some() {
                continue; // the admin's cap wins
            }
            let cap = (d.cap_pct < vm.info.full_cap() - 1e-9).then_some(d.cap_pct);
            let intent = CapIntent {
                vm: d.vm,
                cap,
                cause: CapCause::Policy(d.reason),
            };
            vm.cap = cap;
            vm.cap_reason = Some(d.reason.to_string());
            self.out.intents.push(intent);
            // Rows and VMs are in the same order and of the same length.
            if let Some(row) = self.out.rows.get_mut(r) {
                row.cap_set = Some(intent);
            }
        }
        let mut r = 0;
        for d in &out.tx_decisions {
            while r < self.vms.len() && self.vms[r].id < d.vm {
                r += 1;
            }
            let Some(vm) = self.vms.get_mut(r).filter(|v| v.id == d.vm) else {
                continue;
            };
            if vm.tx_pinned.is_some() || vm.info.tx_lever.is_none() {
                continue; // the admin's limit wins; a VM without a lever has none to set
            }
            // Under the fleet's ceiling, when one is in force.
            let tx = crate::fleet::combine(d.tx, vm.tx_fleet);
            let intent = TxIntent {
                vm: d.vm,
                tx,
                cause: TxCause::Policy(d.reason),
            };
            vm.tx = tx;
            vm.tx_reason = Some(d.reason.to_string());
            self.out.tx_intents.push(intent);
            if let Some(row) = self.out.rows.get_mut(r) {
                row.tx_set = Some(intent);
            }
        }
    }
}
