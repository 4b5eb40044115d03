/* IS, the integer sort: class parameters and the exchanges is.c asks of the library. */
#ifndef NPB_IS_H
#define NPB_IS_H

#include "../common/npb.h"

/* NPB 3 problem sizes (NAS-95-020 and the NPB 3 problem definitions). */
#if CLASS == 'S'
#define TOTAL_KEYS_LOG_2 16
#define MAX_KEY_LOG_2 11
#define NUM_BUCKETS_LOG_2 9
#elif CLASS == 'W'
#define TOTAL_KEYS_LOG_2 20
#define MAX_KEY_LOG_2 16
#define NUM_BUCKETS_LOG_2 10
#elif CLASS == 'A'
#define TOTAL_KEYS_LOG_2 23
#define MAX_KEY_LOG_2 19
#define NUM_BUCKETS_LOG_2 10
#else
#define TOTAL_KEYS_LOG_2 25
#define MAX_KEY_LOG_2 21
#define NUM_BUCKETS_LOG_2 10
#endif

#define TOTAL_KEYS (1L << TOTAL_KEYS_LOG_2)
#define MAX_KEY (1L << MAX_KEY_LOG_2)
#define NUM_BUCKETS (1L << NUM_BUCKETS_LOG_2)
#define MAX_ITERATIONS 10
#define TEST_ARRAY_SIZE 5

/* Registers the receive buffer of the key exchange (capacity keys); collective. */
void is_comm_init(int *recv, long capacity);

/* The key exchange: to every other process d, count[d] keys from send + start[d], landing
 * at dest_off[d] in d's receive buffer; from every other process q, recv_count[q] keys at
 * recv_off[q] in this one's. Nothing is sent to oneself (is.c copies that part). */
void is_comm_keys(const int *send, const long *start, const long *count, const long *dest_off,
                  const long *recv_count, const long *recv_off);

#endif
