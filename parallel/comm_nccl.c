/* The NCCL transport: tri_comm_impl over NCCL communicators, tri_nccl_init
 * (see comm_nccl.h for the design), and its entry in the CUDA module
 * (tri_nccl_entry). The only file of Trident
 * that includes <nccl.h>; its NCCL-free logic is parallel/nccl_plan.c.
 *
 * Ordering, both ways on the GPU (nccl_plan.h): every call's communication
 * stream waits on an event recorded on the compute stream just before it
 * (prologue), and the compute stream waits on the call's completion event
 * (fence) right after a blocking collective, or at the wait or test that
 * completes a request; the host waits of the blocking calls and of wait()
 * come on top of that, not instead of it.
 *
 * State: every group's handle (its communicator, communication stream, the
 * event that orders it after the compute stream, its members as world ranks)
 * points to one state shared by the groups of this process: the p2p batcher
 * (an open ncclGroupStart is per thread, so it is per process here) and the
 * pool of completion events its slots index. The state goes with the last
 * group freed.
 *
 * A request (tri_req.opaque) holds the event slot it completes with.
 */
#include "parallel/comm_nccl.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/heartbeat.h"
#include "parallel/nccl_plan.h"
#include "parallel/watchdog.h"
#include "base/err.h"
#include "base/exit.h"

/* nccl_plan.h mirrors NCCL's numbering so that it can be tested without NCCL. */
_Static_assert(TRI_NCCL_UINT8 == (int)ncclUint8 && TRI_NCCL_INT32 == (int)ncclInt32, "NCCL type numbering");
_Static_assert(TRI_NCCL_FLOAT16 == (int)ncclFloat16 && TRI_NCCL_FLOAT32 == (int)ncclFloat32, "NCCL type numbering");
_Static_assert(TRI_NCCL_FLOAT64 == (int)ncclFloat64 && TRI_NCCL_BFLOAT16 == (int)ncclBfloat16, "NCCL type numbering");
_Static_assert(TRI_NCCL_SUM == (int)ncclSum && TRI_NCCL_MAX == (int)ncclMax, "NCCL reduction numbering");
_Static_assert(TRI_NCCL_NOCOLOR == NCCL_SPLIT_NOCOLOR, "NCCL split color");

#define MAX_GROUPS TRI_NCCL_GROUPS /* world, tp, dp, pp, emb, cp, dpcp */

struct shared;

typedef struct handle {
    ncclComm_t comm;
    cudaStream_t stream; /* this group's communication stream                 */
    cudaEvent_t ready;   /* recorded on the compute stream before each call    */
    int *scratch;        /* device int for the barrier                         */
    int id;              /* index in shared.groups, the batcher's comm id      */
    int *members;        /* world ranks of the group, in group order           */
    struct shared *sh;
} handle;

typedef struct shared {
    tri_p2p_batcher batch;
    cudaEvent_t *ev; /* one per slot */
    int n_ev;
    handle *groups[MAX_GROUPS];
    int world_rank;
} shared;

/* ------------------------------------------------------------------------ */
/* Failure: name it, abort every communicator of this process, exit         */

_Noreturn static void die(shared *sh, int code) {
    fflush(stdout);
    fflush(stderr);
    if (sh != NULL)
        for (int i = 0; i < MAX_GROUPS; i++)
            if (sh->groups[i] && sh->groups[i]->comm) ncclCommAbort(sh->groups[i]->comm);
    exit(code);
}

_Noreturn static void fail_call(shared *sh, int rank, const char *group, const char *call, const char *file, int line,
                                const char *why) {
    char msg[1024];
    tri_error_rank(rank, "%s", tri_nccl_fail_msg(msg, sizeof msg, group, call, file, line, why));
    die(sh, TRI_EXIT_FAILURE);
}

static void nccl_check_(ncclResult_t r, ncclComm_t comm, shared *sh, int rank, const char *group, const char *call,
                        const char *file, int line) {
    if (r == ncclSuccess) return;
    char why[512];
    const char *last = comm ? ncclGetLastError(comm) : NULL;
    snprintf(why, sizeof why, "%s%s%s", ncclGetErrorString(r), last && *last ? ": " : "", last ? last : "");
    fail_call(sh, rank, group, call, file, line, why);
}

static void cuda_check_(cudaError_t e, shared *sh, int rank, const char *group, const char *call, const char *file,
                        int line) {
    if (e == cudaSuccess) return;
    char why[512];
    snprintf(why, sizeof why, "%s: %s", cudaGetErrorName(e), cudaGetErrorString(e));
    fail_call(sh, rank, group, call, file, line, why);
}

/* In a group's call: c names the rank and the group. The call is evaluated once. */
#define NCCL_CHECK(c, call) \
    nccl_check_((call), handle_of(c)->comm, handle_of(c)->sh, (c)->world_rank, (c)->name, #call, __FILE__, __LINE__)
#define CUDA_CHECK(c, call) cuda_check_((call), handle_of(c)->sh, (c)->world_rank, (c)->name, #call, __FILE__, __LINE__)
/* Outside a group (start-up): the world rank only. */
#define NCCL_CHECK0(sh, rank, call) nccl_check_((call), NULL, (sh), (rank), NULL, #call, __FILE__, __LINE__)
#define CUDA_CHECK0(sh, rank, call) cuda_check_((call), (sh), (rank), NULL, #call, __FILE__, __LINE__)

static handle *handle_of(const tri_comm *c) { return (handle *)c->handle; }

/* A caller's contract broken (bad root, peer, dtype, aliasing): fatal, named. */
_Noreturn static void misuse(const tri_comm *c, const char *what, const char *detail) {
    tri_error_rank(c->world_rank, "%s over %s: %s", what, c->name, detail);
    die(handle_of(c)->sh, TRI_EXIT_FAILURE);
}

static ncclDataType_t nccl_type(const tri_comm *c, const char *what, tri_dtype t) {
    int n = tri_nccl_dtype(t);
    if (n < 0) misuse(c, what, "unknown dtype");
    return (ncclDataType_t)n;
}

static ncclRedOp_t nccl_op(const tri_comm *c, tri_redop op) {
    int n = tri_nccl_redop(op);
    if (n < 0) misuse(c, "all-reduce", "unknown reduction");
    return (ncclRedOp_t)n;
}

static cudaStream_t compute_stream(const tri_comm *c) {
    return c->ctx && c->ctx->stream ? (cudaStream_t)c->ctx->stream : (cudaStream_t)0;
}

/* ------------------------------------------------------------------------ */
/* Grouping and ordering                                                    */

/* Does what st asks before the call (nccl_plan.h): end an open group and
 * record its event, make a new event, start a group; then orders this
 * group's stream after everything queued on the compute stream. */
static void prologue(tri_comm *c, const tri_nccl_step *st) {
    handle *h = handle_of(c);
    shared *sh = h->sh;
    if (st->close_group) {
        NCCL_CHECK(c, ncclGroupEnd());
        CUDA_CHECK(c, cudaEventRecord(sh->ev[st->close_slot], sh->groups[st->close_comm]->stream));
    }
    if (st->new_slot) {
        cudaEvent_t *n = realloc(sh->ev, (size_t)(sh->n_ev + 1) * sizeof *n);
        if (n == NULL) misuse(c, "comm", "out of memory for an event");
        sh->ev = n;
        CUDA_CHECK(c, cudaEventCreateWithFlags(&sh->ev[sh->n_ev], cudaEventDisableTiming));
        sh->n_ev++;
        TRI_CHECK(sh->n_ev == st->slot + 1);
    }
    if (st->group_start) NCCL_CHECK(c, ncclGroupStart());
    CUDA_CHECK(c, cudaEventRecord(h->ready, compute_stream(c)));
    CUDA_CHECK(c, cudaStreamWaitEvent(h->stream, h->ready, 0));
}

/* Ends an open p2p group (before a wait, a test, a free). */
static void close_open_group(tri_comm *c) {
    shared *sh = handle_of(c)->sh;
    int slot = -1, comm = -1;
    if (!tri_p2p_close(&sh->batch, &slot, &comm)) return;
    NCCL_CHECK(c, ncclGroupEnd());
    CUDA_CHECK(c, cudaEventRecord(sh->ev[slot], sh->groups[comm]->stream));
}

static int begin_collective(tri_comm *c) {
    tri_nccl_step st;
    if (tri_p2p_collective(&handle_of(c)->sh->batch, handle_of(c)->id, &st) != 0)
        misuse(c, "comm", "out of memory for an event slot");
    prologue(c, &st);
    return st.slot;
}

/* The compute stream waits on event[slot] (once per use of the slot): what
 * it runs from now on sees the call's buffers as NCCL left them, and frees
 * or overwrites them only after NCCL is done with them. The slot's group, if
 * any, must be closed (its event recorded). */
static void fence(tri_comm *c, int slot) {
    shared *sh = handle_of(c)->sh;
    const int f = tri_p2p_fence(&sh->batch, slot);
    if (f < 0) misuse(c, "comm", "an event slot ordered before its group was closed");
    if (f > 0) CUDA_CHECK(c, cudaStreamWaitEvent(compute_stream(c), sh->ev[slot], 0));
}

/* Records the call's completion event; a blocking call (`blocking`) also
 * orders the compute stream after it at once, a request at its wait/test. */
static void end_collective(tri_comm *c, int slot, int blocking) {
    handle *h = handle_of(c);
    CUDA_CHECK(c, cudaEventRecord(h->sh->ev[slot], h->stream));
    if (blocking) fence(c, slot);
}

/* ------------------------------------------------------------------------ */
/* Watched waits                                                            */

typedef struct poll_ctx {
    tri_comm *c;
    cudaEvent_t ev;
    struct tri_hb *hb;   /* the progress heartbeat (parallel/heartbeat.h); NULL: none */
    unsigned long id;    /* this wait, for the heartbeat                            */
    const char *verdict; /* the heartbeat named a peer: why                         */
} poll_ctx;

static int event_done(void *p) {
    poll_ctx *x = p;
    tri_comm *c = x->c;
    ncclResult_t async = ncclSuccess;
    NCCL_CHECK(c, ncclCommGetAsyncError(handle_of(c)->comm, &async));
    if (async != ncclSuccess && async != ncclInProgress) NCCL_CHECK(c, async);
    cudaError_t e = cudaEventQuery(x->ev);
    if (e == cudaSuccess) return 1;
    if (e != cudaErrorNotReady) CUDA_CHECK(c, e);
    if (x->hb) { /* a peer stopped or stuck outside communication ends the wait */
        tri_hb_poll(x->hb);
        x->verdict = tri_hb_verdict_on(x->hb, x->id);
    }
    return x->verdict != NULL;
}

/* The heartbeat named a peer that makes no progress while this rank waits:
 * report as the watchdog does and end the job (as parallel/comm_mpi.c). */
_Noreturn static void named(const tri_comm *c, const char *op, double waited, const char *verdict) {
    tri_wd_report_named(c->world_rank, c->progress, op, c->name, waited, verdict);
    die(handle_of(c)->sh, TRI_EXIT_TIMEOUT);
}

_Noreturn static void expired(const tri_comm *c, const char *op, size_t bytes, int peer, int tag, double waited) {
    const handle *h = handle_of(c);
    tri_wd_site s = {.world_rank = c->world_rank,
                     .progress = c->progress,
                     .group = c->name,
                     .op = op,
                     .bytes = bytes,
                     .peer = peer >= 0 && peer < c->size ? h->members[peer] : -1,
                     .tag = tag,
                     .waited_s = waited,
                     .timeout_s = c->timeout_s};
    if (peer < 0) {
        s.members = h->members;
        s.n_members = c->size;
    }
    tri_wd_report(&s);
    die(h->sh, TRI_EXIT_TIMEOUT);
}

static void wait_slot(tri_comm *c, int slot, const char *op, size_t bytes, int peer, int tag) {
    shared *sh = handle_of(c)->sh;
    poll_ctx x = {.c = c, .ev = sh->ev[slot], .hb = c->progress ? c->progress->hb : NULL};
    double waited = 0;
    x.id = tri_hb_wait_begin(x.hb);
    if (tri_wd_wait(c->timeout_s, NULL, event_done, &x, &waited) != 0) expired(c, op, bytes, peer, tag, waited);
    if (x.verdict != NULL) named(c, op, waited, x.verdict);
    tri_hb_wait_end(x.hb);
    tri_p2p_done(&sh->batch, slot);
}

static void req_store(tri_req *r, int slot, const char *op, size_t bytes, int peer, int tag) {
    memset(r->opaque, 0, sizeof r->opaque);
    memcpy(r->opaque, &slot, sizeof slot);
    r->active = 1;
    r->op = op;
    r->bytes = bytes;
    r->peer = peer;
    r->tag = tag;
}

static int req_slot(const tri_req *r) {
    int s;
    memcpy(&s, r->opaque, sizeof s);
    return s;
}

/* ------------------------------------------------------------------------ */
/* The operations                                                           */

static int overlap(const void *a, size_t na, const void *b, size_t nb) {
    uintptr_t pa = (uintptr_t)a, pb = (uintptr_t)b;
    return pa < pb + nb && pb < pa + na;
}

static void nccl_allreduce(tri_comm *c, void *buf, size_t n, tri_dtype t, tri_redop op) {
    int slot = begin_collective(c);
    NCCL_CHECK(c, ncclAllReduce(buf, buf, n, nccl_type(c, "all-reduce", t), nccl_op(c, op), handle_of(c)->comm,
                                handle_of(c)->stream));
    end_collective(c, slot, 1);
    wait_slot(c, slot, "all-reduce", n * tri_dtype_size(t), -1, 0);
}

static void nccl_iallreduce(tri_comm *c, void *buf, size_t n, tri_dtype t, tri_redop op, tri_req *r) {
    int slot = begin_collective(c);
    NCCL_CHECK(c, ncclAllReduce(buf, buf, n, nccl_type(c, "all-reduce", t), nccl_op(c, op), handle_of(c)->comm,
                                handle_of(c)->stream));
    end_collective(c, slot, 0); /* the compute stream waits at nccl_wait / nccl_test: overlap until then */
    req_store(r, slot, "all-reduce", n * tri_dtype_size(t), -1, 0);
}

/* recv (n) = sum over ranks of their send[rank*n, rank*n+n). recv may be
 * exactly this rank's slice of send (in place); any other overlap is an error. */
static void nccl_reduce_scatter(tri_comm *c, void *recv, const void *send, size_t n, tri_dtype t) {
    size_t esz = tri_dtype_size(t);
    const char *mine = (const char *)send + (size_t)c->rank * n * esz;
    if (n > 0 && (const char *)recv != mine && overlap(recv, n * esz, send, (size_t)c->size * n * esz))
        misuse(c, "reduce-scatter", "recv overlaps send other than at this rank's slice");
    int slot = begin_collective(c);
    NCCL_CHECK(c, ncclReduceScatter(send, recv, n, nccl_type(c, "reduce-scatter", t), ncclSum, handle_of(c)->comm,
                                    handle_of(c)->stream));
    end_collective(c, slot, 1);
    wait_slot(c, slot, "reduce-scatter", (size_t)c->size * n * esz, -1, 0);
}

/* recv (size*n) = every rank's send (n) in rank order; send may be exactly
 * this rank's slot of recv (in place). */
static void nccl_allgather(tri_comm *c, void *recv, const void *send, size_t n, tri_dtype t) {
    size_t esz = tri_dtype_size(t);
    const char *slot_p = (const char *)recv + (size_t)c->rank * n * esz;
    if (n > 0 && (const char *)send != slot_p && overlap(recv, (size_t)c->size * n * esz, send, n * esz))
        misuse(c, "all-gather", "send overlaps recv other than at this rank's slot");
    int slot = begin_collective(c);
    NCCL_CHECK(c,
               ncclAllGather(send, recv, n, nccl_type(c, "all-gather", t), handle_of(c)->comm, handle_of(c)->stream));
    end_collective(c, slot, 1);
    wait_slot(c, slot, "all-gather", n * esz, -1, 0);
}

static void nccl_broadcast(tri_comm *c, void *buf, size_t n, tri_dtype t, int root) {
    if (root < 0 || root >= c->size) misuse(c, "broadcast", "root outside the group");
    int slot = begin_collective(c);
    NCCL_CHECK(
        c, ncclBroadcast(buf, buf, n, nccl_type(c, "broadcast", t), root, handle_of(c)->comm, handle_of(c)->stream));
    end_collective(c, slot, 1);
    wait_slot(c, slot, "broadcast", n * tri_dtype_size(t), -1, 0);
}

/* Tags: NCCL has none; between two ranks of one group, sends are matched
 * with receives in the order posted (parallel/pipeline.c posts both sides of a
 * message in the same order). The tag is kept for the watchdog's report. */
static void nccl_p2p(tri_comm *c, int send, void *buf, size_t n, tri_dtype t, int peer, int tag, tri_req *r) {
    const char *op = send ? "send" : "receive";
    if (peer < 0 || peer >= c->size || peer == c->rank) misuse(c, op, "peer outside the group or this rank");
    tri_nccl_step st;
    if (tri_p2p_post(&handle_of(c)->sh->batch, handle_of(c)->id, &st) != 0)
        misuse(c, op, "out of memory for an event slot");
    prologue(c, &st);
    ncclDataType_t dt = nccl_type(c, op, t);
    if (send)
        NCCL_CHECK(c, ncclSend(buf, n, dt, peer, handle_of(c)->comm, handle_of(c)->stream));
    else
        NCCL_CHECK(c, ncclRecv(buf, n, dt, peer, handle_of(c)->comm, handle_of(c)->stream));
    req_store(r, st.slot, op, n * tri_dtype_size(t), peer, tag);
}

static void nccl_isend(tri_comm *c, const void *buf, size_t n, tri_dtype t, int peer, int tag, tri_req *r) {
    nccl_p2p(c, 1, (void *)buf, n, t, peer, tag, r);
}

static void nccl_irecv(tri_comm *c, void *buf, size_t n, tri_dtype t, int peer, int tag, tri_req *r) {
    nccl_p2p(c, 0, buf, n, t, peer, tag, r);
}

static void nccl_wait(tri_comm *c, tri_req *r) {
    close_open_group(c);
    fence(c, req_slot(r)); /* before the caller reads, reuses or frees the buffer */
    wait_slot(c, req_slot(r), r->op, r->bytes, r->peer, r->tag);
    memset(r->opaque, 0, sizeof r->opaque);
    r->active = 0;
}

static int nccl_test(tri_comm *c, tri_req *r) {
    close_open_group(c);
    shared *sh = handle_of(c)->sh;
    int slot = req_slot(r);
    poll_ctx x = {.c = c, .ev = sh->ev[slot]}; /* (a test, not a wait: no heartbeat verdict) */
    if (!event_done(&x)) return 0;
    fence(c, slot);
    tri_p2p_done(&sh->batch, slot);
    memset(r->opaque, 0, sizeof r->opaque);
    r->active = 0;
    return 1;
}

/* NCCL has no barrier: an all-reduce of one int on the group's scratch. */
static void nccl_barrier(tri_comm *c) {
    int slot = begin_collective(c);
    NCCL_CHECK(c, ncclAllReduce(handle_of(c)->scratch, handle_of(c)->scratch, 1, ncclInt32, ncclSum, handle_of(c)->comm,
                                handle_of(c)->stream));
    end_collective(c, slot, 1);
    wait_slot(c, slot, "barrier", 0, -1, 0);
}

static void nccl_free(tri_comm *c) {
    handle *h = handle_of(c);
    if (h == NULL) return;
    shared *sh = h->sh;
    close_open_group(c);
    /* what this group still has queued finishes (under the watchdog) first */
    int slot = begin_collective(c);
    end_collective(c, slot, 0); /* no buffer: the host wait alone */
    wait_slot(c, slot, "shut-down", 0, -1, 0);
    NCCL_CHECK(c, ncclCommDestroy(h->comm));
    h->comm = NULL;
    CUDA_CHECK(c, cudaEventDestroy(h->ready));
    CUDA_CHECK(c, cudaStreamDestroy(h->stream));
    CUDA_CHECK(c, cudaFree(h->scratch));
    sh->groups[h->id] = NULL;
    free(h->members);
    free(h);
    c->handle = NULL;
    int left = 0;
    for (int i = 0; i < MAX_GROUPS; i++) left += sh->groups[i] != NULL;
    if (left == 0) {
        for (int i = 0; i < sh->n_ev; i++)
            cuda_check_(cudaEventDestroy(sh->ev[i]), NULL, c->world_rank, c->name, "cudaEventDestroy(sh->ev[i])",
                        __FILE__, __LINE__);
        free(sh->ev);
        tri_p2p_free(&sh->batch);
        free(sh);
    }
}

static const tri_comm_impl nccl_impl = {
    .name = "nccl",
    .device = 1, /* device memory on its own stream: no host window, native 16-bit sums */
    .allreduce = nccl_allreduce,
    .iallreduce = nccl_iallreduce,
    .reduce_scatter = nccl_reduce_scatter,
    .allgather = nccl_allgather,
    .broadcast = nccl_broadcast,
    .isend = nccl_isend,
    .irecv = nccl_irecv,
    .wait = nccl_wait,
    .test = nccl_test,
    .barrier = nccl_barrier,
    .free = nccl_free,
};

/* ------------------------------------------------------------------------ */
/* Start-up                                                                 */

/* Wraps comm (ownership passes to *out) as group `id` named `name` whose
 * members are the world ranks members[0..n); a group of one is released. */
static void adopt(tri_comm *out, shared *sh, int id, const char *name, ncclComm_t comm, const int *members, int n,
                  int my_index, int world_rank) {
    tri_comm_init_self(out, world_rank);
    snprintf(out->name, sizeof out->name, "%s", name);
    if (comm == NULL) return;
    int size = 0, rank = -1;
    NCCL_CHECK0(sh, world_rank, ncclCommCount(comm, &size));
    NCCL_CHECK0(sh, world_rank, ncclCommUserRank(comm, &rank));
    if (size != n || rank != my_index) {
        tri_error_rank(world_rank, "NCCL's %s group has %d ranks with this one at %d, the mesh says %d at %d", name, size,
                       rank, n, my_index);
        die(sh, TRI_EXIT_FAILURE);
    }
    if (size == 1) {
        NCCL_CHECK0(sh, world_rank, ncclCommDestroy(comm));
        return;
    }
    handle *h = calloc(1, sizeof *h);
    int *mem = malloc((size_t)n * sizeof *mem);
    if (h == NULL || mem == NULL) {
        tri_error_rank(world_rank, "out of memory for the %s group", name);
        die(sh, TRI_EXIT_FAILURE);
    }
    memcpy(mem, members, (size_t)n * sizeof *mem);
    h->comm = comm;
    h->id = id;
    h->members = mem;
    h->sh = sh;
    sh->groups[id] = h;
    out->size = size;
    out->rank = rank;
    out->impl = &nccl_impl;
    out->handle = h;
    CUDA_CHECK(out, cudaStreamCreateWithFlags(&h->stream, cudaStreamNonBlocking));
    CUDA_CHECK(out, cudaEventCreateWithFlags(&h->ready, cudaEventDisableTiming));
    CUDA_CHECK(out, cudaMalloc((void **)&h->scratch, sizeof *h->scratch));
}

int tri_nccl_init(const tri_mesh *m, int local_rank, tri_nccl_bcast_fn bcast, void *bctx,
                  tri_comm groups[TRI_NCCL_GROUPS]) {
    int wr = m->rank, ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev < 1)
        return tri_error("rank %d: the NCCL transport needs a CUDA device: %s", wr,
                         e != cudaSuccess ? cudaGetErrorString(e) : "none found");
    int dev = (local_rank >= 0 ? local_rank : wr) % ndev;
    CUDA_CHECK0(NULL, wr, cudaSetDevice(dev));

    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (wr == 0) NCCL_CHECK0(NULL, wr, ncclGetUniqueId(&id));
    if (bcast(bctx, &id, sizeof id) != 0)
        return tri_error("rank %d: could not receive NCCL's unique id from rank 0", wr);

    shared *sh = calloc(1, sizeof *sh);
    int *members = malloc((size_t)m->world * sizeof *members);
    if (sh == NULL || members == NULL) {
        free(sh);
        free(members);
        return tri_error("rank %d: out of memory starting NCCL", wr);
    }
    sh->world_rank = wr;
    tri_p2p_init(&sh->batch);

    /* blocking creation (like MPI_Comm_split in the MPI transport): every
     * rank takes part in the world's and in every split, in the same order */
    ncclComm_t wcomm = NULL;
    NCCL_CHECK0(sh, wr, ncclCommInitRank(&wcomm, m->world, id, wr));
    static const tri_group_kind kinds[6] = {TRI_GROUP_TP,  TRI_GROUP_DP, TRI_GROUP_PP,
                                            TRI_GROUP_EMB, TRI_GROUP_CP, TRI_GROUP_DPCP};
    static const char *const names[6] = {"tp", "dp", "pp", "emb", "cp", "dpcp"};
    ncclComm_t split[6] = {NULL, NULL, NULL, NULL, NULL, NULL};
    /* the cp and dp x cp groups only with context parallelism (as the MPI
     * transport splits them, parallel/dist.c) */
    const int n_kinds = m->cp > 1 ? 6 : 4;
    for (int k = 0; k < n_kinds; k++) {
        int color = 0, key = 0;
        tri_nccl_split_args(m, kinds[k], &color, &key);
        NCCL_CHECK0(sh, wr, ncclCommSplit(wcomm, color, key, &split[k], NULL));
    }
    for (int i = 0; i < m->world; i++) members[i] = i;
    adopt(&groups[0], sh, 0, "world", wcomm, members, m->world, wr, wr);
    for (int k = 0; k < n_kinds; k++) {
        int idx = -1, n = tri_mesh_group(m, kinds[k], members, &idx);
        adopt(&groups[k + 1], sh, k + 1, names[k], split[k], members, idx < 0 ? 1 : n, idx < 0 ? 0 : idx, wr);
    }
    free(members);
    int any = 0;
    for (int i = 0; i < MAX_GROUPS; i++) any += sh->groups[i] != NULL;
    if (any == 0) { /* a world of one: nothing refers to the state */
        tri_p2p_free(&sh->batch);
        free(sh);
    }
    return 0;
}

/* The module's entry for this transport (comm_nccl.h): the one symbol of
 * this file that libtri_cuda.so exports (everything else in the module is
 * hidden). */
static const tri_nccl_transport transport = {
    .comm_size = sizeof(tri_comm),
    .mesh_size = sizeof(tri_mesh),
    .n_groups = TRI_NCCL_GROUPS,
    .init = tri_nccl_init,
};

__attribute__((visibility("default"))) const tri_nccl_transport *tri_nccl_entry(void);

const tri_nccl_transport *tri_nccl_entry(void) { return &transport; }
