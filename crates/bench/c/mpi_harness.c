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

/* The 90th percentile of sorted s[0..n) by nearest rank. */
static double p90(const double *s, int n) {
    int k = (n * 9 + 9) / 10;
    return s[(k > 0 ? k : 1) - 1];
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts s[0..n) and returns its median. */
static double median_of(double *s, int n) {
    qsort(s, n, sizeof *s, cmp);
    return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

/* Prints: RESULT kind size p n min mean max std median [best median p90], the last three
 * when `spread` is given. Sorts s. */
static void result(const char *kind, long size, double *s, int n, const double *spread) {
    double sum = 0, sq = 0;
    double med = median_of(s, n);
    for (int i = 0; i < n; i++) sum += s[i];
    double mean = sum / n;
    for (int i = 0; i < n; i++) sq += (s[i] - mean) * (s[i] - mean);
    double sd = n > 1 ? sqrt(sq / (n - 1)) : 0;
    printf("RESULT %s %ld %d %d %.9e %.9e %.9e %.9e %.9e", kind, size, nprocs, n, s[0], mean,
           s[n - 1], sd, med);
    if (spread) printf(" %.9e %.9e %.9e", spread[0], spread[1], spread[2]);
    printf("\n");
    fflush(stdout);
}

/* The summary of s, with the best, median and 90th percentile of the m single operations
 * in `one` (a batch mean hides how they spread). Sorts both. */
static void report_steps(const char *kind, long size, double *s, int n, double *one, int m) {
    double om = median_of(one, m);
    double spread[3] = {one[0], om, p90(one, m)};
    result(kind, size, s, n, spread);
}

/* Each sample a single operation's time: the spread is the samples'. */
static void report(const char *kind, long size, double *s, int n) {
    report_steps(kind, size, s, n, s, n);
}

/* Rates (bytes per second; higher is better), each a single repetition's: the best is
 * the highest, the p90 the rate 90 % of the repetitions reach (nearest rank from the fast
 * end). */
static void report_rates(const char *kind, long size, double *s, int n) {
    double *neg = malloc(sizeof(double) * n);
    for (int i = 0; i < n; i++) neg[i] = -s[i];
    double nm = median_of(neg, n);
    double spread[3] = {-neg[0], -nm, -p90(neg, n)};
    free(neg);
    result(kind, size, s, n, spread);
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
    if (rank == 0) report_rates(own ? "bandwidth-own" : "bandwidth", size, s, reps);
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

/* One superstep of an h-relation of single words (bspbench's pattern): word i goes to
 * (rank + 1 + i mod (p-1)) mod p, at index rank + (i / (p-1)) p of the destination's array.
 * The program packs by hand what BSPlib packs for its user: counts, the words grouped by
 * destination, one MPI_Alltoallv, and each word copied to its place. h = 0 is the empty
 * superstep, an MPI_Barrier. */
struct hrel { int h; double *src, *dst, *sb, *rb; int *sc, *sd, *rc, *rd; };

static void hrel_step(struct hrel *x) {
    int p = nprocs, h = x->h;
    if (h == 0 || p == 1) { MPI_Barrier(MPI_COMM_WORLD); return; }
    for (int t = 0; t < p; t++) x->sc[t] = x->rc[t] = 0;
    for (int i = 0; i < h; i++) x->sc[(rank + 1 + i % (p - 1)) % p]++;
    for (int t = 0; t < p; t++) /* what t sends here: its words with the right residue */
        if (t != rank) {
            int k = (rank - t - 1 + 2 * p) % p;
            x->rc[t] = h > k ? (h - 1 - k) / (p - 1) + 1 : 0;
        }
    x->sd[0] = x->rd[0] = 0;
    for (int t = 1; t < p; t++) { x->sd[t] = x->sd[t - 1] + x->sc[t - 1]; x->rd[t] = x->rd[t - 1] + x->rc[t - 1]; }
    for (int i = 0; i < h; i++) {
        int to = (rank + 1 + i % (p - 1)) % p;
        x->sb[x->sd[to] + i / (p - 1)] = x->src[i];
    }
    MPI_Alltoallv(x->sb, x->sc, x->sd, MPI_DOUBLE, x->rb, x->rc, x->rd, MPI_DOUBLE, MPI_COMM_WORLD);
    for (int t = 0; t < p; t++)
        for (int k = 0; k < x->rc[t]; k++) x->dst[t + k * p] = x->rb[x->rd[t] + k];
}

/* Back-to-back supersteps as bspbench times them: `batches` means of `iters` supersteps
 * each (the report's median is the median batch mean). */
static void supersteps(long h, int warmup, int iters, int batches) {
    int p = nprocs;
    struct hrel x = { (int)h, malloc(sizeof(double) * (h + 1)), malloc(sizeof(double) * (2 * h + p + 1)),
                      malloc(sizeof(double) * (h + 1)), malloc(sizeof(double) * (h + 1)),
                      malloc(sizeof(int) * p), malloc(sizeof(int) * p), malloc(sizeof(int) * p), malloc(sizeof(int) * p) };
    double *s = malloc(sizeof(double) * batches);
    double *one = malloc(sizeof(double) * batches * iters);
    memset(one, 0, sizeof(double) * batches * iters); /* no page fault inside a batch */
    for (long i = 0; i < h; i++) x.src[i] = (double)i;
    for (int i = 0; i < warmup; i++) hrel_step(&x);
    for (int b = 0; b < batches; b++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime(), last = t0;
        for (int i = 0; i < iters; i++) {
            hrel_step(&x);
            double now = MPI_Wtime();
            one[b * iters + i] = now - last;
            last = now;
        }
        s[b] = (last - t0) / iters;
    }
    if (rank == 0) report_steps("superstep", h, s, batches, one, batches * iters);
    free(s); free(one); free(x.src); free(x.dst); free(x.sb); free(x.rb); free(x.sc); free(x.sd); free(x.rc); free(x.rd);
}

/* A total exchange of `size` bytes per pair, back to back, timed as `supersteps`. */
static void alltoall_loop(long size, int warmup, int iters, int batches) {
    char *sb = buf(size * nprocs), *rb = buf(size * nprocs);
    double *s = malloc(sizeof(double) * batches);
    double *one = malloc(sizeof(double) * batches * iters);
    memset(one, 0, sizeof(double) * batches * iters); /* no page fault inside a batch */
    for (int i = 0; i < warmup; i++) MPI_Alltoall(sb, size, MPI_BYTE, rb, size, MPI_BYTE, MPI_COMM_WORLD);
    for (int b = 0; b < batches; b++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime(), last = t0;
        for (int i = 0; i < iters; i++) {
            MPI_Alltoall(sb, size, MPI_BYTE, rb, size, MPI_BYTE, MPI_COMM_WORLD);
            double now = MPI_Wtime();
            one[b * iters + i] = now - last;
            last = now;
        }
        s[b] = (last - t0) / iters;
    }
    if (rank == 0) report_steps("alltoall-loop", size, s, batches, one, batches * iters);
    free(s); free(one); free(sb); free(rb);
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
    /* usage: harness KIND WARMUP ITERS [EXTRA] SIZE... (EXTRA: window, compute seconds, or
     * batches of supersteps) */
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
        else if (!strcmp(kind, "superstep")) supersteps(size, warmup, iters, (int)extra);
        else if (!strcmp(kind, "alltoall-loop")) alltoall_loop(size, warmup, iters, (int)extra);
        else collective(kind, size, warmup, iters);
    }
    MPI_Finalize();
    return 0;
}
