/* Point-to-point between ranks 0 and 1 (other ranks only take part in the ring):
 * every send mode, blocking, non-blocking and persistent; wildcards and order; probes
 * and matched probes; cancel; truncation; MPI_PROC_NULL; Sendrecv; the Wait and Test
 * families; synchronous sends completing only once matched. */
#include "mpitest.h"
#include <unistd.h>

static int rank, size;

static void fill(int *b, int n, int seed) {
    for (int i = 0; i < n; i++) b[i] = seed * 1000003 + i;
}

static int same(const int *b, int n, int seed) {
    for (int i = 0; i < n; i++)
        if (b[i] != seed * 1000003 + i) return 0;
    return 1;
}

/* Ping-pong of n ints in each mode, blocking and not. */
static void modes(int n) {
    int *out = malloc(sizeof(int) * (n + 1)), *in = malloc(sizeof(int) * (n + 1));
    int bufsize = n * (int)sizeof(int) + MPI_BSEND_OVERHEAD;
    void *att = malloc(bufsize);
    OK(MPI_Buffer_attach(att, bufsize));
    for (int mode = 0; mode < 4; mode++) {
        for (int nb = 0; nb < 2; nb++) {
            int seed = n + mode * 10 + nb;
            if (rank == 0) {
                fill(out, n, seed);
                if (!nb) {
                    if (mode == 0) OK(MPI_Send(out, n, MPI_INT, 1, mode, MPI_COMM_WORLD));
                    if (mode == 1) OK(MPI_Ssend(out, n, MPI_INT, 1, mode, MPI_COMM_WORLD));
                    if (mode == 2) OK(MPI_Bsend(out, n, MPI_INT, 1, mode, MPI_COMM_WORLD));
                    if (mode == 3) OK(MPI_Rsend(out, n, MPI_INT, 1, mode, MPI_COMM_WORLD));
                } else {
                    MPI_Request q;
                    if (mode == 0) OK(MPI_Isend(out, n, MPI_INT, 1, mode, MPI_COMM_WORLD, &q));
                    if (mode == 1) OK(MPI_Issend(out, n, MPI_INT, 1, mode, MPI_COMM_WORLD, &q));
                    if (mode == 2) OK(MPI_Ibsend(out, n, MPI_INT, 1, mode, MPI_COMM_WORLD, &q));
                    if (mode == 3) OK(MPI_Irsend(out, n, MPI_INT, 1, mode, MPI_COMM_WORLD, &q));
                    OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
                    CHECK(q == MPI_REQUEST_NULL);
                }
                MPI_Status st;
                OK(MPI_Recv(in, n, MPI_INT, 1, mode, MPI_COMM_WORLD, &st));
                CHECK(same(in, n, seed + 1));
                int c;
                OK(MPI_Get_count(&st, MPI_INT, &c));
                CHECK(c == n && st.MPI_SOURCE == 1 && st.MPI_TAG == mode);
            } else if (rank == 1) {
                /* A ready send needs its receive posted first: post, then tell rank 0. */
                MPI_Request r;
                MPI_Status st;
                OK(MPI_Irecv(in, n, MPI_INT, 0, mode, MPI_COMM_WORLD, &r));
                OK(MPI_Wait(&r, &st));
                CHECK(same(in, n, seed));
                CHECK(st.MPI_SOURCE == 0 && st.MPI_TAG == mode);
                fill(out, n, seed + 1);
                OK(MPI_Send(out, n, MPI_INT, 0, mode, MPI_COMM_WORLD));
            }
        }
    }
    void *back;
    int backsize;
    OK(MPI_Buffer_detach(&back, &backsize));
    CHECK(back == att && backsize == bufsize);
    free(att);
    free(in);
    free(out);
}

/* Messages of one source and tag arrive in order; ANY_TAG and ANY_SOURCE match them. */
static void order(void) {
    enum { N = 50 };
    if (rank == 1) {
        for (int i = 0; i < N; i++) OK(MPI_Send(&i, 1, MPI_INT, 0, i % 3, MPI_COMM_WORLD));
    } else if (rank == 0) {
        for (int i = 0; i < N; i++) {
            int v;
            MPI_Status st;
            OK(MPI_Recv(&v, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
            CHECK(v == i && st.MPI_TAG == i % 3 && st.MPI_SOURCE == 1);
        }
    }
}

static void probes(void) {
    if (rank == 1) {
        int a[3] = {1, 2, 3}, b[5] = {4, 5, 6, 7, 8};
        OK(MPI_Send(a, 3, MPI_INT, 0, 7, MPI_COMM_WORLD));
        OK(MPI_Send(b, 5, MPI_INT, 0, 8, MPI_COMM_WORLD));
        OK(MPI_Send(b, 2, MPI_INT, 0, 9, MPI_COMM_WORLD));
    } else if (rank == 0) {
        MPI_Status st;
        int c, flag = 0;
        OK(MPI_Probe(1, 8, MPI_COMM_WORLD, &st));
        OK(MPI_Get_count(&st, MPI_INT, &c));
        CHECK(c == 5 && st.MPI_TAG == 8 && st.MPI_SOURCE == 1);
        while (!flag) OK(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st));
        CHECK(st.MPI_TAG == 7);
        /* A matched probe takes the message out of matching. */
        MPI_Message m;
        OK(MPI_Mprobe(1, MPI_ANY_TAG, MPI_COMM_WORLD, &m, &st));
        CHECK(st.MPI_TAG == 7);
        flag = 0;
        while (!flag) OK(MPI_Iprobe(1, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st));
        CHECK(st.MPI_TAG == 8);
        int got[5] = {0};
        OK(MPI_Mrecv(got, 3, MPI_INT, &m, &st));
        CHECK(m == MPI_MESSAGE_NULL && got[0] == 1 && got[2] == 3);
        MPI_Request q;
        flag = 0;
        while (!flag) OK(MPI_Improbe(1, 9, MPI_COMM_WORLD, &flag, &m, &st));
        OK(MPI_Imrecv(got, 5, MPI_INT, &m, &q));
        OK(MPI_Wait(&q, &st));
        OK(MPI_Get_count(&st, MPI_INT, &c));
        CHECK(c == 2 && got[0] == 4 && got[1] == 5);
        OK(MPI_Recv(got, 5, MPI_INT, 1, 8, MPI_COMM_WORLD, &st));
        CHECK(got[4] == 8);
    }
}

static void cancel_and_null(void) {
    int v = 0;
    MPI_Request r;
    MPI_Status st;
    int flag;
    OK(MPI_Irecv(&v, 1, MPI_INT, MPI_ANY_SOURCE, 999, MPI_COMM_WORLD, &r));
    OK(MPI_Cancel(&r));
    OK(MPI_Wait(&r, &st));
    OK(MPI_Test_cancelled(&st, &flag));
    CHECK(flag);
    /* MPI_PROC_NULL: done at once, empty. */
    OK(MPI_Send(&v, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD));
    OK(MPI_Recv(&v, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &st));
    int c;
    OK(MPI_Get_count(&st, MPI_INT, &c));
    CHECK(st.MPI_SOURCE == MPI_PROC_NULL && st.MPI_TAG == MPI_ANY_TAG && c == 0);
    /* Null and inactive requests. */
    r = MPI_REQUEST_NULL;
    OK(MPI_Wait(&r, &st));
    OK(MPI_Test(&r, &flag, &st));
    CHECK(flag);
    int idx;
    MPI_Request rs[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    OK(MPI_Waitany(2, rs, &idx, &st));
    CHECK(idx == MPI_UNDEFINED);
}

static void truncation(void) {
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    if (rank == 1) {
        int a[4] = {1, 2, 3, 4};
        OK(MPI_Send(a, 4, MPI_INT, 0, 5, MPI_COMM_WORLD));
        static int big[40000];
        OK(MPI_Send(big, 40000, MPI_INT, 0, 6, MPI_COMM_WORLD));
    } else if (rank == 0) {
        int b[2];
        MPI_Status st;
        int rc = MPI_Recv(b, 2, MPI_INT, 1, 5, MPI_COMM_WORLD, &st);
        int cls;
        OK(MPI_Error_class(rc, &cls));
        CHECK(cls == MPI_ERR_TRUNCATE && st.MPI_ERROR == MPI_ERR_TRUNCATE);
        static int small[100];
        MPI_Request r;
        OK(MPI_Irecv(small, 100, MPI_INT, 1, 6, MPI_COMM_WORLD, &r));
        rc = MPI_Wait(&r, &st);
        CHECK(rc == MPI_ERR_TRUNCATE);
        /* Invalid arguments return their classes. */
        CHECK(MPI_Send(b, 1, MPI_INT, size, 0, MPI_COMM_WORLD) == MPI_ERR_RANK);
        CHECK(MPI_Send(b, 1, MPI_INT, 1, -5, MPI_COMM_WORLD) == MPI_ERR_TAG);
        CHECK(MPI_Send(b, -1, MPI_INT, 1, 0, MPI_COMM_WORLD) == MPI_ERR_COUNT);
        CHECK(MPI_Send(b, 1, MPI_DATATYPE_NULL, 1, 0, MPI_COMM_WORLD) == MPI_ERR_TYPE);
        CHECK(MPI_Send(b, 1, MPI_INT, 1, 0, MPI_COMM_NULL) == MPI_ERR_COMM);
        char s[MPI_MAX_ERROR_STRING];
        int len;
        OK(MPI_Error_string(MPI_ERR_TRUNCATE, s, &len));
        CHECK(len > 0 && strstr(s, "trunc") != NULL);
    }
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
}

/* A synchronous send is not complete before its receive is posted. */
static void synchronous(void) {
    int v = 42, go = 1;
    if (rank == 0) {
        MPI_Request q;
        int flag = 0;
        OK(MPI_Issend(&v, 1, MPI_INT, 1, 11, MPI_COMM_WORLD, &q));
        for (int i = 0; i < 20; i++) {
            OK(MPI_Test(&q, &flag, MPI_STATUS_IGNORE));
            CHECK(!flag);
            usleep(2000);
        }
        OK(MPI_Send(&go, 1, MPI_INT, 1, 12, MPI_COMM_WORLD));
        OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
    } else if (rank == 1) {
        int w;
        OK(MPI_Recv(&go, 1, MPI_INT, 0, 12, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        OK(MPI_Recv(&w, 1, MPI_INT, 0, 11, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        CHECK(w == 42);
    }
}

static void persistent(void) {
    int v, w;
    MPI_Request q[2];
    int peer = rank == 0 ? 1 : 0;
    if (rank > 1) return;
    OK(MPI_Send_init(&v, 1, MPI_INT, peer, 3, MPI_COMM_WORLD, &q[0]));
    OK(MPI_Recv_init(&w, 1, MPI_INT, peer, 3, MPI_COMM_WORLD, &q[1]));
    for (int i = 0; i < 10; i++) {
        v = rank * 100 + i;
        OK(MPI_Startall(2, q));
        MPI_Status st[2];
        OK(MPI_Waitall(2, q, st));
        CHECK(q[0] != MPI_REQUEST_NULL && w == peer * 100 + i);
    }
    OK(MPI_Request_free(&q[0]));
    OK(MPI_Request_free(&q[1]));
    CHECK(q[0] == MPI_REQUEST_NULL);
}

static void ring(void) {
    /* Ranks past 1 start here only once rank 0 is done with its wildcard receives. */
    int go = 0;
    if (rank == 0)
        for (int p = 2; p < size; p++) OK(MPI_Send(&go, 1, MPI_INT, p, 20, MPI_COMM_WORLD));
    else if (rank > 1)
        OK(MPI_Recv(&go, 1, MPI_INT, 0, 20, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    int v = rank, w = -1;
    MPI_Status st;
    OK(MPI_Sendrecv(&v, 1, MPI_INT, right, 4, &w, 1, MPI_INT, left, 4, MPI_COMM_WORLD, &st));
    CHECK(w == left && st.MPI_SOURCE == left);
    int x[2] = {rank, rank * 2};
    OK(MPI_Sendrecv_replace(x, 2, MPI_INT, right, 5, left, 5, MPI_COMM_WORLD, &st));
    CHECK(x[0] == left && x[1] == left * 2);
    /* Waitany, Waitsome, Testall over receives from every other rank. */
    MPI_Request r[64];
    int in[64], n = 0;
    for (int p = 0; p < size; p++)
        if (p != rank) {
            OK(MPI_Irecv(&in[n], 1, MPI_INT, p, 6, MPI_COMM_WORLD, &r[n]));
            n++;
        }
    for (int p = 0; p < size; p++)
        if (p != rank) OK(MPI_Send(&rank, 1, MPI_INT, p, 6, MPI_COMM_WORLD));
    int done = 0, sum = 0;
    while (done < n) {
        int idx[64], cnt;
        MPI_Status sts[64];
        if (done % 2 == 0) {
            OK(MPI_Waitany(n, r, &idx[0], &sts[0]));
            CHECK(idx[0] != MPI_UNDEFINED && r[idx[0]] == MPI_REQUEST_NULL);
            sum += in[idx[0]];
            done++;
        } else {
            OK(MPI_Waitsome(n, r, &cnt, idx, sts));
            CHECK(cnt >= 1);
            for (int i = 0; i < cnt; i++) {
                sum += in[idx[i]];
                CHECK(sts[i].MPI_SOURCE == in[idx[i]]);
            }
            done += cnt;
        }
    }
    CHECK(sum == size * (size - 1) / 2 - rank);
    int flag;
    OK(MPI_Testall(n, r, &flag, MPI_STATUSES_IGNORE));
    CHECK(flag);
}

/* Non-contiguous datatypes: packed on send, unpacked on receive, in every path. */
static void derived(void) {
    enum { N = 6000 };
    MPI_Datatype every2nd, pair;
    OK(MPI_Type_vector(N, 1, 2, MPI_INT, &every2nd));
    OK(MPI_Type_commit(&every2nd));
    OK(MPI_Type_vector(2, 1, 3, MPI_DOUBLE, &pair));
    OK(MPI_Type_commit(&pair));
    int *a = malloc(sizeof(int) * 2 * N), *b = malloc(sizeof(int) * 2 * N);
    if (rank == 0) {
        for (int i = 0; i < 2 * N; i++) a[i] = i;
        OK(MPI_Send(a, 1, every2nd, 1, 1, MPI_COMM_WORLD));     /* rendezvous size */
        OK(MPI_Ssend(a + 1, 1, every2nd, 1, 2, MPI_COMM_WORLD));
        MPI_Request q;
        OK(MPI_Isend(a, 1, every2nd, 1, 3, MPI_COMM_WORLD, &q));
        OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
        double d[6] = {1, 2, 3, 4, 5, 6};
        OK(MPI_Send(d, 1, pair, 1, 4, MPI_COMM_WORLD)); /* 1 and 4 */
        OK(MPI_Send(d, 2, MPI_DOUBLE, 1, 5, MPI_COMM_WORLD));
    } else if (rank == 1) {
        MPI_Status st;
        int c;
        /* Received contiguously: the even entries. */
        OK(MPI_Recv(b, N, MPI_INT, 0, 1, MPI_COMM_WORLD, &st));
        for (int i = 0; i < N; i++) CHECK(b[i] == 2 * i);
        /* Received into the odd slots of b. */
        for (int i = 0; i < 2 * N; i++) b[i] = -1;
        OK(MPI_Recv(b + 1, 1, every2nd, 0, 2, MPI_COMM_WORLD, &st));
        for (int i = 0; i < 2 * N; i++) CHECK(b[i] == (i % 2 ? i : -1));
        OK(MPI_Get_count(&st, every2nd, &c));
        CHECK(c == 1);
        MPI_Request r;
        OK(MPI_Irecv(b, 1, every2nd, 0, 3, MPI_COMM_WORLD, &r));
        OK(MPI_Wait(&r, &st));
        for (int i = 0; i < N; i++) CHECK(b[2 * i] == 2 * i && b[2 * i + 1] == 2 * i + 1);
        double e[6] = {0};
        OK(MPI_Recv(e, 1, pair, 0, 4, MPI_COMM_WORLD, &st));
        CHECK(e[0] == 1 && e[3] == 4 && e[1] == 0);
        /* Two doubles arrive as one whole pair; a matched probe takes it. */
        MPI_Message m;
        OK(MPI_Mprobe(0, 5, MPI_COMM_WORLD, &m, &st));
        OK(MPI_Get_count(&st, pair, &c));
        CHECK(c == 1);
        OK(MPI_Mrecv(e, 1, pair, &m, &st));
        CHECK(e[0] == 1 && e[3] == 2);
    }
    /* Sendrecv_replace with a vector around the ring. */
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    for (int i = 0; i < 2 * N; i++) a[i] = i % 2 ? -7 : rank * 100000 + i;
    OK(MPI_Sendrecv_replace(a, 1, every2nd, right, 6, left, 6, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    for (int i = 0; i < 2 * N; i++) CHECK(a[i] == (i % 2 ? -7 : left * 100000 + i));
    OK(MPI_Type_free(&every2nd));
    OK(MPI_Type_free(&pair));
    free(a);
    free(b);
}

int main(int argc, char **argv) {
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    CHECK(size >= 2);
    modes(0);
    modes(1);
    modes(5000);
    modes(300000);
    order();
    probes();
    cancel_and_null();
    truncation();
    synchronous();
    persistent();
    ring();
    derived();
    printf("pt2pt OK rank=%d\n", rank);
    OK(MPI_Finalize());
    return 0;
}
