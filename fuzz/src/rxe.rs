//! Target `rxe`: soft-RoCE queues on arbitrary bytes. The input is a queue as the kernel maps
//! it (`struct rxe_queue_buf` and its elements): a header that parses must describe slots that
//! stay inside the queue for any index, and a pending count below its slots; each element the
//! input holds (at most 64) is read as a send WQE and as a completion, which must not panic and
//! must read what is there. The raw input is read both ways too.

use resex_ibmon::rxe::{layout, QueueHeader, SendWqe, Wc};

/// Elements read at most per input.
const MAX_ELEMS: u32 = 64;

/// Runs the target on one input.
pub fn run(data: &[u8]) {
    check_raw(data);
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
