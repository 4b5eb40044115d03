/* OSU-style point-to-point measurements, one source for MPI and bulkwire:
 *   latency: ping-pong of SIZE bytes, half round trip averaged over ITERS (after warm-up);
 *   bandwidth: windows of 64 non-blocking sends of SIZE bytes, then a 1-byte ack.
 *
 * MPI:      mpicc -O2 -DUSE_MPI osu_pingbw.c -o osu_mpi
 *           mpirun --allow-run-as-root -np 2 --mca btl self,vader ./osu_mpi
 * bulkwire: target/release/bspcc -O2 crates/capi/examples/c/osu_pingbw.c -o osu_bw
 *           ./osu_bw            (starts its second process itself), or bsprun -n 2 ./osu_bw
 *
 * Usage: prog [LAT_SIZE LAT_ITERS BW_SIZE BW_ITERS]  (defaults 8 100000 1048576 100) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WINDOW 64

#ifdef USE_MPI
#include <mpi.h>
typedef MPI_Request req_t;
static int me, np;
static void init(int *argc, char ***argv) {
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
}
static void fini(void) { MPI_Finalize(); }
static double now(void) { return MPI_Wtime(); }
static void xsend(void *b, size_t n, int to, int tag) {
    MPI_Send(b, (int)n, MPI_BYTE, to, tag, MPI_COMM_WORLD);
}
static void xrecv(void *b, size_t n, int from, int tag) {
    MPI_Recv(b, (int)n, MPI_BYTE, from, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}
static void xisend(void *b, size_t n, int to, int tag, req_t *r) {
    MPI_Isend(b, (int)n, MPI_BYTE, to, tag, MPI_COMM_WORLD, r);
}
static void xirecv(void *b, size_t n, int from, int tag, req_t *r) {
    MPI_Irecv(b, (int)n, MPI_BYTE, from, tag, MPI_COMM_WORLD, r);
}
static void xwaitall(int n, req_t *r) { MPI_Waitall(n, r, MPI_STATUSES_IGNORE); }
static const char *name = "Open MPI";
#else
#include "bulkwire.h"
typedef bw_request req_t;
static int me, np;
static void ck(int rc, const char *what) {
    if (rc != BW_SUCCESS) {
        fprintf(stderr, "%s: %s (%s)\n", what, bw_error_string(rc), bw_last_error());
        exit(1);
    }
}
static void init(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    ck(bw_init_spawn(2), "bw_init_spawn");
    ck(bw_rank(&me), "bw_rank");
    ck(bw_size(&np), "bw_size");
}
static void fini(void) { ck(bw_finalize(), "bw_finalize"); }
static double now(void) { return bw_wtime(); }
static void xsend(void *b, size_t n, int to, int tag) { ck(bw_send(b, n, to, tag), "send"); }
static void xrecv(void *b, size_t n, int from, int tag) {
    ck(bw_recv(b, n, from, tag, BW_STATUS_IGNORE), "recv");
}
static void xisend(void *b, size_t n, int to, int tag, req_t *r) {
    ck(bw_isend(b, n, to, tag, r), "isend");
}
static void xirecv(void *b, size_t n, int from, int tag, req_t *r) {
    ck(bw_irecv(b, n, from, tag, r), "irecv");
}
static void xwaitall(int n, req_t *r) { ck(bw_waitall(n, r, BW_STATUSES_IGNORE), "waitall"); }
static const char *name = "bulkwire";
#endif

int main(int argc, char **argv) {
    init(&argc, &argv);
    size_t lsize = argc > 1 ? (size_t)atol(argv[1]) : 8;
    int liters = argc > 2 ? atoi(argv[2]) : 100000;
    size_t bsize = argc > 3 ? (size_t)atol(argv[3]) : 1048576;
    int biters = argc > 4 ? atoi(argv[4]) : 100;
    if (np != 2) {
        if (me == 0) fprintf(stderr, "needs 2 processes\n");
        fini();
        return 1;
    }
    int peer = 1 - me;
    char *buf = malloc(lsize > 1 ? lsize : 1);
    memset(buf, 1, lsize > 1 ? lsize : 1);

    /* Latency. */
    int warm = liters / 10 + 100;
    double t0 = 0;
    for (int i = 0; i < warm + liters; i++) {
        if (i == warm) t0 = now();
        if (me == 0) {
            xsend(buf, lsize, peer, 1);
            xrecv(buf, lsize, peer, 1);
        } else {
            xrecv(buf, lsize, peer, 1);
            xsend(buf, lsize, peer, 1);
        }
    }
    double lat = (now() - t0) / liters / 2;

    /* Bandwidth. */
    char *big = malloc(bsize * WINDOW);
    memset(big, 2, bsize * WINDOW);
    req_t reqs[WINDOW];
    char ack = 0;
    int bwarm = 2;
    for (int i = 0; i < bwarm + biters; i++) {
        if (i == bwarm) t0 = now();
        if (me == 0) {
            for (int w = 0; w < WINDOW; w++) xisend(big + (size_t)w * bsize, bsize, peer, 2, &reqs[w]);
            xwaitall(WINDOW, reqs);
            xrecv(&ack, 1, peer, 3);
        } else {
            for (int w = 0; w < WINDOW; w++) xirecv(big + (size_t)w * bsize, bsize, peer, 2, &reqs[w]);
            xwaitall(WINDOW, reqs);
            xsend(&ack, 1, peer, 3);
        }
    }
    double secs = now() - t0;
    if (me == 0) {
        printf("%s: latency %zu B: %.3f us (half round trip, mean of %d)\n", name, lsize,
               lat * 1e6, liters);
        printf("%s: bandwidth %zu B: %.3f GB/s (window %d, %d iterations)\n", name, bsize,
               (double)bsize * WINDOW * biters / secs / 1e9, WINDOW, biters);
    }
    free(buf);
    free(big);
    fini();
    return 0;
}
