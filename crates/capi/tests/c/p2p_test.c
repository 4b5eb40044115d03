/* bulkwire.h from C: a job of N processes (self-spawned, or under bsprun) exercising
 * non-blocking and blocking calls, wildcards, waitall/waitany/testany, truncation,
 * zero-size and large messages, probes and argument errors. Prints "C OK rank=R". */
#include "bulkwire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank = -1, size = 0;

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

static void fill(unsigned char *b, size_t n, int seed) {
    for (size_t i = 0; i < n; i++) b[i] = (unsigned char)(i * 31 + seed * 7);
}

static int same(const unsigned char *b, size_t n, int seed) {
    for (size_t i = 0; i < n; i++)
        if (b[i] != (unsigned char)(i * 31 + seed * 7)) return 0;
    return 1;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 3;
    int flag = 0;
    CHECK(bw_initialized(&flag));
    ASSERT(flag == 0);
    CHECK(bw_init_spawn(n));
    CHECK(bw_initialized(&flag));
    ASSERT(flag == 1);
    ASSERT(bw_init(&argc, &argv) == BW_ERR_INIT);
    CHECK(bw_rank(&rank));
    CHECK(bw_size(&size));
    ASSERT(size == n);
    int right = (rank + 1) % size, left = (rank + size - 1) % size;

    /* 1. A ring of 8-byte messages, non-blocking, waitall with statuses. */
    {
        long out = 1000 + rank, in = -1;
        bw_request r[2];
        bw_status st[2];
        CHECK(bw_irecv(&in, sizeof in, left, 1, &r[0]));
        CHECK(bw_isend(&out, sizeof out, right, 1, &r[1]));
        CHECK(bw_waitall(2, r, st));
        ASSERT(r[0] == BW_REQUEST_NULL && r[1] == BW_REQUEST_NULL);
        ASSERT(in == 1000 + left);
        ASSERT(st[0].source == left && st[0].tag == 1 && st[0].count == sizeof in);
        ASSERT(st[0].error == BW_SUCCESS);
    }

    /* 2. Wildcards: everyone sends two tagged messages to rank 0, which receives them
     * with any source and any tag; per (source, tag) order holds. */
    if (rank == 0) {
        int seen[64][2] = {{0}};
        for (int k = 0; k < 2 * (size - 1); k++) {
            int v[2];
            bw_status st;
            CHECK(bw_recv(v, sizeof v, BW_ANY_SOURCE, BW_ANY_TAG, &st));
            ASSERT(st.source == v[0] && st.tag == 7 && st.count == sizeof v);
            ASSERT(v[1] == seen[st.source][0]++);
        }
        for (int s = 1; s < size; s++) ASSERT(seen[s][0] == 2);
        /* Nobody starts the next step, whose messages the wildcards would match, before
         * rank 0 has all of these. */
        for (int s = 1; s < size; s++) CHECK(bw_send(NULL, 0, s, 8));
    } else {
        for (int i = 0; i < 2; i++) {
            int v[2] = {rank, i};
            CHECK(bw_send(v, sizeof v, 0, 7));
        }
        CHECK(bw_recv(NULL, 0, 0, 8, BW_STATUS_IGNORE));
    }

    /* 3. Large messages (4 MiB, rendezvous) around the ring, completed by waitany. */
    {
        size_t big = 4u << 20;
        unsigned char *out = malloc(big), *in = malloc(big);
        ASSERT(out && in);
        fill(out, big, rank);
        memset(in, 0, big);
        bw_request r[2];
        CHECK(bw_isend(out, big, right, 3, &r[0]));
        CHECK(bw_irecv(in, big, left, 3, &r[1]));
        int done = 0;
        while (done < 2) {
            int idx;
            bw_status st;
            CHECK(bw_waitany(2, r, &idx, &st));
            ASSERT(idx == 0 || idx == 1);
            ASSERT(r[idx] == BW_REQUEST_NULL);
            if (idx == 1) ASSERT(st.count == big && st.source == left);
            done++;
        }
        int idx;
        CHECK(bw_waitany(2, r, &idx, BW_STATUS_IGNORE));
        ASSERT(idx == BW_UNDEFINED);
        ASSERT(same(in, big, left));
        free(out);
        free(in);
    }

    /* 4. Truncation: an error on the receive, naming the sender; the send is fine. */
    if (rank == 0) {
        unsigned char small[10];
        bw_status st;
        int rc = bw_recv(small, sizeof small, 1, 4, &st);
        ASSERT(rc == BW_ERR_TRUNCATE && st.error == BW_ERR_TRUNCATE);
        ASSERT(st.source == 1 && st.tag == 4 && st.count == 100);
        ASSERT(strstr(bw_last_error(), "rank 1") != NULL);
        ASSERT(same(small, sizeof small, 4));
        /* Rendezvous size too. */
        unsigned char *mid = malloc(1000);
        rc = bw_recv(mid, 1000, 1, 5, &st);
        ASSERT(rc == BW_ERR_TRUNCATE && st.count == (1u << 20));
        free(mid);
    } else if (rank == 1) {
        unsigned char b[100];
        fill(b, sizeof b, 4);
        CHECK(bw_send(b, sizeof b, 0, 4));
        unsigned char *m = malloc(1u << 20);
        fill(m, 1u << 20, 5);
        CHECK(bw_send(m, 1u << 20, 0, 5));
        free(m);
    }

    /* 5. Zero bytes (null buffer allowed), to a peer and to oneself; test loop. */
    {
        bw_request r[3];
        CHECK(bw_irecv(NULL, 0, left, 0, &r[0]));
        CHECK(bw_isend(NULL, 0, right, 0, &r[1]));
        CHECK(bw_isend(NULL, 0, rank, 9, &r[2]));
        bw_status st;
        CHECK(bw_recv(NULL, 0, rank, 9, &st));
        ASSERT(st.source == rank && st.count == 0);
        int all = 0;
        bw_status sts[3];
        while (!all) CHECK(bw_testall(3, r, &all, sts));
        ASSERT(sts[0].source == left && sts[0].count == 0);
        flag = 0;
        bw_request none = BW_REQUEST_NULL;
        CHECK(bw_test(&none, &flag, &st));
        ASSERT(flag == 1);
    }

    /* 6. Probe, then receive exactly that; testany. */
    {
        char msg[32];
        snprintf(msg, sizeof msg, "hello from %d", rank);
        bw_request s;
        CHECK(bw_isend(msg, strlen(msg) + 1, right, 11, &s));
        bw_status st;
        CHECK(bw_probe(BW_ANY_SOURCE, 11, &st));
        ASSERT(st.source == left);
        char *in = malloc(st.count);
        bw_request r[2] = {BW_REQUEST_NULL, BW_REQUEST_NULL};
        CHECK(bw_irecv(in, st.count, st.source, 11, &r[1]));
        int idx = -1;
        flag = 0;
        while (!flag) CHECK(bw_testany(2, r, &idx, &flag, &st));
        ASSERT(idx == 1);
        char want[32];
        snprintf(want, sizeof want, "hello from %d", left);
        ASSERT(strcmp(in, want) == 0);
        CHECK(bw_wait(&s, BW_STATUS_IGNORE));
        free(in);
        CHECK(bw_iprobe(BW_ANY_SOURCE, 11, &flag, &st));
        ASSERT(flag == 0);
    }

    /* 7. Argument errors and a freed (cancelled) receive. */
    {
        int x = 0;
        ASSERT(bw_send(&x, sizeof x, size, 0) == BW_ERR_RANK);
        ASSERT(bw_send(&x, sizeof x, 0, -5) == BW_ERR_TAG);
        ASSERT(bw_send(NULL, 4, 0, 0) == BW_ERR_ARG);
        bw_request bogus = 0x00000007deadbeefull;
        ASSERT(bw_wait(&bogus, BW_STATUS_IGNORE) == BW_ERR_REQUEST);
        bw_request r;
        CHECK(bw_irecv(&x, sizeof x, BW_ANY_SOURCE, 12345, &r));
        CHECK(bw_request_free(&r));
        ASSERT(r == BW_REQUEST_NULL);
        ASSERT(strcmp(bw_error_string(BW_ERR_TRUNCATE),
                      "message truncated: longer than the receive buffer") == 0);
        ASSERT(bw_wtime() >= 0.0);
    }

    CHECK(bw_finalize());
    ASSERT(bw_finalize() == BW_ERR_NOT_INITIALIZED);
    printf("C OK rank=%d\n", rank);
    return 0;
}
