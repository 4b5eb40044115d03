/* bulkwire.h's collectives from C: a job of N processes (self-spawned, or under bsprun)
 * runs every collective against a serial reference that each process computes from the
 * known inputs of every rank; element counts 0, 1, 7, 1000, 20000 and BIG bytes' worth
 * (default 4 MiB); every built-in operation over int32, int64, uint8 and double (and the
 * other datatypes at the smaller counts); a commutative and a non-commutative user
 * operation; in-place reductions; and misuse (each must return its code and leave a
 * message naming the call, the rank and the bounds). Any mismatch prints what, where,
 * got and expected, and exits 1. Prints "C COLL OK rank=R" at the end.
 *
 * Usage: coll_test N [BIG_BYTES [init-error|bad-setting]]
 *   init-error: the processes configure the collectives differently (BULKWIRE_COLL_PART
 *     set apart in the spawned ones): expect the collectives' set-up to fail;
 *   bad-setting: expect bw_init to refuse the bad BULKWIRE_COLL the test runs with. */
#define _POSIX_C_SOURCE 200809L
#include "bulkwire.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int rank = -1, size = 0;
static long checks = 0;

#define CHECK(x)                                                                       \
    do {                                                                               \
        int rc_ = (x);                                                                 \
        if (rc_ != BW_SUCCESS) {                                                       \
            fprintf(stderr, "rank %d: line %d: %s: %s (%s)\n", rank, __LINE__, #x,     \
                    bw_error_string(rc_), bw_last_error());                            \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

#define ASSERT(c)                                                                      \
    do {                                                                               \
        if (!(c)) {                                                                    \
            fprintf(stderr, "rank %d: line %d: assertion failed: %s\n", rank, __LINE__, \
                    #c);                                                               \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

/* `x` must return `code` and bw_last_error() must contain every string given. */
#define EXPECT(x, code, ...)                                                           \
    do {                                                                               \
        int rc_ = (x);                                                                 \
        const char *m_ = bw_last_error();                                              \
        const char *subs_[] = {__VA_ARGS__};                                           \
        if (rc_ != (code)) {                                                           \
            fprintf(stderr, "rank %d: line %d: %s returned %d (%s; %s), not %s\n",    \
                    rank, __LINE__, #x, rc_, bw_error_string(rc_), m_, #code);         \
            exit(1);                                                                   \
        }                                                                              \
        for (size_t k_ = 0; k_ < sizeof subs_ / sizeof subs_[0]; k_++) {               \
            if (!strstr(m_, subs_[k_])) {                                              \
                fprintf(stderr, "rank %d: line %d: %s: message \"%s\" lacks \"%s\"\n", \
                        rank, __LINE__, #x, m_, subs_[k_]);                            \
                exit(1);                                                               \
            }                                                                          \
        }                                                                              \
        checks++;                                                                      \
    } while (0)

static void *xmalloc(size_t n) {
    /* malloc(0) may return NULL; the collectives take NULL for zero counts anyway, but a
     * real pointer keeps the tests about counts, not about NULL. */
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "rank %d: out of memory (%zu bytes)\n", rank, n);
        exit(1);
    }
    return p;
}

/* A well-mixed 64-bit function of three numbers (splitmix64's finaliser). */
static uint64_t mix(uint64_t a, uint64_t b, uint64_t c) {
    uint64_t x = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull) * 0xBF58476D1CE4E5B9ull ^
                 (c + 1) * 0x94D049BB133111EBull;
    x ^= x >> 31;
    x *= 0xD6E8FEB86659FD93ull;
    x ^= x >> 32;
    return x;
}

/* ---- data movement: byte patterns ------------------------------------------------- */

/* Byte i of the block that rank `from` sends to rank `to` in test `t`. */
static unsigned char pat(int t, int from, int to, size_t i) {
    return (unsigned char)(mix((uint64_t)t << 20 | (uint64_t)from << 10 | (uint64_t)to, 1,
                               i / 8) >>
                           (8 * (i % 8)));
}

static void fill(unsigned char *b, size_t n, int t, int from, int to) {
    for (size_t i = 0; i < n; i++) b[i] = pat(t, from, to, i);
}

/* Fails, naming the call, unless b holds the block from -> to of test t. */
static void expect_block(const unsigned char *b, size_t n, int t, int from, int to,
                         const char *call, size_t count, int root) {
    for (size_t i = 0; i < n; i++) {
        if (b[i] != pat(t, from, to, i)) {
            fprintf(stderr,
                    "rank %d of %d: %s count=%zu root=%d: byte %zu of the block from rank "
                    "%d to rank %d is %u, expected %u\n",
                    rank, size, call, count, root, i, from, to, b[i], pat(t, from, to, i));
            exit(1);
        }
    }
    checks++;
}

static const bw_datatype move_types[] = {BW_UINT8, BW_INT32, BW_DOUBLE};

static int test_no = 0;

static void test_bcast(size_t count, bw_datatype dt, int root) {
    size_t n = count * bw_datatype_size(dt);
    unsigned char *b = xmalloc(n);
    int t = ++test_no;
    if (rank == root)
        fill(b, n, t, root, 0);
    else
        memset(b, 0xEE, n);
    CHECK(bw_bcast(b, count, dt, root));
    expect_block(b, n, t, root, 0, "bw_bcast", count, root);
    free(b);
}

static void test_scatter(size_t count, bw_datatype dt, int root) {
    size_t n = count * bw_datatype_size(dt);
    unsigned char *send = NULL, *recv = xmalloc(n);
    int t = ++test_no;
    if (rank == root) {
        send = xmalloc(n * size);
        for (int j = 0; j < size; j++) fill(send + j * n, n, t, root, j);
    }
    memset(recv, 0xEE, n);
    /* Elsewhere than at the root, sendbuf is not read: NULL. */
    CHECK(bw_scatter(send, recv, count, dt, root));
    expect_block(recv, n, t, root, rank, "bw_scatter", count, root);
    free(send);
    free(recv);
}

static void test_gather(size_t count, bw_datatype dt, int root) {
    size_t n = count * bw_datatype_size(dt);
    unsigned char *send = xmalloc(n), *recv = NULL;
    int t = ++test_no;
    fill(send, n, t, rank, root);
    if (rank == root) {
        recv = xmalloc(n * size);
        memset(recv, 0xEE, n * size);
    }
    CHECK(bw_gather(send, recv, count, dt, root));
    if (rank == root)
        for (int j = 0; j < size; j++)
            expect_block(recv + j * n, n, t, j, root, "bw_gather", count, root);
    free(send);
    free(recv);
}

static void test_allgather(size_t count, bw_datatype dt) {
    size_t n = count * bw_datatype_size(dt);
    unsigned char *send = xmalloc(n), *recv = xmalloc(n * size);
    int t = ++test_no;
    fill(send, n, t, rank, 0);
    memset(recv, 0xEE, n * size);
    CHECK(bw_allgather(send, recv, count, dt));
    for (int j = 0; j < size; j++)
        expect_block(recv + j * n, n, t, j, 0, "bw_allgather", count, -1);
    free(send);
    free(recv);
}

static void test_alltoall(size_t count, bw_datatype dt) {
    size_t n = count * bw_datatype_size(dt);
    unsigned char *send = xmalloc(n * size), *recv = xmalloc(n * size);
    int t = ++test_no;
    for (int j = 0; j < size; j++) fill(send + j * n, n, t, rank, j);
    memset(recv, 0xEE, n * size);
    CHECK(bw_alltoall(send, recv, count, dt));
    for (int j = 0; j < size; j++)
        expect_block(recv + j * n, n, t, j, rank, "bw_alltoall", count, -1);
    free(send);
    free(recv);
}

/* Elements rank `from` sends to rank `to`: 0 to 3 units, so some pairs send nothing. */
static size_t vcount(int from, int to, size_t unit) {
    return (size_t)((from * 3 + to * 5 + 1) % 4) * unit;
}

/* Send blocks laid out in reverse rank order with a gap of one element between them,
 * receive blocks in rank order with gaps of two: displacements must be honoured. */
static void test_alltoallv(size_t unit, bw_datatype dt) {
    size_t z = bw_datatype_size(dt);
    size_t sc[64], sd[64], rc[64], rd[64], slen = 0, rlen = 0;
    ASSERT(size <= 64);
    for (int j = size - 1; j >= 0; j--) {
        sc[j] = vcount(rank, j, unit);
        sd[j] = slen;
        slen += sc[j] + 1;
    }
    for (int i = 0; i < size; i++) {
        rc[i] = vcount(i, rank, unit);
        rd[i] = rlen + 2;
        rlen += rc[i] + 2;
    }
    unsigned char *send = xmalloc(slen * z), *recv = xmalloc(rlen * z);
    int t = ++test_no;
    memset(send, 0xAB, slen * z);
    for (int j = 0; j < size; j++) fill(send + sd[j] * z, sc[j] * z, t, rank, j);
    memset(recv, 0xEE, rlen * z);
    CHECK(bw_alltoallv(send, sc, sd, recv, rc, rd, dt));
    for (int i = 0; i < size; i++) {
        expect_block(recv + rd[i] * z, rc[i] * z, t, i, rank, "bw_alltoallv", unit, -1);
        /* The gaps are untouched. */
        for (size_t g = (i ? rd[i - 1] + rc[i - 1] : 0) * z; g < rd[i] * z; g++) {
            if (recv[g] != 0xEE) {
                fprintf(stderr, "rank %d: bw_alltoallv unit=%zu wrote byte %zu, in a gap\n",
                        rank, unit, g);
                exit(1);
            }
        }
    }
    free(send);
    free(recv);
}

/* Causality: no process leaves the barrier before the last one has entered. One process
 * (a different one each round) enters late, so a barrier that does not wait would show. */
static void test_barrier(void) {
    for (int round = 0; round < 3; round++) {
        struct timespec ts;
        if (rank == round % size) {
            struct timespec nap = {0, 30 * 1000 * 1000};
            nanosleep(&nap, NULL);
        }
        clock_gettime(CLOCK_MONOTONIC, &ts);
        int64_t in = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
        CHECK(bw_barrier());
        clock_gettime(CLOCK_MONOTONIC, &ts);
        int64_t out = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
        int64_t last = 0;
        /* CLOCK_MONOTONIC is one clock for every process of a host. */
        CHECK(bw_allreduce(&in, &last, 1, BW_INT64, BW_MAX));
        if (out < last) {
            fprintf(stderr,
                    "rank %d: bw_barrier round %d: left at %" PRId64 " ns, before the last "
                    "process entered (%" PRId64 " ns)\n",
                    rank, round, out, last);
            exit(1);
        }
        checks++;
    }
}

/* ---- reductions --------------------------------------------------------------------- */

enum kind { K_SUM, K_MIN, K_MAX, K_PROD, K_XOR };
static const char *const kind_name[] = {"BW_SUM", "BW_MIN", "BW_MAX", "BW_PROD",
                                        "user xor"};
static bw_op kind_op[5] = {BW_SUM, BW_MIN, BW_MAX, BW_PROD, BW_OP_NULL};

/* The context of the user operations: checked on every call, and calls counted. */
#define CTX_MAGIC 0x5ca1ab1e0ddba11ull
struct uctx {
    uint64_t magic;
    long calls;
};
static struct uctx xor_ctx = {CTX_MAGIC, 0}, affine_ctx = {CTX_MAGIC, 0};

static void check_ctx(void *ctx, const void *in, void *inout, size_t count, size_t align) {
    struct uctx *c = ctx;
    if (!c || c->magic != CTX_MAGIC || !in || !inout || count == 0 ||
        (uintptr_t)in % align || (uintptr_t)inout % align) {
        fprintf(stderr, "rank %d: a user operation got bad arguments (ctx %p, in %p, inout "
                "%p, count %zu)\n", rank, ctx, in, inout, count);
        exit(1);
    }
    c->calls++;
}

/* Commutative: bitwise xor of the elements, whatever their type. */
static void user_xor(const void *in, void *inout, size_t count, bw_datatype dt, void *ctx) {
    size_t z = bw_datatype_size(dt);
    check_ctx(ctx, in, inout, count, z);
    const unsigned char *a = in;
    unsigned char *b = inout;
    for (size_t i = 0; i < count * z; i++) b[i] ^= a[i];
}

/* Not commutative: a uint64 holds the map x -> hi * x + lo (mod 2^32); the operation
 * composes maps, lower rank's first: (in op inout)(x) = inout(in(x)). */
static uint64_t compose(uint64_t f, uint64_t g) {
    uint32_t fa = (uint32_t)(f >> 32), fb = (uint32_t)f, ga = (uint32_t)(g >> 32),
             gb = (uint32_t)g;
    return (uint64_t)(uint32_t)(ga * fa) << 32 | (uint32_t)(ga * fb + gb);
}

static void user_affine(const void *in, void *inout, size_t count, bw_datatype dt,
                        void *ctx) {
    check_ctx(ctx, in, inout, count, 8);
    if (dt != BW_UINT64) {
        fprintf(stderr, "rank %d: the affine user operation got datatype %d\n", rank, dt);
        exit(1);
    }
    const uint64_t *a = in;
    uint64_t *b = inout;
    for (size_t i = 0; i < count; i++) b[i] = compose(a[i], b[i]);
}

/* Per type: the input of rank r at element i, the reference combination (integers wrap,
 * computed in unsigned arithmetic U as C's signed overflow is undefined) and the test of
 * reduce and allreduce against the reference. Doubles are multiples of 1/4 in [-20, 20):
 * sums and products of up to a few of them are exact, so the order of combination
 * (which depends on the algorithm) cannot change the result. */
#define RED_TYPE(T, U, N, DT, GEN, FMT)                                                \
    static T gen_##N(int r, size_t i) {                                                \
        uint64_t m = mix((uint64_t)r, DT, i);                                          \
        return GEN;                                                                    \
    }                                                                                  \
    static T comb_##N(enum kind k, T a, T b) {                                         \
        switch (k) {                                                                   \
        case K_SUM: return (T)((U)a + (U)b);                                           \
        case K_PROD: return (T)((U)a * (U)b);                                          \
        case K_MIN: return a < b ? a : b;                                              \
        case K_MAX: return a > b ? a : b;                                              \
        case K_XOR: {                                                                  \
            T x;                                                                       \
            unsigned char *px = (unsigned char *)&x;                                   \
            const unsigned char *pa = (const unsigned char *)&a,                       \
                                *pb = (const unsigned char *)&b;                       \
            for (size_t q = 0; q < sizeof(T); q++) px[q] = pa[q] ^ pb[q];              \
            return x;                                                                  \
        }                                                                              \
        }                                                                              \
        return a;                                                                      \
    }                                                                                  \
    static void red_##N(size_t count, enum kind k, int root, int in_place) {           \
        T *in = xmalloc(count * sizeof(T)), *out = xmalloc(count * sizeof(T));         \
        T *want = xmalloc(count * sizeof(T));                                          \
        for (size_t i = 0; i < count; i++) {                                           \
            T acc = gen_##N(0, i);                                                     \
            for (int r = 1; r < size; r++) acc = comb_##N(k, acc, gen_##N(r, i));      \
            want[i] = acc;                                                             \
            in[i] = gen_##N(rank, i);                                                  \
            out[i] = (T)99;                                                            \
        }                                                                              \
        const char *call = root < 0 ? "bw_allreduce" : "bw_reduce";                    \
        int at_root = root < 0 || rank == root;                                        \
        if (root < 0 && in_place)                                                      \
            CHECK(bw_allreduce(in, in, count, DT, kind_op[k]));                        \
        else if (root < 0)                                                             \
            CHECK(bw_allreduce(in, out, count, DT, kind_op[k]));                       \
        else if (in_place && rank == root)                                             \
            CHECK(bw_reduce(in, in, count, DT, kind_op[k], root));                     \
        else /* recvbuf is not written elsewhere than at the root: NULL */             \
            CHECK(bw_reduce(in, rank == root ? (void *)out : NULL, count, DT,          \
                            kind_op[k], root));                                        \
        const T *got = in_place ? in : out;                                            \
        for (size_t i = 0; at_root && i < count; i++) {                                \
            if (got[i] != want[i]) {                                                   \
                fprintf(stderr,                                                        \
                        "rank %d of %d: %s%s %s %s count=%zu root=%d: element %zu is " \
                        FMT ", expected " FMT "\n",                                    \
                        rank, size, call, in_place ? " (in place)" : "", #DT,          \
                        kind_name[k], count, root, i, got[i], want[i]);                \
                exit(1);                                                               \
            }                                                                          \
        }                                                                              \
        /* The send buffer is input only. */                                           \
        for (size_t i = 0; !(in_place && at_root) && i < count; i++)                   \
            ASSERT(in[i] == gen_##N(rank, i));                                         \
        checks++;                                                                      \
        free(in);                                                                      \
        free(out);                                                                     \
        free(want);                                                                    \
    }

RED_TYPE(int8_t, uint32_t, i8, BW_INT8, (int8_t)(uint8_t)m, "%d")
RED_TYPE(int16_t, uint32_t, i16, BW_INT16, (int16_t)(uint16_t)m, "%d")
RED_TYPE(int32_t, uint32_t, i32, BW_INT32, (int32_t)(uint32_t)m, "%" PRId32)
RED_TYPE(int64_t, uint64_t, i64, BW_INT64, (int64_t)m, "%" PRId64)
RED_TYPE(uint8_t, uint32_t, u8, BW_UINT8, (uint8_t)m, "%u")
RED_TYPE(uint16_t, uint32_t, u16, BW_UINT16, (uint16_t)m, "%u")
RED_TYPE(uint32_t, uint32_t, u32, BW_UINT32, (uint32_t)m, "%" PRIu32)
RED_TYPE(uint64_t, uint64_t, u64, BW_UINT64, m, "%" PRIu64)
/* Floats in [-4, 4): products of four stay within float's 24 bits, so exact too. */
RED_TYPE(float, float, f32, BW_FLOAT, (float)((int)(m % 32) - 16) / 4.0f, "%g")
RED_TYPE(double, double, f64, BW_DOUBLE, (double)((int)(m % 160) - 80) / 4.0, "%g")

typedef void (*red_fn)(size_t, enum kind, int, int);
struct red_type {
    red_fn f;
    size_t z;
    int integer;  /* xor applies */
    int main_set; /* tested at the big count too */
};
static const struct red_type red_types[] = {
    {red_i32, 4, 1, 1}, {red_i64, 8, 1, 1}, {red_u8, 1, 1, 1},  {red_f64, 8, 0, 1},
    {red_i8, 1, 1, 0},  {red_i16, 2, 1, 0}, {red_u16, 2, 1, 0}, {red_u32, 4, 1, 0},
    {red_u64, 8, 1, 0}, {red_f32, 4, 0, 0},
};

/* The non-commutative user operation: the result must be the maps composed in rank
 * order, which no other order gives (with these random maps). */
static void test_affine(size_t count, int root) {
    uint64_t *in = xmalloc(count * 8), *out = xmalloc(count * 8), *want = xmalloc(count * 8);
    for (size_t i = 0; i < count; i++) {
        uint64_t acc = mix(0, 77, i);
        for (int r = 1; r < size; r++) acc = compose(acc, mix((uint64_t)r, 77, i));
        want[i] = acc;
        in[i] = mix((uint64_t)rank, 77, i);
        out[i] = 0;
    }
    bw_op op;
    CHECK(bw_op_create(user_affine, 0, &affine_ctx, &op));
    if (root < 0)
        CHECK(bw_allreduce(in, out, count, BW_UINT64, op));
    else
        CHECK(bw_reduce(in, rank == root ? out : NULL, count, BW_UINT64, op, root));
    CHECK(bw_op_free(&op));
    ASSERT(op == BW_OP_NULL);
    for (size_t i = 0; (root < 0 || rank == root) && i < count; i++) {
        if (out[i] != want[i]) {
            fprintf(stderr,
                    "rank %d of %d: %s with a non-commutative user operation count=%zu "
                    "root=%d: element %zu is %#" PRIx64 ", expected %#" PRIx64
                    " (not rank order?)\n",
                    rank, size, root < 0 ? "bw_allreduce" : "bw_reduce", count, root, i,
                    out[i], want[i]);
            exit(1);
        }
    }
    checks++;
    free(in);
    free(out);
    free(want);
}

/* ---- misuse --------------------------------------------------------------------------- */

static void test_misuse(void) {
    char ranks[64], bounds[64], on[64];
    snprintf(ranks, sizeof ranks, "0 to %d", size - 1);
    snprintf(on, sizeof on, "rank %d of %d", rank, size);
    int x[4] = {0}, y[64 * 4] = {0};
    size_t c[64] = {0}, d[64] = {0}, c2[64] = {0};

    EXPECT(bw_bcast(x, 1, BW_INT32, size), BW_ERR_ROOT, "bw_bcast", on, ranks);
    EXPECT(bw_reduce(x, y, 1, BW_INT32, BW_SUM, -1), BW_ERR_ROOT, "bw_reduce", on, "-1",
           ranks);
    EXPECT(bw_scatter(y, x, 1, BW_INT32, size + 5), BW_ERR_ROOT, "bw_scatter", ranks);
    EXPECT(bw_gather(x, y, 1, BW_INT32, -3), BW_ERR_ROOT, "bw_gather", ranks);
    EXPECT(bw_bcast(NULL, 5, BW_INT32, 0), BW_ERR_ARG, "bw_bcast", on, "NULL", "20 bytes");
    EXPECT(bw_allreduce(NULL, x, 1, BW_INT32, BW_SUM), BW_ERR_ARG, "bw_allreduce", "sendbuf");
    EXPECT(bw_allgather(x, NULL, 1, BW_INT32), BW_ERR_ARG, "bw_allgather", "recvbuf");
    if (rank == 0) /* the root's receive buffer must exist */
        EXPECT(bw_gather(x, NULL, 1, BW_INT32, 0), BW_ERR_ARG, "bw_gather", "recvbuf");
    EXPECT(bw_allreduce(x, y, 1, 99, BW_SUM), BW_ERR_DATATYPE, "bw_allreduce", "99");
    EXPECT(bw_bcast(x, 1, 0, 0), BW_ERR_DATATYPE, "bw_bcast", "datatype 0");
    EXPECT(bw_allreduce(x, y, 1, BW_INT32, 99), BW_ERR_OP, "bw_allreduce", "op 99");
    bw_op op, dead;
    CHECK(bw_op_create(user_xor, 1, &xor_ctx, &op));
    dead = op;
    CHECK(bw_op_free(&op));
    EXPECT(bw_reduce(x, y, 1, BW_INT32, dead, 0), BW_ERR_OP, "bw_reduce", "freed");
    EXPECT(bw_op_free(&dead), BW_ERR_OP, "bw_op_free");
    EXPECT(bw_op_create(NULL, 1, NULL, &op), BW_ERR_ARG, "bw_op_create");
    /* Counts that overflow the address space. */
    EXPECT(bw_bcast(x, SIZE_MAX / 2, BW_INT32, 0), BW_ERR_COUNT, "bw_bcast", "overflow",
           "4 bytes each");
    if (size > 1) {
        snprintf(bounds, sizeof bounds, "times %d processes", size);
        /* Each buffer alone fits (a quarter of the address space); size of them not. */
        EXPECT(bw_allgather(x, y, SIZE_MAX / 16 + 1, BW_INT32), BW_ERR_COUNT,
               "bw_allgather", bounds);
    }
    for (int j = 0; j < size; j++) d[j] = SIZE_MAX - 1;
    c[0] = 2;
    EXPECT(bw_alltoallv(x, c, d, y, c2, d, BW_INT32), BW_ERR_COUNT, "bw_alltoallv",
           "overflows");
    /* alltoallv: missing arrays, and a process that does not receive from itself what it
     * sends itself. */
    memset(c, 0, sizeof c);
    memset(d, 0, sizeof d);
    EXPECT(bw_alltoallv(x, NULL, d, y, c, d, BW_INT32), BW_ERR_ARG, "bw_alltoallv",
           "sendcounts is NULL");
    EXPECT(bw_alltoallv(x, c, d, y, c, NULL, BW_INT32), BW_ERR_ARG, "rdispls is NULL");
    c[rank] = 1;
    c2[rank] = 2;
    snprintf(bounds, sizeof bounds, "sendcounts[%d] = 1 but recvcounts[%d] = 2", rank,
             rank);
    EXPECT(bw_alltoallv(x, c, d, y, c2, d, BW_INT32), BW_ERR_ARG, "bw_alltoallv", on,
           bounds);
    /* Receive blocks that overlap. */
    memset(c, 0, sizeof c);
    if (size > 1) {
        for (int j = 0; j < size; j++) c[j] = 2;
        for (int j = 0; j < size; j++) d[j] = (size_t)j; /* blocks 2 long, 1 apart */
        EXPECT(bw_alltoallv(y, c, c, y + 16, c, d, BW_INT32), BW_ERR_ARG, "bw_alltoallv",
               "overlaps");
    }
    /* Send and receive buffers that share bytes (and are not the same buffer). */
    EXPECT(bw_allgather(y + 1, y, 2, BW_INT32), BW_ERR_ARG, "bw_allgather", "overlap");
    EXPECT(bw_allreduce(y, y + 1, 2, BW_INT32, BW_SUM), BW_ERR_ARG, "overlap");
    ASSERT(strcmp(bw_error_string(BW_ERR_ROOT), "root out of range") == 0);
    ASSERT(strcmp(bw_error_string(BW_ERR_OP), "invalid reduction operation") == 0);
    ASSERT(bw_datatype_size(BW_INT16) == 2 && bw_datatype_size(BW_DOUBLE) == 8);
    ASSERT(bw_datatype_size(BW_BYTE) == 1 && bw_datatype_size(42) == 0);

    /* Nothing was sent: the collectives still work. */
    int v = rank == size - 1 ? 4242 : 0;
    CHECK(bw_bcast(&v, 1, BW_INT32, size - 1));
    ASSERT(v == 4242);
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 3;
    size_t big = argc > 2 ? (size_t)strtoull(argv[2], NULL, 10) : (size_t)4 << 20;
    int init_error = argc > 3 && strcmp(argv[3], "init-error") == 0;
    int bad_setting = argc > 3 && strcmp(argv[3], "bad-setting") == 0;

    /* Before bw_init: the code, naming the call. */
    EXPECT(bw_barrier(), BW_ERR_NOT_INITIALIZED, "bw_barrier", "not initialised");
    if (bad_setting) {
        /* Refused at start, naming the variable, the value and what is accepted. */
        EXPECT(bw_init_spawn(n), BW_ERR_INIT, "BULKWIRE_COLL", "bogus", "auto, netcache or p2p");
        printf("C COLL BAD-SETTING OK\n");
        return 0;
    }
    /* The self-spawned processes (the job's ranks but 0) configure a part size of their
     * own, which the collectives' set-up must refuse on every process. */
    const char *spawned = getenv("BULKWIRE_RANK");
    if (init_error && spawned && strcmp(spawned, "0") != 0)
        setenv("BULKWIRE_COLL_PART", "2M", 1);
    CHECK(bw_init_spawn(n));
    CHECK(bw_rank(&rank));
    CHECK(bw_size(&size));
    ASSERT(size == n);
    double t0 = bw_wtime();

    if (init_error) {
        /* Set-up fails alike everywhere, and stays failed. */
        EXPECT(bw_barrier(), BW_ERR_INIT, "bw_barrier", "BULKWIRE_COLL", "set up");
        int v = 0;
        EXPECT(bw_bcast(&v, 1, BW_INT32, 0), BW_ERR_INIT, "bw_bcast", "BULKWIRE_COLL");
        CHECK(bw_finalize());
        printf("C COLL INIT-ERROR OK rank=%d\n", rank);
        return 0;
    }

    /* Misuse first: nothing is communicated, so it must not set anything up wrongly. */
    test_misuse();
    test_barrier();

    size_t counts[] = {0, 1, 7, 1000, 20000, 0};
    int nc = (int)(sizeof counts / sizeof counts[0]);

    /* Data movement: each count with one of three datatypes (the big count in bytes'
     * worth of doubles); every root for the small counts, the last rank for the rest. */
    for (int k = 0; k < nc; k++) {
        bw_datatype dt = k == nc - 1 ? BW_DOUBLE : move_types[k % 3];
        size_t count = k == nc - 1 ? big / bw_datatype_size(dt) : counts[k];
        int r0 = counts[k] <= 1000 && k != nc - 1 ? 0 : size - 1;
        for (int root = r0; root < size; root++) {
            test_bcast(count, dt, root);
            test_scatter(count, dt, root);
            test_gather(count, dt, root);
        }
        test_allgather(count, dt);
        test_alltoall(count, dt);
        /* Blocks of 0 to 3 units: a third keeps the big case at about BIG per block. */
        test_alltoallv(k == nc - 1 ? count / 3 : count, dt);
    }

    /* Reductions: every type and operation at the small counts, int32, int64, uint8 and
     * double at the big one; roots rotate; in place once per count. */
    int op_xor;
    CHECK(bw_op_create(user_xor, 1, &xor_ctx, &op_xor));
    kind_op[K_XOR] = op_xor;
    for (int k = 0; k < nc; k++) {
        int is_big = k == nc - 1;
        for (size_t t = 0; t < sizeof red_types / sizeof red_types[0]; t++) {
            if (is_big && !red_types[t].main_set) continue;
            int nk = red_types[t].integer ? 5 : 4;
            for (int kk = 0; kk < nk; kk++) {
                size_t count = is_big ? big / red_types[t].z : counts[k];
                int root = (int)((t + (size_t)kk + (size_t)k) % (size_t)size);
                int in_place = kk == 0;
                red_types[t].f(count, (enum kind)kk, -1, in_place);
                red_types[t].f(count, (enum kind)kk, root, in_place);
            }
        }
        size_t count = is_big ? big / 8 : counts[k];
        test_affine(count, -1);
        test_affine(count, k % size);
    }
    CHECK(bw_op_free(&op_xor));

    /* The user functions were really used (somewhere, once there are two processes). */
    long calls[2] = {xor_ctx.calls, affine_ctx.calls}, total[2] = {0, 0};
    CHECK(bw_allreduce(calls, total, 2, BW_INT64, BW_SUM));
    if (size > 1) ASSERT(total[0] > 0 && total[1] > 0);

    double secs = bw_wtime() - t0;
    CHECK(bw_finalize());
    EXPECT(bw_bcast(calls, 1, BW_INT64, 0), BW_ERR_NOT_INITIALIZED, "bw_bcast");
    if (rank == 0)
        printf("coll_test p=%d big=%zu checks=%ld seconds=%.2f\n", size, big, checks, secs);
    printf("C COLL OK rank=%d\n", rank);
    return 0;
}
