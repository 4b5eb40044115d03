/* Point-to-point messaging with bulkwire.h: every process sends a greeting to its right
 * neighbour around a ring and receives one from its left, with non-blocking calls; an
 * allreduce then counts the greetings that arrived intact.
 *
 * target/release/bspcc -O2 examples/c/hello_p2p.c -o hello_p2p
 * ./hello_p2p 4            (starts 4 processes itself), or bsprun -n 4 ./hello_p2p */
#include <bulkwire.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void ck(int rc, const char *what) {
    if (rc != BW_SUCCESS) {
        fprintf(stderr, "%s: %s (%s)\n", what, bw_error_string(rc), bw_last_error());
        bw_abort("hello_p2p failed");
    }
}

int main(int argc, char **argv) {
    ck(bw_init_spawn(argc > 1 ? atoi(argv[1]) : 4), "bw_init_spawn");
    int me, np;
    ck(bw_rank(&me), "bw_rank");
    ck(bw_size(&np), "bw_size");
    int right = (me + 1) % np, left = (me + np - 1) % np;

    char out[64], in[64], want[64];
    snprintf(out, sizeof out, "hello from %d", me);
    snprintf(want, sizeof want, "hello from %d", left);

    /* Post the receive first: the message lands straight in `in`. */
    bw_request reqs[2];
    bw_status st[2];
    ck(bw_irecv(in, sizeof in, left, 0, &reqs[0]), "bw_irecv");
    ck(bw_isend(out, strlen(out) + 1, right, 0, &reqs[1]), "bw_isend");
    ck(bw_waitall(2, reqs, st), "bw_waitall");

    int good = st[0].source == left && strcmp(in, want) == 0, total = 0;
    printf("rank %d of %d: \"%s\"\n", me, np, in);
    ck(bw_allreduce(&good, &total, 1, BW_INT32, BW_SUM), "bw_allreduce");
    if (me == 0)
        printf("hello_p2p %s: %d of %d greetings\n", total == np ? "ok" : "FAILED", total, np);
    ck(bw_finalize(), "bw_finalize");
    return total == np ? 0 : 1;
}
