//! The Rust codec against bytes made by rdma-core's own `mlx5dv.h` structs and helpers.
//!
//! Needs gcc and Debian's `libibverbs-dev`. Without the header this test says how to enable it
//! and passes; with `RESEX_REQUIRE_SYSTEM_DEPS=1` (set by `.ci/run`) its absence is a failure.

#![allow(clippy::cast_possible_truncation)]

use resex_mlx5::consts::{cqe_op, ctrl_flags, send_op, syndrome, INLINE_SEG};
use resex_mlx5::cqe::off;
use resex_mlx5::wqe::parse_send_wqe;
use resex_mlx5::{AtomicSeg, Cqe, CtrlSeg, DataSeg, Payload, RaddrSeg, WqeSpec};
use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

const HEADER: &str = "/usr/include/infiniband/mlx5dv.h";

fn reference() -> Option<HashMap<String, String>> {
    let required = std::env::var("RESEX_REQUIRE_SYSTEM_DEPS").is_ok_and(|v| v == "1");
    if !Path::new(HEADER).exists() {
        assert!(
            !required,
            "{HEADER} is missing and RESEX_REQUIRE_SYSTEM_DEPS=1: apt-get install libibverbs-dev"
        );
        // Written to the stderr handle, not with eprintln!: libtest captures the macros' output
        // of a passing test, and this line must reach the developer.
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED c_reference: {HEADER} not found. Enable with `apt-get install libibverbs-dev` \
             (CI sets RESEX_REQUIRE_SYSTEM_DEPS=1 and requires it)."
        );
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("mlx5_ref");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/mlx5_ref.c");
    let cc = Command::new("gcc")
        .arg("-O0")
        .arg("-Wall")
        .arg("-Werror")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output();
    let cc = cc.expect("gcc must be installed to build the mlx5 reference program");
    assert!(
        cc.status.success(),
        "compiling {}: {}",
        src.display(),
        String::from_utf8_lossy(&cc.stderr)
    );
    let out = Command::new(&exe).output().unwrap();
    assert!(out.status.success());
    Some(
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn codec_matches_rdma_core_structs_and_helpers() {
    let Some(r) = reference() else { return };
    let num = |k: &str| r[k].parse::<usize>().unwrap();
    // Layout.
    assert_eq!(num("off_srqn_uidx"), off::SRQN_UIDX);
    assert_eq!(num("off_imm"), off::IMM);
    assert_eq!(num("off_byte_cnt"), off::BYTE_CNT);
    assert_eq!(num("off_timestamp"), off::TIMESTAMP);
    assert_eq!(num("off_sop_drop_qpn"), off::SOP_DROP_QPN);
    assert_eq!(num("off_wqe_counter"), off::WQE_COUNTER);
    assert_eq!(num("off_op_own"), off::OP_OWN);
    assert_eq!(num("off_err_syndrome"), off::SYNDROME);
    assert_eq!(num("off_err_vendor"), off::VENDOR_SYND);
    assert_eq!(num("size_cqe"), 64);
    for k in ["size_ctrl", "size_raddr", "size_data", "size_atomic"] {
        assert_eq!(num(k), 16, "{k}");
    }
    assert_eq!(
        u32::from_str_radix(&r["inline_seg"], 16).unwrap(),
        INLINE_SEG
    );
    assert_eq!(
        u8::from_str_radix(&r["cq_update"], 16).unwrap(),
        ctrl_flags::CQ_UPDATE
    );
    assert_eq!(
        u8::from_str_radix(&r["fence"], 16).unwrap(),
        ctrl_flags::FENCE
    );
    assert_eq!(
        u8::from_str_radix(&r["solicited"], 16).unwrap(),
        ctrl_flags::SOLICITED
    );

    // CQEs: encode equals the C bytes; decode of the C bytes equals the struct.
    let req = Cqe {
        opcode: cqe_op::REQ,
        owner: true,
        srqn_uidx: 0x00ab_cdef,
        imm: 0x1122_3344,
        byte_cnt: 4096,
        timestamp: 0x0102_0304_0506_0708,
        qpn: 0x12_3456,
        send_opcode: send_op::RDMA_WRITE,
        wqe_counter: 0xbeef,
        signature: 0x5a,
        ..Cqe::default()
    };
    assert_eq!(hex(&req.encode()), r["cqe_req"]);
    let c_req: [u8; 64] = unhex(&r["cqe_req"]).try_into().unwrap();
    let mut want = req;
    (want.vendor_syndrome, want.syndrome) = (0x07, 0x08); // timestamp's last bytes
    assert_eq!(Cqe::decode(&c_req), want);

    let resp = Cqe {
        opcode: cqe_op::RESP_SEND_IMM,
        solicited: true,
        imm: 0xcafe,
        byte_cnt: 777,
        qpn: 0x11,
        wqe_counter: 3,
        ..Cqe::default()
    };
    assert_eq!(hex(&resp.encode()), r["cqe_resp"]);

    let err = Cqe {
        opcode: cqe_op::REQ_ERR,
        owner: true,
        qpn: 0x42,
        send_opcode: send_op::SEND,
        wqe_counter: 7,
        syndrome: syndrome::REMOTE_ACCESS,
        vendor_syndrome: 0x88,
        ..Cqe::default()
    };
    assert_eq!(hex(&err.encode()), r["cqe_err"]);
    let c_err: [u8; 64] = unhex(&r["cqe_err"]).try_into().unwrap();
    let d = Cqe::decode(&c_err);
    assert_eq!(
        (
            d.opcode,
            d.syndrome,
            d.vendor_syndrome,
            d.qpn,
            d.wqe_counter
        ),
        (13, 0x13, 0x88, 0x42, 7)
    );

    // Segments.
    let ctrl = CtrlSeg {
        opmod: 0,
        wqe_index: 0xfffe,
        opcode: send_op::RDMA_WRITE_IMM,
        qpn: 0x12_3456,
        ds: 4,
        signature: 0x77,
        fm_ce_se: ctrl_flags::CQ_UPDATE | ctrl_flags::SOLICITED,
        imm: 0xdead_beef,
    };
    assert_eq!(hex(&ctrl.encode()), r["ctrl"]);
    assert_eq!(
        CtrlSeg::decode(&unhex(&r["ctrl"]).try_into().unwrap()),
        ctrl
    );
    let raddr = RaddrSeg {
        raddr: 0x0000_7f00_1234_5678,
        rkey: 0x1234_abcd,
    };
    assert_eq!(hex(&raddr.encode()), r["raddr"]);
    let data = DataSeg {
        byte_count: 65536,
        lkey: 0x4321,
        addr: 0x0000_7f00_aabb_cc00,
    };
    assert_eq!(hex(&data.encode()), r["data"]);
    let atomic = AtomicSeg {
        swap_add: 5,
        compare: u64::MAX,
    };
    assert_eq!(hex(&atomic.encode()), r["atomic"]);

    // A whole WQE from the builder equals the provider's layout, and parses back.
    let payload = [0x09u8; 13];
    let spec = WqeSpec {
        inline: Some(&payload),
        ..WqeSpec::new(send_op::SEND, 0x11)
    };
    let built = spec.build(5).unwrap();
    assert_eq!(hex(&built), r["wqe_inline_send"]);
    let c_wqe = unhex(&r["wqe_inline_send"]);
    let w = parse_send_wqe(&c_wqe).unwrap();
    assert_eq!(w.payload, Payload::Inline(&payload));
    assert_eq!(w.ctrl.bbs(), 1);
}
