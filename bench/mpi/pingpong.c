/* OSU-style ping-pong (half round trip) and streaming bandwidth (window of 64 messages,
 * then a short ack) between two MPI ranks, for side-by-side figures with bulkwire.
 *   mpicc -O2 -o pingpong pingpong.c
 *   mpirun --allow-run-as-root -np 2 --mca btl self,vader ./pingpong */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int peer = 1 - rank;
    int iters = argc > 1 ? atoi(argv[1]) : 100000;
    char *buf = malloc(1 << 20), ack[8];
    memset(buf, 0x5a, 1 << 20);
    size_t sizes[] = {8, 1024};
    for (int k = 0; k < 2; k++) {
        int n = (int)sizes[k];
        double *t = malloc(sizeof(double) * iters);
        for (int i = 0; i < iters / 10 + iters; i++) {
            double t0 = MPI_Wtime();
            if (rank == 0) {
                MPI_Send(buf, n, MPI_CHAR, peer, 1, MPI_COMM_WORLD);
                MPI_Recv(buf, n, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else {
                MPI_Recv(buf, n, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Send(buf, n, MPI_CHAR, peer, 1, MPI_COMM_WORLD);
            }
            if (i >= iters / 10) t[i - iters / 10] = (MPI_Wtime() - t0) / 2;
        }
        if (rank == 0) {
            double sum = 0;
            for (int i = 0; i < iters; i++) sum += t[i];
            qsort(t, iters, sizeof(double), cmp);
            printf("mpi: %d B half round trip median %.3f us, mean %.3f us\n", n,
                   t[iters / 2] * 1e6, sum / iters * 1e6);
        }
        free(t);
    }
    int bsizes[] = {65536, 1 << 20};
    for (int k = 0; k < 2; k++) {
        int n = bsizes[k], window = 64, reps = 20;
        double rates[20];
        MPI_Request req[64];
        for (int r = 0; r < reps + 3; r++) {
            double t0 = MPI_Wtime();
            if (rank == 0) {
                for (int w = 0; w < window; w++)
                    MPI_Isend(buf, n, MPI_CHAR, peer, 2, MPI_COMM_WORLD, &req[w]);
                MPI_Waitall(window, req, MPI_STATUSES_IGNORE);
                MPI_Recv(ack, 8, MPI_CHAR, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else {
                for (int w = 0; w < window; w++)
                    MPI_Irecv(buf, n, MPI_CHAR, peer, 2, MPI_COMM_WORLD, &req[w]);
                MPI_Waitall(window, req, MPI_STATUSES_IGNORE);
                MPI_Send(ack, 8, MPI_CHAR, peer, 3, MPI_COMM_WORLD);
            }
            if (r >= 3) rates[r - 3] = (double)n * window / (MPI_Wtime() - t0);
        }
        if (rank == 0) {
            qsort(rates, reps, sizeof(double), cmp);
            printf("mpi: %d B stream (window 64) median %.2f GB/s, max %.2f GB/s\n", n,
                   rates[reps / 2] / 1e9, rates[reps - 1] / 1e9);
        }
    }
    free(buf);
    MPI_Finalize();
    return 0;
}
