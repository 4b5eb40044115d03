/* A program whose supersteps and h-relations are known, for the cost profile's test.
 * Superstep 0 registers an area; superstep k = 1, 2, 3 puts k KiB to the right
 * neighbour; bsp_end ends superstep 4, which sends nothing. Usage: supersteps [P]. */
#include <stdlib.h>
#include <string.h>

#include "check.h"

int main(int argc, char **argv) {
    bsp_begin(argc > 1 ? atoi(argv[1]) : bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid();
    enum { KIB = 1024, MAX = 3 * KIB };
    char *area = calloc(MAX, 1), *mine = malloc(MAX);
    memset(mine, 'a' + s, MAX);
    bsp_push_reg(area, MAX);
    bsp_sync();
    for (int k = 1; k <= 3; k++) {
        bsp_put((s + 1) % p, mine, area, 0, k * KIB);
        bsp_sync();
        CHECK_EQ(area[k * KIB - 1], 'a' + (s + p - 1) % p);
    }
    bsp_end();
    free(area);
    free(mine);
    return 0;
}
