/* Ping-pong latency between ranks 0 and 1, through mpi.h (MPI_Send/MPI_Recv) or, built
 * with -DUSE_BW, through bulkwire.h (bw_send/bw_recv), so that the MPI layer's cost can
 * be read as the ratio of the two. Prints the one-way latency in microseconds:
 *   latency BYTES ITERATIONS */
#include <stdio.h>
#include <stdlib.h>
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
    size_t bytes = argc > 1 ? (size_t)atol(argv[1]) : 8;
    int iters = argc > 2 ? atoi(argv[2]) : 10000, warm = iters / 10, rank;
    char *buf = calloc(bytes ? bytes : 1, 1);
#ifdef USE_BW
    bw_init(&argc, &argv);
    bw_rank(&rank);
#define SEND(to) bw_send(buf, bytes, to, 1)
#define RECV(from) bw_recv(buf, bytes, from, 1, NULL)
#else
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
#define SEND(to) MPI_Send(buf, (int)bytes, MPI_BYTE, to, 1, MPI_COMM_WORLD)
#define RECV(from) MPI_Recv(buf, (int)bytes, MPI_BYTE, from, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE)
#endif
    double t0 = 0;
    for (int i = 0; i < warm + iters; i++) {
        if (i == warm) t0 = now();
        if (rank == 0) {
            SEND(1);
            RECV(1);
        } else if (rank == 1) {
            RECV(0);
            SEND(0);
        }
    }
    double us = (now() - t0) / iters / 2 * 1e6;
    if (rank == 0) printf("%.3f\n", us);
#ifdef USE_BW
    bw_finalize();
#else
    MPI_Finalize();
#endif
    free(buf);
    return 0;
}
