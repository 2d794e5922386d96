//! The registration document: version 1.
//!
//! ```json
//! { "version": 1, "vm": "optional name", "path_mtu": 1024,
//!   "qps": [ { "qpn": 17,
//!              "sq":      { "pages": [8392704, 8396800], "wqe_cnt": 128, "dbrec": 8400896 },
//!              "send_cq": { "pages": [8404992], "cqe_cnt": 64, "cqe_size": 64, "dbrec": 8409088 },
//!              "recv_cq": { "pages": [8413184], "cqe_cnt": 64, "cqe_size": 64, "dbrec": 8417280 } } ],
//!   "mailbox": { "pages": [8421376], "blocks": 32, "block_size": 120 } }
//! ```
//!
//! Guest-physical addresses are plain integers in bytes; ring byte `k` lives at
//! `pages[(offset + k) / 4096] + (offset + k) % 4096`. Two optional extensions over the design
//! document, both defaulting to 0: `offset` (where the ring starts inside its first page: rdma-core
//! places the SQ after the RQ inside one QP buffer, so it need not be page aligned) and `start`
//! (the index to scan from: the SQ's producer basic-block counter or the CQ's consumer index when
//! a guest registers rings that are already in use). Unknown keys are rejected.
//!
//! Rings of other formats than mlx5 are listed in `rings`, each naming its format, its kind and,
//! when known, its QP:
//!
//! ```json
//!   "rings": [ { "format": "rxe", "kind": "sq", "qpn": 17, "pages": [8425472, 8429568],
//!                "slots": 8, "elem_size": 512 },
//!              { "format": "rxe", "kind": "cq", "pages": [8433664], "slots": 32, "elem_size": 64 } ]
//! ```
//!
//! `rxe` is soft-RoCE (`rdma_rxe`): the queue starts with the kernel's `struct rxe_queue_buf`
//! header, and `slots` and `elem_size` must be what that header says (the host checks them at
//! every scan). An optional `start` is the index to count from (default: the consumer index at
//! the host's first scan). The key may be absent; the mlx5 QPs above stay in `qps`.
//!
//! This crate only parses; the host validates the document against the guest's RAM
//! (`resex_ibmon::registry`).

use serde::{Deserialize, Serialize};

/// The document version this crate speaks.
pub const REGISTRATION_VERSION: u32 = 1;

/// Largest registration document accepted, in bytes (a million page numbers do not fit).
pub const MAX_DOCUMENT_BYTES: usize = 4 << 20;

/// A guest's registration of its queues and mailbox.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Registration {
    /// Document version; must be [`REGISTRATION_VERSION`].
    pub version: u32,
    /// Optional VM name (informational: the host decides identity from the channel).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm: Option<String>,
    /// Path MTU in bytes (256, 512, 1024, 2048 or 4096).
    pub path_mtu: u32,
    /// The queue pairs to monitor.
    pub qps: Vec<QpRegistration>,
    /// The latency-report mailbox, if the guest reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mailbox: Option<MailboxRegistration>,
    /// Rings of other formats (soft-RoCE), each naming its format.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rings: Vec<RingRegistration>,
}

/// The memory format of a ring listed in [`Registration::rings`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RingFormat {
    /// Soft-RoCE (`rdma_rxe`): kernel UAPI `struct rxe_queue_buf` and its elements.
    Rxe,
}

/// What a ring holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RingKind {
    /// A send queue (send work requests).
    Sq,
    /// A receive queue (receive work requests).
    Rq,
    /// A completion queue.
    Cq,
}

impl RingKind {
    /// `sq`, `rq` or `cq`.
    pub fn as_str(self) -> &'static str {
        match self {
            RingKind::Sq => "sq",
            RingKind::Rq => "rq",
            RingKind::Cq => "cq",
        }
    }
}

/// One ring of a format that describes itself (see the module's documentation).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RingRegistration {
    /// The memory format.
    pub format: RingFormat,
    /// Send, receive or completion queue.
    pub kind: RingKind,
    /// The QP the queue belongs to, when known (a CQ's completions name their own QPs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qpn: Option<u32>,
    /// Guest-physical page addresses (4 KiB aligned).
    pub pages: Vec<u64>,
    /// Offset of the queue's header inside its first page.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub offset: u64,
    /// Slots in the queue (a power of two; the header's `index_mask + 1`).
    pub slots: u32,
    /// Bytes of one slot (a power of two; `2^log2_elem_size` in the header).
    pub elem_size: u32,
    /// The index to count from. Absent: the queue's consumer index when the host first scans
    /// it (work posted and not yet completed is counted; work completed before is not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<u32>,
    /// An id the guest gives the queue, unique while it lives (soft-RoCE: its device and mmap
    /// offset). When a registration comes again, a ring keeps its cursor only if its key (and
    /// its pages and geometry) is the same: a queue freed and made again on the same pages is a
    /// new queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<u64>,
}

/// One queue pair.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QpRegistration {
    /// QP number (24 bits).
    pub qpn: u32,
    /// Send queue.
    pub sq: SqRegistration,
    /// CQ of the send queue.
    pub send_cq: CqRegistration,
    /// CQ of the receive queue; absent or identical to `send_cq` when one CQ serves both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recv_cq: Option<CqRegistration>,
}

/// A send queue.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SqRegistration {
    /// Guest-physical page addresses (4 KiB aligned).
    pub pages: Vec<u64>,
    /// Offset of the SQ inside its first page.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub offset: u64,
    /// Number of 64-byte basic blocks (a power of two).
    pub wqe_cnt: u32,
    /// Guest-physical address of the QP doorbell record (`dbrec[1]` is the SQ counter).
    pub dbrec: u64,
    /// Basic-block index to start walking from.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub start: u32,
}

/// A completion queue.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CqRegistration {
    /// Guest-physical page addresses (4 KiB aligned).
    pub pages: Vec<u64>,
    /// Offset of the CQ inside its first page.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub offset: u64,
    /// Number of entries (a power of two).
    pub cqe_cnt: u32,
    /// Entry size: 64 or 128.
    pub cqe_size: u32,
    /// Guest-physical address of the CQ doorbell record (`dbrec[0]` is the consumer index).
    pub dbrec: u64,
    /// CQ index to start scanning from.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub start: u32,
}

/// The status-byte mailbox for latency reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MailboxRegistration {
    /// Guest-physical page addresses (4 KiB aligned).
    pub pages: Vec<u64>,
    /// Offset of the mailbox inside its first page.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub offset: u64,
    /// Number of blocks.
    pub blocks: u32,
    /// Bytes per block (status byte included).
    pub block_size: u32,
}

fn is_zero<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

/// A document that is not valid JSON of this shape.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    /// Larger than [`MAX_DOCUMENT_BYTES`].
    #[error("registration document is {0} bytes; the limit is {MAX_DOCUMENT_BYTES}")]
    TooLarge(usize),
    /// Malformed JSON, a wrong type, a missing or unknown key.
    #[error("registration document is malformed: {0}")]
    Json(#[from] serde_json::Error),
    /// A version this host does not speak.
    #[error("registration version {0} is not supported (this host speaks version {REGISTRATION_VERSION})")]
    Version(u32),
}

impl Registration {
    /// Parses a document, bounding its size first.
    pub fn parse(bytes: &[u8]) -> Result<Registration, ParseError> {
        if bytes.len() > MAX_DOCUMENT_BYTES {
            return Err(ParseError::TooLarge(bytes.len()));
        }
        let r: Registration = serde_json::from_slice(bytes)?;
        r.check_version()?;
        Ok(r)
    }

    /// Refuses a version this crate does not speak (for documents that arrived inside another
    /// message rather than through [`Registration::parse`]).
    pub fn check_version(&self) -> Result<(), ParseError> {
        if self.version != REGISTRATION_VERSION {
            return Err(ParseError::Version(self.version));
        }
        Ok(())
    }

    /// The document as compact JSON.
    pub fn to_json(&self) -> String {
        // Serialising plain integers, strings and vectors cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DESIGN_EXAMPLE: &str = r#"{ "version": 1, "vm": "optional name, the host decides identity from the channel",
  "path_mtu": 1024,
  "qps": [ { "qpn": 17,
             "sq":      { "pages": [8392704, 8396800], "wqe_cnt": 128, "dbrec": 8400896 },
             "send_cq": { "pages": [8404992], "cqe_cnt": 64, "cqe_size": 64, "dbrec": 8409088 },
             "recv_cq": { "pages": [8413184], "cqe_cnt": 64, "cqe_size": 64, "dbrec": 8417280 } } ],
  "mailbox": { "pages": [8421376], "blocks": 32, "block_size": 120 } }"#;

    #[test]
    fn parses_the_design_documents_example() {
        let r = Registration::parse(DESIGN_EXAMPLE.as_bytes()).unwrap();
        assert_eq!(r.qps[0].qpn, 17);
        assert_eq!(r.qps[0].sq.pages, vec![8392704, 8396800]);
        assert_eq!(r.qps[0].recv_cq.as_ref().unwrap().dbrec, 8417280);
        assert_eq!(r.mailbox.as_ref().unwrap().blocks, 32);
        assert_eq!(Registration::parse(r.to_json().as_bytes()).unwrap(), r);
    }

    #[test]
    fn rejects_unknown_keys_versions_and_oversized_documents() {
        let bad = DESIGN_EXAMPLE.replace("\"path_mtu\"", "\"pathmtu\"");
        let e = Registration::parse(bad.as_bytes()).unwrap_err().to_string();
        assert!(e.contains("pathmtu"), "{e}");
        let v2 = DESIGN_EXAMPLE.replace("\"version\": 1", "\"version\": 2");
        assert!(matches!(
            Registration::parse(v2.as_bytes()),
            Err(ParseError::Version(2))
        ));
        let huge = vec![b' '; MAX_DOCUMENT_BYTES + 1];
        assert!(matches!(
            Registration::parse(&huge),
            Err(ParseError::TooLarge(_))
        ));
        let neg = DESIGN_EXAMPLE.replace("8392704", "-1");
        assert!(Registration::parse(neg.as_bytes()).is_err());
    }

    const RXE_RINGS: &str = r#", "rings": [
      { "format": "rxe", "kind": "sq", "qpn": 17, "pages": [8425472, 8429568], "slots": 8, "elem_size": 512 },
      { "format": "rxe", "kind": "cq", "pages": [8433664], "offset": 512, "slots": 32, "elem_size": 64 } ] }"#;

    fn with_rings(rings: &str) -> String {
        let doc = DESIGN_EXAMPLE.trim_end();
        format!("{}{rings}", &doc[..doc.len() - 1])
    }

    #[test]
    fn rings_name_their_format_and_kind() {
        let r = Registration::parse(with_rings(RXE_RINGS).as_bytes()).unwrap();
        assert_eq!(r.rings.len(), 2);
        assert_eq!(r.rings[0].format, RingFormat::Rxe);
        assert_eq!((r.rings[0].kind, r.rings[0].qpn), (RingKind::Sq, Some(17)));
        assert_eq!((r.rings[1].kind, r.rings[1].offset), (RingKind::Cq, 512));
        assert_eq!(Registration::parse(r.to_json().as_bytes()).unwrap(), r);
        // No rings: the key is left out, so version-1 readers of mlx5-only documents see no change.
        let plain = Registration::parse(DESIGN_EXAMPLE.as_bytes()).unwrap();
        assert!(!plain.to_json().contains("rings"));
    }

    #[test]
    fn rejects_an_unknown_ring_format_or_kind() {
        let formats = RXE_RINGS.replacen("\"rxe\"", "\"mlx4\"", 1);
        let kinds = RXE_RINGS.replacen("\"cq\"", "\"srq\"", 1);
        for (bad, word) in [(formats, "mlx4"), (kinds, "srq")] {
            let e = Registration::parse(with_rings(&bad).as_bytes())
                .unwrap_err()
                .to_string();
            assert!(e.contains("unknown variant") && e.contains(word), "{e}");
        }
    }
}
