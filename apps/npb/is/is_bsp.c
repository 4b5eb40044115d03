/* IS's key exchange over BSPlib: one superstep of high-performance puts straight into the
 * owner's receive buffer (every process knows every offset from the counts exchanged
 * before, so no message queue is needed). */
#include <bsp.h>

#include "../common/comm.h"
#include "is.h"

static int *recv_area;

void is_comm_init(int *recv, long capacity) {
    recv_area = recv;
    bsp_push_reg(recv, (int)(capacity * (long)sizeof(int)));
    bsp_sync();
}

void is_comm_keys(const int *send, const long *start, const long *count, const long *dest_off,
                  const long *recv_count, const long *recv_off) {
    (void)recv_count;
    (void)recv_off;
    int p = bsp_nprocs(), me = bsp_pid();
    npb_comm_begin("keys");
    for (int t = 1; t < p; t++) {
        int d = (me + t) % p;
        if (count[d] > 0)
            bsp_hpput(d, send + start[d], recv_area, (int)(dest_off[d] * (long)sizeof(int)),
                      (int)(count[d] * (long)sizeof(int)));
    }
    bsp_sync();
    npb_comm_end();
}
