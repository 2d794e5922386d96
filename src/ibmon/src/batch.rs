//! One host tick over many VMs: [`scan_all`] scans them in order while bringing in, a few VMs
//! ahead, what the next scans will read, so that the cache and TLB misses of different VMs
//! overlap instead of queueing. The host core calls it once per tick over its VMs' [`VmRings`].
//!
//! The pipeline has three stages, each a few VMs behind the one before: the monitor's own
//! packed state and the memory object ([`VmMonitor::prefetch_state`], [`STATE_AHEAD`] VMs
//! ahead), then the guest lines the scan starts with ([`VmMonitor::prefetch`], [`RINGS_AHEAD`]
//! VMs ahead), then the scan. Prefetching further ahead loses: 1 024 VMs touch more guest pages
//! than the TLB holds, so a translation fetched too early is gone before it is used.

use crate::monitor::{ScanOutcome, VmMonitor};
use crate::rings::VmRings;
use crate::Counters;
use resex_guestmem::{prefetch_host, GuestMemory};
use std::ops::Deref;

/// How many VMs ahead of the scan [`scan_all`] prefetches each monitor's own state.
pub const STATE_AHEAD: usize = 4;

/// How many VMs ahead of the scan [`scan_all`] prefetches the guest lines a scan reads first.
pub const RINGS_AHEAD: usize = 2;

/// What a host scans per VM: one [`VmMonitor`], or a VM's [`VmRings`] (its monitors, with
/// attachment).
pub trait Scan {
    /// What a scan returns.
    type Outcome;
    /// Brings in the scanner's own state (the pipeline's first stage).
    fn prefetch_state(&self);
    /// Brings in the guest lines the next scan reads first (the second stage).
    fn prefetch<M: GuestMemory + ?Sized>(&self, mem: &M);
    /// Scans with a budget of `budget` entries.
    fn scan<M: GuestMemory + ?Sized>(&mut self, mem: &M, budget: u32) -> Self::Outcome;
}

impl Scan for VmMonitor {
    type Outcome = ScanOutcome;
    fn prefetch_state(&self) {
        VmMonitor::prefetch_state(self);
    }
    fn prefetch<M: GuestMemory + ?Sized>(&self, mem: &M) {
        VmMonitor::prefetch(self, mem);
    }
    fn scan<M: GuestMemory + ?Sized>(&mut self, mem: &M, budget: u32) -> ScanOutcome {
        VmMonitor::scan(self, mem, budget)
    }
}

impl Scan for VmRings {
    /// What was counted since the last scan (`None`: nothing, most VMs most ticks).
    type Outcome = Option<Counters>;
    fn prefetch_state(&self) {
        VmRings::prefetch_state(self);
    }
    fn prefetch<M: GuestMemory + ?Sized>(&self, mem: &M) {
        VmRings::prefetch(self, mem);
    }
    fn scan<M: GuestMemory + ?Sized>(&mut self, mem: &M, budget: u32) -> Option<Counters> {
        VmRings::scan_moved(self, mem, budget)
    }
}

/// A VM as a host holds it for its tick: what it scans and the guest memory it reads. The memory
/// may be a trait object (`Memory = dyn GuestMemory`, as backends return it).
pub trait ScanTarget {
    /// The guest memory type (`dyn GuestMemory` for a host that holds trait objects).
    type Memory: GuestMemory + ?Sized;
    /// What is scanned.
    type Rings: Scan;

    /// The scanner and the memory it scans (`None`: nothing to scan yet, e.g. memory not
    /// mapped).
    fn parts(&mut self) -> Option<(&mut Self::Rings, &Self::Memory)>;
}

/// `(memory, scanner)` pairs, e.g. `(Arc<dyn GuestMemory>, VmMonitor)` or
/// `(Arc<dyn GuestMemory>, VmRings)`.
impl<P, R> ScanTarget for (P, R)
where
    P: Deref,
    P::Target: GuestMemory,
    R: Scan,
{
    type Memory = P::Target;
    type Rings = R;

    fn parts(&mut self) -> Option<(&mut R, &P::Target)> {
        Some((&mut self.1, &*self.0))
    }
}

/// The outcome of a target's scan (`None`: it had nothing to scan).
pub type Outcome<T> = Option<<<T as ScanTarget>::Rings as Scan>::Outcome>;

/// Scans every VM once, in order, with a budget of `budget` entries each, prefetching ahead
/// (see the module documentation); `after` is called with each VM and its outcome right after
/// its scan (for reading totals, draining a mailbox, building a row). Allocates nothing.
pub fn scan_all<T: ScanTarget>(
    vms: &mut [T],
    budget: u32,
    mut after: impl FnMut(&mut T, Outcome<T>),
) {
    for i in 0..vms.len() {
        if let Some((rings, mem)) = vms.get_mut(i + STATE_AHEAD).and_then(ScanTarget::parts) {
            rings.prefetch_state();
            prefetch_host(mem);
        }
        if let Some((rings, mem)) = vms.get_mut(i + RINGS_AHEAD).and_then(ScanTarget::parts) {
            rings.prefetch(mem);
        }
        let v = &mut vms[i];
        let out = v.parts().map(|(rings, mem)| rings.scan(mem, budget));
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
            seen.push((mon.total().wqes, out.unwrap()));
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
