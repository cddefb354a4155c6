/* Collective and point-to-point communication within one group of ranks.
 *
 * The model and the trainer call only these functions; they never see MPI or
 * NCCL. A tri_comm is one group (TP, DP, PP, ...). A group of size 1 takes the
 * trivial path in the wrappers (in-place ops are no-ops, copies are memcpy),
 * so a single-rank run needs no transport at all.
 *
 * Buffers are host (CPU backend) or device (CUDA backend) memory of the
 * backend in use, except in the _host forms (small control values in host
 * memory: a loss, a norm, a stop flag, a checkpoint path). A group whose
 * transport reads device memory only (NCCL: device_only below) must never be
 * handed host memory by the other calls; the _host forms stage through a
 * backend buffer there (docs/cuda.md "Multi-GPU"). All calls are collective over the group unless they say
 * otherwise. A failure inside a transport is fatal: it prints the rank and the
 * call, and aborts every rank (a half-finished collective cannot be recovered).
 * So is a wait that outlasts the group's timeout_s (a peer stopped, wedged or
 * gone): the transport reports it and aborts the job (exit code 124), so no
 * call here blocks forever.
 *
 * 16-bit floats (TRI_BF16, TRI_F16): moved as raw 16-bit words by the
 * all-gathers, broadcasts and sends; a reduction (all-reduce,
 * reduce-scatter) of them is done by the wrappers for any transport: widened
 * to fp32, reduced in fp32, rounded once to nearest even (the non-blocking
 * forms then complete at once). Transports never see a 16-bit reduction.
 */
#ifndef TRI_COMM_H
#define TRI_COMM_H

#include <stddef.h>

#include "kernels/ctx.h"
#include "kernels/dtype.h"

typedef enum { TRI_SUM = 0, TRI_MAX = 1 } tri_redop;

/* A pending non-blocking operation; complete it with tri_comm_wait. */
typedef struct tri_req {
    unsigned char opaque[16];
    int active;
    /* what is pending, for the watchdog's report (set by the transport) */
    const char *op; /* "all-reduce", "reduce-scatter", "send", ...  */
    size_t bytes;   /* its payload                                  */
    int peer, tag;  /* p2p: the peer's index in the group; -1 else  */
    /* the transport's fix-up on completion (an in-place reduce-scatter whose
     * result the transport leaves at the start of the buffer): move
     * shift_bytes from shift_base to shift_base + rank * shift_bytes */
    unsigned char *shift_base;
    size_t shift_bytes;
} tri_req;

struct tri_comm;
struct tri_progress;

/* A transport implements these for groups of size > 1. */
typedef struct tri_comm_impl {
    const char *name;
    /* 1: the transport reads and writes backend memory on the device itself,
     * ordered after the compute stream by its own events (NCCL): the wrappers
     * open no host window (which would synchronise the compute stream) and
     * hand it 16-bit reductions as they are (NCCL sums bf16 and fp16) */
    int device;
    void (*allreduce)(struct tri_comm *c, void *buf, size_t n, tri_dtype t, tri_redop op);
    void (*iallreduce)(struct tri_comm *c, void *buf, size_t n, tri_dtype t, tri_redop op, tri_req *r);
    /* recv (n) = sum over ranks of the rank-th n-slice of send (size*n)   */
    void (*reduce_scatter)(struct tri_comm *c, void *recv, const void *send, size_t n, tri_dtype t);
    /* recv (size*n) = concatenation of every rank's send (n)               */
    void (*allgather)(struct tri_comm *c, void *recv, const void *send, size_t n, tri_dtype t);
    /* the non-blocking forms of the two above, completed by wait/test; recv
     * may be this rank's slot of send (reduce-scatter) or send this rank's
     * slot of recv (all-gather): in place */
    void (*ireduce_scatter)(struct tri_comm *c, void *recv, const void *send, size_t n, tri_dtype t, tri_req *r);
    void (*iallgather)(struct tri_comm *c, void *recv, const void *send, size_t n, tri_dtype t, tri_req *r);
    void (*broadcast)(struct tri_comm *c, void *buf, size_t n, tri_dtype t, int root);
    void (*isend)(struct tri_comm *c, const void *buf, size_t n, tri_dtype t, int peer, int tag, tri_req *r);
    void (*irecv)(struct tri_comm *c, void *buf, size_t n, tri_dtype t, int peer, int tag, tri_req *r);
    void (*wait)(struct tri_comm *c, tri_req *r);
    /* non-blocking: 1 (and r completed) when r is done, else 0 */
    int (*test)(struct tri_comm *c, tri_req *r);
    void (*barrier)(struct tri_comm *c);
    void (*free)(struct tri_comm *c);
} tri_comm_impl;

/* What a group's calls cost this rank, counted by the wrappers. */
typedef struct tri_comm_stats {
    unsigned long long calls; /* collective and p2p calls made          */
    unsigned long long bytes; /* payload bytes of those calls: all-reduce,
                                   broadcast, send: the buffer; reduce-scatter:
                                   its whole input; all-gather: its own part */
    double seconds;           /* wall time inside blocking calls and
                                   waits (the exposed communication time) */
} tri_comm_stats;

typedef struct tri_comm {
    int size;                  /* ranks in the group                     */
    int rank;                  /* this rank's index in the group         */
    int world_rank;            /* for messages                           */
    const tri_comm_impl *impl; /* NULL when size == 1                    */
    void *handle;              /* the transport's communicator           */
    tri_comm_stats stats;      /* zeroed at init; the caller may reset it */
    tri_ctx *ctx;              /* the backend context whose memory the calls
                                   touch (stream, guard); NULL: host memory */
    /* The watchdog (parallel/watchdog.h): a transport ends every wait of
     * this group after timeout_s, printing the rank, *progress, name, the
     * operation and the peers, and aborts the job. Zeroed at init (no
     * deadline); tri_dist sets them for its groups. */
    double timeout_s;                    /* <= 0: no deadline                */
    const struct tri_progress *progress; /* where the caller is; may be NULL */
    char name[8];                        /* "tp", "dp", "pp", "emb", "world" */
    /* Every buffer of every call is backend memory of ctx (set by tri_dist
     * for NCCL groups, and by tri_dist_check_device_memory for the test that
     * stands in for them). The wrappers check each buffer where the ctx can
     * tell (tri_ctx_owns: "cpu-guard") and end the job naming the rank, the
     * group, the call and the buffer when one is host memory; a group of one
     * copies with the backend's copy, not memmove; the _host forms stage. */
    int device_only;
} tri_comm;

/* A group of one: every call below is trivial on it. */
void tri_comm_init_self(tri_comm *c, int world_rank);

void tri_comm_allreduce(tri_comm *c, void *buf, size_t n, tri_dtype t, tri_redop op);
/* Starts an all-reduce; buf must not be touched until tri_comm_wait(r). */
void tri_comm_iallreduce(tri_comm *c, void *buf, size_t n, tri_dtype t, tri_redop op, tri_req *r);
void tri_comm_reduce_scatter(tri_comm *c, void *recv, const void *send, size_t n, tri_dtype t);
void tri_comm_allgather(tri_comm *c, void *recv, const void *send, size_t n, tri_dtype t);
/* Starts a reduce-scatter (sum): recv (n) = the sum over ranks of their
 * send[rank*n, rank*n + n). recv must not overlap send (size*n), except
 * recv == send + rank*n exactly (in place: this rank's slice of send). Neither
 * buffer may be touched until tri_comm_wait(r); after it the rest of send is
 * undefined when in place. Watched by the group's deadline like every wait. */
void tri_comm_ireduce_scatter(tri_comm *c, void *recv, const void *send, size_t n, tri_dtype t, tri_req *r);
/* Starts an all-gather: recv (size*n) = every rank's send (n) in rank order;
 * send may be recv + rank*n (in place), no other overlap. Completed by
 * tri_comm_wait(r). */
void tri_comm_iallgather(tri_comm *c, void *recv, const void *send, size_t n, tri_dtype t, tri_req *r);
void tri_comm_broadcast(tri_comm *c, void *buf, size_t n, tri_dtype t, int root);
/* The _host forms: buf (recv, send) is host memory holding a few control
 * values. On a device_only group (a context must be bound) each call
 * allocates a backend scratch buffer (TRI_MEM_OTHER), copies in, runs the
 * call above on it, copies out and frees it: synchronous and not fast, for a
 * handful of values per step; elsewhere each is the call above. */
void tri_comm_allreduce_host(tri_comm *c, void *buf, size_t n, tri_dtype t, tri_redop op);
void tri_comm_allgather_host(tri_comm *c, void *recv, const void *send, size_t n, tri_dtype t);
void tri_comm_broadcast_host(tri_comm *c, void *buf, size_t n, tri_dtype t, int root);
/* Point-to-point (not collective): peer is a rank index within the group. */
void tri_comm_isend(tri_comm *c, const void *buf, size_t n, tri_dtype t, int peer, int tag, tri_req *r);
void tri_comm_irecv(tri_comm *c, void *buf, size_t n, tri_dtype t, int peer, int tag, tri_req *r);
/* Completes r; a request that was never started (active == 0) returns at once. */
void tri_comm_wait(tri_comm *c, tri_req *r);
/* Does not block: 1 when r has completed (it is then finished as by
 * tri_comm_wait), 0 while it is pending. A request never started is done. */
int tri_comm_test(tri_comm *c, tri_req *r);
void tri_comm_barrier(tri_comm *c);
/* NULL-safe; leaves a group of one. */
void tri_comm_free(tri_comm *c);

#endif
