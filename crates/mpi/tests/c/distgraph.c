/* Distributed graph topologies: MPI_Dist_graph_create_adjacent and MPI_Dist_graph_create
 * (edges named by any process), the neighbour queries with and without weights, and the
 * neighbourhood collectives on graphs whose in and out edges differ. */
#include "mpitest.h"

/* GCC takes MPI_UNWEIGHTED and MPI_WEIGHTS_EMPTY, constant addresses, for arrays of no
 * size passed where the prototype has an array. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wstringop-overread"
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#endif

static int rank, size;

static void check_neighbors(MPI_Comm g, int in, const int *src, const int *sw, int out,
                            const int *dst, const int *dw, int weighted)
{
    int t, i, o, w;
    OK(MPI_Topo_test(g, &t));
    CHECK(t == MPI_DIST_GRAPH);
    OK(MPI_Dist_graph_neighbors_count(g, &i, &o, &w));
    CHECK(i == in && o == out && !!w == weighted);
    int s[8], sws[8], d[8], dws[8];
    OK(MPI_Dist_graph_neighbors(g, 8, s, weighted ? sws : MPI_UNWEIGHTED, 8, d,
                                weighted ? dws : MPI_UNWEIGHTED));
    for (int k = 0; k < in; k++)
        CHECK(s[k] == src[k] && (!weighted || sws[k] == sw[k]));
    for (int k = 0; k < out; k++)
        CHECK(d[k] == dst[k] && (!weighted || dws[k] == dw[k]));
}

/* A ring given by each process's own edges, weighted: in from prev, out to next and to
 * the one after (the same process twice at p = 2). */
static void adjacent_ring(void)
{
    int prev = (rank + size - 1) % size, prev2 = (rank + size - 2) % size;
    int next = (rank + 1) % size, next2 = (rank + 2) % size;
    int src[2] = {prev, prev2}, sw[2] = {prev * 10 + 1, prev2 * 10 + 2};
    int dst[2] = {next, next2}, dw[2] = {rank * 10 + 1, rank * 10 + 2};
    MPI_Comm g;
    OK(MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 2, src, sw, 2, dst, dw, MPI_INFO_NULL, 0,
                                      &g));
    check_neighbors(g, 2, src, sw, 2, dst, dw, 1);
    /* A duplicate keeps the topology. */
    MPI_Comm dup;
    OK(MPI_Comm_dup(g, &dup));
    check_neighbors(dup, 2, src, sw, 2, dst, dw, 1);
    OK(MPI_Comm_free(&dup));

    int got[2] = {-1, -1};
    OK(MPI_Neighbor_allgather(&rank, 1, MPI_INT, got, 1, MPI_INT, g));
    CHECK(got[0] == prev && got[1] == prev2);
    /* Block k goes to destination k, and arrives as the block of that source. */
    int send[2] = {rank * 100 + 1, rank * 100 + 2};
    OK(MPI_Neighbor_alltoall(send, 1, MPI_INT, got, 1, MPI_INT, g));
    CHECK(got[0] == prev * 100 + 1 && got[1] == prev2 * 100 + 2);
    MPI_Request r;
    got[0] = got[1] = -1;
    OK(MPI_Ineighbor_alltoall(send, 1, MPI_INT, got, 1, MPI_INT, g, &r));
    OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    CHECK(got[0] == prev * 100 + 1 && got[1] == prev2 * 100 + 2);
    /* A graph call on a distributed graph is a topology error. */
    OK(MPI_Comm_set_errhandler(g, MPI_ERRORS_RETURN));
    int nn;
    int e = MPI_Graph_neighbors_count(g, rank, &nn), cls;
    OK(MPI_Error_class(e, &cls));
    CHECK(cls == MPI_ERR_TOPOLOGY);
    OK(MPI_Comm_free(&g));
}

/* A star named by rank 0 alone (MPI_Dist_graph_create): every other process sends to 0;
 * 0 receives from all of them, in no order the standard fixes. */
static void star(void)
{
    int n = 0, srcs[64], degs[64], dsts[64], ws[64];
    if (rank == 0)
        for (int p = 1; p < size; p++, n++) {
            srcs[n] = p;
            degs[n] = 1;
            dsts[n] = 0;
            ws[n] = 7 * p;
        }
    MPI_Comm g;
    OK(MPI_Dist_graph_create(MPI_COMM_WORLD, n, srcs, degs, dsts, ws, MPI_INFO_NULL, 1, &g));
    int in, out, w;
    OK(MPI_Dist_graph_neighbors_count(g, &in, &out, &w));
    CHECK(w);
    if (rank == 0) {
        CHECK(in == size - 1 && out == 0);
        int s[64], sw[64];
        OK(MPI_Dist_graph_neighbors(g, in, s, sw, 0, NULL, MPI_WEIGHTS_EMPTY));
        int seen = 0;
        for (int k = 0; k < in; k++) {
            CHECK(s[k] > 0 && s[k] < size && sw[k] == 7 * s[k]);
            seen |= 1 << s[k];
        }
        CHECK(seen == ((1 << size) - 2));
        /* Each source's block lands where the queries put it. */
        int got[64];
        OK(MPI_Neighbor_allgather(&rank, 1, MPI_INT, got, 1, MPI_INT, g));
        for (int k = 0; k < in; k++)
            CHECK(got[k] == s[k]);
        int counts[64], displs[64];
        for (int k = 0; k < in; k++) {
            counts[k] = 2;
            displs[k] = 2 * (in - 1 - k);
        }
        OK(MPI_Neighbor_alltoallv(NULL, NULL, NULL, MPI_INT, got, counts, displs, MPI_INT, g));
        for (int k = 0; k < in; k++)
            CHECK(got[displs[k]] == s[k] && got[displs[k] + 1] == -s[k]);
    } else {
        CHECK(in == 0 && out == 1);
        int d, dw;
        OK(MPI_Dist_graph_neighbors(g, 0, NULL, MPI_WEIGHTS_EMPTY, 1, &d, &dw));
        CHECK(d == 0 && dw == 7 * rank);
        OK(MPI_Neighbor_allgather(&rank, 1, MPI_INT, NULL, 0, MPI_INT, g));
        int v[2] = {rank, -rank}, two = 2, zero = 0;
        OK(MPI_Neighbor_alltoallv(v, &two, &zero, MPI_INT, NULL, NULL, NULL, MPI_INT, g));
    }
    OK(MPI_Comm_free(&g));
}

/* Unweighted graphs, and a process without edges. */
static void unweighted(void)
{
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    MPI_Comm g;
    /* Every process names its edge to the next one. */
    int one = 1;
    OK(MPI_Dist_graph_create(MPI_COMM_WORLD, 1, &rank, &one, &next, MPI_UNWEIGHTED,
                             MPI_INFO_NULL, 0, &g));
    check_neighbors(g, 1, &prev, NULL, 1, &next, NULL, 0);
    int got = -1;
    OK(MPI_Neighbor_allgather(&rank, 1, MPI_INT, &got, 1, MPI_INT, g));
    CHECK(got == prev);
    OK(MPI_Comm_free(&g));
    /* No edges: weighted with MPI_WEIGHTS_EMPTY, not with MPI_UNWEIGHTED. */
    OK(MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 0, NULL, MPI_WEIGHTS_EMPTY, 0, NULL,
                                      MPI_WEIGHTS_EMPTY, MPI_INFO_NULL, 0, &g));
    check_neighbors(g, 0, NULL, NULL, 0, NULL, NULL, 1);
    OK(MPI_Neighbor_allgather(&rank, 1, MPI_INT, NULL, 0, MPI_INT, g));
    OK(MPI_Comm_free(&g));
    OK(MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 0, NULL, MPI_UNWEIGHTED, 0, NULL,
                                      MPI_UNWEIGHTED, MPI_INFO_NULL, 0, &g));
    check_neighbors(g, 0, NULL, NULL, 0, NULL, NULL, 0);
    OK(MPI_Comm_free(&g));
}

int main(int argc, char **argv)
{
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    adjacent_ring();
    star();
    unweighted();
    OK(MPI_Finalize());
    printf("distgraph OK rank=%d\n", rank);
    return 0;
}
