/*
 * FT: solves a 3-D diffusion equation spectrally, as specified by NPB (NAS-95-020, NPB 3):
 * a forward 3-D FFT of NPB's random complex array, then per time step a multiplication by
 * exp(-4 alpha pi^2 |k|^2 t) and an inverse 3-D FFT whose checksum is verified.
 *
 * Decomposition: slabs. In space the array is cut by planes of z (each process holds
 * NZ / p planes of NY x NX); there the x and y transforms are local. One all-to-all
 * transposes it to slabs of y (NY / p rows of NZ x NX), where the z transform is local and
 * the evolution happens; the inverse transform goes back the same way. The 1-D FFTs are
 * radix-2 Stockham transforms of blocks of FFT_BLOCK lines at once. Any p that is a power
 * of two up to min(NY, NZ).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/comm.h"
#include "ft.h"

#define NTOTAL ((long)NX * NY * NZ)
#define ALPHA 1.0e-6
#define PI 3.141592653589793238
#define FFT_BLOCK 16
#define CHECKS 1024

/* NPB 3 reference checksums per time step (FT's csum_ref / vdata_real, vdata_imag). */
static const double ref_re[] = {
#if CLASS == 'S'
    5.546087004964e+02, 5.546385409189e+02, 5.546148406171e+02,
    5.545423607415e+02, 5.544255039624e+02, 5.542683411902e+02,
#elif CLASS == 'W'
    5.673612178944e+02, 5.631436885271e+02, 5.594024089970e+02,
    5.560698047020e+02, 5.530898991250e+02, 5.504159734538e+02,
#elif CLASS == 'A'
    5.046735008193e+02, 5.059412319734e+02, 5.069376896287e+02,
    5.077892868474e+02, 5.085233095391e+02, 5.091487099959e+02,
#else
    5.177643571579e+02, 5.154521291263e+02, 5.146409228649e+02, 5.142378756213e+02,
    5.139626667737e+02, 5.137423460082e+02, 5.135547056878e+02, 5.133910925466e+02,
    5.132470705390e+02, 5.131197729984e+02, 5.130070319283e+02, 5.129070537032e+02,
    5.128182883502e+02, 5.127393733383e+02, 5.126691062020e+02, 5.126064276004e+02,
    5.125504076570e+02, 5.125002331720e+02, 5.124551951846e+02, 5.124146770029e+02,
#endif
};
static const double ref_im[] = {
#if CLASS == 'S'
    4.845363331978e+02, 4.865304269511e+02, 4.883910722336e+02,
    4.901273169046e+02, 4.917475857993e+02, 4.932597244941e+02,
#elif CLASS == 'W'
    5.293246849175e+02, 5.282149986629e+02, 5.270996558037e+02,
    5.260027904925e+02, 5.249400845633e+02, 5.239212247086e+02,
#elif CLASS == 'A'
    5.114047905510e+02, 5.098809666433e+02, 5.098144042213e+02,
    5.101336130759e+02, 5.104914655194e+02, 5.107917842803e+02,
#else
    5.077803458597e+02, 5.088249431599e+02, 5.096208912659e+02, 5.101023387619e+02,
    5.103976610617e+02, 5.105948019802e+02, 5.107404165783e+02, 5.108576573661e+02,
    5.109577278523e+02, 5.110460304483e+02, 5.111252433800e+02, 5.111968077718e+02,
    5.112616233064e+02, 5.113203605551e+02, 5.113735928093e+02, 5.114218460548e+02,
    5.114656139760e+02, 5.115053595966e+02, 5.115415130407e+02, 5.115744692211e+02,
#endif
};

struct ft {
    int p, me;
    long kz0, nkz;        /* space: planes of z held */
    long jy0, njy;        /* frequency: rows of y held */
    long local, block;    /* complex numbers held; in one block of the all-to-all */
    dcomplex *u0, *u1;    /* frequency, [jj][k][i] */
    dcomplex *u2;         /* space, [kk][j][i] */
    dcomplex *send, *recv;
    double *twiddle;      /* frequency layout */
    dcomplex *roots_x, *roots_y, *roots_z;
    dcomplex *fa, *fb;    /* FFT_BLOCK lines */
    dcomplex sums[NITER];
};

/* ---- 1-D FFTs ---- */

/* exp(-2 pi i t / n), t < n / 2. */
static dcomplex *roots(long n) {
    dcomplex *w = npb_alloc("the roots of unity", n / 2, sizeof *w);
    for (long t = 0; t < n / 2; t++) {
        double a = 2.0 * PI * (double)t / (double)n;
        w[t] = (dcomplex){cos(a), -sin(a)};
    }
    return w;
}

/* Radix-2 Stockham FFT of nb lines stored as n rows of FFT_BLOCK (row t holds element t
 * of every line), unnormalised; sign 1 forward (exp(-i...)), -1 inverse. Returns the
 * buffer holding the result (x or y). */
static dcomplex *stockham(dcomplex *x, dcomplex *y, long n, int nb, const dcomplex *w, int sign) {
    long s = 1;
    for (long len = n; len > 1; len >>= 1) {
        long m = len >> 1;
        for (long p = 0; p < m; p++) {
            double wr = w[p * s].re, wi = sign * w[p * s].im;
            for (long q = 0; q < s; q++) {
                const dcomplex *a = x + (q + s * p) * FFT_BLOCK, *b = x + (q + s * (p + m)) * FFT_BLOCK;
                dcomplex *y0 = y + (q + s * 2 * p) * FFT_BLOCK, *y1 = y + (q + s * (2 * p + 1)) * FFT_BLOCK;
                for (int l = 0; l < nb; l++) {
                    double dr = a[l].re - b[l].re, di = a[l].im - b[l].im;
                    y0[l].re = a[l].re + b[l].re;
                    y0[l].im = a[l].im + b[l].im;
                    y1[l].re = dr * wr - di * wi;
                    y1[l].im = dr * wi + di * wr;
                }
            }
        }
        dcomplex *t = x;
        x = y;
        y = t;
        s <<= 1;
    }
    return x;
}

/* In place, the FFTs of `lines` lines of length n: element t of line l at
 * base[l ls + t ts]. */
static void cffts(struct ft *s, dcomplex *base, long n, long ts, long lines, long ls,
                  const dcomplex *w, int sign) {
    for (long l0 = 0; l0 < lines; l0 += FFT_BLOCK) {
        int nb = lines - l0 < FFT_BLOCK ? (int)(lines - l0) : FFT_BLOCK;
        dcomplex *line0 = base + l0 * ls;
        for (long t = 0; t < n; t++)
            for (int b = 0; b < nb; b++) s->fa[t * FFT_BLOCK + b] = line0[b * ls + t * ts];
        dcomplex *res = stockham(s->fa, s->fb, n, nb, w, sign);
        for (long t = 0; t < n; t++)
            for (int b = 0; b < nb; b++) line0[b * ls + t * ts] = res[t * FFT_BLOCK + b];
    }
}

/* The x and y transforms of the space layout. */
static void fft_xy(struct ft *s, int sign) {
    cffts(s, s->u2, NX, 1, s->nkz * NY, NX, s->roots_x, sign);
    for (long kk = 0; kk < s->nkz; kk++)
        cffts(s, s->u2 + kk * NY * NX, NY, NX, NX, 1, s->roots_y, sign);
}

/* The z transform of the frequency layout. */
static void fft_z(struct ft *s, dcomplex *u, int sign) {
    for (long jj = 0; jj < s->njy; jj++) cffts(s, u + jj * NZ * NX, NZ, NX, NX, 1, s->roots_z, sign);
}

/* ---- the transposes ---- */

static void alltoall(struct ft *s) {
    if (s->p > 1)
        ft_comm_alltoall(s->send, s->recv, s->block);
    else
        memcpy(s->recv, s->send, s->block * sizeof(dcomplex));
}

/* Space (z slabs, u2) to frequency (y slabs, out). */
static void space_to_freq(struct ft *s, dcomplex *out) {
    size_t row = NX * sizeof(dcomplex);
    for (int q = 0; q < s->p; q++)
        for (long kk = 0; kk < s->nkz; kk++)
            memcpy(s->send + q * s->block + kk * s->njy * NX, s->u2 + (kk * NY + q * s->njy) * NX,
                   s->njy * row);
    alltoall(s);
    for (int q = 0; q < s->p; q++)
        for (long kk = 0; kk < s->nkz; kk++)
            for (long jj = 0; jj < s->njy; jj++)
                memcpy(out + (jj * NZ + q * s->nkz + kk) * NX,
                       s->recv + q * s->block + (kk * s->njy + jj) * NX, row);
}

/* Frequency (y slabs, in) to space (z slabs, u2). */
static void freq_to_space(struct ft *s, const dcomplex *in) {
    size_t row = NX * sizeof(dcomplex);
    for (int q = 0; q < s->p; q++)
        for (long jj = 0; jj < s->njy; jj++)
            memcpy(s->send + q * s->block + jj * s->nkz * NX, in + (jj * NZ + q * s->nkz) * NX,
                   s->nkz * row);
    alltoall(s);
    for (int q = 0; q < s->p; q++)
        for (long jj = 0; jj < s->njy; jj++)
            for (long kk = 0; kk < s->nkz; kk++)
                memcpy(s->u2 + (kk * NY + q * s->njy + jj) * NX,
                       s->recv + q * s->block + (jj * s->nkz + kk) * NX, row);
}

/* ---- the problem ---- */

/* NPB's initial array: plane k starts 2 NX NY k values into the sequence from 314159265;
 * each element takes two values (real, imaginary), x fastest. */
static void initial_conditions(struct ft *s) {
    for (long kk = 0; kk < s->nkz; kk++) {
        uint64_t x = npb_skip(314159265, NPB_MULT, 2 * (uint64_t)NX * NY * (uint64_t)(s->kz0 + kk));
        npb_vranlc(2L * NX * NY, &x, NPB_MULT, (double *)(s->u2 + kk * NY * NX));
    }
}

static long freq(long i, long n) { return i >= n / 2 ? i - n : i; }

/* exp(-4 alpha pi^2 (kx^2 + ky^2 + kz^2)) in the frequency layout. */
static void compute_twiddle(struct ft *s) {
    double ap = -4.0 * ALPHA * PI * PI;
    for (long jj = 0; jj < s->njy; jj++) {
        long fy = freq(s->jy0 + jj, NY);
        for (long k = 0; k < NZ; k++) {
            long fz = freq(k, NZ);
            double *t = s->twiddle + (jj * NZ + k) * NX;
            for (long i = 0; i < NX; i++) {
                long fx = freq(i, NX);
                t[i] = exp(ap * (double)(fx * fx + fy * fy + fz * fz));
            }
        }
    }
}

/* u0 = u0 twiddle, u1 = u0. */
static void evolve(struct ft *s) {
    for (long n = 0; n < s->local; n++) {
        s->u0[n].re *= s->twiddle[n];
        s->u0[n].im *= s->twiddle[n];
        s->u1[n] = s->u0[n];
    }
}

/* NPB's checksum: 1024 fixed elements of the space array, over NX NY NZ. */
static dcomplex checksum(struct ft *s) {
    dcomplex mine = {0.0, 0.0};
    for (long j = 1; j <= CHECKS; j++) {
        long i = j % NX, jy = 3 * j % NY, k = 5 * j % NZ;
        if (k < s->kz0 || k >= s->kz0 + s->nkz) continue;
        dcomplex v = s->u2[((k - s->kz0) * NY + jy) * NX + i];
        mine.re += v.re;
        mine.im += v.im;
    }
    dcomplex *all = npb_alloc("the checksums", s->p, sizeof *all), sum = {0.0, 0.0};
    npb_allgather("checksum", &mine, all, sizeof mine);
    for (int q = 0; q < s->p; q++) {
        sum.re += all[q].re;
        sum.im += all[q].im;
    }
    free(all);
    sum.re /= (double)NTOTAL;
    sum.im /= (double)NTOTAL;
    return sum;
}

/* Setup, initial array and forward transform: the part NPB also runs once untimed. */
static void begin_problem(struct ft *s) {
    compute_twiddle(s);
    initial_conditions(s);
    fft_xy(s, 1);
    space_to_freq(s, s->u0);
    fft_z(s, s->u0, 1);
}

static void setup(struct ft *s) {
    s->nkz = NZ / s->p;
    s->kz0 = s->nkz * s->me;
    s->njy = NY / s->p;
    s->jy0 = s->njy * s->me;
    s->local = NTOTAL / s->p;
    s->block = s->nkz * s->njy * NX;
    s->u0 = npb_alloc("u0", s->local, sizeof(dcomplex));
    s->u1 = npb_alloc("u1", s->local, sizeof(dcomplex));
    s->u2 = npb_alloc("u2", s->local, sizeof(dcomplex));
    s->send = npb_alloc("the send buffer", s->local, sizeof(dcomplex));
    s->recv = npb_alloc("the receive buffer", s->local, sizeof(dcomplex));
    s->twiddle = npb_alloc("the twiddle factors", s->local, sizeof(double));
    long nmax = NX > NY ? NX : NY;
    nmax = nmax > NZ ? nmax : NZ;
    s->fa = npb_alloc("the FFT lines", 2 * FFT_BLOCK * nmax, sizeof(dcomplex));
    s->fb = s->fa + FFT_BLOCK * nmax;
    s->roots_x = roots(NX);
    s->roots_y = roots(NY);
    s->roots_z = roots(NZ);
    ft_comm_init(s->recv, s->local);
}

static int verify(const struct ft *s) {
    int ok = 1;
    for (int it = 0; it < NITER; it++) {
        double dr = s->sums[it].re - ref_re[it], di = s->sums[it].im - ref_im[it];
        double err = sqrt(dr * dr + di * di) / sqrt(ref_re[it] * ref_re[it] + ref_im[it] * ref_im[it]);
        if (!(err <= 1e-12)) ok = 0;
    }
    return ok;
}

int main(int argc, char **argv) {
    npb_begin(argc, argv);
    struct ft s = {.p = npb_nprocs(), .me = npb_pid()};
    long pmax = NY < NZ ? NY : NZ;
    if (!npb_is_pow2(s.p) || s.p > pmax)
        npb_fail("FT class %c runs on a power-of-two number of processes from 1 to %ld (a plane "
                 "of z and a row of y each at least); got p = %d",
                 CLASS, pmax, s.p);
    if (s.me == 0) {
        printf("\n\n NAS Parallel Benchmarks (bulkwire, NPB 3 specification) -- FT Benchmark\n\n");
        printf(" Size                : %4dx%4dx%4d\n Iterations          :     %7d\n", NX, NY, NZ, NITER);
        printf(" Number of processes :     %7d\n\n", s.p);
    }
    setup(&s);
    /* Once untimed, as NPB does, to touch every page; then everything is timed. */
    begin_problem(&s);
    npb_barrier();
    npb_timed_begin();
    begin_problem(&s);
    for (int it = 0; it < NITER; it++) {
        evolve(&s);
        fft_z(&s, s.u1, -1);
        freq_to_space(&s, s.u1);
        fft_xy(&s, -1);
        s.sums[it] = checksum(&s);
    }
    npb_timed_end();
    if (s.me == 0)
        for (int it = 0; it < NITER; it++)
            printf(" T = %5d     Checksum = %22.12e %22.12e\n", it + 1, s.sums[it].re, s.sums[it].im);
    double logn = log((double)NTOTAL);
    struct npb_result r = {
        .kernel = "FT", .n1 = NX, .n2 = NY, .n3 = NZ, .niter = NITER, .optype = "floating point",
        .mops_work = 1e-6 * (double)NTOTAL * (14.8157 + 7.19641 * logn + (5.23518 + 7.21113 * logn) * NITER),
        .verified = verify(&s),
    };
    return npb_end(&r);
}
