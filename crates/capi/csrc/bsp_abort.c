/* bsp_abort and its variants (the Oxford toolset's bsp_vabort, BSPonMPI's bsp_abort_va,
 * MulticoreBSP's mcbsp_abort and mcbsp_vabort): format the message, then end the job from
 * Rust. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "bsp.h"

/* Implemented in Rust (crates/capi/src/bsp.rs): stops every process of the job, the
 * launcher printing the message once; never returns. */
extern void bulkwire_bsp_abort_message(const char *msg) __attribute__((noreturn));

void bsp_vabort(const char *format, va_list args) {
    char small[1024];
    va_list copy;
    if (format == NULL) {
        bulkwire_bsp_abort_message("bsp_abort (no message)");
    }
    va_copy(copy, args);
    int n = vsnprintf(small, sizeof small, format, copy);
    va_end(copy);
    if (n < 0) {
        bulkwire_bsp_abort_message(format);
    }
    if ((size_t)n >= sizeof small) {
        char *big = malloc((size_t)n + 1);
        if (big != NULL) {
            vsnprintf(big, (size_t)n + 1, format, args);
            bulkwire_bsp_abort_message(big);
        }
    }
    bulkwire_bsp_abort_message(small);
}

void bsp_abort(const char *format, ...) {
    va_list args;
    va_start(args, format);
    bsp_vabort(format, args);
    va_end(args); /* not reached */
}

void bsp_abort_va(const char *format, va_list args) { bsp_vabort(format, args); }

void mcbsp_vabort(const char *format, va_list args) { bsp_vabort(format, args); }

void mcbsp_abort(const char *format, ...) {
    va_list args;
    va_start(args, format);
    bsp_vabort(format, args);
    va_end(args); /* not reached */
}
