/* MG's exchanges over MPI: ghost planes by paired send-receives, a replicated level by an
 * all-gather in place. */
#include <mpi.h>

#include "../common/comm.h"
#include "mg.h"

void mg_comm_init(double *u, long usize, double *r, long rsize) {
    (void)u;
    (void)usize;
    (void)r;
    (void)rsize;
}

void mg_comm_ghosts(double *stack, long off, long plane, long m3, int up, int down) {
    double *a = stack + off;
    npb_comm_begin("ghosts");
    MPI_Sendrecv(a + (m3 - 2) * plane, (int)plane, MPI_DOUBLE, up, 1, a, (int)plane, MPI_DOUBLE,
                 down, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Sendrecv(a + plane, (int)plane, MPI_DOUBLE, down, 2, a + (m3 - 1) * plane, (int)plane,
                 MPI_DOUBLE, up, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    npb_comm_end();
}

void mg_comm_gather(double *stack, long off, long plane, long nl) {
    npb_comm_begin("gather");
    MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, stack + off + plane, (int)(nl * plane),
                  MPI_DOUBLE, MPI_COMM_WORLD);
    npb_comm_end();
}
