/*
 * mcbsp-profiling.h: MulticoreBSP for C's profiling interface. bulkwire's statistics are
 * per job (BULKWIRE_STATS=1 prints them at bsp_end), not per named superstep, so the
 * description is accepted and not used.
 */
#ifndef BULKWIRE_MCBSP_PROFILING_H
#define BULKWIRE_MCBSP_PROFILING_H

#ifdef __cplusplus
extern "C" {
#endif

void mcbsp_profiling_set_description(const char *name);

#ifdef __cplusplus
}
#endif

#endif /* BULKWIRE_MCBSP_PROFILING_H */
