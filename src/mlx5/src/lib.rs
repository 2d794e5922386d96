//! The mlx5 queue memory formats, exactly as rdma-core's `mlx5dv.h` and the ConnectX HCA lay
//! them out (`shared/specs/mlx5-rings.md`), in both directions.
//!
//! - [`cqe`]: 64-byte completion queue entries (also inside 128-byte entries), the owner-bit rule.
//! - [`wqe`]: send work queue entries: control, remote-address, atomic, data and inline segments;
//!   a builder (what the guest provider writes) and a parser (what the monitor and the software
//!   HCA read, treating every byte as hostile).
//! - [`dbrec`]: CQ and QP doorbell records, each access one aligned 8-byte copy (never half a
//!   counter).
//! - [`writer`]: ring writers: the guest side posting WQEs, the HCA side producing CQEs.
//!
//! Every multi-byte field is big-endian. Nothing here panics on any input.

#![cfg_attr(test, allow(clippy::cast_possible_truncation))]

pub mod consts;
pub mod cqe;
pub mod dbrec;
pub mod wqe;
pub mod writer;

pub use cqe::{Cqe, CqeSize};
pub use wqe::{AtomicSeg, CtrlSeg, DataSeg, Payload, RaddrSeg, SendWqe, WqeError, WqeSpec};
pub use writer::{CqWriter, SqWriter, WriteError};

/// Size of a send queue basic block (WQEBB).
pub const SEND_WQE_BB: u64 = 64;
/// Size of a WQE data unit (DS, octoword).
pub const DS_BYTES: usize = 16;
/// Largest WQE in DS units (the ds field is 6 bits).
pub const MAX_DS: u8 = 63;
/// Largest WQE in basic blocks.
pub const MAX_WQE_BBS: u32 = 16;

/// The 16-bit WQE index field of a wider basic-block counter.
#[inline]
pub fn index16(p: u32) -> u16 {
    let b = p.to_le_bytes();
    u16::from_le_bytes([b[0], b[1]])
}

/// Number of packets an RC message of `len` bytes takes at path MTU `mtu` bytes:
/// `max(1, ceil(len / mtu))`.
#[inline]
pub fn packets(len: u64, mtu: u64) -> u64 {
    if mtu == 0 {
        return 1;
    }
    // Path MTUs are powers of two: a shift instead of a division on the monitor's hot path.
    if mtu.is_power_of_two() {
        let s = mtu.trailing_zeros();
        return ((len >> s) + u64::from(len & (mtu - 1) != 0)).max(1);
    }
    len.div_ceil(mtu).max(1)
}

/// The path-MTU enum of the IB spec (256 = 1 ... 4096 = 5) to bytes, or `None` if invalid.
pub fn mtu_enum_to_bytes(v: u8) -> Option<u32> {
    match v {
        1..=5 => Some(128u32 << v),
        _ => None,
    }
}

/// Bytes to the path-MTU enum, or `None` if not one of 256, 512, 1024, 2048, 4096.
pub fn mtu_bytes_to_enum(bytes: u32) -> Option<u8> {
    match bytes {
        256 => Some(1),
        512 => Some(2),
        1024 => Some(3),
        2048 => Some(4),
        4096 => Some(5),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packets_rounds_up_and_counts_empty_messages_once() {
        assert_eq!(packets(0, 1024), 1);
        assert_eq!(packets(1, 1024), 1);
        assert_eq!(packets(1024, 1024), 1);
        assert_eq!(packets(1025, 1024), 2);
        assert_eq!(packets(2 << 20, 1024), 2048);
        assert_eq!(packets(u64::MAX, 256), u64::MAX.div_ceil(256));
    }

    #[test]
    fn mtu_enum_matches_the_ib_spec() {
        assert_eq!(mtu_enum_to_bytes(3), Some(1024));
        assert_eq!(mtu_enum_to_bytes(5), Some(4096));
        assert_eq!(mtu_enum_to_bytes(0), None);
        assert_eq!(mtu_bytes_to_enum(2048), Some(4));
        assert_eq!(mtu_bytes_to_enum(1500), None);
    }
}
