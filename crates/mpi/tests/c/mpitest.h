/* Checks for the MPI test programs: a failed check prints where and aborts the job. */
#ifndef MPITEST_H
#define MPITEST_H

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                                       \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            int r_ = -1;                                                                  \
            MPI_Comm_rank(MPI_COMM_WORLD, &r_);                                           \
            fprintf(stderr, "FAIL rank %d: %s:%d: %s\n", r_, __FILE__, __LINE__, #cond);  \
            fflush(stderr);                                                               \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                 \
        }                                                                                 \
    } while (0)

#define OK(call) CHECK((call) == MPI_SUCCESS)

#endif
