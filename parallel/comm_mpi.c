/* The MPI transport: tri_comm_impl over MPI communicators, and the start-up
 * functions of comm_mpi.h. The only file of Trident that includes <mpi.h>.
 *
 * A tri_comm made here holds a malloc'd MPI_Comm in c->handle (owned by the
 * tri_comm, released by its free). Every communicator uses MPI_ERRORS_RETURN
 * so that a failing call comes back to MPI_CHECK, which names the rank, the
 * call and file:line before aborting the job: a collective that failed on one
 * rank cannot be finished by the others, so nothing is recoverable here.
 *
 * Nothing waits forever: a blocking MPI collective cannot be interrupted, so
 * every collective is issued in its non-blocking form (MPI_Iallreduce, ...)
 * and completed by polling MPI_Test under the group's watchdog
 * (parallel/watchdog.h: c->timeout_s, backing off from spinning to yielding
 * to short sleeps). A wait past the deadline prints one line (rank, step,
 * group, operation, bytes, the peers as world ranks) and ends the job with
 * MPI_Abort (exit code TRI_EXIT_TIMEOUT). Communicator creation at start-up
 * (MPI_Comm_split/dup) has no non-blocking form and stays blocking.
 */
#include "parallel/comm_mpi.h"

#include <mpi.h>

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/heartbeat.h"
#include "parallel/watchdog.h"
#include "base/err.h"
#include "base/exit.h"
#include "base/log.h"

_Static_assert(sizeof(MPI_Request) <= sizeof(((tri_req *)0)->opaque), "MPI_Request must fit in tri_req.opaque");

static int world_rank_or_minus1(void) {
    int init = 0, fin = 0, r = -1;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin && MPI_Comm_rank(MPI_COMM_WORLD, &r) != MPI_SUCCESS) r = -1;
    return r;
}

static void mpi_check_(int rc, const char *call, const char *file, int line) {
    if (rc == MPI_SUCCESS) return;
    char msg[MPI_MAX_ERROR_STRING + 1];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) len = 0;
    msg[len] = '\0';
    tri_error_rank(world_rank_or_minus1(), "%s failed at %s:%d: %s (MPI error %d)", call, file, line,
                   len ? msg : "unknown error", rc);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, TRI_EXIT_FAILURE);
    abort(); /* MPI_Abort should not return */
}

/* The argument is evaluated once. */
#define MPI_CHECK(call) mpi_check_((call), #call, __FILE__, __LINE__)

/* Contract violations by the caller (bad count, aliasing): fatal, named. */
static void fail(const tri_comm *c, const char *what, const char *detail) {
    tri_error_rank(c->world_rank, "%s: %s", what, detail);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, TRI_EXIT_FAILURE);
    abort();
}

static MPI_Comm comm_of(const tri_comm *c) { return *(const MPI_Comm *)c->handle; }

static MPI_Datatype mpi_type(const tri_comm *c, tri_dtype t) {
    switch (t) {
    case TRI_F32: return MPI_FLOAT;
    case TRI_F64: return MPI_DOUBLE;
    case TRI_I32: return MPI_INT32_T;
    case TRI_U8: return MPI_UINT8_T;
    case TRI_BF16:
    case TRI_F16:
        /* moved as raw 16-bit words (all-gather, broadcast, send); MPI has
         * no 16-bit float sum: the wrappers (comm_single.c) reduce these in
         * fp32, and red_type refuses them */
        return MPI_UINT16_T;
    }
    fail(c, "comm", "unknown dtype");
    return MPI_DATATYPE_NULL;
}

/* The type of a reduction: a 16-bit float would be summed as integers. */
static MPI_Datatype red_type(const tri_comm *c, tri_dtype t) {
    if (t == TRI_BF16 || t == TRI_F16)
        fail(c, "comm", "internal error: a 16-bit float reduction reached the MPI transport (the wrappers widen it)");
    return mpi_type(c, t);
}

static MPI_Op mpi_op(const tri_comm *c, tri_redop op) {
    switch (op) {
    case TRI_SUM: return MPI_SUM;
    case TRI_MAX: return MPI_MAX;
    }
    fail(c, "comm", "unknown reduction");
    return MPI_OP_NULL;
}

/* MPI counts are int: larger buffers are a fatal error, not a silent wrap. */
static int count_of(const tri_comm *c, const char *what, size_t n) {
    if (n > (size_t)INT_MAX) {
        char d[96];
        snprintf(d, sizeof d, "count %zu exceeds MPI's limit of %d elements", n, INT_MAX);
        fail(c, what, d);
    }
    return (int)n;
}

/* Do [a, a+na) and [b, b+nb) (bytes) overlap? */
static int overlap(const void *a, size_t na, const void *b, size_t nb) {
    uintptr_t pa = (uintptr_t)a, pb = (uintptr_t)b;
    return pa < pb + nb && pb < pa + na;
}

/* Keeps q in r with what it is, for the watchdog's report. */
static void req_store(tri_req *r, MPI_Request q, const char *op, size_t bytes, int peer, int tag) {
    memset(r->opaque, 0, sizeof r->opaque);
    memcpy(r->opaque, &q, sizeof q);
    r->active = 1;
    r->op = op;
    r->bytes = bytes;
    r->peer = peer;
    r->tag = tag;
    r->shift_base = NULL;
    r->shift_bytes = 0;
}

/* After a request completed: the in-place reduce-scatter's result moves from
 * the start of the buffer (where MPI_IN_PLACE leaves it) to this rank's slot. */
static void req_finish(const tri_comm *c, tri_req *r) {
    if (r->shift_bytes > 0 && c->rank > 0)
        memmove(r->shift_base + (size_t)c->rank * r->shift_bytes, r->shift_base, r->shift_bytes);
    memset(r->opaque, 0, sizeof r->opaque);
    r->shift_base = NULL;
    r->shift_bytes = 0;
    r->active = 0;
}

/* ------------------------------------------------------------------------ */
/* Watched waits                                                            */

/* World rank of index i of c's group, or -1. Local calls only (no peer takes
 * part), so they are safe when the peers are stuck. */
static void world_ranks_of(const tri_comm *c, const int *idx, int n, int *out) {
    for (int i = 0; i < n; i++) out[i] = -1;
    MPI_Group g = MPI_GROUP_NULL, w = MPI_GROUP_NULL;
    if (MPI_Comm_group(comm_of(c), &g) == MPI_SUCCESS && MPI_Comm_group(MPI_COMM_WORLD, &w) == MPI_SUCCESS)
        (void)MPI_Group_translate_ranks(g, n, idx, w, out);
    if (g != MPI_GROUP_NULL) MPI_Group_free(&g);
    if (w != MPI_GROUP_NULL) MPI_Group_free(&w);
}

/* A wait ran past c->timeout_s: report it in one line and end the job. */
_Noreturn static void expired(const tri_comm *c, const char *op, size_t bytes, int peer, int tag, double waited) {
    tri_wd_site s = {.world_rank = c->world_rank,
                     .progress = c->progress,
                     .group = c->name,
                     .op = op,
                     .bytes = bytes,
                     .peer = -1,
                     .tag = tag,
                     .waited_s = waited,
                     .timeout_s = c->timeout_s};
    int *members = malloc((size_t)c->size * 2 * sizeof *members);
    if (peer >= 0) {
        world_ranks_of(c, &peer, 1, &s.peer);
        if (s.peer < 0) s.peer = peer; /* cannot happen; the index is better than nothing */
    } else if (members != NULL) {
        for (int i = 0; i < c->size; i++) members[c->size + i] = i;
        world_ranks_of(c, members + c->size, c->size, members);
        s.members = members;
        s.n_members = c->size;
    }
    tri_wd_report(&s);
    fflush(stdout);
    fflush(stderr);
    free(members);
    MPI_Abort(MPI_COMM_WORLD, TRI_EXIT_TIMEOUT);
    abort(); /* MPI_Abort should not return */
}

/* A wait: the request, and the heartbeat's verdict on it (parallel/heartbeat.h). */
typedef struct watched_req {
    MPI_Request *q;
    struct tri_hb *hb;
    unsigned long id;
    const char *verdict;
} watched_req;

static int req_done(void *ctx) {
    watched_req *w = ctx;
    int flag = 0;
    MPI_CHECK(MPI_Test(w->q, &flag, MPI_STATUS_IGNORE));
    if (!flag && w->hb) {
        tri_hb_poll(w->hb);
        w->verdict = tri_hb_verdict_on(w->hb, w->id);
    }
    return flag || w->verdict != NULL;
}

/* The heartbeat named a peer that makes no progress while this rank waits:
 * report as the watchdog does and end the job. */
_Noreturn static void named(const tri_comm *c, const char *op, double waited, const char *verdict) {
    tri_wd_report_named(c->world_rank, c->progress, op, c->name, waited, verdict);
    fflush(stdout);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, TRI_EXIT_TIMEOUT);
    abort(); /* MPI_Abort should not return */
}

/* Completes *q by polling under the group's deadline; past it, or once the
 * progress heartbeat names a peer, does not return.
 * peer: the group index of a p2p peer, -1 for a collective. */
static void wait_watched(const tri_comm *c, MPI_Request *q, const char *op, size_t bytes, int peer, int tag) {
    double waited = 0;
    watched_req w = {.q = q, .hb = c->progress ? c->progress->hb : NULL};
    w.id = tri_hb_wait_begin(w.hb);
    if (tri_wd_wait(c->timeout_s, NULL, req_done, &w, &waited) != 0) expired(c, op, bytes, peer, tag, waited);
    if (w.verdict != NULL) named(c, op, waited, w.verdict);
    tri_hb_wait_end(w.hb);
}

/* ------------------------------------------------------------------------ */
/* The operations: each collective non-blocking, then a watched wait        */

static void mpi_allreduce(tri_comm *c, void *buf, size_t n, tri_dtype t, tri_redop op) {
    MPI_Request q = MPI_REQUEST_NULL;
    MPI_CHECK(
        MPI_Iallreduce(MPI_IN_PLACE, buf, count_of(c, "allreduce", n), red_type(c, t), mpi_op(c, op), comm_of(c), &q));
    wait_watched(c, &q, "all-reduce", n * tri_dtype_size(t), -1, 0);
}

static void mpi_iallreduce(tri_comm *c, void *buf, size_t n, tri_dtype t, tri_redop op, tri_req *r) {
    MPI_Request q = MPI_REQUEST_NULL;
    MPI_CHECK(
        MPI_Iallreduce(MPI_IN_PLACE, buf, count_of(c, "iallreduce", n), red_type(c, t), mpi_op(c, op), comm_of(c), &q));
    req_store(r, q, "all-reduce", n * tri_dtype_size(t), -1, 0);
}

/* recv (n) = sum over ranks of their send[rank*n .. rank*n+n); send (size*n).
 * recv must not overlap send. */
static void mpi_reduce_scatter(tri_comm *c, void *recv, const void *send, size_t n, tri_dtype t) {
    size_t esz = tri_dtype_size(t);
    if (n > 0 && overlap(recv, n * esz, send, (size_t)c->size * n * esz))
        fail(c, "reduce_scatter", "recv overlaps send (not supported by the MPI transport)");
    MPI_Request q = MPI_REQUEST_NULL;
    MPI_CHECK(MPI_Ireduce_scatter_block(send, recv, count_of(c, "reduce_scatter", n), red_type(c, t), MPI_SUM,
                                        comm_of(c), &q));
    wait_watched(c, &q, "reduce-scatter", (size_t)c->size * n * esz, -1, 0);
}

/* recv (size*n) = every rank's send (n) in rank order. send may be exactly
 * this rank's slot of recv (recv + rank*n: in place); any other overlap is an error. */
static void mpi_allgather(tri_comm *c, void *recv, const void *send, size_t n, tri_dtype t) {
    size_t esz = tri_dtype_size(t);
    int cnt = count_of(c, "allgather", n);
    count_of(c, "allgather", (size_t)c->size * n);
    MPI_Datatype dt = mpi_type(c, t);
    const char *slot = (const char *)recv + (size_t)c->rank * n * esz;
    MPI_Request q = MPI_REQUEST_NULL;
    if (n > 0 && (const char *)send == slot) {
        MPI_CHECK(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, cnt, dt, comm_of(c), &q));
    } else {
        if (n > 0 && overlap(recv, (size_t)c->size * n * esz, send, n * esz))
            fail(c, "allgather", "send overlaps recv other than at this rank's slot");
        MPI_CHECK(MPI_Iallgather(send, cnt, dt, recv, cnt, dt, comm_of(c), &q));
    }
    wait_watched(c, &q, "all-gather", n * esz, -1, 0);
}

/* Non-blocking reduce-scatter (sum). recv == send + rank*n is in place: MPI
 * then reduces within send and leaves the result at its start, and the wait
 * moves it to this rank's slot (req_finish). Any other overlap is an error. */
static void mpi_ireduce_scatter(tri_comm *c, void *recv, const void *send, size_t n, tri_dtype t, tri_req *r) {
    size_t esz = tri_dtype_size(t);
    int cnt = count_of(c, "ireduce_scatter", n);
    count_of(c, "ireduce_scatter", (size_t)c->size * n);
    MPI_Request q = MPI_REQUEST_NULL;
    const char *slot = (const char *)send + (size_t)c->rank * n * esz;
    int in_place = n > 0 && (const char *)recv == slot;
    if (in_place) {
        MPI_CHECK(MPI_Ireduce_scatter_block(MPI_IN_PLACE, (void *)send, cnt, red_type(c, t), MPI_SUM, comm_of(c), &q));
    } else {
        if (n > 0 && overlap(recv, n * esz, send, (size_t)c->size * n * esz))
            fail(c, "ireduce_scatter", "recv overlaps send other than at this rank's slot");
        MPI_CHECK(MPI_Ireduce_scatter_block(send, recv, cnt, red_type(c, t), MPI_SUM, comm_of(c), &q));
    }
    req_store(r, q, "reduce-scatter", (size_t)c->size * n * esz, -1, 0);
    if (in_place) {
        r->shift_base = (unsigned char *)send;
        r->shift_bytes = n * esz;
    }
}

/* Non-blocking all-gather; send == recv + rank*n is in place. */
static void mpi_iallgather(tri_comm *c, void *recv, const void *send, size_t n, tri_dtype t, tri_req *r) {
    size_t esz = tri_dtype_size(t);
    int cnt = count_of(c, "iallgather", n);
    count_of(c, "iallgather", (size_t)c->size * n);
    MPI_Datatype dt = mpi_type(c, t);
    const char *slot = (const char *)recv + (size_t)c->rank * n * esz;
    MPI_Request q = MPI_REQUEST_NULL;
    if (n > 0 && (const char *)send == slot) {
        MPI_CHECK(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, cnt, dt, comm_of(c), &q));
    } else {
        if (n > 0 && overlap(recv, (size_t)c->size * n * esz, send, n * esz))
            fail(c, "iallgather", "send overlaps recv other than at this rank's slot");
        MPI_CHECK(MPI_Iallgather(send, cnt, dt, recv, cnt, dt, comm_of(c), &q));
    }
    req_store(r, q, "all-gather", n * esz, -1, 0);
}

static void mpi_broadcast(tri_comm *c, void *buf, size_t n, tri_dtype t, int root) {
    if (root < 0 || root >= c->size) fail(c, "broadcast", "root outside the group");
    MPI_Request q = MPI_REQUEST_NULL;
    MPI_CHECK(MPI_Ibcast(buf, count_of(c, "broadcast", n), mpi_type(c, t), root, comm_of(c), &q));
    wait_watched(c, &q, "broadcast", n * tri_dtype_size(t), -1, 0);
}

static void mpi_isend(tri_comm *c, const void *buf, size_t n, tri_dtype t, int peer, int tag, tri_req *r) {
    if (peer < 0 || peer >= c->size) fail(c, "isend", "peer outside the group");
    MPI_Request q = MPI_REQUEST_NULL;
    MPI_CHECK(MPI_Isend(buf, count_of(c, "isend", n), mpi_type(c, t), peer, tag, comm_of(c), &q));
    req_store(r, q, "send", n * tri_dtype_size(t), peer, tag);
}

static void mpi_irecv(tri_comm *c, void *buf, size_t n, tri_dtype t, int peer, int tag, tri_req *r) {
    if (peer < 0 || peer >= c->size) fail(c, "irecv", "peer outside the group");
    MPI_Request q = MPI_REQUEST_NULL;
    MPI_CHECK(MPI_Irecv(buf, count_of(c, "irecv", n), mpi_type(c, t), peer, tag, comm_of(c), &q));
    req_store(r, q, "receive", n * tri_dtype_size(t), peer, tag);
}

static void mpi_wait(tri_comm *c, tri_req *r) {
    MPI_Request q;
    memcpy(&q, r->opaque, sizeof q);
    wait_watched(c, &q, r->op, r->bytes, r->peer, r->tag);
    req_finish(c, r);
}

static int mpi_test(tri_comm *c, tri_req *r) {
    MPI_Request q;
    memcpy(&q, r->opaque, sizeof q);
    int flag = 0;
    MPI_CHECK(MPI_Test(&q, &flag, MPI_STATUS_IGNORE));
    if (!flag) return 0;
    req_finish(c, r);
    return 1;
}

static void mpi_barrier(tri_comm *c) {
    MPI_Request q = MPI_REQUEST_NULL;
    MPI_CHECK(MPI_Ibarrier(comm_of(c), &q));
    wait_watched(c, &q, "barrier", 0, -1, 0);
}

static void mpi_free(tri_comm *c) {
    if (c->handle == NULL) return;
    MPI_Comm *h = c->handle;
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin && *h != MPI_COMM_NULL) MPI_CHECK(MPI_Comm_free(h));
    free(h);
    c->handle = NULL;
}

static const tri_comm_impl mpi_impl = {
    .name = "mpi",
    .allreduce = mpi_allreduce,
    .iallreduce = mpi_iallreduce,
    .reduce_scatter = mpi_reduce_scatter,
    .allgather = mpi_allgather,
    .ireduce_scatter = mpi_ireduce_scatter,
    .iallgather = mpi_iallgather,
    .broadcast = mpi_broadcast,
    .isend = mpi_isend,
    .irecv = mpi_irecv,
    .wait = mpi_wait,
    .test = mpi_test,
    .barrier = mpi_barrier,
    .free = mpi_free,
};

/* Wraps a new communicator (ownership passes to *out); a group of size 1 (or
 * MPI_COMM_NULL) becomes a group of one without transport. */
static void adopt(tri_comm *out, MPI_Comm comm, int world_rank) {
    tri_comm_init_self(out, world_rank);
    if (comm == MPI_COMM_NULL) return;
    int size = 0, rank = 0;
    MPI_CHECK(MPI_Comm_size(comm, &size));
    if (size == 1) {
        MPI_CHECK(MPI_Comm_free(&comm));
        return;
    }
    MPI_CHECK(MPI_Comm_rank(comm, &rank));
    MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
    MPI_Comm *h = malloc(sizeof *h);
    if (h == NULL) {
        tri_error_rank(world_rank, "out of memory for a communicator");
        MPI_Abort(MPI_COMM_WORLD, TRI_EXIT_FAILURE);
        abort();
    }
    *h = comm;
    out->size = size;
    out->rank = rank;
    out->impl = &mpi_impl;
    out->handle = h;
}

int tri_mpi_init(int *world, int *rank) {
    int provided = 0;
    /* MPI_Init's own failure cannot be routed to an error handler yet: MPI aborts. */
    int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
    if (rc != MPI_SUCCESS) {
        tri_error("MPI_Init_thread failed (MPI error %d)", rc);
        return -1;
    }
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, world));
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, rank));
    if (provided < MPI_THREAD_FUNNELED && *rank == 0)
        tri_note("MPI provides thread level %d < FUNNELED; MPI calls stay on the main thread", provided);
    return 0;
}

int tri_mpi_split(tri_comm *out, int color, int key) {
    int wr = 0;
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &wr));
    MPI_Comm comm = MPI_COMM_NULL;
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, color < 0 ? MPI_UNDEFINED : color, key, &comm));
    adopt(out, comm, wr);
    return 0;
}

int tri_mpi_world(tri_comm *out) {
    int wr = 0;
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &wr));
    MPI_Comm comm = MPI_COMM_NULL;
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
    adopt(out, comm, wr);
    return 0;
}

void tri_mpi_finalize(void) {
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin) MPI_CHECK(MPI_Finalize());
}

void tri_mpi_abort(int code) {
    fflush(stdout);
    fflush(stderr);
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin) MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}
