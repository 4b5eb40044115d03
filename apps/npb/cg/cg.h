/* CG, the conjugate gradient kernel: class parameters, the process grid and the exchanges
 * cg.c asks of the library. */
#ifndef NPB_CG_H
#define NPB_CG_H

#include "../common/npb.h"

/* NPB 3 problem sizes. */
#if CLASS == 'S'
#define NA 1400
#define NONZER 7
#define NITER 15
#define SHIFT 10.0
#elif CLASS == 'W'
#define NA 7000
#define NONZER 8
#define NITER 15
#define SHIFT 12.0
#elif CLASS == 'A'
#define NA 14000
#define NONZER 11
#define NITER 15
#define SHIFT 20.0
#else
#define NA 75000
#define NONZER 13
#define NITER 75
#define SHIFT 60.0
#endif
#define RCOND 0.1
#define CGITMAX 25

/* The matrix is cut into nprows x npcols blocks (npcols = nprows or 2 nprows, as in NPB's
 * MPI version); process (prow, pcol) = prow npcols + pcol holds block rows R_prow and
 * columns C_pcol, and the vectors' C_pcol part (the same on every process of a column). */
struct cg_grid {
    int p, me, nprows, npcols, ratio, prow, pcol;
    long seg; /* the longest column part: the size of a receive slot */
};

/* Where the partial products of one matrix-vector product go: process (prow, c) sends
 * the C_c' part of its partial sum over R_prow to every process of column c' (for the c'
 * whose parts make up R_prow); each process receives one part from each process of row
 * pcol / ratio, into slot c (the sender's column), and adds them in column order. */
struct cg_plan {
    int nsend, nrecv;
    int *dest;          /* nsend processes */
    long *off, *len;    /* what of the partial sum goes to each */
    int *src, *slot;    /* nrecv processes and the slots they fill */
    long rlen;          /* doubles in each received part */
    int self;           /* 1 if this process sends a part to itself */
    long self_off, self_len;
};

/* Registers the receive areas (npcols slots of g->seg doubles; npcols slots of 2 doubles
 * for the row sums); collective. */
void cg_comm_init(const struct cg_grid *g, double *wrecv, double *srecv);
/* The matrix-vector exchange of the plan, from w into the receive slots (the self part is
 * copied by cg.c). */
void cg_comm_matvec(const struct cg_grid *g, const struct cg_plan *pl, const double *w,
                    double *wrecv);
/* all[c n + i] = mine[i] of process (prow, c), for every c but pcol (cg.c fills that). */
void cg_comm_row(const struct cg_grid *g, const double *mine, double *all, int n);

#endif
