/*
 * bulkwire.h: point-to-point messaging (MPI-style send, receive, wait) for C.
 *
 * Link with libbulkwire.a (or -lbulkwire) and -lpthread -ldl -lm. Run under
 * `bsprun -n P ./prog`, under Slurm or mpirun with BULKWIRE_RENDEZVOUS set, or alone
 * (bw_init makes a job of one process; bw_init_spawn(P) starts P copies itself).
 *
 * Messages are bytes: counts are in bytes. Tags are 0 to 2147483647. Messages from one
 * source with one tag are received in the order they were sent. A message longer than
 * the receive buffer completes its receive with BW_ERR_TRUNCATE (the status gives the
 * message's full length). Every call returns BW_SUCCESS or an error code; for the
 * message naming the peer, call bw_last_error() on the same thread.
 *
 * Buffers of requests in flight at the same time must not overlap (a send's buffer may
 * be shared by several sends).
 *
 * Threads: any thread may call any function except that bw_init and bw_finalize must not
 * race with other calls. A background thread moves data while the program computes, so
 * a receive posted before a long computation is complete when it returns.
 */
#ifndef BULKWIRE_H
#define BULKWIRE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A request in progress. BW_REQUEST_NULL is an inactive (completed or freed) request. */
typedef uint64_t bw_request;
#define BW_REQUEST_NULL ((bw_request)0)

/* Wildcards for bw_irecv, bw_recv, bw_probe. */
#define BW_ANY_SOURCE (-1)
#define BW_ANY_TAG (-1)
/* bw_waitany / bw_testany index when no request is active. */
#define BW_UNDEFINED (-32766)

/* What a completed request tells. For a receive: the message's source, tag and length
 * in bytes (the full length, also when truncated); for a send: its destination, tag and
 * length. `error` is the request's own outcome (BW_SUCCESS or a code below). */
typedef struct bw_status {
    int source;
    int tag;
    int error;
    size_t count;
} bw_status;

#define BW_STATUS_IGNORE ((bw_status *)0)
#define BW_STATUSES_IGNORE ((bw_status *)0)

/* Error codes. */
#define BW_SUCCESS 0
#define BW_ERR_TRUNCATE 1      /* message longer than the receive buffer */
#define BW_ERR_PEER_DEAD 2     /* the peer stopped answering (source names it) */
#define BW_ERR_JOB_FAILED 3    /* another process of the job died or aborted */
#define BW_ERR_RANK 4          /* no such rank */
#define BW_ERR_TAG 5           /* tag out of range */
#define BW_ERR_REQUEST 6       /* invalid request handle */
#define BW_ERR_ARG 7           /* a null pointer or bad count */
#define BW_ERR_NOT_INITIALIZED 8
#define BW_ERR_INIT 9          /* cannot start, or already started */
#define BW_ERR_TRANSPORT 10    /* the transport failed */
#define BW_ERR_IN_STATUS 11    /* bw_waitall: see each status's error */
#define BW_ERR_CANCELLED 12    /* the receive was cancelled (freed before it matched) */
#define BW_ERR_OTHER 13

/* Start and end. */
int bw_init(int *argc, char ***argv);   /* join the launched job, or a job of one */
int bw_init_spawn(int nprocs);          /* join, or start nprocs copies of this program */
int bw_initialized(int *flag);
int bw_finalize(void);                  /* collective: flush, meet, leave */
void bw_abort(const char *message);     /* end the whole job; does not return */

int bw_rank(int *rank);
int bw_size(int *size);
double bw_wtime(void);                  /* seconds on a monotonic clock */

/* Non-blocking: the buffer must stay valid (and a send buffer unmodified) until the
 * request completes. */
int bw_isend(const void *buf, size_t count, int dest, int tag, bw_request *request);
int bw_irecv(void *buf, size_t count, int source, int tag, bw_request *request);

/* Blocking. */
int bw_send(const void *buf, size_t count, int dest, int tag);
int bw_recv(void *buf, size_t count, int source, int tag, bw_status *status);

/* Completion. A completed request is set to BW_REQUEST_NULL; waiting on
 * BW_REQUEST_NULL returns at once with an empty status. */
int bw_wait(bw_request *request, bw_status *status);
int bw_test(bw_request *request, int *flag, bw_status *status);
int bw_waitall(int count, bw_request requests[], bw_status statuses[]);
int bw_testall(int count, bw_request requests[], int *flag, bw_status statuses[]);
int bw_waitany(int count, bw_request requests[], int *index, bw_status *status);
int bw_testany(int count, bw_request requests[], int *index, int *flag, bw_status *status);
/* Gives a request up: a receive nothing has matched is cancelled; anything else
 * completes in the background (its buffer must stay valid until then). */
int bw_request_free(bw_request *request);

/* The status of the earliest message a receive for (source, tag) would match. */
int bw_iprobe(int source, int tag, int *flag, bw_status *status);
int bw_probe(int source, int tag, bw_status *status);

/* Text of an error code (static), and the detailed message of the last error returned
 * on this thread (valid until the next error on this thread). */
const char *bw_error_string(int code);
const char *bw_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* BULKWIRE_H */
