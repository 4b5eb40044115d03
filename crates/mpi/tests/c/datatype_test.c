/* Datatypes, checked from C: the predefined types' sizes and extents (the pair types with
 * their C struct layout), the standard's examples of the constructors, pack and unpack,
 * external32, decoding (envelope and contents), names, subarrays and darrays, derived
 * types in point-to-point messages (a strided send into a contiguous receive,
 * MPI_Get_elements of a short message), attributes and the errors of bad arguments. Any
 * number of processes; every rank prints "datatype_test OK rank=R" and exits 0, or names
 * the first failed check and aborts. */
#include <mpi.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

static int rank, size;

#define CHECK(cond, ...)                                                                 \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "datatype_test: rank %d: line %d: ", rank, __LINE__);        \
            fprintf(stderr, __VA_ARGS__);                                                \
            fprintf(stderr, "\n");                                                       \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                \
        }                                                                                \
    } while (0)

#define OK(call) CHECK((call) == MPI_SUCCESS, "%s failed", #call)

static void bounds(MPI_Datatype t, int size_, MPI_Aint lb_, MPI_Aint extent_, const char *what) {
    int s;
    MPI_Aint lb, ext;
    OK(MPI_Type_size(t, &s));
    OK(MPI_Type_get_extent(t, &lb, &ext));
    CHECK(s == size_ && lb == lb_ && ext == extent_, "%s: size %d lb %ld extent %ld, expected %d %ld %ld",
          what, s, (long)lb, (long)ext, size_, (long)lb_, (long)extent_);
}

static void predefined(void) {
    struct { float v; int i; } fi;
    struct { double v; int i; } di;
    struct { long v; int i; } li;
    struct { short v; int i; } si;
    struct { long double v; int i; } ldi;
    bounds(MPI_INT, sizeof(int), 0, sizeof(int), "MPI_INT");
    bounds(MPI_LONG_DOUBLE, sizeof(long double), 0, sizeof(long double), "MPI_LONG_DOUBLE");
    bounds(MPI_FLOAT_INT, sizeof(float) + sizeof(int), 0, sizeof fi, "MPI_FLOAT_INT");
    bounds(MPI_DOUBLE_INT, sizeof(double) + sizeof(int), 0, sizeof di, "MPI_DOUBLE_INT");
    bounds(MPI_LONG_INT, sizeof(long) + sizeof(int), 0, sizeof li, "MPI_LONG_INT");
    bounds(MPI_SHORT_INT, sizeof(short) + sizeof(int), 0, sizeof si, "MPI_SHORT_INT");
    bounds(MPI_LONG_DOUBLE_INT, sizeof(long double) + sizeof(int), 0, sizeof ldi, "MPI_LONG_DOUBLE_INT");
    bounds(MPI_2INT, 2 * sizeof(int), 0, 2 * sizeof(int), "MPI_2INT");
    bounds(MPI_C_DOUBLE_COMPLEX, 16, 0, 16, "MPI_C_DOUBLE_COMPLEX");
    bounds(MPI_WCHAR, sizeof(wchar_t), 0, sizeof(wchar_t), "MPI_WCHAR");
    bounds(MPI_AINT, sizeof(MPI_Aint), 0, sizeof(MPI_Aint), "MPI_AINT");
    char name[MPI_MAX_OBJECT_NAME];
    int len;
    OK(MPI_Type_get_name(MPI_DOUBLE_INT, name, &len));
    CHECK(strcmp(name, "MPI_DOUBLE_INT") == 0 && len == 14, "name %s", name);
}

/* The standard's examples, on oldtype {(double, 0), (char, 8)}, extent 16. */
static void examples(void) {
    MPI_Datatype dc, c3, v, hv, ix, st;
    int bl[3] = {1, 1, 0};
    MPI_Aint d[3] = {0, 8, 0};
    MPI_Datatype ty[3] = {MPI_DOUBLE, MPI_CHAR, MPI_CHAR};
    OK(MPI_Type_create_struct(2, bl, d, ty, &dc));
    bounds(dc, 9, 0, 16, "{double, char}");
    OK(MPI_Type_contiguous(3, dc, &c3));
    bounds(c3, 27, 0, 48, "contiguous(3)");
    OK(MPI_Type_vector(2, 3, 4, dc, &v));
    bounds(v, 54, 0, 112, "vector(2, 3, 4)");
    OK(MPI_Type_create_hvector(2, 3, 4, dc, &hv));
    /* The extent of hvector is 52 here and in MPICH; Open MPI pads it to 56. */
    MPI_Aint hlb, hex;
    OK(MPI_Type_get_true_extent(hv, &hlb, &hex));
    CHECK(hlb == 0 && hex == 45, "hvector(2, 3, 4): true extent %ld %ld", (long)hlb, (long)hex);
    int ibl[2] = {3, 1}, idp[2] = {4, 0};
    OK(MPI_Type_indexed(2, ibl, idp, dc, &ix));
    bounds(ix, 36, 0, 112, "indexed({3, 1}, {4, 0})");
    int sbl[3] = {2, 1, 3};
    MPI_Aint sd[3] = {0, 16, 26};
    MPI_Datatype sty[3] = {MPI_FLOAT, dc, MPI_CHAR};
    OK(MPI_Type_create_struct(3, sbl, sd, sty, &st));
    bounds(st, 20, 0, 32, "struct");
    MPI_Aint tlb, tex;
    OK(MPI_Type_get_true_extent(st, &tlb, &tex));
    CHECK(tlb == 0 && tex == 29, "true extent %ld %ld", (long)tlb, (long)tex);

    int ni, na, nd, comb;
    OK(MPI_Type_get_envelope(v, &ni, &na, &nd, &comb));
    CHECK(ni == 3 && na == 0 && nd == 1 && comb == MPI_COMBINER_VECTOR, "vector envelope");
    int ints[3];
    MPI_Datatype inner;
    OK(MPI_Type_get_contents(v, 3, 0, 1, ints, NULL, &inner));
    CHECK(ints[0] == 2 && ints[1] == 3 && ints[2] == 4, "vector contents");
    bounds(inner, 9, 0, 16, "the vector's old type");
    OK(MPI_Type_free(&inner));
    OK(MPI_Type_get_envelope(MPI_INT, &ni, &na, &nd, &comb));
    CHECK(comb == MPI_COMBINER_NAMED, "MPI_INT is named");

    MPI_Datatype all[6] = {dc, c3, v, hv, ix, st};
    for (int i = 0; i < 6; i++) OK(MPI_Type_free(&all[i]));
}

static void pack_unpack(void) {
    int a[12], b[12] = {0};
    for (int i = 0; i < 12; i++) a[i] = i + 1;
    MPI_Datatype v;
    OK(MPI_Type_vector(4, 2, 3, MPI_INT, &v)); /* {1,2, 4,5, 7,8, 10,11} */
    OK(MPI_Type_commit(&v));
    int psize, pos = 0;
    OK(MPI_Pack_size(1, v, MPI_COMM_WORLD, &psize));
    CHECK(psize >= 32, "pack size %d", psize);
    char packed[256];
    OK(MPI_Pack(a, 1, v, packed, sizeof packed, &pos, MPI_COMM_WORLD));
    CHECK(pos == 32, "packed %d bytes", pos);
    int flat[8];
    memcpy(flat, packed, 32);
    int want[8] = {1, 2, 4, 5, 7, 8, 10, 11};
    CHECK(memcmp(flat, want, sizeof want) == 0, "packed order");
    pos = 0;
    OK(MPI_Unpack(packed, 32, &pos, b, 1, v, MPI_COMM_WORLD));
    for (int i = 0; i < 12; i++) CHECK(b[i] == (i % 3 == 2 ? 0 : a[i]), "unpacked %d: %d", i, b[i]);
    OK(MPI_Type_free(&v));
}

/* external32: big-endian, MPI_INT 4 bytes, a vector of vectors as its ints. */
static void external(void) {
    int a[9] = {1, -1, 2, -2, -3, -4, 3, -5, 0x01020304};
    MPI_Datatype in, outer;
    OK(MPI_Type_vector(2, 1, 2, MPI_INT, &in));
    OK(MPI_Type_vector(2, 1, 2, in, &outer));
    OK(MPI_Type_commit(&outer));
    MPI_Aint sz, pos = 0;
    OK(MPI_Pack_external_size("external32", 1, outer, &sz));
    CHECK(sz == 16, "external32 size %ld", (long)sz);
    unsigned char buf[16];
    OK(MPI_Pack_external("external32", a, 1, outer, buf, sizeof buf, &pos));
    CHECK(pos == 16, "packed %ld", (long)pos);
    CHECK(buf[3] == 1 && buf[0] == 0 && buf[12] == 1 && buf[15] == 4, "big-endian");
    int b[9] = {0};
    pos = 0;
    OK(MPI_Unpack_external("external32", buf, sizeof buf, &pos, b, 1, outer));
    CHECK(pos == 16 && b[0] == 1 && b[2] == 2 && b[6] == 3 && b[8] == 0x01020304 && b[1] == 0,
          "unpacked");
    OK(MPI_Type_free(&in));
    OK(MPI_Type_free(&outer));
}

static void arrays(void) {
    /* A 2x3 block at (1, 1) of a 4x5 int array, both orders. */
    int sizes[2] = {4, 5}, sub[2] = {2, 3}, starts[2] = {1, 1};
    MPI_Datatype c, f;
    OK(MPI_Type_create_subarray(2, sizes, sub, starts, MPI_ORDER_C, MPI_INT, &c));
    bounds(c, 24, 0, 80, "subarray C");
    MPI_Aint tlb, tex;
    OK(MPI_Type_get_true_extent(c, &tlb, &tex));
    CHECK(tlb == 24 && tex == 32, "subarray C true extent %ld %ld", (long)tlb, (long)tex);
    OK(MPI_Type_create_subarray(2, sizes, sub, starts, MPI_ORDER_FORTRAN, MPI_INT, &f));
    OK(MPI_Type_get_true_extent(f, &tlb, &tex));
    CHECK(tlb == 20 && tex == 40, "subarray Fortran true extent %ld %ld", (long)tlb, (long)tex);
    OK(MPI_Type_free(&c));
    OK(MPI_Type_free(&f));
    /* 10 ints cyclic(2) over 3 processes: rank 1 holds 2, 3, 8, 9. */
    int g = 10, dist = MPI_DISTRIBUTE_CYCLIC, darg = 2, ps = 3;
    MPI_Datatype dar;
    OK(MPI_Type_create_darray(3, 1, 1, &g, &dist, &darg, &ps, MPI_ORDER_C, MPI_INT, &dar));
    bounds(dar, 16, 0, 40, "darray");
    OK(MPI_Type_commit(&dar));
    int src[10], out[4], pos = 0;
    for (int i = 0; i < 10; i++) src[i] = i;
    OK(MPI_Pack(src, 1, dar, out, sizeof out, &pos, MPI_COMM_WORLD));
    CHECK(out[0] == 2 && out[1] == 3 && out[2] == 8 && out[3] == 9, "darray picks %d %d %d %d", out[0],
          out[1], out[2], out[3]);
    OK(MPI_Type_free(&dar));
}

/* Rank 0 sends a column of a matrix (a resized vector) to every other rank. */
static void messages(void) {
    double m[4][3], col[4];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++) m[i][j] = 10 * i + j;
    MPI_Datatype column, col1;
    OK(MPI_Type_vector(4, 1, 3, MPI_DOUBLE, &column));
    OK(MPI_Type_create_resized(column, 0, sizeof(double), &col1));
    OK(MPI_Type_commit(&col1));
    if (rank == 0) {
        for (int r = 1; r < size; r++) OK(MPI_Send(&m[0][r % 3], 1, col1, r, 5, MPI_COMM_WORLD));
    } else {
        MPI_Status st;
        OK(MPI_Recv(col, 4, MPI_DOUBLE, 0, 5, MPI_COMM_WORLD, &st));
        for (int i = 0; i < 4; i++) CHECK(col[i] == 10 * i + rank % 3, "column %d: %g", i, col[i]);
    }
    /* A short message: elements, not whole types. */
    MPI_Datatype pair;
    int bl[2] = {1, 1};
    MPI_Aint d[2] = {0, 8};
    MPI_Datatype ty[2] = {MPI_INT, MPI_DOUBLE};
    OK(MPI_Type_create_struct(2, bl, d, ty, &pair));
    OK(MPI_Type_commit(&pair));
    if (size > 1) {
        if (rank == 0) {
            char bytes[16] = {0};
            OK(MPI_Send(bytes, 16, MPI_BYTE, 1, 6, MPI_COMM_WORLD)); /* one pair (12) + an int */
        } else if (rank == 1) {
            char in[64];
            MPI_Status st;
            int n, count;
            OK(MPI_Recv(in, 4, pair, 0, 6, MPI_COMM_WORLD, &st));
            OK(MPI_Get_elements(&st, pair, &n));
            CHECK(n == 3, "Get_elements %d", n);
            OK(MPI_Get_count(&st, pair, &count));
            CHECK(count == MPI_UNDEFINED, "Get_count %d", count);
        }
    }
    OK(MPI_Type_free(&pair));
    OK(MPI_Type_free(&column));
    OK(MPI_Type_free(&col1));
}

static int copies, deletes;

static int copy_attr(MPI_Datatype t, int key, void *extra, void *in, void *out, int *flag) {
    (void)t, (void)key, (void)extra;
    copies++;
    *(void **)out = (char *)in + 1;
    *flag = 1;
    return MPI_SUCCESS;
}

static int delete_attr(MPI_Datatype t, int key, void *val, void *extra) {
    (void)t, (void)key, (void)val, (void)extra;
    deletes++;
    return MPI_SUCCESS;
}

/* Attributes: a dup copies them through the key's callback, a free deletes them. */
static void attributes(void) {
    int key;
    static char base[4];
    MPI_Datatype t, d;
    OK(MPI_Type_create_keyval(copy_attr, delete_attr, &key, NULL));
    OK(MPI_Type_contiguous(2, MPI_INT, &t));
    OK(MPI_Type_set_attr(t, key, base));
    void *v;
    int flag;
    OK(MPI_Type_get_attr(t, key, &v, &flag));
    CHECK(flag && v == base, "get_attr");
    OK(MPI_Type_dup(t, &d));
    CHECK(copies == 1, "copies %d", copies);
    OK(MPI_Type_get_attr(d, key, &v, &flag));
    CHECK(flag && v == base + 1, "the copy's value");
    OK(MPI_Type_delete_attr(t, key));
    CHECK(deletes == 1, "deletes %d", deletes);
    OK(MPI_Type_get_attr(t, key, &v, &flag));
    CHECK(!flag, "deleted");
    OK(MPI_Type_free(&d));
    CHECK(deletes == 2, "freeing deletes: %d", deletes);
    OK(MPI_Type_free(&t));
    OK(MPI_Type_free_keyval(&key));
    CHECK(key == MPI_KEYVAL_INVALID, "freed key");
}

/* Bad arguments are errors of their class under MPI_ERRORS_RETURN. */
static void errors(void) {
    int cls;
    MPI_Datatype t;
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    MPI_Error_class(MPI_Type_contiguous(-1, MPI_INT, &t), &cls);
    CHECK(cls == MPI_ERR_COUNT, "a negative count: class %d", cls);
    MPI_Error_class(MPI_Type_contiguous(2, MPI_DATATYPE_NULL, &t), &cls);
    CHECK(cls == MPI_ERR_TYPE, "MPI_DATATYPE_NULL: class %d", cls);
    t = MPI_INT;
    MPI_Error_class(MPI_Type_free(&t), &cls);
    CHECK(cls == MPI_ERR_TYPE, "freeing MPI_INT: class %d", cls);
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    predefined();
    examples();
    pack_unpack();
    external();
    arrays();
    messages();
    attributes();
    errors();
    MPI_Aint a1, a2;
    int x[4];
    OK(MPI_Get_address(&x[0], &a1));
    OK(MPI_Get_address(&x[3], &a2));
    CHECK(MPI_Aint_diff(a2, a1) == 3 * sizeof(int), "Aint_diff");
    /* MPI_Type_match_size finds a type of long double's size (there is no REAL16). */
    MPI_Datatype m;
    int msize;
    OK(MPI_Type_match_size(MPI_TYPECLASS_REAL, sizeof(long double), &m));
    OK(MPI_Type_size(m, &msize));
    CHECK(msize == sizeof(long double), "match_size long double: %d", msize);
    OK(MPI_Type_match_size(MPI_TYPECLASS_COMPLEX, 2 * sizeof(long double), &m));
    CHECK(m == MPI_C_LONG_DOUBLE_COMPLEX, "match_size long double complex");
    MPI_Barrier(MPI_COMM_WORLD);
    printf("datatype_test OK rank=%d\n", rank);
    MPI_Finalize();
    return 0;
}
