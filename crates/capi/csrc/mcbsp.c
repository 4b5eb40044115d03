/* MulticoreBSP for C's affinity, profiling and checkpointing calls (mcbsp-affinity.h,
 * mcbsp-profiling.h, mcbsp-resiliency.h). bulkwire places its processes itself, so the
 * settings are recorded for the getters; see the headers for what has an effect. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bsp.h"
#include "mcbsp-affinity.h"
#include "mcbsp-profiling.h"
#include "mcbsp-resiliency.h"

enum mcbsp_affinity_mode MCBSP_DEFAULT_AFFINITY = SCATTER;
size_t MCBSP_DEFAULT_THREADS_PER_CORE = 1;
enum mcbsp_thread_numbering MCBSP_DEFAULT_THREAD_NUMBERING = CONSECUTIVE;

/* What the program set; 0 / NULL / -1 where it set nothing. */
static struct {
    size_t max_threads;
    int mode;
    size_t cores;
    size_t threads_per_core;
    int numbering;
    size_t *pinning;
    size_t pinning_len;
    size_t *reserved;
    size_t reserved_len;
    size_t cp_frequency;
    size_t safe_cp_frequency;
} set = {0, -1, 0, 0, -1, NULL, 0, NULL, 0, 0, 0};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* Read from Rust by mcbsp_nprocs (crates/capi/src/mcbsp.rs). */
size_t bulkwire_mcbsp_max_threads(void) {
    pthread_mutex_lock(&lock);
    size_t n = set.max_threads;
    pthread_mutex_unlock(&lock);
    return n;
}

static size_t hardware_threads(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (size_t)n : 1;
}

/* A copy of n values (NULL for none), or NULL when memory is short. */
static size_t *copy(const size_t *from, size_t n) {
    if (from == NULL || n == 0) return NULL;
    size_t *to = malloc(n * sizeof *to);
    if (to != NULL) memcpy(to, from, n * sizeof *to);
    return to;
}

void mcbsp_set_maximum_threads(size_t max) {
    pthread_mutex_lock(&lock);
    set.max_threads = max;
    pthread_mutex_unlock(&lock);
}

void mcbsp_set_affinity_mode(enum mcbsp_affinity_mode mode) {
    pthread_mutex_lock(&lock);
    set.mode = (int)mode;
    pthread_mutex_unlock(&lock);
}

void mcbsp_set_available_cores(size_t num_cores) {
    pthread_mutex_lock(&lock);
    set.cores = num_cores;
    pthread_mutex_unlock(&lock);
}

void mcbsp_set_threads_per_core(size_t threads_per_core) {
    pthread_mutex_lock(&lock);
    set.threads_per_core = threads_per_core;
    pthread_mutex_unlock(&lock);
}

void mcbsp_set_thread_numbering(enum mcbsp_thread_numbering numbering) {
    pthread_mutex_lock(&lock);
    set.numbering = (int)numbering;
    pthread_mutex_unlock(&lock);
}

void mcbsp_set_pinning(const size_t *pinning, size_t length) {
    size_t *c = copy(pinning, length);
    pthread_mutex_lock(&lock);
    free(set.pinning);
    set.pinning = c;
    set.pinning_len = c != NULL ? length : 0;
    set.max_threads = length;
    set.mode = MANUAL;
    pthread_mutex_unlock(&lock);
}

void mcbsp_set_reserved_cores(const size_t *reserved, size_t length) {
    size_t *c = copy(reserved, length);
    pthread_mutex_lock(&lock);
    free(set.reserved);
    set.reserved = c;
    set.reserved_len = c != NULL ? length : 0;
    pthread_mutex_unlock(&lock);
}

size_t mcbsp_get_maximum_threads(void) {
    size_t n = bulkwire_mcbsp_max_threads();
    return n > 0 ? n : hardware_threads();
}

enum mcbsp_affinity_mode mcbsp_get_affinity_mode(void) {
    pthread_mutex_lock(&lock);
    int m = set.mode;
    pthread_mutex_unlock(&lock);
    return m >= 0 ? (enum mcbsp_affinity_mode)m : MCBSP_DEFAULT_AFFINITY;
}

size_t mcbsp_get_threads_per_core(void) {
    pthread_mutex_lock(&lock);
    size_t t = set.threads_per_core;
    pthread_mutex_unlock(&lock);
    return t > 0 ? t : (MCBSP_DEFAULT_THREADS_PER_CORE > 0 ? MCBSP_DEFAULT_THREADS_PER_CORE : 1);
}

size_t mcbsp_get_available_cores(void) {
    pthread_mutex_lock(&lock);
    size_t c = set.cores;
    pthread_mutex_unlock(&lock);
    return c > 0 ? c : hardware_threads() / mcbsp_get_threads_per_core();
}

enum mcbsp_thread_numbering mcbsp_get_thread_numbering(void) {
    pthread_mutex_lock(&lock);
    int n = set.numbering;
    pthread_mutex_unlock(&lock);
    return n >= 0 ? (enum mcbsp_thread_numbering)n : MCBSP_DEFAULT_THREAD_NUMBERING;
}

size_t *mcbsp_get_pinning(void) {
    pthread_mutex_lock(&lock);
    size_t *c = copy(set.pinning, set.pinning_len);
    pthread_mutex_unlock(&lock);
    return c;
}

size_t mcbsp_get_reserved_cores_number(void) {
    pthread_mutex_lock(&lock);
    size_t n = set.reserved_len;
    pthread_mutex_unlock(&lock);
    return n;
}

size_t *mcbsp_get_reserved_cores(void) {
    pthread_mutex_lock(&lock);
    size_t *c = copy(set.reserved, set.reserved_len);
    pthread_mutex_unlock(&lock);
    return c;
}

void mcbsp_profiling_set_description(const char *name) { (void)name; }

void mcbsp_checkpoint(void) { bsp_sync(); }

void mcbsp_enable_checkpoints(void) {}

void mcbsp_disable_checkpoints(void) {}

void mcbsp_set_checkpoint_frequency(size_t frequency) {
    pthread_mutex_lock(&lock);
    set.cp_frequency = frequency;
    pthread_mutex_unlock(&lock);
}

size_t mcbsp_get_checkpoint_frequency(void) {
    pthread_mutex_lock(&lock);
    size_t f = set.cp_frequency;
    pthread_mutex_unlock(&lock);
    return f;
}

void mcbsp_set_safe_checkpoint_frequency(size_t frequency) {
    pthread_mutex_lock(&lock);
    set.safe_cp_frequency = frequency;
    pthread_mutex_unlock(&lock);
}

size_t mcbsp_get_safe_checkpoint_frequency(void) {
    pthread_mutex_lock(&lock);
    size_t f = set.safe_cp_frequency;
    pthread_mutex_unlock(&lock);
    return f;
}
