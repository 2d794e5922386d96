//! Target `wqe_cqe`: the mlx5 codec on arbitrary bytes. The input is parsed as a send WQE
//! (`resex_mlx5::wqe::parse_send_wqe`, and the monitor's `send_wqe_payload_len`, which must
//! agree with it), and every 64-byte window of it as a CQE (`resex_mlx5::cqe`).

use resex_mlx5::consts::INLINE_SEG;
use resex_mlx5::cqe::{is_valid_for, Cqe};
use resex_mlx5::wqe::{parse_send_wqe, send_wqe_payload_len, CtrlSeg, Payload};
use resex_mlx5::DS_BYTES;

/// Runs the target on one input.
pub fn run(data: &[u8]) {
    wqe(data);
    for w in data.chunks(64) {
        let mut b = [0u8; 64];
        b[..w.len()].copy_from_slice(w);
        cqe(&b);
    }
}

fn wqe(data: &[u8]) {
    let parsed = parse_send_wqe(data);
    let Some(head) = data.get(..16).and_then(|h| <&[u8; 16]>::try_from(h).ok()) else {
        assert!(
            parsed.is_err(),
            "a WQE shorter than its control segment parsed"
        );
        return;
    };
    let ctrl = CtrlSeg::decode(head);
    // The control segment round-trips but for its reserved bits (bytes 9-10, ds's top bits).
    let mut expect = *head;
    expect[7] &= 0x3f;
    expect[9] = 0;
    expect[10] = 0;
    assert_eq!(ctrl.encode(), expect, "control segment does not round-trip");
    // The monitor's shortcut gives exactly the parser's answer.
    let len = send_wqe_payload_len(&ctrl, data);
    match (&parsed, len) {
        (Ok(w), Ok(n)) => assert_eq!(w.payload.len(), n),
        (Err(a), Err(b)) => assert_eq!(*a, b),
        (a, b) => panic!("parser and payload length disagree: {a:?} vs {b:?}"),
    }
    let Ok(w) = parsed else { return };
    assert_eq!(w.ctrl, ctrl);
    let body = usize::from(ctrl.ds) * DS_BYTES;
    assert!(
        ctrl.ds > 0 && body <= data.len(),
        "parsed past ds: {ctrl:?}"
    );
    match w.payload {
        Payload::Inline(d) => assert!(d.len() + 20 <= body, "inline data past the WQE"),
        Payload::Gather { segs, total } => {
            assert!(segs.len() + 16 <= body && segs.len().is_multiple_of(DS_BYTES));
            let sum: u64 = w.payload.data_segs().map(|s| u64::from(s.byte_count)).sum();
            assert_eq!(sum, total);
            assert!(w
                .payload
                .data_segs()
                .all(|s| s.byte_count & INLINE_SEG == 0));
        }
    }
}

fn cqe(b: &[u8; 64]) {
    let c = Cqe::decode(b);
    assert_eq!(c.op_own(), b[63], "op_own does not round-trip");
    // Encoding drops what it does not model; after that, encode and decode are inverse.
    let once = Cqe::decode(&c.encode());
    assert_eq!(
        Cqe::decode(&once.encode()),
        once,
        "CQE encode/decode is not stable"
    );
    for log in [0, 1, 6, 24] {
        let index = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) & 0x00ff_ffff;
        let valid = is_valid_for(b[63], index, log);
        assert!(!valid || c.opcode != resex_mlx5::consts::cqe_op::INVALID);
    }
}
