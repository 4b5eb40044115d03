/* IS's key exchange over MPI: one all-to-all with the counts every process already knows. */
#include <stdlib.h>

#include <mpi.h>

#include "../common/comm.h"
#include "is.h"

static int *recv_area;
static int *scount, *sdispl, *rcount, *rdispl;

void is_comm_init(int *recv, long capacity) {
    int p;
    (void)capacity;
    MPI_Comm_size(MPI_COMM_WORLD, &p);
    recv_area = recv;
    scount = npb_alloc("the all-to-all counts", 4L * p, sizeof(int));
    sdispl = scount + p;
    rcount = sdispl + p;
    rdispl = rcount + p;
}

void is_comm_keys(const int *send, const long *start, const long *count, const long *dest_off,
                  const long *recv_count, const long *recv_off) {
    (void)dest_off;
    int p, me;
    MPI_Comm_size(MPI_COMM_WORLD, &p);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    for (int q = 0; q < p; q++) {
        scount[q] = q == me ? 0 : (int)count[q];
        sdispl[q] = (int)start[q];
        rcount[q] = q == me ? 0 : (int)recv_count[q];
        rdispl[q] = (int)recv_off[q];
    }
    npb_comm_begin("keys");
    MPI_Alltoallv(send, scount, sdispl, MPI_INT, recv_area, rcount, rdispl, MPI_INT,
                  MPI_COMM_WORLD);
    npb_comm_end();
}
