//! Registration validation: what is accepted, what is rejected, and that the message says where.

#![allow(clippy::cast_possible_truncation)]

use resex_ibmon::registry::{validate, Limits, Problem};
use resex_proto::{
    CqRegistration, MailboxRegistration, QpRegistration, Registration, SqRegistration,
};

const RAM: u64 = 1 << 20;

fn cq(page: u64, dbrec: u64) -> CqRegistration {
    CqRegistration {
        pages: vec![page],
        offset: 0,
        cqe_cnt: 64,
        cqe_size: 64,
        dbrec,
        start: 0,
    }
}

fn doc() -> Registration {
    Registration {
        rings: Vec::new(),
        version: 1,
        vm: None,
        path_mtu: 1024,
        qps: vec![QpRegistration {
            qpn: 17,
            sq: SqRegistration {
                pages: vec![0x10000, 0x20000],
                offset: 0,
                wqe_cnt: 128,
                dbrec: 0x100,
                start: 0,
            },
            send_cq: cq(0x30000, 0x140),
            recv_cq: Some(cq(0x40000, 0x180)),
        }],
        mailbox: Some(MailboxRegistration {
            pages: vec![0x50000],
            offset: 0,
            blocks: 32,
            block_size: 120,
        }),
    }
}

fn rejected(r: &Registration) -> (String, Problem) {
    let e = validate(r, RAM, &Limits::default()).unwrap_err();
    (e.to_string(), e.problem)
}

#[test]
fn accepts_a_well_formed_document() {
    let l = validate(&doc(), RAM, &Limits::default()).unwrap();
    assert_eq!(l.qps.len(), 1);
    assert_eq!(l.cqs.len(), 2);
    assert_eq!(l.qps[0].recv_cq, Some(1));
    assert_eq!(l.mailbox.unwrap().blocks, 32);
}

#[test]
fn rejects_page_outside_guest_ram_naming_qp_ring_and_page() {
    let mut r = doc();
    r.qps[0].sq.pages[1] = RAM;
    let (msg, _) = rejected(&r);
    assert_eq!(
        msg,
        "registration rejected: qp 17 sq: page 1 (0x100000) is outside guest RAM (1048576 bytes)"
    );
}

#[test]
fn rejects_a_million_pages_before_looking_at_them() {
    let mut r = doc();
    r.qps[0].sq.pages = vec![0; 1_000_000];
    let (msg, p) = rejected(&r);
    assert!(
        matches!(
            p,
            Problem::TooMany {
                what: "pages",
                count: 1_000_003,
                ..
            }
        ),
        "{msg}"
    );
}

#[test]
fn rejects_overlapping_rings() {
    let mut r = doc();
    r.qps[0].recv_cq = Some(cq(0x20000, 0x180)); // the SQ's second page
    let (msg, p) = rejected(&r);
    assert!(matches!(p, Problem::Overlap { addr: 0x20000, .. }), "{msg}");
    assert!(
        msg.contains("qp 17 recv_cq") && msg.contains("qp 17 sq"),
        "{msg}"
    );
    // The mailbox inside a CQ, by its offset into the same page.
    let mut r = doc();
    r.mailbox.as_mut().unwrap().pages = vec![0x30000];
    r.mailbox.as_mut().unwrap().blocks = 1;
    r.mailbox.as_mut().unwrap().block_size = 96;
    assert!(matches!(rejected(&r).1, Problem::Overlap { .. }));
}

#[test]
fn rings_sharing_a_page_at_different_offsets_are_fine() {
    let mut r = doc();
    r.qps[0].sq.wqe_cnt = 8; // 512 bytes
    r.qps[0].sq.pages = vec![0x60000];
    r.qps[0].sq.offset = 1024;
    let mb = r.mailbox.as_mut().unwrap();
    mb.pages = vec![0x60000];
    mb.blocks = 8;
    mb.block_size = 96; // bytes 0..768
    validate(&r, RAM, &Limits::default()).unwrap();
}

#[test]
fn one_cq_for_send_and_receive_is_one_cq() {
    let mut r = doc();
    r.qps[0].recv_cq = Some(r.qps[0].send_cq.clone());
    let l = validate(&r, RAM, &Limits::default()).unwrap();
    assert_eq!(l.cqs.len(), 1);
    assert_eq!(l.qps[0].recv_cq, None);
}

#[test]
fn rejects_out_of_range_fields_naming_key_and_allowed_values() {
    let mut r = doc();
    r.path_mtu = 1500;
    assert_eq!(
        rejected(&r).0,
        "registration rejected: document: path_mtu = 1500 is out of range (allowed: 256, 512, 1024, 2048, 4096)"
    );
    let mut r = doc();
    r.qps[0].send_cq.cqe_cnt = 48;
    assert!(rejected(&r).0.contains("qp 17 send_cq: cqe_cnt = 48"));
    let mut r = doc();
    r.qps[0].sq.wqe_cnt = 1 << 16;
    assert!(rejected(&r).0.contains("wqe_cnt = 65536"));
    let mut r = doc();
    r.qps[0].send_cq.cqe_size = 32;
    assert!(rejected(&r).0.contains("cqe_size = 32"));
    let mut r = doc();
    r.mailbox.as_mut().unwrap().block_size = 8;
    assert!(rejected(&r).0.contains("mailbox: block_size = 8"));
}

#[test]
fn rejects_bad_doorbells_duplicates_and_conflicting_cqs() {
    let mut r = doc();
    r.qps[0].sq.dbrec = 0x104 + 1;
    assert!(matches!(rejected(&r).1, Problem::Dbrec { .. }));
    let mut r = doc();
    r.qps[0].sq.dbrec = RAM - 4;
    assert!(matches!(rejected(&r).1, Problem::Dbrec { .. }));
    let mut r = doc();
    let q = r.qps[0].clone();
    r.qps.push(q);
    assert_eq!(rejected(&r).1, Problem::DuplicateQpn(17));
    let mut r = doc();
    r.qps[0].recv_cq = Some(CqRegistration {
        cqe_cnt: 32,
        ..cq(0x40000, 0x140)
    });
    assert_eq!(rejected(&r).1, Problem::CqConflict(0x140));
}
