/* A soft-RoCE guest for ibmon's rxe monitor tests, written with the kernel's own UAPI structs
 * (rdma/rdma_user_rxe.h, rdma/ib_user_verbs.h) as rdma-core's provider and the kernel write
 * them, so the test does not depend on ibmon's offsets (src/ibmon/src/rxe.rs).
 *
 * Usage: rxe_gen RAM_FILE BYTES, then commands on stdin, one per line:
 *   queue ADDR SLOTS LOG2_ELEM     a queue header at guest-physical ADDR (queues numbered from 0)
 *   send Q OPCODE LENGTH           post a send WQE on queue Q (ssn one more than the last)
 *   wc Q STATUS OPCODE BYTE_LEN QPN  the kernel writes a completion on queue Q
 *   consume Q N                    the consumer index moves N slots
 *   skip Q N                       the next N send sequence numbers are used without a WQE
 *   sync                           flush and print "ok"
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <rdma/ib_user_verbs.h>
#include <rdma/rdma_user_rxe.h>

struct queue {
    struct rxe_queue_buf *buf;
    uint32_t ssn;
};

static void *slot(struct rxe_queue_buf *b, uint32_t i) {
    return b->data + ((size_t)(i & b->index_mask) << b->log2_elem_size);
}

static void advance(uint32_t *index, struct rxe_queue_buf *b, uint32_t n) {
    *index = (*index + n) & b->index_mask;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: rxe_gen RAM_FILE BYTES\n");
        return 2;
    }
    size_t bytes = strtoull(argv[2], NULL, 10);
    int fd = open(argv[1], O_RDWR | O_CREAT, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)bytes) != 0) {
        perror(argv[1]);
        return 1;
    }
    uint8_t *ram = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (ram == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    struct queue qs[64];
    unsigned nq = 0;
    char cmd[32];
    while (scanf("%31s", cmd) == 1) {
        unsigned q = 0, a = 0, b = 0, c = 0, d = 0;
        unsigned long long addr = 0;
        if (!strcmp(cmd, "queue") && scanf("%llu %u %u", &addr, &a, &b) == 3 && nq < 64) {
            struct rxe_queue_buf *h = (struct rxe_queue_buf *)(ram + addr);
            memset(h, 0, sizeof(*h));
            h->log2_elem_size = b;
            h->index_mask = a - 1;
            qs[nq].buf = h;
            qs[nq++].ssn = 0;
        } else if (!strcmp(cmd, "send") && scanf("%u %u %u", &q, &a, &b) == 3 && q < nq) {
            struct rxe_queue_buf *h = qs[q].buf;
            struct rxe_send_wqe *w = slot(h, h->producer_index);
            memset(w, 0, sizeof(*w));
            w->wr.opcode = a;
            w->dma.length = b;
            w->dma.resid = b;
            w->ssn = qs[q].ssn++;
            advance(&h->producer_index, h, 1);
        } else if (!strcmp(cmd, "wc") && scanf("%u %u %u %u %u", &q, &a, &b, &c, &d) == 5 &&
                   q < nq) {
            struct rxe_queue_buf *h = qs[q].buf;
            struct ib_uverbs_wc *w = slot(h, h->producer_index);
            memset(w, 0, sizeof(*w));
            w->status = a;
            w->opcode = b;
            w->byte_len = c;
            w->qp_num = d;
            advance(&h->producer_index, h, 1);
        } else if (!strcmp(cmd, "consume") && scanf("%u %u", &q, &a) == 2 && q < nq) {
            advance(&qs[q].buf->consumer_index, qs[q].buf, a);
        } else if (!strcmp(cmd, "skip") && scanf("%u %u", &q, &a) == 2 && q < nq) {
            qs[q].ssn += a;
        } else if (!strcmp(cmd, "sync")) {
            msync(ram, bytes, MS_SYNC);
            printf("ok\n");
            fflush(stdout);
        } else {
            fprintf(stderr, "rxe_gen: bad command %s\n", cmd);
            return 1;
        }
    }
    return 0;
}
