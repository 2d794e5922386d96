//! The WQE fetch over random ring bytes: no panic, bounded, in order, no stray writes.

use super::*;

/// Control segments that pass the index check, with an opcode from a list that includes
/// unknown ones, a small ds, and segments that are sometimes the region's real keys: random
/// bytes that reach past the first check.
fn plausible(ring: &mut [u8], start: u32, seeds: &[u8], keys: MrKeys) {
    const OPS: [u8; 8] = [
        send_op::NOP,
        send_op::RDMA_WRITE,
        send_op::RDMA_WRITE_IMM,
        send_op::SEND,
        send_op::SEND_IMM,
        send_op::RDMA_READ,
        send_op::ATOMIC_CS,
        0x1f,
    ];
    for slot in 0..SQ_CNT {
        let r = seeds[slot as usize];
        let index = start.wrapping_add(slot.wrapping_sub(start) % SQ_CNT);
        let at = slot as usize * 64;
        ring[at + 1..at + 3].copy_from_slice(&(index as u16).to_be_bytes());
        ring[at + 3] = OPS[usize::from(r % 8)];
        ring[at + 7] = 1 + (r >> 3) % 8;
        for seg in 1..4 {
            let s = at + seg * 16;
            let v = ring[s];
            // A third data segments of the region, a third its remote address, a third as is.
            let seg = match v % 3 {
                0 => sge(
                    u32::from(ring[s + 1]) * 64,
                    keys.lkey,
                    MR + u64::from(v) * 32,
                )
                .encode(),
                1 => RaddrSeg {
                    raddr: MR + u64::from(ring[s + 1]) * 32,
                    rkey: keys.rkey,
                }
                .encode(),
                _ => continue,
            };
            ring[s..s + 16].copy_from_slice(&seg);
        }
    }
}

const KNOWN_SYNDROMES: [u8; 9] = [
    syndrome::LOCAL_LENGTH,
    syndrome::LOCAL_QP_OP,
    syndrome::LOCAL_PROT,
    syndrome::WR_FLUSH_ERR,
    syndrome::REMOTE_INVAL_REQ,
    syndrome::REMOTE_ACCESS,
    syndrome::REMOTE_OP,
    syndrome::TRANSPORT_RETRY_EXC,
    syndrome::RNR_RETRY_EXC,
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Random ring bytes (raw, or made plausible), a random consumer position and a random
    /// doorbell: no panic; in-order completions only on this QP's CQ, each a success or an
    /// error with a known syndrome; never more work in flight than the ring holds; no byte
    /// written outside the CQs and the region.
    #[test]
    fn random_ring_bytes_never_panic_and_stay_bounded(
        mut bytes in proptest::collection::vec(any::<u8>(), 16 * 64),
        seeds in proptest::collection::vec(any::<u8>(), 16),
        make_plausible in any::<bool>(),
        start in prop_oneof![Just(0u32), any::<u32>()],
        ahead in prop_oneof![0u16..=17, any::<u16>()],
    ) {
        let mut rig = Rig::new();
        rig.set_sq_ci(start);
        if make_plausible {
            plausible(&mut bytes, start, &seeds, rig.keys);
        }
        rig.write(0, &bytes);
        rig.doorbell((start as u16).wrapping_add(ahead));
        let before = rig.mem.to_vec();
        for _ in 0..30 {
            rig.run(1);
            prop_assert!(rig.in_flight() <= SQ_CNT as usize);
        }
        let cqes = rig.cqes();
        let mut last: Option<u16> = None;
        for c in &cqes {
            prop_assert!(matches!(c.opcode, cqe_op::REQ | cqe_op::REQ_ERR), "{c:?}");
            prop_assert_eq!(c.qpn, rig.qpn);
            if c.opcode == cqe_op::REQ_ERR {
                prop_assert!(KNOWN_SYNDROMES.contains(&c.syndrome), "{c:?}");
            }
            // In order, each within a ring of the start (a doorbell one past the ring fails the
            // first WQE, then the flush takes the ring's worth that follows).
            let rel = c.wqe_counter.wrapping_sub(start as u16);
            prop_assert!(u32::from(rel) <= SQ_CNT, "{c:?}");
            if let Some(l) = last {
                prop_assert!(rel > l, "out of order: {cqes:?}");
            }
            last = Some(rel);
        }
        let after = rig.mem.to_vec();
        let written = |a: usize| {
            (CQ as usize..CQ as usize + 1024).contains(&a)
                || (PEER_CQ as usize..PEER_CQ as usize + 1024).contains(&a)
                || (MR as usize..(MR + MR_LEN) as usize).contains(&a)
        };
        let stray = (0..RAM).find(|&a| before[a] != after[a] && !written(a));
        prop_assert!(stray.is_none(), "wrote outside the CQs and the region at {stray:#x?}");
    }
}
