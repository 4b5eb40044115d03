/* MG's exchanges over BSPlib: ghost planes are put straight from the grid into the
 * neighbours' grids, and a replicated level is gathered, each in one superstep. */
#include <bsp.h>

#include "../common/comm.h"
#include "mg.h"

void mg_comm_init(double *u, long usize, double *r, long rsize) {
    bsp_push_reg(u, (int)(usize * (long)sizeof(double)));
    bsp_push_reg(r, (int)(rsize * (long)sizeof(double)));
    bsp_sync();
}

void mg_comm_ghosts(double *stack, long off, long plane, long m3, int up, int down) {
    int bytes = (int)(plane * (long)sizeof(double));
    npb_comm_begin("ghosts");
    bsp_hpput(up, stack + off + (m3 - 2) * plane, stack, (int)(off * (long)sizeof(double)), bytes);
    bsp_hpput(down, stack + off + plane, stack, (int)((off + (m3 - 1) * plane) * (long)sizeof(double)),
              bytes);
    bsp_sync();
    npb_comm_end();
}

void mg_comm_gather(double *stack, long off, long plane, long nl) {
    int p = bsp_nprocs(), me = bsp_pid();
    long first = off + (1 + me * nl) * plane;
    npb_comm_begin("gather");
    for (int t = 1; t < p; t++)
        bsp_hpput((me + t) % p, stack + first, stack, (int)(first * (long)sizeof(double)),
                  (int)(nl * plane * (long)sizeof(double)));
    bsp_sync();
    npb_comm_end();
}
