/*
 * CG: estimates the largest eigenvalue of a sparse symmetric positive definite matrix by
 * inverse iteration, each step solving with 25 conjugate gradient iterations, as
 * specified by NPB (NAS-95-020, NPB 3). The matrix is the sum of NA random sparse outer
 * products (makea); every process generates all the random vectors and keeps the entries
 * of its block. Duplicates are summed in generation order, so every p builds the same
 * matrix. Reductions are gathered and added in process order, so every process of a row
 * holds the same vectors and the BSP and MPI versions compute the same numbers.
 * Any p that is a power of two.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/comm.h"
#include "cg.h"

/* NPB 3 reference value of zeta (CG's zeta_verify_value). */
#if CLASS == 'S'
#define ZETA_REF 8.5971775078648
#elif CLASS == 'W'
#define ZETA_REF 10.362595087124
#elif CLASS == 'A'
#define ZETA_REF 17.130235054029
#else
#define ZETA_REF 22.712745482631
#endif

struct cg {
    struct cg_grid g;
    struct cg_plan plan;
    long row0, nrows, col0, ncols;
    long *rowstr;
    int *colidx;
    double *a;
    double *x, *z, *p, *q, *r, *w, *wrecv, *srecv;
};

/* ---- the matrix (makea): entries of this process's block ---- */

struct entry {
    int row, col, seq; /* local row and column; generation order */
    double val;
};

struct entries {
    struct entry *e;
    long n, cap;
};

static void add_entry(struct entries *es, int row, int col, double val) {
    if (es->n == es->cap) {
        es->cap = es->cap ? 2 * es->cap : 1 << 16;
        es->e = realloc(es->e, (size_t)es->cap * sizeof *es->e);
        if (!es->e) npb_abort("cannot hold %ld matrix entries", es->cap);
    }
    es->e[es->n] = (struct entry){row, col, (int)es->n, val};
    es->n++;
}

/* NPB's sprnvc: nz distinct random positions in 1..n (drawn below nn1, a power of two,
 * and redrawn when above n) with random values. */
static void sprnvc(uint64_t *tran, int nz, int nn1, double *v, int *iv) {
    int nzv = 0;
    while (nzv < nz) {
        double vecelt = npb_randlc(tran, NPB_MULT);
        double vecloc = npb_randlc(tran, NPB_MULT);
        int i = (int)(nn1 * vecloc) + 1;
        if (i > NA) continue;
        int seen = 0;
        for (int k = 0; k < nzv; k++) seen |= iv[k] == i;
        if (seen) continue;
        v[nzv] = vecelt;
        iv[nzv++] = i;
    }
}

/* NPB's vecset: position i gets val, appended when absent. */
static void vecset(double *v, int *iv, int *nzv, int i, double val) {
    int set = 0;
    for (int k = 0; k < *nzv; k++)
        if (iv[k] == i) {
            v[k] = val;
            set = 1;
        }
    if (!set) {
        v[*nzv] = val;
        iv[(*nzv)++] = i;
    }
}

/* The outer products size_i v_i v_i^T (plus (RCOND - SHIFT) on the diagonal), entries of
 * rows [row0, row0 + nrows) and columns [col0, col0 + ncols) only. */
static void generate(struct cg *s, struct entries *es) {
    uint64_t tran = 314159265;
    npb_randlc(&tran, NPB_MULT); /* NPB draws zeta's initial value first */
    int nn1 = 1;
    do nn1 *= 2; while (nn1 < NA);
    double size = 1.0, ratio = pow(RCOND, 1.0 / (double)NA);
    double v[NONZER + 1];
    int iv[NONZER + 1];
    for (int i = 0; i < NA; i++) {
        int nzv = NONZER;
        sprnvc(&tran, nzv, nn1, v, iv);
        vecset(v, iv, &nzv, i + 1, 0.5);
        for (int nza = 0; nza < nzv; nza++) {
            long j = iv[nza] - 1;
            if (j < s->row0 || j >= s->row0 + s->nrows) continue;
            double scale = size * v[nza];
            for (int nzrow = 0; nzrow < nzv; nzrow++) {
                long jcol = iv[nzrow] - 1;
                if (jcol < s->col0 || jcol >= s->col0 + s->ncols) continue;
                double va = v[nzrow] * scale;
                if (jcol == j && j == i) va = va + RCOND - SHIFT;
                add_entry(es, (int)(j - s->row0), (int)(jcol - s->col0), va);
            }
        }
        size *= ratio;
    }
}

static int by_col(const void *pa, const void *pb) {
    const struct entry *a = pa, *b = pb;
    if (a->col != b->col) return a->col < b->col ? -1 : 1;
    return (a->seq > b->seq) - (a->seq < b->seq);
}

/* Compressed rows: entries by row, then by column, duplicates summed in generation order. */
static void compress(struct cg *s, struct entries *es) {
    long *start = npb_alloc("the row counts", s->nrows + 1, sizeof(long));
    for (long k = 0; k < es->n; k++) start[es->e[k].row + 1]++;
    for (long i = 0; i < s->nrows; i++) start[i + 1] += start[i];
    struct entry *byrow = npb_alloc("the matrix entries", es->n, sizeof *byrow);
    long *at = npb_alloc("the row positions", s->nrows, sizeof(long));
    memcpy(at, start, s->nrows * sizeof(long));
    for (long k = 0; k < es->n; k++) byrow[at[es->e[k].row]++] = es->e[k];
    free(es->e);
    s->rowstr = npb_alloc("the row starts", s->nrows + 1, sizeof(long));
    s->colidx = npb_alloc("the column indices", es->n, sizeof(int));
    s->a = npb_alloc("the matrix", es->n, sizeof(double));
    long nz = 0;
    for (long i = 0; i < s->nrows; i++) {
        struct entry *row = byrow + start[i];
        long len = start[i + 1] - start[i];
        qsort(row, (size_t)len, sizeof *row, by_col);
        s->rowstr[i] = nz;
        for (long k = 0; k < len; k++) {
            if (k > 0 && row[k].col == row[k - 1].col) {
                s->a[nz - 1] += row[k].val;
            } else {
                s->colidx[nz] = row[k].col;
                s->a[nz++] = row[k].val;
            }
        }
    }
    s->rowstr[s->nrows] = nz;
    free(at);
    free(byrow);
    free(start);
}

/* ---- the grid and the exchange plan ---- */

static long col_start(const struct cg_grid *g, int c) { return npb_part(NA, g->npcols, c); }

static void setup_grid(struct cg *s) {
    struct cg_grid *g = &s->g;
    int l = npb_log2(g->p);
    g->nprows = 1 << (l / 2);
    g->npcols = 1 << (l - l / 2);
    g->ratio = g->npcols / g->nprows;
    g->prow = g->me / g->npcols;
    g->pcol = g->me % g->npcols;
    g->seg = 0;
    for (int c = 0; c < g->npcols; c++) {
        long len = col_start(g, c + 1) - col_start(g, c);
        if (len > g->seg) g->seg = len;
    }
    s->row0 = npb_part(NA, g->nprows, g->prow);
    s->nrows = npb_part(NA, g->nprows, g->prow + 1) - s->row0;
    s->col0 = col_start(g, g->pcol);
    s->ncols = col_start(g, g->pcol + 1) - s->col0;
}

static void setup_plan(struct cg *s) {
    const struct cg_grid *g = &s->g;
    struct cg_plan *pl = &s->plan;
    int n = g->npcols;
    pl->dest = npb_alloc("the plan", n, sizeof(int));
    pl->src = npb_alloc("the plan", n, sizeof(int));
    pl->slot = npb_alloc("the plan", n, sizeof(int));
    pl->off = npb_alloc("the plan", n, sizeof(long));
    pl->len = npb_alloc("the plan", n, sizeof(long));
    for (int h = 0; h < g->ratio; h++)
        for (int r = 0; r < g->nprows; r++) {
            int c = g->ratio * g->prow + h, dest = r * g->npcols + c;
            long off = col_start(g, c) - s->row0, len = col_start(g, c + 1) - col_start(g, c);
            if (dest == g->me) {
                pl->self = 1;
                pl->self_off = off;
                pl->self_len = len;
            } else {
                pl->dest[pl->nsend] = dest;
                pl->off[pl->nsend] = off;
                pl->len[pl->nsend++] = len;
            }
        }
    int from_row = g->pcol / g->ratio;
    for (int c = 0; c < g->npcols; c++) {
        int src = from_row * g->npcols + c;
        if (src == g->me) continue;
        pl->src[pl->nrecv] = src;
        pl->slot[pl->nrecv++] = c;
    }
    pl->rlen = s->ncols;
}

/* ---- the iteration ---- */

/* out = A v: this block's partial products, exchanged and added in column order. */
static void matvec(struct cg *s, const double *v, double *out) {
    const struct cg_grid *g = &s->g;
    for (long i = 0; i < s->nrows; i++) {
        double sum = 0.0;
        for (long k = s->rowstr[i]; k < s->rowstr[i + 1]; k++) sum += s->a[k] * v[s->colidx[k]];
        s->w[i] = sum;
    }
    if (s->plan.self)
        memcpy(s->wrecv + g->pcol * g->seg, s->w + s->plan.self_off,
               s->plan.self_len * sizeof(double));
    if (g->p > 1) cg_comm_matvec(g, &s->plan, s->w, s->wrecv);
    memcpy(out, s->wrecv, s->ncols * sizeof(double));
    for (int c = 1; c < g->npcols; c++) {
        const double *part = s->wrecv + c * g->seg;
        for (long i = 0; i < s->ncols; i++) out[i] += part[i];
    }
}

/* Sums of n <= 2 values over the row, added in column order. */
static void row_sum(struct cg *s, double *v, int n) {
    const struct cg_grid *g = &s->g;
    double all[2 * 64], *a = g->npcols <= 64 ? all : npb_alloc("the row sums", 2L * g->npcols, sizeof(double));
    for (int i = 0; i < n; i++) a[g->pcol * n + i] = v[i];
    if (g->npcols > 1) cg_comm_row(g, v, a, n);
    for (int i = 0; i < n; i++) {
        v[i] = a[i];
        for (int c = 1; c < g->npcols; c++) v[i] += a[c * n + i];
    }
    if (a != all) free(a);
}

static double dot(const double *a, const double *b, long n) {
    double sum = 0.0;
    for (long i = 0; i < n; i++) sum += a[i] * b[i];
    return sum;
}

/* 25 conjugate gradient iterations on A z = x; returns ||x - A z||. */
static double conj_grad(struct cg *s) {
    long n = s->ncols;
    double *x = s->x, *z = s->z, *p = s->p, *q = s->q, *r = s->r;
    for (long j = 0; j < n; j++) {
        q[j] = z[j] = 0.0;
        r[j] = p[j] = x[j];
    }
    double rho = dot(r, r, n);
    row_sum(s, &rho, 1);
    for (int it = 0; it < CGITMAX; it++) {
        matvec(s, p, q);
        double d = dot(p, q, n);
        row_sum(s, &d, 1);
        double alpha = rho / d, rho0 = rho;
        for (long j = 0; j < n; j++) {
            z[j] += alpha * p[j];
            r[j] -= alpha * q[j];
        }
        rho = dot(r, r, n);
        row_sum(s, &rho, 1);
        double beta = rho / rho0;
        for (long j = 0; j < n; j++) p[j] = r[j] + beta * p[j];
    }
    matvec(s, z, r);
    double sum = 0.0;
    for (long j = 0; j < n; j++) sum += (x[j] - r[j]) * (x[j] - r[j]);
    row_sum(s, &sum, 1);
    return sqrt(sum);
}

/* One step of the inverse iteration: returns zeta, x becomes z / ||z||. */
static double step(struct cg *s, double *rnorm) {
    *rnorm = conj_grad(s);
    double t[2] = {dot(s->x, s->z, s->ncols), dot(s->z, s->z, s->ncols)};
    row_sum(s, t, 2);
    double scale = 1.0 / sqrt(t[1]);
    for (long j = 0; j < s->ncols; j++) s->x[j] = scale * s->z[j];
    return SHIFT + 1.0 / t[0];
}

static void setup(struct cg *s) {
    setup_grid(s);
    setup_plan(s);
    struct entries es = {0};
    generate(s, &es);
    compress(s, &es);
    long n = s->ncols;
    s->x = npb_alloc("the vectors", 5 * n, sizeof(double));
    s->z = s->x + n;
    s->p = s->z + n;
    s->q = s->p + n;
    s->r = s->q + n;
    s->w = npb_alloc("the partial products", s->nrows, sizeof(double));
    s->wrecv = npb_alloc("the receive slots", s->g.npcols * s->g.seg, sizeof(double));
    s->srecv = npb_alloc("the row sums", 2L * s->g.npcols, sizeof(double));
    cg_comm_init(&s->g, s->wrecv, s->srecv);
}

int main(int argc, char **argv) {
    npb_begin(argc, argv);
    struct cg s = {.g = {.p = npb_nprocs(), .me = npb_pid()}};
    if (!npb_is_pow2(s.g.p))
        npb_fail("CG runs on a power-of-two number of processes (1, 2, 4, 8, ...); got p = %d",
                 s.g.p);
    if (s.g.me == 0) {
        printf("\n\n NAS Parallel Benchmarks (bulkwire, NPB 3 specification) -- CG Benchmark\n\n");
        printf(" Size: %11d\n Iterations: %5d\n Number of processes: %5d\n\n", NA, NITER, s.g.p);
    }
    setup(&s);
    double rnorm, zeta;
    /* One untimed step touches every page, as NPB does; then x starts again at ones. */
    for (long j = 0; j < s.ncols; j++) s.x[j] = 1.0;
    step(&s, &rnorm);
    for (long j = 0; j < s.ncols; j++) s.x[j] = 1.0;
    npb_barrier();
    npb_timed_begin();
    for (int it = 1; it <= NITER; it++) {
        zeta = step(&s, &rnorm);
        if (s.g.me == 0) {
            if (it == 1) printf("   iteration           ||r||                 zeta\n");
            printf("    %5d       %20.14e%20.13e\n", it, rnorm, zeta);
        }
    }
    npb_timed_end();
    double err = fabs(zeta - ZETA_REF) / ZETA_REF;
    if (s.g.me == 0) {
        printf(" Benchmark completed\n");
        printf(" Zeta is    %20.13e\n Error is   %20.13e\n", zeta, err);
    }
    double nnz = (double)NONZER * (NONZER + 1);
    struct npb_result r = {
        .kernel = "CG", .n1 = NA, .niter = NITER, .optype = "floating point",
        .mops_work = 2.0 * NITER * NA * (3.0 + nnz + 25.0 * (5.0 + nnz) + 3.0) / 1e6,
        .verified = err <= 1e-10,
    };
    return npb_end(&r);
}
