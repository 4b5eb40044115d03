/* CG's exchanges over BSPlib: the matrix-vector product's parts and the row sums are each
 * one superstep of puts into the receivers' slots. */
#include <bsp.h>

#include "../common/comm.h"
#include "cg.h"

static double *wslots, *sslots;

void cg_comm_init(const struct cg_grid *g, double *wrecv, double *srecv) {
    wslots = wrecv;
    sslots = srecv;
    bsp_push_reg(wrecv, (int)(g->npcols * g->seg * (long)sizeof(double)));
    bsp_push_reg(srecv, 2 * g->npcols * (int)sizeof(double));
    bsp_sync();
}

void cg_comm_matvec(const struct cg_grid *g, const struct cg_plan *pl, const double *w,
                    double *wrecv) {
    (void)wrecv;
    npb_comm_begin("matvec");
    int slot = (int)(g->pcol * g->seg * (long)sizeof(double));
    for (int i = 0; i < pl->nsend; i++)
        bsp_hpput(pl->dest[i], w + pl->off[i], wslots, slot, (int)(pl->len[i] * (long)sizeof(double)));
    bsp_sync();
    npb_comm_end();
}

void cg_comm_row(const struct cg_grid *g, const double *mine, double *all, int n) {
    int nb = n * (int)sizeof(double), base = g->prow * g->npcols;
    npb_comm_begin("rowsum");
    for (int c = 0; c < g->npcols; c++)
        if (c != g->pcol) bsp_put(base + c, mine, sslots, g->pcol * nb, nb);
    bsp_sync();
    npb_comm_end();
    for (int c = 0; c < g->npcols; c++)
        if (c != g->pcol)
            for (int i = 0; i < n; i++) all[c * n + i] = sslots[c * n + i];
}
