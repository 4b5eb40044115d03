/*
 * mcbsp-affinity.h: MulticoreBSP for C's affinity interface, for programs that use it.
 *
 * bulkwire places its processes itself (bsprun --bind, BULKWIRE_BIND: an equal share of
 * the cores each, as mpirun binds), so these settings do not move any process: they are
 * recorded and read back by the getters, which is all a program can observe of them.
 * One setting has an effect: mcbsp_set_maximum_threads(n) makes bsp_nprocs() outside an
 * SPMD section return n, as in MulticoreBSP.
 */
#ifndef BULKWIRE_MCBSP_AFFINITY_H
#define BULKWIRE_MCBSP_AFFINITY_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* How MulticoreBSP pins threads: spread over the cores, packed, or as given. */
enum mcbsp_affinity_mode { SCATTER = 0, COMPACT, MANUAL };

/* How the operating system numbers the hardware threads of a core. */
enum mcbsp_thread_numbering { CONSECUTIVE = 0, WRAPPED };

void mcbsp_set_maximum_threads(size_t max);
void mcbsp_set_affinity_mode(enum mcbsp_affinity_mode mode);
void mcbsp_set_available_cores(size_t num_cores);
void mcbsp_set_threads_per_core(size_t threads_per_core);
void mcbsp_set_thread_numbering(enum mcbsp_thread_numbering numbering);
/* Also sets the maximum number of threads to length and the mode to MANUAL. */
void mcbsp_set_pinning(const size_t *pinning, size_t length);
void mcbsp_set_reserved_cores(const size_t *reserved, size_t length);

/* The values set (the machine's own until set). The arrays are copies for the caller to
 * free(), or NULL when none was set. */
size_t mcbsp_get_maximum_threads(void);
enum mcbsp_affinity_mode mcbsp_get_affinity_mode(void);
size_t mcbsp_get_available_cores(void);
size_t mcbsp_get_threads_per_core(void);
enum mcbsp_thread_numbering mcbsp_get_thread_numbering(void);
size_t *mcbsp_get_pinning(void);
size_t mcbsp_get_reserved_cores_number(void);
size_t *mcbsp_get_reserved_cores(void);

/* The defaults the getters start from. */
extern enum mcbsp_affinity_mode MCBSP_DEFAULT_AFFINITY;
extern size_t MCBSP_DEFAULT_THREADS_PER_CORE;
extern enum mcbsp_thread_numbering MCBSP_DEFAULT_THREAD_NUMBERING;

#ifdef __cplusplus
}
#endif

#endif /* BULKWIRE_MCBSP_AFFINITY_H */
