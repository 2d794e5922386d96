use super::*;

fn header(log2: u32, mask: u32, prod: u32, cons: u32) -> Vec<u8> {
    let mut b = vec![0u8; QueueHeader::BYTES];
    b[layout::queue::LOG2_ELEM_SIZE..][..4].copy_from_slice(&log2.to_ne_bytes());
    b[layout::queue::INDEX_MASK..][..4].copy_from_slice(&mask.to_ne_bytes());
    b[layout::queue::PRODUCER..][..4].copy_from_slice(&prod.to_ne_bytes());
    b[layout::queue::CONSUMER..][..4].copy_from_slice(&cons.to_ne_bytes());
    b
}

#[test]
fn a_header_describes_its_queue_and_slots_wrap_at_the_mask() {
    let h = QueueHeader::parse(&header(9, 63, 5, 60)).unwrap();
    assert_eq!((h.slots(), h.elem_size()), (64, 512));
    assert_eq!(h.queue_bytes(), 384 + 64 * 512);
    assert_eq!(h.slot_offset(0), 384);
    assert_eq!(h.slot_offset(65), 384 + 512);
    // Produced 60..=63 and 0..=4: nine pending.
    assert_eq!(h.pending(), 9);
    assert_eq!(QueueHeader::parse(&header(6, 0, 0, 0)).unwrap().slots(), 1);
}

#[test]
fn hostile_headers_are_refused_and_indices_never_leave_the_queue() {
    let bad = |b: Vec<u8>| QueueHeader::parse(&b).unwrap_err();
    assert!(matches!(bad(header(9, 62, 0, 0)), HeaderError::Mask(62)));
    assert!(matches!(
        bad(header(9, u32::MAX, 0, 0)),
        HeaderError::Mask(_)
    ));
    assert!(matches!(
        bad(header(9, (1 << 21) - 1, 0, 0)),
        HeaderError::Mask(_)
    ));
    assert!(matches!(bad(header(3, 63, 0, 0)), HeaderError::ElemSize(3)));
    assert!(matches!(
        bad(header(17, 63, 0, 0)),
        HeaderError::ElemSize(17)
    ));
    assert!(matches!(
        QueueHeader::parse(&[0u8; 100]),
        Err(HeaderError::Short {
            need: 384,
            got: 100
        })
    ));
    // Indices the guest made up: every slot is still inside the queue, pending below slots.
    let h = QueueHeader::parse(&header(MAX_LOG2_ELEM, MAX_SLOTS - 1, u32::MAX, 7)).unwrap();
    for i in [0, 1, u32::MAX, h.producer, h.consumer] {
        assert!(h.slot_offset(i) + h.elem_size() <= h.queue_bytes());
    }
    assert!(h.pending() < h.slots());
}

#[test]
fn a_send_wqe_and_a_completion_give_their_fields() {
    let mut w = vec![0u8; 256];
    w[layout::send_wqe::WR_ID..][..8].copy_from_slice(&0x1122_3344_5566_7788u64.to_ne_bytes());
    w[layout::send_wqe::OPCODE..][..4].copy_from_slice(&wr_op::RDMA_WRITE.to_ne_bytes());
    w[layout::send_wqe::SEND_FLAGS..][..4].copy_from_slice(&2u32.to_ne_bytes());
    w[layout::send_wqe::DMA_LENGTH..][..4].copy_from_slice(&65536u32.to_ne_bytes());
    w[layout::send_wqe::DMA_NUM_SGE..][..4].copy_from_slice(&1u32.to_ne_bytes());
    let s = SendWqe::parse(&w).unwrap();
    assert_eq!(
        s,
        SendWqe {
            wr_id: 0x1122_3344_5566_7788,
            opcode: wr_op::RDMA_WRITE,
            send_flags: 2,
            length: 65536,
            num_sge: 1
        }
    );
    assert_eq!(SendWqe::parse(&w[..207]), None);
    let mut c = vec![0u8; layout::wc::SIZE];
    c[layout::wc::WR_ID..][..8].copy_from_slice(&9u64.to_ne_bytes());
    c[layout::wc::OPCODE..][..4].copy_from_slice(&1u32.to_ne_bytes());
    c[layout::wc::BYTE_LEN..][..4].copy_from_slice(&4096u32.to_ne_bytes());
    c[layout::wc::QP_NUM..][..4].copy_from_slice(&17u32.to_ne_bytes());
    let wc = Wc::parse(&c).unwrap();
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode, wc.byte_len, wc.qp_num),
        (9, 0, 1, 4096, 17)
    );
    assert_eq!(Wc::parse(&c[..47]), None);
}
