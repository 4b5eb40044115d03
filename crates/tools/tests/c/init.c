/* bsp_init: the SPMD part is a function other than main; main's sequential part runs on
 * pid 0 only. Usage: init P. */
#include <stdio.h>
#include <stdlib.h>

#include "check.h"

static int P;

static void spmd(void) {
    bsp_begin(P);
    bsp_pid_t p = bsp_nprocs(), s = bsp_pid();
    int sum = 0;
    bsp_push_reg(&sum, sizeof sum);
    bsp_sync();
    int v = (int)s + 1;
    bsp_put(0, &v, &sum, 0, 0);
    int *all = calloc(p, sizeof(int));
    bsp_push_reg(all, p * sizeof(int));
    bsp_sync();
    bsp_put(0, &v, all, s * sizeof(int), sizeof v);
    bsp_sync();
    if (s == 0) {
        int t = 0;
        for (bsp_pid_t q = 0; q < p; q++) t += all[q];
        CHECK_EQ(t, p * (p + 1) / 2);
        printf("init ok p=%d\n", (int)p);
    }
    bsp_end();
}

int main(int argc, char **argv) {
    bsp_init(spmd, argc, argv);
    printf("sequential start\n");
    P = argc > 1 ? atoi(argv[1]) : (int)bsp_nprocs();
    spmd();
    printf("sequential end\n");
    return 0;
}
