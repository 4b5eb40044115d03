/* Every MPI collective from C, blocking and non-blocking, against values each process
 * computes by itself: on MPI_COMM_WORLD (blocking calls go through bulkwire's collectives
 * layer, which bwmpi_coll_world_stats confirms) and on a communicator with the ranks in
 * reverse order (the schedules). MPI_IN_PLACE, roots other than 0, MINLOC, a
 * non-commutative user operation and a vector type with gaps. Aborts on the first
 * difference; prints "COLL OK rank=R" at the end. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* bulkwire's extension, not in mpi.h: calls through the collectives layer, last algorithm. */
long long bwmpi_coll_world_stats(char *name, int len);

static int wrank;

#define CHECK(cond, ...)                                                                   \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "rank %d: %s:%d: ", wrank, __FILE__, __LINE__);                \
            fprintf(stderr, __VA_ARGS__);                                                  \
            fprintf(stderr, "\n");                                                         \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                  \
        }                                                                                  \
    } while (0)

#define OK(call) CHECK((call) == MPI_SUCCESS, "%s failed", #call)

static int val(int rank, int i) { return (rank + 1) * 1000 + i * 7 - 3; }

/* (a, b) is the map x -> a x + b; in op inout = in(inout(x)): associative, not commutative. */
static void compose(void *in, void *inout, int *len, MPI_Datatype *dt) {
    int *x = in, *y = inout;
    (void)dt;
    for (int k = 0; k < *len; k++) {
        int a = x[2 * k] * y[2 * k];
        int b = x[2 * k] * y[2 * k + 1] + x[2 * k + 1];
        y[2 * k] = a;
        y[2 * k + 1] = b;
    }
}

static void pair(int rank, int *out) {
    out[0] = rank % 3 + 2;
    out[1] = rank - 4;
}

/* Runs one blocking or non-blocking variant: `nb` selects. */
static void wait_if(int nb, MPI_Request *r) {
    if (nb) OK(MPI_Wait(r, MPI_STATUS_IGNORE));
}

static void suite(MPI_Comm comm, int nb) {
    int me, p;
    MPI_Request rq;
    OK(MPI_Comm_rank(comm, &me));
    OK(MPI_Comm_size(comm, &p));
    enum { N = 37 };
    int *all = malloc(sizeof(int) * N * p), *mine = malloc(sizeof(int) * N), *out = malloc(sizeof(int) * N * p);
    for (int i = 0; i < N; i++) mine[i] = val(me, i);

    /* barrier, bcast from the last rank */
    if (nb) { OK(MPI_Ibarrier(comm, &rq)); wait_if(nb, &rq); } else OK(MPI_Barrier(comm));
    int root = p - 1;
    for (int i = 0; i < N; i++) out[i] = me == root ? val(root, i) : 0;
    if (nb) { OK(MPI_Ibcast(out, N, MPI_INT, root, comm, &rq)); wait_if(nb, &rq); }
    else OK(MPI_Bcast(out, N, MPI_INT, root, comm));
    for (int i = 0; i < N; i++) CHECK(out[i] == val(root, i), "bcast[%d] = %d", i, out[i]);

    /* a broadcast past 16 KiB from rank 0 (at p = 2 a blocking one skips the network cache
       for point-to-point), then a small one through it again */
    enum { WIDE = 5000 };
    int *wide = malloc(sizeof(int) * WIDE);
    for (int i = 0; i < WIDE; i++) wide[i] = me == 0 ? val(0, i) : 0;
    if (nb) { OK(MPI_Ibcast(wide, WIDE, MPI_INT, 0, comm, &rq)); wait_if(nb, &rq); }
    else OK(MPI_Bcast(wide, WIDE, MPI_INT, 0, comm));
    for (int i = 0; i < WIDE; i++) CHECK(wide[i] == val(0, i), "wide bcast[%d] = %d", i, wide[i]);
    free(wide);
    for (int i = 0; i < N; i++) out[i] = me == root ? val(root, i) : 0;
    if (nb) { OK(MPI_Ibcast(out, N, MPI_INT, root, comm, &rq)); wait_if(nb, &rq); }
    else OK(MPI_Bcast(out, N, MPI_INT, root, comm));
    for (int i = 0; i < N; i++) CHECK(out[i] == val(root, i), "bcast again[%d] = %d", i, out[i]);

    /* gather / scatter at root p/2, in place at the root */
    root = p / 2;
    memset(all, 0, sizeof(int) * N * p);
    if (me == root) memcpy(all + me * N, mine, sizeof(int) * N);
    const void *sb = me == root ? MPI_IN_PLACE : (const void *)mine;
    if (nb) { OK(MPI_Igather(sb, N, MPI_INT, all, N, MPI_INT, root, comm, &rq)); wait_if(nb, &rq); }
    else OK(MPI_Gather(sb, N, MPI_INT, all, N, MPI_INT, root, comm));
    if (me == root)
        for (int q = 0; q < p; q++)
            for (int i = 0; i < N; i++) CHECK(all[q * N + i] == val(q, i), "gather from %d", q);
    memset(out, 0, sizeof(int) * N);
    if (nb) { OK(MPI_Iscatter(all, N, MPI_INT, out, N, MPI_INT, root, comm, &rq)); wait_if(nb, &rq); }
    else OK(MPI_Scatter(all, N, MPI_INT, out, N, MPI_INT, root, comm));
    for (int i = 0; i < N; i++) CHECK(out[i] == val(me, i), "scatter[%d]", i);

    /* gatherv / scatterv: rank q has q + 1 elements, placed in reverse order */
    int *counts = malloc(sizeof(int) * p), *displs = malloc(sizeof(int) * p);
    for (int q = p - 1, at = 0; q >= 0; q--) { counts[q] = q + 1; displs[q] = at; at += q + 2; }
    for (int i = 0; i < N * p; i++) all[i] = -1;
    if (nb) { OK(MPI_Igatherv(mine, me + 1, MPI_INT, all, counts, displs, MPI_INT, root, comm, &rq)); wait_if(nb, &rq); }
    else OK(MPI_Gatherv(mine, me + 1, MPI_INT, all, counts, displs, MPI_INT, root, comm));
    if (me == root)
        for (int q = 0; q < p; q++)
            for (int i = 0; i < q + 1; i++) CHECK(all[displs[q] + i] == val(q, i), "gatherv %d %d", q, i);
    memset(out, 0, sizeof(int) * N);
    if (nb) { OK(MPI_Iscatterv(all, counts, displs, MPI_INT, out, me + 1, MPI_INT, root, comm, &rq)); wait_if(nb, &rq); }
    else OK(MPI_Scatterv(all, counts, displs, MPI_INT, out, me + 1, MPI_INT, root, comm));
    for (int i = 0; i < me + 1; i++) CHECK(out[i] == val(me, i), "scatterv[%d] = %d", i, out[i]);

    /* allgather in place, allgatherv */
    for (int i = 0; i < N * p; i++) all[i] = -1;
    memcpy(all + me * N, mine, sizeof(int) * N);
    if (nb) { OK(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, all, N, MPI_INT, comm, &rq)); wait_if(nb, &rq); }
    else OK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, all, N, MPI_INT, comm));
    for (int q = 0; q < p; q++)
        for (int i = 0; i < N; i++) CHECK(all[q * N + i] == val(q, i), "allgather from %d", q);
    for (int i = 0; i < N * p; i++) all[i] = -1;
    if (nb) { OK(MPI_Iallgatherv(mine, me + 1, MPI_INT, all, counts, displs, MPI_INT, comm, &rq)); wait_if(nb, &rq); }
    else OK(MPI_Allgatherv(mine, me + 1, MPI_INT, all, counts, displs, MPI_INT, comm));
    for (int q = 0; q < p; q++)
        for (int i = 0; i < q + 1; i++) CHECK(all[displs[q] + i] == val(q, i), "allgatherv");

    /* alltoall: block for q is val(me * 16 + q, i) */
    enum { B = 5 };
    int *s2 = malloc(sizeof(int) * B * p), *r2 = malloc(sizeof(int) * B * p);
    for (int q = 0; q < p; q++)
        for (int i = 0; i < B; i++) s2[q * B + i] = val(me * 16 + q, i);
    if (nb) { OK(MPI_Ialltoall(s2, B, MPI_INT, r2, B, MPI_INT, comm, &rq)); wait_if(nb, &rq); }
    else OK(MPI_Alltoall(s2, B, MPI_INT, r2, B, MPI_INT, comm));
    for (int q = 0; q < p; q++)
        for (int i = 0; i < B; i++) CHECK(r2[q * B + i] == val(q * 16 + me, i), "alltoall from %d", q);
    /* alltoallv and alltoallw with the same layout, in place */
    int *c2 = malloc(sizeof(int) * p), *d2 = malloc(sizeof(int) * p), *bd = malloc(sizeof(int) * p);
    MPI_Datatype *ts = malloc(sizeof(MPI_Datatype) * p);
    for (int q = 0; q < p; q++) { c2[q] = B; d2[q] = q * B; bd[q] = q * B * (int)sizeof(int); ts[q] = MPI_INT; }
    memcpy(r2, s2, sizeof(int) * B * p);
    if (nb) { OK(MPI_Ialltoallv(MPI_IN_PLACE, c2, d2, MPI_INT, r2, c2, d2, MPI_INT, comm, &rq)); wait_if(nb, &rq); }
    else OK(MPI_Alltoallv(MPI_IN_PLACE, c2, d2, MPI_INT, r2, c2, d2, MPI_INT, comm));
    for (int q = 0; q < p; q++)
        for (int i = 0; i < B; i++) CHECK(r2[q * B + i] == val(q * 16 + me, i), "alltoallv");
    if (nb) { OK(MPI_Ialltoallw(s2, c2, bd, ts, r2, c2, bd, ts, comm, &rq)); wait_if(nb, &rq); }
    else OK(MPI_Alltoallw(s2, c2, bd, ts, r2, c2, bd, ts, comm));
    for (int q = 0; q < p; q++)
        for (int i = 0; i < B; i++) CHECK(r2[q * B + i] == val(q * 16 + me, i), "alltoallw");

    /* reductions with MPI_SUM */
    int want[N];
    for (int i = 0; i < N; i++) { want[i] = 0; for (int q = 0; q < p; q++) want[i] += val(q, i); }
    if (nb) { OK(MPI_Iallreduce(mine, out, N, MPI_INT, MPI_SUM, comm, &rq)); wait_if(nb, &rq); }
    else OK(MPI_Allreduce(mine, out, N, MPI_INT, MPI_SUM, comm));
    for (int i = 0; i < N; i++) CHECK(out[i] == want[i], "allreduce[%d] = %d, not %d", i, out[i], want[i]);
    memcpy(out, mine, sizeof(int) * N);
    sb = me == root ? MPI_IN_PLACE : (const void *)mine;
    if (nb) { OK(MPI_Ireduce(sb, out, N, MPI_INT, MPI_SUM, root, comm, &rq)); wait_if(nb, &rq); }
    else OK(MPI_Reduce(sb, out, N, MPI_INT, MPI_SUM, root, comm));
    if (me == root) for (int i = 0; i < N; i++) CHECK(out[i] == want[i], "reduce[%d]", i);
    if (nb) { OK(MPI_Iscan(mine, out, N, MPI_INT, MPI_SUM, comm, &rq)); wait_if(nb, &rq); }
    else OK(MPI_Scan(mine, out, N, MPI_INT, MPI_SUM, comm));
    for (int i = 0; i < N; i++) {
        int w = 0;
        for (int q = 0; q <= me; q++) w += val(q, i);
        CHECK(out[i] == w, "scan[%d]", i);
    }
    if (nb) { OK(MPI_Iexscan(mine, out, N, MPI_INT, MPI_SUM, comm, &rq)); wait_if(nb, &rq); }
    else OK(MPI_Exscan(mine, out, N, MPI_INT, MPI_SUM, comm));
    for (int i = 0; i < N && me > 0; i++) {
        int w = 0;
        for (int q = 0; q < me; q++) w += val(q, i);
        CHECK(out[i] == w, "exscan[%d]", i);
    }
    /* reduce_scatter_block: B each; reduce_scatter: q + 1 each */
    for (int i = 0; i < B * p; i++) s2[i] = val(me, i);
    if (nb) { OK(MPI_Ireduce_scatter_block(s2, r2, B, MPI_INT, MPI_SUM, comm, &rq)); wait_if(nb, &rq); }
    else OK(MPI_Reduce_scatter_block(s2, r2, B, MPI_INT, MPI_SUM, comm));
    for (int i = 0; i < B; i++) {
        int w = 0;
        for (int q = 0; q < p; q++) w += val(q, me * B + i);
        CHECK(r2[i] == w, "reduce_scatter_block[%d]", i);
    }
    int total = 0;
    for (int q = 0; q < p; q++) total += counts[q];
    int *big = malloc(sizeof(int) * total);
    for (int i = 0; i < total; i++) big[i] = val(me, i);
    if (nb) { OK(MPI_Ireduce_scatter(MPI_IN_PLACE, big, counts, MPI_INT, MPI_SUM, comm, &rq)); wait_if(nb, &rq); }
    else OK(MPI_Reduce_scatter(MPI_IN_PLACE, big, counts, MPI_INT, MPI_SUM, comm));
    int off = 0;
    for (int q = 0; q < me; q++) off += counts[q];
    for (int i = 0; i < counts[me]; i++) {
        int w = 0;
        for (int q = 0; q < p; q++) w += val(q, off + i);
        CHECK(big[i] == w, "reduce_scatter[%d]", i);
    }

    /* MINLOC over MPI_2INT: the smallest value, ties to the smaller rank */
    int mv[2] = {me % 2, me}, mr[2];
    if (nb) { OK(MPI_Iallreduce(mv, mr, 1, MPI_2INT, MPI_MINLOC, comm, &rq)); wait_if(nb, &rq); }
    else OK(MPI_Allreduce(mv, mr, 1, MPI_2INT, MPI_MINLOC, comm));
    CHECK(mr[0] == 0 && mr[1] == 0, "minloc (%d, %d)", mr[0], mr[1]);
    mv[0] = p > 1 ? me % 2 : 1;
    if (nb) { OK(MPI_Iallreduce(mv, mr, 1, MPI_2INT, MPI_MAXLOC, comm, &rq)); wait_if(nb, &rq); }
    else OK(MPI_Allreduce(mv, mr, 1, MPI_2INT, MPI_MAXLOC, comm));
    CHECK(mr[0] == 1 && mr[1] == (p > 1 ? 1 : 0), "maxloc (%d, %d)", mr[0], mr[1]);

    /* a non-commutative user operation: rank order */
    MPI_Op op;
    OK(MPI_Op_create(compose, 0, &op));
    int x[2], r[2], w[2];
    pair(me, x);
    pair(0, w);
    for (int q = 1; q < p; q++) {
        int y[2], len = 1;
        MPI_Datatype t = MPI_2INT;
        pair(q, y);
        compose(w, y, &len, &t);
        w[0] = y[0];
        w[1] = y[1];
    }
    if (nb) { OK(MPI_Iallreduce(x, r, 1, MPI_2INT, op, comm, &rq)); wait_if(nb, &rq); }
    else OK(MPI_Allreduce(x, r, 1, MPI_2INT, op, comm));
    CHECK(r[0] == w[0] && r[1] == w[1], "user op (%d, %d), not (%d, %d)", r[0], r[1], w[0], w[1]);
    if (nb) { OK(MPI_Ireduce(x, r, 1, MPI_2INT, op, root, comm, &rq)); wait_if(nb, &rq); }
    else OK(MPI_Reduce(x, r, 1, MPI_2INT, op, root, comm));
    if (me == root) CHECK(r[0] == w[0] && r[1] == w[1], "user op reduce");
    OK(MPI_Op_free(&op));

    /* a vector type: every other int; the gaps stay untouched */
    MPI_Datatype vec;
    OK(MPI_Type_vector(N, 1, 2, MPI_INT, &vec));
    OK(MPI_Type_commit(&vec));
    int *g = malloc(sizeof(int) * 2 * N), *h = malloc(sizeof(int) * 2 * N);
    for (int i = 0; i < 2 * N; i++) { g[i] = i % 2 ? -7 : val(me, i); h[i] = -9; }
    if (nb) { OK(MPI_Iallreduce(g, h, 1, vec, MPI_SUM, comm, &rq)); wait_if(nb, &rq); }
    else OK(MPI_Allreduce(g, h, 1, vec, MPI_SUM, comm));
    for (int i = 0; i < 2 * N; i++) {
        int v = 0;
        for (int q = 0; q < p; q++) v += val(q, i);
        CHECK(h[i] == (i % 2 ? -9 : v), "vector allreduce[%d] = %d", i, h[i]);
    }
    for (int i = 0; i < 2 * N; i++) h[i] = me == 0 ? g[i] : -9;
    if (nb) { OK(MPI_Ibcast(h, 1, vec, 0, comm, &rq)); wait_if(nb, &rq); }
    else OK(MPI_Bcast(h, 1, vec, 0, comm));
    for (int i = 0; i < 2 * N; i++) {
        int v = i % 2 ? (me == 0 ? -7 : -9) : val(0, i);
        CHECK(h[i] == v, "vector bcast[%d] = %d", i, h[i]);
    }
    OK(MPI_Type_free(&vec));

    free(g); free(h); free(big); free(ts); free(bd); free(c2); free(d2); free(s2); free(r2);
    free(counts); free(displs); free(all); free(mine); free(out);
}

/* Several non-blocking collectives in flight at once, completed in reverse order. */
static void overlap(MPI_Comm comm) {
    int me, p;
    OK(MPI_Comm_rank(comm, &me));
    OK(MPI_Comm_size(comm, &p));
    enum { K = 6, N = 9 };
    MPI_Request rq[K + 1];
    int mine[N], sums[K][N], want[N];
    for (int i = 0; i < N; i++) {
        mine[i] = val(me, i);
        want[i] = 0;
        for (int q = 0; q < p; q++) want[i] += val(q, i);
    }
    for (int k = 0; k < K; k++) OK(MPI_Iallreduce(mine, sums[k], N, MPI_INT, MPI_SUM, comm, &rq[k]));
    OK(MPI_Ibarrier(comm, &rq[K]));
    for (int k = K; k >= 0; k--) OK(MPI_Wait(&rq[k], MPI_STATUS_IGNORE));
    for (int k = 0; k < K; k++)
        for (int i = 0; i < N; i++) CHECK(sums[k][i] == want[i], "overlapped allreduce %d", k);
}

/* Neighborhood collectives on a periodic ring (Cartesian), a grid without wraparound
 * (MPI_PROC_NULL neighbors leave their blocks alone) and a ring graph. Block k goes to
 * neighbor k and holds 10 * rank + k. */
static void neighborhoods(int nb) {
    int p, me;
    MPI_Request rq;
    OK(MPI_Comm_size(MPI_COMM_WORLD, &p));
    MPI_Comm ring, grid, graph;
    int dims1[1] = {p}, per1[1] = {1};
    OK(MPI_Cart_create(MPI_COMM_WORLD, 1, dims1, per1, 0, &ring));
    OK(MPI_Comm_rank(ring, &me));
    int s[2] = {10 * me, 10 * me + 1}, r[2] = {-1, -1};
    int L = (me + p - 1) % p, R = (me + 1) % p;
    if (nb) { OK(MPI_Ineighbor_alltoall(s, 1, MPI_INT, r, 1, MPI_INT, ring, &rq)); wait_if(nb, &rq); }
    else OK(MPI_Neighbor_alltoall(s, 1, MPI_INT, r, 1, MPI_INT, ring));
    /* From the left neighbor the block it sent to its right (+1), and vice versa. */
    CHECK(r[0] == 10 * L + 1 && r[1] == 10 * R, "cart alltoall got %d %d", r[0], r[1]);
    r[0] = r[1] = -1;
    if (nb) { OK(MPI_Ineighbor_allgather(&me, 1, MPI_INT, r, 1, MPI_INT, ring, &rq)); wait_if(nb, &rq); }
    else OK(MPI_Neighbor_allgather(&me, 1, MPI_INT, r, 1, MPI_INT, ring));
    CHECK(r[0] == L && r[1] == R, "cart allgather got %d %d", r[0], r[1]);
    /* alltoallw with byte displacements, blocks swapped in memory */
    int cnt[2] = {1, 1};
    MPI_Aint sd[2] = {sizeof(int), 0}, rd[2] = {sizeof(int), 0};
    MPI_Datatype ty[2] = {MPI_INT, MPI_INT};
    int s2[2] = {10 * me + 1, 10 * me}, r2[2] = {-1, -1};
    if (nb) { OK(MPI_Ineighbor_alltoallw(s2, cnt, sd, ty, r2, cnt, rd, ty, ring, &rq)); wait_if(nb, &rq); }
    else OK(MPI_Neighbor_alltoallw(s2, cnt, sd, ty, r2, cnt, rd, ty, ring));
    CHECK(r2[1] == 10 * L + 1 && r2[0] == 10 * R, "cart alltoallw got %d %d", r2[0], r2[1]);
    OK(MPI_Comm_free(&ring));

    int dims2[2] = {0, 0}, per2[2] = {0, 0};
    OK(MPI_Dims_create(p, 2, dims2));
    OK(MPI_Cart_create(MPI_COMM_WORLD, 2, dims2, per2, 0, &grid));
    OK(MPI_Comm_rank(grid, &me));
    int g[4], c[4] = {1, 1, 1, 1}, dsp[4] = {3, 2, 1, 0}, got[4] = {-1, -1, -1, -1};
    for (int k = 0; k < 4; k++) g[k] = -1;
    if (nb) { OK(MPI_Ineighbor_allgatherv(&me, 1, MPI_INT, g, c, dsp, MPI_INT, grid, &rq)); wait_if(nb, &rq); }
    else OK(MPI_Neighbor_allgatherv(&me, 1, MPI_INT, g, c, dsp, MPI_INT, grid));
    for (int d = 0; d < 2; d++) {
        int src, dst;
        OK(MPI_Cart_shift(grid, d, 1, &src, &dst));
        got[2 * d] = g[dsp[2 * d]];
        got[2 * d + 1] = g[dsp[2 * d + 1]];
        CHECK(got[2 * d] == (src == MPI_PROC_NULL ? -1 : src), "grid dim %d: -1 neighbor %d, got %d", d, src, got[2 * d]);
        CHECK(got[2 * d + 1] == (dst == MPI_PROC_NULL ? -1 : dst), "grid dim %d: +1 neighbor %d, got %d", d, dst, got[2 * d + 1]);
    }
    OK(MPI_Comm_free(&grid));

    int *index = malloc(sizeof(int) * p), *edges = malloc(sizeof(int) * 2 * p);
    for (int i = 0; i < p; i++) {
        index[i] = 2 * (i + 1);
        edges[2 * i] = (i + p - 1) % p;
        edges[2 * i + 1] = (i + 1) % p;
    }
    OK(MPI_Graph_create(MPI_COMM_WORLD, p, index, edges, 0, &graph));
    OK(MPI_Comm_rank(graph, &me));
    int sc[2] = {1, 1}, sdp[2] = {0, 1};
    r[0] = r[1] = -1;
    if (nb) { OK(MPI_Ineighbor_alltoallv(s, sc, sdp, MPI_INT, r, sc, sdp, MPI_INT, graph, &rq)); wait_if(nb, &rq); }
    else OK(MPI_Neighbor_alltoallv(s, sc, sdp, MPI_INT, r, sc, sdp, MPI_INT, graph));
    /* The k-th message between two processes meets the k-th receive: with one peer on
     * both edges (p <= 2) block k comes from the peer's block k. */
    if (p <= 2) CHECK(r[0] == 10 * L && r[1] == 10 * L + 1, "graph alltoallv got %d %d", r[0], r[1]);
    else CHECK(r[0] == 10 * L + 1 && r[1] == 10 * R, "graph alltoallv got %d %d", r[0], r[1]);
    OK(MPI_Comm_free(&graph));
    free(index);
    free(edges);
}

/* Misuse is found before any message moves, alike on every process: with
 * MPI_ERRORS_RETURN each call returns its error class and the communicator stays usable. */
static void misuse(void) {
    int p, x = 1, y = 0, cls;
    MPI_Comm c;
    MPI_Request rq;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &c));
    OK(MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN));
    OK(MPI_Comm_size(c, &p));
#define CLASS(call, want)                                                                  \
    do {                                                                                   \
        int rc_ = (call);                                                                  \
        OK(MPI_Error_class(rc_, &cls));                                                    \
        CHECK(cls == (want), "%s gave class %d, not %s", #call, cls, #want);                \
    } while (0)
    CLASS(MPI_Bcast(&x, 1, MPI_INT, p, c), MPI_ERR_ROOT);
    CLASS(MPI_Bcast(&x, -1, MPI_INT, 0, c), MPI_ERR_COUNT);
    CLASS(MPI_Bcast(&x, 1, MPI_DATATYPE_NULL, 0, c), MPI_ERR_TYPE);
    double d = 1, e;
    CLASS(MPI_Allreduce(&d, &e, 1, MPI_DOUBLE, MPI_BAND, c), MPI_ERR_OP);
    CLASS(MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_MINLOC, c), MPI_ERR_OP);
    CLASS(MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_OP_NULL, c), MPI_ERR_OP);
    CLASS(MPI_Iallreduce(&x, &y, 1, MPI_INT, MPI_SUM, c, NULL), MPI_ERR_REQUEST);
    CLASS(MPI_Gather(&x, 1, MPI_INT, &y, 1, MPI_INT, -1, c), MPI_ERR_ROOT);
    CLASS(MPI_Alltoallw(&x, NULL, NULL, NULL, &y, NULL, NULL, NULL, c), MPI_ERR_ARG);
    /* an intercommunicator of the even and the odd ranks: scans are not defined on one
     * (its other collectives: intercoll.c) */
    if (p > 1) {
        MPI_Comm half, inter;
        int wr;
        OK(MPI_Comm_rank(MPI_COMM_WORLD, &wr));
        OK(MPI_Comm_split(MPI_COMM_WORLD, wr % 2, wr, &half));
        OK(MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, wr % 2 ? 0 : 1, 9, &inter));
        OK(MPI_Comm_set_errhandler(inter, MPI_ERRORS_RETURN));
        CLASS(MPI_Scan(&x, &y, 1, MPI_INT, MPI_SUM, inter), MPI_ERR_COMM);
        CLASS(MPI_Exscan(&x, &y, 1, MPI_INT, MPI_SUM, inter), MPI_ERR_COMM);
        OK(MPI_Barrier(inter));
        OK(MPI_Comm_free(&inter));
        OK(MPI_Comm_free(&half));
    }
    /* still usable */
    OK(MPI_Iallreduce(&x, &y, 1, MPI_INT, MPI_SUM, c, &rq));
    OK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
    CHECK(y == p, "allreduce after errors gave %d", y);
    OK(MPI_Comm_free(&c));
#undef CLASS
}

/* MPI's progress rule: rank 1 waits for a barrier while rank 0 sits in a blocking receive
 * of what rank 1 sends only after the barrier; rank 0's part of the barrier must have left
 * by then (a single-round barrier of two: its messages go when the call starts). */
static void progress_rule(void) {
    int p, me, x = 0;
    MPI_Comm pair;
    MPI_Request rq;
    OK(MPI_Comm_size(MPI_COMM_WORLD, &p));
    if (p < 2) return;
    OK(MPI_Comm_split(MPI_COMM_WORLD, wrank < 2 ? 0 : MPI_UNDEFINED, wrank, &pair));
    if (pair == MPI_COMM_NULL) return;
    OK(MPI_Comm_rank(pair, &me));
    OK(MPI_Ibarrier(pair, &rq));
    if (me == 0) {
        OK(MPI_Recv(&x, 1, MPI_INT, 1, 5, pair, MPI_STATUS_IGNORE));
        OK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
        CHECK(x == 77, "got %d", x);
    } else {
        OK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
        x = 77;
        OK(MPI_Send(&x, 1, MPI_INT, 0, 5, pair));
    }
    OK(MPI_Comm_free(&pair));
}

/* The same with every process and a barrier of several rounds: rank 2 needs rank 0's
 * second-round message (the dissemination barrier's distance 2), which must leave while
 * rank 0 is blocked in the receive (the progress thread's work). */
static void progress_rule_rounds(void) {
    int p, x = 0;
    MPI_Request rq;
    OK(MPI_Comm_size(MPI_COMM_WORLD, &p));
    if (p < 3) return;
    /* Rank 0 starts first, so its later rounds cannot complete when it starts. */
    if (wrank != 0) {
        double t = MPI_Wtime();
        while (MPI_Wtime() - t < 0.05) {
        }
    }
    OK(MPI_Ibarrier(MPI_COMM_WORLD, &rq));
    if (wrank == 0) {
        OK(MPI_Recv(&x, 1, MPI_INT, 2, 6, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        OK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
        CHECK(x == 78, "got %d", x);
    } else {
        OK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
        x = 78;
        if (wrank == 2) OK(MPI_Send(&x, 1, MPI_INT, 0, 6, MPI_COMM_WORLD));
    }
}

int main(int argc, char **argv) {
    int p;
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &wrank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &p));
    long long before = bwmpi_coll_world_stats(NULL, 0);
    suite(MPI_COMM_WORLD, 0);
    long long after = bwmpi_coll_world_stats(NULL, 0);
    CHECK(after > before, "no blocking collective on MPI_COMM_WORLD went through Coll");
    char alg[64];
    bwmpi_coll_world_stats(alg, sizeof alg);
    if (wrank == 0) printf("world: %lld calls through Coll, last %s\n", after - before, alg);
    suite(MPI_COMM_WORLD, 1);
    MPI_Comm rev;
    OK(MPI_Comm_split(MPI_COMM_WORLD, 0, p - wrank, &rev));
    before = bwmpi_coll_world_stats(NULL, 0);
    suite(rev, 0);
    suite(rev, 1);
    if (p > 1) CHECK(bwmpi_coll_world_stats(NULL, 0) == before, "a reordered communicator used Coll");
    misuse();
    progress_rule();
    progress_rule_rounds();
    neighborhoods(0);
    neighborhoods(1);
    overlap(MPI_COMM_WORLD);
    overlap(rev);
    OK(MPI_Comm_free(&rev));
    printf("COLL OK rank=%d\n", wrank);
    OK(MPI_Finalize());
    return 0;
}
