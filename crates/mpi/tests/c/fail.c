/* How failures end a job: argv[1] is "fatal" (an invalid destination under the default
 * MPI_ERRORS_ARE_FATAL) or "dead" (rank 1 dies while rank 0 waits for it, with
 * MPI_ERRORS_RETURN: rank 0's receive fails instead of hanging). */
#include "mpitest.h"
#include <signal.h>
#include <unistd.h>

int main(int argc, char **argv) {
    int rank, size, v = 0;
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    CHECK(argc > 1);
    if (strcmp(argv[1], "fatal") == 0) {
        if (rank == 1) MPI_Send(&v, 1, MPI_INT, size + 7, 0, MPI_COMM_WORLD);
        else MPI_Recv(&v, 1, MPI_INT, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        printf("not reached\n");
    } else {
        OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
        /* The launcher ends the others at once when a process fails: rank 0 outlives
         * that (until the launcher's SIGKILL) to show what its receive returns. */
        if (rank == 0) signal(SIGTERM, SIG_IGN);
        if (rank == 1) {
            usleep(100000);
            _exit(3);
        }
        int rc = MPI_Recv(&v, 1, MPI_INT, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        char s[MPI_MAX_ERROR_STRING];
        int len;
        MPI_Error_string(rc, s, &len);
        printf("rank 0: receive from the dead rank failed: %d %s\n", rc, s);
        fflush(stdout);
    }
    return 0;
}
