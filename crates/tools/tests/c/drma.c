/* DRMA conformance: bsp_put, bsp_hpput, bsp_get, bsp_hpget, bsp_push_reg, bsp_pop_reg.
 * Usage: drma [P [EXPECTED_P]]   (P defaults to bsp_nprocs()). Pid 0 prints "drma ok". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static int glob[64];

/* A registration of a stack variable inside a function, used and popped there. */
static void stack_area(bsp_pid_t p, bsp_pid_t s) {
    long cell = -1;
    bsp_push_reg(&cell, sizeof cell);
    bsp_sync();
    long v = 1000 + (long)s;
    bsp_put((s + 1) % p, &v, &cell, 0, sizeof v);
    bsp_sync();
    CHECK_EQ(cell, 1000 + (s + p - 1) % p);
    bsp_pop_reg(&cell);
    bsp_sync();
}

static unsigned rnd(unsigned *x) {
    *x ^= *x << 13;
    *x ^= *x >> 17;
    *x ^= *x << 5;
    return *x;
}

int main(int argc, char **argv) {
    int want = argc > 1 ? atoi(argv[1]) : (int)bsp_nprocs();
    bsp_begin(want);
    bsp_pid_t p = bsp_nprocs(), s = bsp_pid();
    if (argc > 2) CHECK_EQ(p, atoi(argv[2]));
    CHECK(s < p);

    /* 1. A put copies its source at the call; nothing lands before the sync. */
    int *a = calloc(p, sizeof(int));
    bsp_push_reg(a, p * sizeof(int));
    bsp_sync();
    int v = 100 + (int)s;
    for (bsp_pid_t q = 0; q < p; q++) bsp_put(q, &v, a, s * sizeof(int), sizeof(int));
    v = -1;
    for (bsp_pid_t q = 0; q < p; q++) CHECK_EQ(a[q], 0);
    bsp_sync();
    for (bsp_pid_t q = 0; q < p; q++) CHECK_EQ(a[q], 100 + q);

    /* 2. Gets read before puts write: swap around the ring in one superstep. */
    int x = (int)s, y = -1;
    bsp_push_reg(&x, sizeof x);
    bsp_sync();
    int nx = 1000 + (int)s;
    bsp_get((s + 1) % p, &x, 0, &y, sizeof y);
    bsp_put((s + 1) % p, &nx, &x, 0, sizeof nx);
    bsp_sync();
    CHECK_EQ(y, (s + 1) % p);
    CHECK_EQ(x, 1000 + (s + p - 1) % p);

    /* 3. hpput and hpget deliver like put and get. */
    int hsrc[4] = {(int)s, (int)s + 1, (int)s + 2, (int)s + 3}, hdst[4] = {0};
    bsp_push_reg(hdst, sizeof hdst);
    bsp_push_reg(hsrc, sizeof hsrc);
    bsp_sync();
    bsp_hpput((s + 1) % p, hsrc, hdst, 0, sizeof hsrc);
    bsp_sync();
    for (int i = 0; i < 4; i++) CHECK_EQ(hdst[i], (s + p - 1) % p + i);
    int got[2] = {0};
    bsp_hpget((s + p - 1) % p, hsrc, 2 * sizeof(int), got, sizeof got);
    bsp_sync();
    CHECK_EQ(got[0], (s + p - 1) % p + 2);
    CHECK_EQ(got[1], (s + p - 1) % p + 3);

    /* 4. A newer registration of an address shadows the older until popped. */
    bsp_push_reg(glob, 4 * sizeof(int));
    bsp_sync();
    bsp_push_reg(glob, 64 * sizeof(int));
    bsp_sync();
    int g = 7 + (int)s;
    bsp_put((s + 1) % p, &g, glob, 60 * sizeof(int), sizeof g); /* fits the newer */
    bsp_sync();
    CHECK_EQ(glob[60], 7 + (s + p - 1) % p);
    bsp_pop_reg(glob);
    /* The pop takes effect at the next sync: this put still uses the 64-int area. */
    bsp_put((s + 1) % p, &g, glob, 61 * sizeof(int), sizeof g);
    bsp_sync();
    CHECK_EQ(glob[61], 7 + (s + p - 1) % p);
    bsp_put((s + 1) % p, &g, glob, 3 * sizeof(int), sizeof g); /* the older: 4 ints */
    bsp_sync();
    CHECK_EQ(glob[3], 7 + (s + p - 1) % p);
    bsp_pop_reg(glob);
    bsp_sync();

    /* 5. NULL with size 0: only pid 0 holds the array, everyone writes into it. */
    char *buf = s == 0 ? calloc(p, 1) : NULL;
    bsp_push_reg(buf, s == 0 ? p : 0);
    bsp_sync();
    char c = (char)('a' + s % 26);
    bsp_put(0, &c, buf, s, 1);
    bsp_put(0, &c, buf, 0, 0); /* zero bytes anywhere in range: nothing */
    bsp_sync();
    if (s == 0)
        for (bsp_pid_t q = 0; q < p; q++) CHECK_EQ(buf[q], 'a' + q % 26);
    bsp_pop_reg(buf);
    bsp_sync();

    /* 6. Large transfers: 1 MiB put to the next, 1 MiB get from the previous. */
    size_t big = 1 << 20;
    unsigned char *src = malloc(big), *dst = malloc(big), *g2 = malloc(big);
    for (size_t i = 0; i < big; i++) src[i] = (unsigned char)(i * 7 + s);
    memset(dst, 0, big);
    bsp_push_reg(src, big);
    bsp_push_reg(dst, big);
    bsp_sync();
    bsp_put((s + 1) % p, src, dst, 0, big);
    bsp_get((s + p - 1) % p, src, 0, g2, big);
    bsp_sync();
    for (size_t i = 0; i < big; i++) {
        if (dst[i] != (unsigned char)(i * 7 + (s + p - 1) % p)) CHECK_EQ(dst[i], -1);
        if (g2[i] != (unsigned char)(i * 7 + (s + p - 1) % p)) CHECK_EQ(g2[i], -2);
    }
    bsp_pop_reg(dst);
    bsp_pop_reg(src);
    bsp_sync();

    /* 7. Many small puts to pseudo-random places; the same seed on every process tells
     * each what all the others did. Later puts of one process win. */
    bsp_pid_t n = 64 * p;
    int *field = calloc(n, sizeof(int));
    bsp_push_reg(field, n * sizeof(int));
    bsp_sync();
    for (unsigned round = 0; round < 3; round++) {
        int *model = calloc(n, sizeof(int));
        for (bsp_pid_t q = 0; q < p; q++) {
            unsigned r = 12345u + 977u * q + 31u * round;
            for (int i = 0; i < 2000; i++) {
                bsp_pid_t to = rnd(&r) % p, at = q * 64 + rnd(&r) % 64;
                int val = (int)(rnd(&r) >> 1);
                if (q == s) bsp_put(to, &val, field, at * sizeof(int), sizeof val);
                if (to == s) model[at] = val;
            }
        }
        bsp_sync();
        for (bsp_pid_t i = 0; i < n; i++)
            if (field[i] != model[i] && model[i] != 0) CHECK_EQ(field[i], model[i]);
        free(model);
    }
    bsp_pop_reg(field);
    bsp_sync();

    /* 8. Puts and gets to oneself; a get sees the value from before the self put. */
    int me = 5, seen = 0, nv = 6;
    bsp_push_reg(&me, sizeof me);
    bsp_sync();
    bsp_get(s, &me, 0, &seen, sizeof seen);
    bsp_put(s, &nv, &me, 0, sizeof nv);
    bsp_sync();
    CHECK_EQ(seen, 5);
    CHECK_EQ(me, 6);
    bsp_pop_reg(&me);
    bsp_sync();

    /* 9. Registrations pushed and popped in a loop, and a function's stack area. */
    for (int i = 0; i < 20; i++) {
        int cell = 0;
        bsp_push_reg(&cell, sizeof cell);
        bsp_sync();
        bsp_put((s + i) % p, &i, &cell, 0, sizeof i);
        bsp_sync();
        CHECK_EQ(cell, i);
        bsp_pop_reg(&cell);
        bsp_sync();
    }
    stack_area(p, s);

    /* 10. Areas registered in different orders of address but the same order of calls,
     * and a pop of one of several: the others still work. */
    int r1[2] = {0}, r2[2] = {0}, r3[2] = {0};
    bsp_push_reg(r1, sizeof r1);
    bsp_push_reg(r2, sizeof r2);
    bsp_push_reg(r3, sizeof r3);
    bsp_sync();
    bsp_pop_reg(r2);
    int one = 1, three = 3;
    bsp_put((s + 1) % p, &one, r1, 0, sizeof one);
    bsp_put((s + 1) % p, &three, r3, sizeof(int), sizeof three);
    bsp_sync();
    CHECK_EQ(r1[0], 1);
    CHECK_EQ(r3[1], 3);

    /* 11. A transfer of 0 bytes does nothing, whatever else it names: no process, an
     * address that is not registered, NULL buffers, an offset past any area. */
    int unreg = 0;
    bsp_put(p + 3, NULL, &unreg, 12345, 0);
    bsp_hpput(p + 3, NULL, &unreg, 12345, 0);
    bsp_get(p + 3, &unreg, 12345, NULL, 0);
    bsp_hpget(p + 3, &unreg, 12345, NULL, 0);
    bsp_sync();

    /* 12. Gets from several processes into overlapping places land in the order they
     * were made (each later one wins where they overlap). */
    long gsrc[16], gdst[16];
    for (int i = 0; i < 16; i++) gsrc[i] = 1000L * s + i, gdst[i] = -1;
    bsp_push_reg(gsrc, sizeof gsrc);
    bsp_sync();
    bsp_pid_t ga = (s + 1) % p, gb = (s + 2) % p;
    bsp_get(ga, gsrc, 0, gdst, 8 * sizeof(long));
    bsp_get(gb, gsrc, 4 * sizeof(long), gdst + 4, 8 * sizeof(long));
    bsp_get(s, gsrc, 6 * sizeof(long), gdst + 6, 2 * sizeof(long));
    bsp_get(ga, gsrc, 10 * sizeof(long), gdst + 10, sizeof(long));
    bsp_sync();
    for (int i = 0; i < 16; i++) {
        long from = i == 10                ? (long)ga
                    : i >= 6 && i < 8      ? (long)s
                    : i >= 4 && i < 12     ? (long)gb
                    : i < 4                ? (long)ga
                                           : -1;
        CHECK_EQ(gdst[i], from < 0 ? -1 : 1000L * from + i);
    }
    bsp_pop_reg(gsrc);
    bsp_sync();

    /* 13. Processes without the data register NULL, twice; pid 0 pops its older area:
     * the NULL pops elsewhere pop that one too, and the newer still takes puts. */
    long *older = s == 0 ? calloc(p, sizeof(long)) : NULL;
    long *newer = s == 0 ? calloc(p, sizeof(long)) : NULL;
    bsp_push_reg(older, s == 0 ? p * sizeof(long) : 0);
    bsp_push_reg(newer, s == 0 ? p * sizeof(long) : 0);
    bsp_sync();
    bsp_pop_reg(older);
    bsp_sync();
    long mine = 500 + (long)s;
    bsp_put(0, &mine, newer, s * sizeof(long), sizeof mine);
    bsp_sync();
    if (s == 0)
        for (bsp_pid_t q = 0; q < p; q++) CHECK_EQ(newer[q], 500 + q);
    bsp_pop_reg(newer);
    bsp_sync();

    double t = bsp_time();
    CHECK(t > 0.0 && t < 600.0);
    bsp_sync();
    if (s == 0) printf("drma ok p=%d\n", (int)p);
    bsp_end();
    printf("after bsp_end\n");
    return 0;
}
