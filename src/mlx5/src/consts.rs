//! Opcodes, flags and syndromes, with rdma-core's values.

/// CQE opcodes (`op_own >> 4`).
pub mod cqe_op {
    /// Requester completion (a signalled send WQE finished).
    pub const REQ: u8 = 0;
    /// Responder: RDMA WRITE with immediate received.
    pub const RESP_WR_IMM: u8 = 1;
    /// Responder: SEND received.
    pub const RESP_SEND: u8 = 2;
    /// Responder: SEND with immediate received.
    pub const RESP_SEND_IMM: u8 = 3;
    /// Responder: SEND with invalidate received.
    pub const RESP_SEND_INV: u8 = 4;
    /// CQ resize marker.
    pub const RESIZE_CQ: u8 = 5;
    /// No packet (tag matching and similar).
    pub const NO_PACKET: u8 = 6;
    /// Signature error.
    pub const SIG_ERR: u8 = 12;
    /// Requester error.
    pub const REQ_ERR: u8 = 13;
    /// Responder error.
    pub const RESP_ERR: u8 = 14;
    /// Not written by the HCA yet.
    pub const INVALID: u8 = 15;
}

/// CQE formats (`(op_own >> 2) & 3`).
pub mod cqe_format {
    /// A compressed CQE block: unsupported by the monitor (flagged as an anomaly).
    pub const COMPRESSED: u8 = 3;
}

/// Error CQE syndromes.
pub mod syndrome {
    /// Local length error.
    pub const LOCAL_LENGTH: u8 = 0x01;
    /// Local QP operation error.
    pub const LOCAL_QP_OP: u8 = 0x02;
    /// Local protection error.
    pub const LOCAL_PROT: u8 = 0x04;
    /// Work request flushed (QP in error).
    pub const WR_FLUSH_ERR: u8 = 0x05;
    /// Local access error.
    pub const LOCAL_ACCESS: u8 = 0x11;
    /// Remote invalid request.
    pub const REMOTE_INVAL_REQ: u8 = 0x12;
    /// Remote access error (bad rkey, bounds, rights).
    pub const REMOTE_ACCESS: u8 = 0x13;
    /// Remote operation error.
    pub const REMOTE_OP: u8 = 0x14;
    /// Transport retry counter exceeded.
    pub const TRANSPORT_RETRY_EXC: u8 = 0x15;
    /// RNR retry counter exceeded.
    pub const RNR_RETRY_EXC: u8 = 0x16;
}

/// Send WQE opcodes (control segment, low byte of `opmod_idx_opcode`).
pub mod send_op {
    /// No operation.
    pub const NOP: u8 = 0x00;
    /// SEND with invalidate.
    pub const SEND_INVAL: u8 = 0x01;
    /// RDMA WRITE.
    pub const RDMA_WRITE: u8 = 0x08;
    /// RDMA WRITE with immediate.
    pub const RDMA_WRITE_IMM: u8 = 0x09;
    /// SEND.
    pub const SEND: u8 = 0x0a;
    /// SEND with immediate.
    pub const SEND_IMM: u8 = 0x0b;
    /// RDMA READ.
    pub const RDMA_READ: u8 = 0x10;
    /// Atomic compare and swap.
    pub const ATOMIC_CS: u8 = 0x11;
    /// Atomic fetch and add.
    pub const ATOMIC_FA: u8 = 0x12;
}

/// Control segment `fm_ce_se` flags.
pub mod ctrl_flags {
    /// Generate a CQE for this WQE (signalled).
    pub const CQ_UPDATE: u8 = 0x08;
    /// Solicited event.
    pub const SOLICITED: u8 = 0x02;
    /// Fence.
    pub const FENCE: u8 = 0x80;
}

/// Flag in an inline segment's first word.
pub const INLINE_SEG: u32 = 0x8000_0000;
