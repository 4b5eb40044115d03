/* EP, the embarrassingly parallel kernel: class parameters and its one exchange. */
#ifndef NPB_EP_H
#define NPB_EP_H

#include "../common/npb.h"

/* NPB 3 problem sizes: 2^(M+1) uniform random numbers. */
#if CLASS == 'S'
#define M 24
#elif CLASS == 'W'
#define M 25
#elif CLASS == 'A'
#define M 28
#else
#define M 30
#endif

#define MK 16               /* log2 of a batch of pairs */
#define NK (1L << MK)
#define NN (1L << (M - MK)) /* batches */
#define NQ 10               /* annuli counted */

#endif
