/* Time of one collective call, through mpi.h or, built with -DUSE_BW, through bulkwire.h,
 * so that the MPI layer's cost reads as the ratio of the two (and the same source built
 * with another MPI's mpicc gives that MPI's figure):
 *   coll allreduce|bcast BYTES ITERATIONS [sched]
 * allreduce sums doubles; bcast is from rank 0. With "sched" the MPI build runs on a
 * communicator with the ranks in reverse order, which bulkwire's MPI serves with its own
 * schedules instead of the collectives layer. Timed as OSU's collective benchmarks time:
 * each call alone between barriers, the mean per process, the slowest process's mean
 * printed (microseconds). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef USE_BW
#include <bulkwire.h>
#else
#include <mpi.h>
#endif

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: coll allreduce|bcast BYTES ITERATIONS [sched]\n");
        return 2;
    }
    int allreduce = strcmp(argv[1], "allreduce") == 0;
    size_t bytes = (size_t)atol(argv[2]);
    int iters = atoi(argv[3]), warm = iters / 10 + 1, rank;
    size_t n = bytes / sizeof(double) ? bytes / sizeof(double) : 1;
    double *a = calloc(n, sizeof(double)), *b = calloc(n, sizeof(double));
#ifdef USE_BW
    bw_init(&argc, &argv);
    bw_rank(&rank);
#define ALLREDUCE() bw_allreduce(a, b, n, BW_DOUBLE, BW_SUM)
#define BCAST() bw_bcast(a, n, BW_DOUBLE, 0)
#define BARRIER() bw_barrier()
#define MAX(x, y) bw_allreduce(&x, &y, 1, BW_DOUBLE, BW_MAX)
#else
    MPI_Init(&argc, &argv);
    MPI_Comm comm = MPI_COMM_WORLD;
    int p;
    MPI_Comm_size(MPI_COMM_WORLD, &p);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (argc > 4 && strcmp(argv[4], "sched") == 0) MPI_Comm_split(MPI_COMM_WORLD, 0, p - rank, &comm);
    MPI_Comm_rank(comm, &rank);
#define ALLREDUCE() MPI_Allreduce(a, b, (int)n, MPI_DOUBLE, MPI_SUM, comm)
#define BCAST() MPI_Bcast(a, (int)n, MPI_DOUBLE, 0, comm)
#define BARRIER() MPI_Barrier(comm)
#define MAX(x, y) MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_MAX, comm)
#endif
    double total = 0;
    for (int i = 0; i < warm + iters; i++) {
        BARRIER();
        double t0 = now();
        if (allreduce)
            ALLREDUCE();
        else
            BCAST();
        if (i >= warm) total += now() - t0;
    }
    double mine = total / iters * 1e6, slowest = 0;
    MAX(mine, slowest);
    if (rank == 0) printf("%.3f\n", slowest);
#ifdef USE_BW
    bw_finalize();
#else
    MPI_Finalize();
#endif
    free(a);
    free(b);
    return 0;
}
