/* Communicators, groups, topologies, error handlers, attributes and info objects: every
 * rank checks the results it can compute itself. */
#include "mpitest.h"

static int rank, size;

/* Messages of different communicators never match, wildcards included. */
static void isolation(void) {
    MPI_Comm dup;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    int r, s;
    OK(MPI_Comm_rank(dup, &r));
    OK(MPI_Comm_size(dup, &s));
    CHECK(r == rank && s == size);
    int cmp;
    OK(MPI_Comm_compare(MPI_COMM_WORLD, dup, &cmp));
    CHECK(cmp == MPI_CONGRUENT);
    OK(MPI_Comm_compare(dup, dup, &cmp));
    CHECK(cmp == MPI_IDENT);
    if (rank == 1) {
        int a = 1, b = 2;
        OK(MPI_Send(&a, 1, MPI_INT, 0, 3, dup));
        OK(MPI_Send(&b, 1, MPI_INT, 0, 3, MPI_COMM_WORLD));
    } else if (rank == 0) {
        int v;
        MPI_Status st;
        /* The world's message is second, yet the world's wildcard receive gets it. */
        OK(MPI_Recv(&v, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
        CHECK(v == 2);
        int flag = 0;
        while (!flag) OK(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, dup, &flag, &st));
        OK(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st));
        CHECK(!flag);
        OK(MPI_Recv(&v, 1, MPI_INT, 1, MPI_ANY_TAG, dup, &st));
        CHECK(v == 1 && st.MPI_TAG == 3);
    }
    OK(MPI_Comm_free(&dup));
    CHECK(dup == MPI_COMM_NULL);
}

static void idup(void) {
    MPI_Comm dup;
    int r;
    /* MPI_Comm_idup does not block: rank 0 starts its own only after every other rank
     * has started theirs and then sent it a synchronous message. */
    MPI_Request q;
    int v = rank;
    if (rank == 0) {
        for (int p = 1; p < size; p++) OK(MPI_Recv(&v, 1, MPI_INT, p, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        OK(MPI_Comm_idup(MPI_COMM_WORLD, &dup, &q));
    } else {
        OK(MPI_Comm_idup(MPI_COMM_WORLD, &dup, &q));
        OK(MPI_Ssend(&v, 1, MPI_INT, 0, 9, MPI_COMM_WORLD));
    }
    OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
    OK(MPI_Comm_rank(dup, &r));
    CHECK(r == rank);
    int sum = rank, got;
    for (int p = 0; p < size; p++) {
        if (p == rank) continue;
        OK(MPI_Sendrecv(&rank, 1, MPI_INT, p, 1, &got, 1, MPI_INT, p, 1, dup, MPI_STATUS_IGNORE));
        sum += got;
    }
    CHECK(sum == size * (size - 1) / 2);
    OK(MPI_Comm_free(&dup));

    /* Blocking constructors on a parent whose idups are pending (MPICH's comm_idup_comm):
     * neither takes the other's agreement messages. */
    MPI_Comm ids[3], d2, sp;
    MPI_Request qs[3];
    for (int i = 0; i < 3; i++) OK(MPI_Comm_idup(MPI_COMM_WORLD, &ids[i], &qs[i]));
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &d2));
    OK(MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &sp));
    OK(MPI_Waitall(3, qs, MPI_STATUSES_IGNORE));
    for (int i = 0; i < 3; i++) {
        int res;
        OK(MPI_Comm_compare(ids[i], MPI_COMM_WORLD, &res));
        CHECK(res == MPI_CONGRUENT);
        OK(MPI_Comm_free(&ids[i]));
    }
    OK(MPI_Comm_free(&d2));
    OK(MPI_Comm_free(&sp));
}

static void splits(void) {
    /* Even and odd ranks, reversed by key. */
    MPI_Comm half;
    OK(MPI_Comm_split(MPI_COMM_WORLD, rank % 2, -rank, &half));
    int r, s;
    OK(MPI_Comm_rank(half, &r));
    OK(MPI_Comm_size(half, &s));
    int mine = (size - rank % 2 + 1) / 2;
    CHECK(s == mine);
    CHECK(r == (s - 1) - rank / 2);
    /* A message around the half: the sum of its world ranks. */
    int v = rank, sum = rank;
    for (int i = 1; i < s; i++) {
        int w;
        OK(MPI_Sendrecv(&v, 1, MPI_INT, (r + 1) % s, 0, &w, 1, MPI_INT, (r + s - 1) % s, 0, half, MPI_STATUS_IGNORE));
        v = w;
        sum += w;
    }
    int expect = 0;
    for (int p = rank % 2; p < size; p += 2) expect += p;
    CHECK(sum == expect);
    MPI_Comm none;
    OK(MPI_Comm_split(MPI_COMM_WORLD, rank == 0 ? MPI_UNDEFINED : 1, 0, &none));
    CHECK((rank == 0) == (none == MPI_COMM_NULL));
    if (none != MPI_COMM_NULL) OK(MPI_Comm_free(&none));
    MPI_Comm node;
    OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node));
    OK(MPI_Comm_size(node, &s));
    CHECK(s == size); /* one host */
    OK(MPI_Comm_free(&node));
    OK(MPI_Comm_free(&half));
    /* Context ids are reused: many communicators made and freed. */
    for (int i = 0; i < 300; i++) {
        MPI_Comm c;
        OK(MPI_Comm_dup(MPI_COMM_WORLD, &c));
        OK(MPI_Comm_free(&c));
    }
}

static void groups(void) {
    MPI_Group world, first, last, u, x, d;
    OK(MPI_Comm_group(MPI_COMM_WORLD, &world));
    int n, r;
    OK(MPI_Group_size(world, &n));
    OK(MPI_Group_rank(world, &r));
    CHECK(n == size && r == rank);
    int zero = 0, lastr = size - 1;
    OK(MPI_Group_incl(world, 1, &zero, &first));
    OK(MPI_Group_excl(world, 1, &zero, &last));
    OK(MPI_Group_size(last, &n));
    CHECK(n == size - 1);
    OK(MPI_Group_union(last, first, &u));
    int cmp;
    OK(MPI_Group_compare(u, world, &cmp));
    CHECK(cmp == MPI_SIMILAR);
    OK(MPI_Group_intersection(u, first, &x));
    OK(MPI_Group_size(x, &n));
    CHECK(n == 1);
    OK(MPI_Group_difference(world, world, &d));
    CHECK(d == MPI_GROUP_EMPTY);
    int tr;
    OK(MPI_Group_translate_ranks(last, 1, &zero, world, &tr));
    CHECK(tr == 1);
    OK(MPI_Group_translate_ranks(world, 1, &zero, last, &tr));
    CHECK(tr == MPI_UNDEFINED);
    int range[1][3] = {{lastr, 0, -1}};
    MPI_Group rev;
    OK(MPI_Group_range_incl(world, 1, range, &rev));
    OK(MPI_Group_translate_ranks(rev, 1, &zero, world, &tr));
    CHECK(tr == size - 1);
    OK(MPI_Group_range_excl(world, 1, range, &d));
    CHECK(d == MPI_GROUP_EMPTY);
    /* Communicators of a group: create (all call) and create_group (members only). */
    MPI_Comm c;
    OK(MPI_Comm_create(MPI_COMM_WORLD, last, &c));
    CHECK((rank == 0) == (c == MPI_COMM_NULL));
    if (c != MPI_COMM_NULL) {
        OK(MPI_Comm_rank(c, &r));
        CHECK(r == rank - 1);
        OK(MPI_Comm_free(&c));
    }
    OK(MPI_Comm_create_group(MPI_COMM_WORLD, rev, 5, &c));
    OK(MPI_Comm_rank(c, &r));
    CHECK(r == size - 1 - rank);
    OK(MPI_Comm_free(&c));
    if (rank == 0) {
        OK(MPI_Comm_create_group(MPI_COMM_WORLD, first, 6, &c));
        OK(MPI_Comm_size(c, &n));
        CHECK(n == 1);
        OK(MPI_Comm_free(&c));
    }
    MPI_Group all[] = {world, first, last, u, x, rev};
    for (int i = 0; i < 6; i++) OK(MPI_Group_free(&all[i]));
    CHECK(all[0] == MPI_GROUP_NULL);
}

/* Intercommunicators between the even and the odd ranks: point-to-point across, a
 * duplicate, and the merge back into one intra-communicator (odd ranks high). */
static void intercomms(void) {
    MPI_Comm half, inter, inter2, merged;
    OK(MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half));
    int hr, hs;
    OK(MPI_Comm_rank(half, &hr));
    OK(MPI_Comm_size(half, &hs));
    OK(MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, rank % 2 ? 0 : 1, 7, &inter));
    int flag, rs, r;
    OK(MPI_Comm_test_inter(inter, &flag));
    CHECK(flag);
    OK(MPI_Comm_remote_size(inter, &rs));
    CHECK(rs == (rank % 2 ? (size + 1) / 2 : size / 2));
    OK(MPI_Comm_rank(inter, &r));
    CHECK(r == hr);
    MPI_Group rg;
    int zero = 0, w;
    MPI_Group world;
    OK(MPI_Comm_group(MPI_COMM_WORLD, &world));
    OK(MPI_Comm_remote_group(inter, &rg));
    OK(MPI_Group_translate_ranks(rg, 1, &zero, world, &w));
    CHECK(w == (rank % 2 ? 0 : 1));
    OK(MPI_Group_free(&rg));
    OK(MPI_Group_free(&world));
    /* Each process of the smaller side sends its rank to the same rank across. */
    OK(MPI_Comm_dup(inter, &inter2));
    if (hr < rs) {
        int v = rank, got = -1;
        MPI_Status st;
        OK(MPI_Sendrecv(&v, 1, MPI_INT, hr, 3, &got, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, inter2, &st));
        CHECK(st.MPI_SOURCE == hr && st.MPI_TAG == 3);
        CHECK(got == (rank % 2 ? rank - 1 : rank + 1));
    }
    /* A split of an intercommunicator: one colour, reversed by key. */
    MPI_Comm sub;
    int srs;
    OK(MPI_Comm_split(inter, 0, -rank, &sub));
    OK(MPI_Comm_remote_size(sub, &srs));
    OK(MPI_Comm_rank(sub, &r));
    CHECK(srs == rs && r == hs - 1 - hr);
    OK(MPI_Comm_free(&sub));
    OK(MPI_Intercomm_merge(inter, rank % 2, &merged));
    int mr, ms;
    OK(MPI_Comm_rank(merged, &mr));
    OK(MPI_Comm_size(merged, &ms));
    CHECK(ms == size);
    CHECK(mr == (rank % 2 ? (size + 1) / 2 + rank / 2 : rank / 2));
    OK(MPI_Comm_free(&merged));
    OK(MPI_Comm_free(&inter2));
    OK(MPI_Comm_free(&inter));
    OK(MPI_Comm_free(&half));
}

static void cartesian(void) {
    int dims[2] = {0, 0};
    OK(MPI_Dims_create(size, 2, dims));
    CHECK(dims[0] * dims[1] == size && dims[0] >= dims[1]);
    int periods[2] = {1, 0};
    MPI_Comm cart;
    OK(MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &cart));
    int t, nd, r;
    OK(MPI_Topo_test(cart, &t));
    CHECK(t == MPI_CART);
    OK(MPI_Cartdim_get(cart, &nd));
    CHECK(nd == 2);
    OK(MPI_Comm_rank(cart, &r));
    int coords[2], d2[2], p2[2], c2[2];
    OK(MPI_Cart_coords(cart, r, 2, coords));
    CHECK(coords[0] == r / dims[1] && coords[1] == r % dims[1]);
    OK(MPI_Cart_get(cart, 2, d2, p2, c2));
    CHECK(d2[0] == dims[0] && p2[0] == 1 && p2[1] == 0 && c2[1] == coords[1]);
    int back;
    OK(MPI_Cart_rank(cart, coords, &back));
    CHECK(back == r);
    int src, dst;
    OK(MPI_Cart_shift(cart, 0, 1, &src, &dst));
    CHECK(dst == ((coords[0] + 1) % dims[0]) * dims[1] + coords[1]);
    OK(MPI_Cart_shift(cart, 1, 1, &src, &dst));
    CHECK(dst == (coords[1] + 1 < dims[1] ? r + 1 : MPI_PROC_NULL));
    CHECK(src == (coords[1] > 0 ? r - 1 : MPI_PROC_NULL));
    /* Rows: keep dimension 1. */
    int keep[2] = {0, 1};
    MPI_Comm row;
    OK(MPI_Cart_sub(cart, keep, &row));
    int rs, rr;
    OK(MPI_Comm_size(row, &rs));
    OK(MPI_Comm_rank(row, &rr));
    CHECK(rs == dims[1] && rr == coords[1]);
    OK(MPI_Cartdim_get(row, &nd));
    CHECK(nd == 1);
    OK(MPI_Topo_test(MPI_COMM_WORLD, &t));
    CHECK(t == MPI_UNDEFINED);
    OK(MPI_Comm_free(&row));
    OK(MPI_Comm_free(&cart));
    int d3[3] = {0, 0, 0};
    OK(MPI_Dims_create(12, 3, d3));
    CHECK(d3[0] == 3 && d3[1] == 2 && d3[2] == 2);
}

static int seen_code = 0;
static void handler(MPI_Comm *c, int *code, ...) {
    (void)c;
    seen_code = *code;
}

static int deleted = 0, copied = 0;
static int copy_fn(MPI_Comm c, int k, void *extra, void *in, void *out, int *flag) {
    (void)c, (void)k;
    CHECK(extra == (void *)&copied);
    copied++;
    *(void **)out = in;
    *flag = 1;
    return MPI_SUCCESS;
}
static int delete_fn(MPI_Comm c, int k, void *v, void *extra) {
    (void)c, (void)k, (void)v, (void)extra;
    deleted++;
    return MPI_SUCCESS;
}

static void handlers_and_attributes(void) {
    MPI_Errhandler eh;
    OK(MPI_Comm_create_errhandler(handler, &eh));
    MPI_Comm c;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &c));
    OK(MPI_Comm_set_errhandler(c, eh));
    int v = 0;
    int rc = MPI_Send(&v, 1, MPI_INT, size + 3, 0, c);
    CHECK(rc == MPI_ERR_RANK && seen_code == MPI_ERR_RANK);
    MPI_Errhandler got;
    OK(MPI_Comm_get_errhandler(c, &got));
    CHECK(got == eh);
    OK(MPI_Errhandler_free(&eh));
    OK(MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN));
    CHECK(MPI_Comm_call_errhandler(c, MPI_ERR_OTHER) == MPI_SUCCESS);
    /* Predefined attributes. */
    int *ub, flag;
    OK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag));
    CHECK(flag && *ub >= 32767);
    int *us;
    OK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_UNIVERSE_SIZE, &us, &flag));
    CHECK(flag && *us == size);
    /* A key with callbacks: copied by dup, deleted by free. */
    int key;
    OK(MPI_Comm_create_keyval(copy_fn, delete_fn, &key, &copied));
    static int value = 77;
    OK(MPI_Comm_set_attr(c, key, &value));
    MPI_Comm c2;
    OK(MPI_Comm_dup(c, &c2));
    CHECK(copied == 1);
    int *p;
    OK(MPI_Comm_get_attr(c2, key, &p, &flag));
    CHECK(flag && p == &value);
    OK(MPI_Comm_free(&c2));
    CHECK(deleted == 1);
    OK(MPI_Comm_delete_attr(c, key));
    CHECK(deleted == 2);
    OK(MPI_Comm_get_attr(c, key, &p, &flag));
    CHECK(!flag);
    OK(MPI_Comm_free_keyval(&key));
    CHECK(key == MPI_KEYVAL_INVALID);
    /* Names. */
    char name[MPI_MAX_OBJECT_NAME];
    int len;
    OK(MPI_Comm_get_name(MPI_COMM_WORLD, name, &len));
    CHECK(strcmp(name, "MPI_COMM_WORLD") == 0 && len == 14);
    OK(MPI_Comm_set_name(c, "mine"));
    OK(MPI_Comm_get_name(c, name, &len));
    CHECK(strcmp(name, "mine") == 0);
    int inter;
    OK(MPI_Comm_test_inter(c, &inter));
    CHECK(!inter);
    OK(MPI_Comm_free(&c));
    /* Info objects. */
    MPI_Info info, info2;
    OK(MPI_Info_create(&info));
    OK(MPI_Info_set(info, "a", "1"));
    OK(MPI_Info_set(info, "b", "two"));
    OK(MPI_Info_set(info, "a", "3"));
    int nk;
    OK(MPI_Info_get_nkeys(info, &nk));
    CHECK(nk == 2);
    OK(MPI_Info_dup(info, &info2));
    char val[MPI_MAX_INFO_VAL], key1[MPI_MAX_INFO_KEY];
    OK(MPI_Info_get(info2, "a", MPI_MAX_INFO_VAL - 1, val, &flag));
    CHECK(flag && strcmp(val, "3") == 0);
    OK(MPI_Info_get_nthkey(info2, 1, key1));
    CHECK(strcmp(key1, "b") == 0);
    OK(MPI_Info_get_valuelen(info2, "b", &len, &flag));
    CHECK(flag && len == 3);
    OK(MPI_Info_delete(info2, "b"));
    OK(MPI_Info_get(info2, "b", 10, val, &flag));
    CHECK(!flag);
    OK(MPI_Info_free(&info));
    OK(MPI_Info_free(&info2));
    CHECK(info == MPI_INFO_NULL);
}

static void environment(void) {
    int v, sv, flag;
    OK(MPI_Get_version(&v, &sv));
    CHECK(v == MPI_VERSION && sv == MPI_SUBVERSION && v == 3 && sv == 1);
    char lib[MPI_MAX_LIBRARY_VERSION_STRING], host[MPI_MAX_PROCESSOR_NAME];
    int len;
    OK(MPI_Get_library_version(lib, &len));
    CHECK(strstr(lib, "bulkwire") != NULL && len == (int)strlen(lib));
    OK(MPI_Get_processor_name(host, &len));
    CHECK(len > 0 && len == (int)strlen(host));
    OK(MPI_Initialized(&flag));
    CHECK(flag);
    OK(MPI_Finalized(&flag));
    CHECK(!flag);
    double t0 = MPI_Wtime();
    CHECK(MPI_Wtime() >= t0 && MPI_Wtick() > 0 && MPI_Wtick() < 1e-3);
    int provided;
    OK(MPI_Query_thread(&provided));
    CHECK(provided == MPI_THREAD_MULTIPLE);
    OK(MPI_Is_thread_main(&flag));
    CHECK(flag);
    int cls, code;
    OK(MPI_Add_error_class(&cls));
    OK(MPI_Add_error_code(cls, &code));
    OK(MPI_Add_error_string(code, "a code of the test"));
    char s[MPI_MAX_ERROR_STRING];
    OK(MPI_Error_string(code, s, &len));
    CHECK(strcmp(s, "a code of the test") == 0);
    int c2;
    OK(MPI_Error_class(code, &c2));
    CHECK(c2 == cls);
    MPI_Fint f = MPI_Comm_c2f(MPI_COMM_WORLD);
    CHECK(MPI_Comm_f2c(f) == MPI_COMM_WORLD);
}

int main(int argc, char **argv) {
    int provided;
    OK(MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided));
    CHECK(provided == MPI_THREAD_MULTIPLE);
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    isolation();
    splits();
    groups();
    intercomms();
    cartesian();
    handlers_and_attributes();
    environment();
    idup();
    printf("comm OK rank=%d\n", rank);
    OK(MPI_Finalize());
    int flag;
    OK(MPI_Finalized(&flag));
    CHECK(flag);
    return 0;
}
