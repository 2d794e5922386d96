//! The registration the host will take: the host refuses a document whole when two rings share
//! a byte or a limit is passed, which would leave the whole VM unmetered for one process's
//! queues. So the agent keeps what fits, in order (soft-RoCE queues first, then the
//! interposer's QPs), and leaves out a ring or QP that overlaps one already kept (a CQ shared
//! by several QPs is one CQ) or passes the host's default limits ([`Budget`]).

use resex_proto::{CqRegistration, QpRegistration, Registration, RingRegistration};
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
    for r in rings {
        if keep_ring(&r, &mut taken, doc.rings.len(), budget) {
            doc.rings.push(r);
        } else {
            left.rings += 1;
        }
    }
    let mut cqs: Vec<CqRegistration> = Vec::new();
    let qps = std::mem::take(&mut doc.qps);
    for q in qps {
        if keep_qp(&q, &mut taken, &mut cqs, doc.qps.len(), budget) {
            doc.qps.push(q);
        } else {
            left.qps += 1;
        }
    }
    left
}

fn keep_ring(r: &RingRegistration, taken: &mut Taken, kept: usize, budget: &Budget) -> bool {
    let len = 384 + u64::from(r.slots) * u64::from(r.elem_size);
    let s = spans(&r.pages, r.offset, len);
    let fits = kept < budget.rings && taken.pages + r.pages.len() <= budget.pages;
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
    let mut new_cqs = Vec::new();
    for c in std::iter::once(&q.send_cq).chain(q.recv_cq.as_ref()) {
        // A CQ already kept (shared by QPs) is the same CQ, not an overlap.
        if cqs.iter().chain(&new_cqs).any(|k| k == c) {
            continue;
        }
        need.extend(cq_spans(c));
        pages += c.pages.len();
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
    use resex_proto::{RingFormat, RingKind, SqRegistration};

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
    fn spans_follow_the_offset_and_stop_at_the_length() {
        assert_eq!(
            spans(&[0x1000, 0x5000, 0x9000], 0x800, 0x1000),
            [(0x1800, 0x2000), (0x5000, 0x5800)]
        );
        assert!(spans(&[], 0, 10).is_empty());
    }
}
