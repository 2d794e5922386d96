/* A stand-in for libibverbs below the interposer (LD_PRELOAD="libresex_preload.so
 * libfake_verbs.so"): ibv_create_qp returns a QP of a device that is not mlx5, so the test sees
 * what the interposer does with a real process's call and the real libmlx5's answer. */
#include <infiniband/verbs.h>
#include <stdlib.h>
#include <string.h>

/* Room on both sides of the device, all zero: libmlx5 reads its own fields around it. */
static char device_room[1 << 16];
static struct ibv_context ctx;
static struct ibv_qp qp;

const char *ibv_get_device_name(struct ibv_device *device)
{
    (void)device;
    return "fakedev0";
}

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
    (void)pd;
    (void)attr;
    ctx.device = (struct ibv_device *)(device_room + sizeof(device_room) / 2);
    memset(&qp, 0, sizeof(qp));
    qp.context = &ctx;
    qp.qp_num = 0x11;
    return &qp;
}

int ibv_destroy_qp(struct ibv_qp *q)
{
    (void)q;
    return 0;
}
