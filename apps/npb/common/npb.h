/*
 * The serial code every NAS kernel shares: NPB's random number generator, the timer, the
 * communication-time account, block partitions and the report printer. The problems are
 * those of the NAS Parallel Benchmarks (NASA report NAS-95-020, NPB 3 problem
 * definitions); this code is written for bulkwire from those definitions.
 *
 * The class is chosen at compile time, as NPB does: -DCLASS="'S'" (S, W, A or B).
 */
#ifndef NPB_H
#define NPB_H

#include <stdint.h>

#ifndef CLASS
#error "compile with -DCLASS=\"'S'\" (S, W, A or B), as the Makefile does"
#endif
#if CLASS != 'S' && CLASS != 'W' && CLASS != 'A' && CLASS != 'B'
#error "CLASS must be 'S', 'W', 'A' or 'B'"
#endif

/* NPB's linear congruential generator: x_{k+1} = a x_k mod 2^46, the value x_{k+1} 2^-46.
 * The state is the integer x (NPB keeps it in a double; the sequence is the same). */
#define NPB_MULT UINT64_C(1220703125) /* 5^13 */

/* Advances x once and returns the new value in (0, 1). */
double npb_randlc(uint64_t *x, uint64_t a);
/* Writes the next n values to y and advances x n times. */
void npb_vranlc(long n, uint64_t *x, uint64_t a, double *y);
/* a^n mod 2^46: the multiplier that advances a seed by n steps at once. */
uint64_t npb_pow46(uint64_t a, uint64_t n);
/* The seed n steps of multiplier a after x. */
uint64_t npb_skip(uint64_t x, uint64_t a, uint64_t n);

/* Seconds on a monotonic clock. */
double npb_wtime(void);

/* The timed section: npb_timed_begin starts the clock and a fresh communication account,
 * npb_timed_end stops both and returns the section's seconds. Communication (library calls
 * only, never packing or summing) runs between npb_comm_begin and npb_comm_end; the account
 * keeps its time per phase, a string constant naming the exchange ("matvec"). Every
 * process makes the same sequence of exchanges, so phases are numbered alike everywhere. */
#define NPB_MAX_PHASES 8
struct npb_account {
    double time, comm;
    int nphases;
    const char *phase[NPB_MAX_PHASES];
    double seconds[NPB_MAX_PHASES];
    long calls[NPB_MAX_PHASES];
};
void npb_timed_begin(void);
double npb_timed_end(void);
void npb_comm_begin(const char *phase);
void npb_comm_end(void);
const struct npb_account *npb_account(void);

/* Block partition of [0, n) into `parts`: part i is [npb_part(n, parts, i),
 * npb_part(n, parts, i + 1)). Nested partitions by powers of two line up. */
static inline long npb_part(long n, int parts, int i) {
    return (long)((int64_t)n * i / parts);
}

int npb_is_pow2(long x);
int npb_log2(long x); /* of a power of two */

/* Zeroed allocation that stops the job with a message naming what could not be had. */
void *npb_alloc(const char *what, long count, long size);

/* What a run reports (NPB's layout, plus one machine-readable line). */
struct npb_result {
    const char *kernel;  /* "IS" */
    long n1, n2, n3;     /* problem size; n2 = n3 = 0 when it is one number */
    int niter;
    const char *optype;  /* NPB's operation type */
    double mops_work;    /* millions of operations of the timed section */
    int verified;        /* 1 SUCCESSFUL, 0 UNSUCCESSFUL */
    /* Filled in by npb_end from every process: */
    int np;
    double time;         /* the slowest process's timed section */
    double comm;         /* mean over processes of their communication time in it */
    double phase[NPB_MAX_PHASES]; /* the same per phase of npb_account() */
};

/* Prints the report of a finished run (pid 0 does). impl is "bsp" or "mpi". */
void npb_print_result(const struct npb_result *r, const char *impl);

#endif
