/* The MPI side of bwbench's tables: the same experiments, the same methodology (OSU:
 * warm-up, iterations, a window of 64 for bandwidth), run by the user's own MPI so that
 * every table has an MPI row measured in the same run. bwbench compiles this with mpicc
 * and parses the RESULT lines. */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

static int rank, nprocs;

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Prints: RESULT kind size p n min mean max std median */
static void report(const char *kind, long size, double *s, int n) {
    double sum = 0, sq = 0;
    qsort(s, n, sizeof *s, cmp);
    for (int i = 0; i < n; i++) sum += s[i];
    double mean = sum / n;
    for (int i = 0; i < n; i++) sq += (s[i] - mean) * (s[i] - mean);
    double sd = n > 1 ? sqrt(sq / (n - 1)) : 0;
    double med = n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
    printf("RESULT %s %ld %d %d %.9e %.9e %.9e %.9e %.9e\n", kind, size, nprocs, n, s[0], mean,
           s[n - 1], sd, med);
    fflush(stdout);
}

static char *buf(long n) {
    char *b = malloc(n > 0 ? n : 1);
    if (!b) { fprintf(stderr, "out of memory\n"); MPI_Abort(MPI_COMM_WORLD, 2); }
    memset(b, rank + 1, n > 0 ? n : 1);
    return b;
}

static void latency(long size, int warmup, int iters) {
    char *b = buf(size);
    double *s = malloc(sizeof(double) * iters);
    for (int i = 0; i < warmup + iters; i++) {
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0) {
            double t0 = MPI_Wtime();
            MPI_Send(b, size, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
            MPI_Recv(b, size, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (i >= warmup) s[i - warmup] = (MPI_Wtime() - t0) / 2;
        } else if (rank == 1) {
            MPI_Recv(b, size, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(b, size, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
        }
    }
    if (rank == 0) report("latency", size, s, iters);
    free(s); free(b);
}

/* own: the receiver takes each message of a window into a buffer of its own, as
 * bulkwire's point-to-point kernel must (Rust lends a buffer to one receive at a time). */
static void bandwidth(long size, int window, int warmup, int reps, int own) {
    char *b = buf(size);
    char *rb = own ? buf(size * window) : b;
    char ack = 0;
    MPI_Request *rq = malloc(sizeof(MPI_Request) * window);
    double *s = malloc(sizeof(double) * reps);
    for (int i = 0; i < warmup + reps; i++) {
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0) {
            double t0 = MPI_Wtime();
            for (int w = 0; w < window; w++) MPI_Isend(b, size, MPI_BYTE, 1, 2, MPI_COMM_WORLD, &rq[w]);
            MPI_Waitall(window, rq, MPI_STATUSES_IGNORE);
            MPI_Recv(&ack, 1, MPI_BYTE, 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (i >= warmup) s[i - warmup] = (double)size * window / (MPI_Wtime() - t0);
        } else if (rank == 1) {
            /* Without own, one buffer for the whole window, as OSU does: what is measured
             * is the transport, not the receiver's memory. */
            for (int w = 0; w < window; w++)
                MPI_Irecv(rb + (own ? w * size : 0), size, MPI_BYTE, 0, 2, MPI_COMM_WORLD, &rq[w]);
            MPI_Waitall(window, rq, MPI_STATUSES_IGNORE);
            MPI_Send(&ack, 1, MPI_BYTE, 0, 3, MPI_COMM_WORLD);
        }
    }
    if (rank == 0) report(own ? "bandwidth-own" : "bandwidth", size, s, reps);
    if (own) free(rb);
    free(s); free(rq); free(b);
}

/* Collective latency: the slowest process's time per call, per iteration. */
static void collective(const char *name, long size, int warmup, int iters) {
    char *sb = buf(size * nprocs), *rb = buf(size * nprocs);
    double *s = malloc(sizeof(double) * iters);
    for (int i = 0; i < warmup + iters; i++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        if (!strcmp(name, "barrier")) MPI_Barrier(MPI_COMM_WORLD);
        else if (!strcmp(name, "bcast")) MPI_Bcast(sb, size, MPI_BYTE, 0, MPI_COMM_WORLD);
        else if (!strcmp(name, "alltoall")) MPI_Alltoall(sb, size, MPI_BYTE, rb, size, MPI_BYTE, MPI_COMM_WORLD);
        else if (!strcmp(name, "allgather")) MPI_Allgather(sb, size, MPI_BYTE, rb, size, MPI_BYTE, MPI_COMM_WORLD);
        else if (!strcmp(name, "gather")) MPI_Gather(sb, size, MPI_BYTE, rb, size, MPI_BYTE, 0, MPI_COMM_WORLD);
        else if (!strcmp(name, "scatter")) MPI_Scatter(sb, size, MPI_BYTE, rb, size, MPI_BYTE, 0, MPI_COMM_WORLD);
        else if (!strcmp(name, "reduce")) MPI_Reduce(sb, rb, size / 8 > 0 ? size / 8 : 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
        else if (!strcmp(name, "allreduce")) MPI_Allreduce(sb, rb, size / 8 > 0 ? size / 8 : 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        else { if (rank == 0) fprintf(stderr, "unknown collective %s\n", name); MPI_Abort(MPI_COMM_WORLD, 2); }
        double dt = MPI_Wtime() - t0, worst;
        MPI_Reduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (i >= warmup) s[i - warmup] = worst;
    }
    if (rank == 0) report(name, size, s, iters);
    free(s); free(sb); free(rb);
}

/* Riesen & Maccabe's overlap benchmark: pre-post a receive, compute, then wait; the wait time. */
static void overlap(long size, double compute, int reps) {
    char *b = buf(size);
    double *s = malloc(sizeof(double) * reps);
    for (int i = 0; i < reps; i++) {
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0) {
            MPI_Request r;
            MPI_Irecv(b, size, MPI_BYTE, 1, 4, MPI_COMM_WORLD, &r);
            double t0 = MPI_Wtime();
            volatile double x = 0;
            while (MPI_Wtime() - t0 < compute) x += 1;
            double t1 = MPI_Wtime();
            MPI_Wait(&r, MPI_STATUS_IGNORE);
            s[i] = MPI_Wtime() - t1;
        } else if (rank == 1) {
            MPI_Send(b, size, MPI_BYTE, 0, 4, MPI_COMM_WORLD);
        }
    }
    if (rank == 0) report("overlap", size, s, reps);
    free(s); free(b);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    /* usage: harness KIND WARMUP ITERS [EXTRA] SIZE... (EXTRA: window, or compute seconds) */
    if (argc < 5) {
        if (rank == 0) fprintf(stderr, "usage: %s kind warmup iters extra size...\n", argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const char *kind = argv[1];
    int warmup = atoi(argv[2]), iters = atoi(argv[3]);
    double extra = atof(argv[4]);
    for (int a = 5; a < argc; a++) {
        long size = atol(argv[a]);
        if (!strcmp(kind, "latency")) latency(size, warmup, iters);
        else if (!strcmp(kind, "bandwidth")) bandwidth(size, (int)extra, warmup, iters, 0);
        else if (!strcmp(kind, "bandwidth-own")) bandwidth(size, (int)extra, warmup, iters, 1);
        else if (!strcmp(kind, "overlap")) overlap(size, extra, iters);
        else collective(kind, size, warmup, iters);
    }
    MPI_Finalize();
    return 0;
}
