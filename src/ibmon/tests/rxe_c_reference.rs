//! ibmon's soft-RoCE layouts against the kernel's UAPI headers (`rdma/rdma_user_rxe.h`,
//! `rdma/ib_user_verbs.h`), compiled by gcc.
//!
//! Needs gcc and Debian's `linux-libc-dev` (which gcc's libc6-dev pulls in). Without the
//! header this test says how to enable it and passes; with `RESEX_REQUIRE_SYSTEM_DEPS=1` (set by
//! `.ci/run`) its absence is a failure.

use resex_ibmon::rxe::{layout, wc_op, wr_op};
use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

const HEADER: &str = "/usr/include/rdma/rdma_user_rxe.h";

fn reference() -> Option<HashMap<String, u64>> {
    let required = std::env::var("RESEX_REQUIRE_SYSTEM_DEPS").is_ok_and(|v| v == "1");
    if !Path::new(HEADER).exists() {
        assert!(
            !required,
            "{HEADER} is missing and RESEX_REQUIRE_SYSTEM_DEPS=1: apt-get install linux-libc-dev"
        );
        // To the stderr handle: libtest captures the macros' output of a passing test.
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED rxe_c_reference: {HEADER} not found. Enable with `apt-get install \
             linux-libc-dev` (CI sets RESEX_REQUIRE_SYSTEM_DEPS=1 and requires it)."
        );
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("rxe_ref");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/rxe_ref.c");
    let cc = Command::new("gcc")
        .args(["-O0", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("gcc must be installed to build the rxe reference program");
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
            .map(|(k, v)| (k.to_owned(), v.parse().unwrap()))
            .collect(),
    )
}

#[test]
fn the_rxe_layouts_are_the_kernels() {
    let Some(r) = reference() else { return };
    let usize_of = |k: &str| usize::try_from(r[k]).unwrap();
    let want: [(&str, usize); 35] = [
        ("queue.log2_elem_size", layout::queue::LOG2_ELEM_SIZE),
        ("queue.index_mask", layout::queue::INDEX_MASK),
        ("queue.producer_index", layout::queue::PRODUCER),
        ("queue.consumer_index", layout::queue::CONSUMER),
        ("queue.data", layout::queue::DATA),
        ("send.wr_id", layout::send_wqe::WR_ID),
        ("send.opcode", layout::send_wqe::OPCODE),
        ("send.send_flags", layout::send_wqe::SEND_FLAGS),
        ("send.wr", layout::send_wqe::WR),
        ("send.status", layout::send_wqe::STATUS),
        ("send.state", layout::send_wqe::STATE),
        ("send.iova", layout::send_wqe::IOVA),
        ("send.first_psn", layout::send_wqe::FIRST_PSN),
        ("send.last_psn", layout::send_wqe::LAST_PSN),
        ("send.ssn", layout::send_wqe::SSN),
        ("send.dma.length", layout::send_wqe::DMA_LENGTH),
        ("send.dma.num_sge", layout::send_wqe::DMA_NUM_SGE),
        ("send.dma.sge", layout::send_wqe::SGE),
        ("send.size", layout::send_wqe::SIZE),
        ("recv.wr_id", layout::recv_wqe::WR_ID),
        ("recv.dma.length", layout::recv_wqe::DMA_LENGTH),
        ("recv.dma.num_sge", layout::recv_wqe::DMA_NUM_SGE),
        ("recv.dma.sge", layout::recv_wqe::SGE),
        ("recv.size", layout::recv_wqe::SIZE),
        ("sge.addr", layout::sge::ADDR),
        ("sge.length", layout::sge::LENGTH),
        ("sge.lkey", layout::sge::LKEY),
        ("sge.size", layout::sge::SIZE),
        ("wc.wr_id", layout::wc::WR_ID),
        ("wc.status", layout::wc::STATUS),
        ("wc.opcode", layout::wc::OPCODE),
        ("wc.byte_len", layout::wc::BYTE_LEN),
        ("wc.qp_num", layout::wc::QP_NUM),
        ("wc.wc_flags", layout::wc::WC_FLAGS),
        ("wc.size", layout::wc::SIZE),
    ];
    for (k, v) in want {
        assert_eq!(usize_of(k), v, "{k}");
    }
    for (k, v) in [
        ("op.rdma_write", wr_op::RDMA_WRITE),
        ("op.rdma_write_with_imm", wr_op::RDMA_WRITE_WITH_IMM),
        ("op.send", wr_op::SEND),
        ("op.send_with_imm", wr_op::SEND_WITH_IMM),
        ("op.rdma_read", wr_op::RDMA_READ),
        ("op.cmp_and_swp", wr_op::ATOMIC_CMP_AND_SWP),
        ("op.fetch_and_add", wr_op::ATOMIC_FETCH_AND_ADD),
        ("op.local_inv", wr_op::LOCAL_INV),
        ("op.bind_mw", wr_op::BIND_MW),
        ("op.send_with_inv", wr_op::SEND_WITH_INV),
    ] {
        assert_eq!(r[k], u64::from(v), "{k}");
    }
    // libibverbs' receive opcodes, when its header is there (CI installs it).
    let mut verbs = 0;
    for (k, v) in [
        ("wc.op.recv", wc_op::RECV),
        ("wc.op.recv_rdma_with_imm", wc_op::RECV_RDMA_WITH_IMM),
    ] {
        if let Some(&got) = r.get(k) {
            assert_eq!(got, u64::from(v), "{k}");
            verbs += 1;
        }
    }
    let required = std::env::var("RESEX_REQUIRE_SYSTEM_DEPS").is_ok_and(|v| v == "1");
    assert!(
        verbs == 2 || !required,
        "libibverbs-dev's infiniband/verbs.h is required"
    );
    // Everything the reference printed is checked.
    assert_eq!(r.len(), 35 + 10 + verbs);
}
