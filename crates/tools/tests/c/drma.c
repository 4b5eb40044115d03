/* DRMA conformance: bsp_put, bsp_hpput, bsp_get, bsp_hpget, bsp_push_reg, bsp_pop_reg.
 * Usage: drma [P [EXPECTED_P]]   (P defaults to bsp_nprocs()). Pid 0 prints "drma ok". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static int glob[64];

/* A registration of a stack variable inside a function, used and popped there. */
static void stack_area(int p, int s) {
    long cell = -1;
    bsp_push_reg(&cell, sizeof cell);
    bsp_sync();
    long v = 1000 + s;
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
    int want = argc > 1 ? atoi(argv[1]) : bsp_nprocs();
    bsp_begin(want);
    int p = bsp_nprocs(), s = bsp_pid();
    if (argc > 2) CHECK_EQ(p, atoi(argv[2]));
    CHECK(s >= 0 && s < p);

    /* 1. A put copies its source at the call; nothing lands before the sync. */
    int *a = calloc(p, sizeof(int));
    bsp_push_reg(a, p * (int)sizeof(int));
    bsp_sync();
    int v = 100 + s;
    for (int q = 0; q < p; q++) bsp_put(q, &v, a, s * (int)sizeof(int), sizeof(int));
    v = -1;
    for (int q = 0; q < p; q++) CHECK_EQ(a[q], 0);
    bsp_sync();
    for (int q = 0; q < p; q++) CHECK_EQ(a[q], 100 + q);

    /* 2. Gets read before puts write: swap around the ring in one superstep. */
    int x = s, y = -1;
    bsp_push_reg(&x, sizeof x);
    bsp_sync();
    int nx = 1000 + s;
    bsp_get((s + 1) % p, &x, 0, &y, sizeof y);
    bsp_put((s + 1) % p, &nx, &x, 0, sizeof nx);
    bsp_sync();
    CHECK_EQ(y, (s + 1) % p);
    CHECK_EQ(x, 1000 + (s + p - 1) % p);

    /* 3. hpput and hpget deliver like put and get. */
    int hsrc[4] = {s, s + 1, s + 2, s + 3}, hdst[4] = {0};
    bsp_push_reg(hdst, sizeof hdst);
    bsp_push_reg(hsrc, sizeof hsrc);
    bsp_sync();
    bsp_hpput((s + 1) % p, hsrc, hdst, 0, sizeof hsrc);
    bsp_sync();
    for (int i = 0; i < 4; i++) CHECK_EQ(hdst[i], (s + p - 1) % p + i);
    int got[2] = {0};
    bsp_hpget((s + p - 1) % p, hsrc, 2 * (int)sizeof(int), got, sizeof got);
    bsp_sync();
    CHECK_EQ(got[0], (s + p - 1) % p + 2);
    CHECK_EQ(got[1], (s + p - 1) % p + 3);

    /* 4. A newer registration of an address shadows the older until popped. */
    bsp_push_reg(glob, 4 * (int)sizeof(int));
    bsp_sync();
    bsp_push_reg(glob, 64 * (int)sizeof(int));
    bsp_sync();
    int g = 7 + s;
    bsp_put((s + 1) % p, &g, glob, 60 * (int)sizeof(int), sizeof g); /* fits the newer */
    bsp_sync();
    CHECK_EQ(glob[60], 7 + (s + p - 1) % p);
    bsp_pop_reg(glob);
    /* The pop takes effect at the next sync: this put still uses the 64-int area. */
    bsp_put((s + 1) % p, &g, glob, 61 * (int)sizeof(int), sizeof g);
    bsp_sync();
    CHECK_EQ(glob[61], 7 + (s + p - 1) % p);
    bsp_put((s + 1) % p, &g, glob, 3 * (int)sizeof(int), sizeof g); /* the older: 4 ints */
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
        for (int q = 0; q < p; q++) CHECK_EQ(buf[q], 'a' + q % 26);
    bsp_pop_reg(buf);
    bsp_sync();

    /* 6. Large transfers: 1 MiB put to the next, 1 MiB get from the previous. */
    int big = 1 << 20;
    unsigned char *src = malloc(big), *dst = malloc(big), *g2 = malloc(big);
    for (int i = 0; i < big; i++) src[i] = (unsigned char)(i * 7 + s);
    memset(dst, 0, big);
    bsp_push_reg(src, big);
    bsp_push_reg(dst, big);
    bsp_sync();
    bsp_put((s + 1) % p, src, dst, 0, big);
    bsp_get((s + p - 1) % p, src, 0, g2, big);
    bsp_sync();
    for (int i = 0; i < big; i++) {
        if (dst[i] != (unsigned char)(i * 7 + (s + p - 1) % p)) CHECK_EQ(dst[i], -1);
        if (g2[i] != (unsigned char)(i * 7 + (s + p - 1) % p)) CHECK_EQ(g2[i], -2);
    }
    bsp_pop_reg(dst);
    bsp_pop_reg(src);
    bsp_sync();

    /* 7. Many small puts to pseudo-random places; the same seed on every process tells
     * each what all the others did. Later puts of one process win. */
    int n = 64 * p;
    int *field = calloc(n, sizeof(int));
    bsp_push_reg(field, n * (int)sizeof(int));
    bsp_sync();
    for (int round = 0; round < 3; round++) {
        int *model = calloc(n, sizeof(int));
        for (int q = 0; q < p; q++) {
            unsigned r = 12345u + 977u * q + 31u * round;
            for (int i = 0; i < 2000; i++) {
                int to = rnd(&r) % p, at = q * 64 + rnd(&r) % 64, val = (int)(rnd(&r) >> 1);
                if (q == s) bsp_put(to, &val, field, at * (int)sizeof(int), sizeof val);
                if (to == s) model[at] = val;
            }
        }
        bsp_sync();
        for (int i = 0; i < n; i++)
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

    double t = bsp_time();
    CHECK(t > 0.0 && t < 600.0);
    bsp_sync();
    if (s == 0) printf("drma ok p=%d\n", p);
    bsp_end();
    printf("after bsp_end\n");
    return 0;
}
