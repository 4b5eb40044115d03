/* Collectives from C: pi by the midpoint rule, the intervals shared out among the
 * processes. Rank 0 chooses the number of intervals and broadcasts it; every process
 * sums its share; bw_allreduce adds the shares up; bw_gather brings each process's share
 * to rank 0 for the report.
 *
 * target/release/bspcc -O2 crates/capi/examples/c/coll_pi.c -o coll_pi
 * ./coll_pi 4            (starts 4 processes itself), or bsprun -n 4 ./coll_pi */
#include "bulkwire.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* M_PI is POSIX, not C11. */
static const double PI = 3.14159265358979323846;

static void ck(int rc, const char *what) {
    if (rc != BW_SUCCESS) {
        fprintf(stderr, "%s: %s (%s)\n", what, bw_error_string(rc), bw_last_error());
        bw_abort("coll_pi failed");
    }
}

int main(int argc, char **argv) {
    ck(bw_init_spawn(argc > 1 ? atoi(argv[1]) : 4), "bw_init_spawn");
    int me, np;
    ck(bw_rank(&me), "bw_rank");
    ck(bw_size(&np), "bw_size");

    uint64_t n = me == 0 ? 100000000 : 0;
    ck(bw_bcast(&n, 1, BW_UINT64, 0), "bw_bcast");

    double h = 1.0 / (double)n, part = 0.0, pi = 0.0;
    for (uint64_t i = (uint64_t)me; i < n; i += (uint64_t)np) {
        double x = h * ((double)i + 0.5);
        part += 4.0 / (1.0 + x * x);
    }
    part *= h;
    ck(bw_allreduce(&part, &pi, 1, BW_DOUBLE, BW_SUM), "bw_allreduce");

    double *parts = me == 0 ? malloc(sizeof(double) * (size_t)np) : NULL;
    ck(bw_gather(&part, parts, 1, BW_DOUBLE, 0), "bw_gather");
    if (me == 0) {
        for (int r = 0; r < np; r++) printf("rank %d: %.15f\n", r, parts[r]);
        printf("pi = %.15f (error %.2e) with %d processes\n", pi, fabs(pi - PI), np);
        free(parts);
    }
    ck(bw_finalize(), "bw_finalize");
    return 0;
}
