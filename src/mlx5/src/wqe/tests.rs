//! Tests of `wqe.rs`.

use super::*;
use proptest::prelude::*;

#[test]
fn rdma_write_with_two_sges_parses_back() {
    let sges = [
        DataSeg {
            byte_count: 100,
            lkey: 7,
            addr: 0x1000,
        },
        DataSeg {
            byte_count: 0,
            lkey: 7,
            addr: 0x2000,
        },
        DataSeg {
            byte_count: 28,
            lkey: 7,
            addr: 0x3000,
        },
    ];
    let spec = WqeSpec {
        signaled: true,
        raddr: Some(RaddrSeg {
            raddr: 0xdead_0000,
            rkey: 0x42,
        }),
        sges: &sges,
        ..WqeSpec::new(send_op::RDMA_WRITE, 0x11)
    };
    let b = spec.build(0xfffe).unwrap();
    assert_eq!(b.len(), 4 * 16, "ctrl + raddr + 2 non-empty SGEs");
    let w = parse_send_wqe(&b).unwrap();
    assert_eq!(w.ctrl.ds, 4);
    assert_eq!(w.ctrl.bbs(), 1);
    assert_eq!(w.ctrl.wqe_index, 0xfffe);
    assert!(w.ctrl.signaled());
    assert_eq!(w.raddr.unwrap().rkey, 0x42);
    assert_eq!(w.payload.len(), 128);
    assert_eq!(w.payload.data_segs().count(), 2);
}

#[test]
fn inline_send_is_padded_to_16_bytes() {
    let data = [9u8; 13];
    let spec = WqeSpec {
        inline: Some(&data),
        ..WqeSpec::new(send_op::SEND, 3)
    };
    let b = spec.build(0).unwrap();
    assert_eq!(b.len(), 16 + 32, "4 + 13 bytes pad to 32");
    assert_eq!(&b[16..20], &[0x80, 0, 0, 13]);
    let w = parse_send_wqe(&b).unwrap();
    assert_eq!(w.payload, Payload::Inline(&data));
}

#[test]
fn rejects_inline_longer_than_its_wqe() {
    let mut b = WqeSpec {
        inline: Some(&[1u8; 8]),
        ..WqeSpec::new(send_op::SEND, 3)
    }
    .build(0)
    .unwrap();
    b[16..20].copy_from_slice(&(INLINE_SEG | 100).to_be_bytes());
    assert!(matches!(
        parse_send_wqe(&b),
        Err(WqeError::InlineOverrun { len: 100, .. })
    ));
}

#[test]
fn rejects_impossible_ds_and_unknown_opcodes() {
    let mut c = CtrlSeg {
        opcode: send_op::RDMA_READ,
        ds: 1,
        ..CtrlSeg::default()
    };
    assert!(matches!(
        parse_send_wqe(&c.encode()),
        Err(WqeError::TooShort { need: 2, .. })
    ));
    c.ds = 0;
    assert_eq!(parse_send_wqe(&c.encode()), Err(WqeError::ZeroDs));
    c.ds = 2;
    assert!(matches!(
        parse_send_wqe(&c.encode()),
        Err(WqeError::Truncated { .. })
    ));
    c.opcode = 0x25;
    c.ds = 1;
    assert_eq!(
        parse_send_wqe(&c.encode()),
        Err(WqeError::UnknownOpcode(0x25))
    );
}

#[test]
fn refuses_to_build_more_than_63_ds() {
    let sges = [DataSeg {
        byte_count: 1,
        lkey: 1,
        addr: 1,
    }; 63];
    let spec = WqeSpec {
        sges: &sges,
        ..WqeSpec::new(send_op::SEND, 1)
    };
    assert!(spec.build(0).is_err());
    let spec = WqeSpec {
        sges: &sges[..62],
        ..WqeSpec::new(send_op::SEND, 1)
    };
    assert_eq!(spec.build(0).unwrap().len(), 63 * 16);
}

proptest! {
    #[test]
    fn parser_never_panics(b in proptest::collection::vec(any::<u8>(), 0..1100)) {
        let _ = parse_send_wqe(&b);
    }

    #[test]
    fn segments_round_trip(raddr: u64, rkey: u32, len: u32, lkey: u32, addr: u64, a: u64, c: u64,
                           idx: u16, qpn in 0u32..(1 << 24), ds in 0u8..64, sig: u8, flags: u8,
                           imm: u32, opmod: u8, opcode: u8) {
        let r = RaddrSeg { raddr, rkey };
        prop_assert_eq!(RaddrSeg::decode(&r.encode()), r);
        let d = DataSeg { byte_count: len, lkey, addr };
        prop_assert_eq!(DataSeg::decode(&d.encode()), d);
        let at = AtomicSeg { swap_add: a, compare: c };
        prop_assert_eq!(AtomicSeg::decode(&at.encode()), at);
        let ctrl = CtrlSeg { opmod, wqe_index: idx, opcode, qpn, ds, signature: sig,
                             fm_ce_se: flags, imm };
        prop_assert_eq!(CtrlSeg::decode(&ctrl.encode()), ctrl);
    }
}
