/* The kernels' common communication over MPI. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "comm.h"

static const char *program = "npb";
static int rank, size;

const char *npb_program(void) { return program; }

void npb_begin(int argc, char **argv) {
    const char *s = strrchr(argv[0], '/');
    program = s ? s + 1 : argv[0];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc > 1)
        npb_fail("takes no arguments: the number of processes is mpirun's (mpirun -np P %s)",
                 program);
}

int npb_pid(void) { return rank; }
int npb_nprocs(void) { return size; }

void npb_fail(const char *fmt, ...) {
    if (rank == 0) {
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "%s: ", program);
        vfprintf(stderr, fmt, ap);
        fprintf(stderr, "\n");
        va_end(ap);
    }
    /* Every process reaches this together, so a plain finalize ends the job. */
    MPI_Finalize();
    exit(1);
}

void npb_abort(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: process %d: ", program, rank);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1); /* not reached: MPI_Abort does not return */
}

void npb_barrier(void) { MPI_Barrier(MPI_COMM_WORLD); }

void npb_allgather(const char *phase, const void *mine, void *all, int nbytes) {
    if (size == 1) {
        memcpy(all, mine, (size_t)nbytes);
        return;
    }
    npb_comm_begin(phase);
    MPI_Allgather(mine, nbytes, MPI_BYTE, all, nbytes, MPI_BYTE, MPI_COMM_WORLD);
    npb_comm_end();
}

int npb_end(struct npb_result *r) {
    npb_collect(r);
    if (rank == 0) npb_print_result(r, "mpi");
    MPI_Finalize();
    return rank == 0 && !r->verified ? 1 : 0;
}
