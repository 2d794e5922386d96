/* Offsets and sizes of the rdma-core structures the interposer reads, one "name value" per
 * line, compared with the Rust declarations by tests/layout.rs. */
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>
#include <stddef.h>
#include <stdio.h>

#define P(name, value) printf("%s %zu\n", name, (size_t)(value))

int main(void)
{
    P("ibv_context.device", offsetof(struct ibv_context, device));
    P("ibv_qp.context", offsetof(struct ibv_qp, context));
    P("ibv_qp.send_cq", offsetof(struct ibv_qp, send_cq));
    P("ibv_qp.recv_cq", offsetof(struct ibv_qp, recv_cq));
    P("ibv_qp.srq", offsetof(struct ibv_qp, srq));
    P("ibv_qp.qp_num", offsetof(struct ibv_qp, qp_num));
    P("ibv_qp.qp_type", offsetof(struct ibv_qp, qp_type));
    P("mlx5dv_qp.dbrec", offsetof(struct mlx5dv_qp, dbrec));
    P("mlx5dv_qp.sq.buf", offsetof(struct mlx5dv_qp, sq.buf));
    P("mlx5dv_qp.sq.wqe_cnt", offsetof(struct mlx5dv_qp, sq.wqe_cnt));
    P("mlx5dv_qp.sq.stride", offsetof(struct mlx5dv_qp, sq.stride));
    P("mlx5dv_qp.rq.buf", offsetof(struct mlx5dv_qp, rq.buf));
    P("mlx5dv_qp.comp_mask", offsetof(struct mlx5dv_qp, comp_mask));
    P("mlx5dv_qp.sqn", offsetof(struct mlx5dv_qp, sqn));
    P("mlx5dv_qp.size", sizeof(struct mlx5dv_qp));
    P("mlx5dv_cq.buf", offsetof(struct mlx5dv_cq, buf));
    P("mlx5dv_cq.dbrec", offsetof(struct mlx5dv_cq, dbrec));
    P("mlx5dv_cq.cqe_cnt", offsetof(struct mlx5dv_cq, cqe_cnt));
    P("mlx5dv_cq.cqe_size", offsetof(struct mlx5dv_cq, cqe_size));
    P("mlx5dv_cq.cqn", offsetof(struct mlx5dv_cq, cqn));
    P("mlx5dv_cq.size", sizeof(struct mlx5dv_cq));
    P("mlx5dv_obj.qp.in", offsetof(struct mlx5dv_obj, qp.in));
    P("mlx5dv_obj.qp.out", offsetof(struct mlx5dv_obj, qp.out));
    P("mlx5dv_obj.cq.in", offsetof(struct mlx5dv_obj, cq.in));
    P("mlx5dv_obj.cq.out", offsetof(struct mlx5dv_obj, cq.out));
    P("mlx5dv_obj.size", sizeof(struct mlx5dv_obj));
    P("MLX5DV_OBJ_QP", MLX5DV_OBJ_QP);
    P("MLX5DV_OBJ_CQ", MLX5DV_OBJ_CQ);
    return 0;
}
