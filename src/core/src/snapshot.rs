//! The API's snapshot, built from the core's state. Rates are over the time since the previous
//! snapshot; the host's link utilisation is the mean over that time, from the monitors' counts.
//! The driver fills in what only it knows (backend, uptime, tick lateness, scan time).

use crate::host::HostCore;
use crate::vm::Vm;
use resex_api::{HostSnap, Snapshot, VmSnap};

impl HostCore {
    /// A snapshot at `now_ns` (the start of the next period of rates).
    pub fn snapshot(&mut self, now_ns: u64) -> Snapshot {
        let dt_ns = now_ns.saturating_sub(self.snapshot_at_ns).max(1);
        let link_util = self.cfg.link.utilisation(self.bits_since_snapshot, dt_ns);
        self.bits_since_snapshot = 0.0;
        self.snapshot_at_ns = now_ns;
        let entitled = resex_pricing::entitlement::split(
            self.vms.iter().map(|v| v.cold.info.entitlement.tx_bps),
            self.cfg.link.bits_per_sec as f64,
        );
        let mut vms = Vec::with_capacity(self.vms.len());
        for (i, &entitled_bps) in entitled.iter().enumerate() {
            let vm = &self.vms[i];
            let at = (vm.rings.total(), vm.cold.cpu.last(), vm.rings.queueing());
            vms.push(VmSnap {
                entitled_bps,
                ..self.vm_snap(vm, dt_ns)
            });
            self.vms[i].cold.at_snapshot = Some(at);
        }
        Snapshot {
            uptime_ms: 0,
            host: HostSnap {
                policy: self.policy_name.clone(),
                interval_ms: self.interval_ns / 1_000_000,
                epoch_progress: self.epoch_progress(),
                link_util,
                mtus_per_s: vms.iter().map(|v| v.mtus_per_s).sum(),
                ..HostSnap::default()
            },
            vms,
        }
    }

    /// How far the engine is into its epoch (0 without a policy).
    fn epoch_progress(&self) -> f64 {
        match (&self.engine, self.last) {
            (Some(e), Some(l)) => {
                let per = e.config().intervals_per_epoch().max(1);
                (l % per) as f64 / per as f64
            }
            _ => 0.0,
        }
    }

    /// One VM's line: its rates over the `dt_ns` since its last snapshot, its levers, its
    /// account and its totals (the entitlement in force is the caller's).
    fn vm_snap(&self, vm: &Vm, dt_ns: u64) -> VmSnap {
        let dt = dt_ns as f64 / 1e9;
        let total = vm.rings.total();
        let cpu_now = vm.cold.cpu.last();
        let queue = vm.rings.queueing();
        let (prev, cpu_prev, queue_prev) = vm.cold.at_snapshot.unwrap_or((total, cpu_now, queue));
        let d = total - prev;
        let cpu_pct = match (cpu_prev, cpu_now) {
            (Some(a), Some(b)) if b.at_ns > a.at_ns => {
                b.total_ns.saturating_sub(a.total_ns) as f64 * 100.0 / (b.at_ns - a.at_ns) as f64
            }
            _ => vm.cold.cpu.pct(),
        };
        let r = vm.cold.last_report;
        VmSnap {
            id: vm.id,
            name: vm.cold.info.name.clone(),
            state: vm.state().into(),
            vcpus: vm.cold.info.vcpus,
            cpu_pct,
            mtus_per_s: d.mtus as f64 / dt,
            bytes_per_s: d.tx_bytes as f64 / dt,
            wqes_per_s: d.wqes as f64 / dt,
            lat_mean_us: r.map(|r| r.mean_ns / 1000.0),
            lat_p50_us: r.map(|r| r.p50_ns / 1000.0),
            lat_p99_us: r.map(|r| r.p99_ns / 1000.0),
            io_latency_us: queue
                .since(&queue_prev)
                .latency_ns(dt_ns)
                .map(|ns| ns / 1000.0),
            qps: vm.rings.qps(),
            mtus_total: total.mtus,
            tx_bytes_total: total.tx_bytes,
            wqes_total: total.wqes,
            errors: total.errors,
            overruns: total.overruns,
            anomalies: total.anomalies,
            late_qps: vm
                .rings
                .late()
                .iter()
                .map(|q| resex_api::LateQp {
                    qpn: q.qpn,
                    missed_completions: q.missed_completions,
                })
                .collect(),
            ..self.account_snap(vm, levers_snap(vm))
        }
    }

    /// What the engine's account of `vm` says, over `base`.
    fn account_snap(&self, vm: &Vm, base: VmSnap) -> VmSnap {
        let acc = self.engine.as_ref().and_then(|e| e.account(vm.id));
        VmSnap {
            cpu_floor_pct: acc.map(|a| a.ent.cpu_floor_pct),
            tx_rate_bps: acc.map(|a| a.ent.rate_bps),
            excess: acc.map(|a| a.ent.excess),
            host_slowdown: acc.and_then(|a| a.evidence.host_slowdown),
            report_discounted: acc
                .and_then(|a| a.evidence.verdict)
                .filter(|v| v.discounted)
                .map(|v| v.to_string()),
            balance: acc.map(|a| a.balance),
            allotment: acc.map(|a| a.allotment),
            rate: acc.map(|a| a.rate),
            intf_pct: acc.and_then(|a| a.intf),
            interferer: acc
                .and_then(|a| a.interferer)
                .and_then(|id| self.index(id))
                .map(|j| self.vms[j].cold.info.name.clone()),
            ..base
        }
    }
}

/// A VM's levers and what it reported and was refused, for its line.
fn levers_snap(vm: &Vm) -> VmSnap {
    let tx = vm.cold.levers.tx.value();
    VmSnap {
        cap_pct: vm.cold.levers.cap.value(),
        cap_mechanism: vm.cold.info.cap_mechanism.clone(),
        cap_reason: vm.cold.levers.cap.reason(),
        tx_share_bps: tx.share_bps,
        tx_max_bps: tx.max_bps,
        tx_lever: vm.cold.info.tx_lever.clone(),
        tx_reason: vm.cold.levers.tx.reason(),
        tx_weight: tx.weight,
        reports: vm.cold.reports,
        lat_requests_total: vm.cold.lat_totals.0,
        lat_sum_us: vm.cold.lat_totals.1 / 1000.0,
        lat_p99_sum_us: vm.cold.lat_totals.2 / 1000.0,
        bad_reports: vm.cold.bad_reports,
        rejected_registrations: vm.cold.rejections,
        last_error: vm.cold.last_error.clone(),
        ..VmSnap::default()
    }
}
