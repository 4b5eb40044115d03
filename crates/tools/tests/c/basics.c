/* Begin, end, pid, nprocs, time, empty supersteps. Usage: basics [P].
 * Every process prints "avail N" before bsp_begin; pid 0 prints "basics ok" and,
 * after bsp_end, "only pid 0 after bsp_end". */
#include <stdio.h>
#include <stdlib.h>

#include "check.h"

int main(int argc, char **argv) {
    printf("avail %d\n", bsp_nprocs());
    fflush(stdout);
    bsp_begin(argc > 1 ? atoi(argv[1]) : bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid();
    double t0 = bsp_time();
    CHECK(t0 >= 0.0);
    for (int i = 0; i < 200; i++) bsp_sync();
    double t1 = bsp_time();
    CHECK(t1 >= t0);
    /* Every pid is present exactly once. */
    int *seen = calloc(p, sizeof(int));
    bsp_push_reg(seen, p * (int)sizeof(int));
    bsp_sync();
    int one = 1;
    for (int q = 0; q < p; q++) bsp_put(q, &one, seen, s * (int)sizeof(int), sizeof one);
    bsp_sync();
    for (int q = 0; q < p; q++) CHECK_EQ(seen[q], 1);
    /* bsp_end ends the last superstep like a sync: these puts arrive. */
    int last = 100 + s;
    bsp_put(0, &last, seen, s * (int)sizeof(int), sizeof last);
    if (s == 0) printf("basics ok p=%d\n", p);
    bsp_end();
    for (int q = 0; q < p; q++) CHECK_EQ(seen[q], 100 + q);
    printf("only pid 0 after bsp_end\n");
    return 0;
}
