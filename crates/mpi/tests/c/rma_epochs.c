/* Windows: a fence epoch without operations may be followed by a lock (MPI-3.1 11.5; a
 * fence starts an epoch only if RMA calls follow), one with operations may not;
 * MPI_Win_flush_all completes at the locked targets, whichever those are; accumulates
 * without data succeed whatever their types; an operation may span adjacent regions
 * attached to a dynamic window; the
 * handler of MPI_Win_call_errhandler is given the window; MPI_Win_shared_query answers
 * for every window and gives NULL for an empty segment; MPI_Win_free deletes the
 * window's attributes through their delete callbacks. */
#include "mpitest.h"

static MPI_Win the_win;
static int calls, right_win, deleted;

static void handler(MPI_Win *w, int *code, ...) {
    calls++;
    right_win = *w == the_win && *code == MPI_ERR_OTHER;
}

static int del(MPI_Win w, int key, void *val, void *extra) {
    (void)w;
    (void)key;
    (void)extra;
    deleted += *(int *)val;
    return MPI_SUCCESS;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int buf[2] = {0, 0};
    OK(MPI_Win_create(buf, sizeof buf, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &the_win));

    /* An empty fence epoch, then passive target. */
    OK(MPI_Win_fence(0, the_win));
    int one = rank + 1, right = (rank + 1) % size;
    OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, right, 0, the_win));
    OK(MPI_Accumulate(&one, 1, MPI_INT, right, 0, 1, MPI_INT, MPI_SUM, the_win));
    /* Operations without data do nothing, whatever their (empty) types are made of. */
    MPI_Datatype empty;
    OK(MPI_Type_contiguous(0, MPI_INT, &empty));
    OK(MPI_Type_commit(&empty));
    OK(MPI_Accumulate(&one, 1, empty, right, 0, 0, MPI_DOUBLE, MPI_SUM, the_win));
    OK(MPI_Get_accumulate(NULL, 0, MPI_INT, NULL, 2, empty, right, 0, 1, empty, MPI_SUM,
                          the_win));
    OK(MPI_Type_free(&empty));
    /* Flush_all completes at the targets that are locked (one of them here). */
    OK(MPI_Win_flush_all(the_win));
    OK(MPI_Win_flush_local_all(the_win));
    OK(MPI_Win_unlock(right, the_win));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    OK(MPI_Win_lock_all(0, the_win));
    OK(MPI_Win_unlock_all(the_win));
    /* Fence epochs around a put still work, and one with an operation refuses a lock. */
    OK(MPI_Win_fence(0, the_win));
    OK(MPI_Put(&one, 1, MPI_INT, right, 1, 1, MPI_INT, the_win));
    OK(MPI_Win_set_errhandler(the_win, MPI_ERRORS_RETURN));
    CHECK(MPI_Win_lock(MPI_LOCK_SHARED, right, 0, the_win) != MPI_SUCCESS);
    OK(MPI_Win_fence(MPI_MODE_NOSUCCEED, the_win));
    int left = (rank + size - 1) % size;
    CHECK(buf[0] == left + 1 && buf[1] == left + 1);

    /* A dynamic window: an operation may span two adjacent attached regions. */
    {
        int mem[8] = {0}, src[6] = {1, 2, 3, 4, 5, 6};
        MPI_Aint addrs[2 * 64], mine;
        MPI_Win dw;
        OK(MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &dw));
        OK(MPI_Win_attach(dw, &mem[0], 4 * sizeof(int)));
        OK(MPI_Win_attach(dw, &mem[4], 4 * sizeof(int)));
        OK(MPI_Get_address(&mem[1], &mine));
        OK(MPI_Allgather(&mine, 1, MPI_AINT, addrs, 1, MPI_AINT, MPI_COMM_WORLD));
        OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, right, 0, dw));
        OK(MPI_Put(src, 6, MPI_INT, right, addrs[right], 6, MPI_INT, dw));
        OK(MPI_Win_unlock(right, dw));
        OK(MPI_Barrier(MPI_COMM_WORLD));
        for (int i = 0; i < 6; i++) CHECK(mem[1 + i] == i + 1);
        CHECK(mem[0] == 0 && mem[7] == 0);
        OK(MPI_Win_detach(dw, &mem[0]));
        OK(MPI_Win_detach(dw, &mem[4]));
        OK(MPI_Win_free(&dw));
    }

    /* The user's handler sees the window. */
    MPI_Errhandler eh;
    OK(MPI_Win_create_errhandler(handler, &eh));
    OK(MPI_Win_set_errhandler(the_win, eh));
    OK(MPI_Win_call_errhandler(the_win, MPI_ERR_OTHER));
    CHECK(calls == 1 && right_win);
    OK(MPI_Errhandler_free(&eh));

    /* MPI_Win_shared_query: no segment of a window of another flavor (MPI-4.0's
     * answer), and no address for an empty segment of a shared window. */
    MPI_Aint qs = -1;
    int qu = -1;
    void *qb = &qs;
    OK(MPI_Win_shared_query(the_win, 0, &qs, &qu, &qb));
    CHECK(qs == 0 && qb == NULL);
    MPI_Comm shm;
    OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &shm));
    int srank, ssize, *sb;
    MPI_Comm_rank(shm, &srank);
    MPI_Comm_size(shm, &ssize);
    MPI_Win sw;
    OK(MPI_Win_allocate_shared(srank % 2 ? 0 : sizeof(int), sizeof(int), MPI_INFO_NULL, shm, &sb,
                               &sw));
    for (int i = 0; i < ssize; i++) {
        OK(MPI_Win_shared_query(sw, i, &qs, &qu, &qb));
        if (i % 2)
            CHECK(qs == 0 && qb == NULL);
        else
            CHECK(qs == sizeof(int) && qb != NULL);
    }
    OK(MPI_Win_free(&sw));
    OK(MPI_Comm_free(&shm));

    /* Attributes are deleted when the window is freed. */
    int key, val = 5;
    OK(MPI_Win_create_keyval(MPI_WIN_NULL_COPY_FN, del, &key, NULL));
    OK(MPI_Win_set_attr(the_win, key, &val));
    OK(MPI_Win_free(&the_win));
    CHECK(deleted == 5);
    OK(MPI_Win_free_keyval(&key));

    printf("rma_epochs OK rank=%d\n", rank);
    MPI_Finalize();
    return 0;
}
