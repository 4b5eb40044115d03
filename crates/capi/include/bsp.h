/*
 * bsp.h: BSPlib for bulkwire, in the dialect the program was written for.
 *
 * Compile and link with bspcc (bspcxx for C++), run with bsprun (or run ./program
 * directly: bsp_begin(P) then starts P processes itself):
 *
 *     bspcc -O2 prog.c -o prog
 *     bsprun -n 4 ./prog
 *
 * Dialects (one library serves all; each has its own symbols for what differs, so no
 * program is ever called with another width than it was compiled for):
 *   - By default, the int dialect of the Oxford BSP toolset and BSPonMPI 1.1: int pids,
 *     offsets and sizes, plus BSPonMPI's dialect-neutral types bsp_pid_t, bsp_size_t and
 *     bsp_nprocs_t (int here), so programs written once for both build unchanged.
 *   - With BULKWIRE_MCBSP defined (bspcc --mcbsp; also BSPonMPI's BSPONMPI_MCBSP_COMPAT),
 *     MulticoreBSP for C 2.0's: unsigned pids, size_t offsets and sizes, bsp_direct_get,
 *     and its documented behaviour (see below). Its own header name, mcbsp.h, selects it
 *     too; with MCBSP_COMPATIBILITY_MODE defined, mcbsp.h gives the int dialect, as
 *     MulticoreBSP's does.
 *
 * Semantics (the BSPlib standard, Hill et al. 1998):
 *   - A superstep ends at bsp_sync. Puts, gets and sends take effect then: puts are
 *     written and gets read at the end of the superstep, every get reading before any
 *     put of the superstep writes. bsp_put copies its source at the call; bsp_hpput may
 *     read it at any time until the sync. One process's puts land in the order it made
 *     them; its gets' results land after every put, in the order it made the gets
 *     (whichever processes they read).
 *   - bsp_push_reg/bsp_pop_reg are collective (same calls, same order, every process)
 *     and take effect at the next bsp_sync: a popped area still serves the superstep's
 *     puts and gets. A newer registration of an address shadows the older until popped.
 *     NULL may be registered (with size 0, by processes without the data); a pop of NULL
 *     pops what the processes that name an address pop (every process popping NULL: the
 *     newest registration all made with NULL).
 *   - A put or get of 0 bytes does nothing, whatever its other arguments.
 *   - BSMP messages sent in a superstep are readable in the next one only, in no
 *     particular order; unread ones are dropped at the following sync.
 *   - bsp_set_tagsize is collective, takes effect at the next superstep and returns
 *     (through its argument) the size the previous call of the superstep asked for, or
 *     the current size.
 *   - After bsp_end only process 0 continues; the others exit with status 0. A later
 *     bsp_begin starts a new SPMD section on this host: its processes run the function
 *     last given to bsp_init. Inside a section, bsp_init then bsp_begin(Q) begins a
 *     nested section of Q processes with the caller as pid 0 (MulticoreBSP's
 *     hierarchical runs); its bsp_end returns the caller to the outer section.
 *   - bsp_nprocs may be called anywhere (before bsp_begin: how many processes a
 *     computation begun now would have); every other call outside bsp_begin ... bsp_end
 *     ends the program with a message naming it.
 *   - Any misuse (an address that is not registered, a put or get outside the remote
 *     area, registrations that differ between processes, one process in bsp_end while
 *     others are in bsp_sync, negative sizes...) aborts the job with a message naming the
 *     call.
 *
 * MulticoreBSP's dialect differs in: bsp_get_tag's status and bsp_hpmove's result for an
 * empty queue are (bsp_size_t)-1 (SIZE_MAX); bsp_move on an empty queue does nothing;
 * bsp_qsize accepts NULL for the byte count; bsp_direct_get reads the remote area at
 * once; the hp primitives are always available (MCBSP_ENABLE_HP_DIRECTIVES).
 *
 * Environment: BULKWIRE_PROTOCOL (holefill, gbn, utopia), BULKWIRE_FAULTS,
 * BULKWIRE_BSP_SCHEDULE (latin|pid), BULKWIRE_BSP_RATE, BULKWIRE_BSP_CHUNK,
 * BULKWIRE_STATS=1 (packet statistics at bsp_end). See docs/bsp.md.
 */
#ifndef BULKWIRE_BSP_H
#define BULKWIRE_BSP_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

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

#if defined(__cplusplus) || (defined(__STDC_VERSION__) && __STDC_VERSION__ >= 199901L)
#define BULKWIRE_BSP_INLINE static inline
#else
#define BULKWIRE_BSP_INLINE static __inline__
#endif

/* Identifies the library. */
#define BULKWIRE_BSPLIB 1

/* ---- Calls with the same signature in every dialect. ---- */

/* Ends the SPMD section: only process 0 returns. */
void bsp_end(void);
/* Names the function holding the SPMD section (call first thing in main, and again
 * before a later section runs another function). */
void bsp_init(void (*spmd_part)(void), int argc, char **argv);

/* Stops every process; the message is printed once. bsp_abort_va is BSPonMPI's name of
 * bsp_vabort. */
void bsp_abort(const char *format, ...) BSP_NORETURN BSP_PRINTF(1, 2);
void bsp_vabort(const char *format, va_list args) BSP_NORETURN BSP_PRINTF(1, 0);
void bsp_abort_va(const char *format, va_list args) BSP_NORETURN BSP_PRINTF(1, 0);

/* Seconds since bsp_begin. */
double bsp_time(void);
/* Ends the superstep. */
void bsp_sync(void);

/* bulkwire extension: bspbench's BSP parameters of this machine, measured collectively
 * by every process: g (microseconds per 8-byte word of an h-relation of single-word puts,
 * h = 0..hmax) and l (microseconds) by least squares, and the time of an empty superstep.
 * Each time is the median of 5 batches of `iters` supersteps. Any pointer may be NULL. */
void bulkwire_bsp_bench(int hmax, int iters, double *g_us, double *l_us, double *empty_us);

/* ---- MulticoreBSP for C's functions, under BSPonMPI's names and types. The mcbsp
 * dialect's bsp_* are these. ---- */

typedef unsigned int mcbsp_pid_t;
typedef unsigned int mcbsp_nprocs_t;
typedef size_t mcbsp_size_t;

void mcbsp_begin(mcbsp_pid_t maxprocs);
void mcbsp_end(void);
void mcbsp_init(void (*spmd_part)(void), int argc, char **argv);
void mcbsp_abort(const char *format, ...) BSP_NORETURN BSP_PRINTF(1, 2);
void mcbsp_vabort(const char *format, va_list args) BSP_NORETURN BSP_PRINTF(1, 0);
mcbsp_pid_t mcbsp_nprocs(void);
mcbsp_pid_t mcbsp_pid(void);
double mcbsp_time(void);
void mcbsp_sync(void);
void mcbsp_push_reg(const void *address, mcbsp_size_t size);
void mcbsp_pop_reg(const void *address);
void mcbsp_put(mcbsp_pid_t pid, const void *src, const void *dst, mcbsp_size_t offset,
               mcbsp_size_t size);
void mcbsp_hpput(mcbsp_pid_t pid, const void *src, const void *dst, mcbsp_size_t offset,
                 mcbsp_size_t size);
void mcbsp_get(mcbsp_pid_t pid, const void *src, mcbsp_size_t offset, void *dst,
               mcbsp_size_t size);
void mcbsp_hpget(mcbsp_pid_t pid, const void *src, mcbsp_size_t offset, void *dst,
                 mcbsp_size_t size);
/* Reads pid's registered src at offset now (not at the sync) into dst. */
void mcbsp_direct_get(mcbsp_pid_t pid, const void *src, mcbsp_size_t offset, void *dst,
                      mcbsp_size_t size);
void mcbsp_set_tagsize(mcbsp_size_t *size);
void mcbsp_send(mcbsp_pid_t pid, const void *tag, const void *payload, mcbsp_size_t size);
void mcbsp_hpsend(mcbsp_pid_t pid, const void *tag, const void *payload, mcbsp_size_t size);
void mcbsp_qsize(mcbsp_nprocs_t *packets, mcbsp_size_t *accumulated_size);
void mcbsp_get_tag(mcbsp_size_t *status, void *tag);
void mcbsp_move(void *payload, mcbsp_size_t max_copy_size);
mcbsp_size_t mcbsp_hpmove(void **p_tag, void **p_payload);

#if (defined(BULKWIRE_MCBSP) || defined(BSPONMPI_MCBSP_COMPAT)) &&                         \
    !defined(MCBSP_COMPATIBILITY_MODE)

/* ---- MulticoreBSP for C's dialect. ---- */

#define BULKWIRE_BSP_DIALECT_MCBSP 1
/* What MulticoreBSP's own headers define, for programs that test for them. */
#ifndef _H_MCBSP
#define _H_MCBSP
#endif
#ifndef MCBSP_ENABLE_HP_DIRECTIVES
#define MCBSP_ENABLE_HP_DIRECTIVES
#endif
#ifndef MCBSP_ALLOW_MULTIPLE_REGS
#define MCBSP_ALLOW_MULTIPLE_REGS
#endif
#define MCBSP_PROCESSOR_INDEX_DATATYPE unsigned int
#define MCBSP_NUMMSG_TYPE unsigned int
#define MCBSP_BYTESIZE_TYPE size_t

typedef unsigned int bsp_pid_t;
typedef unsigned int bsp_nprocs_t;
typedef size_t bsp_size_t;

BULKWIRE_BSP_INLINE void bsp_begin(bsp_pid_t maxprocs) { mcbsp_begin(maxprocs); }
BULKWIRE_BSP_INLINE bsp_pid_t bsp_nprocs(void) { return mcbsp_nprocs(); }
BULKWIRE_BSP_INLINE bsp_pid_t bsp_pid(void) { return mcbsp_pid(); }
BULKWIRE_BSP_INLINE void bsp_push_reg(const void *address, bsp_size_t size) {
    mcbsp_push_reg(address, size);
}
BULKWIRE_BSP_INLINE void bsp_pop_reg(const void *address) { mcbsp_pop_reg(address); }
BULKWIRE_BSP_INLINE void bsp_put(bsp_pid_t pid, const void *src, const void *dst,
                                 bsp_size_t offset, bsp_size_t size) {
    mcbsp_put(pid, src, dst, offset, size);
}
BULKWIRE_BSP_INLINE void bsp_hpput(bsp_pid_t pid, const void *src, const void *dst,
                                   bsp_size_t offset, bsp_size_t size) {
    mcbsp_hpput(pid, src, dst, offset, size);
}
BULKWIRE_BSP_INLINE void bsp_get(bsp_pid_t pid, const void *src, bsp_size_t offset,
                                 void *dst, bsp_size_t size) {
    mcbsp_get(pid, src, offset, dst, size);
}
BULKWIRE_BSP_INLINE void bsp_hpget(bsp_pid_t pid, const void *src, bsp_size_t offset,
                                   void *dst, bsp_size_t size) {
    mcbsp_hpget(pid, src, offset, dst, size);
}
BULKWIRE_BSP_INLINE void bsp_direct_get(bsp_pid_t pid, const void *src, bsp_size_t offset,
                                        void *dst, bsp_size_t size) {
    mcbsp_direct_get(pid, src, offset, dst, size);
}
BULKWIRE_BSP_INLINE void bsp_set_tagsize(bsp_size_t *size) { mcbsp_set_tagsize(size); }
BULKWIRE_BSP_INLINE void bsp_send(bsp_pid_t pid, const void *tag, const void *payload,
                                  bsp_size_t size) {
    mcbsp_send(pid, tag, payload, size);
}
BULKWIRE_BSP_INLINE void bsp_hpsend(bsp_pid_t pid, const void *tag, const void *payload,
                                    bsp_size_t size) {
    mcbsp_hpsend(pid, tag, payload, size);
}
BULKWIRE_BSP_INLINE void bsp_qsize(bsp_nprocs_t *packets, bsp_size_t *accumulated_size) {
    mcbsp_qsize(packets, accumulated_size);
}
BULKWIRE_BSP_INLINE void bsp_get_tag(bsp_size_t *status, void *tag) {
    mcbsp_get_tag(status, tag);
}
BULKWIRE_BSP_INLINE void bsp_move(void *payload, bsp_size_t max_copy_size) {
    mcbsp_move(payload, max_copy_size);
}
BULKWIRE_BSP_INLINE bsp_size_t bsp_hpmove(void **p_tag, void **p_payload) {
    return mcbsp_hpmove(p_tag, p_payload);
}

#else

/* ---- The int dialect (Oxford BSP toolset, BSPonMPI 1.1). ---- */

#define BSPLIB_INT_DIALECT 1
/* What BSPonMPI's header defines: programs that supply the dialect-neutral types
 * themselves unless it is defined must not redefine them here. */
#ifndef BSPONMPI_BSP_H
#define BSPONMPI_BSP_H
#endif

typedef int bsp_pid_t;
typedef int bsp_nprocs_t;
typedef int bsp_size_t;

/* Starts the SPMD part with (at most) maxprocs processes. */
void bsp_begin(bsp_pid_t maxprocs);

/* Number of processes (before bsp_begin: how many are available), this one's id. */
bsp_pid_t bsp_nprocs(void);
bsp_pid_t bsp_pid(void);

/* DRMA. */
void bsp_push_reg(const void *ident, bsp_size_t size);
void bsp_pop_reg(const void *ident);
void bsp_put(bsp_pid_t pid, const void *src, void *dst, bsp_size_t offset, bsp_size_t nbytes);
void bsp_hpput(bsp_pid_t pid, const void *src, void *dst, bsp_size_t offset,
               bsp_size_t nbytes);
void bsp_get(bsp_pid_t pid, const void *src, bsp_size_t offset, void *dst, bsp_size_t nbytes);
void bsp_hpget(bsp_pid_t pid, const void *src, bsp_size_t offset, void *dst,
               bsp_size_t nbytes);

/* BSMP. bsp_get_tag's status is -1 and bsp_hpmove returns -1 when the queue is empty;
 * bsp_move on an empty queue is a misuse. */
void bsp_set_tagsize(bsp_size_t *tag_nbytes);
void bsp_send(bsp_pid_t pid, const void *tag, const void *payload, bsp_size_t payload_nbytes);
void bsp_hpsend(bsp_pid_t pid, const void *tag, const void *payload,
                bsp_size_t payload_nbytes);
void bsp_qsize(bsp_nprocs_t *nmessages, bsp_size_t *accum_nbytes);
void bsp_get_tag(bsp_size_t *status, void *tag);
void bsp_move(void *payload, bsp_size_t reception_nbytes);
bsp_size_t bsp_hpmove(void **tag_ptr, void **payload_ptr);

#endif

#ifdef __cplusplus
}
#endif

#endif /* BULKWIRE_BSP_H */
