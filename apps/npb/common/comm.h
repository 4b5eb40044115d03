/*
 * What every kernel needs from the communication library, implemented twice: over
 * BSPlib (comm_bsp.c) and over MPI (comm_mpi.c). Each kernel adds its own exchanges in
 * <kernel>_bsp.c and <kernel>_mpi.c.
 */
#ifndef NPB_COMM_H
#define NPB_COMM_H

#include "npb.h"

#if defined(__GNUC__) || defined(__clang__)
#define NPB_NORETURN __attribute__((noreturn))
#define NPB_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define NPB_NORETURN
#define NPB_PRINTF(f, a)
#endif

/* Starts the parallel part. The BSP version runs on bsprun's processes, or, started by
 * itself, on argv[1] processes (default: one per CPU); the MPI version on mpirun's. */
void npb_begin(int argc, char **argv);
int npb_pid(void);
int npb_nprocs(void);
/* The program's name, for messages ("is.S.bsp"). */
const char *npb_program(void);

/* Stops every process; the message (prefixed by the program's name) is printed once. Every
 * process calls it (on conditions all of them evaluate alike). */
void npb_fail(const char *fmt, ...) NPB_NORETURN NPB_PRINTF(1, 2);
/* The same from one process, while the others may be communicating. */
void npb_abort(const char *fmt, ...) NPB_NORETURN NPB_PRINTF(1, 2);

/* Waits for every process (not counted as communication: it only lines up the clocks). */
void npb_barrier(void);

/* all[q * nbytes ...] = process q's `mine`, on every process. At most NPB_GATHER_MAX
 * bytes a process. Counted as communication of `phase`. Like every exchange of the
 * kernels, a process alone only copies: no library call, no communication time. */
#define NPB_GATHER_MAX 8192
void npb_allgather(const char *phase, const void *mine, void *all, int nbytes);

/* Collects every process's account of the timed section into r (r->np, r->time, r->comm,
 * r->phase), prints the report on pid 0 and ends the parallel part. Returns main's exit
 * status on pid 0: 0 when verified, 1 when not. */
int npb_end(struct npb_result *r);
/* npb_end's first half, the same over both libraries: gathers the accounts into r. */
void npb_collect(struct npb_result *r);

#endif
