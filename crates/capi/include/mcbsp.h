/*
 * mcbsp.h: BSPlib for bulkwire in MulticoreBSP for C's dialect, under the header name its
 * version 1 programs include (version 2 programs include bsp.h and are compiled with
 * bspcc --mcbsp, which selects the same dialect). Unsigned pids, size_t offsets and
 * sizes, bsp_direct_get, the hp primitives, and MulticoreBSP's documented behaviour where
 * it differs from the int dialect: see bsp.h. With MCBSP_COMPATIBILITY_MODE defined it
 * gives the int dialect instead, as MulticoreBSP's header does.
 *
 * The affinity, profiling and checkpointing calls are in mcbsp-affinity.h,
 * mcbsp-profiling.h and mcbsp-resiliency.h.
 */
#ifndef BULKWIRE_MCBSP_H
#define BULKWIRE_MCBSP_H

#ifndef MCBSP_COMPATIBILITY_MODE
#ifndef BULKWIRE_MCBSP
#define BULKWIRE_MCBSP 1
#endif
#endif

#include "bsp.h"

#endif /* BULKWIRE_MCBSP_H */
