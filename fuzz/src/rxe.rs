//! Target `rxe`: soft-RoCE queues on arbitrary bytes. The input is a queue as the kernel maps
//! it (`struct rxe_queue_buf` and its elements): a header that parses must describe slots that
//! stay inside the queue for any index, and a pending count below its slots; each element the
//! input holds (at most 64) is read as a send WQE and as a completion, which must not panic and
//! must read what is there. The raw input is read both ways too. Then the input is guest RAM
//! holding that queue, registered as a send queue and as a completion queue whatever its header
//! says, and scanned by [`RxeMonitor`] with small budgets: no panic, no more entries walked
//! than the budget, and a ring whose header disagrees with its registration walks nothing.

use crate::seeds::{named, Seed};
use resex_guestmem::{VecMemory, PAGE_SIZE};
use resex_ibmon::registry::{validate, Limits};
use resex_ibmon::rxe::{layout, wr_op, QueueHeader, RxeMonitor, SendWqe, Wc};
use resex_proto::{Registration, RingFormat, RingKind, RingRegistration};

/// Elements read at most per input.
const MAX_ELEMS: u32 = 64;

/// Runs the target on one input.
pub fn run(data: &[u8]) {
    check_raw(data);
    scan_as_guest(data);
    let Ok(h) = QueueHeader::parse(data) else {
        return;
    };
    assert!(h.slots().is_power_of_two(), "{h:?}");
    assert!(h.pending() < h.slots(), "{h:?}");
    for i in [0, 1, h.producer, h.consumer, u32::MAX, h.index_mask] {
        let off = h.slot_offset(i);
        assert!(
            off >= QueueHeader::BYTES && off + h.elem_size() <= h.queue_bytes(),
            "{h:?} {i}"
        );
    }
    for k in 0..h.pending().min(MAX_ELEMS) {
        let off = h.slot_offset(h.consumer.wrapping_add(k));
        let Some(elem) = data.get(off..) else { break };
        let elem = &elem[..elem.len().min(h.elem_size())];
        check_raw(elem);
    }
}

/// Budget per scan in [`scan_as_guest`].
const BUDGET: u32 = 48;

/// The input as a guest's RAM (its first page holding a queue header), registered as a send
/// queue of QP 1 and as a completion queue with the geometry its header claims (or a small
/// one), scanned three times.
fn scan_as_guest(data: &[u8]) {
    let h = QueueHeader::parse(data).ok();
    let (slots, elem) = h.map_or((4, 256), |h| (h.slots(), 1u32 << h.log2_elem_size));
    let bytes = QueueHeader::BYTES as u64 + u64::from(slots) * u64::from(elem);
    if bytes > 1 << 20 {
        return;
    }
    let pages = bytes.div_ceil(PAGE_SIZE);
    let mut ram = data.to_vec();
    ram.resize((pages * PAGE_SIZE) as usize, 0);
    let mem = VecMemory::from_bytes(&ram);
    let ring = |kind, qpn| RingRegistration {
        format: RingFormat::Rxe,
        kind,
        qpn,
        pages: (0..pages).map(|p| p * PAGE_SIZE).collect(),
        offset: 0,
        slots,
        elem_size: elem,
        start: None,
        key: None,
    };
    for kind in [RingKind::Sq, RingKind::Cq] {
        let doc = Registration {
            version: 1,
            vm: None,
            path_mtu: 1024,
            qps: vec![],
            mailbox: None,
            rings: vec![ring(kind, Some(1))],
        };
        let Ok(layout) = validate(&doc, ram.len() as u64, &Limits::default()) else {
            continue;
        };
        let mut mon = RxeMonitor::new(layout.rxe, 1024);
        for _ in 0..3 {
            let d = mon.scan_delta(&mem, BUDGET);
            assert!(d.wqes + d.completions <= u64::from(BUDGET), "{d:?}");
            if h.is_none() {
                assert_eq!(d.wqes + d.completions, 0, "a bad header was walked");
            }
        }
    }
}

/// A send WQE and a completion read from `b`: present exactly when `b` is long enough, and
/// then the bytes at their offsets.
fn check_raw(b: &[u8]) {
    match SendWqe::parse(b) {
        Some(w) => {
            let at = layout::send_wqe::DMA_LENGTH;
            assert_eq!(w.length.to_ne_bytes(), b[at..at + 4], "send length");
        }
        None => assert!(b.len() < layout::send_wqe::SIZE),
    }
    match Wc::parse(b) {
        Some(c) => {
            let at = layout::wc::QP_NUM;
            assert_eq!(c.qp_num.to_ne_bytes(), b[at..at + 4], "completion qp_num");
        }
        None => assert!(b.len() < layout::wc::SIZE),
    }
}

/// A soft-RoCE queue: its header (`2^log2` bytes an element, `slots` of them, the indices) and
/// `elems`, each written at the start of its slot.
fn rxe_queue(log2: u32, slots: u32, prod: u32, cons: u32, elems: &[Vec<u8>]) -> Vec<u8> {
    let mut b = vec![0u8; QueueHeader::BYTES + ((slots as usize) << log2)];
    for (at, v) in [
        (layout::queue::LOG2_ELEM_SIZE, log2),
        (layout::queue::INDEX_MASK, slots.wrapping_sub(1)),
        (layout::queue::PRODUCER, prod),
        (layout::queue::CONSUMER, cons),
    ] {
        b[at..at + 4].copy_from_slice(&v.to_ne_bytes());
    }
    for (i, e) in elems.iter().enumerate() {
        let off = QueueHeader::BYTES + (i << log2);
        let n = e.len().min(1 << log2);
        b[off..off + n].copy_from_slice(&e[..n]);
    }
    b
}

/// The target's seeds: well-formed send and completion queues, and hostile headers.
pub fn seeds() -> Vec<Seed> {
    let wqe = |op: u32, len: u32| {
        let mut w = vec![0u8; layout::send_wqe::SIZE + 16];
        w[layout::send_wqe::OPCODE..][..4].copy_from_slice(&op.to_ne_bytes());
        w[layout::send_wqe::DMA_LENGTH..][..4].copy_from_slice(&len.to_ne_bytes());
        w[layout::send_wqe::DMA_NUM_SGE..][..4].copy_from_slice(&1u32.to_ne_bytes());
        w
    };
    let wc = |qpn: u32, len: u32| {
        let mut c = vec![0u8; layout::wc::SIZE];
        c[layout::wc::BYTE_LEN..][..4].copy_from_slice(&len.to_ne_bytes());
        c[layout::wc::QP_NUM..][..4].copy_from_slice(&qpn.to_ne_bytes());
        c
    };
    let sq = vec![
        wqe(wr_op::RDMA_WRITE, 65536),
        wqe(wr_op::SEND, 4096),
        wqe(wr_op::RDMA_READ, 8192),
    ];
    let cq = vec![wc(17, 0), wc(17, 4096), wc(18, 65536)];
    vec![
        named("sq", rxe_queue(9, 4, 3, 0, &sq)),
        named("sq-wrapped", rxe_queue(9, 4, 1, 2, &sq)),
        named("sq-empty", rxe_queue(9, 8, 5, 5, &[])),
        named("cq", rxe_queue(6, 4, 3, 0, &cq)),
        named("cq-one-slot", rxe_queue(6, 1, 0, 0, &cq[..1])),
        named("mask-not-power", rxe_queue(9, 3, 2, 0, &sq)),
        named("elem-too-small", rxe_queue(3, 4, 1, 0, &cq)),
        named(
            "elem-too-large",
            rxe_queue(17, 1, 0, 0, &[])[..QueueHeader::BYTES].to_vec(),
        ),
        named("indices-wild", rxe_queue(6, 4, u32::MAX, 7, &cq)),
        named("header-short", vec![0u8; 100]),
        named("wqe-alone", wqe(wr_op::SEND_WITH_IMM, 1)),
        named("wc-alone", wc(1, 2)),
    ]
}
