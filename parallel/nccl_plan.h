/* The NCCL transport's logic that needs no NCCL: the type and reduction
 * mapping, each group's ncclCommSplit arguments, the grouping of
 * point-to-point calls into ncclGroupStart/End batches with their completion
 * events, and the failure message. parallel/comm_nccl.c (CUDA builds only)
 * drives NCCL and CUDA from these; tests/parallel/test_nccl_plan.c tests them on any
 * machine.
 *
 * Grouping (why and how): NCCL matches a send with its receive only inside
 * one ncclGroupStart/End or in the same order on both ranks; the pipeline
 * executor (parallel/pipeline.c) posts one batch's isend/irecv back to back and
 * then waits, and two stages exchanging in both directions would deadlock if
 * each call ran alone. So the transport opens a group at the first p2p call
 * and keeps it open for the following ones; the group is closed (ncclGroupEnd,
 * then one event recorded on the communicator's stream) by the first wait or
 * test on any request, by any collective or barrier, by a p2p call on another
 * communicator, and by freeing the communicator. Every request of one group
 * completes with that group's event.
 *
 * Events live in slots: a collective takes one slot, a p2p group one slot
 * shared by its requests; a slot is free again once every request that uses
 * it has completed, and new slots are appended (the caller creates one event
 * per new slot and keeps them for reuse).
 *
 * Ordering between the compute stream and a group's communication stream,
 * both ways on the GPU (host waits come on top, never instead):
 *   - before every call, the communication stream waits on an event recorded
 *     on the compute stream just then, so a buffer to send or reduce is read
 *     only after the kernels queued before the call wrote it;
 *   - after a call, the compute stream waits on the call's completion event
 *     (its slot's), so nothing queued on it afterwards reads a reduced or
 *     received buffer, overwrites one a send still reads, or frees either,
 *     before NCCL is done with it: for a blocking collective right after the
 *     call, for a request (iallreduce, isend, irecv) at the wait or test that
 *     completes it, so that compute queued in between still overlaps. One
 *     such wait per use of a slot is enough: the requests of a p2p group
 *     share one event (tri_p2p_fence).
 */
#ifndef TRI_NCCL_PLAN_H
#define TRI_NCCL_PLAN_H

#include <stddef.h>

#include "kernels/dtype.h"
#include "parallel/comm.h"
#include "parallel/mesh.h"

/* NCCL's enumerator values (nccl.h, stable across 2.x); comm_nccl.c checks
 * each against nccl.h at compile time. */
enum {
    TRI_NCCL_INT8 = 0,
    TRI_NCCL_UINT8 = 1,
    TRI_NCCL_INT32 = 2,
    TRI_NCCL_UINT32 = 3,
    TRI_NCCL_INT64 = 4,
    TRI_NCCL_UINT64 = 5,
    TRI_NCCL_FLOAT16 = 6,
    TRI_NCCL_FLOAT32 = 7,
    TRI_NCCL_FLOAT64 = 8,
    TRI_NCCL_BFLOAT16 = 9,
};
enum { TRI_NCCL_SUM = 0, TRI_NCCL_PROD = 1, TRI_NCCL_MAX = 2, TRI_NCCL_MIN = 3, TRI_NCCL_AVG = 4 };
#define TRI_NCCL_NOCOLOR (-1) /* NCCL_SPLIT_NOCOLOR */

/* The NCCL type carrying t, or -1 for an unknown t. */
int tri_nccl_dtype(tri_dtype t);
/* Bytes per element of an NCCL type; 0 for an unknown one. */
size_t tri_nccl_dtype_bytes(int nccl_type);
/* The NCCL reduction of op, or -1 for an unknown op. */
int tri_nccl_redop(tri_redop op);

/* ncclCommSplit's arguments (over the world communicator) that make this
 * rank's group of `kind`: ranks with equal *color form one group ordered by
 * *key, so the NCCL rank equals the mesh's group index; TRI_NCCL_NOCOLOR for a
 * rank in no group of that kind (TRI_GROUP_EMB on a middle stage). */
void tri_nccl_split_args(const tri_mesh *m, tri_group_kind kind, int *color, int *key);

/* ------------------------------------------------------------------------ */
/* Grouping of p2p calls, shared by every communicator of one process       */

typedef struct tri_p2p_batcher {
    int open;         /* a group is open: ncclGroupStart called, End not yet */
    int open_comm;    /* the communicator (caller's id) its calls go to      */
    int open_slot;    /* the event slot its requests complete with            */
    int open_calls;   /* calls in it so far                                   */
    int *refs;        /* per slot: requests using it not yet completed        */
    int *fenced;      /* per slot: the compute stream waits on it (this use)  */
    int n_slots, cap; /* slots made (= events the caller created)             */
    unsigned long groups_closed;
} tri_p2p_batcher;

/* What the transport does around one call, in this order:
 *   close_group: ncclGroupEnd, then record event[close_slot] on the stream
 *                of communicator close_comm (an open group must end first);
 *   new_slot:    create event[slot] (slot == number of events so far);
 *   group_start: ncclGroupStart;
 *   the call itself; a collective then records event[slot] on its stream. */
typedef struct tri_nccl_step {
    int close_group, close_slot, close_comm;
    int new_slot;
    int group_start;
    int slot; /* the slot the call's request waits on */
} tri_nccl_step;

/* Zero-initialised; NULL-safe free. */
void tri_p2p_init(tri_p2p_batcher *b);
void tri_p2p_free(tri_p2p_batcher *b);
/* A send or receive on communicator `comm`. Returns 0, or -1 when out of memory. */
int tri_p2p_post(tri_p2p_batcher *b, int comm, tri_nccl_step *st);
/* A collective (or barrier) on `comm`: ends an open group, takes a slot of its own. */
int tri_p2p_collective(tri_p2p_batcher *b, int comm, tri_nccl_step *st);
/* Before a wait, a test or a free: 1 when a group was open (now closed: the
 * caller ends it and records event[*slot] on *comm's stream), else 0. */
int tri_p2p_close(tri_p2p_batcher *b, int *slot, int *comm);
/* Before the compute stream may touch the buffers of a call on `slot`
 * (after a blocking collective; at the wait or successful test of a
 * request, before tri_p2p_done): 1 when the caller must now make the compute
 * stream wait on event[slot], 0 when it already does for this use of the
 * slot (another request of the same p2p group), -1 when the slot is unknown
 * or its group is still open (its event not recorded yet: close it first). */
int tri_p2p_fence(tri_p2p_batcher *b, int slot);
/* A request that used `slot` has completed (its slot may be reused). */
void tri_p2p_done(tri_p2p_batcher *b, int slot);
/* Requests still pending on `slot` (0: free). */
int tri_p2p_refs(const tri_p2p_batcher *b, int slot);

/* ------------------------------------------------------------------------ */
/* Failure messages                                                         */

/* "CALL failed at FILE:LINE (group G): WHY" into buf (one line, no
 * newline; group may be NULL), for tri_error_rank. Returns buf. */
char *tri_nccl_fail_msg(char *buf, size_t n, const char *group, const char *call, const char *file, int line,
                        const char *why);

#endif
