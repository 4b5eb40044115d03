/* FT, the 3-D FFT kernel: class parameters and the exchange ft.c asks of the library. */
#ifndef NPB_FT_H
#define NPB_FT_H

#include "../common/npb.h"

/* NPB 3 problem sizes: an NX x NY x NZ complex array, NITER time steps. */
#if CLASS == 'S'
#define NX 64
#define NY 64
#define NZ 64
#define NITER 6
#elif CLASS == 'W'
#define NX 128
#define NY 128
#define NZ 32
#define NITER 6
#elif CLASS == 'A'
#define NX 256
#define NY 256
#define NZ 128
#define NITER 6
#else
#define NX 512
#define NY 256
#define NZ 256
#define NITER 20
#endif

typedef struct {
    double re, im;
} dcomplex;

/* Registers the transpose's receive buffer (n complex numbers); collective. */
void ft_comm_init(dcomplex *recv, long n);
/* All-to-all: block q of send (block complex numbers) becomes block me of process q's
 * recv, for every q including this process. */
void ft_comm_alltoall(const dcomplex *send, dcomplex *recv, long block);

#endif
