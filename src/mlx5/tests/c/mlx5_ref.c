/* Reference bytes for the Rust mlx5 codec, produced with rdma-core's own structs and helpers
 * from Debian's libibverbs-dev (/usr/include/infiniband/mlx5dv.h). Prints "name hex" lines. */
#include <endian.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <infiniband/mlx5dv.h>

static void dump(const char *name, const void *p, size_t n) {
    const unsigned char *b = p;
    printf("%s ", name);
    for (size_t i = 0; i < n; i++) printf("%02x", b[i]);
    printf("\n");
}

int main(void) {
    /* Field offsets of the CQE, as the spec states them. */
    printf("off_srqn_uidx %zu\n", offsetof(struct mlx5_cqe64, srqn_uidx));
    printf("off_imm %zu\n", offsetof(struct mlx5_cqe64, imm_inval_pkey));
    printf("off_byte_cnt %zu\n", offsetof(struct mlx5_cqe64, byte_cnt));
    printf("off_timestamp %zu\n", offsetof(struct mlx5_cqe64, timestamp));
    printf("off_sop_drop_qpn %zu\n", offsetof(struct mlx5_cqe64, sop_drop_qpn));
    printf("off_wqe_counter %zu\n", offsetof(struct mlx5_cqe64, wqe_counter));
    printf("off_op_own %zu\n", offsetof(struct mlx5_cqe64, op_own));
    printf("off_err_syndrome %zu\n", offsetof(struct mlx5_err_cqe, syndrome));
    printf("off_err_vendor %zu\n", offsetof(struct mlx5_err_cqe, vendor_err_synd));
    printf("size_cqe %zu\n", sizeof(struct mlx5_cqe64));
    printf("size_ctrl %zu\n", sizeof(struct mlx5_wqe_ctrl_seg));
    printf("size_raddr %zu\n", sizeof(struct mlx5_wqe_raddr_seg));
    printf("size_data %zu\n", sizeof(struct mlx5_wqe_data_seg));
    printf("size_atomic %zu\n", sizeof(struct mlx5_wqe_atomic_seg));
    printf("inline_seg %x\n", MLX5_INLINE_SEG);
    printf("cq_update %x\n", MLX5_WQE_CTRL_CQ_UPDATE);
    printf("fence %x\n", MLX5_WQE_CTRL_FENCE);
    printf("solicited %x\n", MLX5_WQE_CTRL_SOLICITED);

    /* A requester CQE: RDMA WRITE on QPN 0x123456, WQE 0xbeef, owner 1. */
    struct mlx5_cqe64 cqe;
    memset(&cqe, 0, sizeof cqe);
    cqe.srqn_uidx = htobe32(0x00abcdef);
    cqe.imm_inval_pkey = htobe32(0x11223344);
    cqe.byte_cnt = htobe32(4096);
    cqe.timestamp = htobe64(0x0102030405060708ULL);
    cqe.sop_drop_qpn = htobe32(((uint32_t)MLX5_OPCODE_RDMA_WRITE << 24) | 0x123456);
    cqe.wqe_counter = htobe16(0xbeef);
    cqe.signature = 0x5a;
    cqe.op_own = (MLX5_CQE_REQ << 4);
    mlx5dv_set_cqe_owner(&cqe, 1);
    dump("cqe_req", &cqe, sizeof cqe);

    /* A responder CQE: SEND with immediate, 777 bytes, owner 0, solicited. */
    memset(&cqe, 0, sizeof cqe);
    cqe.imm_inval_pkey = htobe32(0xcafe);
    cqe.byte_cnt = htobe32(777);
    cqe.sop_drop_qpn = htobe32(0x000011);
    cqe.wqe_counter = htobe16(3);
    cqe.op_own = (MLX5_CQE_RESP_SEND_IMM << 4) | 0x2;
    mlx5dv_set_cqe_owner(&cqe, 0);
    dump("cqe_resp", &cqe, sizeof cqe);

    /* An error CQE: REMOTE_ACCESS on WQE 7 of QPN 0x42. */
    struct mlx5_err_cqe err;
    memset(&err, 0, sizeof err);
    err.syndrome = MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR;
    err.vendor_err_synd = 0x88;
    err.s_wqe_opcode_qpn = htobe32(((uint32_t)MLX5_OPCODE_SEND << 24) | 0x42);
    err.wqe_counter = htobe16(7);
    err.op_own = (MLX5_CQE_REQ_ERR << 4) | 1;
    dump("cqe_err", &err, sizeof err);

    /* Control segment via the header's helper. imm is stored as given: pass it big-endian. */
    struct mlx5_wqe_ctrl_seg ctrl;
    memset(&ctrl, 0, sizeof ctrl);
    mlx5dv_set_ctrl_seg(&ctrl, 0xfffe, MLX5_OPCODE_RDMA_WRITE_IMM, 0, 0x123456,
                        MLX5_WQE_CTRL_CQ_UPDATE | MLX5_WQE_CTRL_SOLICITED, 4, 0x77, htobe32(0xdeadbeef));
    dump("ctrl", &ctrl, sizeof ctrl);

    struct mlx5_wqe_raddr_seg raddr;
    memset(&raddr, 0, sizeof raddr);
    raddr.raddr = htobe64(0x00007f0012345678ULL);
    raddr.rkey = htobe32(0x1234abcd);
    dump("raddr", &raddr, sizeof raddr);

    struct mlx5_wqe_data_seg data;
    mlx5dv_set_data_seg(&data, 65536, 0x4321, 0x00007f00aabbcc00ULL);
    dump("data", &data, sizeof data);

    struct mlx5_wqe_atomic_seg atomic;
    atomic.swap_add = htobe64(5);
    atomic.compare = htobe64(0xffffffffffffffffULL);
    dump("atomic", &atomic, sizeof atomic);

    /* A whole inline SEND WQE of 13 bytes laid out as the provider does (ctrl, then the inline
     * header and data, padded to 16 bytes; ds = 1 + align(4 + 13, 16) / 16 = 3). */
    unsigned char wqe[48];
    memset(wqe, 0, sizeof wqe);
    struct mlx5_wqe_ctrl_seg *c = (void *)wqe;
    mlx5dv_set_ctrl_seg(c, 5, MLX5_OPCODE_SEND, 0, 0x11, 0, 3, 0, 0);
    struct mlx5_wqe_inl_data_seg *inl = (void *)(wqe + 16);
    inl->byte_count = htobe32(13 | MLX5_INLINE_SEG);
    memset(wqe + 20, 0x09, 13);
    dump("wqe_inline_send", wqe, sizeof wqe);
    return 0;
}
