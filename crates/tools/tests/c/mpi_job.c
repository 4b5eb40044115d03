/* An MPI job as a launcher forms it: `mpi_job` prints "rank R of S" on every rank, then
 * checks an allreduce, a ring of MPI_Sendrecv and a gather of the ranks at rank 0, which
 * prints "mpi_job ok p=S" (or "mpi_job FAILED ..." and a failure status).
 * `mpi_job die VICTIM`: VICTIM kills itself after a barrier while the others keep
 * calling MPI_Allreduce for up to 60 s; the job must fail, naming it. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

static int fail(int rank, const char *what, long got, long want) {
    printf("mpi_job FAILED on rank %d: %s %ld, not %ld\n", rank, what, got, want);
    fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    printf("rank %d of %d\n", rank, size);
    fflush(stdout);

    if (argc > 2 && !strcmp(argv[1], "die")) {
        int victim = atoi(argv[2]);
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == victim) raise(SIGKILL);
        double t0 = MPI_Wtime();
        long one = 1, sum = 0;
        while (MPI_Wtime() - t0 < 60)
            MPI_Allreduce(&one, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        if (rank == 0) printf("not reached\n");
        MPI_Finalize();
        return 0;
    }

    /* A collective: the sum of rank + 1 over the job. */
    long mine = rank + 1, sum = 0;
    MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (sum != (long)size * (size + 1) / 2) return fail(rank, "allreduce", sum, (long)size * (size + 1) / 2);

    /* Point-to-point: each rank sends its rank to the right, receives the left one's. */
    int right = (rank + 1) % size, left = (rank + size - 1) % size, got = -1;
    MPI_Status st;
    MPI_Sendrecv(&rank, 1, MPI_INT, right, 7, &got, 1, MPI_INT, left, 7, MPI_COMM_WORLD, &st);
    if (got != left) return fail(rank, "ring received", got, left);
    if (st.MPI_SOURCE != left) return fail(rank, "ring source", st.MPI_SOURCE, left);

    /* Distinct ranks: rank 0 receives every rank once, from the rank it names. */
    if (rank == 0) {
        int *seen = calloc(size, sizeof *seen);
        for (int i = 1; i < size; i++) {
            int r = -1;
            MPI_Recv(&r, 1, MPI_INT, MPI_ANY_SOURCE, 9, MPI_COMM_WORLD, &st);
            if (r != st.MPI_SOURCE || r <= 0 || r >= size || seen[r]++)
                return fail(rank, "rank from source", r, st.MPI_SOURCE);
        }
        free(seen);
        printf("mpi_job ok p=%d\n", size);
        fflush(stdout);
    } else {
        MPI_Send(&rank, 1, MPI_INT, 0, 9, MPI_COMM_WORLD);
    }
    MPI_Finalize();
    return 0;
}
