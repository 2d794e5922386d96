//! Soft-RoCE (`rdma_rxe`) queues, the second ring format: the layouts here, validation in
//! `registry`, counting in `monitor` ([`RxeMonitor`]).
//!
//! rxe's send queues, receive queues and CQs are kernel buffers mapped into the process from
//! `/dev/infiniband/uverbs*`, and their formats are kernel UAPI: `rdma/rdma_user_rxe.h`
//! (`struct rxe_queue_buf`, `rxe_send_wqe`, `rxe_recv_wqe`, `rxe_sge`) and
//! `rdma/ib_user_verbs.h` (`struct ib_uverbs_wc`, the completion a user CQ holds). Unlike mlx5
//! the queues describe themselves: each starts with a header giving its element size and index
//! mask, and the producer and consumer indices, each on its own cache line. The offsets here are
//! checked against the kernel's headers by `tests/rxe_c_reference.rs` (gcc, linux-libc-dev).
//!
//! Everything read is hostile: a header whose mask is not `2^k - 1` or whose element size is
//! out of bounds is refused; an index is always masked before it addresses an element.

/// Byte offsets and sizes, from the kernel UAPI headers (x86-64 and every 64-bit ABI Linux
/// has: the structs are built of naturally aligned fixed-size fields).
pub mod layout {
    /// `struct rxe_queue_buf`: the header at the start of every queue.
    pub mod queue {
        /// `log2_elem_size`.
        pub const LOG2_ELEM_SIZE: usize = 0;
        /// `index_mask`: the number of slots minus one.
        pub const INDEX_MASK: usize = 4;
        /// `producer_index` (its own cache line).
        pub const PRODUCER: usize = 128;
        /// `consumer_index` (its own cache line).
        pub const CONSUMER: usize = 256;
        /// `data[]`: the first element.
        pub const DATA: usize = 384;
    }

    /// `struct rxe_send_wqe` (`struct rxe_send_wr` first).
    pub mod send_wqe {
        /// `wr.wr_id`.
        pub const WR_ID: usize = 0;
        /// `wr.opcode` (`enum ib_uverbs_wr_opcode`).
        pub const OPCODE: usize = 12;
        /// `wr.send_flags`.
        pub const SEND_FLAGS: usize = 16;
        /// `wr.wr`: the opcode's own part (RDMA, atomic, UD, MW).
        pub const WR: usize = 24;
        /// `status`.
        pub const STATUS: usize = 144;
        /// `state`.
        pub const STATE: usize = 148;
        /// `iova`.
        pub const IOVA: usize = 152;
        /// `first_psn`: the request's first packet sequence number (written by the kernel).
        pub const FIRST_PSN: usize = 164;
        /// `last_psn`.
        pub const LAST_PSN: usize = 168;
        /// `ssn`: the send sequence number, one more per request (written by the library).
        pub const SSN: usize = 176;
        /// `dma.length`: the request's bytes.
        pub const DMA_LENGTH: usize = 184;
        /// `dma.num_sge`.
        pub const DMA_NUM_SGE: usize = 196;
        /// `dma.sge[]` / `dma.inline_data[]`.
        pub const SGE: usize = 208;
        /// `sizeof(struct rxe_send_wqe)`: what an element holds before its gather list.
        pub const SIZE: usize = 208;
    }

    /// `struct rxe_recv_wqe`.
    pub mod recv_wqe {
        /// `wr_id`.
        pub const WR_ID: usize = 0;
        /// `dma.length`: the buffers' bytes.
        pub const DMA_LENGTH: usize = 16;
        /// `dma.num_sge`.
        pub const DMA_NUM_SGE: usize = 28;
        /// `dma.sge[]`.
        pub const SGE: usize = 40;
        /// `sizeof(struct rxe_recv_wqe)`.
        pub const SIZE: usize = 40;
    }

    /// `struct rxe_sge`.
    pub mod sge {
        /// `addr`.
        pub const ADDR: usize = 0;
        /// `length`.
        pub const LENGTH: usize = 8;
        /// `lkey`.
        pub const LKEY: usize = 12;
        /// `sizeof(struct rxe_sge)`.
        pub const SIZE: usize = 16;
    }

    /// `struct ib_uverbs_wc`: a completion in a user CQ.
    pub mod wc {
        /// `wr_id`.
        pub const WR_ID: usize = 0;
        /// `status` (0: success).
        pub const STATUS: usize = 8;
        /// `opcode` (`IB_UVERBS_WC_*`).
        pub const OPCODE: usize = 12;
        /// `byte_len`.
        pub const BYTE_LEN: usize = 20;
        /// `qp_num`.
        pub const QP_NUM: usize = 28;
        /// `wc_flags`.
        pub const WC_FLAGS: usize = 36;
        /// `sizeof(struct ib_uverbs_wc)`.
        pub const SIZE: usize = 48;
    }
}

/// Send opcodes (`enum ib_uverbs_wr_opcode`).
pub mod wr_op {
    /// RDMA WRITE.
    pub const RDMA_WRITE: u32 = 0;
    /// RDMA WRITE with immediate.
    pub const RDMA_WRITE_WITH_IMM: u32 = 1;
    /// SEND.
    pub const SEND: u32 = 2;
    /// SEND with immediate.
    pub const SEND_WITH_IMM: u32 = 3;
    /// RDMA READ.
    pub const RDMA_READ: u32 = 4;
    /// Atomic compare and swap.
    pub const ATOMIC_CMP_AND_SWP: u32 = 5;
    /// Atomic fetch and add.
    pub const ATOMIC_FETCH_AND_ADD: u32 = 6;
    /// Local invalidate (no traffic).
    pub const LOCAL_INV: u32 = 7;
    /// Bind a memory window (no traffic).
    pub const BIND_MW: u32 = 8;
    /// SEND with invalidate.
    pub const SEND_WITH_INV: u32 = 9;
}

/// Completion opcodes (`enum ib_uverbs_wc_opcode`) the monitor tells apart.
pub mod wc_op {
    /// A receive completed (SEND or SEND with immediate from the peer).
    pub const RECV: u32 = 1 << 7;
    /// An RDMA WRITE with immediate from the peer consumed a receive.
    pub const RECV_RDMA_WITH_IMM: u32 = (1 << 7) + 1;
}

/// The smallest element a queue may have: a completion (`2^4` is below every struct here).
pub const MIN_LOG2_ELEM: u32 = 4;
/// The largest: 64 KiB (a send WQE with a large inline area or many gather entries).
pub const MAX_LOG2_ELEM: u32 = 16;
/// The most slots a queue may have (the kernel's own bounds are far smaller).
pub const MAX_SLOTS: u32 = 1 << 20;

/// A queue header that cannot be a real one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// Fewer bytes than the header.
    #[error("an rxe queue header needs {need} bytes, got {got}")]
    Short {
        /// Bytes needed.
        need: usize,
        /// Bytes given.
        got: usize,
    },
    /// `index_mask` is not `2^k - 1` or above [`MAX_SLOTS`].
    #[error("rxe queue index mask {0:#x} is not 2^k - 1 of at most {MAX_SLOTS} slots")]
    Mask(u32),
    /// `log2_elem_size` out of [`MIN_LOG2_ELEM`]..=[`MAX_LOG2_ELEM`].
    #[error("rxe queue element size 2^{0} is out of 2^{MIN_LOG2_ELEM}..=2^{MAX_LOG2_ELEM}")]
    ElemSize(u32),
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[off..off + 4]);
    u32::from_ne_bytes(w)
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[off..off + 8]);
    u64::from_ne_bytes(w)
}

/// A queue's header, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueHeader {
    /// log2 of an element's bytes.
    pub log2_elem_size: u32,
    /// Slots minus one.
    pub index_mask: u32,
    /// The producer's index (rxe keeps it masked; masked again before it addresses a slot).
    pub producer: u32,
    /// The consumer's index.
    pub consumer: u32,
}

impl QueueHeader {
    /// Bytes a header takes (up to the first element).
    pub const BYTES: usize = layout::queue::DATA;

    /// Reads the header from the first [`Self::BYTES`] of a queue.
    pub fn parse(b: &[u8]) -> Result<QueueHeader, HeaderError> {
        if b.len() < Self::BYTES {
            return Err(HeaderError::Short {
                need: Self::BYTES,
                got: b.len(),
            });
        }
        let h = QueueHeader {
            log2_elem_size: u32_at(b, layout::queue::LOG2_ELEM_SIZE),
            index_mask: u32_at(b, layout::queue::INDEX_MASK),
            producer: u32_at(b, layout::queue::PRODUCER),
            consumer: u32_at(b, layout::queue::CONSUMER),
        };
        let slots = h.index_mask.wrapping_add(1);
        if h.index_mask == u32::MAX || !slots.is_power_of_two() || slots > MAX_SLOTS {
            return Err(HeaderError::Mask(h.index_mask));
        }
        if !(MIN_LOG2_ELEM..=MAX_LOG2_ELEM).contains(&h.log2_elem_size) {
            return Err(HeaderError::ElemSize(h.log2_elem_size));
        }
        Ok(h)
    }

    /// Slots in the queue.
    pub fn slots(&self) -> u32 {
        self.index_mask + 1
    }

    /// Bytes of one element.
    pub fn elem_size(&self) -> usize {
        1 << self.log2_elem_size
    }

    /// Bytes of the whole queue: the header and every slot.
    pub fn queue_bytes(&self) -> usize {
        Self::BYTES + (self.slots() as usize) * self.elem_size()
    }

    /// The offset, from the queue's start, of the element at index `i` (masked).
    pub fn slot_offset(&self, i: u32) -> usize {
        Self::BYTES + ((i & self.index_mask) as usize) * self.elem_size()
    }

    /// Elements produced and not yet consumed, as rxe counts them: its indices wrap at the
    /// mask and one slot stays empty, so this is at most `slots - 1` whatever the indices say.
    pub fn pending(&self) -> u32 {
        self.producer.wrapping_sub(self.consumer) & self.index_mask
    }
}

/// What the monitor takes from a send WQE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendWqe {
    /// The application's id for the request.
    pub wr_id: u64,
    /// `ib_uverbs_wr_opcode`.
    pub opcode: u32,
    /// `IB_SEND_*` flags.
    pub send_flags: u32,
    /// The request's bytes (`dma.length`).
    pub length: u32,
    /// Gather entries (`dma.num_sge`).
    pub num_sge: u32,
}

impl SendWqe {
    /// Reads the fields from an element's first bytes; `None` when it is shorter than a WQE.
    pub fn parse(b: &[u8]) -> Option<SendWqe> {
        (b.len() >= layout::send_wqe::SIZE).then(|| SendWqe {
            wr_id: u64_at(b, layout::send_wqe::WR_ID),
            opcode: u32_at(b, layout::send_wqe::OPCODE),
            send_flags: u32_at(b, layout::send_wqe::SEND_FLAGS),
            length: u32_at(b, layout::send_wqe::DMA_LENGTH),
            num_sge: u32_at(b, layout::send_wqe::DMA_NUM_SGE),
        })
    }
}

/// What the monitor takes from a completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wc {
    /// The request's id.
    pub wr_id: u64,
    /// 0: success.
    pub status: u32,
    /// `IB_UVERBS_WC_*`.
    pub opcode: u32,
    /// Bytes (receives; RDMA READs).
    pub byte_len: u32,
    /// The QP it completes.
    pub qp_num: u32,
}

impl Wc {
    /// Reads the fields from an element's first bytes; `None` when it is shorter than a
    /// completion.
    pub fn parse(b: &[u8]) -> Option<Wc> {
        (b.len() >= layout::wc::SIZE).then(|| Wc {
            wr_id: u64_at(b, layout::wc::WR_ID),
            status: u32_at(b, layout::wc::STATUS),
            opcode: u32_at(b, layout::wc::OPCODE),
            byte_len: u32_at(b, layout::wc::BYTE_LEN),
            qp_num: u32_at(b, layout::wc::QP_NUM),
        })
    }
}

mod monitor;
mod registry;

pub use monitor::{RxeCursor, RxeMonitor, RxeQpCounts};
pub(crate) use registry::validate_rings;
pub use registry::RxeRing;

#[cfg(test)]
mod tests;
