/* MulticoreBSP for C's dialect: every primitive, with its types and its documented
 * behaviour where it differs from the int dialect (bsp_direct_get, the hp primitives,
 * bsp_move on an empty queue, (bsp_size_t)-1 for no message, bsp_qsize without a byte
 * count), the mcbsp_* names, and the affinity, profiling and checkpointing calls.
 * Compiled through mcbsp.h (-DUSE_MCBSP_H) and through bsp.h with bspcc --mcbsp.
 * Usage: mcbsp_all [P]. Pid 0 prints "mcbsp ok p=P". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include <mcbsp-affinity.h>
#include <mcbsp-profiling.h>
#include <mcbsp-resiliency.h>

#ifndef BULKWIRE_BSP_DIALECT_MCBSP
#error "mcbsp_all.c is MulticoreBSP's dialect: compile with bspcc --mcbsp or -DUSE_MCBSP_H"
#endif

/* Before bsp_begin there is no pid to name. */
#define CHECK_OUTSIDE(cond)                                                            \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "CHECK failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
            return 1;                                                                  \
        }                                                                              \
    } while (0)

int main(int argc, char **argv) {
    /* Affinity settings: recorded and read back; the maximum is bsp_nprocs() outside. */
    size_t pinning[3] = {1, 0, 1};
    mcbsp_set_affinity_mode(COMPACT);
    CHECK_OUTSIDE(mcbsp_get_affinity_mode() == COMPACT);
    mcbsp_set_thread_numbering(WRAPPED);
    CHECK_OUTSIDE(mcbsp_get_thread_numbering() == WRAPPED);
    mcbsp_set_threads_per_core(2);
    CHECK_OUTSIDE(mcbsp_get_threads_per_core() == 2);
    mcbsp_set_available_cores(5);
    CHECK_OUTSIDE(mcbsp_get_available_cores() == 5);
    mcbsp_set_reserved_cores(pinning, 1);
    CHECK_OUTSIDE(mcbsp_get_reserved_cores_number() == 1);
    size_t *reserved = mcbsp_get_reserved_cores();
    CHECK_OUTSIDE(reserved != NULL && reserved[0] == 1);
    free(reserved);
    mcbsp_set_pinning(pinning, 3);
    size_t *pin = mcbsp_get_pinning();
    CHECK_OUTSIDE(pin != NULL && pin[0] == 1 && pin[1] == 0 && pin[2] == 1);
    free(pin);
    CHECK_OUTSIDE(mcbsp_get_affinity_mode() == MANUAL);
    CHECK_OUTSIDE(mcbsp_get_maximum_threads() == 3 && bsp_nprocs() == 3);
    mcbsp_set_maximum_threads(7);
    CHECK_OUTSIDE(bsp_nprocs() == 7 && mcbsp_nprocs() == 7);
    mcbsp_set_checkpoint_frequency(4);
    mcbsp_set_safe_checkpoint_frequency(9);
    CHECK_OUTSIDE(mcbsp_get_checkpoint_frequency() == 4);
    CHECK_OUTSIDE(mcbsp_get_safe_checkpoint_frequency() == 9);
    mcbsp_enable_checkpoints();
    mcbsp_disable_checkpoints();

    bsp_begin(argc > 1 ? (bsp_pid_t)atoi(argv[1]) : 2);
    bsp_pid_t p = bsp_nprocs(), s = bsp_pid();
    CHECK_EQ(mcbsp_nprocs(), p);
    CHECK_EQ(mcbsp_pid(), s);
    mcbsp_profiling_set_description("registration");

    /* DRMA with size_t offsets and sizes. */
    size_t n = 8 * (size_t)p;
    double *area = calloc(n, sizeof(double));
    double *src = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) src[i] = 100.0 * s + (double)i;
    bsp_push_reg(area, n * sizeof(double));
    bsp_push_reg(src, n * sizeof(double));
    bsp_sync();
    bsp_pid_t next = (s + 1) % p, prev = (s + p - 1) % p;
    bsp_put(next, src, area, 0, 2 * sizeof(double));
    bsp_hpput(next, src + 2, area, 2 * sizeof(double), 2 * sizeof(double));
    double got[4] = {0};
    bsp_get(prev, src, 4 * sizeof(double), got, 2 * sizeof(double));
    bsp_hpget(prev, src, 6 * sizeof(double), got + 2, 2 * sizeof(double));
    bsp_sync();
    for (size_t i = 0; i < 4; i++) CHECK(area[i] == 100.0 * prev + (double)i);
    for (size_t i = 0; i < 4; i++) CHECK(got[i] == 100.0 * prev + 4.0 + (double)i);

    /* bsp_direct_get reads now: a value its owner wrote in this superstep's previous
     * sync is there without another sync; and from oneself. */
    src[1] = -1.0 - s;
    bsp_sync();
    double direct[2] = {0, 0};
    bsp_direct_get(next, src, sizeof(double), direct, sizeof(double));
    CHECK(direct[0] == -1.0 - next);
    bsp_direct_get(s, src, 2 * sizeof(double), direct + 1, sizeof(double));
    CHECK(direct[1] == 100.0 * s + 2.0);
    mcbsp_direct_get(prev, src, 0, direct, sizeof(double));
    CHECK(direct[0] == 100.0 * prev);
    bsp_direct_get(next, src, 0, NULL, 0); /* nothing to read */
    bsp_sync();

    /* mcbsp_* under their own names. */
    mcbsp_put(next, &src[3], area, 7 * sizeof(double), sizeof(double));
    mcbsp_sync();
    CHECK(area[7] == 100.0 * prev + 3.0);

    /* BSMP: size_t tag sizes, hpsend, qsize without a byte count. */
    bsp_size_t ts = sizeof(size_t);
    bsp_set_tagsize(&ts);
    CHECK_EQ(ts, 0);
    bsp_sync();
    size_t tag = 1000 + s;
    static char payload[3000];
    memset(payload, 'a' + (int)s % 26, sizeof payload);
    bsp_send(next, &tag, payload, 10);
    bsp_hpsend(prev, &tag, payload, sizeof payload);
    mcbsp_send(s, &tag, payload, 0);
    bsp_sync();
    bsp_nprocs_t count = 0;
    bsp_qsize(&count, NULL);
    CHECK_EQ(count, 3);
    bsp_size_t bytes = 0;
    bsp_qsize(&count, &bytes);
    CHECK_EQ(bytes, 10 + sizeof payload);
    int sizes_seen = 0;
    for (int k = 0; k < 3; k++) {
        bsp_size_t status = 0;
        size_t t = 0;
        bsp_get_tag(&status, &t);
        if (status == 10) {
            CHECK_EQ(t, 1000 + prev);
            char buf[10];
            bsp_move(buf, sizeof buf);
            CHECK(buf[9] == 'a' + (int)prev % 26);
            sizes_seen |= 1;
        } else if (status == sizeof payload) {
            void *tp, *pp;
            CHECK_EQ(bsp_hpmove(&tp, &pp), sizeof payload);
            size_t from_tag;
            memcpy(&from_tag, tp, sizeof from_tag);
            CHECK_EQ(from_tag, 1000 + next);
            CHECK(((char *)pp)[2999] == 'a' + (int)next % 26);
            sizes_seen |= 2;
        } else {
            CHECK_EQ(status, 0);
            CHECK_EQ(t, 1000 + s);
            mcbsp_move(NULL, 0);
            sizes_seen |= 4;
        }
    }
    CHECK_EQ(sizes_seen, 7);
    /* An empty queue: no message is SIZE_MAX, and moving from it does nothing. */
    bsp_size_t status = 0;
    bsp_get_tag(&status, &tag);
    CHECK(status == SIZE_MAX);
    void *tp = NULL, *pp = NULL;
    CHECK(bsp_hpmove(&tp, &pp) == SIZE_MAX && tp == NULL && pp == NULL);
    char untouched = 'u';
    bsp_move(&untouched, 1);
    CHECK(untouched == 'u');

    /* A checkpoint is a superstep boundary. */
    double mark = 42.0 + s;
    bsp_put(next, &mark, area, 0, sizeof mark);
    mcbsp_checkpoint();
    CHECK(area[0] == 42.0 + prev);

    /* Registrations of NULL, popped in MulticoreBSP's way. */
    double *only0 = s == 0 ? calloc(p, sizeof(double)) : NULL;
    bsp_push_reg(only0, s == 0 ? p * sizeof(double) : 0);
    bsp_sync();
    double mine = (double)s;
    bsp_put(0, &mine, only0, s * sizeof(double), sizeof mine);
    bsp_pop_reg(only0); /* still serves this superstep */
    bsp_sync();
    if (s == 0)
        for (bsp_pid_t q = 0; q < p; q++) CHECK(only0[q] == (double)q);

    bsp_pop_reg(src);
    bsp_pop_reg(area);
    double t = mcbsp_time();
    CHECK(t > 0.0 && t <= bsp_time());
    bsp_sync();
    if (s == 0) printf("mcbsp ok p=%u\n", p);
    bsp_end();
    return 0;
}
