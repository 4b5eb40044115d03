/* MPI_THREAD_MULTIPLE: four threads per process at once make communicators (each from
 * its own parent, so the creations race for context ids) and exchange messages with
 * wildcards, blocking and not, on them; no message may cross to another thread's. */
#include "mpitest.h"
#include <pthread.h>

enum { THREADS = 4, ROUNDS = 200 };

static int rank, size;
static MPI_Comm parent[THREADS];

static void *work(void *arg) {
    int t = (int)(long)arg;
    MPI_Comm c;
    OK(MPI_Comm_dup(parent[t], &c));
    int peer = rank ^ 1;
    if (peer < size) {
        for (int i = 0; i < ROUNDS; i++) {
            int out[2] = {t, i}, in[2] = {-1, -1};
            MPI_Status st;
            if (i % 2 == 0) {
                MPI_Request r[2];
                OK(MPI_Irecv(in, 2, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, c, &r[0]));
                OK(MPI_Isend(out, 2, MPI_INT, peer, i % 7, c, &r[1]));
                MPI_Status sts[2];
                OK(MPI_Waitall(2, r, sts));
                st = sts[0];
            } else {
                OK(MPI_Sendrecv(out, 2, MPI_INT, peer, i % 7, in, 2, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, c, &st));
            }
            CHECK(in[0] == t && in[1] == i && st.MPI_SOURCE == peer && st.MPI_TAG == i % 7);
        }
    }
    OK(MPI_Comm_free(&c));
    return NULL;
}

int main(int argc, char **argv) {
    int provided;
    OK(MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided));
    CHECK(provided == MPI_THREAD_MULTIPLE);
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    for (int t = 0; t < THREADS; t++) OK(MPI_Comm_dup(MPI_COMM_WORLD, &parent[t]));
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++) CHECK(pthread_create(&th[t], NULL, work, (void *)(long)t) == 0);
    for (int t = 0; t < THREADS; t++) CHECK(pthread_join(th[t], NULL) == 0);
    for (int t = 0; t < THREADS; t++) OK(MPI_Comm_free(&parent[t]));
    printf("threads OK rank=%d\n", rank);
    OK(MPI_Finalize());
    return 0;
}
