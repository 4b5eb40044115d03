/* Checks for the C conformance tests: a failed check aborts the job naming the place.
 *
 * The programs are written once with BSPonMPI's dialect-neutral types (bsp_pid_t,
 * bsp_size_t, bsp_nprocs_t) and compiled in each dialect: the int dialect (bsp.h),
 * MulticoreBSP for C's through bsp.h (bspcc --mcbsp) and through mcbsp.h (-DUSE_MCBSP_H).
 * The types and the signatures of the dialect are checked at compile time here. */
#ifndef CHECK_H
#define CHECK_H

#include <stddef.h>

#ifdef USE_MCBSP_H
#include <mcbsp.h>
#else
#include <bsp.h>
#endif

/* (bsp_size_t)-1: bsp_get_tag's status and bsp_hpmove's result for an empty queue. */
#define NO_MESSAGE ((bsp_size_t)-1)

#define SAME_TYPE(expr, type) _Generic((expr), type: 1, default: 0)

#ifdef BULKWIRE_BSP_DIALECT_MCBSP
#define DIALECT "mcbsp"
_Static_assert(sizeof(bsp_size_t) == sizeof(size_t) && (bsp_size_t)-1 > 0,
               "MulticoreBSP: bsp_size_t is size_t");
_Static_assert(sizeof(bsp_pid_t) == sizeof(unsigned) && (bsp_pid_t)-1 > 0,
               "MulticoreBSP: pids are unsigned");
_Static_assert(SAME_TYPE((bsp_nprocs_t)0, unsigned), "MulticoreBSP: bsp_nprocs_t");
_Static_assert(SAME_TYPE(bsp_nprocs(), unsigned), "bsp_nprocs returns unsigned");
_Static_assert(SAME_TYPE(bsp_pid(), unsigned), "bsp_pid returns unsigned");
_Static_assert(SAME_TYPE(bsp_hpmove(NULL, NULL), size_t), "bsp_hpmove returns size_t");
_Static_assert(SAME_TYPE(&bsp_put, void (*)(unsigned, const void *, const void *, size_t,
                                            size_t)),
               "bsp_put takes size_t offsets and sizes");
_Static_assert(SAME_TYPE(&bsp_get_tag, void (*)(size_t *, void *)),
               "bsp_get_tag's status is a size_t");
_Static_assert(SAME_TYPE(&bsp_qsize, void (*)(unsigned *, size_t *)),
               "bsp_qsize counts in unsigned and size_t");
_Static_assert(SAME_TYPE(&bsp_direct_get, void (*)(unsigned, const void *, size_t, void *,
                                                   size_t)),
               "bsp_direct_get");
_Static_assert(NO_MESSAGE == SIZE_MAX, "an empty queue is SIZE_MAX");
#else
#define DIALECT "int"
_Static_assert(SAME_TYPE((bsp_size_t)0, int) && SAME_TYPE((bsp_pid_t)0, int) &&
                   SAME_TYPE((bsp_nprocs_t)0, int),
               "int dialect: BSPonMPI's types are int");
_Static_assert(SAME_TYPE(bsp_nprocs(), int) && SAME_TYPE(bsp_pid(), int),
               "bsp_nprocs and bsp_pid return int");
_Static_assert(SAME_TYPE(bsp_hpmove(NULL, NULL), int), "bsp_hpmove returns int");
_Static_assert(SAME_TYPE(&bsp_put, void (*)(int, const void *, void *, int, int)),
               "bsp_put takes int offsets and sizes");
_Static_assert(SAME_TYPE(&bsp_get_tag, void (*)(int *, void *)), "bsp_get_tag");
_Static_assert(SAME_TYPE(&bsp_qsize, void (*)(int *, int *)), "bsp_qsize");
_Static_assert(NO_MESSAGE == -1, "an empty queue is -1");
#endif

#define CHECK(cond)                                                                    \
    do {                                                                               \
        if (!(cond))                                                                   \
            bsp_abort("CHECK failed at %s:%d (pid %d, %s dialect): %s", __FILE__,      \
                      __LINE__, (int)bsp_pid(), DIALECT, #cond);                       \
    } while (0)

#define CHECK_EQ(a, b)                                                                 \
    do {                                                                               \
        long long a_ = (long long)(a), b_ = (long long)(b);                            \
        if (a_ != b_)                                                                  \
            bsp_abort("CHECK failed at %s:%d (pid %d, %s dialect): %s is %lld, "       \
                      "expected %lld",                                                 \
                      __FILE__, __LINE__, (int)bsp_pid(), DIALECT, #a, a_, b_);         \
    } while (0)

#endif
