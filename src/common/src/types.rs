//! Types shared across the host's layers.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A VM's identity on this host: given once when the VM is first seen and never reused while
/// the process runs, so a journal row or an API entry names one VM for good. Ties between VMs
/// (two with equal MTUs) are broken by the lower id, so results never depend on the order in
/// which VMs are listed.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct VmId(pub u32);

impl VmId {
    /// The id as an index (ids are small integers handed out in order).
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for VmId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "vm{}", self.0)
    }
}

/// One latency report from a guest, as the host uses it (the mailbox's report after
/// validation; several reports of one interval merged into one).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct LatencyReport {
    /// Requests measured.
    pub count: u64,
    /// Mean latency, ns.
    pub mean_ns: f64,
    /// Standard deviation, ns.
    pub stddev_ns: f64,
    /// Median, ns (0 when not reported).
    pub p50_ns: f64,
    /// 99th percentile, ns.
    pub p99_ns: f64,
    /// 99.9th percentile, ns (0 when not reported).
    pub p999_ns: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vm_id_is_a_bare_number_on_the_wire_and_vm_n_for_people() {
        assert_eq!(serde_json::to_string(&VmId(7)).unwrap(), "7");
        assert_eq!(serde_json::from_str::<VmId>("7").unwrap(), VmId(7));
        assert_eq!(VmId(7).to_string(), "vm7");
        assert_eq!(VmId(7).index(), 7);
    }
}
