/* Sample sort with BSMP (regular sampling, Shi and Schaeffer).
 *
 *     bspcc -O2 sample_sort.c -o sample_sort && bsprun -n 4 ./sample_sort [N_PER_PROCESS]
 *
 * 1. Each process sorts its keys and puts p regular samples into pid 0.
 * 2. Pid 0 sorts the samples and puts p-1 splitters into everyone.
 * 3. Each process sends each bucket to its owner with bsp_send (one message per owner).
 * 4. Each process moves its messages out of the queue and sorts what it got.
 * The result is checked: every process's keys are sorted, no key is smaller than the
 * largest key of the process before, and the count and sum of all keys are unchanged. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <bsp.h>

static int cmp(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int main(int argc, char **argv) {
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid();
    long n = argc > 1 ? atol(argv[1]) : 20000;
    if (n < p) bsp_abort("need at least %d keys per process", p);

    uint64_t *keys = malloc(n * sizeof *keys);
    uint64_t sum = 0;
    for (long i = 0; i < n; i++) {
        /* A skewed distribution, so buckets differ in size. */
        uint64_t r = mix((uint64_t)s * 1000003u + (uint64_t)i);
        keys[i] = (r >> 16) % ((r & 1) ? 1000000u : 50000u);
        sum += keys[i];
    }
    qsort(keys, n, sizeof *keys, cmp);

    /* Global count and sum, for the final check: everyone puts into pid 0. */
    uint64_t *totals = calloc(2 * p, sizeof *totals);
    uint64_t *samples = calloc((size_t)p * p, sizeof *samples);
    uint64_t *splitters = calloc(p, sizeof *splitters);
    bsp_push_reg(totals, 2 * p * (int)sizeof *totals);
    bsp_push_reg(samples, p * p * (int)sizeof *samples);
    bsp_push_reg(splitters, p * (int)sizeof *splitters);
    bsp_sync();

    uint64_t mine[2] = {(uint64_t)n, sum};
    bsp_put(0, mine, totals, 2 * s * (int)sizeof *totals, sizeof mine);
    uint64_t reg[64];
    if (p > 64) bsp_abort("at most 64 processes");
    for (int j = 0; j < p; j++) reg[j] = keys[j * n / p];
    bsp_put(0, reg, samples, s * p * (int)sizeof *samples, p * (int)sizeof *samples);
    bsp_sync();

    if (s == 0) {
        qsort(samples, (size_t)p * p, sizeof *samples, cmp);
        for (int j = 1; j < p; j++) splitters[j - 1] = samples[j * p];
        for (int q = 0; q < p; q++) bsp_put(q, splitters, splitters, 0, (p - 1) * (int)sizeof *splitters);
    }
    bsp_sync();

    /* Send bucket q (keys below splitter q, at or above splitter q-1) to process q. */
    long start = 0;
    for (int q = 0; q < p; q++) {
        long end = start;
        while (end < n && (q == p - 1 || keys[end] < splitters[q])) end++;
        if (end > start) bsp_send(q, NULL, keys + start, (int)((end - start) * sizeof *keys));
        start = end;
    }
    bsp_sync();

    int nmsg, nbytes;
    bsp_qsize(&nmsg, &nbytes);
    long m = nbytes / (long)sizeof *keys;
    uint64_t *mykeys = malloc((m + 1) * sizeof *mykeys);
    long at = 0;
    for (int i = 0; i < nmsg; i++) {
        int len;
        bsp_get_tag(&len, NULL);
        bsp_move(mykeys + at, len);
        at += len / (long)sizeof *keys;
    }
    if (at != m) bsp_abort("pid %d: moved %ld keys of %ld", s, at, m);
    qsort(mykeys, m, sizeof *mykeys, cmp);

    /* Check: my count and sum into pid 0; my largest key into the next process. */
    uint64_t *check = calloc(2 * p, sizeof *check);
    uint64_t prev_max = 0;
    bsp_push_reg(check, 2 * p * (int)sizeof *check);
    bsp_push_reg(&prev_max, sizeof prev_max);
    bsp_sync();
    uint64_t csum = 0;
    for (long i = 0; i < m; i++) csum += mykeys[i];
    uint64_t mine2[2] = {(uint64_t)m, csum};
    bsp_put(0, mine2, check, 2 * s * (int)sizeof *check, sizeof mine2);
    if (s + 1 < p && m > 0) bsp_put(s + 1, &mykeys[m - 1], &prev_max, 0, sizeof prev_max);
    bsp_sync();
    for (long i = 1; i < m; i++)
        if (mykeys[i - 1] > mykeys[i]) bsp_abort("pid %d: keys not sorted at %ld", s, i);
    if (m > 0 && mykeys[0] < prev_max) bsp_abort("pid %d: key %llu below the previous process's %llu", s, (unsigned long long)mykeys[0], (unsigned long long)prev_max);
    if (s == 0) {
        uint64_t n0 = 0, s0 = 0, n1 = 0, s1 = 0;
        for (int q = 0; q < p; q++) {
            n0 += totals[2 * q];
            s0 += totals[2 * q + 1];
            n1 += check[2 * q];
            s1 += check[2 * q + 1];
        }
        if (n0 != n1 || s0 != s1) bsp_abort("keys lost: %llu/%llu before, %llu/%llu after", (unsigned long long)n0, (unsigned long long)s0, (unsigned long long)n1, (unsigned long long)s1);
        printf("sample sort ok: p=%d keys=%llu\n", p, (unsigned long long)n1);
    }
    bsp_end();
    return 0;
}
