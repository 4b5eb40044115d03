/* The profiling interface (the MPI standard's chapter 15): this program defines its own
 * MPI_Send and MPI_Allreduce, counting calls and reaching the library through PMPI_Send
 * and PMPI_Allreduce, as a tool linked into a program does. Its definitions must replace
 * the library's, and calls the library makes inside other calls (a Sendrecv's send, the
 * reductions a Bcast or Barrier may use) must not reach them. */
#include "mpitest.h"

static int sends, allreduces;

int MPI_Send(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm)
{
    sends++;
    return PMPI_Send(buf, count, datatype, dest, tag, comm);
}

int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                  MPI_Comm comm)
{
    allreduces++;
    return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
}

int main(int argc, char **argv)
{
    OK(MPI_Init(&argc, &argv));
    int rank, size;
    /* Both names reach the library. */
    OK(PMPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    /* Three sends around the ring, through the program's MPI_Send. */
    for (int i = 0; i < 3; i++) {
        int v = rank * 10 + i, got = -1;
        if (rank % 2 == 0) {
            OK(MPI_Send(&v, 1, MPI_INT, next, i, MPI_COMM_WORLD));
            OK(MPI_Recv(&got, 1, MPI_INT, prev, i, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        } else {
            OK(MPI_Recv(&got, 1, MPI_INT, prev, i, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            OK(MPI_Send(&v, 1, MPI_INT, next, i, MPI_COMM_WORLD));
        }
        CHECK(got == prev * 10 + i);
    }
    /* A direct PMPI_Send is not counted. */
    int v = rank, got = -1;
    if (rank % 2 == 0) {
        OK(PMPI_Send(&v, 1, MPI_INT, next, 9, MPI_COMM_WORLD));
        OK(MPI_Recv(&got, 1, MPI_INT, prev, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    } else {
        OK(MPI_Recv(&got, 1, MPI_INT, prev, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        OK(PMPI_Send(&v, 1, MPI_INT, next, 9, MPI_COMM_WORLD));
    }
    CHECK(got == prev);
    /* Calls that send or reduce inside the library are not counted either. */
    OK(MPI_Sendrecv(&v, 1, MPI_INT, next, 10, &got, 1, MPI_INT, prev, 10, MPI_COMM_WORLD,
                    MPI_STATUS_IGNORE));
    CHECK(got == prev);
    OK(MPI_Bcast(&v, 1, MPI_INT, 0, MPI_COMM_WORLD));
    CHECK(v == 0);
    OK(MPI_Barrier(MPI_COMM_WORLD));
    int sum = 0, one = 1;
    OK(MPI_Reduce(&one, &sum, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD));
    /* Two allreduces, through the program's MPI_Allreduce. */
    OK(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    CHECK(sum == size);
    OK(MPI_Allreduce(MPI_IN_PLACE, &sum, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    CHECK(sum == size);
    CHECK(sends == 3);
    CHECK(allreduces == 2);
    /* Functions the program does not define keep both names. */
    double t = PMPI_Wtime();
    CHECK(MPI_Wtime() >= t);
    OK(MPI_Finalize());
    printf("profiling OK rank=%d\n", rank);
    return 0;
}
