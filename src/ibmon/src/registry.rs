//! Validation of a registration document against the guest's RAM: the only trust the host
//! extends to it. Every page must be inside RAM, every size a sane power of two, every count
//! bounded, rings must not overlap; a bad document is rejected whole with an error that names
//! the QP, the ring and the field.

use crate::rxe::{validate_rings, RxeRing};
use resex_guestmem::{GuestAddress, PageRing, RingError, PAGE_SIZE};
use resex_mlx5::{CqeSize, SEND_WQE_BB};
use resex_proto::{CqRegistration, MailboxRegistration, Registration, SqRegistration};
use std::fmt;

/// Bounds on what one registration may ask the host to watch.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Queue pairs per VM.
    pub max_qps: usize,
    /// Pages across all rings and the mailbox.
    pub max_pages: usize,
    /// Entries per CQ (mlx5: 2^24).
    pub max_cqe_cnt: u32,
    /// Basic blocks per SQ (keeps the 16-bit index check meaningful).
    pub max_wqe_cnt: u32,
    /// Mailbox blocks.
    pub max_mailbox_blocks: u32,
    /// Mailbox block size in bytes.
    pub max_block_size: u32,
    /// Rings of other formats (soft-RoCE send, receive and completion queues).
    pub max_rings: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_qps: 1024,
            max_pages: 65536,
            max_cqe_cnt: 1 << 24,
            max_wqe_cnt: 1 << 15,
            max_mailbox_blocks: 4096,
            max_block_size: 4096,
            max_rings: 3072,
        }
    }
}

/// Smallest mailbox block: status byte + a report (`resex_proto::mailbox`).
#[allow(clippy::cast_possible_truncation)] // 88 fits
pub const MIN_BLOCK_SIZE: u32 = resex_proto::mailbox::REPORT_BYTES as u32;

/// A validated send queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SqLayout {
    /// The ring.
    pub ring: PageRing,
    /// Basic blocks (power of two).
    pub wqe_cnt: u32,
    /// QP doorbell record.
    pub dbrec: GuestAddress,
    /// Starting basic-block index.
    pub start: u32,
}

/// A validated completion queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CqLayout {
    /// The ring.
    pub ring: PageRing,
    /// log2 of the entry count.
    pub log_cnt: u32,
    /// Entry size.
    pub size: CqeSize,
    /// CQ doorbell record.
    pub dbrec: GuestAddress,
    /// Starting index.
    pub start: u32,
}

impl CqLayout {
    /// Number of entries.
    pub fn cqe_cnt(&self) -> u32 {
        1 << self.log_cnt
    }
}

/// A validated queue pair; CQs are indices into [`Layout::cqs`] (a CQ shared by several QPs, or
/// by the send and receive side, appears once).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QpLayout {
    /// QP number.
    pub qpn: u32,
    /// Send queue.
    pub sq: SqLayout,
    /// Index of the send CQ.
    pub send_cq: usize,
    /// Index of the receive CQ, when it is a different CQ.
    pub recv_cq: Option<usize>,
}

/// A validated mailbox.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MailboxLayout {
    /// The blocks, back to back.
    pub ring: PageRing,
    /// Number of blocks.
    pub blocks: u32,
    /// Bytes per block.
    pub block_size: u32,
}

/// A registration the host accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Path MTU in bytes.
    pub path_mtu: u32,
    /// QPs, sorted by QPN.
    pub qps: Vec<QpLayout>,
    /// Distinct CQs.
    pub cqs: Vec<CqLayout>,
    /// The mailbox.
    pub mailbox: Option<MailboxLayout>,
    /// Soft-RoCE queues, in the registration's order.
    pub rxe: Vec<RxeRing>,
}

/// Why a registration was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("registration rejected: {place}: {problem}")]
pub struct RegistrationError {
    /// Where: `qp 17 sq`, `mailbox`, `document`.
    pub place: String,
    /// What.
    pub problem: Problem,
}

/// What is wrong with a registration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    /// A page list problem.
    #[error(transparent)]
    Ring(#[from] RingError),
    /// A field outside its allowed range.
    #[error("{field} = {value} is out of range (allowed: {allowed})")]
    OutOfRange {
        /// The field.
        field: &'static str,
        /// Its value.
        value: u64,
        /// The allowed values, in words.
        allowed: &'static str,
    },
    /// A doorbell record not 8-byte aligned or outside RAM.
    #[error(
        "doorbell record {addr:#x} must be 8-byte aligned and inside guest RAM ({ram_size} bytes)"
    )]
    Dbrec {
        /// Its address.
        addr: u64,
        /// Guest RAM size.
        ram_size: u64,
    },
    /// The same QPN twice.
    #[error("QPN {0} is registered twice")]
    DuplicateQpn(u32),
    /// Too many of something.
    #[error("{what}: {count} exceeds the limit of {limit}")]
    TooMany {
        /// What.
        what: &'static str,
        /// How many.
        count: usize,
        /// The limit.
        limit: usize,
    },
    /// Two different rings share memory.
    #[error("overlaps {other} at guest address {addr:#x}")]
    Overlap {
        /// The other ring.
        other: String,
        /// First shared address.
        addr: u64,
    },
    /// Two CQs with one doorbell record but different geometry.
    #[error("shares doorbell record {0:#x} with a CQ of different geometry")]
    CqConflict(u64),
    /// A QP's send or receive queue given twice.
    #[error("QP {qpn} has two {kind} rings")]
    DuplicateRing {
        /// The QP.
        qpn: u32,
        /// `sq` or `rq`.
        kind: &'static str,
    },
}

pub(crate) fn err(place: impl fmt::Display, problem: impl Into<Problem>) -> RegistrationError {
    RegistrationError {
        place: place.to_string(),
        problem: problem.into(),
    }
}

pub(crate) fn range_check(
    place: &str,
    field: &'static str,
    value: u64,
    ok: bool,
    allowed: &'static str,
) -> Result<(), RegistrationError> {
    if ok {
        Ok(())
    } else {
        Err(err(
            place,
            Problem::OutOfRange {
                field,
                value,
                allowed,
            },
        ))
    }
}

fn dbrec(place: &str, addr: u64, ram_size: u64) -> Result<GuestAddress, RegistrationError> {
    if !addr.is_multiple_of(8) || addr.checked_add(8).is_none_or(|e| e > ram_size) {
        return Err(err(place, Problem::Dbrec { addr, ram_size }));
    }
    Ok(GuestAddress(addr))
}

/// Validates `reg` for a guest with `ram_size` bytes of RAM.
pub fn validate(
    reg: &Registration,
    ram_size: u64,
    limits: &Limits,
) -> Result<Layout, RegistrationError> {
    range_check(
        "document",
        "path_mtu",
        u64::from(reg.path_mtu),
        resex_mlx5::mtu_bytes_to_enum(reg.path_mtu).is_some(),
        "256, 512, 1024, 2048, 4096",
    )?;
    if reg.qps.len() > limits.max_qps {
        return Err(err(
            "document",
            Problem::TooMany {
                what: "queue pairs",
                count: reg.qps.len(),
                limit: limits.max_qps,
            },
        ));
    }
    let pages: usize = reg
        .qps
        .iter()
        .map(|q| {
            q.sq.pages.len()
                + q.send_cq.pages.len()
                + q.recv_cq.as_ref().map_or(0, |c| c.pages.len())
        })
        .sum::<usize>()
        + reg.mailbox.as_ref().map_or(0, |m| m.pages.len())
        + reg.rings.iter().map(|r| r.pages.len()).sum::<usize>();
    if pages > limits.max_pages {
        return Err(err(
            "document",
            Problem::TooMany {
                what: "pages",
                count: pages,
                limit: limits.max_pages,
            },
        ));
    }
    let mut cqs: Vec<(CqLayout, String)> = Vec::new();
    let mut qps = Vec::with_capacity(reg.qps.len());
    for q in &reg.qps {
        let place = format!("qp {}", q.qpn);
        range_check(
            &place,
            "qpn",
            u64::from(q.qpn),
            q.qpn < 1 << 24,
            "0 to 2^24 - 1",
        )?;
        if qps.iter().any(|p: &QpLayout| p.qpn == q.qpn) {
            return Err(err(&place, Problem::DuplicateQpn(q.qpn)));
        }
        let sq = validate_sq(&format!("{place} sq"), &q.sq, ram_size, limits)?;
        let send_cq = intern_cq(
            &mut cqs,
            &format!("{place} send_cq"),
            &q.send_cq,
            ram_size,
            limits,
        )?;
        let recv_cq = match &q.recv_cq {
            Some(c) => Some(intern_cq(
                &mut cqs,
                &format!("{place} recv_cq"),
                c,
                ram_size,
                limits,
            )?),
            None => None,
        }
        .filter(|&r| r != send_cq);
        qps.push(QpLayout {
            qpn: q.qpn,
            sq,
            send_cq,
            recv_cq,
        });
    }
    qps.sort_by_key(|q| q.qpn);
    let mailbox = reg
        .mailbox
        .as_ref()
        .map(|m| validate_mailbox(m, ram_size, limits))
        .transpose()?;
    let rxe = validate_rings(&reg.rings, ram_size, limits)?;
    check_overlaps(&qps, &cqs, mailbox.as_ref(), &rxe)?;
    Ok(Layout {
        path_mtu: reg.path_mtu,
        qps,
        cqs: cqs.into_iter().map(|(c, _)| c).collect(),
        mailbox,
        rxe,
    })
}

fn validate_sq(
    place: &str,
    s: &SqRegistration,
    ram_size: u64,
    limits: &Limits,
) -> Result<SqLayout, RegistrationError> {
    range_check(
        place,
        "wqe_cnt",
        u64::from(s.wqe_cnt),
        s.wqe_cnt.is_power_of_two() && s.wqe_cnt <= limits.max_wqe_cnt,
        "a power of two from 1 to 32768",
    )?;
    let ring = PageRing::new(
        &s.pages,
        s.offset,
        u64::from(s.wqe_cnt) * SEND_WQE_BB,
        ram_size,
    )
    .map_err(|e| err(place, e))?;
    Ok(SqLayout {
        ring,
        wqe_cnt: s.wqe_cnt,
        dbrec: dbrec(place, s.dbrec, ram_size)?,
        start: s.start,
    })
}

fn validate_cq(
    place: &str,
    c: &CqRegistration,
    ram_size: u64,
    limits: &Limits,
) -> Result<CqLayout, RegistrationError> {
    range_check(
        place,
        "cqe_cnt",
        u64::from(c.cqe_cnt),
        c.cqe_cnt.is_power_of_two() && c.cqe_cnt >= 2 && c.cqe_cnt <= limits.max_cqe_cnt,
        "a power of two from 2 to 2^24",
    )?;
    let size = CqeSize::from_bytes(c.cqe_size);
    range_check(
        place,
        "cqe_size",
        u64::from(c.cqe_size),
        size.is_some(),
        "64 or 128",
    )?;
    let size = size.unwrap_or(CqeSize::B64);
    range_check(
        place,
        "start",
        u64::from(c.start),
        c.start < 1 << 24,
        "0 to 2^24 - 1",
    )?;
    let ring = PageRing::new(
        &c.pages,
        c.offset,
        u64::from(c.cqe_cnt) * size.bytes(),
        ram_size,
    )
    .map_err(|e| err(place, e))?;
    Ok(CqLayout {
        ring,
        log_cnt: c.cqe_cnt.trailing_zeros(),
        size,
        dbrec: dbrec(place, c.dbrec, ram_size)?,
        start: c.start,
    })
}

/// Adds a CQ unless an identical one is known; returns its index.
fn intern_cq(
    cqs: &mut Vec<(CqLayout, String)>,
    place: &str,
    c: &CqRegistration,
    ram_size: u64,
    limits: &Limits,
) -> Result<usize, RegistrationError> {
    let cq = validate_cq(place, c, ram_size, limits)?;
    if let Some(i) = cqs.iter().position(|(k, _)| *k == cq) {
        return Ok(i);
    }
    if cqs.iter().any(|(k, _)| k.dbrec == cq.dbrec) {
        return Err(err(place, Problem::CqConflict(cq.dbrec.0)));
    }
    cqs.push((cq, place.to_string()));
    Ok(cqs.len() - 1)
}

fn validate_mailbox(
    m: &MailboxRegistration,
    ram_size: u64,
    limits: &Limits,
) -> Result<MailboxLayout, RegistrationError> {
    range_check(
        "mailbox",
        "blocks",
        u64::from(m.blocks),
        (1..=limits.max_mailbox_blocks).contains(&m.blocks),
        "1 to 4096",
    )?;
    range_check(
        "mailbox",
        "block_size",
        u64::from(m.block_size),
        (MIN_BLOCK_SIZE..=limits.max_block_size).contains(&m.block_size),
        "88 (one report) to 4096",
    )?;
    let bytes = u64::from(m.blocks) * u64::from(m.block_size);
    let ring = PageRing::new(&m.pages, m.offset, bytes, ram_size).map_err(|e| err("mailbox", e))?;
    Ok(MailboxLayout {
        ring,
        blocks: m.blocks,
        block_size: m.block_size,
    })
}

/// Rejects two different rings that share any byte. Work: O(pages log pages), pages bounded.
fn check_overlaps(
    qps: &[QpLayout],
    cqs: &[(CqLayout, String)],
    mailbox: Option<&MailboxLayout>,
    rxe: &[RxeRing],
) -> Result<(), RegistrationError> {
    let mut spans: Vec<(u64, u64, String)> = Vec::new();
    let mut add = |ring: &PageRing, name: String| {
        let mut k = 0u64;
        for (i, &page) in ring.pages().iter().enumerate() {
            let (start, end) = if i == 0 {
                (ring.offset(), (ring.offset() + ring.len()).min(PAGE_SIZE))
            } else {
                (0, (ring.len() - k).min(PAGE_SIZE))
            };
            let used = end - start;
            spans.push((page + start, page + end, name.clone()));
            k += used;
        }
    };
    for q in qps {
        add(&q.sq.ring, format!("qp {} sq", q.qpn));
    }
    for (c, place) in cqs {
        add(&c.ring, place.clone());
    }
    if let Some(m) = mailbox {
        add(&m.ring, "mailbox".to_string());
    }
    for (i, r) in rxe.iter().enumerate() {
        add(&r.ring, r.place(i));
    }
    spans.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)));
    let mut reach: Option<&(u64, u64, String)> = None;
    for s in &spans {
        if let Some(r) = reach {
            if s.0 < r.1 {
                let (a, b) = if r.2 <= s.2 {
                    (&r.2, &s.2)
                } else {
                    (&s.2, &r.2)
                };
                return Err(err(
                    a,
                    Problem::Overlap {
                        other: b.clone(),
                        addr: s.0,
                    },
                ));
            }
        }
        if reach.is_none_or(|r| s.1 > r.1) {
            reach = Some(s);
        }
    }
    Ok(())
}
