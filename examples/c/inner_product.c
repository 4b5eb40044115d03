/* Inner product of two distributed vectors (BSPedupack's bspinprod).
 *
 *     bspcc -O2 inner_product.c -o inner_product && bsprun -n 4 ./inner_product [N]
 *
 * x[i] = y[i] = i + 1, block-distributed; pid 0 reads N and puts it into every process;
 * each process sums its part, puts the partial sum into every process, and all add them
 * up. The answer is checked against
 * N(N+1)(2N+1)/6 (exact in doubles for N up to 10^5). */
#include <stdio.h>
#include <stdlib.h>

#include <bsp.h>

static long n_global = 100000;

static void spmd(void) {
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid();
    /* Only pid 0 ran main's code after bsp_init (the other processes entered spmd from
     * bsp_init), so only pid 0 read N: it sends it to the others, as BSPedupack does. */
    long n = n_global;
    bsp_push_reg(&n, sizeof n);
    bsp_sync();
    if (s == 0)
        for (int q = 1; q < p; q++) bsp_put(q, &n, &n, 0, sizeof n);
    bsp_sync();
    bsp_pop_reg(&n);
    /* Block distribution: process s owns [lo, hi). */
    long lo = s * n / p, hi = (s + 1) * n / p;
    double *x = malloc((hi - lo + 1) * sizeof(double));
    for (long i = lo; i < hi; i++) x[i - lo] = (double)(i + 1);

    double *partial = calloc(p, sizeof(double));
    bsp_push_reg(partial, p * (int)sizeof(double));
    bsp_sync();

    double t0 = bsp_time();
    double mine = 0.0;
    for (long i = 0; i < hi - lo; i++) mine += x[i] * x[i];
    for (int q = 0; q < p; q++) bsp_put(q, &mine, partial, s * (int)sizeof(double), sizeof mine);
    bsp_sync();
    double alpha = 0.0;
    for (int q = 0; q < p; q++) alpha += partial[q];
    double t1 = bsp_time();

    double want = (double)n * (n + 1) * (2 * n + 1) / 6;
    if (alpha != want) bsp_abort("inner product: pid %d got %.0f, expected %.0f", s, alpha, want);
    if (s == 0) printf("inner product ok: n=%ld p=%d sum=%.0f in %.1f us\n", n, p, alpha, (t1 - t0) * 1e6);
    bsp_pop_reg(partial);
    bsp_end();
}

int main(int argc, char **argv) {
    bsp_init(spmd, argc, argv);
    if (argc > 1) n_global = atol(argv[1]);
    if (n_global < 1 || n_global > 100000) {
        fprintf(stderr, "N must be in 1..100000\n");
        return 2;
    }
    spmd();
    return 0;
}
