/*
 * IS: ranks TOTAL_KEYS integer keys in [0, MAX_KEY) ten times, as specified by NPB
 * (NAS-95-020, NPB 3). The decomposition is that of NPB's MPI version: each process
 * generates a block of the keys; per iteration every process learns every process's
 * bucket counts (one exchange), the buckets are divided among the processes in key
 * order so that each gets about TOTAL_KEYS / p keys, the keys go to their bucket's owner
 * (a second exchange) and each process ranks its key range by counting. Any p from 1 to
 * NUM_BUCKETS.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/comm.h"
#include "is.h"

#define SHIFT (MAX_KEY_LOG_2 - NUM_BUCKETS_LOG_2)
#define ROW (NUM_BUCKETS + TEST_ARRAY_SIZE) /* one process's counts and test keys */

/* NPB 3 reference values for the partial verification (NPB 3.x IS, test_index_array and
 * test_rank_array of each class). */
#if CLASS == 'S'
static const long test_index[TEST_ARRAY_SIZE] = {48427, 17148, 23627, 62548, 4431};
static const long test_rank[TEST_ARRAY_SIZE] = {0, 18, 346, 64917, 65463};
#elif CLASS == 'W'
static const long test_index[TEST_ARRAY_SIZE] = {357773, 934767, 875723, 898999, 404505};
static const long test_rank[TEST_ARRAY_SIZE] = {1249, 11698, 1039987, 1043896, 1048018};
#elif CLASS == 'A'
static const long test_index[TEST_ARRAY_SIZE] = {2112377, 662041, 5336171, 3642833, 4250760};
static const long test_rank[TEST_ARRAY_SIZE] = {104, 17523, 123928, 8288932, 8388264};
#else
static const long test_index[TEST_ARRAY_SIZE] = {41869, 812306, 5102857, 18232239, 26860214};
static const long test_rank[TEST_ARRAY_SIZE] = {33422937, 10244, 59149, 33135281, 99};
#endif

/* The rank test key t must have in `iteration` (NPB 3: the two keys set per iteration
 * move the test keys' ranks by a class-dependent amount). */
static long expected_rank(int t, int it) {
    long r = test_rank[t];
    switch (CLASS) {
    case 'S': return t <= 2 ? r + it : r - it;
    case 'W': return t < 2 ? r + (it - 2) : r - it;
    case 'A': return t <= 2 ? r + (it - 1) : r - (it - 1);
    default: return (t == 1 || t == 2 || t == 4) ? r + it : r - it;
    }
}

struct is {
    int p, me;
    long k0, n;          /* this process's block of the generated keys */
    int *keys;           /* key_array: n keys */
    int *send;           /* keys sorted by bucket, so by destination */
    int *recv;           /* keys of this process's buckets (registered) */
    long capacity, nrecv;
    long *ptr;           /* NUM_BUCKETS running positions of the bucket sort */
    int *mine;           /* this process's row */
    int *all;            /* every process's row */
    long *bucket_ptr;    /* NUM_BUCKETS + 1 */
    int *bstart;         /* p + 1: process q owns buckets [bstart[q], bstart[q + 1]) */
    long *start, *count, *dest_off, *recv_count, *recv_off;
    int *rank_count;     /* counts, then prefix sums, over this process's key range */
    long min_key, range, lesser;
    long passed;         /* partial verifications passed here */
};

/* NPB's key generator: key i is MAX_KEY / 4 times the sum of the generator's values
 * 4i+1..4i+4; a process starts 4 k0 values into the sequence. */
static void create_seq(struct is *s) {
    uint64_t x = npb_skip(314159265, NPB_MULT, 4 * (uint64_t)s->k0);
    double k = (double)(MAX_KEY / 4);
    for (long i = 0; i < s->n; i++) {
        double v = npb_randlc(&x, NPB_MULT);
        v += npb_randlc(&x, NPB_MULT);
        v += npb_randlc(&x, NPB_MULT);
        v += npb_randlc(&x, NPB_MULT);
        s->keys[i] = (int)(k * v);
    }
}

static void set_key(struct is *s, long global, int value) {
    if (global >= s->k0 && global < s->k0 + s->n) s->keys[global - s->k0] = value;
}

/* Counts per bucket, the test keys this process holds, and the keys in bucket order. */
static void count_buckets(struct is *s) {
    memset(s->mine, 0, ROW * sizeof(int));
    for (long i = 0; i < s->n; i++) s->mine[s->keys[i] >> SHIFT]++;
    for (int t = 0; t < TEST_ARRAY_SIZE; t++) {
        long g = test_index[t];
        if (g >= s->k0 && g < s->k0 + s->n) s->mine[NUM_BUCKETS + t] = s->keys[g - s->k0];
    }
    s->bucket_ptr[0] = 0;
    for (long b = 0; b < NUM_BUCKETS; b++) s->bucket_ptr[b + 1] = s->bucket_ptr[b] + s->mine[b];
    memcpy(s->ptr, s->bucket_ptr, NUM_BUCKETS * sizeof(long));
    for (long i = 0; i < s->n; i++) s->send[s->ptr[s->keys[i] >> SHIFT]++] = s->keys[i];
}

/* Buckets to processes in key order: process q's range ends at the first bucket whose
 * running total reaches (q + 1) TOTAL_KEYS / p. Every process computes the same. */
static void assign_buckets(struct is *s, const long *total) {
    int q = 0;
    long cum = 0;
    s->bstart[0] = 0;
    for (long b = 0; b < NUM_BUCKETS; b++) {
        cum += total[b];
        while (q < s->p - 1 && cum * s->p >= (long)(q + 1) * TOTAL_KEYS) s->bstart[++q] = (int)b + 1;
    }
    while (q < s->p) s->bstart[++q] = NUM_BUCKETS;
}

/* Where each part of the exchange goes, from every process's bucket counts. */
static void plan_exchange(struct is *s) {
    int p = s->p, me = s->me;
    for (int d = 0; d < p; d++) {
        int b0 = s->bstart[d], b1 = s->bstart[d + 1];
        s->start[d] = s->bucket_ptr[b0];
        s->count[d] = s->bucket_ptr[b1] - s->bucket_ptr[b0];
        long before = 0, from = 0; /* keys of d's buckets on processes below me; from q = me */
        for (int q = 0; q < me; q++)
            for (int b = b0; b < b1; b++) before += s->all[(long)q * ROW + b];
        s->dest_off[d] = before;
        for (int b = s->bstart[me]; b < s->bstart[me + 1]; b++) from += s->all[(long)d * ROW + b];
        s->recv_count[d] = from;
    }
    s->nrecv = 0;
    for (int q = 0; q < p; q++) {
        s->recv_off[q] = s->nrecv;
        s->nrecv += s->recv_count[q];
    }
    if (s->nrecv > s->capacity)
        npb_abort("process %d would receive %ld keys, more than its buffer of %ld", me, s->nrecv,
                 s->capacity);
}

/* Counts the received keys over this process's key range; prefix sums give, for each
 * value v, how many local keys are <= v. */
static void rank_local(struct is *s) {
    s->min_key = (long)s->bstart[s->me] << SHIFT;
    s->range = ((long)s->bstart[s->me + 1] << SHIFT) - s->min_key;
    memset(s->rank_count, 0, (size_t)s->range * sizeof(int));
    for (long i = 0; i < s->nrecv; i++) s->rank_count[s->recv[i] - s->min_key]++;
    for (long v = 1; v < s->range; v++) s->rank_count[v] += s->rank_count[v - 1];
}

static void partial_verify(struct is *s, const long *test_key, int iteration) {
    for (int t = 0; t < TEST_ARRAY_SIZE; t++) {
        long k = test_key[t];
        if (k < s->min_key || k >= s->min_key + s->range) continue;
        long r = s->lesser + (k > s->min_key ? s->rank_count[k - 1 - s->min_key] : 0);
        if (r == expected_rank(t, iteration))
            s->passed++;
        else
            printf("Failed partial verification: iteration %d, process %d, test key %d\n",
                   iteration, s->me, t);
    }
}

static void rank(struct is *s, int iteration) {
    set_key(s, iteration, iteration);
    set_key(s, iteration + MAX_ITERATIONS, (int)(MAX_KEY - iteration));
    count_buckets(s);
    npb_allgather("counts", s->mine, s->all, ROW * sizeof(int));
    long total[NUM_BUCKETS], test_key[TEST_ARRAY_SIZE];
    memset(total, 0, sizeof total);
    memset(test_key, 0, sizeof test_key);
    for (int q = 0; q < s->p; q++) {
        const int *row = s->all + (long)q * ROW;
        for (long b = 0; b < NUM_BUCKETS; b++) total[b] += row[b];
        for (int t = 0; t < TEST_ARRAY_SIZE; t++) test_key[t] += row[NUM_BUCKETS + t];
    }
    assign_buckets(s, total);
    plan_exchange(s);
    memcpy(s->recv + s->recv_off[s->me], s->send + s->start[s->me], s->count[s->me] * sizeof(int));
    if (s->p > 1) is_comm_keys(s->send, s->start, s->count, s->dest_off, s->recv_count, s->recv_off);
    s->lesser = 0;
    for (long b = 0; b < s->bstart[s->me]; b++) s->lesser += total[b];
    rank_local(s);
    partial_verify(s, test_key, iteration);
}

/* NPB's full verification: sort the local keys by their ranks, check they are in order
 * and not below any key of a process before. Returns 1 when they are. */
static int full_verify(struct is *s) {
    int *sorted = npb_alloc("the sorted keys", s->capacity, sizeof(int));
    for (long i = 0; i < s->nrecv; i++) {
        int v = s->recv[i];
        sorted[--s->rank_count[v - s->min_key]] = v;
    }
    long bad = 0;
    for (long i = 1; i < s->nrecv; i++) bad += sorted[i - 1] > sorted[i];
    int edge[3] = {s->nrecv > 0, s->nrecv ? sorted[0] : 0, s->nrecv ? sorted[s->nrecv - 1] : 0};
    int *edges = npb_alloc("the edges", 3L * s->p, sizeof(int));
    npb_allgather("verify", edge, edges, sizeof edge);
    for (int q = 0; q < s->me; q++)
        if (edges[3 * q] && s->nrecv && edges[3 * q + 2] > sorted[0]) bad++;
    if (bad) printf("Full verification failed on process %d: %ld keys out of order\n", s->me, bad);
    free(edges);
    free(sorted);
    return bad == 0;
}

static void setup(struct is *s) {
    int p = s->p;
    s->k0 = npb_part(TOTAL_KEYS, p, s->me);
    s->n = npb_part(TOTAL_KEYS, p, s->me + 1) - s->k0;
    /* A process receives at most its share plus one bucket; buckets of this key
     * distribution hold at most about 3 TOTAL_KEYS / NUM_BUCKETS keys. */
    s->capacity = TOTAL_KEYS / p + 8 * (TOTAL_KEYS / NUM_BUCKETS) + 1024;
    if (s->capacity > TOTAL_KEYS) s->capacity = TOTAL_KEYS;
    s->keys = npb_alloc("the keys", s->n, sizeof(int));
    s->send = npb_alloc("the send buffer", s->n, sizeof(int));
    s->recv = npb_alloc("the receive buffer", s->capacity, sizeof(int));
    s->ptr = npb_alloc("the bucket positions", NUM_BUCKETS, sizeof(long));
    s->mine = npb_alloc("the counts", ROW, sizeof(int));
    s->all = npb_alloc("every process's counts", (long)p * ROW, sizeof(int));
    s->bucket_ptr = npb_alloc("the bucket pointers", NUM_BUCKETS + 1, sizeof(long));
    s->bstart = npb_alloc("the bucket owners", p + 1, sizeof(int));
    s->start = npb_alloc("the plan", p, sizeof(long));
    s->count = npb_alloc("the plan", p, sizeof(long));
    s->dest_off = npb_alloc("the plan", p, sizeof(long));
    s->recv_count = npb_alloc("the plan", p, sizeof(long));
    s->recv_off = npb_alloc("the plan", p, sizeof(long));
    s->rank_count = npb_alloc("the rank counts", MAX_KEY, sizeof(int));
    is_comm_init(s->recv, s->capacity);
}

int main(int argc, char **argv) {
    npb_begin(argc, argv);
    struct is s = {.p = npb_nprocs(), .me = npb_pid()};
    if (s.p > NUM_BUCKETS)
        npb_fail("IS class %c runs on 1 to %ld processes (one bucket each at least); got p = %d",
                 CLASS, NUM_BUCKETS, s.p);
    if (s.me == 0) {
        printf("\n\n NAS Parallel Benchmarks (bulkwire, NPB 3 specification) -- IS Benchmark\n\n");
        printf(" Size:  %ld  (class %c)\n", TOTAL_KEYS, CLASS);
        printf(" Iterations:  %d\n", MAX_ITERATIONS);
        printf(" Number of processes:  %d\n\n", s.p);
    }
    setup(&s);
    create_seq(&s);
    /* One untimed iteration touches every page, as NPB does. */
    rank(&s, 1);
    s.passed = 0;
    npb_barrier();
    npb_timed_begin();
    for (int it = 1; it <= MAX_ITERATIONS; it++) {
        if (s.me == 0) printf("        %d\n", it);
        rank(&s, it);
    }
    npb_timed_end();
    long mine[2] = {s.passed, full_verify(&s)}, *every = npb_alloc("the results", 2L * s.p, sizeof(long));
    npb_allgather("verify", mine, every, sizeof mine);
    long passed = 0;
    for (int q = 0; q < s.p; q++) passed += every[2 * q] + every[2 * q + 1];
    struct npb_result r = {
        .kernel = "IS", .n1 = TOTAL_KEYS, .niter = MAX_ITERATIONS, .optype = "keys ranked",
        .mops_work = (double)MAX_ITERATIONS * TOTAL_KEYS / 1e6,
        .verified = passed == 5L * MAX_ITERATIONS + s.p,
    };
    free(every);
    return npb_end(&r);
}
