/*
 * bsp.h: BSPlib for bulkwire, the int dialect of the Oxford BSP toolset and BSPonMPI.
 *
 * Compile and link with bspcc, run with bsprun (or run ./program directly: bsp_begin(P)
 * then starts P processes itself):
 *
 *     bspcc -O2 prog.c -o prog
 *     bsprun -n 4 ./prog
 *
 * Semantics (the BSPlib standard, Hill et al. 1998):
 *   - A superstep ends at bsp_sync. Puts, gets and sends take effect then: puts are
 *     written and gets read at the end of the superstep, every get reading before any
 *     put of the superstep writes. bsp_put copies its source at the call; bsp_hpput may
 *     read it at any time until the sync.
 *   - bsp_push_reg/bsp_pop_reg are collective (same calls, same order, every process)
 *     and take effect at the next bsp_sync. A newer registration of an address shadows
 *     the older until popped. NULL with size 0 may be registered.
 *   - BSMP messages sent in a superstep are readable in the next one only, in no
 *     particular order; unread ones are dropped at the following sync.
 *   - bsp_set_tagsize is collective, takes effect at the next superstep and returns
 *     (through its argument) the previous size.
 *   - After bsp_end only process 0 continues; the others exit with status 0.
 *   - Any misuse (an address that is not registered, a put or get outside the remote
 *     area, registrations that differ between processes, one process in bsp_end while
 *     others are in bsp_sync, negative sizes...) aborts the job with a message naming the
 *     call.
 *
 * Environment: BULKWIRE_PROTOCOL (holefill, gbn, utopia), BULKWIRE_FAULTS,
 * BULKWIRE_BSP_SCHEDULE (latin|pid), BULKWIRE_BSP_RATE, BULKWIRE_BSP_CHUNK,
 * BULKWIRE_STATS=1 (packet statistics at bsp_end). See docs/bsp.md.
 */
#ifndef BULKWIRE_BSP_H
#define BULKWIRE_BSP_H

#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#define BSP_NORETURN __attribute__((noreturn))
#define BSP_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define BSP_NORETURN
#define BSP_PRINTF(f, a)
#endif

/* Identifies the library and its dialect. */
#define BULKWIRE_BSPLIB 1
#define BSPLIB_INT_DIALECT 1

/* Starts the SPMD part with (at most) maxprocs processes. */
void bsp_begin(int maxprocs);
/* Ends it: only process 0 returns. */
void bsp_end(void);
/* For an SPMD part in a function other than main: call first thing in main. */
void bsp_init(void (*spmd_part)(void), int argc, char **argv);

/* Stops every process; the message is printed once. */
void bsp_abort(const char *format, ...) BSP_NORETURN BSP_PRINTF(1, 2);
void bsp_vabort(const char *format, va_list args) BSP_NORETURN BSP_PRINTF(1, 0);

/* Number of processes (before bsp_begin: how many are available), this one's id,
 * seconds since bsp_begin. */
int bsp_nprocs(void);
int bsp_pid(void);
double bsp_time(void);

/* Ends the superstep. */
void bsp_sync(void);

/* DRMA. */
void bsp_push_reg(const void *ident, int size);
void bsp_pop_reg(const void *ident);
void bsp_put(int pid, const void *src, void *dst, int offset, int nbytes);
void bsp_hpput(int pid, const void *src, void *dst, int offset, int nbytes);
void bsp_get(int pid, const void *src, int offset, void *dst, int nbytes);
void bsp_hpget(int pid, const void *src, int offset, void *dst, int nbytes);

/* BSMP. */
void bsp_set_tagsize(int *tag_nbytes);
void bsp_send(int pid, const void *tag, const void *payload, int payload_nbytes);
void bsp_hpsend(int pid, const void *tag, const void *payload, int payload_nbytes);
void bsp_qsize(int *nmessages, int *accum_nbytes);
void bsp_get_tag(int *status, void *tag);
void bsp_move(void *payload, int reception_nbytes);
int bsp_hpmove(void **tag_ptr, void **payload_ptr);

/* bulkwire extension: bspbench's BSP parameters of this machine, measured collectively
 * by every process: g (microseconds per 8-byte word of an h-relation of single-word puts,
 * h = 0..hmax) and l (microseconds) by least squares, and the time of an empty superstep.
 * Each time is the median of 5 batches of `iters` supersteps. Any pointer may be NULL. */
void bulkwire_bsp_bench(int hmax, int iters, double *g_us, double *l_us, double *empty_us);

#ifdef __cplusplus
}
#endif

#endif /* BULKWIRE_BSP_H */
