/* Reference layout for ibmon's soft-RoCE decoder (src/ibmon/src/rxe.rs), from the kernel's UAPI
 * headers as Debian's linux-libc-dev ships them. Prints "name value" lines. */
#include <stddef.h>
#include <stdio.h>
#include <rdma/ib_user_verbs.h>
#include <rdma/rdma_user_rxe.h>
/* The receive completions' opcodes are not in the kernel's UAPI enum (rxe writes the kernel's
 * IB_WC_RECV values); libibverbs (libibverbs-dev, which CI installs) names them. */
#if __has_include(<infiniband/verbs.h>)
#include <infiniband/verbs.h>
#define HAVE_VERBS 1
#endif

#define OFF(name, type, field) printf("%s %zu\n", name, offsetof(type, field))
#define SIZE(name, type) printf("%s %zu\n", name, sizeof(type))

int main(void) {
    OFF("queue.log2_elem_size", struct rxe_queue_buf, log2_elem_size);
    OFF("queue.index_mask", struct rxe_queue_buf, index_mask);
    OFF("queue.producer_index", struct rxe_queue_buf, producer_index);
    OFF("queue.consumer_index", struct rxe_queue_buf, consumer_index);
    OFF("queue.data", struct rxe_queue_buf, data);
    OFF("send.wr_id", struct rxe_send_wqe, wr.wr_id);
    OFF("send.opcode", struct rxe_send_wqe, wr.opcode);
    OFF("send.send_flags", struct rxe_send_wqe, wr.send_flags);
    OFF("send.wr", struct rxe_send_wqe, wr.wr);
    OFF("send.status", struct rxe_send_wqe, status);
    OFF("send.state", struct rxe_send_wqe, state);
    OFF("send.iova", struct rxe_send_wqe, iova);
    OFF("send.first_psn", struct rxe_send_wqe, first_psn);
    OFF("send.last_psn", struct rxe_send_wqe, last_psn);
    OFF("send.ssn", struct rxe_send_wqe, ssn);
    OFF("send.dma.length", struct rxe_send_wqe, dma.length);
    OFF("send.dma.num_sge", struct rxe_send_wqe, dma.num_sge);
    OFF("send.dma.sge", struct rxe_send_wqe, dma.sge);
    SIZE("send.size", struct rxe_send_wqe);
    OFF("recv.wr_id", struct rxe_recv_wqe, wr_id);
    OFF("recv.dma.length", struct rxe_recv_wqe, dma.length);
    OFF("recv.dma.num_sge", struct rxe_recv_wqe, dma.num_sge);
    OFF("recv.dma.sge", struct rxe_recv_wqe, dma.sge);
    SIZE("recv.size", struct rxe_recv_wqe);
    OFF("sge.addr", struct rxe_sge, addr);
    OFF("sge.length", struct rxe_sge, length);
    OFF("sge.lkey", struct rxe_sge, lkey);
    SIZE("sge.size", struct rxe_sge);
    OFF("wc.wr_id", struct ib_uverbs_wc, wr_id);
    OFF("wc.status", struct ib_uverbs_wc, status);
    OFF("wc.opcode", struct ib_uverbs_wc, opcode);
    OFF("wc.byte_len", struct ib_uverbs_wc, byte_len);
    OFF("wc.qp_num", struct ib_uverbs_wc, qp_num);
    OFF("wc.wc_flags", struct ib_uverbs_wc, wc_flags);
    SIZE("wc.size", struct ib_uverbs_wc);
    printf("op.rdma_write %d\n", IB_UVERBS_WR_RDMA_WRITE);
    printf("op.rdma_write_with_imm %d\n", IB_UVERBS_WR_RDMA_WRITE_WITH_IMM);
    printf("op.send %d\n", IB_UVERBS_WR_SEND);
    printf("op.send_with_imm %d\n", IB_UVERBS_WR_SEND_WITH_IMM);
    printf("op.rdma_read %d\n", IB_UVERBS_WR_RDMA_READ);
    printf("op.cmp_and_swp %d\n", IB_UVERBS_WR_ATOMIC_CMP_AND_SWP);
    printf("op.fetch_and_add %d\n", IB_UVERBS_WR_ATOMIC_FETCH_AND_ADD);
    printf("op.local_inv %d\n", IB_UVERBS_WR_LOCAL_INV);
    printf("op.bind_mw %d\n", IB_UVERBS_WR_BIND_MW);
    printf("op.send_with_inv %d\n", IB_UVERBS_WR_SEND_WITH_INV);
#ifdef HAVE_VERBS
    printf("wc.op.recv %d\n", IBV_WC_RECV);
    printf("wc.op.recv_rdma_with_imm %d\n", IBV_WC_RECV_RDMA_WITH_IMM);
#endif
    return 0;
}
