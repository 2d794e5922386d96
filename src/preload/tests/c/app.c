/* An unmodified application: creates a QP, says which QPN it got, destroys it. */
#include <infiniband/verbs.h>
#include <stdio.h>

int main(void)
{
    struct ibv_qp_init_attr attr = {0};
    struct ibv_qp *qp = ibv_create_qp(NULL, &attr);
    if (!qp) {
        printf("app: no QP\n");
        return 1;
    }
    printf("app: QP %#x\n", qp->qp_num);
    return ibv_destroy_qp(qp);
}
