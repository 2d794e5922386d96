//! The monitor counts exactly what the guest's HCA completed: random work requests (opcodes,
//! sizes, SGE counts, inline, selective signalling, error CQEs), random ring geometry, page
//! scatter, start indices near the 16- and 24-bit wraps, and random scan boundaries and budgets.

#![allow(clippy::cast_possible_truncation)]

mod common;

use common::{at_most, config_strategy, op_strategy, Rig};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn counts_equal_ground_truth(
        cfg in config_strategy(),
        ops in proptest::collection::vec(op_strategy(3, 6), 1..300),
    ) {
        let mut rig = Rig::new(&cfg);
        let nq = rig.guest.qp_count();
        let nc = rig.guest.cq_count();
        for op in &ops {
            let op = op.fit(nq, nc);
            rig.apply(&op, true);
            for (got, want) in rig.mon.counters().iter().zip(rig.guest.truth()) {
                prop_assert!(at_most(got, want), "counted more than happened: {got:?} > {want:?}");
            }
        }
        rig.drain();
        for (qi, (got, want)) in rig.mon.counters().iter().zip(rig.guest.truth()).enumerate() {
            prop_assert_eq!(got, want, "qp index {}", qi);
        }
        prop_assert_eq!(rig.mon.total().overruns, 0);
        prop_assert_eq!(rig.mon.total().anomalies, 0);
    }
}
