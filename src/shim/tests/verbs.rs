//! The verbs-like API over softhca: every operation, selective signalling, and every error
//! path surfacing as an error completion (and a Rust error).
#![allow(clippy::cast_possible_truncation, clippy::type_complexity)]

mod common;

use common::world;
use resex_mlx5::consts::syndrome;
use resex_shim::provider::{access, QpAddr};
use resex_shim::{Provider, QpInit, QueuePair, RecvWr, SendOp, SendWr, WcOpcode, WcStatus};
use resex_softhca::{Clock, LinkConfig};

fn pair(
    w: &common::World,
) -> (
    Box<dyn QueuePair>,
    Box<dyn resex_shim::CompletionQueue>,
    Box<dyn QueuePair>,
    Box<dyn resex_shim::CompletionQueue>,
) {
    let cqa = w.a.p.create_cq(64).unwrap();
    let cqb = w.b.p.create_cq(64).unwrap();
    let init = QpInit::default();
    let mut qa = w.a.p.create_qp(&init, cqa.cqn(), cqa.cqn()).unwrap();
    let mut qb = w.b.p.create_qp(&init, cqb.cqn(), cqb.cqn()).unwrap();
    qa.connect(QpAddr::qpn(qb.qpn())).unwrap();
    qb.connect(QpAddr::qpn(qa.qpn())).unwrap();
    (qa, cqa, qb, cqb)
}

#[test]
fn write_read_send_and_immediates_move_the_bytes() {
    let w = world(LinkConfig::resex_testbed(), 8 << 20);
    let (mut qa, mut cqa, mut qb, mut cqb) = pair(&w);
    let src =
        w.a.p
            .reg_mr(&w.a.p.alloc(16384).unwrap(), access::LOCAL_WRITE)
            .unwrap();
    let dst =
        w.b.p
            .reg_mr(
                &w.b.p.alloc(16384).unwrap(),
                access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ,
            )
            .unwrap();
    let pattern: Vec<u8> = (0..10_000u32).map(|i| (i * 7 + 3) as u8).collect();
    src.buf.write(0, &pattern).unwrap();

    // WRITE with two SGEs (unsignalled) then a signalled WRITE_IMM: one CQE covers both.
    qb.post_recv(&[RecvWr {
        wr_id: 77,
        sges: &[],
    }])
    .unwrap();
    qa.post_send(&[
        SendWr {
            wr_id: 1,
            op: SendOp::Write(dst.remote(100)),
            sges: &[src.sge(0, 3000), src.sge(3000, 2000)],
            inline: None,
            signaled: false,
        },
        SendWr {
            wr_id: 2,
            op: SendOp::WriteImm(dst.remote(5100), 0xabcd),
            sges: &[src.sge(5000, 5000)],
            inline: None,
            signaled: true,
        },
    ])
    .unwrap();
    let wc = w.wait(&mut *cqa, 1);
    assert_eq!(
        (wc[0].wr_id, wc[0].status, wc[0].opcode),
        (2, WcStatus::Success, WcOpcode::Write)
    );
    let wc = w.wait(&mut *cqb, 1);
    assert_eq!(
        (wc[0].wr_id, wc[0].opcode, wc[0].imm, wc[0].byte_len),
        (77, WcOpcode::RecvWriteImm, Some(0xabcd), 5000)
    );
    let mut got = vec![0u8; 10_000];
    dst.buf.read(100, &mut got).unwrap();
    assert_eq!(got, pattern);

    // READ it back into a different place, and SEND with inline data into a posted receive.
    qa.post_send(&[SendWr {
        wr_id: 3,
        op: SendOp::Read(dst.remote(100)),
        sges: &[src.sge(12000, 4000)],
        inline: None,
        signaled: true,
    }])
    .unwrap();
    let wc = w.wait(&mut *cqa, 1);
    assert_eq!(
        (wc[0].wr_id, wc[0].opcode, wc[0].byte_len),
        (3, WcOpcode::Read, 4000)
    );
    let mut back = vec![0u8; 4000];
    src.buf.read(12000, &mut back).unwrap();
    assert_eq!(back, &pattern[..4000]);

    qb.post_recv(&[RecvWr {
        wr_id: 78,
        sges: &[dst.sge(0, 64)],
    }])
    .unwrap();
    qa.post_send(&[SendWr {
        wr_id: 4,
        op: SendOp::SendImm(9),
        sges: &[],
        inline: Some(b"hello, guest"),
        signaled: true,
    }])
    .unwrap();
    w.wait(&mut *cqa, 1);
    let wc = w.wait(&mut *cqb, 1);
    assert_eq!(
        (wc[0].wr_id, wc[0].opcode, wc[0].imm, wc[0].byte_len),
        (78, WcOpcode::Recv, Some(9), 12)
    );
    let mut hello = [0u8; 12];
    dst.buf.read(0, &mut hello).unwrap();
    assert_eq!(&hello, b"hello, guest");
}

#[test]
fn link_model_times_a_large_write() {
    // 1 MiB at 8 Gb/s with 1 KiB MTU and 30 B headers: 1024 packets of 1054 B = 1.079 ms on the
    // wire, plus one packet of ingress store-and-forward and 1 us base latency; the requester
    // learns of it one more base latency later.
    let w = world(LinkConfig::resex_testbed(), 8 << 20);
    let (mut qa, mut cqa, _qb, _cqb) = pair(&w);
    let src = w.a.p.reg_mr(&w.a.p.alloc(1 << 20).unwrap(), 0).unwrap();
    let dst =
        w.b.p
            .reg_mr(&w.b.p.alloc(1 << 20).unwrap(), access::REMOTE_WRITE)
            .unwrap();
    let t0 = w.clock.now_ns();
    w.hca.poll(t0);
    qa.post_send(&[SendWr {
        wr_id: 1,
        op: SendOp::Write(dst.remote(0)),
        sges: &[src.sge(0, 1 << 20)],
        inline: None,
        signaled: true,
    }])
    .unwrap();
    w.wait(&mut *cqa, 1);
    let took = w.clock.now_ns() - t0;
    let wire = 1024 * 1054 + 1054 + 2 * 1000;
    assert!(
        took >= wire && took <= wire + 2_000,
        "took {took} ns, expected about {wire}"
    );
}

#[test]
fn remote_access_error_then_flush() {
    let w = world(LinkConfig::resex_testbed(), 8 << 20);
    let (mut qa, mut cqa, _qb, _cqb) = pair(&w);
    let src = w.a.p.reg_mr(&w.a.p.alloc(4096).unwrap(), 0).unwrap();
    // Readable only: a WRITE to it is a remote access error.
    let dst =
        w.b.p
            .reg_mr(&w.b.p.alloc(4096).unwrap(), access::REMOTE_READ)
            .unwrap();
    let wr = |id, signaled| SendWr {
        wr_id: id,
        op: SendOp::Write(dst.remote(0)),
        sges: &[],
        inline: Some(b"x"),
        signaled,
    };
    let _ = &src;
    qa.post_send(&[wr(1, true), wr(2, false), wr(3, true)])
        .unwrap();
    let wc = w.wait(&mut *cqa, 3);
    assert_eq!(wc[0].status, WcStatus::Error(syndrome::REMOTE_ACCESS));
    // Flushed, unsignalled or not.
    assert_eq!(
        (wc[1].wr_id, wc[1].status),
        (2, WcStatus::Error(syndrome::WR_FLUSH_ERR))
    );
    assert_eq!(
        (wc[2].wr_id, wc[2].status),
        (3, WcStatus::Error(syndrome::WR_FLUSH_ERR))
    );
    // Later posts flush too.
    qa.post_send(&[wr(4, false)]).unwrap();
    let wc = w.wait(&mut *cqa, 1);
    assert_eq!(
        (wc[0].wr_id, wc[0].status),
        (4, WcStatus::Error(syndrome::WR_FLUSH_ERR))
    );
    let err = resex_shim::ShimError::Completion {
        wr_id: 1,
        syndrome: syndrome::REMOTE_ACCESS,
    };
    assert!(err.to_string().contains("remote access error"));
}

#[test]
fn bad_lkey_bad_rkey_bounds_and_short_receive() {
    let w = world(LinkConfig::resex_testbed(), 8 << 20);
    let cases: [(&str, u8); 4] = [
        ("bad lkey", syndrome::LOCAL_PROT),
        ("bad rkey", syndrome::REMOTE_ACCESS),
        ("out of bounds", syndrome::REMOTE_ACCESS),
        ("short receive", syndrome::REMOTE_INVAL_REQ),
    ];
    for (what, want) in cases {
        let (mut qa, mut cqa, mut qb, mut cqb) = pair(&w);
        let src = w.a.p.reg_mr(&w.a.p.alloc(8192).unwrap(), 0).unwrap();
        let dst =
            w.b.p
                .reg_mr(
                    &w.b.p.alloc(4096).unwrap(),
                    access::REMOTE_WRITE | access::LOCAL_WRITE,
                )
                .unwrap();
        let mut sge = src.sge(0, 100);
        let mut op = SendOp::Write(dst.remote(0));
        match what {
            "bad lkey" => sge.lkey ^= 0x40,
            "bad rkey" => {
                op = SendOp::Write(resex_shim::RemoteAddr {
                    addr: dst.buf.addr(),
                    rkey: dst.rkey ^ 0x40,
                })
            }
            "out of bounds" => sge = src.sge(0, 5000),
            _ => {
                op = SendOp::Send;
                qb.post_recv(&[RecvWr {
                    wr_id: 5,
                    sges: &[dst.sge(0, 10)],
                }])
                .unwrap();
            }
        }
        qa.post_send(&[SendWr {
            wr_id: 1,
            op,
            sges: &[sge],
            inline: None,
            signaled: true,
        }])
        .unwrap();
        let wc = w.wait(&mut *cqa, 1);
        assert_eq!(wc[0].status, WcStatus::Error(want), "{what}");
        if what == "short receive" {
            let wc = w.wait(&mut *cqb, 1);
            assert_eq!(wc[0].status, WcStatus::Error(syndrome::LOCAL_LENGTH));
        }
    }
}

#[test]
fn send_without_a_receive_fails_after_rnr_retries() {
    let w = world(LinkConfig::resex_testbed(), 8 << 20);
    let (mut qa, mut cqa, _qb, _cqb) = pair(&w);
    qa.post_send(&[SendWr {
        wr_id: 1,
        op: SendOp::Send,
        sges: &[],
        inline: Some(b"hi"),
        signaled: true,
    }])
    .unwrap();
    w.run(5_000_000);
    let mut out = Vec::new();
    assert_eq!(
        cqa.poll(&mut out, 4).unwrap(),
        0,
        "still retrying after 5 ms"
    );
    let wc = w.wait(&mut *cqa, 1);
    assert_eq!(wc[0].status, WcStatus::Error(syndrome::RNR_RETRY_EXC));
}

#[test]
fn a_write_to_a_destroyed_remote_qp_fails_after_transport_retries() {
    let w = world(LinkConfig::resex_testbed(), 8 << 20);
    let (mut qa, mut cqa, qb, _cqb) = pair(&w);
    drop(qb); // destroys the remote QP
    let src = w.a.p.reg_mr(&w.a.p.alloc(4096).unwrap(), 0).unwrap();
    for id in [1, 2] {
        qa.post_send(&[SendWr {
            wr_id: id,
            op: SendOp::Write(resex_shim::provider::RemoteAddr { addr: 0, rkey: 1 }),
            sges: &[src.sge(0, 4096)],
            inline: None,
            signaled: true,
        }])
        .unwrap();
    }
    w.run(5_000_000);
    let mut out = Vec::new();
    assert_eq!(
        cqa.poll(&mut out, 4).unwrap(),
        0,
        "still retrying after 5 ms"
    );
    let wc = w.wait(&mut *cqa, 2);
    assert_eq!(wc[0].status, WcStatus::Error(syndrome::TRANSPORT_RETRY_EXC));
    assert_eq!(wc[1].status, WcStatus::Error(syndrome::WR_FLUSH_ERR));
}

#[test]
fn hostile_sq_doorbell_errors_the_qp_without_harm() {
    let w = world(LinkConfig::resex_testbed(), 8 << 20);
    let (qa, mut cqa, _qb, _cqb) = pair(&w);
    let reg = w.a.p.registration(qa.qpn()).unwrap();
    // The guest claims 60 000 basic blocks were posted on a small SQ.
    let dbrec = resex_guestmem::GuestAddress(reg.sq.dbrec);
    resex_mlx5::dbrec::write_sq_pi(&*w.a.mem, dbrec, 60_000).unwrap();
    let wc = w.wait(&mut *cqa, 1);
    assert_eq!(wc[0].status, WcStatus::Error(syndrome::LOCAL_QP_OP));
    // Garbage WQE bytes: same.
    let (mut q2, mut cq2, _q2b, _c2b) = pair(&w);
    let r2 = w.a.p.registration(q2.qpn()).unwrap();
    use resex_guestmem::GuestMemory;
    w.a.mem
        .write(resex_guestmem::GuestAddress(r2.sq.pages[0]), &[0xff; 64])
        .unwrap();
    resex_mlx5::dbrec::write_sq_pi(&*w.a.mem, resex_guestmem::GuestAddress(r2.sq.dbrec), 1)
        .unwrap();
    let wc = w.wait(&mut *cq2, 1);
    assert_eq!(wc[0].status, WcStatus::Error(syndrome::LOCAL_QP_OP));
    let _ = q2.post_send(&[]);
}

/// The same HCA serves guests whose RAM is a file mapped shared (a QEMU backing file, the
/// embedded host's guest RAM files): the bytes land in the file, at file offset = GPA.
#[test]
fn guests_backed_by_ram_files() {
    use resex_guestmem::{FileMemory, GuestMemory};
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let hca = resex_softhca::SoftHca::new(LinkConfig::default(), 2);
    let clock = resex_softhca::VirtualClock::new();
    let mk = |name: &str, port| {
        let mem: Arc<dyn GuestMemory> =
            Arc::new(FileMemory::create(&dir.path().join(name), 8 << 20).unwrap());
        let gp = hca.add_guest(mem.clone(), resex_softhca::PortId(port));
        resex_shim::SoftProvider::new(mem, 1 << 20, 8 << 20, Arc::new(gp)).unwrap()
    };
    let (a, b) = (mk("a.ram", 0), mk("b.ram", 1));
    let cqa = a.create_cq(8).unwrap();
    let cqb = b.create_cq(8).unwrap();
    let mut qa = a
        .create_qp(&QpInit::default(), cqa.cqn(), cqa.cqn())
        .unwrap();
    let mut qb = b
        .create_qp(&QpInit::default(), cqb.cqn(), cqb.cqn())
        .unwrap();
    qa.connect(qb.addr()).unwrap();
    qb.connect(qa.addr()).unwrap();
    let dst = b
        .reg_mr(&b.alloc(4096).unwrap(), access::REMOTE_WRITE)
        .unwrap();
    let mut cqa = cqa;
    qa.post_send(&[SendWr {
        wr_id: 1,
        op: SendOp::Write(dst.remote(10)),
        sges: &[],
        inline: Some(b"in the file"),
        signaled: true,
    }])
    .unwrap();
    let mut out = Vec::new();
    for _ in 0..1000 {
        clock.advance(1_000);
        hca.poll(clock.now_ns());
        cqa.poll(&mut out, 1).unwrap();
        if !out.is_empty() {
            break;
        }
    }
    assert_eq!(out[0].status, WcStatus::Success);
    // Read the file itself, at the region's guest-physical address.
    let file = std::fs::read(dir.path().join("b.ram")).unwrap();
    let at = dst.buf.base() as usize + 10;
    assert_eq!(&file[at..at + 11], b"in the file");
}
