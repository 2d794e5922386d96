//! The period detector's verdict on each VM (absent where the daemon does not detect periods).

use super::schema::{put, reg, VmGauge, VmLabel};
use prometheus_client::registry::Registry;
use resex_api::PeriodSnap;

/// One family per figure of a VM's period.
#[derive(Debug)]
pub(super) struct Periods {
    periodic: VmGauge,
    period: VmGauge,
    duty: VmGauge,
    bytes: VmGauge,
    last_start: VmGauge,
    confidence: VmGauge,
}

impl Periods {
    /// Registers the families.
    pub(super) fn register(r: &mut Registry) -> Self {
        Self {
            periodic: reg(
                r,
                "resex_vm_periodic",
                "1 when the host found a period in the VM's transmitted bytes, 0 when it found none",
            ),
            period: reg(r, "resex_vm_period_seconds", "The VM's iteration time as the host detected it"),
            duty: reg(
                r,
                "resex_vm_period_duty_ratio",
                "Fraction of the VM's period in which it sends (intervals with sends)",
            ),
            bytes: reg(r, "resex_vm_period_bytes", "Bytes the VM sends per period"),
            last_start: reg(
                r,
                "resex_vm_period_last_start_timestamp_seconds",
                "When the VM's latest communication arc began, Unix time (with the period: when the next begin)",
            ),
            confidence: reg(
                r,
                "resex_vm_period_confidence_ratio",
                "How sure the host's period detector is, 0 to 1",
            ),
        }
    }

    /// Sets the VM's series.
    pub(super) fn fill(&self, vm: &VmLabel, p: Option<&PeriodSnap>) {
        let Some(p) = p else {
            return;
        };
        let f = p.found.as_ref();
        put(
            &self.periodic,
            vm,
            Some(if f.is_some() { 1.0 } else { 0.0 }),
        );
        put(&self.period, vm, f.map(|f| f.period_ms / 1e3));
        put(&self.duty, vm, f.map(|f| f.duty));
        put(&self.bytes, vm, f.map(|f| f.bytes_per_period));
        put(&self.last_start, vm, f.map(|f| f.last_start_unix_ms / 1e3));
        put(&self.confidence, vm, f.map(|f| f.confidence));
    }
}
