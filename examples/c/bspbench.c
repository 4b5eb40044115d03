/* bspbench's BSP parameters of this machine through bulkwire: g (microseconds per 8-byte
 * word of an h-relation of single-word puts) and l (microseconds), fitted by least
 * squares over h = 0..HMAX, and the time of an empty superstep.
 *
 *     bspcc -O2 bspbench.c -o bspbench && bsprun -n 2 ./bspbench [HMAX [ITERS [EMPTY]]]
 *
 * EMPTY more empty supersteps are timed on their own at the end (default 10000). */
#include <stdio.h>
#include <stdlib.h>

#include <bsp.h>

int main(int argc, char **argv) {
    bsp_begin(bsp_nprocs());
    int hmax = argc > 1 ? atoi(argv[1]) : 256;
    int iters = argc > 2 ? atoi(argv[2]) : 100;
    int empties = argc > 3 ? atoi(argv[3]) : 10000;
    double g, l, e;
    bulkwire_bsp_bench(hmax, iters, &g, &l, &e);
    bsp_sync();
    double t0 = bsp_time();
    for (int i = 0; i < empties; i++) bsp_sync();
    double t1 = bsp_time();
    if (bsp_pid() == 0) {
        printf("p=%d g=%.4f us/word l=%.2f us empty=%.2f us (fit, %d iterations per h, h=0..%d)\n",
               bsp_nprocs(), g, l, e, iters, hmax);
        if (empties > 0) printf("p=%d empty superstep: %.2f us (mean of %d)\n", bsp_nprocs(), (t1 - t0) * 1e6 / empties, empties);
    }
    bsp_end();
    return 0;
}
