/* bsp_abort in a section, in either dialect: the job stops with the message printed once
 * and status 1; control never comes back to main (MulticoreBSP returns its initiating
 * thread to main, see docs/bsp.md). Usage: abort_main P. Prints "back in main" only if
 * pid 0 got past the section. */
#include <stdio.h>
#include <stdlib.h>

#include "check.h"

int main(int argc, char **argv) {
    bsp_begin(argc > 1 ? atoi(argv[1]) : 2);
    if (bsp_pid() == 1 % bsp_nprocs()) bsp_abort("stopped by pid %d\n", (int)bsp_pid());
    for (int i = 0; i < 1000; i++) bsp_sync();
    bsp_end();
    printf("back in main\n");
    return 0;
}
