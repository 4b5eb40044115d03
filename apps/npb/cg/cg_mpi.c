/* CG's exchanges over MPI: the matrix-vector product's parts by non-blocking sends and
 * receives, the row sums by an all-gather within the row. */
#include <mpi.h>

#include "../common/comm.h"
#include "cg.h"

static MPI_Comm row_comm;
static MPI_Request *reqs;

void cg_comm_init(const struct cg_grid *g, double *wrecv, double *srecv) {
    (void)wrecv;
    (void)srecv;
    MPI_Comm_split(MPI_COMM_WORLD, g->prow, g->pcol, &row_comm);
    reqs = npb_alloc("the requests", 2L * g->npcols, sizeof(MPI_Request));
}

void cg_comm_matvec(const struct cg_grid *g, const struct cg_plan *pl, const double *w,
                    double *wrecv) {
    int n = 0;
    npb_comm_begin("matvec");
    for (int i = 0; i < pl->nrecv; i++)
        MPI_Irecv(wrecv + pl->slot[i] * g->seg, (int)pl->rlen, MPI_DOUBLE, pl->src[i], 1,
                  MPI_COMM_WORLD, &reqs[n++]);
    for (int i = 0; i < pl->nsend; i++)
        MPI_Isend(w + pl->off[i], (int)pl->len[i], MPI_DOUBLE, pl->dest[i], 1, MPI_COMM_WORLD,
                  &reqs[n++]);
    MPI_Waitall(n, reqs, MPI_STATUSES_IGNORE);
    npb_comm_end();
}

void cg_comm_row(const struct cg_grid *g, const double *mine, double *all, int n) {
    (void)g;
    npb_comm_begin("rowsum");
    MPI_Allgather(mine, n, MPI_DOUBLE, all, n, MPI_DOUBLE, row_comm);
    npb_comm_end();
}
