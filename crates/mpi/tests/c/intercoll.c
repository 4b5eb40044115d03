/* Collectives on an intercommunicator: the world's even ranks (group A) and odd ranks
 * (group B), each group ordered by world rank. Every collective that MPI defines on
 * intercommunicators moves one group's data to the other: rooted ones from or to the
 * root in group A (MPI_ROOT there, MPI_PROC_NULL at the others of A), the others both
 * ways; reductions combine the remote group's data in its rank order. */
#include "mpitest.h"

static int wsize, wrank, color, lsize, rsize, lrank;

/* World rank of remote rank j: the j-th process of the other parity. */
static int remote_world(int j) { return 2 * j + (1 - color); }

/* A non-commutative operation: the last operand wins, so a reduction in rank order
 * gives the last rank's value. */
static void last(void *in, void *inout, int *len, MPI_Datatype *dt) {
    (void)dt;
    (void)in;
    (void)inout;
    (void)len;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    CHECK(wsize >= 2);
    color = wrank % 2;
    MPI_Comm local, ic;
    OK(MPI_Comm_split(MPI_COMM_WORLD, color, wrank, &local));
    OK(MPI_Intercomm_create(local, 0, MPI_COMM_WORLD, 1 - color, 7, &ic));
    OK(MPI_Comm_size(ic, &lsize));
    OK(MPI_Comm_remote_size(ic, &rsize));
    OK(MPI_Comm_rank(ic, &lrank));
    CHECK(lsize == (wsize + 1 - color) / 2 && rsize == (wsize + color) / 2);
    /* Group A's root: MPI_ROOT at its rank 0, MPI_PROC_NULL at the others; group B
     * names remote rank 0. */
    int root = color == 0 ? (lrank == 0 ? MPI_ROOT : MPI_PROC_NULL) : 0;
    int in_a_root = color == 0 && lrank == 0;

    OK(MPI_Barrier(ic));

    int v = in_a_root ? 4242 : -1;
    OK(MPI_Bcast(&v, 1, MPI_INT, root, ic));
    CHECK(color == 0 ? v == (in_a_root ? 4242 : -1) : v == 4242);

    /* Gather at A's root: B's world ranks in B's rank order. */
    int all[64], cnt[64], dsp[64];
    for (int i = 0; i < 64; i++) all[i] = -1;
    OK(MPI_Gather(&wrank, 1, MPI_INT, all, 1, MPI_INT, root, ic));
    if (in_a_root)
        for (int j = 0; j < rsize; j++) CHECK(all[j] == remote_world(j));

    /* Gatherv, B's rank j at displacement 2j. */
    for (int j = 0; j < rsize; j++) cnt[j] = 1, dsp[j] = 2 * j;
    for (int i = 0; i < 64; i++) all[i] = -1;
    OK(MPI_Gatherv(&wrank, 1, MPI_INT, all, cnt, dsp, MPI_INT, root, ic));
    if (in_a_root)
        for (int j = 0; j < rsize; j++) CHECK(all[2 * j] == remote_world(j) && all[2 * j + 1] == -1);

    /* Scatter from A's root: B's rank j gets 100 + j. */
    int src[64], got = -1;
    for (int j = 0; j < 64; j++) src[j] = 100 + j;
    OK(MPI_Scatter(src, 1, MPI_INT, &got, 1, MPI_INT, root, ic));
    if (color == 1) CHECK(got == 100 + lrank);

    /* Allgather both ways: the remote group's world ranks. */
    for (int i = 0; i < 64; i++) all[i] = -1;
    OK(MPI_Allgather(&wrank, 1, MPI_INT, all, 1, MPI_INT, ic));
    for (int j = 0; j < rsize; j++) CHECK(all[j] == remote_world(j));

    /* Alltoall: block j goes to remote rank j. */
    int out[64];
    for (int j = 0; j < rsize; j++) out[j] = wrank * 100 + j;
    for (int i = 0; i < 64; i++) all[i] = -1;
    OK(MPI_Alltoall(out, 1, MPI_INT, all, 1, MPI_INT, ic));
    for (int j = 0; j < rsize; j++) CHECK(all[j] == remote_world(j) * 100 + lrank);

    /* Reductions: sums of the remote group's world ranks, and a non-commutative one. */
    int rsum = 0;
    for (int j = 0; j < rsize; j++) rsum += remote_world(j);
    int s = -1;
    OK(MPI_Reduce(&wrank, &s, 1, MPI_INT, MPI_SUM, root, ic));
    if (in_a_root) CHECK(s == rsum);
    s = -1;
    OK(MPI_Allreduce(&wrank, &s, 1, MPI_INT, MPI_SUM, ic));
    CHECK(s == rsum);
    MPI_Op lastop;
    OK(MPI_Op_create(last, 0, &lastop));
    s = -1;
    OK(MPI_Allreduce(&wrank, &s, 1, MPI_INT, lastop, ic));
    CHECK(s == remote_world(rsize - 1));
    OK(MPI_Op_free(&lastop));

    /* Reduce_scatter_block with recvcount = the remote group's size: each process
     * gives lsize * rsize elements (its group's size times its count), cut into one
     * block of lsize elements per remote process on the other side; this process gets
     * block lrank of each remote process's data, rsize elements. */
    for (int k = 0; k < lsize * rsize; k++) out[k] = wrank + k;
    int blk[64];
    for (int i = 0; i < 64; i++) blk[i] = -1;
    OK(MPI_Reduce_scatter_block(out, blk, rsize, MPI_INT, MPI_SUM, ic));
    for (int t = 0; t < rsize; t++) CHECK(blk[t] == rsum + rsize * (lrank * rsize + t));
    CHECK(blk[rsize] == -1);

    /* Reduce_scatter: this group's rank i receives i + 1 elements; the remote group's
     * data is cut by this group's counts, which only this group knows. */
    int rc[64], theirs = 0;
    for (int i = 0; i < lsize; i++) rc[i] = i + 1;
    for (int j = 0; j < rsize; j++) theirs += j + 1;
    for (int k = 0; k < theirs; k++) out[k] = wrank + k;
    int res[64];
    for (int i = 0; i < 64; i++) res[i] = -1;
    OK(MPI_Reduce_scatter(out, res, rc, MPI_INT, MPI_SUM, ic));
    int first = lrank * (lrank + 1) / 2; /* this process's offset in the remote data */
    for (int k = 0; k <= lrank; k++) CHECK(res[k] == rsum + rsize * (first + k));
    CHECK(res[lrank + 1] == -1);

    /* Non-blocking: complete through MPI_Wait. */
    MPI_Request rq;
    v = in_a_root ? 77 : -1;
    OK(MPI_Ibcast(&v, 1, MPI_INT, root, ic, &rq));
    OK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
    if (color == 1) CHECK(v == 77);
    s = -1;
    OK(MPI_Iallreduce(&wrank, &s, 1, MPI_INT, MPI_SUM, ic, &rq));
    OK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
    CHECK(s == rsum);
    OK(MPI_Ibarrier(ic, &rq));
    OK(MPI_Wait(&rq, MPI_STATUS_IGNORE));

    /* Scans are not defined on intercommunicators. */
    OK(MPI_Comm_set_errhandler(ic, MPI_ERRORS_RETURN));
    CHECK(MPI_Scan(&wrank, &s, 1, MPI_INT, MPI_SUM, ic) != MPI_SUCCESS);

    OK(MPI_Comm_free(&ic));
    OK(MPI_Comm_free(&local));
    printf("intercoll OK rank=%d\n", wrank);
    MPI_Finalize();
    return 0;
}
