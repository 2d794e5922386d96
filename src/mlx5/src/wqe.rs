//! Send WQEs: segments, a builder (the guest provider's side) and a parser (the monitor's and
//! the HCA's side).

use crate::consts::{ctrl_flags, send_op, INLINE_SEG};
use crate::{DS_BYTES, MAX_DS};

/// Control segment: the first 16 bytes of every WQE.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CtrlSeg {
    /// Opcode modifier.
    pub opmod: u8,
    /// Index (16 bits, wrapping) of the WQE's first basic block.
    pub wqe_index: u16,
    /// Send opcode (`send_op::*`).
    pub opcode: u8,
    /// QP number (24 bits).
    pub qpn: u32,
    /// WQE size in 16-byte units (6 bits).
    pub ds: u8,
    /// Signature byte.
    pub signature: u8,
    /// Fence / completion / solicited flags (`ctrl_flags::*`).
    pub fm_ce_se: u8,
    /// Immediate data or invalidate key, as stored (big-endian on the wire).
    pub imm: u32,
}

impl CtrlSeg {
    /// Decodes 16 bytes.
    pub fn decode(b: &[u8; 16]) -> CtrlSeg {
        let qpn_ds = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
        CtrlSeg {
            opmod: b[0],
            wqe_index: u16::from_be_bytes([b[1], b[2]]),
            opcode: b[3],
            qpn: qpn_ds >> 8,
            ds: b[7] & 0x3f,
            signature: b[8],
            fm_ce_se: b[11],
            imm: u32::from_be_bytes([b[12], b[13], b[14], b[15]]),
        }
    }

    /// Encodes 16 bytes, as `mlx5dv_set_ctrl_seg` does.
    pub fn encode(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[0] = self.opmod;
        b[1..3].copy_from_slice(&self.wqe_index.to_be_bytes());
        b[3] = self.opcode;
        let qpn_ds = ((self.qpn & 0x00ff_ffff) << 8) | u32::from(self.ds & 0x3f);
        b[4..8].copy_from_slice(&qpn_ds.to_be_bytes());
        b[8] = self.signature;
        b[11] = self.fm_ce_se;
        b[12..16].copy_from_slice(&self.imm.to_be_bytes());
        b
    }

    /// Whether the WQE asks for a CQE.
    pub fn signaled(&self) -> bool {
        self.fm_ce_se & ctrl_flags::CQ_UPDATE != 0
    }

    /// Basic blocks the WQE occupies: `ceil(ds / 4)`.
    pub fn bbs(&self) -> u32 {
        u32::from(self.ds).div_ceil(4)
    }
}

/// Remote address segment (RDMA and atomics).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RaddrSeg {
    /// Remote virtual address.
    pub raddr: u64,
    /// Remote key.
    pub rkey: u32,
}

impl RaddrSeg {
    /// Decodes 16 bytes.
    pub fn decode(b: &[u8; 16]) -> RaddrSeg {
        RaddrSeg {
            raddr: be64(b, 0),
            rkey: be32(b, 8),
        }
    }
    /// Encodes 16 bytes.
    pub fn encode(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[0..8].copy_from_slice(&self.raddr.to_be_bytes());
        b[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        b
    }
}

/// Atomic segment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AtomicSeg {
    /// Swap value (CS) or add value (FA).
    pub swap_add: u64,
    /// Compare value (CS).
    pub compare: u64,
}

impl AtomicSeg {
    /// Decodes 16 bytes.
    pub fn decode(b: &[u8; 16]) -> AtomicSeg {
        AtomicSeg {
            swap_add: be64(b, 0),
            compare: be64(b, 8),
        }
    }
    /// Encodes 16 bytes.
    pub fn encode(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[0..8].copy_from_slice(&self.swap_add.to_be_bytes());
        b[8..16].copy_from_slice(&self.compare.to_be_bytes());
        b
    }
}

/// Data (scatter/gather) segment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DataSeg {
    /// Length in bytes.
    pub byte_count: u32,
    /// Local key.
    pub lkey: u32,
    /// Local virtual address.
    pub addr: u64,
}

impl DataSeg {
    /// Decodes 16 bytes.
    pub fn decode(b: &[u8; 16]) -> DataSeg {
        DataSeg {
            byte_count: be32(b, 0),
            lkey: be32(b, 4),
            addr: be64(b, 8),
        }
    }
    /// Encodes 16 bytes, as `mlx5dv_set_data_seg` does.
    pub fn encode(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[0..4].copy_from_slice(&self.byte_count.to_be_bytes());
        b[4..8].copy_from_slice(&self.lkey.to_be_bytes());
        b[8..16].copy_from_slice(&self.addr.to_be_bytes());
        b
    }
}

fn be32(b: &[u8], o: usize) -> u32 {
    u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

fn be64(b: &[u8], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[o..o + 8]);
    u64::from_be_bytes(a)
}

fn seg(b: &[u8], i: usize) -> &[u8; 16] {
    // Callers index only below the checked ds; the slice is exactly 16 bytes.
    b[i * DS_BYTES..(i + 1) * DS_BYTES]
        .try_into()
        .unwrap_or(&[0u8; 16])
}

/// Which fixed segments follow the control segment, by opcode; `None` for opcodes the monitor
/// does not know.
pub fn fixed_segments(opcode: u8) -> Option<(bool, bool)> {
    match opcode {
        send_op::NOP | send_op::SEND | send_op::SEND_IMM | send_op::SEND_INVAL => {
            Some((false, false))
        }
        send_op::RDMA_WRITE | send_op::RDMA_WRITE_IMM | send_op::RDMA_READ => Some((true, false)),
        send_op::ATOMIC_CS | send_op::ATOMIC_FA => Some((true, true)),
        _ => None,
    }
}

/// The payload part of a WQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Payload<'a> {
    /// Data segments (the bytes of `n` segments, 16 each) and their summed length.
    Gather {
        /// Raw bytes of the data segments.
        segs: &'a [u8],
        /// Sum of their byte counts.
        total: u64,
    },
    /// Inline data.
    Inline(&'a [u8]),
}

impl<'a> Payload<'a> {
    /// Payload length in bytes.
    pub fn len(&self) -> u64 {
        match self {
            Payload::Gather { total, .. } => *total,
            Payload::Inline(d) => d.len() as u64,
        }
    }

    /// True when the payload has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The data segments (none for inline).
    pub fn data_segs(&self) -> impl Iterator<Item = DataSeg> + 'a {
        let segs: &'a [u8] = match self {
            Payload::Gather { segs, .. } => segs,
            Payload::Inline(_) => &[],
        };
        segs.chunks_exact(DS_BYTES)
            .map(|c| DataSeg::decode(c.try_into().unwrap_or(&[0u8; 16])))
    }
}

/// A parsed send WQE, borrowing the bytes it was parsed from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendWqe<'a> {
    /// Control segment.
    pub ctrl: CtrlSeg,
    /// Remote address segment (RDMA, atomics).
    pub raddr: Option<RaddrSeg>,
    /// Atomic segment (atomics).
    pub atomic: Option<AtomicSeg>,
    /// Payload.
    pub payload: Payload<'a>,
}

/// Why a WQE's bytes cannot be a valid send WQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WqeError {
    /// `ds` is zero.
    #[error("WQE has ds = 0")]
    ZeroDs,
    /// Fewer bytes than `ds` says.
    #[error("WQE of ds {ds} given only {have} bytes")]
    Truncated {
        /// The WQE's ds.
        ds: u8,
        /// Bytes available.
        have: usize,
    },
    /// `ds` too small for the opcode's fixed segments.
    #[error("WQE opcode {opcode:#04x} needs at least {need} DS, has {ds}")]
    TooShort {
        /// Send opcode.
        opcode: u8,
        /// DS needed.
        need: u8,
        /// DS present.
        ds: u8,
    },
    /// Inline length overruns the WQE.
    #[error("inline segment of {len} bytes overruns a WQE with {room} bytes left")]
    InlineOverrun {
        /// Inline length.
        len: u32,
        /// Bytes left in the WQE.
        room: usize,
    },
    /// An inline header after data segments, or inline on a READ/atomic.
    #[error("inline data not allowed here (opcode {opcode:#04x})")]
    BadInline {
        /// Send opcode.
        opcode: u8,
    },
    /// Opcode not known.
    #[error("unknown send opcode {0:#04x}")]
    UnknownOpcode(u8),
}

/// Parses the `ds * 16` bytes of a send WQE (the caller reads `ds` from the control segment
/// first and reads exactly that much). Every byte is untrusted.
pub fn parse_send_wqe(b: &[u8]) -> Result<SendWqe<'_>, WqeError> {
    let ctrl = CtrlSeg::decode(b.get(..16).and_then(|s| s.try_into().ok()).ok_or(
        WqeError::Truncated {
            ds: 0,
            have: b.len(),
        },
    )?);
    let (fixed, payload) = payload_of(&ctrl, b)?;
    let raddr = (fixed >= 2).then(|| RaddrSeg::decode(seg(b, 1)));
    let atomic = (fixed == 3).then(|| AtomicSeg::decode(seg(b, 2)));
    Ok(SendWqe {
        ctrl,
        raddr,
        atomic,
        payload,
    })
}

/// The payload length of the send WQE in `b` whose control segment `ctrl` is already decoded,
/// with exactly the checks of [`parse_send_wqe`]: what a monitor needs, without decoding the
/// remote-address and atomic segments.
pub fn send_wqe_payload_len(ctrl: &CtrlSeg, b: &[u8]) -> Result<u64, WqeError> {
    Ok(payload_of(ctrl, b)?.1.len())
}

/// The number of fixed segments (control, remote address, atomic) and the payload.
fn payload_of<'b>(ctrl: &CtrlSeg, b: &'b [u8]) -> Result<(u8, Payload<'b>), WqeError> {
    let ds = ctrl.ds;
    if ds == 0 {
        return Err(WqeError::ZeroDs);
    }
    let need_bytes = usize::from(ds) * DS_BYTES;
    if b.len() < need_bytes {
        return Err(WqeError::Truncated { ds, have: b.len() });
    }
    let (has_raddr, has_atomic) =
        fixed_segments(ctrl.opcode).ok_or(WqeError::UnknownOpcode(ctrl.opcode))?;
    let fixed = 1 + u8::from(has_raddr) + u8::from(has_atomic);
    if ds < fixed {
        return Err(WqeError::TooShort {
            opcode: ctrl.opcode,
            need: fixed,
            ds,
        });
    }
    let rest = &b[usize::from(fixed) * DS_BYTES..need_bytes];
    Ok((fixed, parse_payload(ctrl.opcode, rest)?))
}

fn parse_payload(opcode: u8, rest: &[u8]) -> Result<Payload<'_>, WqeError> {
    if rest.is_empty() {
        return Ok(Payload::Gather {
            segs: rest,
            total: 0,
        });
    }
    let first = be32(rest, 0);
    if first & INLINE_SEG != 0 {
        if !matches!(
            opcode,
            send_op::SEND
                | send_op::SEND_IMM
                | send_op::SEND_INVAL
                | send_op::RDMA_WRITE
                | send_op::RDMA_WRITE_IMM
        ) {
            return Err(WqeError::BadInline { opcode });
        }
        let len = first & !INLINE_SEG;
        let room = rest.len() - 4;
        let n = usize::try_from(len).unwrap_or(usize::MAX);
        if n > room {
            return Err(WqeError::InlineOverrun { len, room });
        }
        return Ok(Payload::Inline(&rest[4..4 + n]));
    }
    let mut total = 0u64;
    for c in rest.chunks_exact(DS_BYTES) {
        let n = be32(c, 0);
        if n & INLINE_SEG != 0 {
            return Err(WqeError::BadInline { opcode });
        }
        total += u64::from(n);
    }
    Ok(Payload::Gather { segs: rest, total })
}

/// What a guest asks to post: the builder's input.
#[derive(Clone, Copy, Debug)]
pub struct WqeSpec<'a> {
    /// Send opcode.
    pub opcode: u8,
    /// QP number.
    pub qpn: u32,
    /// Generate a CQE.
    pub signaled: bool,
    /// Solicited event.
    pub solicited: bool,
    /// Fence.
    pub fence: bool,
    /// Immediate data (for *_IMM).
    pub imm: u32,
    /// Remote address (RDMA, atomics).
    pub raddr: Option<RaddrSeg>,
    /// Atomic operands.
    pub atomic: Option<AtomicSeg>,
    /// Scatter/gather list (zero-length entries are skipped, as rdma-core does).
    pub sges: &'a [DataSeg],
    /// Inline data instead of the SGEs.
    pub inline: Option<&'a [u8]>,
}

impl<'a> WqeSpec<'a> {
    /// A spec with no segments beyond control: fill in what the opcode needs.
    pub fn new(opcode: u8, qpn: u32) -> WqeSpec<'a> {
        WqeSpec {
            opcode,
            qpn,
            signaled: false,
            solicited: false,
            fence: false,
            imm: 0,
            raddr: None,
            atomic: None,
            sges: &[],
            inline: None,
        }
    }

    /// Builds the WQE bytes (exactly `ds * 16` bytes) for basic-block index `wqe_index`.
    /// Fails when the opcode is unknown, a required segment is missing, or it exceeds 63 DS.
    pub fn build(&self, wqe_index: u16) -> Result<Vec<u8>, WqeError> {
        let (has_raddr, has_atomic) =
            fixed_segments(self.opcode).ok_or(WqeError::UnknownOpcode(self.opcode))?;
        let mut out = vec![0u8; DS_BYTES];
        if has_raddr {
            out.extend_from_slice(&self.raddr.unwrap_or_default().encode());
        }
        if has_atomic {
            out.extend_from_slice(&self.atomic.unwrap_or_default().encode());
        }
        if let Some(data) = self.inline {
            // rdma-core writes no inline header for zero bytes.
            if data.is_empty() {
                return self.finish(out, wqe_index);
            }
            let len = u32::try_from(data.len()).unwrap_or(u32::MAX);
            out.extend_from_slice(&(len | INLINE_SEG).to_be_bytes());
            out.extend_from_slice(data);
            out.resize(out.len().div_ceil(DS_BYTES) * DS_BYTES, 0);
        } else {
            for s in self.sges.iter().filter(|s| s.byte_count != 0) {
                out.extend_from_slice(&s.encode());
            }
        }
        self.finish(out, wqe_index)
    }

    fn finish(&self, mut out: Vec<u8>, wqe_index: u16) -> Result<Vec<u8>, WqeError> {
        let ds = out.len() / DS_BYTES;
        let ds = u8::try_from(ds)
            .ok()
            .filter(|d| *d <= MAX_DS)
            .ok_or(WqeError::TooShort {
                opcode: self.opcode,
                need: MAX_DS,
                ds: MAX_DS,
            })?;
        let mut flags = 0;
        if self.signaled {
            flags |= ctrl_flags::CQ_UPDATE;
        }
        if self.solicited {
            flags |= ctrl_flags::SOLICITED;
        }
        if self.fence {
            flags |= ctrl_flags::FENCE;
        }
        let ctrl = CtrlSeg {
            opmod: 0,
            wqe_index,
            opcode: self.opcode,
            qpn: self.qpn,
            ds,
            signature: 0,
            fm_ce_se: flags,
            imm: self.imm,
        };
        out[..16].copy_from_slice(&ctrl.encode());
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
