//! The interposer's C structures against rdma-core's own headers, compiled by gcc.
#![allow(clippy::cast_possible_truncation)]

mod common;

use resex_preload::abi::{IbvContext, IbvQp, Mlx5dvCq, Mlx5dvObj, Mlx5dvQp, ObjPair};
use std::collections::BTreeMap;
use std::mem::{offset_of, size_of};

#[test]
fn every_offset_the_interposer_reads_is_rdma_cores() {
    let Some(exe) = common::gcc("layout", "layout", &[]) else {
        return;
    };
    let out = std::process::Command::new(exe).output().unwrap();
    let c: BTreeMap<String, usize> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let (k, v) = l.split_once(' ').unwrap();
            (k.to_owned(), v.parse().unwrap())
        })
        .collect();
    let pair = size_of::<ObjPair>();
    let rust: BTreeMap<&str, usize> = [
        ("ibv_context.device", offset_of!(IbvContext, device)),
        ("ibv_qp.context", offset_of!(IbvQp, context)),
        ("ibv_qp.send_cq", offset_of!(IbvQp, send_cq)),
        ("ibv_qp.recv_cq", offset_of!(IbvQp, recv_cq)),
        ("ibv_qp.srq", offset_of!(IbvQp, srq)),
        ("ibv_qp.qp_num", offset_of!(IbvQp, qp_num)),
        ("ibv_qp.qp_type", offset_of!(IbvQp, qp_type)),
        ("mlx5dv_qp.dbrec", offset_of!(Mlx5dvQp, dbrec)),
        ("mlx5dv_qp.sq.buf", offset_of!(Mlx5dvQp, sq)),
        ("mlx5dv_qp.sq.wqe_cnt", offset_of!(Mlx5dvQp, sq) + 8),
        ("mlx5dv_qp.sq.stride", offset_of!(Mlx5dvQp, sq) + 12),
        ("mlx5dv_qp.rq.buf", offset_of!(Mlx5dvQp, rq)),
        ("mlx5dv_qp.comp_mask", offset_of!(Mlx5dvQp, comp_mask)),
        ("mlx5dv_qp.sqn", offset_of!(Mlx5dvQp, sqn)),
        ("mlx5dv_qp.size", size_of::<Mlx5dvQp>()),
        ("mlx5dv_cq.buf", offset_of!(Mlx5dvCq, buf)),
        ("mlx5dv_cq.dbrec", offset_of!(Mlx5dvCq, dbrec)),
        ("mlx5dv_cq.cqe_cnt", offset_of!(Mlx5dvCq, cqe_cnt)),
        ("mlx5dv_cq.cqe_size", offset_of!(Mlx5dvCq, cqe_size)),
        ("mlx5dv_cq.cqn", offset_of!(Mlx5dvCq, cqn)),
        ("mlx5dv_cq.size", size_of::<Mlx5dvCq>()),
        ("mlx5dv_obj.qp.in", offset_of!(Mlx5dvObj, qp)),
        ("mlx5dv_obj.qp.out", offset_of!(Mlx5dvObj, qp) + pair / 2),
        ("mlx5dv_obj.cq.in", offset_of!(Mlx5dvObj, cq)),
        ("mlx5dv_obj.cq.out", offset_of!(Mlx5dvObj, cq) + pair / 2),
        ("mlx5dv_obj.size", size_of::<Mlx5dvObj>()),
        ("MLX5DV_OBJ_QP", resex_preload::abi::MLX5DV_OBJ_QP as usize),
        ("MLX5DV_OBJ_CQ", resex_preload::abi::MLX5DV_OBJ_CQ as usize),
    ]
    .into_iter()
    .collect();
    assert_eq!(c.len(), rust.len(), "{c:?}");
    for (k, v) in rust {
        assert_eq!(c[k], v, "{k}");
    }
}
