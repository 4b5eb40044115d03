/* Two SPMD sections started by the program itself (MulticoreBSP's multistart): each is as
 * wide as bsp_nprocs() says outside them. Pid 0 takes its share of the CPUs in a section
 * and must get them all back at bsp_end, so the counts before, between and after agree.
 * Prints "before N", "section p=P" twice, "between N", "after N". */
#include <stdio.h>

#include "check.h"

static void spmd(void) {
    bsp_begin(bsp_nprocs());
    bsp_sync();
    if (bsp_pid() == 0) printf("section p=%d\n", (int)bsp_nprocs());
    bsp_end();
}

int main(int argc, char **argv) {
    bsp_init(spmd, argc, argv);
    printf("before %d\n", (int)bsp_nprocs());
    fflush(stdout);
    spmd();
    printf("between %d\n", (int)bsp_nprocs());
    fflush(stdout);
    spmd();
    printf("after %d\n", (int)bsp_nprocs());
    return 0;
}
