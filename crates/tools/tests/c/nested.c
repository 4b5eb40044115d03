/* Nested SPMD sections, as MulticoreBSP for C allows (its `hierarchical` example): a
 * process of a running section names a function with bsp_init and calls bsp_begin(Q):
 * it becomes pid 0 of a new section of Q processes, whose other processes run that
 * function; its bsp_end returns to the outer section, which goes on as before.
 * Usage: nested Q. Each outer process prints "outer S: inner Q ok sum N" and, after
 * communicating in the outer section again, "outer S ok p=P"; pid 0 prints "nested done"
 * after the outer bsp_end. */
#include <stdio.h>
#include <stdlib.h>

#include "check.h"

static int Q;

/* Every process of the inner section adds 100 * outer pid + its inner pid into pid 0's
 * array; the new processes learn the outer pid from pid 0 (they never ran the outer
 * section's code). */
static int inner(int outer) {
    bsp_begin((bsp_pid_t)Q);
    bsp_pid_t q = bsp_nprocs(), s = bsp_pid();
    int base = outer;
    int *all = calloc(q, sizeof(int));
    bsp_push_reg(&base, sizeof base);
    bsp_push_reg(all, q * sizeof(int));
    bsp_sync();
    if (s != 0) bsp_get(0, &base, 0, &base, sizeof base);
    bsp_sync();
    int v = 100 * base + (int)s;
    bsp_put(0, &v, all, s * sizeof(int), sizeof v);
    bsp_sync();
    int sum = 0;
    for (bsp_pid_t k = 0; k < q; k++) sum += all[k];
    bsp_pop_reg(all);
    bsp_pop_reg(&base);
    free(all);
    bsp_end(); /* ends the new processes; pid 0 returns to the outer section */
    return sum;
}

/* What the new processes of an inner section run. */
static void inner_entry(void) {
    inner(-1);
    printf("not reached: an inner process returned from bsp_end\n");
}

static void outer(void) {
    bsp_begin(2);
    bsp_pid_t p = bsp_nprocs(), s = bsp_pid();
    int x = -1;
    bsp_push_reg(&x, sizeof x);
    bsp_sync();
    bsp_init(inner_entry, 0, NULL);
    int sum = inner((int)s);
    int want = 0;
    for (int k = 0; k < Q; k++) want += 100 * (int)s + k;
    CHECK_EQ(sum, want);
    printf("outer %d: inner %d ok sum %d\n", (int)s, Q, sum);
    fflush(stdout);
    /* The outer section is intact: its registration and its processes. */
    CHECK_EQ(bsp_nprocs(), p);
    CHECK_EQ(bsp_pid(), s);
    int v = 7 * (int)s;
    bsp_put((s + 1) % p, &v, &x, 0, sizeof v);
    bsp_sync();
    CHECK_EQ(x, 7 * (int)((s + p - 1) % p));
    printf("outer %d ok p=%d\n", (int)s, (int)p);
    fflush(stdout);
    bsp_pop_reg(&x);
    bsp_end();
}

int main(int argc, char **argv) {
    Q = argc > 1 ? atoi(argv[1]) : 3;
    bsp_init(outer, argc, argv);
    outer();
    printf("nested done\n");
    return 0;
}
