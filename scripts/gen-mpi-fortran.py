#!/usr/bin/env python3
"""Generates bulkwire's Fortran MPI bindings from crates/mpi/include/mpi.h.

    python3 scripts/gen-mpi-fortran.py        # rewrites the outputs below

Outputs (committed; run this again after changing mpi.h):
  crates/mpi/include/mpif.h       the constants, for `include 'mpif.h'`, in the subset of
                                  Fortran that reads the same in fixed and free form
  crates/mpi/include/mpi.f90      the `mpi` module (`use mpi`): mpif.h inside a module
  crates/capi/csrc/mpi_fortran.c  the entry points gfortran calls (`mpi_send_`: lower case,
                                  one trailing underscore, every argument by reference,
                                  `ierror` last, hidden string lengths after it), each a
                                  conversion around the C function
  crates/capi/csrc/mpi_fortran.syms  their names, for the shared library's export list
  crates/capi/csrc/mpi_profiling.c   the profiling interface (the MPI standard's chapter
                                  15): the library exports each C function as PMPI_X;
                                  this file defines MPI_X as a weak function calling it,
                                  so a tool's own MPI_X in the program wins, in a static
                                  link as in a shared one (stable Rust has no weak symbols)
  crates/capi/csrc/mpi_profiling.syms  the MPI_X names, for the export list
  crates/mpi/include/mpi.h        its block of PMPI_X prototypes, between the markers
                                  below (the rest of the header is written by hand)

Each Fortran entry point is pmpi_x_, calling the C PMPI_X, with mpi_x_ a weak alias
(the hand-written ones of the preamble have only the mpi_x_ name).

Only the functions the library defines (`extern "C" fn MPI_...` in crates/mpi/src) are
bound, so libbulkwire links whole; run the script again when more are implemented
(`--check` only says whether the outputs are current, for the tests).

A handle's Fortran INTEGER is its C value (predefined handles are the ABI's small numbers,
run-time handles `0x10000 + (index << 4 | kind)` fit 31 bits), so handles convert by
casting; MPI_Status has the Fortran status array's layout (8 ints, MPI_SOURCE first), so
statuses pass through. The special addresses (MPI_BOTTOM, MPI_IN_PLACE,
MPI_STATUS_IGNORE, ...) are common blocks whose addresses the C side compares against.
"""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADER = os.path.join(ROOT, "crates/mpi/include/mpi.h")
MPIF = os.path.join(ROOT, "crates/mpi/include/mpif.h")
MODULE = os.path.join(ROOT, "crates/mpi/include/mpi.f90")
CSRC = os.path.join(ROOT, "crates/capi/csrc/mpi_fortran.c")
SYMS = os.path.join(ROOT, "crates/capi/csrc/mpi_fortran.syms")
HAVE = os.path.join(ROOT, "crates/capi/csrc/mpi_fortran_have.h")

HANDLES = {
    "MPI_Comm", "MPI_Datatype", "MPI_Group", "MPI_Op", "MPI_Request", "MPI_Info",
    "MPI_Win", "MPI_Errhandler", "MPI_Message", "MPI_File", "MPI_Session",
}
WIDE = {"MPI_Aint", "MPI_Count", "MPI_Offset"}

# Written by hand in the C preamble below (callbacks, attribute values, strings that are
# arrays, functions with results), or not callable from Fortran.
HAND = {
    "MPI_Init", "MPI_Init_thread", "MPI_Wtime", "MPI_Wtick", "MPI_Pcontrol",
    "MPI_Op_create", "MPI_Aint_add", "MPI_Aint_diff",
    "MPI_Comm_set_attr", "MPI_Comm_get_attr", "MPI_Attr_put", "MPI_Attr_get",
    "MPI_Type_set_attr", "MPI_Type_get_attr", "MPI_Win_set_attr", "MPI_Win_get_attr",
    "MPI_Comm_create_keyval", "MPI_Keyval_create", "MPI_Type_create_keyval",
    "MPI_Win_create_keyval",
    "MPI_Info_get", "MPI_Alltoallw", "MPI_Ialltoallw", "MPI_Comm_create_errhandler",
}
# Not bound: they take C function pointers or C-only arguments.
SKIP = {
    "MPI_Win_create_errhandler", "MPI_Grequest_start",
    "MPI_Neighbor_alltoallw", "MPI_Ineighbor_alltoallw",
}

# Arrays of handles: how many elements (a C expression over the wrapper's arguments).
HANDLE_ARRAYS = {
    ("MPI_Startall", "array_of_requests"): "*count",
    ("MPI_Waitall", "array_of_requests"): "*count",
    ("MPI_Waitany", "array_of_requests"): "*count",
    ("MPI_Testall", "array_of_requests"): "*count",
    ("MPI_Testany", "array_of_requests"): "*count",
    ("MPI_Waitsome", "array_of_requests"): "*incount",
    ("MPI_Testsome", "array_of_requests"): "*incount",
    ("MPI_Type_create_struct", "array_of_types"): "*count",
    ("MPI_Type_get_contents", "array_of_datatypes"): "*max_datatypes",
}

# `void *` arguments that are not buffers: C writes an address through them (the Fortran
# argument is an INTEGER(KIND=MPI_ADDRESS_KIND)).
ADDRESS_OUT = {"baseptr", "buffer_addr"}

STATUS_ARRAYS = {"array_of_statuses"}

# Indices into request arrays count from 1 in Fortran (MPI_UNDEFINED stays).
INDEX_FIX = {
    "MPI_Waitany": "if (*ierror == MPI_SUCCESS && *indx >= 0) *indx += 1;",
    "MPI_Testany": "if (*ierror == MPI_SUCCESS && *indx >= 0) *indx += 1;",
    "MPI_Waitsome": "if (*outcount != MPI_UNDEFINED) for (int i = 0; i < *outcount; i++) array_of_indices[i] += 1;",
    "MPI_Testsome": "if (*outcount != MPI_UNDEFINED) for (int i = 0; i < *outcount; i++) array_of_indices[i] += 1;",
}


def parse_prototypes(text):
    protos = []
    for m in re.finditer(r"^(int|double|MPI_Aint) (MPI_\w+)\((.*)\);$", text, re.M):
        ret, name, args = m.groups()
        params = []
        if args.strip() != "void":
            for a in args.split(","):
                a = a.strip()
                am = re.match(r"^(const )?([\w ]+?)\s*(\*{0,3})\s*(\w+)\s*((?:\[\d*\])*)$", a)
                if not am:
                    params = None
                    break
                const, ty, stars, pname, arr = am.groups()
                params.append({
                    "const": bool(const), "type": ty.strip(), "ptr": len(stars),
                    "name": pname, "array": arr,
                })
        protos.append((ret, name, params))
    return protos


def gen_wrapper(name, params):
    """The C of one entry point, or None where a parameter has no Fortran form."""
    fargs = []
    pre = []
    call = []
    post = []
    hidden = []
    for p in params:
        ty, ptr, n, arr = p["type"], p["ptr"], p["name"], p["array"]
        is_array = bool(arr)
        if ty == "void" and ptr == 1:
            fargs.append(f"void *{n}")
            call.append(n if n in ADDRESS_OUT else f"BUF({n})")
        elif ty == "char" and (ptr == 1 or is_array):
            fargs.append(f"char *{n}")
            hidden.append(f"size_t {n}_len")
            if p["const"]:
                pre.append(f"char *c_{n} = f2cstr({n}, {n}_len);")
                call.append(f"c_{n}")
                post.append(f"free(c_{n});")
            else:
                pre.append(f"char c_{n}[STRMAX];")
                pre.append(f"c_{n}[0] = 0;")
                call.append(f"c_{n}")
                post.append(f"c2fstr(c_{n}, {n}, {n}_len);")
        elif ty == "int" and ptr == 0 and not is_array:
            fargs.append(f"MPI_Fint *{n}")
            call.append(f"*{n}")
        elif ty == "int":
            fargs.append(f"MPI_Fint *{n}")
            if arr.startswith("[]["):
                call.append(f"(int (*)[3]){n}")
            elif n.endswith("weights"):
                call.append(f"WEIGHTS({n})")
            else:
                call.append(n)
        elif ty in WIDE and ptr == 0 and not is_array:
            fargs.append(f"{ty} *{n}")
            call.append(f"*{n}")
        elif ty in WIDE:
            fargs.append(f"{ty} *{n}")
            call.append(n)
        elif ty == "MPI_Status":
            fargs.append(f"MPI_Fint *{n}")
            if n in STATUS_ARRAYS:
                call.append(f"STATUSES({n})")
            else:
                call.append(f"STATUS({n})")
        elif ty in HANDLES and ptr == 0 and not is_array:
            fargs.append(f"MPI_Fint *{n}")
            call.append(f"F2C({ty}, *{n})")
        elif ty in HANDLES and is_array:
            count = HANDLE_ARRAYS.get((name, n))
            if count is None:
                return None
            fargs.append(f"MPI_Fint *{n}")
            pre.append(f"int n_{n} = {count};")
            pre.append(f"{ty} *c_{n} = malloc(sizeof({ty}) * (size_t)(n_{n} > 0 ? n_{n} : 1));")
            pre.append(f"for (int i = 0; i < n_{n}; i++) c_{n}[i] = F2C({ty}, {n}[i]);")
            call.append(f"c_{n}")
            if not p["const"]:
                post.append(f"for (int i = 0; i < n_{n}; i++) {n}[i] = C2F(c_{n}[i]);")
            post.append(f"free(c_{n});")
        elif ty in HANDLES and ptr == 1:
            fargs.append(f"MPI_Fint *{n}")
            pre.append(f"{ty} c_{n} = F2C({ty}, *{n});")
            call.append(f"&c_{n}")
            post.append(f"*{n} = C2F(c_{n});")
        else:
            return None
    fname = name.lower() + "_"
    sig = ", ".join(fargs + ["MPI_Fint *ierror"] + hidden)
    # The profiling interface: pmpi_x_ is the entry point and calls the C PMPI_X (a
    # tool that wraps both languages counts a Fortran call once); mpi_x_ is a weak alias
    # that a tool's own mpi_x_ replaces.
    body = [f"void p{fname}({sig})", "{"]
    body += ["    " + s for s in pre]
    body.append(f"    *ierror = P{name}({', '.join(call)});")
    body += ["    " + s for s in post]
    if name in INDEX_FIX:
        body.append("    " + INDEX_FIX[name])
    body.append("}")
    body.append(f"WEAK_ALIAS({fname}, p{fname});")
    return fname, "\n".join(body)


PREAMBLE = r'''/*
 * mpi_fortran.c: the Fortran entry points of bulkwire's MPI (gfortran's names: lower case,
 * one trailing underscore; every argument by reference; `ierror` last; the hidden lengths
 * of CHARACTER arguments after it).
 *
 * GENERATED by scripts/gen-mpi-fortran.py from crates/mpi/include/mpi.h: edit the script,
 * not this file. The functions before the generated part are the script's hand-written
 * preamble: callbacks, attribute values and calls with results.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mpi.h"
#include "mpi_fortran_have.h"

/* A handle's Fortran INTEGER is its C value (see MPI_Comm_c2f). */
#define F2C(T, f) ((T)(uintptr_t)(unsigned)(f))
#define C2F(h) ((MPI_Fint)(uintptr_t)(h))

/* The special addresses: Fortran programs name them through these common blocks (mpif.h),
 * gfortran gives a common block /name/ the symbol name_, aligned to up to 32 bytes (the linker
 * warns of a definition aligned less). */
#define COMMON_BLOCK __attribute__((aligned(32)))
MPI_Fint mpi_fortran_bottom_[1] COMMON_BLOCK;
MPI_Fint mpi_fortran_in_place_[1] COMMON_BLOCK;
MPI_Fint mpi_fortran_status_ignore_[MPI_F_STATUS_SIZE] COMMON_BLOCK;
MPI_Fint mpi_fortran_statuses_ignore_[MPI_F_STATUS_SIZE] COMMON_BLOCK;
MPI_Fint mpi_fortran_errcodes_ignore_[1] COMMON_BLOCK;
MPI_Fint mpi_fortran_unweighted_[1] COMMON_BLOCK;
MPI_Fint mpi_fortran_weights_empty_[1] COMMON_BLOCK;

static void *fbuf(void *p)
{
    if (p == (void *)mpi_fortran_bottom_)
        return MPI_BOTTOM;
    if (p == (void *)mpi_fortran_in_place_)
        return MPI_IN_PLACE;
    if (p == (void *)mpi_fortran_unweighted_)
        return MPI_UNWEIGHTED;
    if (p == (void *)mpi_fortran_weights_empty_)
        return MPI_WEIGHTS_EMPTY;
    return p;
}
#define BUF(p) fbuf((void *)(p))
/* Weights are int arrays that may be the special addresses too. */
#define WEIGHTS(p) ((int *)fbuf((void *)(p)))
#define STATUS(s) ((s) == mpi_fortran_status_ignore_ ? MPI_STATUS_IGNORE : (MPI_Status *)(void *)(s))
#define STATUSES(s) ((s) == mpi_fortran_statuses_ignore_ ? MPI_STATUSES_IGNORE : (MPI_Status *)(void *)(s))
/* `name` as a weak alias of `target` (both defined here). */
#define WEAK_ALIAS(name, target) extern __typeof__(target) name __attribute__((weak, alias(#target)))

/* Room for any string the C calls return (the longest is the library version). */
#define STRMAX (MPI_MAX_LIBRARY_VERSION_STRING + 1)

/* A Fortran string as C: trailing blanks dropped (leading ones kept, as MPICH does). */
static char *f2cstr(const char *f, size_t len)
{
    while (len > 0 && f[len - 1] == ' ')
        len--;
    char *c = malloc(len + 1);
    if (c) {
        memcpy(c, f, len);
        c[len] = 0;
    }
    return c;
}

/* A C string into a Fortran one: cut to its length, blank-padded. */
static void c2fstr(const char *c, char *f, size_t len)
{
    size_t n = strlen(c);
    if (n > len)
        n = len;
    memcpy(f, c, n);
    memset(f + n, ' ', len - n);
}

void mpi_init_(MPI_Fint *ierror)
{
    *ierror = MPI_Init(NULL, NULL);
}

void mpi_init_thread_(MPI_Fint *required, MPI_Fint *provided, MPI_Fint *ierror)
{
    *ierror = MPI_Init_thread(NULL, NULL, *required, provided);
}

double mpi_wtime_(void)
{
    return MPI_Wtime();
}

double mpi_wtick_(void)
{
    return MPI_Wtick();
}

void mpi_pcontrol_(MPI_Fint *level)
{
    MPI_Pcontrol(*level);
}

MPI_Aint mpi_aint_add_(MPI_Aint *base, MPI_Aint *disp)
{
    return MPI_Aint_add(*base, *disp);
}

MPI_Aint mpi_aint_diff_(MPI_Aint *a, MPI_Aint *b)
{
    return MPI_Aint_diff(*a, *b);
}

void mpi_info_get_(MPI_Fint *info, char *key, MPI_Fint *valuelen, char *value, MPI_Fint *flag,
                   MPI_Fint *ierror, size_t key_len, size_t value_len)
{
    char *c_key = f2cstr(key, key_len);
    int n = *valuelen < MPI_MAX_INFO_VAL ? *valuelen : MPI_MAX_INFO_VAL;
    char c_value[MPI_MAX_INFO_VAL + 1];
    c_value[0] = 0;
    *ierror = MPI_Info_get(F2C(MPI_Info, *info), c_key, n, c_value, flag);
    if (*ierror == MPI_SUCCESS && *flag)
        c2fstr(c_value, value, value_len);
    free(c_key);
}

#ifdef HAVE_MPI_Alltoallw
/* Alltoallw's type arrays have one entry per process of the communicator. */
static MPI_Datatype *types_of(MPI_Comm comm, const MPI_Fint *f)
{
    int n = 0;
    MPI_Comm_size(comm, &n);
    MPI_Datatype *t = malloc(sizeof(MPI_Datatype) * (size_t)(n > 0 ? n : 1));
    for (int i = 0; i < n; i++)
        t[i] = F2C(MPI_Datatype, f[i]);
    return t;
}

void mpi_alltoallw_(void *sendbuf, MPI_Fint *sendcounts, MPI_Fint *sdispls, MPI_Fint *sendtypes,
                    void *recvbuf, MPI_Fint *recvcounts, MPI_Fint *rdispls, MPI_Fint *recvtypes,
                    MPI_Fint *comm, MPI_Fint *ierror)
{
    MPI_Comm c = F2C(MPI_Comm, *comm);
    void *sb = BUF(sendbuf);
    MPI_Datatype *st = sb == MPI_IN_PLACE ? NULL : types_of(c, sendtypes);
    MPI_Datatype *rt = types_of(c, recvtypes);
    *ierror = MPI_Alltoallw(sb, sendcounts, sdispls, st, BUF(recvbuf), recvcounts, rdispls, rt, c);
    free(st);
    free(rt);
}
#endif

#ifdef HAVE_MPI_Ialltoallw
void mpi_ialltoallw_(void *sendbuf, MPI_Fint *sendcounts, MPI_Fint *sdispls, MPI_Fint *sendtypes,
                     void *recvbuf, MPI_Fint *recvcounts, MPI_Fint *rdispls, MPI_Fint *recvtypes,
                     MPI_Fint *comm, MPI_Fint *request, MPI_Fint *ierror)
{
    MPI_Comm c = F2C(MPI_Comm, *comm);
    void *sb = BUF(sendbuf);
    /* The arrays must outlive the call; the standard lets the library read them until the
     * operation completes, and bulkwire's non-blocking collectives copy them at the start. */
    MPI_Datatype *st = sb == MPI_IN_PLACE ? NULL : types_of(c, sendtypes);
    MPI_Datatype *rt = types_of(c, recvtypes);
    MPI_Request r = MPI_REQUEST_NULL;
    *ierror = MPI_Ialltoallw(sb, sendcounts, sdispls, st, BUF(recvbuf), recvcounts, rdispls, rt, c,
                             &r);
    *request = C2F(r);
    free(st);
    free(rt);
}
#endif

/* ---- User-defined operations -----------------------------------------------------------
 * A Fortran operation is called as f(invec, inoutvec, len, datatype) with an INTEGER
 * datatype; C passes an MPI_Datatype. The C side calls one of a fixed set of trampolines,
 * each bound to one slot of Fortran functions: trampoline `ab` (two octal digits) serves
 * slot 0ab. */
typedef void(FortranUserFunction)(void *, void *, MPI_Fint *, MPI_Fint *);
#define OP_SLOTS 64
static FortranUserFunction *op_slots[OP_SLOTS];

#define TRAMPOLINE(i)                                                                  \
    static void op_trampoline_##i(void *in, void *inout, int *len, MPI_Datatype *dt)   \
    {                                                                                  \
        MPI_Fint fdt = C2F(*dt);                                                       \
        MPI_Fint flen = *len;                                                          \
        op_slots[0##i](in, inout, &flen, &fdt);                                        \
    }
#define T8(a) TRAMPOLINE(a##0) TRAMPOLINE(a##1) TRAMPOLINE(a##2) TRAMPOLINE(a##3) \
    TRAMPOLINE(a##4) TRAMPOLINE(a##5) TRAMPOLINE(a##6) TRAMPOLINE(a##7)
T8(0) T8(1) T8(2) T8(3) T8(4) T8(5) T8(6) T8(7)
#define R8(a) op_trampoline_##a##0, op_trampoline_##a##1, op_trampoline_##a##2, \
    op_trampoline_##a##3, op_trampoline_##a##4, op_trampoline_##a##5,          \
    op_trampoline_##a##6, op_trampoline_##a##7
static MPI_User_function *const op_trampolines[OP_SLOTS] = {
    R8(0), R8(1), R8(2), R8(3), R8(4), R8(5), R8(6), R8(7),
};

void mpi_op_create_(FortranUserFunction *fn, MPI_Fint *commute, MPI_Fint *op, MPI_Fint *ierror)
{
    /* The same Fortran function always gets the same slot; slots are never reused, as an
     * operation may outlive MPI_Op_free while a non-blocking reduction still runs. */
    int slot = -1;
    for (int i = 0; i < OP_SLOTS; i++) {
        FortranUserFunction *cur = __atomic_load_n(&op_slots[i], __ATOMIC_ACQUIRE);
        if (cur == fn) {
            slot = i;
            break;
        }
        if (cur == NULL) {
            FortranUserFunction *expected = NULL;
            if (__atomic_compare_exchange_n(&op_slots[i], &expected, fn, 0, __ATOMIC_ACQ_REL,
                                            __ATOMIC_ACQUIRE) ||
                expected == fn) {
                slot = i;
                break;
            }
        }
    }
    if (slot < 0) {
        *ierror = MPI_ERR_INTERN;
        return;
    }
    MPI_Op c = MPI_OP_NULL;
    *ierror = MPI_Op_create(op_trampolines[slot], *commute, &c);
    *op = C2F(c);
}

/* ---- Error handlers --------------------------------------------------------------------
 * A Fortran error handler is called as f(comm, errorcode) with an INTEGER communicator;
 * C passes an MPI_Comm pointer (and, by the standard, variadic arguments that Fortran
 * does not see). Trampolines as for operations: 16 slots. */
#ifdef HAVE_MPI_Comm_create_errhandler
typedef void(FortranErrhandler)(MPI_Fint *, MPI_Fint *);
#define EH_SLOTS 16
static FortranErrhandler *eh_slots[EH_SLOTS];

#define EH_TRAMPOLINE(i)                                                     \
    static void eh_trampoline_##i(MPI_Comm *comm, int *code, ...)            \
    {                                                                        \
        MPI_Fint fcomm = C2F(*comm);                                         \
        MPI_Fint fcode = *code;                                              \
        eh_slots[i](&fcomm, &fcode);                                         \
    }
EH_TRAMPOLINE(0) EH_TRAMPOLINE(1) EH_TRAMPOLINE(2) EH_TRAMPOLINE(3)
EH_TRAMPOLINE(4) EH_TRAMPOLINE(5) EH_TRAMPOLINE(6) EH_TRAMPOLINE(7)
EH_TRAMPOLINE(8) EH_TRAMPOLINE(9) EH_TRAMPOLINE(10) EH_TRAMPOLINE(11)
EH_TRAMPOLINE(12) EH_TRAMPOLINE(13) EH_TRAMPOLINE(14) EH_TRAMPOLINE(15)
static MPI_Comm_errhandler_function *const eh_trampolines[EH_SLOTS] = {
    eh_trampoline_0,  eh_trampoline_1,  eh_trampoline_2,  eh_trampoline_3,
    eh_trampoline_4,  eh_trampoline_5,  eh_trampoline_6,  eh_trampoline_7,
    eh_trampoline_8,  eh_trampoline_9,  eh_trampoline_10, eh_trampoline_11,
    eh_trampoline_12, eh_trampoline_13, eh_trampoline_14, eh_trampoline_15,
};

void mpi_comm_create_errhandler_(FortranErrhandler *fn, MPI_Fint *errhandler, MPI_Fint *ierror)
{
    /* As for operations: one slot per distinct subroutine, never reused. */
    int slot = -1;
    for (int i = 0; i < EH_SLOTS && slot < 0; i++) {
        FortranErrhandler *expected = NULL;
        if (__atomic_compare_exchange_n(&eh_slots[i], &expected, fn, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE) ||
            expected == fn)
            slot = i;
    }
    if (slot < 0) {
        *ierror = MPI_ERR_INTERN;
        return;
    }
    MPI_Errhandler c = MPI_ERRHANDLER_NULL;
    *ierror = MPI_Comm_create_errhandler(eh_trampolines[slot], &c);
    *errhandler = C2F(c);
}
#endif

/* ---- Attributes ------------------------------------------------------------------------
 * A Fortran attribute value is an INTEGER(KIND=MPI_ADDRESS_KIND) stored as the C
 * attribute's pointer value; the predefined attributes' C values point at ints (or, for
 * windows, at the value) and Fortran gets the value itself. */
static MPI_Aint predefined_value(int keyval, void *v)
{
    switch (keyval) {
    case MPI_WIN_BASE:
        return (MPI_Aint)v;
    case MPI_WIN_SIZE:
        return *(MPI_Aint *)v;
    default:
        return *(int *)v;
    }
}

static int predefined_keyval(int k)
{
    return (k >= MPI_TAG_UB && k <= MPI_UNIVERSE_SIZE) || (k >= MPI_WIN_BASE && k <= MPI_WIN_MODEL);
}

#define ATTR_FNS(lname, Name, T)                                                        \
    void mpi_##lname##_set_attr_(MPI_Fint *h, MPI_Fint *keyval, MPI_Aint *value,       \
                                 MPI_Fint *ierror)                                      \
    {                                                                                   \
        *ierror = MPI_##Name##_set_attr(F2C(T, *h), *keyval, (void *)*value);           \
    }                                                                                   \
    void mpi_##lname##_get_attr_(MPI_Fint *h, MPI_Fint *keyval, MPI_Aint *value,       \
                                 MPI_Fint *flag, MPI_Fint *ierror)                      \
    {                                                                                   \
        void *v = NULL;                                                                 \
        *ierror = MPI_##Name##_get_attr(F2C(T, *h), *keyval, &v, flag);                 \
        if (*ierror == MPI_SUCCESS && *flag)                                            \
            *value = predefined_keyval(*keyval) ? predefined_value(*keyval, v)          \
                                                : (MPI_Aint)v;                          \
    }
#ifdef HAVE_MPI_Comm_set_attr
ATTR_FNS(comm, Comm, MPI_Comm)
#endif
#ifdef HAVE_MPI_Type_set_attr
ATTR_FNS(type, Type, MPI_Datatype)
#endif
#ifdef HAVE_MPI_Win_set_attr
ATTR_FNS(win, Win, MPI_Win)
#endif

/* MPI-1's forms take a default INTEGER value. */
void mpi_attr_put_(MPI_Fint *comm, MPI_Fint *keyval, MPI_Fint *value, MPI_Fint *ierror)
{
    *ierror = MPI_Attr_put(F2C(MPI_Comm, *comm), *keyval, (void *)(MPI_Aint)*value);
}

void mpi_attr_get_(MPI_Fint *comm, MPI_Fint *keyval, MPI_Fint *value, MPI_Fint *flag,
                   MPI_Fint *ierror)
{
    void *v = NULL;
    *ierror = MPI_Attr_get(F2C(MPI_Comm, *comm), *keyval, &v, flag);
    if (*ierror == MPI_SUCCESS && *flag)
        *value = (MPI_Fint)(predefined_keyval(*keyval) ? predefined_value(*keyval, v)
                                                       : (MPI_Aint)v);
}

/* Keyvals from Fortran: only the predefined copy and delete procedures (MPI_COMM_NULL_COPY_FN,
 * MPI_COMM_DUP_FN, MPI_COMM_NULL_DELETE_FN and the like), which mpif.h declares EXTERNAL;
 * their Fortran symbols are these functions, never called. A user's Fortran callback is
 * refused with MPI_ERR_ARG. */
void mpi_null_copy_fn_(void) {}
void mpi_dup_fn_(void) {}
void mpi_null_delete_fn_(void) {}
void mpi_comm_null_copy_fn_(void) {}
void mpi_comm_dup_fn_(void) {}
void mpi_comm_null_delete_fn_(void) {}
void mpi_type_null_copy_fn_(void) {}
void mpi_type_dup_fn_(void) {}
void mpi_type_null_delete_fn_(void) {}
void mpi_win_null_copy_fn_(void) {}
void mpi_win_dup_fn_(void) {}
void mpi_win_null_delete_fn_(void) {}

typedef void(Proc)(void);

/* 0 (no copy), 1 (copy) or -1 (a user's procedure). */
static int copy_kind(Proc *f)
{
    if (f == mpi_null_copy_fn_ || f == mpi_comm_null_copy_fn_ || f == mpi_type_null_copy_fn_ ||
        f == mpi_win_null_copy_fn_)
        return 0;
    if (f == mpi_dup_fn_ || f == mpi_comm_dup_fn_ || f == mpi_type_dup_fn_ || f == mpi_win_dup_fn_)
        return 1;
    return -1;
}

static int null_delete(Proc *f)
{
    return f == mpi_null_delete_fn_ || f == mpi_comm_null_delete_fn_ ||
           f == mpi_type_null_delete_fn_ || f == mpi_win_null_delete_fn_;
}

#define KEYVAL_FN(fname, cname, CopyT, DelT, ExtraT)                                    \
    void fname(Proc *copy_fn, Proc *delete_fn, MPI_Fint *keyval, ExtraT *extra,         \
               MPI_Fint *ierror)                                                        \
    {                                                                                   \
        int k = copy_kind(copy_fn);                                                     \
        if (k < 0 || !null_delete(delete_fn)) {                                         \
            *ierror = MPI_ERR_ARG;                                                      \
            return;                                                                     \
        }                                                                               \
        *ierror = cname((CopyT *)(uintptr_t)k, (DelT *)0, keyval, (void *)(MPI_Aint)*extra); \
    }
#ifdef HAVE_MPI_Comm_create_keyval
KEYVAL_FN(mpi_comm_create_keyval_, MPI_Comm_create_keyval, MPI_Comm_copy_attr_function,
          MPI_Comm_delete_attr_function, MPI_Aint)
#endif
#ifdef HAVE_MPI_Type_create_keyval
KEYVAL_FN(mpi_type_create_keyval_, MPI_Type_create_keyval, MPI_Type_copy_attr_function,
          MPI_Type_delete_attr_function, MPI_Aint)
#endif
#ifdef HAVE_MPI_Win_create_keyval
KEYVAL_FN(mpi_win_create_keyval_, MPI_Win_create_keyval, MPI_Win_copy_attr_function,
          MPI_Win_delete_attr_function, MPI_Aint)
#endif
KEYVAL_FN(mpi_keyval_create_, MPI_Keyval_create, MPI_Copy_function, MPI_Delete_function,
          MPI_Fint)

/* ---- Generated ------------------------------------------------------------------------ */
'''

HAND_SYMS = [
    "mpi_init_", "mpi_init_thread_", "mpi_wtime_", "mpi_wtick_", "mpi_pcontrol_",
    "mpi_aint_add_", "mpi_aint_diff_", "mpi_info_get_", "mpi_op_create_",
    "mpi_attr_put_", "mpi_attr_get_",
    "mpi_null_copy_fn_", "mpi_dup_fn_", "mpi_null_delete_fn_",
    "mpi_comm_null_copy_fn_", "mpi_comm_dup_fn_", "mpi_comm_null_delete_fn_",
    "mpi_type_null_copy_fn_", "mpi_type_dup_fn_", "mpi_type_null_delete_fn_",
    "mpi_win_null_copy_fn_", "mpi_win_dup_fn_", "mpi_win_null_delete_fn_",
    "mpi_keyval_create_",
    "mpi_fortran_bottom_", "mpi_fortran_in_place_", "mpi_fortran_status_ignore_",
    "mpi_fortran_statuses_ignore_", "mpi_fortran_errcodes_ignore_",
    "mpi_fortran_unweighted_", "mpi_fortran_weights_empty_",
]


def constants(text):
    """(name, value) of every integer constant of mpi.h, in the header's order."""
    out = []
    seen = set()

    def add(n, v):
        if n not in seen:
            seen.add(n)
            out.append((n, v))

    for m in re.finditer(r"^#define (MPI_\w+)\s+\(\((MPI_\w+)\)(0x[0-9a-fA-F]+)\)", text, re.M):
        add(m.group(1), int(m.group(3), 16))
    for m in re.finditer(r"^#define (MPI_\w+)\s+(MPI_\w+)\s*$", text, re.M):
        alias, target = m.groups()
        val = dict(out).get(target)
        if val is not None:
            add(alias, val)
    for m in re.finditer(r"^#define (MPI_\w+) (-?\d+)\s*$", text, re.M):
        add(m.group(1), int(m.group(2)))
    for body in re.findall(r"enum \{(.*?)\};", text, re.S):
        for m in re.finditer(r"(MPI_\w+)\s*=\s*(-?(?:0x[0-9a-fA-F]+|\d+))", body):
            add(m.group(1), int(m.group(2), 0))
    add("MPI_DISPLACEMENT_CURRENT", -1)
    return out


# Fortran-only names and values.
FORTRAN_INTS = [
    ("MPI_STATUS_SIZE", 8),
    ("MPI_SOURCE", 1),
    ("MPI_TAG", 2),
    ("MPI_ERROR", 3),
    ("MPI_ADDRESS_KIND", 8),
    ("MPI_OFFSET_KIND", 8),
    ("MPI_COUNT_KIND", 8),
    ("MPI_INTEGER_KIND", 4),
]
# Constants of mpi.h that a Fortran program does not use, or whose names Fortran reuses.
FORTRAN_LEAVE_OUT = {"MPI_F_STATUS_SIZE", "MPI_F_SOURCE", "MPI_F_TAG", "MPI_F_ERROR",
                     "BULKWIRE_MPI", "MPI_LONG_LONG_INT"}
# Constants that must be INTEGER(KIND=MPI_ADDRESS_KIND) or MPI_OFFSET_KIND.
WIDE_CONSTANTS = {"MPI_DISPLACEMENT_CURRENT": "MPI_OFFSET_KIND"}


def fixed(line):
    """A statement at column 7, checked to fit fixed form's 72 columns."""
    s = "      " + line
    assert len(s) <= 72, s
    return s


def gen_mpif(text):
    lines = [
        "! mpif.h: bulkwire's MPI for Fortran (include 'mpif.h'), the constants of mpi.h.",
        "! Written to read the same in fixed and free form: statements at column 7,",
        "! shorter than 72 columns, no continuation lines, comments starting with !.",
        "! GENERATED by scripts/gen-mpi-fortran.py from mpi.h: edit the script.",
        "!",
        "! Handles are INTEGERs with the values of the C handles (MPI 5.0 ABI).",
        "! MPI_BOTTOM, MPI_IN_PLACE, MPI_STATUS_IGNORE, MPI_STATUSES_IGNORE,",
        "! MPI_ERRCODES_IGNORE, MPI_UNWEIGHTED and MPI_WEIGHTS_EMPTY are",
        "! variables in common blocks whose addresses the library recognises.",
    ]
    consts = [(n, v) for n, v in constants(text) if n not in FORTRAN_LEAVE_OUT]
    consts += [("MPI_VERSION", 3), ("MPI_SUBVERSION", 1)]
    seen = set()
    for n, v in FORTRAN_INTS + consts:
        if n in seen or n in WIDE_CONSTANTS:
            continue
        seen.add(n)
        lines.append(fixed(f"INTEGER {n}"))
        lines.append(fixed(f"PARAMETER ({n}={v})"))
    for n, kind in WIDE_CONSTANTS.items():
        v = dict(consts)[n]
        lines.append(fixed(f"INTEGER({kind}) {n}"))
        lines.append(fixed(f"PARAMETER ({n}={v})"))
    lines += [
        fixed("INTEGER MPI_BOTTOM, MPI_IN_PLACE"),
        fixed("INTEGER MPI_STATUS_IGNORE(MPI_STATUS_SIZE)"),
        fixed("INTEGER MPI_STATUSES_IGNORE(MPI_STATUS_SIZE,1)"),
        fixed("INTEGER MPI_ERRCODES_IGNORE(1)"),
        fixed("INTEGER MPI_UNWEIGHTED(1), MPI_WEIGHTS_EMPTY(1)"),
        fixed("COMMON /MPI_FORTRAN_BOTTOM/ MPI_BOTTOM"),
        fixed("COMMON /MPI_FORTRAN_IN_PLACE/ MPI_IN_PLACE"),
        fixed("COMMON /MPI_FORTRAN_STATUS_IGNORE/ MPI_STATUS_IGNORE"),
        fixed("COMMON /MPI_FORTRAN_STATUSES_IGNORE/ MPI_STATUSES_IGNORE"),
        fixed("COMMON /MPI_FORTRAN_ERRCODES_IGNORE/ MPI_ERRCODES_IGNORE"),
        fixed("COMMON /MPI_FORTRAN_UNWEIGHTED/ MPI_UNWEIGHTED"),
        fixed("COMMON /MPI_FORTRAN_WEIGHTS_EMPTY/ MPI_WEIGHTS_EMPTY"),
        fixed("SAVE /MPI_FORTRAN_BOTTOM/, /MPI_FORTRAN_IN_PLACE/"),
        fixed("SAVE /MPI_FORTRAN_STATUS_IGNORE/"),
        fixed("SAVE /MPI_FORTRAN_STATUSES_IGNORE/"),
        fixed("SAVE /MPI_FORTRAN_ERRCODES_IGNORE/"),
        fixed("SAVE /MPI_FORTRAN_UNWEIGHTED/, /MPI_FORTRAN_WEIGHTS_EMPTY/"),
        "! Functions with results.",
        fixed("DOUBLE PRECISION MPI_WTIME, MPI_WTICK"),
        fixed("EXTERNAL MPI_WTIME, MPI_WTICK"),
        fixed("INTEGER(MPI_ADDRESS_KIND) MPI_AINT_ADD, MPI_AINT_DIFF"),
        fixed("EXTERNAL MPI_AINT_ADD, MPI_AINT_DIFF"),
        "! The predefined attribute copy and delete procedures.",
        fixed("EXTERNAL MPI_NULL_COPY_FN, MPI_DUP_FN, MPI_NULL_DELETE_FN"),
        fixed("EXTERNAL MPI_COMM_NULL_COPY_FN, MPI_COMM_DUP_FN"),
        fixed("EXTERNAL MPI_COMM_NULL_DELETE_FN"),
        fixed("EXTERNAL MPI_TYPE_NULL_COPY_FN, MPI_TYPE_DUP_FN"),
        fixed("EXTERNAL MPI_TYPE_NULL_DELETE_FN"),
        fixed("EXTERNAL MPI_WIN_NULL_COPY_FN, MPI_WIN_DUP_FN"),
        fixed("EXTERNAL MPI_WIN_NULL_DELETE_FN"),
    ]
    return "\n".join(lines) + "\n"


MODULE_TEXT = """! mpi.f90: the `mpi` module of bulkwire's MPI (use mpi): the constants of mpif.h
! in a module. Procedures have implicit interfaces, as with mpif.h, so buffers of
! any type and rank pass. bwmpifort compiles this for the Fortran compiler in use.
! GENERATED by scripts/gen-mpi-fortran.py: edit the script.
module mpi
    implicit none
    include 'mpif.h'
end module mpi
"""


def implemented():
    """The MPI functions crates/mpi/src defines, by name."""
    names = set()
    for dirpath, _, files in os.walk(os.path.join(ROOT, "crates/mpi/src")):
        for f in files:
            if f.endswith(".rs"):
                src = open(os.path.join(dirpath, f)).read()
                # `fn MPI_X(` (plain or inside a macro's arguments), and the lists of
                # names given to macros that define several (`MPI_Send MPI_Isend ...`).
                names.update(re.findall(r"\bfn (MPI_[A-Z]\w*)\s*\(", src))
                for line in re.findall(r"^\s+((?:MPI_[A-Z]\w*\s+){1,}MPI_[A-Z]\w*)\b", src, re.M):
                    names.update(line.split())
    return names


# Called by the hand-written preamble.
HAND_NEEDS = {
    "MPI_Init", "MPI_Init_thread", "MPI_Wtime", "MPI_Wtick", "MPI_Pcontrol", "MPI_Op_create",
    "MPI_Aint_add", "MPI_Aint_diff", "MPI_Info_get", "MPI_Comm_size", "MPI_Attr_put",
    "MPI_Attr_get", "MPI_Keyval_create",
}
# Hand-written entry points bound only where the library has the C functions they call:
# Fortran name, C functions.
HAND_OPTIONAL = [
    ("mpi_alltoallw_", ["MPI_Alltoallw"]),
    ("mpi_ialltoallw_", ["MPI_Ialltoallw"]),
    ("mpi_comm_set_attr_", ["MPI_Comm_set_attr", "MPI_Comm_get_attr"]),
    ("mpi_comm_get_attr_", ["MPI_Comm_set_attr", "MPI_Comm_get_attr"]),
    ("mpi_type_set_attr_", ["MPI_Type_set_attr", "MPI_Type_get_attr"]),
    ("mpi_type_get_attr_", ["MPI_Type_set_attr", "MPI_Type_get_attr"]),
    ("mpi_win_set_attr_", ["MPI_Win_set_attr", "MPI_Win_get_attr"]),
    ("mpi_win_get_attr_", ["MPI_Win_set_attr", "MPI_Win_get_attr"]),
    ("mpi_comm_create_keyval_", ["MPI_Comm_create_keyval"]),
    ("mpi_type_create_keyval_", ["MPI_Type_create_keyval"]),
    ("mpi_win_create_keyval_", ["MPI_Win_create_keyval"]),
    ("mpi_comm_create_errhandler_", ["MPI_Comm_create_errhandler"]),
]


PROFILING = os.path.join(ROOT, "crates/capi/csrc/mpi_profiling.c")
PROFILING_SYMS = os.path.join(ROOT, "crates/capi/csrc/mpi_profiling.syms")
PMPI_BEGIN = "/* ---- The profiling interface: PMPI_ names (GENERATED by scripts/gen-mpi-fortran.py) */\n"
PMPI_END = "/* ---- End of the profiling interface ---------------------------------- */\n"
HEADER_END = "#ifdef __cplusplus\n}\n#endif\n\n#endif /* BULKWIRE_MPI_H */\n"


def c_prototypes(text):
    """(return type, name, parameter list, parameter names) of every C function of mpi.h,
    whatever it returns; the names are None for a variadic one."""
    out = []
    for m in re.finditer(r"^([A-Za-z_][\w ]*?) (MPI_\w+)\((.*)\);$", text, re.M):
        ret, name, args = m.groups()
        if args.strip() == "void":
            names = []
        elif "..." in args:
            names = None
        else:
            names = [re.search(r"(\w+)\s*(?:\[\d*\])*$", a.strip()).group(1)
                     for a in args.split(",")]
        out.append((ret, name, args, names))
    return out


def gen_header(text, protos):
    """mpi.h with its PMPI_ block (re)written before the header's end."""
    if PMPI_BEGIN in text:
        i = text.index(PMPI_BEGIN)
        j = text.index(PMPI_END) + len(PMPI_END)
        text = text[:i].rstrip("\n") + "\n" + text[j:].lstrip("\n")
    if not text.endswith(HEADER_END):
        sys.exit("mpi.h does not end as the script expects (the extern \"C\" block's end)")
    block = PMPI_BEGIN + "".join(f"{r} P{n}({a});\n" for r, n, a, _ in protos) + PMPI_END
    return text[: -len(HEADER_END)].rstrip("\n") + "\n\n" + block + "\n" + HEADER_END


def plain_exports():
    """The MPI functions crates/mpi/src exports under their MPI_ names (no_mangle): those
    mpi.h leaves out."""
    names = set()
    for dirpath, _, files in os.walk(os.path.join(ROOT, "crates/mpi/src")):
        for f in files:
            if f.endswith(".rs"):
                src = open(os.path.join(dirpath, f)).read()
                names.update(re.findall(
                    r"#\[unsafe\(no_mangle\)\]\s*pub (?:unsafe )?extern \"C\" fn (MPI_\w+)", src))
    return names


def gen_profiling(protos, have):
    """mpi_profiling.c and its symbol list: a weak MPI_X for every PMPI_X the library has."""
    plain = sorted(plain_exports() & {n for _, n, _, _ in protos})
    if plain:
        sys.exit("mpi.h declares functions the library exports as MPI_X, not PMPI_X "
                 "(#[unsafe(export_name = \"PMPI_X\")], for the profiling interface): "
                 + ", ".join(plain))
    parts = ["""/*
 * mpi_profiling.c: the MPI names of bulkwire's MPI, for the profiling interface (the MPI
 * standard's chapter 15). The library defines each function as PMPI_X; MPI_X here is a
 * weak function calling it, so a program (or a tool linked into it) that defines its own
 * MPI_X replaces it, and reaches the library through PMPI_X.
 *
 * GENERATED by scripts/gen-mpi-fortran.py from crates/mpi/include/mpi.h: edit the script,
 * not this file.
 */
#include "mpi.h"

#define WEAK __attribute__((weak))
"""]
    syms = []
    for ret, name, args, names in protos:
        if name not in have:
            continue
        # The only variadic call, MPI_Pcontrol, ignores its variable arguments.
        fwd = ", ".join(names) if names is not None else "level"
        ret_kw = "return " if ret != "void" else ""
        parts.append(f"WEAK {ret} {name}({args})\n{{\n    {ret_kw}P{name}({fwd});\n}}\n")
        syms.append(name)
    return "\n".join(parts), "\n".join(syms) + "\n"


def main():
    check = "--check" in sys.argv[1:]
    text = open(HEADER).read()
    have = implemented()
    missing_hand = sorted(HAND_NEEDS - have)
    if missing_hand:
        sys.exit("the library lacks functions the hand-written bindings call: "
                 + ", ".join(missing_hand))
    wrappers = []
    syms = list(HAND_SYMS)
    have_defs = set()
    for fname, needs in HAND_OPTIONAL:
        if all(n in have for n in needs):
            syms.append(fname)
            have_defs.update(needs)
    have_h = ("/* mpi_fortran_have.h: which optional C functions libbulkwire defines, for\n"
              " * mpi_fortran.c. GENERATED by scripts/gen-mpi-fortran.py. */\n"
              + "".join(f"#define HAVE_{n} 1\n" for n in sorted(have_defs)))
    unbound = []
    absent = []
    for ret, name, params in parse_prototypes(text):
        if name in HAND or name.endswith(("_c2f", "_f2c")):
            continue
        if name not in have:
            absent.append(name)
            continue
        if name in SKIP or params is None or ret != "int":
            unbound.append(name)
            continue
        g = gen_wrapper(name, params)
        if g is None:
            unbound.append(name)
            continue
        fname, code = g
        syms += [fname, "p" + fname]
        wrappers.append(code)
    csrc = PREAMBLE + "\n" + "\n\n".join(wrappers) + "\n"
    csrc += "\n/* Not bound (C function pointers or C-only arguments): " + ", ".join(unbound) + ". */\n"
    csrc += "\n/* Not in the library (not bound until they are): " + (", ".join(absent) or "none") + ". */\n"
    protos = c_prototypes(text)
    profiling, profiling_syms = gen_profiling(protos, have)
    outputs = {
        HEADER: gen_header(text, protos),
        PROFILING: profiling,
        PROFILING_SYMS: profiling_syms,
        MPIF: gen_mpif(text),
        MODULE: MODULE_TEXT,
        CSRC: csrc,
        HAVE: have_h,
        SYMS: "\n".join(syms) + "\n",
    }
    if check:
        stale = [os.path.relpath(p, ROOT) for p, c in outputs.items()
                 if not os.path.exists(p) or open(p).read() != c]
        if stale:
            sys.exit("out of date (run scripts/gen-mpi-fortran.py): " + ", ".join(stale))
        return
    for path, content in outputs.items():
        with open(path, "w") as f:
            f.write(content)
    print(f"{len(syms)} symbols; not bound: {', '.join(unbound) or 'none'}; "
          f"not in the library: {len(absent)}", file=sys.stderr)


if __name__ == "__main__":
    main()
