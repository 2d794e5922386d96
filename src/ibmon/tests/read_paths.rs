//! The two ways a scan reads guest memory count exactly alike: through the inlined view of RAM
//! that is one mapping (`GuestMemory::mapped`: RAM files, plain memory) and one trait call per
//! read (any other memory). The mapped path is the one checked against ground truth by
//! `exact_counts`; here a second monitor reads the same guest through trait calls only.

#![allow(clippy::cast_possible_truncation)]

mod common;

use common::{config_strategy, op_strategy, Op, Rig};
use proptest::prelude::*;
use resex_guestmem::{GuestAddress, GuestMemory, MemError, VecMemory};
use resex_ibmon::VmMonitor;

/// Guest memory that is not one mapping: every read is a trait call.
struct Unmapped<'a>(&'a VecMemory);

impl GuestMemory for Unmapped<'_> {
    fn size(&self) -> u64 {
        self.0.size()
    }
    fn read(&self, addr: GuestAddress, buf: &mut [u8]) -> Result<(), MemError> {
        self.0.read(addr, buf)
    }
    fn write(&self, addr: GuestAddress, data: &[u8]) -> Result<(), MemError> {
        self.0.write(addr, data)
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn trait_calls_count_what_the_mapped_view_counts(
        cfg in config_strategy(),
        ops in proptest::collection::vec(op_strategy(3, 6), 1..300),
    ) {
        let mut rig = Rig::new(&cfg);
        let mut calls = VmMonitor::new(rig.mon.layout().clone());
        let nq = rig.guest.qp_count();
        let nc = rig.guest.cq_count();
        for op in &ops {
            let op = op.fit(nq, nc);
            rig.apply(&op, true);
            if let Op::Scan { budget } = op {
                calls.scan(&Unmapped(&rig.mem), budget);
                prop_assert_eq!(rig.mon.counters(), calls.counters());
                prop_assert_eq!(rig.mon.state(), calls.state());
            }
        }
        // A last scan of everything left (the guest only polled what both had read).
        let a = rig.mon.scan(&rig.mem, 1_000_000);
        let b = calls.scan(&Unmapped(&rig.mem), 1_000_000);
        prop_assert_eq!(a, b);
        prop_assert_eq!(rig.mon.counters(), calls.counters());
        prop_assert_eq!(rig.mon.total(), calls.total());
        prop_assert_eq!(rig.mon.settled(), calls.settled());
    }
}
