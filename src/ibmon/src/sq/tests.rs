//! Tests of `sq.rs`.

use super::*;
use proptest::prelude::*;

proptest! {
    /// The word-based decoding counts exactly what the byte-slice parser of `resex-mlx5`
    /// accepts, for any first 48 bytes of a WQE (hostile ones included).
    #[test]
    fn short_payload_agrees_with_the_slice_parser(
        mut bytes in proptest::collection::vec(any::<u8>(), FIRST),
        opcode in prop_oneof![
            Just(send_op::NOP), Just(send_op::SEND), Just(send_op::SEND_IMM),
            Just(send_op::SEND_INVAL), Just(send_op::RDMA_WRITE),
            Just(send_op::RDMA_WRITE_IMM), Just(send_op::RDMA_READ),
            Just(send_op::ATOMIC_CS), Just(send_op::ATOMIC_FA), any::<u8>()
        ],
        ds in 1u8..=3,
        inline in any::<bool>(),
        len in prop_oneof![0u32..64, any::<u32>()],
    ) {
        bytes[3] = opcode;
        bytes[7] = (bytes[7] & 0xc0) | ds;
        if inline {
            let at = 16 * kind(opcode).map_or(1, |k| k.1.min(2));
            bytes[at..at + 4].copy_from_slice(&(len | INLINE_SEG).to_be_bytes());
        }
        let mut words = [0u64; FIRST / 8];
        for (w, b) in words.iter_mut().zip(bytes.chunks_exact(8)) {
            *w = u64::from_ne_bytes(b.try_into().unwrap());
        }
        let head = Head(words);
        let ctrl = Ctrl::decode(head.w0());
        prop_assert_eq!(ctrl.ds, ds);
        let mut c16 = [0u8; 16];
        c16.copy_from_slice(&bytes[..16]);
        let want = send_wqe_payload_len(&CtrlSeg::decode(&c16), &bytes[..usize::from(ds) * 16]).ok();
        let got = kind(opcode_of(head.w0()))
            .and_then(|(k, fixed)| short_payload(k, fixed, usize::from(ctrl.ds), &head).ok());
        prop_assert_eq!(got, want);
    }
}
