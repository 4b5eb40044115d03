/* Misuse and abort (the int dialect): `misuse CASE [P]` commits the misuse CASE; the job
 * must stop with a clear message naming the call. Pid 0 prints "not reached" if it was
 * not caught. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static void vabort_wrapper(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    bsp_vabort(fmt, ap);
}

int main(int argc, char **argv) {
    const char *c = argc > 1 ? argv[1] : "";
    if (!strcmp(c, "sync_outside")) bsp_sync();
    if (!strcmp(c, "pid_outside")) printf("pid %d\n", bsp_pid());
    bsp_begin(argc > 2 ? atoi(argv[2]) : bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid();
    int x[4] = {0}, unreg = 0, tag = 0, status = 0;
    char buf[16];
    /* Pid 1 registers less than the others, so bounds follow the remote size. */
    bsp_push_reg(x, s == 1 ? 8 : (int)sizeof x);
    bsp_sync();
    int one = 1;
    if (!strcmp(c, "put_unregistered")) {
        if (s == 0) bsp_put(1 % p, &one, &unreg, 0, sizeof one);
    } else if (!strcmp(c, "put_pending")) {
        int y;
        bsp_push_reg(&y, sizeof y);
        bsp_put(0, &one, &y, 0, sizeof one);
    } else if (!strcmp(c, "put_inside")) {
        if (s == 0) bsp_put(1 % p, &one, &x[2], 0, sizeof one);
    } else if (!strcmp(c, "put_bounds")) {
        if (s == 0) bsp_put(1 % p, x, x, 4, 8); /* pid 1 registered 8 bytes */
    } else if (!strcmp(c, "get_bounds")) {
        if (s == 0) bsp_get(1 % p, x, 8, buf, 4);
    } else if (!strcmp(c, "bad_pid")) {
        if (s == 0) bsp_put(p, &one, x, 0, sizeof one);
    } else if (!strcmp(c, "negative_put")) {
        if (s == 0) bsp_put(0, &one, x, 0, -1);
    } else if (!strcmp(c, "negative_offset")) {
        if (s == 0) bsp_get(0, x, -8, buf, 4);
    } else if (!strcmp(c, "negative_push")) {
        bsp_push_reg(buf, -4);
    } else if (!strcmp(c, "null_source")) {
        if (s == 0) bsp_put(0, NULL, x, 0, 4);
    } else if (!strcmp(c, "pop_unregistered")) {
        bsp_pop_reg(&unreg);
    } else if (!strcmp(c, "push_count")) {
        int y[2];
        bsp_push_reg(&y[0], sizeof(int));
        if (s == 0) bsp_push_reg(&y[1], sizeof(int));
        bsp_sync();
    } else if (!strcmp(c, "push_order")) {
        int y;
        if (s == 0) {
            bsp_pop_reg(x);
            bsp_push_reg(&y, sizeof y);
        } else {
            bsp_push_reg(&y, sizeof y);
            bsp_pop_reg(x);
        }
        bsp_sync();
    } else if (!strcmp(c, "push_swapped")) {
        /* The same number of registrations, different variables in a different order:
         * BSPlib cannot tell, but the put that follows overflows the remote area. */
        static char big[16], small[4];
        if (s == 0) {
            bsp_push_reg(big, sizeof big);
            bsp_push_reg(small, sizeof small);
        } else {
            bsp_push_reg(small, sizeof small);
            bsp_push_reg(big, sizeof big);
        }
        bsp_sync();
        if (s == 0) bsp_put(1 % p, big, big, 0, sizeof big);
    } else if (!strcmp(c, "pop_mismatch")) {
        int y;
        bsp_push_reg(&y, sizeof y);
        bsp_sync();
        bsp_pop_reg(s == 0 ? (void *)x : (void *)&y);
        bsp_sync();
    } else if (!strcmp(c, "end_vs_sync")) {
        if (s == 1 % p) bsp_end();
        bsp_sync();
    } else if (!strcmp(c, "negative_tagsize")) {
        int t = -1;
        bsp_set_tagsize(&t);
    } else if (!strcmp(c, "tagsize_mismatch")) {
        int t = 4 * (s + 1);
        bsp_set_tagsize(&t);
        bsp_sync();
    } else if (!strcmp(c, "move_empty")) {
        bsp_move(buf, sizeof buf);
    } else if (!strcmp(c, "move_negative")) {
        bsp_send(s, NULL, "x", 1);
        bsp_sync();
        bsp_move(buf, -1);
    } else if (!strcmp(c, "send_negative")) {
        bsp_send(0, &tag, buf, -5);
    } else if (!strcmp(c, "send_null_tag")) {
        int t = 4;
        bsp_set_tagsize(&t);
        bsp_sync();
        bsp_send(0, NULL, buf, 1);
    } else if (!strcmp(c, "get_tag_null_status")) {
        bsp_get_tag(NULL, &tag);
    } else if (!strcmp(c, "begin_twice")) {
        bsp_begin(p);
    } else if (!strcmp(c, "abort")) {
        if (s == 1 % p) bsp_abort("custom abort %d from %s\n", 42, "pid one");
        for (int i = 0; i < 1000; i++) bsp_sync();
    } else if (!strcmp(c, "vabort")) {
        if (s == 0) vabort_wrapper("vabort %s %d", "says", 7);
    } else if (!strcmp(c, "abort_all")) {
        bsp_abort("everyone aborts (pid %d)", s);
    } else if (!strcmp(c, "check_fails")) {
        CHECK_EQ(s, -1);
    } else if (!strcmp(c, "pop_null_nothing")) {
        bsp_pop_reg(NULL);
        bsp_sync();
    } else if (!strcmp(c, "time_after_end")) {
        bsp_end();
        printf("time %f\n", bsp_time());
        return 0;
    } else {
        bsp_abort("unknown case '%s'", c);
    }
    bsp_sync();
    (void)status;
    if (s == 0) printf("not reached: %s\n", c);
    bsp_end();
    return 0;
}
