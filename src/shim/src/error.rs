//! The typed cases of [`crate::ShimError`]: what was wrong with a request, a placement, a
//! transport's setting or a peer's data.

use crate::provider::WcOpcode;
use crate::transport::Kind;

/// Memory the shim was asked to place something in that cannot hold it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Placement {
    /// A buffer that does not fit its memory.
    #[error("buffer {base:#x}+{len} is outside its memory ({size} bytes)")]
    Buffer {
        /// Where it starts in its memory.
        base: u64,
        /// Its length, bytes.
        len: u64,
        /// The memory's size, bytes.
        size: u64,
    },
    /// An access past a buffer's end.
    #[error("access {off}+{n} outside a buffer of {len} bytes")]
    Access {
        /// Offset of the access in the buffer.
        off: u64,
        /// Bytes accessed.
        n: usize,
        /// The buffer's length.
        len: u64,
    },
    /// A provider heap without a whole page.
    #[error("no whole page in the heap {start:#x}+{len} of a {size}-byte memory")]
    Heap {
        /// The heap's start (rounded up to a page).
        start: u64,
        /// The heap's length asked for.
        len: u64,
        /// The memory's size, bytes.
        size: u64,
    },
    /// An address the provider's memory cannot translate to a guest-physical one.
    #[error("{addr:#x} has no guest-physical address")]
    NoGuestPhysical {
        /// The address.
        addr: u64,
    },
}

/// A request the shim cannot post or serve as asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// Inline data larger than the QP takes, or inline data on a READ.
    #[error("inline data of {len} bytes (at most {max}; never for READ)")]
    Inline {
        /// Bytes of inline data.
        len: usize,
        /// The QP's most inline bytes.
        max: u32,
    },
    /// A receive posted to a QP without a receive queue.
    #[error("this QP has no receive queue")]
    NoReceiveQueue,
    /// More scatter entries than a receive WQE holds.
    #[error("{sges} scatter entries, at most {max}")]
    ScatterEntries {
        /// Entries given.
        sges: usize,
        /// The most.
        max: usize,
    },
    /// A payload larger than a transport block.
    #[error("{len} bytes do not fit a block of {cap}")]
    Payload {
        /// Bytes given.
        len: usize,
        /// A block's payload, bytes.
        cap: u64,
    },
    /// A block number past the ring.
    #[error("block {block} of {n}")]
    Block {
        /// The block asked for.
        block: u32,
        /// Blocks in the ring.
        n: u32,
    },
    /// A path MTU that is not one of the device's.
    #[error("path MTU {0}")]
    PathMtu(u32),
    /// A region key the provider did not register.
    #[error("no region with lkey {lkey:#x}")]
    NoRegion {
        /// The key.
        lkey: u32,
    },
    /// A completion queue number the provider did not create.
    #[error("no completion queue {send_cq} or {recv_cq}")]
    NoCompletionQueue {
        /// The send CQ asked for.
        send_cq: u32,
        /// The receive CQ asked for.
        recv_cq: u32,
    },
}

/// Who sends to a transport's receiver, as [`TransportError::Mismatch`] names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SenderKind {
    /// A sender addressed by its QP (status-byte, sliding window, CPWR).
    Qp,
    /// A HiPower requester.
    Hipower,
}

impl std::fmt::Display for SenderKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SenderKind::Qp => "QP-addressed (status-byte, window or CPWR)",
            SenderKind::Hipower => "HiPower",
        })
    }
}

/// A transport's setting, or a peer's, that cannot work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    /// A ring of a number or a size of blocks the transport cannot use.
    #[error("{}", geometry_rule(*kind))]
    Geometry {
        /// The transport.
        kind: Kind,
        /// Blocks (buffers) asked for.
        blocks: u32,
        /// Bytes per block, header included.
        block_size: u64,
    },
    /// A receiver's endpoint without a usable ring.
    #[error("receiver endpoint has no usable {}", endpoint_noun(*kind))]
    Endpoint {
        /// The transport.
        kind: Kind,
        /// The endpoint's blocks.
        blocks: u32,
        /// The endpoint's bytes per block.
        block_size: u64,
    },
    /// A receiver given a sender of another mechanism.
    #[error("a {receiver} receiver cannot accept a {sender} sender")]
    Mismatch {
        /// The receiver's mechanism.
        receiver: Kind,
        /// The sender's.
        sender: SenderKind,
    },
    /// A HiPower requester with another number of buffers than its responder.
    #[error("requester has {requester} buffers, this responder {responder}")]
    Buffers {
        /// The requester's buffers.
        requester: u32,
        /// The responder's.
        responder: u32,
    },
}

fn geometry_rule(kind: Kind) -> &'static str {
    match kind {
        Kind::StatusByte => "blocks must be 1..=255",
        Kind::SlidingWindow => "blocks must be 1..=255 and a block at most 16 MiB",
        Kind::Cpwr => "CPWR needs 1..=255 buffers of at most 16 MiB",
        Kind::Hipower => "HiPower needs 1..=4096 buffers holding at least a header",
    }
}

fn endpoint_noun(kind: Kind) -> &'static str {
    match kind {
        Kind::SlidingWindow => "ring",
        _ => "blocks",
    }
}

/// What a peer or the device put in shared memory or a completion that the protocol does not
/// allow (a hostile or broken peer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// A block header claiming more bytes than a block holds.
    #[error("block {block} claims {len} bytes, more than a block holds")]
    Claims {
        /// The block.
        block: u32,
        /// The length its header claims.
        len: u32,
    },
    /// A receive completion of another opcode than WRITE with immediate.
    #[error("unexpected receive completion")]
    UnexpectedCompletion {
        /// The completion's opcode.
        opcode: WcOpcode,
    },
    /// An immediate naming a slot past the ring.
    #[error("immediate names {what} {slot} of {n}")]
    Immediate {
        /// What a slot is (`block`, `buffer`).
        what: &'static str,
        /// The slot named.
        slot: u32,
        /// Slots in the ring.
        n: u32,
    },
    /// A completion for a QP this CQ does not serve.
    #[error("completion for unknown QP {qpn:#x}")]
    UnknownQp {
        /// The completion's QP number.
        qpn: u32,
    },
}

/// The text of a failed libibverbs call: its name and, when it set one, the OS error.
pub(crate) fn verbs_failure(call: &str, errno: Option<i32>) -> String {
    match errno {
        Some(e) => format!("{call} failed ({})", std::io::Error::from_raw_os_error(e)),
        None => format!("{call} failed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Buffer, ShimError};
    use resex_guestmem::{GuestMemory, VecMemory};
    use std::sync::Arc;

    #[test]
    fn placements_and_settings_are_typed_with_their_text() {
        let mem: Arc<dyn GuestMemory> = Arc::new(VecMemory::new(4096));
        let e = Buffer::new(mem.clone(), 4000, 0, 200).unwrap_err();
        assert!(
            matches!(
                e,
                ShimError::Placement(Placement::Buffer {
                    base: 4000,
                    len: 200,
                    size: 4096
                })
            ),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "buffer 0xfa0+200 is outside its memory (4096 bytes)"
        );
        let b = Buffer::new(mem, 0, 0, 16).unwrap();
        assert!(matches!(
            b.read_u8(16),
            Err(ShimError::Placement(Placement::Access {
                off: 16,
                n: 1,
                len: 16
            }))
        ));
        let texts = [
            (Kind::StatusByte, "blocks must be 1..=255"),
            (
                Kind::SlidingWindow,
                "blocks must be 1..=255 and a block at most 16 MiB",
            ),
            (Kind::Cpwr, "CPWR needs 1..=255 buffers of at most 16 MiB"),
            (
                Kind::Hipower,
                "HiPower needs 1..=4096 buffers holding at least a header",
            ),
        ];
        for (kind, text) in texts {
            let e = ShimError::from(TransportError::Geometry {
                kind,
                blocks: 0,
                block_size: 64,
            });
            assert_eq!(e.to_string(), text);
        }
        let e = TransportError::Mismatch {
            receiver: Kind::Hipower,
            sender: SenderKind::Qp,
        };
        assert_eq!(
            e.to_string(),
            "a hipower receiver cannot accept a QP-addressed (status-byte, window or CPWR) sender"
        );
        let e = ShimError::Verbs {
            call: "ibv_poll_cq",
            errno: None,
        };
        assert_eq!(e.to_string(), "ibv_poll_cq failed");
        let e = ShimError::Verbs {
            call: "ibv_modify_qp(RTR)",
            errno: Some(libc_einval()),
        };
        assert_eq!(
            e.to_string(),
            format!(
                "ibv_modify_qp(RTR) failed ({})",
                std::io::Error::from_raw_os_error(libc_einval())
            )
        );
    }

    /// EINVAL on Linux.
    fn libc_einval() -> i32 {
        22
    }
}
