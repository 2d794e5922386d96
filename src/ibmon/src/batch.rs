//! One host tick over many VMs: [`scan_all`] scans them in order while bringing in, a few VMs
//! ahead, what the next scans will read, so that the cache and TLB misses of different VMs
//! overlap instead of queueing.
//!
//! The pipeline has three stages, each a few VMs behind the one before: the monitor's own
//! packed state and the memory object ([`VmMonitor::prefetch_state`], [`STATE_AHEAD`] VMs
//! ahead), then the guest lines the scan starts with ([`VmMonitor::prefetch`], [`RINGS_AHEAD`]
//! VMs ahead), then the scan. Prefetching further ahead loses: 1 024 VMs touch more guest pages
//! than the TLB holds, so a translation fetched too early is gone before it is used.

use crate::monitor::{ScanOutcome, VmMonitor};
use resex_guestmem::{prefetch_host, GuestMemory};
use std::ops::Deref;

/// How many VMs ahead of the scan [`scan_all`] prefetches each monitor's own state.
pub const STATE_AHEAD: usize = 4;

/// How many VMs ahead of the scan [`scan_all`] prefetches the guest lines a scan reads first.
pub const RINGS_AHEAD: usize = 2;

/// A VM as a host holds it for its tick: a monitor and the guest memory it reads. The memory
/// may be a trait object (`Memory = dyn GuestMemory`, as backends return it).
pub trait ScanTarget {
    /// The guest memory type (`dyn GuestMemory` for a host that holds trait objects).
    type Memory: GuestMemory + ?Sized;

    /// The monitor and the memory it scans.
    fn parts(&mut self) -> (&mut VmMonitor, &Self::Memory);
}

/// `(memory, monitor)` pairs, e.g. `(Arc<dyn GuestMemory>, VmMonitor)`.
impl<P> ScanTarget for (P, VmMonitor)
where
    P: Deref,
    P::Target: GuestMemory,
{
    type Memory = P::Target;

    fn parts(&mut self) -> (&mut VmMonitor, &P::Target) {
        (&mut self.1, &*self.0)
    }
}

/// Scans every VM once, in order, with a budget of `budget` entries each, prefetching ahead
/// (see the module documentation); `after` is called with each VM and its outcome right after
/// its scan (for reading [`VmMonitor::total`], which costs nothing). Allocates nothing.
pub fn scan_all<T: ScanTarget>(
    vms: &mut [T],
    budget: u32,
    mut after: impl FnMut(&mut T, ScanOutcome),
) {
    for i in 0..vms.len() {
        if let Some(v) = vms.get_mut(i + STATE_AHEAD) {
            let (mon, mem) = v.parts();
            mon.prefetch_state();
            prefetch_host(mem);
        }
        if let Some(v) = vms.get_mut(i + RINGS_AHEAD) {
            let (mon, mem) = v.parts();
            mon.prefetch(mem);
        }
        let v = &mut vms[i];
        let (mon, mem) = v.parts();
        let out = mon.scan(mem, budget);
        after(v, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::{validate, Limits};
    use crate::synth::{SynthConfig, SynthGuest, Wr};
    use resex_guestmem::VecMemory;
    use resex_mlx5::consts::send_op;
    use std::sync::Arc;

    /// A guest whose two QPs each completed `n` sends (the last one signalled), and its monitor.
    fn busy_vm(seed: u64, n: u32) -> (Arc<dyn GuestMemory>, VmMonitor) {
        let mem = VecMemory::new(1 << 20);
        let cfg = SynthConfig {
            qps: 2,
            seed,
            ..SynthConfig::default()
        };
        let mut g = SynthGuest::new(&mem, &cfg).unwrap();
        for qp in 0..2 {
            for k in 0..n {
                let wr = Wr {
                    opcode: send_op::SEND,
                    sges: vec![100 * (k + 1)],
                    inline: false,
                    signaled: k + 1 == n,
                };
                assert!(g.post(&mem, qp, &wr));
            }
            g.complete(&mem, qp, usize::MAX, false);
        }
        let layout = validate(g.registration(), 1 << 20, &Limits::default()).unwrap();
        (Arc::new(mem), VmMonitor::new(layout))
    }

    #[test]
    fn scan_all_counts_what_scanning_each_vm_counts_in_order() {
        let n = STATE_AHEAD + RINGS_AHEAD + 3;
        let mut all: Vec<_> = (0..n)
            .map(|i| busy_vm(i as u64 + 1, i as u32 + 1))
            .collect();
        let mut each: Vec<_> = (0..n)
            .map(|i| busy_vm(i as u64 + 1, i as u32 + 1))
            .collect();
        let mut seen = Vec::new();
        scan_all(&mut all, 1000, |(_, mon), out| {
            seen.push((mon.total().wqes, out));
        });
        for (i, (mem, mon)) in each.iter_mut().enumerate() {
            let out = mon.scan(&**mem, 1000);
            assert_eq!(seen[i], (mon.total().wqes, out), "VM {i}");
            assert_eq!(mon.total().wqes, 2 * (i as u64 + 1));
            assert_eq!(all[i].1.counters(), mon.counters());
        }
        assert_eq!(seen.len(), n);
    }
}
