/* One-sided communication, checked from C: fence epochs (put, get, accumulate with
 * strided types on both sides), passive target (exclusive locks around a
 * read-modify-write, shared locks with fetch-and-op, compare-and-swap and request-based
 * operations, flush), MPI_Win_allocate and the window's attributes (predefined and the
 * program's), a shared window among the processes of a host. Any number of processes
 * (Open MPI 4.1 needs `--mca osc sm,pt2pt`); every rank prints "rma_test OK rank=R" and
 * exits 0, or names the first failed check and aborts. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int rank, size;

#define CHECK(cond, ...)                                                                 \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "rma_test: rank %d: line %d: ", rank, __LINE__);             \
            fprintf(stderr, __VA_ARGS__);                                                \
            fprintf(stderr, "\n");                                                       \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                \
        }                                                                                \
    } while (0)

#define OK(call) CHECK((call) == MPI_SUCCESS, "%s failed", #call)

/* Each rank puts 20 ints into the next rank's window, then reads them back with a get. */
static void fence_ring(void) {
    int buf[64] = {0}, got[64] = {0}, data[20];
    MPI_Win win;
    OK(MPI_Win_create(buf, sizeof buf, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win));
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    for (int k = 0; k < 20; k++) data[k] = rank * 100 + k;
    OK(MPI_Win_fence(0, win));
    OK(MPI_Put(data, 20, MPI_INT, next, (rank % 3) * 20, 20, MPI_INT, win));
    OK(MPI_Win_fence(0, win));
    for (int k = 0; k < 20; k++)
        CHECK(buf[(prev % 3) * 20 + k] == prev * 100 + k, "put: slot %d holds %d", k,
              buf[(prev % 3) * 20 + k]);
    OK(MPI_Get(got, 20, MPI_INT, next, (rank % 3) * 20, 20, MPI_INT, win));
    OK(MPI_Win_fence(MPI_MODE_NOSUCCEED, win));
    for (int k = 0; k < 20; k++) CHECK(got[k] == data[k], "get: %d is %d", k, got[k]);
    /* What a third process put before a fence is there for a get after it. */
    OK(MPI_Win_fence(0, win));
    int far = (rank + 2) % size, writer = (rank + 1) % size, third[20];
    OK(MPI_Get(third, 20, MPI_INT, far, (writer % 3) * 20, 20, MPI_INT, win));
    OK(MPI_Win_fence(MPI_MODE_NOSUCCEED, win));
    for (int k = 0; k < 20; k++) CHECK(third[k] == writer * 100 + k, "get after a fence: %d", third[k]);
    OK(MPI_Win_free(&win));
    CHECK(win == MPI_WIN_NULL, "the freed window's handle is MPI_WIN_NULL");
}

/* Everyone adds rank+1 into the even slots of rank 0 (a vector at the target) and reads
 * its odd slots through a vector on the origin's side. */
static void accumulate_strided(void) {
    double buf[16];
    for (int i = 0; i < 16; i++) buf[i] = i;
    MPI_Win win;
    MPI_Datatype even;
    OK(MPI_Type_vector(8, 1, 2, MPI_DOUBLE, &even));
    OK(MPI_Type_commit(&even));
    OK(MPI_Win_create(buf, sizeof buf, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win));
    double add[8];
    for (int i = 0; i < 8; i++) add[i] = rank + 1;
    OK(MPI_Win_fence(0, win));
    for (int r = 0; r < 5; r++) OK(MPI_Accumulate(add, 8, MPI_DOUBLE, 0, 0, 1, even, MPI_SUM, win));
    OK(MPI_Win_fence(0, win));
    double total = 5.0 * size * (size + 1) / 2;
    if (rank == 0)
        for (int i = 0; i < 16; i++)
            CHECK(buf[i] == (i % 2 ? i : i + total), "slot %d: %g", i, buf[i]);
    double odd[16] = {0};
    /* The odd slots of rank 0 land in the even slots of `odd`. */
    OK(MPI_Get(odd, 1, even, 0, sizeof(double), 1, even, win));
    OK(MPI_Win_fence(MPI_MODE_NOSUCCEED, win));
    for (int i = 0; i < 8; i++) CHECK(odd[2 * i] == 2 * i + 1 && odd[2 * i + 1] == 0, "odd %d", i);
    OK(MPI_Win_free(&win));
    OK(MPI_Type_free(&even));
}

/* A counter on rank 0 incremented under an exclusive lock: no update is lost. */
static void exclusive_counter(void) {
    long *mem;
    MPI_Win win;
    OK(MPI_Win_allocate(sizeof(long) * 2, sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &mem, &win));
    mem[0] = mem[1] = 0;
    OK(MPI_Barrier(MPI_COMM_WORLD));
    for (int i = 0; i < 20; i++) {
        long v;
        OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win));
        OK(MPI_Get(&v, 1, MPI_LONG, 0, 0, 1, MPI_LONG, win));
        OK(MPI_Win_flush(0, win));
        v++;
        OK(MPI_Put(&v, 1, MPI_LONG, 0, 0, 1, MPI_LONG, win));
        OK(MPI_Win_unlock(0, win));
    }
    OK(MPI_Barrier(MPI_COMM_WORLD));
    if (rank == 0) {
        OK(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
        CHECK(mem[0] == 20L * size, "counter %ld, expected %ld", mem[0], 20L * size);
        OK(MPI_Win_unlock(0, win));
    }
    void *base;
    MPI_Aint *wsize;
    int *unit, *flavor, flag;
    OK(MPI_Win_get_attr(win, MPI_WIN_BASE, &base, &flag));
    CHECK(flag && base == mem, "MPI_WIN_BASE");
    OK(MPI_Win_get_attr(win, MPI_WIN_SIZE, &wsize, &flag));
    CHECK(flag && *wsize == 2 * sizeof(long), "MPI_WIN_SIZE %ld", (long)*wsize);
    OK(MPI_Win_get_attr(win, MPI_WIN_DISP_UNIT, &unit, &flag));
    CHECK(flag && *unit == sizeof(long), "MPI_WIN_DISP_UNIT");
    OK(MPI_Win_get_attr(win, MPI_WIN_CREATE_FLAVOR, &flavor, &flag));
    CHECK(flag && *flavor == MPI_WIN_FLAVOR_ALLOCATE, "MPI_WIN_CREATE_FLAVOR");
    int key;
    void *v;
    OK(MPI_Win_create_keyval(MPI_WIN_NULL_COPY_FN, MPI_WIN_NULL_DELETE_FN, &key, NULL));
    OK(MPI_Win_set_attr(win, key, &size));
    OK(MPI_Win_get_attr(win, key, &v, &flag));
    CHECK(flag && v == &size, "a window attribute");
    OK(MPI_Win_delete_attr(win, key));
    OK(MPI_Win_get_attr(win, key, &v, &flag));
    CHECK(!flag, "a deleted window attribute");
    OK(MPI_Win_free_keyval(&key));
    OK(MPI_Win_free(&win));
}

/* A shared window among the processes of this host: stores by one, loads by another. */
static void shared_window(void) {
    MPI_Comm node;
    OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    int nr, np;
    OK(MPI_Comm_rank(node, &nr));
    OK(MPI_Comm_size(node, &np));
    int *mine;
    MPI_Win win;
    OK(MPI_Win_allocate_shared(4 * sizeof(int), sizeof(int), MPI_INFO_NULL, node, &mine, &win));
    MPI_Aint sz;
    int unit, *next;
    OK(MPI_Win_shared_query(win, (nr + 1) % np, &sz, &unit, &next));
    CHECK(sz == 4 * sizeof(int) && unit == sizeof(int), "shared_query: %ld %d", (long)sz, unit);
    OK(MPI_Win_fence(0, win));
    for (int i = 0; i < 4; i++) next[i] = nr * 10 + i;
    OK(MPI_Win_fence(0, win));
    int prev = (nr + np - 1) % np;
    for (int i = 0; i < 4; i++) CHECK(mine[i] == prev * 10 + i, "shared slot %d: %d", i, mine[i]);
    OK(MPI_Win_fence(MPI_MODE_NOSUCCEED, win));
    OK(MPI_Win_free(&win));
    OK(MPI_Comm_free(&node));
}

/* Fetch-and-op under lock_all: each fetch sees a larger value; one compare-and-swap wins. */
static void atomics(void) {
    int buf[2] = {0, 0};
    MPI_Win win;
    OK(MPI_Win_create(buf, sizeof buf, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win));
    OK(MPI_Win_lock_all(0, win));
    int one = 1, last = -1;
    for (int i = 0; i < 10; i++) {
        int old;
        OK(MPI_Fetch_and_op(&one, &old, MPI_INT, 0, 0, MPI_SUM, win));
        OK(MPI_Win_flush(0, win));
        CHECK(old > last, "fetch %d after %d", old, last);
        last = old;
    }
    int mine = rank + 1, zero = 0, was = -1;
    OK(MPI_Compare_and_swap(&mine, &zero, &was, MPI_INT, 0, 1, win));
    OK(MPI_Win_unlock_all(win));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    int winner = 0;
    OK(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
    OK(MPI_Get(&winner, 1, MPI_INT, 0, 1, 1, MPI_INT, win));
    OK(MPI_Win_unlock(0, win));
    CHECK((was == 0) == (winner == rank + 1), "compare-and-swap: saw %d, winner %d", was, winner);
    if (rank == 0) CHECK(buf[0] == 10 * size, "fetch-and-op total %d", buf[0]);
    OK(MPI_Barrier(MPI_COMM_WORLD));
    /* Request-based: each rank adds to slot 1 of rank 0 and reads slot 0 back. */
    OK(MPI_Win_lock_all(0, win));
    MPI_Request rq[2];
    int got = -1;
    OK(MPI_Raccumulate(&one, 1, MPI_INT, 0, 1, 1, MPI_INT, MPI_SUM, win, &rq[0]));
    OK(MPI_Rget(&got, 1, MPI_INT, 0, 0, 1, MPI_INT, win, &rq[1]));
    MPI_Status sts[2];
    OK(MPI_Waitall(2, rq, sts));
    CHECK(got == 10 * size, "Rget saw %d", got);
    OK(MPI_Win_unlock_all(win));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    OK(MPI_Win_free(&win));
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    fence_ring();
    accumulate_strided();
    exclusive_counter();
    atomics();
    shared_window();
    MPI_Barrier(MPI_COMM_WORLD);
    printf("rma_test OK rank=%d\n", rank);
    MPI_Finalize();
    return 0;
}
