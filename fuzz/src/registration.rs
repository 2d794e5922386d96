//! Target `registration`: the registration document as the registrar receives it. The input is
//! parsed as JSON (`resex_proto::Registration::parse`), then validated
//! (`resex_ibmon::registry::validate`) against guest RAM sizes from tiny to huge.
//!
//! Checked: nothing panics; an accepted document round-trips through its JSON; an accepted
//! layout has every ring page inside RAM, at most the limits' counts, valid CQ indices, and
//! makes a monitor.

use resex_ibmon::registry::{validate, Limits};
use resex_ibmon::VmMonitor;
use resex_proto::Registration;

/// Guest RAM sizes every document is validated against.
pub const RAM_SIZES: [u64; 5] = [0, 4096, 1 << 20, 1 << 32, u64::MAX];

/// Runs the target on one input.
pub fn run(data: &[u8]) {
    let reg = match Registration::parse(data) {
        Ok(r) => r,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            return;
        }
    };
    let again = Registration::parse(reg.to_json().as_bytes()).expect("own JSON parses");
    assert_eq!(again, reg, "the document does not round-trip");
    let limits = Limits::default();
    for ram in RAM_SIZES {
        match validate(&reg, ram, &limits) {
            Ok(layout) => check(&layout, ram, &limits),
            Err(e) => assert!(!e.to_string().is_empty()),
        }
    }
}

fn check(layout: &resex_ibmon::Layout, ram: u64, limits: &Limits) {
    let rings = layout
        .qps
        .iter()
        .map(|q| &q.sq.ring)
        .chain(layout.cqs.iter().map(|c| &c.ring))
        .chain(layout.mailbox.iter().map(|m| &m.ring));
    let mut pages = 0;
    for r in rings {
        pages += r.pages().len();
        for &p in r.pages() {
            assert!(p.is_multiple_of(4096) && p.checked_add(4096).is_some_and(|e| e <= ram));
        }
    }
    assert!(pages <= limits.max_pages);
    assert!(layout.qps.len() <= limits.max_qps);
    for q in &layout.qps {
        assert!(q.send_cq < layout.cqs.len());
        assert!(q.recv_cq.is_none_or(|r| r < layout.cqs.len()));
        assert!(q.sq.wqe_cnt.is_power_of_two() && q.sq.wqe_cnt <= limits.max_wqe_cnt);
    }
    for c in &layout.cqs {
        assert!(c.cqe_cnt() <= limits.max_cqe_cnt);
    }
    let _ = VmMonitor::new(layout.clone());
}
