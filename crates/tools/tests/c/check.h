/* Checks for the C conformance tests: a failed check aborts the job naming the place. */
#ifndef CHECK_H
#define CHECK_H
#include <bsp.h>

#define CHECK(cond)                                                                    \
    do {                                                                               \
        if (!(cond))                                                                   \
            bsp_abort("CHECK failed at %s:%d (pid %d): %s", __FILE__, __LINE__,        \
                      bsp_pid(), #cond);                                               \
    } while (0)

#define CHECK_EQ(a, b)                                                                 \
    do {                                                                               \
        long long a_ = (long long)(a), b_ = (long long)(b);                            \
        if (a_ != b_)                                                                  \
            bsp_abort("CHECK failed at %s:%d (pid %d): %s is %lld, expected %lld",     \
                      __FILE__, __LINE__, bsp_pid(), #a, a_, b_);                      \
    } while (0)

#endif
