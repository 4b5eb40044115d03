/* The kernels' common communication over BSPlib. */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <bsp.h>

#include "comm.h"

static const char *program = "npb";
static char *gather_area; /* registered: p slots of NPB_GATHER_MAX bytes */

const char *npb_program(void) { return program; }

static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

void npb_begin(int argc, char **argv) {
    program = base_name(argv[0]);
    /* Started by itself, argv[1] says how many processes bsp_begin starts. */
    int want = bsp_nprocs();
    const char *bad = NULL;
    if (argc > 2) bad = "too many arguments";
    if (argc == 2) {
        char *end;
        long n = strtol(argv[1], &end, 10);
        if (*argv[1] == '\0' || *end != '\0' || n < 1 || n > INT_MAX)
            bad = "not a number of processes";
        else
            want = (int)n;
    }
    bsp_begin(want);
    if (bad)
        bsp_abort("%s: %s (usage: %s [PROCESSES], or bsprun -n PROCESSES %s)\n", program,
                  bad, program, program);
    gather_area = npb_alloc("the gather area", bsp_nprocs(), NPB_GATHER_MAX);
    bsp_push_reg(gather_area, bsp_nprocs() * NPB_GATHER_MAX);
    bsp_sync();
}

int npb_pid(void) { return bsp_pid(); }
int npb_nprocs(void) { return bsp_nprocs(); }

void npb_fail(const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    bsp_abort("%s: %s\n", program, msg);
}

void npb_abort(const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    bsp_abort("%s: %s\n", program, msg);
}

void npb_barrier(void) { bsp_sync(); }

void npb_allgather(const char *phase, const void *mine, void *all, int nbytes) {
    int p = bsp_nprocs(), me = bsp_pid();
    if (p == 1) {
        memcpy(all, mine, (size_t)nbytes);
        return;
    }
    if (nbytes > NPB_GATHER_MAX) npb_fail("npb_allgather: %d bytes exceed %d", nbytes, NPB_GATHER_MAX);
    npb_comm_begin(phase);
    for (int q = 0; q < p; q++)
        if (q != me) bsp_put(q, mine, gather_area, me * nbytes, nbytes);
    bsp_sync();
    npb_comm_end();
    memcpy(gather_area + (long)me * nbytes, mine, nbytes);
    memcpy(all, gather_area, (size_t)p * nbytes);
}

int npb_end(struct npb_result *r) {
    npb_collect(r);
    if (bsp_pid() == 0) npb_print_result(r, "bsp");
    bsp_end();
    return r->verified ? 0 : 1;
}
