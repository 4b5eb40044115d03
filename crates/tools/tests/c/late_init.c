/* MulticoreBSP for C's examples read their input first and name their SPMD function with
 * bsp_init only then: the processes a program started by itself starts must run that
 * function, not main's code before it. Usage: late_init P. Pid 0 prints "prologue",
 * "late init ok p=P" and "epilogue", once each. */
#include <stdio.h>
#include <stdlib.h>

#include "check.h"

static int P;

static void spmd(void) {
    bsp_begin(P);
    bsp_pid_t p = bsp_nprocs(), s = bsp_pid();
    int *all = calloc(p, sizeof(int));
    bsp_push_reg(all, p * sizeof(int));
    bsp_sync();
    int v = 7 * (int)s;
    bsp_put(0, &v, all, s * sizeof(int), sizeof v);
    bsp_sync();
    if (s == 0) {
        for (bsp_pid_t q = 0; q < p; q++) CHECK_EQ(all[q], 7 * (int)q);
        printf("late init ok p=%d\n", (int)p);
    }
    bsp_end();
}

int main(int argc, char **argv) {
    /* The first call into the library: the started processes go to spmd from here. */
    printf("prologue with %d available\n", (int)bsp_nprocs() > 0);
    fflush(stdout);
    P = argc > 1 ? atoi(argv[1]) : 2;
    if (P < 1) return 1;
    bsp_init(spmd, argc, argv);
    spmd();
    printf("epilogue\n");
    return 0;
}
