//! The WQE fetch against hostile ring bytes, case by case.

use super::*;

#[test]
fn a_valid_write_completes_and_moves_the_bytes() {
    // Arrange: the baseline the hostile cases differ from.
    let mut rig = Rig::new();
    rig.mem.write(GuestAddress(MR), b"payload!").unwrap();
    let sges = [sge(8, rig.keys.lkey, MR)];
    let bbs = rig.write_spec(0, &write_to(MR + 0x1000, rig.keys.rkey, &sges));
    // Act
    rig.doorbell(u16::try_from(bbs).unwrap());
    rig.run(20);
    // Assert
    let cqes = rig.cqes();
    assert_eq!(cqes.len(), 1);
    assert_eq!((cqes[0].opcode, cqes[0].wqe_counter), (cqe_op::REQ, 0));
    let mut got = [0u8; 8];
    rig.mem.read(GuestAddress(MR + 0x1000), &mut got).unwrap();
    assert_eq!(&got, b"payload!");
    assert!(!rig.in_error());
}

#[test]
fn garbage_opcode_is_a_local_qp_op_error_and_the_next_wqe_is_flushed() {
    let mut rig = Rig::new();
    rig.write(0, &ctrl(0, 0x1f, 1));
    rig.write(1, &ctrl(1, send_op::NOP, 1));
    rig.doorbell(2);
    rig.run(20);
    let cqes = rig.cqes();
    let got: Vec<_> = cqes
        .iter()
        .map(|c| (c.opcode, c.wqe_counter, c.syndrome))
        .collect();
    assert_eq!(
        got,
        [
            (cqe_op::REQ_ERR, 0, syndrome::LOCAL_QP_OP),
            (cqe_op::REQ_ERR, 1, syndrome::WR_FLUSH_ERR)
        ]
    );
    // Posted after the error: flushed too, never executed.
    rig.write(2, &ctrl(2, send_op::NOP, 1));
    rig.doorbell(3);
    rig.run(5);
    let last = rig.cqes()[2];
    assert_eq!(
        (last.wqe_counter, last.syndrome),
        (2, syndrome::WR_FLUSH_ERR)
    );
    assert_eq!(rig.hca.stats(rig.qpn).unwrap().wqes, 0);
}

#[test]
fn every_unknown_or_unimplemented_opcode_is_refused_with_local_qp_op() {
    let known = [
        send_op::NOP,
        send_op::RDMA_WRITE,
        send_op::RDMA_WRITE_IMM,
        send_op::SEND,
        send_op::SEND_IMM,
        send_op::RDMA_READ,
    ];
    for op in (0..=255u8).filter(|op| !known.contains(op)) {
        // ds 4 covers every opcode's fixed segments: only the opcode is wrong.
        let mut wqe = [0u8; 64];
        wqe[..16].copy_from_slice(&ctrl(0, op, 4));
        let rig = post_raw(&wqe, 1);
        assert_one_error(&rig, 0, syndrome::LOCAL_QP_OP);
    }
}

#[test]
fn zero_ds_is_a_local_qp_op_error() {
    let rig = post_raw(&ctrl(0, send_op::RDMA_WRITE, 0), 1);
    assert_one_error(&rig, 0, syndrome::LOCAL_QP_OP);
}

#[test]
fn ds_past_the_posted_basic_blocks_is_a_local_qp_op_error() {
    // 63 DS = 16 BBs, but the doorbell says 1 BB was posted.
    let rig = post_raw(&ctrl(0, send_op::RDMA_WRITE, 63), 1);
    assert_one_error(&rig, 0, syndrome::LOCAL_QP_OP);
}

#[test]
fn ds_too_short_for_the_opcode_is_a_local_qp_op_error() {
    // A WRITE needs its remote address segment: ds 1 has none.
    let rig = post_raw(&ctrl(0, send_op::RDMA_WRITE, 1), 1);
    assert_one_error(&rig, 0, syndrome::LOCAL_QP_OP);
}

#[test]
fn inline_length_past_the_wqe_is_a_local_qp_op_error() {
    let mut wqe = [0u8; 64];
    wqe[..16].copy_from_slice(&ctrl(0, send_op::RDMA_WRITE, 4));
    wqe[32..36].copy_from_slice(&(0x8000_0000u32 | 1000).to_be_bytes());
    let rig = post_raw(&wqe, 1);
    assert_one_error(&rig, 0, syndrome::LOCAL_QP_OP);
}

#[test]
fn inline_data_on_a_read_is_refused() {
    let mut wqe = [0u8; 64];
    wqe[..16].copy_from_slice(&ctrl(0, send_op::RDMA_READ, 4));
    wqe[32..36].copy_from_slice(&(0x8000_0000u32 | 8).to_be_bytes());
    let rig = post_raw(&wqe, 1);
    assert_one_error(&rig, 0, syndrome::LOCAL_QP_OP);
}

#[test]
fn sge_past_the_region_is_a_local_protection_error() {
    let lkey = Rig::new().keys.lkey;
    let cases = [
        sge(0x2001, lkey, MR),          // one byte past the end
        sge(16, lkey, MR + MR_LEN - 8), // straddles the end
        sge(16, lkey, MR - 8),          // starts before the region
        sge(0x7fff_ffff, lkey, MR),     // 2 GiB (the top bit would mean inline)
        sge(16, lkey, u64::MAX - 4),    // address + length overflows
        sge(16, lkey, 0),               // nowhere near
    ];
    for s in cases {
        let mut rig = Rig::new();
        let sges = [s];
        rig.write_spec(0, &write_to(MR, rig.keys.rkey, &sges));
        rig.doorbell(1);
        rig.run(20);
        assert_one_error(&rig, 0, syndrome::LOCAL_PROT);
    }
}

/// Posts an RDMA READ of 64 bytes into `lkey` at the region's start, runs 20 ms.
fn read_into(mut rig: Rig, lkey: u32) -> Rig {
    let sges = [sge(64, lkey, MR)];
    let spec = WqeSpec {
        signaled: true,
        raddr: Some(RaddrSeg {
            raddr: MR,
            rkey: rig.keys.rkey,
        }),
        sges: &sges,
        ..WqeSpec::new(send_op::RDMA_READ, 0)
    };
    rig.write_spec(0, &spec);
    rig.doorbell(1);
    rig.run(20);
    rig
}

fn region(access: u32) -> RegMr {
    RegMr {
        iova: MR,
        length: 64,
        pages: vec![MR],
        access,
    }
}

#[test]
fn a_read_into_a_region_without_local_write_is_a_local_protection_error() {
    let rig = Rig::new();
    let read_only = rig.port.reg_mr(&region(access::REMOTE_READ)).unwrap();
    assert_one_error(&read_into(rig, read_only.lkey), 0, syndrome::LOCAL_PROT);
}

#[test]
fn another_guests_lkey_is_a_local_protection_error() {
    let rig = Rig::new();
    let other = rig.hca.add_guest(rig.mem.clone(), PortId(0));
    let foreign = other.reg_mr(&region(access::LOCAL_WRITE)).unwrap();
    assert_one_error(&read_into(rig, foreign.lkey), 0, syndrome::LOCAL_PROT);
}

#[test]
fn lkey_that_does_not_exist_is_a_local_protection_error() {
    for lkey in [NO_KEY, 0, u32::MAX, Rig::new().keys.lkey ^ 1] {
        let mut rig = Rig::new();
        let sges = [sge(16, lkey, MR)];
        rig.write_spec(0, &write_to(MR, rig.keys.rkey, &sges));
        rig.doorbell(1);
        rig.run(20);
        assert_one_error(&rig, 0, syndrome::LOCAL_PROT);
    }
}

#[test]
fn rkey_that_does_not_exist_is_a_remote_access_error() {
    let mut rig = Rig::new();
    let sges = [sge(16, rig.keys.lkey, MR)];
    rig.write_spec(0, &write_to(MR, NO_KEY, &sges));
    rig.doorbell(1);
    rig.run(20);
    assert_one_error(&rig, 0, syndrome::REMOTE_ACCESS);
}

#[test]
fn sges_adding_up_past_2_gib_are_a_local_length_error_before_any_translation() {
    // Three SGEs of 2 GiB under a key that does not exist: the length is refused first, so no
    // span list is ever built for them.
    let mut rig = Rig::new();
    let sges = [sge(0x7fff_ffff, NO_KEY, 0); 3];
    let bbs = rig.write_spec(0, &write_to(MR, rig.keys.rkey, &sges));
    rig.doorbell(u16::try_from(bbs).unwrap());
    rig.run(20);
    assert_one_error(&rig, 0, syndrome::LOCAL_LENGTH);
}

#[test]
fn stale_wqe_index_is_a_local_qp_op_error() {
    // The slot still holds a WQE of the previous lap: index 16 where 0 is expected.
    let rig = post_raw(&ctrl(16, send_op::NOP, 1), 1);
    assert_one_error(&rig, 0, syndrome::LOCAL_QP_OP);
}

#[test]
fn wrapped_indices_complete_in_order_across_the_ring_end_and_the_16_bit_wrap() {
    // Arrange: the consumer 2 BBs before both the 32-bit and the 16-bit wrap, at ring slot 14.
    let mut rig = Rig::new();
    rig.set_sq_ci(0xffff_fffe);
    let sges = [sge(8, rig.keys.lkey, MR)];
    let a = rig.write_spec(0xfffe, &write_to(MR + 0x100, rig.keys.rkey, &sges));
    // Two basic blocks, straddling slot 15 and slot 0.
    let inline = [7u8; 60];
    let spec = WqeSpec {
        inline: Some(&inline),
        ..write_to(MR + 0x200, rig.keys.rkey, &[])
    };
    let b = rig.write_spec(0xffff, &spec);
    let c = rig.write_spec(0x0001, &write_to(MR + 0x300, rig.keys.rkey, &sges));
    assert_eq!((a, b, c), (1, 2, 1));
    // Act: the producer counter has wrapped to 2.
    rig.doorbell(2);
    rig.run(20);
    // Assert
    let got: Vec<_> = rig
        .cqes()
        .iter()
        .map(|c| (c.opcode, c.wqe_counter))
        .collect();
    assert_eq!(
        got,
        [
            (cqe_op::REQ, 0xfffe),
            (cqe_op::REQ, 0xffff),
            (cqe_op::REQ, 1)
        ]
    );
    let mut landed = [0u8; 60];
    rig.mem.read(GuestAddress(MR + 0x200), &mut landed).unwrap();
    assert_eq!(landed, inline);
    assert_eq!(rig.hca.stats(rig.qpn).unwrap().wqes, 3);
}

#[test]
fn doorbell_far_ahead_of_the_ring_is_one_error_then_nothing() {
    let mut rig = Rig::new();
    rig.write(0, &ctrl(0, send_op::NOP, 1));
    rig.doorbell(1000);
    rig.run(20);
    assert_one_error(&rig, 0, syndrome::LOCAL_QP_OP);
    // The QP stays in error; the bogus doorbell brings no more CQEs, however long it runs.
    rig.run(50);
    assert_eq!(rig.cqes().len(), 1);
}

#[test]
fn doorbell_behind_the_consumer_is_a_local_qp_op_error() {
    // Producer one behind the consumer: 65 535 BBs "pending" in a ring of 16.
    let mut rig = Rig::new();
    rig.set_sq_ci(5);
    rig.doorbell(4);
    rig.run(20);
    assert_one_error(&rig, 5, syndrome::LOCAL_QP_OP);
}

#[test]
fn a_ring_full_of_garbage_costs_at_most_one_error_and_a_bounded_flush() {
    for fill in [0x00u8, 0xff, 0x5a] {
        let mut rig = Rig::new();
        rig.write(0, &vec![fill; 16 * 64]);
        rig.doorbell(16);
        rig.run(20);
        let cqes = rig.cqes();
        assert!(
            !cqes.is_empty() && cqes.len() <= SQ_CNT as usize,
            "{cqes:?}"
        );
        assert_eq!(cqes[0].opcode, cqe_op::REQ_ERR);
        assert!(cqes[1..]
            .iter()
            .all(|c| c.syndrome == syndrome::WR_FLUSH_ERR));
        assert!(rig.in_error());
    }
}
