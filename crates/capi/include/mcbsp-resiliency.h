/*
 * mcbsp-resiliency.h: MulticoreBSP for C's checkpointing interface (DMTCP there). bulkwire
 * does not checkpoint: mcbsp_checkpoint is a bsp_sync (the superstep boundary a
 * checkpoint is taken at), the frequencies are recorded and read back, and enabling or
 * disabling automatic checkpoints changes nothing.
 */
#ifndef BULKWIRE_MCBSP_RESILIENCY_H
#define BULKWIRE_MCBSP_RESILIENCY_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

void mcbsp_checkpoint(void);
void mcbsp_enable_checkpoints(void);
void mcbsp_disable_checkpoints(void);
void mcbsp_set_checkpoint_frequency(size_t frequency);
size_t mcbsp_get_checkpoint_frequency(void);
void mcbsp_set_safe_checkpoint_frequency(size_t frequency);
size_t mcbsp_get_safe_checkpoint_frequency(void);

#ifdef __cplusplus
}
#endif

#endif /* BULKWIRE_MCBSP_RESILIENCY_H */
