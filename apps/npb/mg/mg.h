/* MG, the multigrid kernel: class parameters and the exchanges mg.c asks of the library. */
#ifndef NPB_MG_H
#define NPB_MG_H

#include "../common/npb.h"

/* NPB 3 problem sizes: an NX^3 periodic grid, NIT V-cycles. */
#if CLASS == 'S'
#define NX 32
#define NIT 4
#elif CLASS == 'W'
#define NX 128
#define NIT 4
#elif CLASS == 'A'
#define NX 256
#define NIT 4
#else
#define NX 256
#define NIT 20
#endif

/* Registers the stacks of u and r (every level's grid, sizes in doubles); collective. */
void mg_comm_init(double *u, long usize, double *r, long rsize);

/* The ghost planes of one level's slab (plane = doubles a plane, m3 planes with the two
 * ghosts, at `off` in `stack`, u or r): plane m3 - 2 goes to `up` into its plane 0, plane 1
 * to `down` into its plane m3 - 1. */
void mg_comm_ghosts(double *stack, long off, long plane, long m3, int up, int down);

/* A replicated level from every process's planes: process q computed planes
 * [1 + q nl, 1 + (q + 1) nl) of the grid at `off` in `stack`; afterwards every process
 * has all of them. */
void mg_comm_gather(double *stack, long off, long plane, long nl);

#endif
