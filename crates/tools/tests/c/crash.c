/* A process dies: `crash MODE VICTIM [P]`. Every process prints "pid S os PID" and then
 * runs supersteps (MODE sync) or computes without calling the library (MODE compute)
 * for up to 60 s; the test kills VICTIM from outside. MODE self: VICTIM kills itself in
 * superstep 50. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <bsp.h>

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "sync";
    int victim = argc > 2 ? atoi(argv[2]) : 1;
    bsp_begin(argc > 3 ? atoi(argv[3]) : bsp_nprocs());
    int s = bsp_pid();
    printf("pid %d os %d\n", s, (int)getpid());
    fflush(stdout);
    bsp_sync();
    double t0 = bsp_time();
    for (long i = 0; bsp_time() - t0 < 60; i++) {
        if (!strcmp(mode, "self") && s == victim && i == 50) raise(SIGKILL);
        if (!strcmp(mode, "compute") && s != victim) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL); /* computing, never calling the library */
            continue;
        }
        bsp_sync();
    }
    if (s == 0) printf("not reached\n");
    bsp_end();
    return 0;
}
