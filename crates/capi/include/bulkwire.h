/*
 * bulkwire.h: point-to-point messaging (MPI-style send, receive, wait) and collectives
 * (barrier, broadcast, scatter, gather, allgather, alltoall(v), reduce, allreduce) for C.
 *
 * Build with bspcc, or with the flags of `pkg-config --cflags --libs bulkwire` (shared)
 * or `bulkwire-static` (libbulkwire.a) after make install. Run under `bsprun -n P ./prog`,
 * under srun, mpirun or mpiexec (the job forms through their PMI or PMIx service, or for
 * srun without PMI from its job id: docs/launch.md), or alone (bw_init makes a job of one
 * process; bw_init_spawn(P) starts P copies itself).
 *
 * Point-to-point messages are bytes: counts are in bytes. Tags are 0 to 2147483647.
 * Messages from one source with one tag are received in the order they were sent. A
 * message longer than the receive buffer completes its receive with BW_ERR_TRUNCATE (the
 * status gives the message's full length). Every call returns BW_SUCCESS or an error
 * code; for the message naming the peer, call bw_last_error() on the same thread.
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

/* ---- Collectives -------------------------------------------------------------------
 *
 * Every process of the job calls the same collectives in the same order with matching
 * arguments (MPI's rule); calls from several threads are serialised. Counts are in
 * elements of a bw_datatype (bytes: BW_BYTE). The first collective call sets the
 * collectives up (on every process at once, as it is collective); bw_finalize ends them.
 *
 * Algorithms follow message size and process count; when every process runs on one host
 * the data goes through a shared segment (the network cache) unless BULKWIRE_COLL=p2p.
 * See docs/collectives.md.
 *
 * Errors. Arguments are checked before anything is sent: a NULL buffer with a nonzero
 * count, a root out of range, a count too large, a bad datatype or operation return a
 * code at once on the process that passed them, and nothing is communicated (if only
 * some processes passed bad arguments, the others wait in the collective: end the job
 * with bw_abort). A collective that fails while communicating (a dead peer, sizes that
 * differ between processes) fails the whole job: every process's collective returns an
 * error naming the cause, and further collectives return BW_ERR_JOB_FAILED.
 * bw_last_error() names the call, this process's rank and the bounds, e.g.
 * "bw_bcast on rank 1 of 4: root 4 is out of range: the ranks are 0 to 3". */

/* More error codes. */
#define BW_ERR_ROOT 14         /* root out of range */
#define BW_ERR_COUNT 15        /* count too large for the address space */
#define BW_ERR_DATATYPE 16     /* not a bw_datatype */
#define BW_ERR_OP 17           /* not a built-in operation nor a live user operation */

typedef int bw_datatype;
#define BW_INT8 1
#define BW_INT16 2
#define BW_INT32 3
#define BW_INT64 4
#define BW_UINT8 5
#define BW_UINT16 6
#define BW_UINT32 7
#define BW_UINT64 8
#define BW_FLOAT 9
#define BW_DOUBLE 10
#define BW_BYTE BW_UINT8
/* Bytes per element (0 for an invalid datatype). */
size_t bw_datatype_size(bw_datatype dt);

/* Reductions. Built-ins work on every datatype; integers wrap on overflow. Results are
 * combined in rank order, x0 op x1 op ... op x(p-1), for operations that are not
 * commutative; built-ins are commutative (floating-point sums may then be added in an
 * order that depends on size and p, as in MPI). */
typedef int bw_op;
#define BW_OP_NULL 0
#define BW_SUM 1
#define BW_MIN 2
#define BW_MAX 3
#define BW_PROD 4

/* A user operation: set inout[i] = in[i] op inout[i] for i < count, where `in` holds the
 * combined values of lower ranks. Both arrays are aligned for dt. Must be associative;
 * pass commutative = 0 unless it is also commutative. May be called from any thread that
 * calls a collective, with the ctx given to bw_op_create. Handles are local to the
 * process (not collective); bw_finalize frees them all. */
typedef void (*bw_user_function)(const void *in, void *inout, size_t count, bw_datatype dt,
                                 void *ctx);
int bw_op_create(bw_user_function function, int commutative, void *ctx, bw_op *op);
int bw_op_free(bw_op *op);              /* sets *op to BW_OP_NULL */

/* Returns once every process has entered it. */
int bw_barrier(void);
/* root's count elements to every process's buf. */
int bw_bcast(void *buf, size_t count, bw_datatype dt, int root);
/* Block j (count elements) of root's sendbuf to process j's recvbuf. sendbuf (size x
 * count elements) is read at the root only; elsewhere it may be NULL. */
int bw_scatter(const void *sendbuf, void *recvbuf, size_t count, bw_datatype dt, int root);
/* Every process's count elements into block i (for rank i) of root's recvbuf (size x
 * count elements), written at the root only; elsewhere it may be NULL. */
int bw_gather(const void *sendbuf, void *recvbuf, size_t count, bw_datatype dt, int root);
/* As bw_gather, with the result at every process. */
int bw_allgather(const void *sendbuf, void *recvbuf, size_t count, bw_datatype dt);
/* Block j of sendbuf to process j, where it lands as block i (the sender's rank) of
 * recvbuf. Both hold size x count elements. */
int bw_alltoall(const void *sendbuf, void *recvbuf, size_t count, bw_datatype dt);
/* Blocks of any length: sendcounts[j] elements at sendbuf + sdispls[j] (elements) to
 * process j; recvcounts[i] elements from process i at recvbuf + rdispls[i]. Each array
 * has size entries; what i sends to j must be what j expects from i; receive blocks must
 * not overlap. */
int bw_alltoallv(const void *sendbuf, const size_t sendcounts[], const size_t sdispls[],
                 void *recvbuf, const size_t recvcounts[], const size_t rdispls[],
                 bw_datatype dt);
/* Elementwise reduction of every process's sendbuf into root's recvbuf (written at the
 * root only; elsewhere it may be NULL). recvbuf == sendbuf at the root: in place. */
int bw_reduce(const void *sendbuf, void *recvbuf, size_t count, bw_datatype dt, bw_op op,
              int root);
/* As bw_reduce, with the result at every process. recvbuf == sendbuf: in place. */
int bw_allreduce(const void *sendbuf, void *recvbuf, size_t count, bw_datatype dt,
                 bw_op op);

#ifdef __cplusplus
}
#endif

#endif /* BULKWIRE_H */
