/* Several SPMD sections in one program, as MulticoreBSP for C allows: bsp_begin again
 * after bsp_end, each section's function named by bsp_init, with sequential code between
 * them on pid 0 only. Usage: sections P [no-init]. Prints "section K ok p=N" per section
 * (1, 2, then 1 again) and "sections done" at the end; with no-init the program never
 * calls bsp_init and its second bsp_begin must fail. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static int P;
/* Set by main before each section: pid 0 only, the new processes never run main. */
static int sequential = 0;

/* Every process contributes its pid to pid 0's array: the section's processes are there. */
static void gather(int section, bsp_pid_t want) {
    bsp_begin(want);
    bsp_pid_t p = bsp_nprocs(), s = bsp_pid();
    /* Only pid 0's count matters: the others never ran main, which set P. */
    if (s == 0) CHECK_EQ(p, want);
    int *all = calloc(p, sizeof(int));
    bsp_push_reg(all, p * sizeof(int));
    bsp_sync();
    int v = 10 * section + (int)s;
    bsp_put(0, &v, all, s * sizeof(int), sizeof v);
    bsp_sync();
    if (s == 0) {
        for (bsp_pid_t q = 0; q < p; q++) CHECK_EQ(all[q], 10 * section + (int)q);
        printf("section %d ok p=%d\n", section, (int)p);
        fflush(stdout);
    }
    /* Only pid 0 ran main's code between the sections. */
    CHECK_EQ(sequential, s == 0 ? section : 0);
    bsp_pop_reg(all);
    bsp_end();
}

static void first(void) { gather(1, 2); }

static void second(void) { gather(2, (bsp_pid_t)P); }

int main(int argc, char **argv) {
    if (argc > 2 && !strcmp(argv[2], "no-init")) {
        bsp_begin(2);
        bsp_end();
        bsp_begin(2); /* must fail: no function named for the new processes */
        printf("not reached\n");
        return 1;
    }
    bsp_init(first, argc, argv);
    P = argc > 1 ? atoi(argv[1]) : 3;
    sequential = 1;
    first();
    printf("between sections\n");
    fflush(stdout);
    bsp_init(second, argc, argv);
    sequential = 2;
    second();
    /* The first function again, named again. */
    bsp_init(first, argc, argv);
    sequential = 1;
    first();
    printf("sections done\n");
    return 0;
}
