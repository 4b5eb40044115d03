/* Begin, end, pid, nprocs, time, empty supersteps. Usage: basics [P].
 * Every process prints "avail N" before bsp_begin; pid 0 prints "basics ok" and,
 * after bsp_end, "only pid 0 after bsp_end". */
#include <stdio.h>
#include <stdlib.h>

#include "check.h"

int main(int argc, char **argv) {
    printf("avail %d\n", (int)bsp_nprocs());
    fflush(stdout);
    bsp_begin(argc > 1 ? atoi(argv[1]) : (int)bsp_nprocs());
    bsp_pid_t p = bsp_nprocs(), s = bsp_pid();
    double t0 = bsp_time();
    CHECK(t0 >= 0.0);
    for (int i = 0; i < 200; i++) bsp_sync();
    double t1 = bsp_time();
    CHECK(t1 >= t0);
    /* Every pid is present exactly once. */
    int *seen = calloc(p, sizeof(int));
    bsp_push_reg(seen, p * sizeof(int));
    bsp_sync();
    int one = 1;
    for (bsp_pid_t q = 0; q < p; q++) bsp_put(q, &one, seen, s * sizeof(int), sizeof one);
    bsp_sync();
    for (bsp_pid_t q = 0; q < p; q++) CHECK_EQ(seen[q], 1);
    /* bsp_end ends the last superstep like a sync: these puts arrive. */
    int last = 100 + (int)s;
    bsp_put(0, &last, seen, s * sizeof(int), sizeof last);
    if (s == 0) printf("basics ok p=%d\n", (int)p);
    bsp_end();
    for (bsp_pid_t q = 0; q < p; q++)
        if (seen[q] != 100 + (int)q) {
            printf("seen[%d] is %d\n", (int)q, seen[q]);
            return 1;
        }
    /* bsp_nprocs stays allowed outside the SPMD section. */
    if (bsp_nprocs() < 1) return 1;
    printf("only pid 0 after bsp_end\n");
    return 0;
}
