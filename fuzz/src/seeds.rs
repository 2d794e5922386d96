//! Seeds for each target, made with the project's own writers (the WQE builder, the CQE
//! encoder, the synthetic guest's rings and registration, the report encoder, the channel's
//! message writer) plus a few hostile shapes. `cargo run -p resex-fuzz --example write_seeds`
//! stores them under `fuzz/corpus/<target>/seed-*`; the corpus test also replays them as made.

use crate::{mailbox, monitor, softhca_fetch};
use resex_guestmem::VecMemory;
use resex_ibmon::synth::{SynthConfig, SynthGuest, Wr};
use resex_mlx5::consts::{cqe_op, send_op, syndrome, INLINE_SEG};
use resex_mlx5::{AtomicSeg, Cqe, CqeSize, CtrlSeg, DataSeg, RaddrSeg, WqeSpec};
use resex_proto::channel::{write_msg, GuestMsg, HostMsg};
use resex_proto::mailbox::Report;
use resex_proto::Registration;

/// A named input.
pub type Seed = (String, Vec<u8>);

/// The seeds of `target` (none for an unknown name).
pub fn seeds(target: &str) -> Vec<Seed> {
    match target {
        "wqe_cqe" => wqe_cqe(),
        "monitor" | "attach" => monitor(),
        "registration" => registration(),
        "mailbox" => mailbox(),
        "channel" => channel(),
        "softhca_fetch" => softhca_fetch(),
        "rxe" => crate::rxe::seeds(),
        _ => Vec::new(),
    }
}

pub(crate) fn named(name: impl Into<String>, bytes: Vec<u8>) -> Seed {
    (name.into(), bytes)
}

/// One WQE of each kind the builder makes (at index 7).
fn wqes() -> Vec<(&'static str, Vec<u8>)> {
    let sges = [
        DataSeg {
            byte_count: 4096,
            lkey: 0x19e,
            addr: 0x8000,
        },
        DataSeg {
            byte_count: 100,
            lkey: 0x19e,
            addr: 0x9000,
        },
    ];
    let raddr = Some(RaddrSeg {
        raddr: 0x9000,
        rkey: 0x19e,
    });
    let inline = [0x5au8; 40];
    let spec = |opcode| WqeSpec {
        signaled: true,
        raddr,
        atomic: Some(AtomicSeg {
            swap_add: 1,
            compare: 2,
        }),
        sges: &sges,
        ..WqeSpec::new(opcode, 0x100)
    };
    let mut out = vec![
        ("nop", WqeSpec::new(send_op::NOP, 0x100)),
        ("write", spec(send_op::RDMA_WRITE)),
        ("write_imm", spec(send_op::RDMA_WRITE_IMM)),
        ("send", spec(send_op::SEND)),
        ("send_imm", spec(send_op::SEND_IMM)),
        ("read", spec(send_op::RDMA_READ)),
        ("atomic_cs", spec(send_op::ATOMIC_CS)),
        ("atomic_fa", spec(send_op::ATOMIC_FA)),
        (
            "write_inline",
            WqeSpec {
                inline: Some(&inline),
                ..spec(send_op::RDMA_WRITE)
            },
        ),
        (
            "send_inline",
            WqeSpec {
                inline: Some(&inline),
                ..spec(send_op::SEND)
            },
        ),
    ]
    .into_iter()
    .map(|(n, s)| (n, s.build(7).unwrap_or_default()))
    .collect::<Vec<_>>();
    // Hostile shapes: an inline length past the WQE, ds past the bytes, an unknown opcode.
    let mut overrun = spec(send_op::SEND).build(7).unwrap_or_default();
    overrun[16..20].copy_from_slice(&(INLINE_SEG | 1000).to_be_bytes());
    out.push(("inline_overrun", overrun));
    let ctrl = |opcode, ds| {
        CtrlSeg {
            wqe_index: 7,
            opcode,
            qpn: 0x100,
            ds,
            ..CtrlSeg::default()
        }
        .encode()
        .to_vec()
    };
    out.push(("ds_past_bytes", ctrl(send_op::RDMA_WRITE, 63)));
    out.push(("unknown_opcode", ctrl(0x1f, 1)));
    out
}

fn wqe_cqe() -> Vec<Seed> {
    let mut out: Vec<Seed> = wqes()
        .into_iter()
        .map(|(n, b)| named(format!("wqe-{n}"), b))
        .collect();
    let cqes = [
        (
            "req",
            Cqe {
                opcode: cqe_op::REQ,
                qpn: 0x100,
                send_opcode: send_op::RDMA_WRITE,
                wqe_counter: 7,
                owner: true,
                ..Cqe::default()
            },
        ),
        (
            "resp_send_imm",
            Cqe {
                opcode: cqe_op::RESP_SEND_IMM,
                qpn: 0x101,
                byte_cnt: 4096,
                imm: 0xdead_beef,
                ..Cqe::default()
            },
        ),
        (
            "req_err",
            Cqe {
                opcode: cqe_op::REQ_ERR,
                qpn: 0x100,
                wqe_counter: 0xffff,
                syndrome: syndrome::REMOTE_ACCESS,
                vendor_syndrome: 0x88,
                ..Cqe::default()
            },
        ),
        (
            "compressed",
            Cqe {
                opcode: cqe_op::REQ,
                format: 3,
                ..Cqe::default()
            },
        ),
    ];
    for (n, c) in cqes {
        out.push(named(format!("cqe-{n}"), c.encode().to_vec()));
    }
    let mut two = vec![0u8; 64];
    two.extend_from_slice(&cqes[0].1.encode());
    out.push(named("cqe-128-byte-entry", two));
    out.push(named("zeros", vec![0; 64]));
    out.push(named("ones", vec![0xff; 128]));
    out
}

fn synth_configs() -> Vec<(&'static str, SynthConfig)> {
    let base = SynthConfig {
        wqe_cnt: 16,
        cqe_cnt: 16,
        ..SynthConfig::default()
    };
    vec![
        ("basic", base.clone()),
        (
            "shared_cq",
            SynthConfig {
                shared_cq: true,
                ..base.clone()
            },
        ),
        (
            "cqe128",
            SynthConfig {
                cqe_size: CqeSize::B128,
                ..base.clone()
            },
        ),
        (
            "sq_wrap",
            SynthConfig {
                sq_start: 0xfff8,
                sq_offset: 1024,
                ..base.clone()
            },
        ),
        (
            "cq_wrap",
            SynthConfig {
                cq_start: 0x00ff_fff8,
                path_mtu: 4096,
                ..base.clone()
            },
        ),
        (
            "two_qps",
            SynthConfig {
                qps: 2,
                shared_cq: true,
                seed: 7,
                ..base
            },
        ),
    ]
}

/// A synthetic guest of `cfg` in `ram` bytes after a mix of work (some of it completed, some
/// failed, some polled): its registration and its memory.
fn synth_guest(cfg: &SynthConfig, ram: usize, rounds: usize) -> Option<(Registration, Vec<u8>)> {
    let mem = VecMemory::new(ram);
    let mut g = SynthGuest::new(&mem, cfg).ok()?;
    let wr = |opcode, sges: &[u32], inline, signaled| Wr {
        opcode,
        sges: sges.to_vec(),
        inline,
        signaled,
    };
    let work = [
        wr(send_op::RDMA_WRITE, &[4096, 100], false, false),
        wr(send_op::SEND, &[64], true, true),
        wr(send_op::RDMA_READ, &[8192], false, true),
        wr(send_op::NOP, &[], false, false),
        wr(send_op::RDMA_WRITE_IMM, &[0, 3000], false, true),
        wr(send_op::ATOMIC_FA, &[8], false, true),
    ];
    for round in 0..rounds {
        for qp in 0..g.qp_count() {
            for w in &work {
                g.post(&mem, qp, w);
            }
            g.ring_doorbells(&mem);
            g.complete(&mem, qp, 4, round == 1);
            g.receive(&mem, qp, 512);
        }
        if round % 2 == 0 {
            for cq in 0..g.cq_count() {
                g.poll(&mem, cq, 3, None);
            }
        }
    }
    Some((g.registration().clone(), mem.to_vec()))
}

fn monitor() -> Vec<Seed> {
    let mut out = Vec::new();
    let mut guests = Vec::new();
    for (name, cfg) in synth_configs() {
        for rounds in [1, 3] {
            if let Some((reg, image)) = synth_guest(&cfg, monitor::RAM, rounds) {
                guests.push((format!("synth-{name}-{rounds}"), reg, image));
            }
        }
    }
    // Two QPs on one send CQ (the second registered later makes a host re-attach).
    if let Some((name, mut reg, image)) = guests.last().cloned() {
        if let [a, b, ..] = &mut reg.qps[..] {
            b.send_cq = a.send_cq.clone();
            guests.push((format!("{name}-one-cq"), reg, image));
        }
    }
    for (name, reg, mut image) in guests {
        let json = reg.to_json();
        let Ok(n) = u16::try_from(json.len()) else {
            continue;
        };
        while image.last() == Some(&0) {
            image.pop();
        }
        // Even mode byte: the document form; budget 1 + 8 * 40.
        let mut b = vec![80];
        b.extend_from_slice(&n.to_le_bytes());
        b.extend_from_slice(json.as_bytes());
        b.extend_from_slice(&image);
        out.push(named(name, b));
    }
    // The built form: a header, then a small image of valid-looking CQEs and WQEs.
    let mut image = Vec::new();
    for (_, w) in wqes() {
        image.extend_from_slice(&w);
    }
    for i in 0..16u16 {
        let c = Cqe {
            opcode: cqe_op::REQ,
            qpn: 0x100,
            wqe_counter: i,
            ..Cqe::default()
        };
        image.extend_from_slice(&c.encode());
    }
    for (i, header) in [
        [0u8; monitor::HEADER],
        [0x10; monitor::HEADER],
        [0x22; monitor::HEADER],
    ]
    .iter()
    .enumerate()
    {
        let mut b = vec![1 + 2 * i as u8];
        b.extend_from_slice(header);
        b.extend_from_slice(&image);
        out.push(named(format!("built-{i}"), b));
    }
    out.push(named("empty", Vec::new()));
    out
}

fn registration() -> Vec<Seed> {
    let mut out = Vec::new();
    for (name, cfg) in synth_configs() {
        if let Some((mut reg, _)) = synth_guest(&cfg, 1 << 20, 0) {
            out.push(named(format!("synth-{name}"), reg.to_json().into_bytes()));
            reg.mailbox = Some(resex_proto::MailboxRegistration {
                pages: vec![0xf_f000],
                offset: 8,
                blocks: 32,
                block_size: 120,
            });
            out.push(named(
                format!("synth-{name}-mailbox"),
                serde_json::to_vec_pretty(&reg).unwrap_or_default(),
            ));
        }
    }
    let design = r#"{ "version": 1, "vm": "optional name",
  "path_mtu": 1024,
  "qps": [ { "qpn": 17,
             "sq":      { "pages": [8392704, 8396800], "wqe_cnt": 128, "dbrec": 8400896 },
             "send_cq": { "pages": [8404992], "cqe_cnt": 64, "cqe_size": 64, "dbrec": 8409088 },
             "recv_cq": { "pages": [8413184], "cqe_cnt": 64, "cqe_size": 64, "dbrec": 8417280 } } ],
  "mailbox": { "pages": [8421376], "blocks": 32, "block_size": 120 } }"#;
    out.push(named("design-example", design.into()));
    for (name, doc) in [
        ("empty-qps", r#"{"version":1,"path_mtu":4096,"qps":[]}"#),
        ("version-2", r#"{"version":2,"path_mtu":1024,"qps":[]}"#),
        (
            "unknown-key",
            r#"{"version":1,"path_mtu":1024,"qps":[],"x":1}"#,
        ),
        ("bad-mtu", r#"{"version":1,"path_mtu":1000,"qps":[]}"#),
        (
            "huge-numbers",
            r#"{"version":1,"path_mtu":1024,"qps":[{"qpn":4294967295,"sq":{"pages":[18446744073709547520],"offset":18446744073709551615,"wqe_cnt":2147483648,"dbrec":18446744073709551608,"start":4294967295},"send_cq":{"pages":[],"cqe_cnt":0,"cqe_size":4294967295,"dbrec":0}}]}"#,
        ),
        (
            "overlap",
            r#"{"version":1,"path_mtu":1024,"qps":[{"qpn":1,"sq":{"pages":[4096],"wqe_cnt":64,"dbrec":0},"send_cq":{"pages":[4096],"cqe_cnt":64,"cqe_size":64,"dbrec":64}}]}"#,
        ),
        ("not-json", "{\"version\":1,"),
        (
            "deep",
            "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]",
        ),
    ] {
        out.push(named(name, doc.into()));
    }
    out
}

fn report(seq: u64, count: u64, mean: u64) -> Report {
    Report {
        seq,
        interval_ns: 1_000_000,
        count,
        mean_ns: mean,
        stddev_ns: mean / 10,
        min_ns: mean / 2,
        max_ns: mean * 4,
        p50_ns: mean,
        p99_ns: mean * 2,
        p999_ns: mean * 3,
    }
}

fn mailbox() -> Vec<Seed> {
    let mut out = Vec::new();
    // (blocks - 1, block size choice, offset): a header `mailbox::registration` reads back.
    for (i, &(blocks, size, offset)) in [
        (3u8, 2u8, 0u16),
        (0, 0, 8),
        (31, 3, 4000),
        (7, 4, 100),
        (63, 1, 4095),
        (15, 0, 64),
    ]
    .iter()
    .enumerate()
    {
        let block = [88usize, 96, 120, 128, 256][usize::from(size)];
        let mut h = vec![0u8, blocks, size];
        h.extend_from_slice(&offset.to_le_bytes());
        h.push(1); // first page
        h.resize(mailbox::HEADER, 0);
        // The image starts at GPA 0 and is tiled: put the blocks where the ring has them.
        let mut image =
            vec![0u8; 4096 * 2 + usize::from(offset) + block * (usize::from(blocks) + 1)];
        for j in 0..=usize::from(blocks) {
            let at = 4096 + usize::from(offset) + j * block;
            let r = report(j as u64, 1 + j as u64, 1000 * (1 + j as u64));
            let mut b = r.encode();
            if j % 3 == 2 {
                b[1] = 9; // a bad format
            }
            if let Some(dst) = image.get_mut(at..at + b.len()) {
                dst.copy_from_slice(&b);
            }
        }
        let mut seed = h;
        seed.extend_from_slice(&image);
        out.push(named(format!("reports-{i}"), seed));
    }
    let one = report(1, 10, 5000).encode().to_vec();
    out.push(named("one-report", one));
    let mut bad = report(2, 10, 5000);
    bad.p99_ns = 1;
    out.push(named("quantiles-out-of-order", bad.encode().to_vec()));
    let mut zero = report(3, 0, 5000).encode().to_vec();
    zero.extend_from_slice(&report(4, 1, 61_000_000_000).encode());
    out.push(named("count-zero-then-too-long", zero));
    out.push(named("raw-header", vec![0xff; 200]));
    out.push(named("empty", Vec::new()));
    out
}

fn lines<T: serde::Serialize>(msgs: &[T]) -> Vec<u8> {
    let mut out = Vec::new();
    for m in msgs {
        let _ = write_msg(&mut out, m);
    }
    out
}

fn channel() -> Vec<Seed> {
    let mut out = Vec::new();
    let host = lines(&[
        HostMsg::Hello { version: 1 },
        HostMsg::Accepted {
            vm: "vm-1".into(),
            qps: 2,
            mailbox: true,
        },
        HostMsg::Rejected {
            error: "qp 17 sq: page 0x1000 outside guest RAM".into(),
        },
    ]);
    for (i, a) in [1u8, 3, 127].iter().enumerate() {
        let mut b = vec![*a, 3];
        b.extend_from_slice(&host);
        out.push(named(format!("host-{i}"), b));
    }
    for (name, cfg) in synth_configs().into_iter().take(3) {
        if let Some((registration, _)) = synth_guest(&cfg, 1 << 20, 0) {
            let mut b = vec![0, 3];
            b.extend_from_slice(&lines(&[GuestMsg::Register { registration }]));
            out.push(named(format!("guest-register-{name}"), b));
        }
    }
    for (name, a, limit, stream) in [
        (
            "crlf",
            1u8,
            3u8,
            &b"{\"type\":\"hello\",\"version\":1}\r\n"[..],
        ),
        ("no-newline", 1, 3, b"{\"type\":\"hello\",\"version\":1}"),
        (
            "too-long",
            0,
            0,
            b"{\"type\":\"register\",\"registration\":{}}\n",
        ),
        ("unknown-type", 0, 3, b"{\"type\":\"format_disk\"}\n\n\n"),
        ("garbage", 5, 2, b"\xff\xfe\n{\n}\n[1,2]\nnull\n"),
    ] {
        let mut b = vec![a, limit];
        b.extend_from_slice(stream);
        out.push(named(name, b));
    }
    out
}

/// One softhca round: producer counter, RQ head, a patch of `bytes` at `at`, polls.
fn round(out: &mut Vec<u8>, pi: u16, rq_head: u16, at: u16, bytes: &[u8], polls: u8) {
    out.extend_from_slice(&pi.to_le_bytes());
    out.extend_from_slice(&rq_head.to_le_bytes());
    out.extend_from_slice(&at.to_le_bytes());
    let n = bytes.len().min(255);
    out.push(n as u8);
    out.extend_from_slice(&bytes[..n]);
    out.push(polls);
}

fn softhca_fetch() -> Vec<Seed> {
    let keys = softhca_fetch::Rig::new().keys;
    let sge = |n, addr| DataSeg {
        byte_count: n,
        lkey: keys.lkey,
        addr,
    };
    let sges = [sge(64, softhca_fetch::MR)];
    let raddr = Some(RaddrSeg {
        raddr: softhca_fetch::MR + 0x1000,
        rkey: keys.rkey,
    });
    let spec = |opcode| WqeSpec {
        signaled: true,
        raddr,
        sges: &sges,
        ..WqeSpec::new(opcode, 0)
    };
    // A receive WQE: one scatter entry into the region, then the end marker.
    let mut recv = sge(256, softhca_fetch::MR + 0x1800).encode().to_vec();
    recv.extend_from_slice(
        &DataSeg {
            lkey: resex_softhca::hca::INVALID_LKEY,
            ..DataSeg::default()
        }
        .encode(),
    );
    let mut out = Vec::new();
    for (name, op) in [
        ("write", send_op::RDMA_WRITE),
        ("write_imm", send_op::RDMA_WRITE_IMM),
        ("read", send_op::RDMA_READ),
        ("send", send_op::SEND),
        ("send_imm", send_op::SEND_IMM),
        ("nop", send_op::NOP),
        ("atomic", send_op::ATOMIC_FA),
    ] {
        let Ok(w) = spec(op).build(0) else { continue };
        let mut b = Vec::new();
        // The receive first (RQ at ring offset 0x1000), then the WQE and its doorbell.
        round(&mut b, 0, 1, 0x1000, &recv, 1);
        round(&mut b, 1, 1, 0, &w, 8);
        // A second WQE at index 1, then a doorbell far ahead.
        if let Ok(w2) = spec(op).build(1) {
            round(&mut b, 2, 2, 64, &w2, 8);
        }
        round(&mut b, 600, 2, 0, &[], 4);
        out.push(named(name, b));
    }
    let mut garbage = Vec::new();
    round(&mut garbage, 16, 16, 0, &[0xff; 255], 16);
    out.push(named("garbage", garbage));
    let mut stale = Vec::new();
    let w = spec(send_op::RDMA_WRITE).build(16).unwrap_or_default();
    round(&mut stale, 1, 0, 0, &w, 4);
    out.push(named("stale-index", stale));
    out.push(named("empty", Vec::new()));
    out
}
