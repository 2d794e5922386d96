//! The registration the host will take: the host refuses a document whole when one ring or QP
//! is out of range, two rings share a byte, a QPN or a CQ's doorbell record is named twice, or
//! a limit is passed; that would leave the whole VM unmetered for one process's queues. So the
//! agent keeps what fits, in order (soft-RoCE queues first, then the interposer's QPs), with the
//! host's own rules (`resex_ibmon::registry`, mirrored here: the agent links no host crate):
//! - a ring: slots a power of two from 2 to 2^20, slots a power of two of 16 bytes to 64 KiB
//!   holding one entry of its kind (a send WQE 208 bytes, a receive 40, a completion 48), a QPN
//!   below 2^24, one ring of each kind per QP (a later one goes untied);
//! - a QP: its QPN below 2^24 and not named before, basic blocks a power of two up to 2^15,
//!   CQs of a power of two from 2 to 2^24 entries of 64 or 128 bytes, a CQ's doorbell record
//!   not another CQ's;
//! - no byte of two rings the same (a CQ shared by several QPs is one CQ), and the host's
//!   default limits ([`Budget`]; a shared CQ's pages count once for each QP naming it, as the
//!   host counts them).

use resex_proto::{CqRegistration, QpRegistration, Registration, RingKind, RingRegistration};
use std::collections::BTreeMap;

const PAGE: u64 = 4096;

/// The host's default limits per registration (`resex_ibmon::registry::Limits`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Queue pairs.
    pub qps: usize,
    /// Pages over every ring.
    pub pages: usize,
    /// Soft-RoCE rings.
    pub rings: usize,
}

impl Default for Budget {
    fn default() -> Self {
        Self {
            qps: 1024,
            pages: 65536,
            rings: 3072,
        }
    }
}

/// The byte spans `[start, end)` of `len` bytes from `offset` in `pages` (guest-physical).
fn spans(pages: &[u64], offset: u64, len: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::with_capacity(pages.len());
    let mut left = len;
    for (i, &p) in pages.iter().enumerate() {
        let start = if i == 0 { offset.min(PAGE) } else { 0 };
        let end = (start + left).min(PAGE);
        if end > start {
            out.push((p.saturating_add(start), p.saturating_add(end)));
        }
        left -= end - start;
        if left == 0 {
            break;
        }
    }
    out
}

/// The spans kept so far, none overlapping another.
#[derive(Debug, Default)]
struct Taken {
    spans: BTreeMap<u64, u64>,
    pages: usize,
}

impl Taken {
    fn free(&self, s: &[(u64, u64)]) -> bool {
        s.iter().all(|&(a, b)| {
            self.spans
                .range(..b)
                .next_back()
                .is_none_or(|(_, &end)| end <= a)
        })
    }

    fn take(&mut self, s: &[(u64, u64)], pages: usize) {
        for &(a, b) in s {
            self.spans.insert(a, b);
        }
        self.pages += pages;
    }
}

fn cq_spans(c: &CqRegistration) -> Vec<(u64, u64)> {
    spans(
        &c.pages,
        c.offset,
        u64::from(c.cqe_cnt) * u64::from(c.cqe_size),
    )
}

/// What [`fit`] left out.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Left {
    /// Soft-RoCE rings.
    pub rings: usize,
    /// Queue pairs.
    pub qps: usize,
}

/// Keeps of `doc`'s rings and QPs what the host will take together, in order.
pub fn fit(doc: &mut Registration, budget: &Budget) -> Left {
    let mut taken = Taken::default();
    if let Some(m) = &doc.mailbox {
        let s = spans(
            &m.pages,
            m.offset,
            u64::from(m.blocks) * u64::from(m.block_size),
        );
        taken.take(&s, m.pages.len());
    }
    let mut left = Left::default();
    let rings = std::mem::take(&mut doc.rings);
    for mut r in rings {
        if keep_ring(&mut r, &mut taken, &doc.rings, budget) {
            doc.rings.push(r);
        } else {
            left.rings += 1;
        }
    }
    let mut cqs: Vec<CqRegistration> = Vec::new();
    let qps = std::mem::take(&mut doc.qps);
    for q in qps {
        let named = doc.qps.iter().any(|k| k.qpn == q.qpn);
        if !named && qp_ok(&q) && keep_qp(&q, &mut taken, &mut cqs, doc.qps.len(), budget) {
            doc.qps.push(q);
        } else {
            left.qps += 1;
        }
    }
    left
}

/// The smallest slot of each kind (`struct rxe_send_wqe`, `rxe_recv_wqe`, `ib_uverbs_wc`).
fn min_elem(kind: RingKind) -> u32 {
    match kind {
        RingKind::Sq => 208,
        RingKind::Rq => 40,
        RingKind::Cq => 48,
    }
}

/// A ring the host takes on its own.
pub fn ring_ok(r: &RingRegistration) -> bool {
    let e = r.elem_size;
    r.slots.is_power_of_two()
        && (2..=1 << 20).contains(&r.slots)
        && e.is_power_of_two()
        && (16..=1 << 16).contains(&e)
        && e >= min_elem(r.kind)
        && r.qpn.is_none_or(|q| q < 1 << 24)
}

/// A QP the host takes on its own.
pub fn qp_ok(q: &QpRegistration) -> bool {
    let cq = |c: &CqRegistration| {
        c.cqe_cnt.is_power_of_two()
            && (2..=1 << 24).contains(&c.cqe_cnt)
            && matches!(c.cqe_size, 64 | 128)
    };
    q.qpn < 1 << 24
        && q.sq.wqe_cnt.is_power_of_two()
        && q.sq.wqe_cnt <= 1 << 15
        && cq(&q.send_cq)
        && q.recv_cq.as_ref().is_none_or(cq)
}

fn keep_ring(
    r: &mut RingRegistration,
    taken: &mut Taken,
    kept: &[RingRegistration],
    budget: &Budget,
) -> bool {
    if !ring_ok(r) {
        return false;
    }
    // One ring of a kind per QP: a second (the same QPN on another device) is kept untied.
    if r.qpn.is_some() && kept.iter().any(|k| k.kind == r.kind && k.qpn == r.qpn) {
        r.qpn = None;
    }
    let len = 384 + u64::from(r.slots) * u64::from(r.elem_size);
    let s = spans(&r.pages, r.offset, len);
    let fits = kept.len() < budget.rings && taken.pages + r.pages.len() <= budget.pages;
    if fits && taken.free(&s) {
        taken.take(&s, r.pages.len());
        return true;
    }
    false
}

fn keep_qp(
    q: &QpRegistration,
    taken: &mut Taken,
    cqs: &mut Vec<CqRegistration>,
    kept: usize,
    budget: &Budget,
) -> bool {
    let sq = spans(&q.sq.pages, q.sq.offset, u64::from(q.sq.wqe_cnt) * 64);
    let mut need = sq.clone();
    let mut pages = q.sq.pages.len();
    let mut new_cqs: Vec<CqRegistration> = Vec::new();
    for c in std::iter::once(&q.send_cq).chain(q.recv_cq.as_ref()) {
        // The host counts a CQ's pages for every QP that names it.
        pages += c.pages.len();
        // A CQ already kept (shared by QPs) is the same CQ, not an overlap; another CQ with
        // its doorbell record is a conflict.
        let known = cqs.iter().chain(&new_cqs);
        if known.clone().any(|k| k == c) {
            continue;
        }
        if known.clone().any(|k| k.dbrec == c.dbrec) {
            return false;
        }
        need.extend(cq_spans(c));
        new_cqs.push(c.clone());
    }
    let fits = kept < budget.qps && taken.pages + pages <= budget.pages;
    let mut sorted = need.clone();
    sorted.sort_unstable();
    let self_free = sorted.windows(2).all(|w| w[0].1 <= w[1].0);
    if fits && self_free && taken.free(&need) {
        taken.take(&need, pages);
        cqs.extend(new_cqs);
        return true;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use resex_proto::{RingFormat, SqRegistration};

    fn ring(page: u64) -> RingRegistration {
        RingRegistration {
            format: RingFormat::Rxe,
            kind: RingKind::Cq,
            qpn: None,
            pages: vec![page],
            offset: 0,
            slots: 8,
            elem_size: 128,
            start: None,
            key: None,
        }
    }

    fn cq(page: u64) -> CqRegistration {
        CqRegistration {
            pages: vec![page],
            offset: 0,
            cqe_cnt: 32,
            cqe_size: 64,
            dbrec: 0x9000,
            start: 0,
        }
    }

    fn qp(qpn: u32, sq: u64, send_cq: u64) -> QpRegistration {
        QpRegistration {
            qpn,
            sq: SqRegistration {
                pages: vec![sq],
                offset: 0x800,
                wqe_cnt: 32,
                dbrec: 0x9010,
                start: 0,
            },
            send_cq: cq(send_cq),
            recv_cq: None,
        }
    }

    fn doc(rings: Vec<RingRegistration>, qps: Vec<QpRegistration>) -> Registration {
        Registration {
            version: 1,
            vm: None,
            path_mtu: 1024,
            qps,
            mailbox: None,
            rings,
        }
    }

    #[test]
    fn what_overlaps_what_is_kept_is_left_out_and_a_shared_cq_is_one_cq() {
        let mut d = doc(
            vec![ring(0x1000), ring(0x1000), ring(0x2000)],
            vec![
                // Its SQ is the second half of page 0x3000; the first half is free.
                qp(1, 0x3000, 0x4000),
                // Shares the first QP's CQ: fine.
                qp(2, 0x5000, 0x4000),
                // Its CQ is where a soft-RoCE ring is: left out.
                qp(3, 0x7000, 0x2000),
            ],
        );
        let left = fit(&mut d, &Budget::default());
        assert_eq!(left, Left { rings: 1, qps: 1 });
        assert_eq!(d.rings.len(), 2);
        assert_eq!(d.qps.iter().map(|q| q.qpn).collect::<Vec<_>>(), [1, 2]);
    }

    #[test]
    fn the_host_s_limits_are_kept() {
        let rings: Vec<_> = (0..5).map(|i| ring(0x1000 * (i + 1))).collect();
        let qps: Vec<_> = (0..3)
            .map(|i| {
                qp(
                    i,
                    0x10_0000 + 0x2000 * u64::from(i),
                    0x20_0000 + 0x1000 * u64::from(i),
                )
            })
            .collect();
        let mut d = doc(rings, qps);
        let budget = Budget {
            qps: 2,
            pages: 7,
            rings: 4,
        };
        let left = fit(&mut d, &budget);
        // Four rings (four pages), then QPs of two pages each: one fits in the seven.
        assert_eq!((d.rings.len(), d.qps.len()), (4, 1));
        assert_eq!(left, Left { rings: 1, qps: 2 });
    }

    #[test]
    fn what_the_host_refuses_on_its_own_is_left_out() {
        let mut one_slot = ring(0x1000);
        one_slot.slots = 1;
        let mut tiny = ring(0x2000);
        tiny.kind = RingKind::Rq;
        tiny.elem_size = 16;
        let mut sq = ring(0x3000);
        sq.kind = RingKind::Sq;
        sq.elem_size = 256;
        sq.qpn = Some(17);
        // The same QPN on another device: kept, untied.
        let mut other_dev = sq.clone();
        other_dev.pages = vec![0x4000];
        let mut big = qp(1, 0x10_0000, 0x11_0000);
        big.sq.wqe_cnt = 1 << 16;
        let mut twice = qp(2, 0x12_0000, 0x13_0000);
        let again = qp(2, 0x14_0000, 0x15_0000);
        // Another CQ on the same doorbell record as QP 2's.
        let mut clash = qp(3, 0x16_0000, 0x17_0000);
        clash.send_cq.dbrec = twice.send_cq.dbrec;
        twice.recv_cq = None;
        let mut d = doc(
            vec![one_slot, tiny, sq, other_dev],
            vec![big, twice, again, clash],
        );
        let left = fit(&mut d, &Budget::default());
        assert_eq!(left, Left { rings: 2, qps: 3 });
        assert_eq!(
            d.rings.iter().map(|r| r.qpn).collect::<Vec<_>>(),
            [Some(17), None]
        );
        assert_eq!(d.qps.iter().map(|q| q.qpn).collect::<Vec<_>>(), [2]);
    }

    #[test]
    fn a_shared_cq_s_pages_count_for_every_qp_as_the_host_counts_them() {
        let qps: Vec<_> = (0..4)
            .map(|i| qp(i, 0x10_0000 + 0x1000 * u64::from(i), 0x20_0000))
            .collect();
        let mut d = doc(vec![], qps);
        let budget = Budget {
            pages: 6,
            ..Budget::default()
        };
        // Two pages a QP (its SQ and the shared CQ): three fit in six.
        fit(&mut d, &budget);
        assert_eq!(d.qps.len(), 3);
    }

    #[test]
    fn spans_follow_the_offset_and_stop_at_the_length() {
        assert_eq!(
            spans(&[0x1000, 0x5000, 0x9000], 0x800, 0x1000),
            [(0x1800, 0x2000), (0x5000, 0x5800)]
        );
        assert!(spans(&[], 0, 10).is_empty());
    }
}
