/* The shared serial code: generator, timer, communication account, report. */
#define _POSIX_C_SOURCE 200809L
#include "npb.h"
#include "comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MASK46 ((UINT64_C(1) << 46) - 1)
#define TWO_M46 0x1p-46

double npb_randlc(uint64_t *x, uint64_t a) {
    /* The low 46 bits of the 64-bit product are those of the exact product. */
    *x = (*x * a) & MASK46;
    return (double)*x * TWO_M46;
}

void npb_vranlc(long n, uint64_t *x, uint64_t a, double *y) {
    uint64_t v = *x;
    for (long i = 0; i < n; i++) {
        v = (v * a) & MASK46;
        y[i] = (double)v * TWO_M46;
    }
    *x = v;
}

uint64_t npb_pow46(uint64_t a, uint64_t n) {
    uint64_t r = 1, b = a & MASK46;
    while (n) {
        if (n & 1) r = (r * b) & MASK46;
        b = (b * b) & MASK46;
        n >>= 1;
    }
    return r;
}

uint64_t npb_skip(uint64_t x, uint64_t a, uint64_t n) {
    return (x * npb_pow46(a, n)) & MASK46;
}

double npb_wtime(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static struct npb_account account;
static int timing, current;
static double section_start, comm_start;

void npb_timed_begin(void) {
    memset(&account, 0, sizeof account);
    timing = 1;
    section_start = npb_wtime();
}

double npb_timed_end(void) {
    account.time = npb_wtime() - section_start;
    timing = 0;
    return account.time;
}

void npb_comm_begin(const char *phase) {
    if (!timing) return;
    current = 0;
    while (current < account.nphases && strcmp(account.phase[current], phase) != 0) current++;
    if (current == account.nphases && current < NPB_MAX_PHASES) account.phase[account.nphases++] = phase;
    comm_start = npb_wtime();
}

void npb_comm_end(void) {
    if (!timing) return;
    double dt = npb_wtime() - comm_start;
    account.comm += dt;
    if (current < NPB_MAX_PHASES) {
        account.seconds[current] += dt;
        account.calls[current]++;
    }
}

const struct npb_account *npb_account(void) { return &account; }

int npb_is_pow2(long x) { return x > 0 && (x & (x - 1)) == 0; }

int npb_log2(long x) {
    int l = 0;
    while ((1L << l) < x) l++;
    return l;
}

void *npb_alloc(const char *what, long count, long size) {
    void *p = calloc(count > 0 ? (size_t)count : 1, (size_t)size);
    if (!p) npb_abort("cannot allocate %s (%ld x %ld bytes)", what, count, size);
    return p;
}

void npb_collect(struct npb_result *r) {
    enum { N = 2 + NPB_MAX_PHASES };
    int p = npb_nprocs();
    double mine[N] = {account.time, account.comm};
    for (int i = 0; i < NPB_MAX_PHASES; i++) mine[2 + i] = account.seconds[i];
    double *all = npb_alloc("the times", (long)N * p, sizeof(double));
    npb_allgather("report", mine, all, sizeof mine);
    r->np = p;
    r->time = r->comm = 0.0;
    for (int i = 0; i < NPB_MAX_PHASES; i++) r->phase[i] = 0.0;
    for (int q = 0; q < p; q++) {
        const double *t = all + (long)N * q;
        if (t[0] > r->time) r->time = t[0];
        r->comm += t[1] / p;
        for (int i = 0; i < NPB_MAX_PHASES; i++) r->phase[i] += t[2 + i] / p;
    }
    free(all);
}

void npb_print_result(const struct npb_result *r, const char *impl) {
    double mops = r->time > 0 ? r->mops_work / r->time : 0.0;
    printf("\n\n %s Benchmark Completed.\n", r->kernel);
    printf(" Class           =                        %c\n", CLASS);
    if (r->n2 == 0 && r->n3 == 0)
        printf(" Size            =             %12ld\n", r->n1);
    else
        printf(" Size            =           %4ldx%4ldx%4ld\n", r->n1, r->n2, r->n3);
    printf(" Iterations      =             %12d\n", r->niter);
    printf(" Time in seconds =             %12.2f\n", r->time);
    printf(" Total processes =             %12d\n", r->np);
    printf(" Mop/s total     =             %12.2f\n", mops);
    printf(" Mop/s/process   =             %12.2f\n", mops / r->np);
    printf(" Operation type  = %24s\n", r->optype);
    printf(" Verification    =             %12s\n", r->verified ? "  SUCCESSFUL" : "UNSUCCESSFUL");
    printf(" Version         = %24s\n", "NPB 3 problem, bulkwire");
    printf(" Communication   = %24s\n", impl[0] == 'b' ? "BSPlib (bulkwire)" : "MPI");
    printf(" Comm. seconds   =             %12.4f\n", r->comm);
    printf(" Comp. seconds   =             %12.4f\n", r->time - r->comm);
    printf("\n");
    /* One line for tools (bwbench apps): comm is the mean over processes of the time in
     * communication calls, comp the rest of the slowest process's time. */
    printf("BWNPB kernel=%s class=%c impl=%s np=%d time=%.6f comm=%.6f comp=%.6f verified=%d mops=%.3f\n",
           r->kernel, CLASS, impl, r->np, r->time, r->comm, r->time - r->comm, r->verified, mops);
    /* The communication time by exchange: mean seconds over processes / calls a process. */
    const struct npb_account *a = npb_account();
    printf("BWNPB-COMM kernel=%s class=%c impl=%s np=%d", r->kernel, CLASS, impl, r->np);
    for (int i = 0; i < a->nphases; i++) printf(" %s=%.6f/%ld", a->phase[i], r->phase[i], a->calls[i]);
    printf("\n");
    fflush(stdout);
}
