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

mod rings {
    use super::super::{layout, wr_op};
    use crate::registry::{validate, Limits};
    use crate::VmRings;
    use resex_guestmem::{GuestAddress, GuestMemory, VecMemory};
    use resex_proto::{MailboxRegistration, Registration, RingFormat, RingKind, RingRegistration};

    const SQ: u64 = 0x1000;
    const CQ: u64 = 0x3000;

    fn ring(kind: RingKind, at: u64, log2: u32) -> RingRegistration {
        RingRegistration {
            format: RingFormat::Rxe,
            kind,
            qpn: (kind == RingKind::Sq).then_some(3),
            pages: vec![at, at + 4096],
            offset: 0,
            slots: 8,
            elem_size: 1 << log2,
            start: Some(0),
            key: None,
        }
    }

    fn doc(rings: Vec<RingRegistration>) -> Registration {
        Registration {
            version: 1,
            vm: None,
            path_mtu: 4096,
            qps: vec![],
            mailbox: None,
            rings,
        }
    }

    fn put(mem: &VecMemory, at: u64, v: u32) {
        mem.write(GuestAddress(at), &v.to_ne_bytes()).unwrap();
    }

    /// A fresh queue header at `at`.
    fn queue(mem: &VecMemory, at: u64, log2: u32) {
        put(mem, at + layout::queue::LOG2_ELEM_SIZE as u64, log2);
        put(mem, at + layout::queue::INDEX_MASK as u64, 7);
    }

    /// Posts WRITEs of `len` bytes as slots `from..to` of the send queue.
    fn post(mem: &VecMemory, from: u32, to: u32, len: u32) {
        for i in from..to {
            let at = SQ + 384 + (u64::from(i & 7) << 9);
            put(mem, at + layout::send_wqe::OPCODE as u64, wr_op::RDMA_WRITE);
            put(mem, at + layout::send_wqe::DMA_LENGTH as u64, len);
            put(mem, at + layout::send_wqe::SSN as u64, i);
        }
        put(mem, SQ + layout::queue::PRODUCER as u64, to & 7);
    }

    fn install(v: &mut VmRings, mem: &VecMemory, d: &Registration) {
        let full = validate(d, mem.size(), &Limits::default()).unwrap();
        v.install(d, full, mem.size(), &Limits::default()).unwrap();
    }

    #[test]
    fn a_vm_keeps_its_queues_cursors_across_registrations_and_their_counts_after_them() {
        let mem = VecMemory::new(0x10000);
        queue(&mem, SQ, 9);
        queue(&mem, CQ, 9);
        let mut v = VmRings::new("vm");
        install(&mut v, &mem, &doc(vec![ring(RingKind::Sq, SQ, 9)]));
        post(&mem, 0, 2, 5000);
        let d = v.scan(&mem, 100);
        assert_eq!((d.wqes, d.tx_bytes, d.tx_packets), (2, 10_000, 4));
        // Registered again with a CQ: the send queue's cursor carries over.
        let both = doc(vec![ring(RingKind::Sq, SQ, 9), ring(RingKind::Cq, CQ, 9)]);
        install(&mut v, &mem, &both);
        post(&mem, 2, 3, 1);
        assert_eq!(v.scan(&mem, 100).wqes, 1);
        assert_eq!(v.rxe().map(|r| r.rings().count()), Some(2));
        // The process exited: its queues are gone, what they counted stays.
        install(&mut v, &mem, &doc(vec![]));
        assert!(v.rxe().is_none());
        assert_eq!((v.total().wqes, v.total().tx_bytes), (3, 10_001));
        post(&mem, 3, 5, 7);
        assert!(v.scan(&mem, 100).is_zero());
    }

    #[test]
    fn outstanding_work_is_sampled_every_scan_and_survives_a_registration() {
        let mem = VecMemory::new(0x10000);
        queue(&mem, SQ, 9);
        let mut v = VmRings::new("vm");
        install(&mut v, &mem, &doc(vec![ring(RingKind::Sq, SQ, 9)]));
        // Three posted, one completed: two outstanding at each of four scans.
        post(&mem, 0, 3, 100);
        put(&mem, SQ + layout::queue::CONSUMER as u64, 1);
        for _ in 0..4 {
            v.scan(&mem, 100);
        }
        let q = v.queueing();
        assert_eq!((q.samples, q.outstanding, q.posted), (4, 8, 3));
        // Over 3 ms: 2 in flight at 1000 per second, 2 ms each.
        assert_eq!(q.latency_ns(3_000_000), Some(2e6));
        // All completed; registered again: the samples so far are kept, the new ones add 0.
        put(&mem, SQ + layout::queue::CONSUMER as u64, 3);
        let both = doc(vec![ring(RingKind::Sq, SQ, 9), ring(RingKind::Cq, CQ, 9)]);
        queue(&mem, CQ, 9);
        install(&mut v, &mem, &both);
        v.scan(&mem, 100);
        let q = v.queueing();
        assert_eq!((q.samples, q.outstanding, q.posted), (5, 8, 3));
        // A header turned bad samples nothing outstanding, and indices the guest made up
        // saturate instead of overflowing.
        put(&mem, SQ + layout::queue::INDEX_MASK as u64, 5);
        v.scan(&mem, 100);
        assert_eq!(v.queueing().outstanding, 8);
    }

    #[test]
    fn requests_passed_over_in_a_lap_are_posted_all_the_same() {
        let mem = VecMemory::new(0x10000);
        queue(&mem, SQ, 9);
        let mut v = VmRings::new("vm");
        install(&mut v, &mem, &doc(vec![ring(RingKind::Sq, SQ, 9)]));
        post(&mem, 0, 2, 100);
        v.scan(&mem, 100);
        // 17 more on 8 slots between two scans: the monitor reads one (ssn 18) and knows 16
        // were passed over: an overrun, their bytes lost, their number known.
        post(&mem, 2, 19, 100);
        let d = v.scan(&mem, 100);
        assert_eq!((d.wqes, d.tx_bytes, d.overruns), (1, 100, 1));
        assert_eq!(v.queueing().posted, 2 + 17);
    }

    #[test]
    fn the_last_request_read_on_each_send_queue_is_known_and_carried_over() {
        let mem = VecMemory::new(0x10000);
        queue(&mem, SQ, 9);
        queue(&mem, CQ, 9);
        let mut v = VmRings::new("vm");
        install(&mut v, &mem, &doc(vec![ring(RingKind::Sq, SQ, 9)]));
        let last = |v: &VmRings| -> Vec<Option<u32>> {
            v.rxe().unwrap().last_requests().map(|(_, l)| l).collect()
        };
        assert_eq!(last(&v), [None]);
        post(&mem, 0, 3, 10);
        v.scan(&mem, 100);
        assert_eq!(last(&v), [Some(2)]);
        // Registered again beside a CQ: the send queue keeps its last request, the CQ has none.
        let both = doc(vec![ring(RingKind::Sq, SQ, 9), ring(RingKind::Cq, CQ, 9)]);
        install(&mut v, &mem, &both);
        assert_eq!(last(&v), [Some(2), None]);
        post(&mem, 3, 4, 10);
        v.scan(&mem, 100);
        assert_eq!(last(&v), [Some(3), None]);
    }

    #[test]
    fn hostile_ring_registrations_are_refused_with_the_ring_named() {
        let lim = Limits::default();
        let refuse = |rings: Vec<RingRegistration>, want: &str| {
            let e = validate(&doc(rings), 0x10000, &lim)
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{e} (wanted {want})");
        };
        let mut r = ring(RingKind::Sq, SQ, 9);
        r.slots = 6;
        refuse(vec![r], "ring 0 (rxe sq of qp 3): slots = 6");
        // A send WQE does not fit 64 bytes; a completion does.
        refuse(vec![ring(RingKind::Sq, SQ, 6)], "elem_size = 64");
        let mut r = ring(RingKind::Cq, CQ, 6);
        r.pages = vec![CQ];
        assert!(validate(&doc(vec![r.clone()]), 0x10000, &lim).is_ok());
        r.pages = vec![CQ, CQ + 4096];
        refuse(vec![r], "2 pages given");
        refuse(
            vec![
                ring(RingKind::Sq, SQ, 9),
                ring(RingKind::Sq, SQ + 0x4000, 9),
            ],
            "QP 3 has two sq rings",
        );
        refuse(
            vec![ring(RingKind::Sq, SQ, 9), ring(RingKind::Cq, SQ + 4096, 9)],
            "overlaps",
        );
        let mut with_mailbox = doc(vec![ring(RingKind::Cq, CQ, 9)]);
        with_mailbox.mailbox = Some(MailboxRegistration {
            pages: vec![CQ + 4096],
            offset: 0,
            blocks: 4,
            block_size: 128,
        });
        let e = validate(&with_mailbox, 0x10000, &lim)
            .unwrap_err()
            .to_string();
        assert!(e.contains("overlaps"), "{e}");
        let many = vec![ring(RingKind::Cq, CQ, 9); lim.max_rings + 1];
        refuse(many, "rings: 3073 exceeds the limit of 3072");
        let mut r = ring(RingKind::Rq, CQ, 9);
        r.pages = vec![0x10000, 0x11000];
        refuse(
            vec![r],
            "ring 0 (rxe rq): page 0 (0x10000) is outside guest RAM",
        );
    }
}
