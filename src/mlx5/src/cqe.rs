//! `struct mlx5_cqe64` (64 bytes; the last 64 bytes of a 128-byte entry).

use crate::consts::{cqe_format, cqe_op};

/// Size of one CQ entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CqeSize {
    /// 64-byte entries.
    B64,
    /// 128-byte entries; the 64-byte CQE sits at +64.
    B128,
}

impl CqeSize {
    /// From a byte count, or `None` if neither 64 nor 128.
    pub fn from_bytes(n: u32) -> Option<CqeSize> {
        match n {
            64 => Some(CqeSize::B64),
            128 => Some(CqeSize::B128),
            _ => None,
        }
    }

    /// Bytes per entry.
    pub fn bytes(self) -> u64 {
        match self {
            CqeSize::B64 => 64,
            CqeSize::B128 => 128,
        }
    }

    /// Offset of the 64-byte CQE inside an entry.
    pub fn cqe_offset(self) -> u64 {
        self.bytes() - 64
    }
}

/// Byte offsets inside a 64-byte CQE.
pub mod off {
    /// `srqn_uidx`, be32.
    pub const SRQN_UIDX: usize = 32;
    /// `imm_inval_pkey`, be32.
    pub const IMM: usize = 36;
    /// `byte_cnt`, be32.
    pub const BYTE_CNT: usize = 44;
    /// `timestamp`, be64.
    pub const TIMESTAMP: usize = 48;
    /// Error CQE: `vendor_err_synd`.
    pub const VENDOR_SYND: usize = 54;
    /// Error CQE: `syndrome`.
    pub const SYNDROME: usize = 55;
    /// `sop_drop_qpn`, be32.
    pub const SOP_DROP_QPN: usize = 56;
    /// `wqe_counter`, be16.
    pub const WQE_COUNTER: usize = 60;
    /// `signature`.
    pub const SIGNATURE: usize = 62;
    /// `op_own`.
    pub const OP_OWN: usize = 63;
}

/// A decoded CQE: the fields the monitor and the software HCA use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cqe {
    /// CQE opcode (4 bits: `cqe_op::*`).
    pub opcode: u8,
    /// Owner bit.
    pub owner: bool,
    /// Solicited event bit.
    pub solicited: bool,
    /// Format (2 bits; 3 = compressed).
    pub format: u8,
    /// `srqn_uidx` (low 24 bits meaningful).
    pub srqn_uidx: u32,
    /// Immediate data / invalidated rkey / pkey.
    pub imm: u32,
    /// Bytes received (responder), or read length (requester RDMA READ).
    pub byte_cnt: u32,
    /// Completion timestamp.
    pub timestamp: u64,
    /// QPN (24 bits).
    pub qpn: u32,
    /// Requester CQE: the send WQE opcode (bits 31..24 of `sop_drop_qpn`).
    pub send_opcode: u8,
    /// Index of the first basic block of the completed WQE (requester) or the receive WQE.
    pub wqe_counter: u16,
    /// Signature byte.
    pub signature: u8,
    /// Error CQE syndrome (meaningful for `REQ_ERR`/`RESP_ERR`).
    pub syndrome: u8,
    /// Error CQE vendor syndrome.
    pub vendor_syndrome: u8,
}

impl Cqe {
    /// Decodes 64 CQE bytes. Never fails: validation is the caller's (see [`Cqe::is_error`] etc.).
    pub fn decode(b: &[u8; 64]) -> Cqe {
        let be32 = |o: usize| u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let mut ts = [0u8; 8];
        ts.copy_from_slice(&b[off::TIMESTAMP..off::TIMESTAMP + 8]);
        let sdq = be32(off::SOP_DROP_QPN);
        let op_own = b[off::OP_OWN];
        Cqe {
            opcode: op_own >> 4,
            owner: op_own & 1 == 1,
            solicited: op_own & 2 == 2,
            format: (op_own >> 2) & 3,
            srqn_uidx: be32(off::SRQN_UIDX),
            imm: be32(off::IMM),
            byte_cnt: be32(off::BYTE_CNT),
            timestamp: u64::from_be_bytes(ts),
            qpn: sdq & 0x00ff_ffff,
            send_opcode: sdq.to_be_bytes()[0],
            wqe_counter: u16::from_be_bytes([b[off::WQE_COUNTER], b[off::WQE_COUNTER + 1]]),
            signature: b[off::SIGNATURE],
            syndrome: b[off::SYNDROME],
            vendor_syndrome: b[off::VENDOR_SYND],
        }
    }

    /// Encodes into 64 bytes (reserved bytes zero). For error opcodes the syndrome bytes are
    /// written over the timestamp's last two bytes, as in `struct mlx5_err_cqe`.
    pub fn encode(&self) -> [u8; 64] {
        let mut b = [0u8; 64];
        b[off::SRQN_UIDX..off::SRQN_UIDX + 4].copy_from_slice(&self.srqn_uidx.to_be_bytes());
        b[off::IMM..off::IMM + 4].copy_from_slice(&self.imm.to_be_bytes());
        b[off::BYTE_CNT..off::BYTE_CNT + 4].copy_from_slice(&self.byte_cnt.to_be_bytes());
        b[off::TIMESTAMP..off::TIMESTAMP + 8].copy_from_slice(&self.timestamp.to_be_bytes());
        if self.is_error() {
            b[off::VENDOR_SYND] = self.vendor_syndrome;
            b[off::SYNDROME] = self.syndrome;
        }
        let sdq = (u32::from(self.send_opcode) << 24) | (self.qpn & 0x00ff_ffff);
        b[off::SOP_DROP_QPN..off::SOP_DROP_QPN + 4].copy_from_slice(&sdq.to_be_bytes());
        b[off::WQE_COUNTER..off::WQE_COUNTER + 2].copy_from_slice(&self.wqe_counter.to_be_bytes());
        b[off::SIGNATURE] = self.signature;
        b[off::OP_OWN] = self.op_own();
        b
    }

    /// The `op_own` byte this CQE encodes to.
    pub fn op_own(&self) -> u8 {
        (self.opcode << 4)
            | ((self.format & 3) << 2)
            | (u8::from(self.solicited) << 1)
            | u8::from(self.owner)
    }

    /// An error CQE (`REQ_ERR`, `RESP_ERR`).
    pub fn is_error(&self) -> bool {
        matches!(self.opcode, cqe_op::REQ_ERR | cqe_op::RESP_ERR)
    }

    /// A compressed CQE (format 3): its layout is a mini-CQE array, unsupported.
    pub fn is_compressed(&self) -> bool {
        self.format == cqe_format::COMPRESSED
    }
}

/// Is the entry for CQ index `index` valid, given its `op_own` byte, for a CQ of
/// `2^log_cqe_cnt` entries: opcode not INVALID and owner == `(index >> k) & 1`.
#[inline]
pub fn is_valid_for(op_own: u8, index: u32, log_cqe_cnt: u32) -> bool {
    op_own >> 4 != cqe_op::INVALID && u32::from(op_own & 1) == (index >> log_cqe_cnt) & 1
}

/// `op_own` of a freshly created CQ entry: INVALID, owner 0.
pub const INITIAL_OP_OWN: u8 = 0xF0;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn fresh_entry_is_invalid_on_the_first_lap_only_by_opcode() {
        assert!(!is_valid_for(INITIAL_OP_OWN, 0, 6));
        assert!(!is_valid_for(INITIAL_OP_OWN, 64, 6));
        // A REQ CQE with owner 0 is valid on even laps, not odd ones.
        assert!(is_valid_for(0x00, 5, 6));
        assert!(!is_valid_for(0x00, 64 + 5, 6));
        assert!(is_valid_for(0x01, 64 + 5, 6));
    }

    #[test]
    fn error_cqe_puts_syndromes_where_mlx5_err_cqe_has_them() {
        let c = Cqe {
            opcode: cqe_op::REQ_ERR,
            syndrome: 0x13,
            vendor_syndrome: 0x88,
            qpn: 0x123456,
            send_opcode: 0x08,
            wqe_counter: 0xbeef,
            ..Cqe::default()
        };
        let b = c.encode();
        assert_eq!(b[55], 0x13);
        assert_eq!(b[54], 0x88);
        assert_eq!(&b[56..60], &[0x08, 0x12, 0x34, 0x56]);
        assert_eq!(&b[60..62], &[0xbe, 0xef]);
        assert_eq!(b[63], 0xd0);
        let d = Cqe::decode(&b);
        assert_eq!(
            (d.opcode, d.syndrome, d.vendor_syndrome, d.qpn),
            (13, 0x13, 0x88, 0x123456)
        );
        assert_eq!(
            d.timestamp, 0x8813,
            "the syndromes alias the timestamp's last bytes"
        );
    }

    proptest! {
        #[test]
        fn decode_encode_round_trips(
            opcode in 0u8..16, owner: bool, solicited: bool, format in 0u8..4,
            srqn_uidx: u32, imm: u32, byte_cnt: u32, ts: u64, qpn in 0u32..(1 << 24),
            send_opcode: u8, wqe_counter: u16, signature: u8,
        ) {
            let mut c = Cqe { opcode, owner, solicited, format, srqn_uidx, imm, byte_cnt,
                timestamp: ts, qpn, send_opcode, wqe_counter, signature, syndrome: 0,
                vendor_syndrome: 0 };
            if c.is_error() {
                // The syndromes alias the timestamp's low bytes.
                let b = ts.to_be_bytes();
                c.vendor_syndrome = b[6];
                c.syndrome = b[7];
            }
            let d = Cqe::decode(&c.encode());
            let mut want = c;
            if !c.is_error() {
                let b = ts.to_be_bytes();
                want.vendor_syndrome = b[6];
                want.syndrome = b[7];
            }
            prop_assert_eq!(d, want);
        }

        #[test]
        fn any_bytes_decode_and_reencode_identically_in_used_fields(b in proptest::collection::vec(any::<u8>(), 64)) {
            let arr: [u8; 64] = b.try_into().unwrap();
            let c = Cqe::decode(&arr);
            let e = c.encode();
            for o in [32usize, 36, 44, 56, 60] {
                prop_assert_eq!(&e[o..o + 4.min(64 - o)], &arr[o..o + 4.min(64 - o)]);
            }
            prop_assert_eq!(e[63], arr[63]);
        }
    }
}
