/*
 * MG: NIT V-cycles of a multigrid solver for the 3-D Poisson equation on a periodic NX^3
 * grid, from the operators A, P, Q and S of the NPB specification (NAS-95-020, NPB 3);
 * the right-hand side is +1 at the 10 largest and -1 at the 10 smallest of NPB's random
 * numbers over the grid, 0 elsewhere.
 *
 * Decomposition: slabs of planes (the slowest index, i3). Level k (2^k points a side) is
 * cut into p slabs as long as each has at least two planes (k >= kd); each relaxation
 * then exchanges one ghost plane with each neighbour. The coarser levels are small: each
 * process computes its planes of level kd - 1, every process gathers them, and the levels
 * below are computed whole by every process, without communication. Every point is
 * computed by the same formula in the same order at any p, so only the norm's sum (added
 * in process order) depends on p. Any p that is a power of two up to NX / 2.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/comm.h"
#include "mg.h"

/* NPB 3 reference values of the residual's L2 norm (MG's verify_value). */
#if CLASS == 'S'
#define RNM2_REF 0.5307707005734e-04
#elif CLASS == 'W'
#define RNM2_REF 0.6467329375339e-05
#elif CLASS == 'A'
#define RNM2_REF 0.2433365309069e-05
#else
#define RNM2_REF 0.1800564401355e-05
#endif

#define MAXLEVEL 16
#define MM 10 /* points of each sign in the right-hand side */

#define IX(m1, m2, i3, i2, i1) ((((long)(i3) * (m2)) + (i2)) * (m1) + (i1))

struct level {
    long n;          /* points a side, 2^k */
    int full;        /* held whole by every process */
    long g0, nl;     /* first plane held, planes held */
    long m1, m2, m3; /* with ghosts */
    long off;        /* in the u and r stacks */
};

struct mg {
    int p, me, lt, kd;
    struct level lv[MAXLEVEL];
    double *u, *r, *v;
    double a[4], c[4];
    double *w1, *w2, *w3; /* lines */
};

static long plane_of(const struct level *l) { return l->m1 * l->m2; }
static long size_of(const struct level *l) { return plane_of(l) * l->m3; }

/* ---- the operators, on a block of planes with one ghost plane each side ---- */

/* r = v - A u (NPB's resid; a[1] = 0). */
static void resid(struct mg *s, const double *u, const double *v, double *r, const struct level *l) {
    long m1 = l->m1, m2 = l->m2;
    double *u1 = s->w1, *u2 = s->w2;
    const double *a = s->a;
    for (long i3 = 1; i3 < l->m3 - 1; i3++)
        for (long i2 = 1; i2 < m2 - 1; i2++) {
            for (long i1 = 0; i1 < m1; i1++) {
                u1[i1] = u[IX(m1, m2, i3, i2 - 1, i1)] + u[IX(m1, m2, i3, i2 + 1, i1)] +
                         u[IX(m1, m2, i3 - 1, i2, i1)] + u[IX(m1, m2, i3 + 1, i2, i1)];
                u2[i1] = u[IX(m1, m2, i3 - 1, i2 - 1, i1)] + u[IX(m1, m2, i3 - 1, i2 + 1, i1)] +
                         u[IX(m1, m2, i3 + 1, i2 - 1, i1)] + u[IX(m1, m2, i3 + 1, i2 + 1, i1)];
            }
            for (long i1 = 1; i1 < m1 - 1; i1++) {
                long at = IX(m1, m2, i3, i2, i1);
                r[at] = v[at] - a[0] * u[at] - a[2] * (u2[i1] + u1[i1 - 1] + u1[i1 + 1]) -
                        a[3] * (u2[i1 - 1] + u2[i1 + 1]);
            }
        }
}

/* u = u + C r, the smoother (NPB's psinv; c[3] = 0). */
static void psinv(struct mg *s, const double *r, double *u, const struct level *l) {
    long m1 = l->m1, m2 = l->m2;
    double *r1 = s->w1, *r2 = s->w2;
    const double *c = s->c;
    for (long i3 = 1; i3 < l->m3 - 1; i3++)
        for (long i2 = 1; i2 < m2 - 1; i2++) {
            for (long i1 = 0; i1 < m1; i1++) {
                r1[i1] = r[IX(m1, m2, i3, i2 - 1, i1)] + r[IX(m1, m2, i3, i2 + 1, i1)] +
                         r[IX(m1, m2, i3 - 1, i2, i1)] + r[IX(m1, m2, i3 + 1, i2, i1)];
                r2[i1] = r[IX(m1, m2, i3 - 1, i2 - 1, i1)] + r[IX(m1, m2, i3 - 1, i2 + 1, i1)] +
                         r[IX(m1, m2, i3 + 1, i2 - 1, i1)] + r[IX(m1, m2, i3 + 1, i2 + 1, i1)];
            }
            for (long i1 = 1; i1 < m1 - 1; i1++) {
                long at = IX(m1, m2, i3, i2, i1);
                u[at] = u[at] + c[0] * r[at] + c[1] * (r[at - 1] + r[at + 1] + r1[i1]) +
                        c[2] * (r2[i1] + r1[i1 - 1] + r1[i1 + 1]);
            }
        }
}

/* s = P r: the fine block (mk) restricted to the coarse one (mj), coarse point j over fine
 * point 2j (NPB's rprj3; every fine block here has at least two planes). */
static void rprj3(struct mg *g, const double *r, long m1k, long m2k, double *s, long m1j,
                  long m2j, long m3j) {
    double *x1 = g->w1, *y1 = g->w2;
    for (long j3 = 1; j3 < m3j - 1; j3++) {
        long i3 = 2 * j3 - 1;
        for (long j2 = 1; j2 < m2j - 1; j2++) {
            long i2 = 2 * j2 - 1;
            for (long j1 = 1; j1 < m1j; j1++) {
                long i1 = 2 * j1 - 1;
                x1[i1] = r[IX(m1k, m2k, i3 + 1, i2, i1)] + r[IX(m1k, m2k, i3 + 1, i2 + 2, i1)] +
                         r[IX(m1k, m2k, i3, i2 + 1, i1)] + r[IX(m1k, m2k, i3 + 2, i2 + 1, i1)];
                y1[i1] = r[IX(m1k, m2k, i3, i2, i1)] + r[IX(m1k, m2k, i3 + 2, i2, i1)] +
                         r[IX(m1k, m2k, i3, i2 + 2, i1)] + r[IX(m1k, m2k, i3 + 2, i2 + 2, i1)];
            }
            for (long j1 = 1; j1 < m1j - 1; j1++) {
                long i1 = 2 * j1 - 1;
                double y2 = r[IX(m1k, m2k, i3, i2, i1 + 1)] + r[IX(m1k, m2k, i3 + 2, i2, i1 + 1)] +
                            r[IX(m1k, m2k, i3, i2 + 2, i1 + 1)] + r[IX(m1k, m2k, i3 + 2, i2 + 2, i1 + 1)];
                double x2 = r[IX(m1k, m2k, i3 + 1, i2, i1 + 1)] + r[IX(m1k, m2k, i3 + 1, i2 + 2, i1 + 1)] +
                            r[IX(m1k, m2k, i3, i2 + 1, i1 + 1)] + r[IX(m1k, m2k, i3 + 2, i2 + 1, i1 + 1)];
                s[IX(m1j, m2j, j3, j2, j1)] =
                    0.5 * r[IX(m1k, m2k, i3 + 1, i2 + 1, i1 + 1)] +
                    0.25 * (r[IX(m1k, m2k, i3 + 1, i2 + 1, i1)] + r[IX(m1k, m2k, i3 + 1, i2 + 1, i1 + 2)] + x2) +
                    0.125 * (x1[i1] + x1[i1 + 2] + y2) + 0.0625 * (y1[i1] + y1[i1 + 2]);
            }
        }
    }
}

/* u = u + Q z: the coarse block (mm, with ghosts) interpolated onto the fine one, fine
 * point 2j over coarse point j, ghosts included (NPB's interp). */
static void interp(struct mg *g, const double *z, long mm1, long mm2, long mm3, double *u,
                   long n1, long n2) {
    double *z1 = g->w1, *z2 = g->w2, *z3 = g->w3;
    for (long i3 = 0; i3 < mm3 - 1; i3++)
        for (long i2 = 0; i2 < mm2 - 1; i2++) {
            for (long i1 = 0; i1 < mm1; i1++) {
                z1[i1] = z[IX(mm1, mm2, i3, i2 + 1, i1)] + z[IX(mm1, mm2, i3, i2, i1)];
                z2[i1] = z[IX(mm1, mm2, i3 + 1, i2, i1)] + z[IX(mm1, mm2, i3, i2, i1)];
                z3[i1] = z[IX(mm1, mm2, i3 + 1, i2 + 1, i1)] + z[IX(mm1, mm2, i3 + 1, i2, i1)] + z1[i1];
            }
            for (long i1 = 0; i1 < mm1 - 1; i1++) {
                const double *zz = z + IX(mm1, mm2, i3, i2, i1);
                u[IX(n1, n2, 2 * i3, 2 * i2, 2 * i1)] += zz[0];
                u[IX(n1, n2, 2 * i3, 2 * i2, 2 * i1 + 1)] += 0.5 * (zz[1] + zz[0]);
            }
            for (long i1 = 0; i1 < mm1 - 1; i1++) {
                u[IX(n1, n2, 2 * i3, 2 * i2 + 1, 2 * i1)] += 0.5 * z1[i1];
                u[IX(n1, n2, 2 * i3, 2 * i2 + 1, 2 * i1 + 1)] += 0.25 * (z1[i1] + z1[i1 + 1]);
            }
            for (long i1 = 0; i1 < mm1 - 1; i1++) {
                u[IX(n1, n2, 2 * i3 + 1, 2 * i2, 2 * i1)] += 0.5 * z2[i1];
                u[IX(n1, n2, 2 * i3 + 1, 2 * i2, 2 * i1 + 1)] += 0.25 * (z2[i1] + z2[i1 + 1]);
            }
            for (long i1 = 0; i1 < mm1 - 1; i1++) {
                u[IX(n1, n2, 2 * i3 + 1, 2 * i2 + 1, 2 * i1)] += 0.25 * z3[i1];
                u[IX(n1, n2, 2 * i3 + 1, 2 * i2 + 1, 2 * i1 + 1)] += 0.125 * (z3[i1] + z3[i1 + 1]);
            }
        }
}

/* ---- periodic boundaries ---- */

/* The ghosts of i1 and i2 on every held plane, then those of i3: copies on a level held
 * whole (or by one process), the neighbours' planes otherwise. */
static void comm3(struct mg *s, double *stack, int k) {
    const struct level *l = &s->lv[k];
    double *a = stack + l->off;
    long m1 = l->m1, m2 = l->m2, m3 = l->m3, plane = plane_of(l);
    for (long i3 = 1; i3 < m3 - 1; i3++) {
        for (long i2 = 1; i2 < m2 - 1; i2++) {
            a[IX(m1, m2, i3, i2, 0)] = a[IX(m1, m2, i3, i2, m1 - 2)];
            a[IX(m1, m2, i3, i2, m1 - 1)] = a[IX(m1, m2, i3, i2, 1)];
        }
        memcpy(a + IX(m1, m2, i3, 0, 0), a + IX(m1, m2, i3, m2 - 2, 0), m1 * sizeof(double));
        memcpy(a + IX(m1, m2, i3, m2 - 1, 0), a + IX(m1, m2, i3, 1, 0), m1 * sizeof(double));
    }
    if (l->full || s->p == 1) {
        memcpy(a, a + (m3 - 2) * plane, plane * sizeof(double));
        memcpy(a + (m3 - 1) * plane, a + plane, plane * sizeof(double));
    } else {
        mg_comm_ghosts(stack, l->off, plane, m3, (s->me + 1) % s->p, (s->me + s->p - 1) % s->p);
    }
}

/* ---- the right-hand side (NPB's zran3) ---- */

struct extreme {
    double v;
    long at; /* global position i1 + NX (i2 + NX i3) */
};

/* Keeps list[0..MM) the MM entries that are largest (sign 1) or smallest (sign -1). */
static void keep(struct extreme *list, int sign, double v, long at) {
    if (sign * v <= sign * list[0].v) return;
    int i = 0;
    while (i + 1 < MM && sign * v > sign * list[i + 1].v) {
        list[i] = list[i + 1];
        i++;
    }
    list[i] = (struct extreme){v, at};
}

static void zran3(struct mg *s) {
    const struct level *l = &s->lv[s->lt];
    long m1 = l->m1, m2 = l->m2, n = l->n;
    double *z = s->v;
    memset(z, 0, size_of(l) * sizeof(double));
    uint64_t a1 = npb_pow46(NPB_MULT, n), a2 = npb_pow46(NPB_MULT, n * n);
    uint64_t x0 = npb_skip(314159265, NPB_MULT, (uint64_t)(n * n * l->g0));
    for (long i3 = 1; i3 <= l->nl; i3++) {
        uint64_t x1 = x0;
        for (long i2 = 1; i2 <= n; i2++) {
            uint64_t xx = x1;
            npb_vranlc(n, &xx, NPB_MULT, z + IX(m1, m2, i3, i2, 1));
            x1 = (x1 * a1) & ((UINT64_C(1) << 46) - 1);
        }
        x0 = (x0 * a2) & ((UINT64_C(1) << 46) - 1);
    }
    /* [0..MM) the largest ascending, [MM..2MM) the smallest descending. */
    struct extreme mine[2 * MM];
    for (int i = 0; i < MM; i++) {
        mine[i] = (struct extreme){-1.0, -1};
        mine[MM + i] = (struct extreme){2.0, -1};
    }
    for (long i3 = 1; i3 <= l->nl; i3++)
        for (long i2 = 1; i2 <= n; i2++)
            for (long i1 = 1; i1 <= n; i1++) {
                double v = z[IX(m1, m2, i3, i2, i1)];
                long at = (i1 - 1) + n * ((i2 - 1) + n * (l->g0 + i3 - 1));
                keep(mine, 1, v, at);
                keep(mine + MM, -1, v, at);
            }
    struct extreme *all = npb_alloc("the extremes", 2L * MM * s->p, sizeof *all);
    npb_allgather("extremes", mine, all, sizeof mine);
    struct extreme top[MM], bottom[MM];
    for (int i = 0; i < MM; i++) {
        top[i] = (struct extreme){-1.0, -1};
        bottom[i] = (struct extreme){2.0, -1};
    }
    for (int q = 0; q < s->p; q++)
        for (int i = 0; i < MM; i++) {
            const struct extreme *e = all + 2L * MM * q;
            keep(top, 1, e[i].v, e[i].at);
            keep(bottom, -1, e[MM + i].v, e[MM + i].at);
        }
    free(all);
    memset(z, 0, size_of(l) * sizeof(double));
    for (int i = 0; i < MM; i++)
        for (int sign = -1; sign <= 1; sign += 2) {
            long at = (sign < 0 ? bottom : top)[i].at;
            long i1 = at % n + 1, i2 = at / n % n + 1, i3 = at / (n * n) - l->g0 + 1;
            if (i3 >= 1 && i3 <= l->nl) z[IX(m1, m2, i3, i2, i1)] = sign;
        }
}

/* ---- the V-cycle ---- */

/* Restriction of level k's residual to level k - 1. */
static void restrict_residual(struct mg *s, int k) {
    const struct level *f = &s->lv[k], *c = &s->lv[k - 1];
    double *rf = s->r + f->off, *rc = s->r + c->off;
    if (c->full && !f->full) {
        /* This slab's planes of the coarse level, in place in the whole coarse grid. */
        long g0 = f->g0 / 2, nl = f->nl / 2;
        rprj3(s, rf, f->m1, f->m2, rc + g0 * plane_of(c), c->m1, c->m2, nl + 2);
        mg_comm_gather(s->r, c->off, plane_of(c), nl);
    } else {
        rprj3(s, rf, f->m1, f->m2, rc, c->m1, c->m2, c->m3);
    }
    comm3(s, s->r, k - 1);
}

/* u_k = u_k + Q u_{k-1}; a slab reads its part of a coarse level held whole. */
static void prolongate(struct mg *s, int k) {
    const struct level *f = &s->lv[k], *c = &s->lv[k - 1];
    const double *z = s->u + c->off;
    long mm3 = c->m3;
    if (c->full && !f->full) {
        z += (f->g0 / 2) * plane_of(c);
        mm3 = f->nl / 2 + 2;
    }
    interp(s, z, c->m1, c->m2, mm3, s->u + f->off, f->m1, f->m2);
}

static void mg3p(struct mg *s) {
    for (int k = s->lt; k > 1; k--) restrict_residual(s, k);
    /* The coarsest level: one smoothing from zero. */
    const struct level *l = &s->lv[1];
    memset(s->u + l->off, 0, size_of(l) * sizeof(double));
    psinv(s, s->r + l->off, s->u + l->off, l);
    comm3(s, s->u, 1);
    for (int k = 2; k <= s->lt; k++) {
        l = &s->lv[k];
        double *u = s->u + l->off, *r = s->r + l->off;
        if (k < s->lt) memset(u, 0, size_of(l) * sizeof(double));
        prolongate(s, k);
        if (k < s->lt) {
            resid(s, u, r, r, l);
        } else {
            resid(s, u, s->v, r, l);
        }
        comm3(s, s->r, k);
        psinv(s, r, u, l);
        comm3(s, s->u, k);
    }
}

/* The top level's residual, with its ghosts. */
static void top_resid(struct mg *s) {
    const struct level *l = &s->lv[s->lt];
    resid(s, s->u + l->off, s->v, s->r + l->off, l);
    comm3(s, s->r, s->lt);
}

/* NPB's norm2u3: sqrt(sum r^2 / NX^3), and max |r|; sums added in process order. */
static void norm2u3(struct mg *s, double *rnm2, double *rnmu) {
    const struct level *l = &s->lv[s->lt];
    const double *r = s->r + l->off;
    double mine[2] = {0.0, 0.0};
    for (long i3 = 1; i3 < l->m3 - 1; i3++)
        for (long i2 = 1; i2 < l->m2 - 1; i2++)
            for (long i1 = 1; i1 < l->m1 - 1; i1++) {
                double v = r[IX(l->m1, l->m2, i3, i2, i1)];
                mine[0] += v * v;
                if (fabs(v) > mine[1]) mine[1] = fabs(v);
            }
    double *all = npb_alloc("the norms", 2L * s->p, sizeof(double));
    npb_allgather("norm", mine, all, sizeof mine);
    double sum = 0.0, max = 0.0;
    for (int q = 0; q < s->p; q++) {
        sum += all[2 * q];
        if (all[2 * q + 1] > max) max = all[2 * q + 1];
    }
    free(all);
    *rnm2 = sqrt(sum / ((double)NX * NX * NX));
    *rnmu = max;
}

static void setup(struct mg *s) {
    s->lt = npb_log2(NX);
    s->kd = 1;
    while ((1L << s->kd) < 2L * s->p) s->kd++;
    long usize = 0;
    for (int k = 1; k <= s->lt; k++) {
        struct level *l = &s->lv[k];
        l->n = 1L << k;
        l->full = k < s->kd;
        l->nl = l->full ? l->n : l->n / s->p;
        l->g0 = l->full ? 0 : l->nl * s->me;
        l->m1 = l->m2 = l->n + 2;
        l->m3 = l->nl + 2;
        l->off = usize;
        usize += size_of(l);
    }
    s->u = npb_alloc("u", usize, sizeof(double));
    s->r = npb_alloc("r", usize, sizeof(double));
    s->v = npb_alloc("v", size_of(&s->lv[s->lt]), sizeof(double));
    s->w1 = npb_alloc("the lines", 3L * (NX + 2), sizeof(double));
    s->w2 = s->w1 + NX + 2;
    s->w3 = s->w2 + NX + 2;
    double a[4] = {-8.0 / 3.0, 0.0, 1.0 / 6.0, 1.0 / 12.0};
    /* NPB's smoother: S(a) for classes S, W, A; S(b) for B and up. */
    double ca[4] = {-3.0 / 8.0, 1.0 / 32.0, -1.0 / 64.0, 0.0};
    double cb[4] = {-3.0 / 17.0, 1.0 / 33.0, -1.0 / 61.0, 0.0};
    memcpy(s->a, a, sizeof a);
    memcpy(s->c, CLASS == 'B' ? cb : ca, sizeof ca);
    mg_comm_init(s->u, usize, s->r, usize);
}

static void start(struct mg *s) {
    memset(s->u + s->lv[s->lt].off, 0, size_of(&s->lv[s->lt]) * sizeof(double));
    zran3(s);
}

int main(int argc, char **argv) {
    npb_begin(argc, argv);
    struct mg s = {.p = npb_nprocs(), .me = npb_pid()};
    if (!npb_is_pow2(s.p) || 2L * s.p > NX)
        npb_fail("MG class %c runs on a power-of-two number of processes from 1 to %d (two "
                 "planes of the %d^3 grid each at least); got p = %d",
                 CLASS, NX / 2, NX, s.p);
    if (s.me == 0) {
        printf("\n\n NAS Parallel Benchmarks (bulkwire, NPB 3 specification) -- MG Benchmark\n\n");
        printf(" Size: %4dx%4dx%4d  (class %c)\n Iterations: %3d\n Number of processes: %5d\n\n",
               NX, NX, NX, CLASS, NIT, s.p);
    }
    setup(&s);
    double rnm2, rnmu;
    /* One untimed V-cycle touches every page, as NPB does; then everything starts again. */
    start(&s);
    top_resid(&s);
    mg3p(&s);
    top_resid(&s);
    start(&s);
    npb_barrier();
    npb_timed_begin();
    top_resid(&s);
    norm2u3(&s, &rnm2, &rnmu);
    for (int it = 1; it <= NIT; it++) {
        if (s.me == 0 && (it == 1 || it == NIT || it % 5 == 0)) printf("  iter %3d\n", it);
        mg3p(&s);
        top_resid(&s);
    }
    norm2u3(&s, &rnm2, &rnmu);
    npb_timed_end();
    double err = fabs(rnm2 - RNM2_REF) / RNM2_REF;
    if (s.me == 0) {
        printf("\n Benchmark completed\n");
        printf(" L2 Norm is %20.13e\n Error is   %20.13e\n", rnm2, err);
    }
    struct npb_result r = {
        .kernel = "MG", .n1 = NX, .n2 = NX, .n3 = NX, .niter = NIT, .optype = "floating point",
        .mops_work = 58.0 * NIT * (double)NX * NX * NX / 1e6, .verified = err <= 1e-8,
    };
    return npb_end(&r);
}
