//! Validation of a registration's soft-RoCE rings against the guest's RAM.
//!
//! A ring's geometry (slots, element size) is what the guest says its header holds; the pages
//! must cover exactly the header and every slot. The header itself is read at every scan and a
//! ring whose header disagrees is not walked (`super::monitor`).

use super::{layout, QueueHeader, MAX_LOG2_ELEM, MAX_SLOTS, MIN_LOG2_ELEM};
use crate::registry::{err, range_check, Limits, Problem, RegistrationError};
use resex_guestmem::PageRing;
use resex_proto::{RingFormat, RingKind, RingRegistration};

/// A validated soft-RoCE queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RxeRing {
    /// Send, receive or completion queue.
    pub kind: RingKind,
    /// Its QP, when the registration named it.
    pub qpn: Option<u32>,
    /// The whole queue: header and slots.
    pub ring: PageRing,
    /// Slots (a power of two).
    pub slots: u32,
    /// log2 of a slot's bytes.
    pub log2_elem: u32,
    /// The index to count from, if given.
    pub start: Option<u32>,
    /// The guest's id for the queue, if given.
    pub key: Option<u64>,
}

impl RxeRing {
    /// `rxe sq of qp 17` and the like, for errors and logs; `i` is the ring's position.
    pub fn place(&self, i: usize) -> String {
        place(i, self.kind, self.qpn)
    }

    /// The index mask (`slots - 1`).
    pub fn mask(&self) -> u32 {
        self.slots - 1
    }

    /// The ring offset of slot `i` (masked).
    pub fn slot(&self, i: u32) -> u64 {
        (QueueHeader::BYTES as u64) + (u64::from(i & self.mask()) << self.log2_elem)
    }

    /// The same queue (same memory and geometry): its cursor may carry over a re-registration.
    pub fn same_queue(&self, o: &RxeRing) -> bool {
        self.kind == o.kind
            && self.key == o.key
            && self.ring == o.ring
            && self.slots == o.slots
            && self.log2_elem == o.log2_elem
    }
}

/// `ring 3 (rxe sq of qp 17)`: ring `i` of a registration, in errors and logs.
fn place(i: usize, kind: RingKind, qpn: Option<u32>) -> String {
    match qpn {
        Some(q) => format!("ring {i} (rxe {} of qp {q})", kind.as_str()),
        None => format!("ring {i} (rxe {})", kind.as_str()),
    }
}

/// The smallest slot each kind of queue needs.
fn min_elem(kind: RingKind) -> usize {
    match kind {
        RingKind::Sq => layout::send_wqe::SIZE,
        RingKind::Rq => layout::recv_wqe::SIZE,
        RingKind::Cq => layout::wc::SIZE,
    }
}

/// Validates every ring; rejects the document whole at the first bad one.
pub(crate) fn validate_rings(
    rings: &[RingRegistration],
    ram_size: u64,
    limits: &Limits,
) -> Result<Vec<RxeRing>, RegistrationError> {
    if rings.len() > limits.max_rings {
        return Err(err(
            "document",
            Problem::TooMany {
                what: "rings",
                count: rings.len(),
                limit: limits.max_rings,
            },
        ));
    }
    let mut out: Vec<RxeRing> = Vec::with_capacity(rings.len());
    for (i, r) in rings.iter().enumerate() {
        let ring = validate_ring(i, r, ram_size)?;
        let twin = out
            .iter()
            .any(|o| o.kind == ring.kind && o.kind != RingKind::Cq && o.qpn == ring.qpn);
        if let (true, Some(qpn)) = (twin, ring.qpn) {
            return Err(err(
                ring.place(i),
                Problem::DuplicateRing {
                    qpn,
                    kind: ring.kind.as_str(),
                },
            ));
        }
        out.push(ring);
    }
    Ok(out)
}

fn validate_ring(
    i: usize,
    r: &RingRegistration,
    ram_size: u64,
) -> Result<RxeRing, RegistrationError> {
    let RingFormat::Rxe = r.format;
    let place = place(i, r.kind, r.qpn);
    if let Some(q) = r.qpn {
        range_check(&place, "qpn", u64::from(q), q < 1 << 24, "0 to 2^24 - 1")?;
    }
    range_check(
        &place,
        "slots",
        u64::from(r.slots),
        r.slots.is_power_of_two() && (2..=MAX_SLOTS).contains(&r.slots),
        "a power of two from 2 to 2^20",
    )?;
    let elem = r.elem_size;
    let log2 = elem.trailing_zeros();
    range_check(
        &place,
        "elem_size",
        u64::from(elem),
        elem.is_power_of_two()
            && (MIN_LOG2_ELEM..=MAX_LOG2_ELEM).contains(&log2)
            && elem as usize >= min_elem(r.kind),
        "a power of two up to 65536 that holds one entry of the queue's kind",
    )?;
    let bytes = (QueueHeader::BYTES as u64) + (u64::from(r.slots) << log2);
    let ring = PageRing::new(&r.pages, r.offset, bytes, ram_size).map_err(|e| err(&place, e))?;
    Ok(RxeRing {
        kind: r.kind,
        qpn: r.qpn,
        ring,
        slots: r.slots,
        log2_elem: log2,
        start: r.start,
        key: r.key,
    })
}
