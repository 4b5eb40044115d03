/*
 * EP: generates 2^(M+1) uniform numbers with NPB's generator, turns pairs into Gaussian
 * deviates by the acceptance-rejection (Marsaglia polar) method and counts them in square
 * annuli, as specified by NPB (NAS-95-020, NPB 3). The NN batches of 2^MK pairs are
 * divided among the processes in blocks; each batch starts from the seed 2^(MK+1) batch
 * steps along the sequence, so any p from 1 to NN gives the same numbers. The one
 * exchange, at the end, gathers every process's sums and counts; each process adds them
 * in process order.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "../common/comm.h"
#include "ep.h"

#define SEED UINT64_C(271828183)

/* NPB 3.3 reference sums of the deviates (EP's sx_verify_value, sy_verify_value). */
#if CLASS == 'S'
#define SX_REF (-3.247834652034740e+3)
#define SY_REF (-6.958407078382297e+3)
#elif CLASS == 'W'
#define SX_REF (-2.863319731645753e+3)
#define SY_REF (-6.320053679109499e+3)
#elif CLASS == 'A'
#define SX_REF (-4.295875165629892e+3)
#define SY_REF (-1.580732573678431e+4)
#else
#define SX_REF (4.033815542441498e+4)
#define SY_REF (-2.660669192809235e+4)
#endif

/* sums[0], sums[1]: the deviates' sums; sums[2 + l]: pairs in annulus l. */
static void batch(long k, uint64_t an, double *x, double *sums) {
    uint64_t seed = (SEED * npb_pow46(an, (uint64_t)k)) & ((UINT64_C(1) << 46) - 1);
    npb_vranlc(2 * NK, &seed, NPB_MULT, x);
    for (long i = 0; i < NK; i++) {
        double x1 = 2.0 * x[2 * i] - 1.0, x2 = 2.0 * x[2 * i + 1] - 1.0;
        double t1 = x1 * x1 + x2 * x2;
        if (t1 <= 1.0) {
            double t2 = sqrt(-2.0 * log(t1) / t1);
            double t3 = x1 * t2, t4 = x2 * t2;
            int l = (int)fmax(fabs(t3), fabs(t4));
            if (l < NQ) sums[2 + l] += 1.0;
            sums[0] += t3;
            sums[1] += t4;
        }
    }
}

int main(int argc, char **argv) {
    npb_begin(argc, argv);
    int p = npb_nprocs(), me = npb_pid();
    if (p > NN)
        npb_fail("EP class %c runs on 1 to %ld processes (one batch each at least); got p = %d",
                 CLASS, NN, p);
    if (me == 0) {
        printf("\n\n NAS Parallel Benchmarks (bulkwire, NPB 3 specification) -- EP Benchmark\n\n");
        printf(" Number of random numbers generated: %15.0f  (class %c)\n", pow(2.0, M + 1), CLASS);
        printf(" Number of processes: %d\n\n", p);
    }
    double *x = npb_alloc("the batch", 2 * NK, sizeof(double));
    double sums[2 + NQ] = {0}, *all = npb_alloc("the sums", (long)p * (2 + NQ), sizeof(double));
    npb_barrier();
    npb_timed_begin();
    uint64_t an = npb_pow46(NPB_MULT, 2 * NK); /* one batch of the sequence */
    for (long k = npb_part(NN, p, me); k < npb_part(NN, p, me + 1); k++) batch(k, an, x, sums);
    npb_allgather("sums", sums, all, sizeof sums);
    double total[2 + NQ] = {0};
    for (int q = 0; q < p; q++)
        for (int i = 0; i < 2 + NQ; i++) total[i] += all[q * (2 + NQ) + i];
    double t = npb_timed_end();
    double gc = 0;
    for (int l = 0; l < NQ; l++) gc += total[2 + l];
    double sx_err = fabs((total[0] - SX_REF) / SX_REF), sy_err = fabs((total[1] - SY_REF) / SY_REF);
    int verified = sx_err <= 1e-8 && sy_err <= 1e-8;
    if (me == 0) {
        printf("EP Benchmark Results:\n\nCPU Time =%10.4f\nN = 2^%5d\nNo. Gaussian Pairs =%15.0f\n",
               t, M, gc);
        printf("Sums = %25.15e %25.15e\nCounts:\n", total[0], total[1]);
        for (int l = 0; l < NQ; l++) printf("%3d%15.0f\n", l, total[2 + l]);
    }
    struct npb_result r = {
        .kernel = "EP", .n1 = 1L << (M + 1), .niter = 0, .optype = "Random numbers generated",
        .mops_work = pow(2.0, M + 1) / 1e6, .verified = verified,
    };
    free(all);
    free(x);
    return npb_end(&r);
}
