/* The world group over the TCP store (parallel/tcp_store.h), for the host
 * values a store-launched world exchanges before its NCCL communicators
 * exist: the checkpoint store's opening (model/ckpt/checkpoint.c) and the
 * preflight agreement (src/train/preflight.c). Every call is one
 * tri_store_allgather of the callers' bytes, reduced or picked locally in
 * rank order, so every rank computes the same result. Slow (a round trip per
 * rank through rank 0's server, keys never freed): a handful of small values
 * at start-up, never training traffic. No point-to-point calls. A failure
 * (a rank that did not arrive within the store's deadline) ends the job. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/comm.h"
#include "parallel/tcp_store.h"
#include "parallel/watchdog.h"
#include "base/err.h"
#include "base/exit.h"
#include "base/exitrec.h"

static tri_store *store_of(const tri_comm *c) { return c->handle; }

/* code: TRI_EXIT_TIMEOUT for a rank that never came (the watchdog's code),
 * TRI_EXIT_FAILURE for a misuse. */
_Noreturn static void store_fail_code(const tri_comm *c, const char *op, const char *why, int code) {
    tri_error_rank(c->world_rank, "%s over %s through the TCP store: %s", op, c->name, why);
    char rec[512];
    snprintf(rec, sizeof rec, "trident: rank %d: %s over %s through the TCP store: %s", c->world_rank, op, c->name,
             why);
    (void)tri_exit_record(code, rec); /* for the launcher (base/exitrec.h) */
    fflush(NULL);
    exit(code);
}
#define store_fail(c, op, why) store_fail_code((c), (op), (why), TRI_EXIT_FAILURE)

/* all (size * bytes) = every rank's `bytes` at mine, in rank order. */
static void gather(tri_comm *c, const char *op, const void *mine, size_t bytes, void *all) {
    if (bytes > TRI_STORE_MAX_VALUE) store_fail(c, op, "the value exceeds the store's limit");
    if (tri_store_allgather(store_of(c), "world", mine, bytes, all) != 0)
        store_fail_code(c, op, "not every rank took part (see above)", TRI_EXIT_TIMEOUT);
}

static void combine(void *acc, const void *x, size_t n, tri_dtype t, tri_redop op) {
    for (size_t i = 0; i < n; i++) {
#define COMBINE(T)                                            \
    {                                                         \
        T *a = (T *)acc + i, v = ((const T *)x)[i];           \
        *a = op == TRI_SUM ? (T)(*a + v) : (v > *a ? v : *a); \
    }
        switch (t) {
        case TRI_F32: COMBINE(float) break;
        case TRI_F64: COMBINE(double) break;
        case TRI_I32: COMBINE(int) break;
        case TRI_U8: COMBINE(unsigned char) break;
        default: break;
        }
#undef COMBINE
    }
}

static void store_allreduce(tri_comm *c, void *buf, size_t n, tri_dtype t, tri_redop op) {
    if (t != TRI_F32 && t != TRI_F64 && t != TRI_I32 && t != TRI_U8)
        store_fail(c, "all-reduce", "only f32, f64, i32 and u8 values are reduced here");
    size_t bytes = n * tri_dtype_size(t);
    unsigned char *all = malloc(bytes * (size_t)c->size + 1);
    if (all == NULL) store_fail(c, "all-reduce", "out of memory");
    gather(c, "all-reduce", buf, bytes, all);
    memcpy(buf, all, bytes); /* rank 0's, then the others in order */
    for (int r = 1; r < c->size; r++) combine(buf, all + (size_t)r * bytes, n, t, op);
    free(all);
}

static void store_iallreduce(tri_comm *c, void *buf, size_t n, tri_dtype t, tri_redop op, tri_req *r) {
    store_allreduce(c, buf, n, t, op);
    r->active = 0;
}

static void store_allgather(tri_comm *c, void *recv, const void *send, size_t n, tri_dtype t) {
    size_t bytes = n * tri_dtype_size(t);
    unsigned char *all = malloc(bytes * (size_t)c->size + 1);
    if (all == NULL) store_fail(c, "all-gather", "out of memory");
    gather(c, "all-gather", send, bytes, all);
    memcpy(recv, all, bytes * (size_t)c->size);
    free(all);
}

static void store_broadcast(tri_comm *c, void *buf, size_t n, tri_dtype t, int root) {
    if (root < 0 || root >= c->size) store_fail(c, "broadcast", "the root is not a rank of the group");
    size_t bytes = n * tri_dtype_size(t);
    unsigned char *all = malloc(bytes * (size_t)c->size + 1);
    if (all == NULL) store_fail(c, "broadcast", "out of memory");
    gather(c, "broadcast", buf, bytes, all);
    memcpy(buf, all + (size_t)root * bytes, bytes);
    free(all);
}

static void store_barrier(tri_comm *c) {
    if (tri_store_barrier(store_of(c), "world-barrier") != 0)
        store_fail_code(c, "barrier", "not every rank took part (see above)", TRI_EXIT_TIMEOUT);
}

_Noreturn static void store_unsupported(tri_comm *c, const char *op) {
    store_fail(c, op,
               "the store carries host values at start-up only (collectives of the world group); this call "
               "needs the NCCL transport (tri_dist_use_nccl)");
}
static void store_reduce_scatter(tri_comm *c, void *r, const void *s, size_t n, tri_dtype t) {
    store_unsupported(c, "reduce-scatter");
}
static void store_ireduce_scatter(tri_comm *c, void *r, const void *s, size_t n, tri_dtype t, tri_req *q) {
    store_unsupported(c, "reduce-scatter");
}
static void store_iallgather(tri_comm *c, void *r, const void *s, size_t n, tri_dtype t, tri_req *q) {
    store_unsupported(c, "all-gather");
}
static void store_isend(tri_comm *c, const void *b, size_t n, tri_dtype t, int p, int tag, tri_req *r) {
    store_unsupported(c, "send");
}
static void store_irecv(tri_comm *c, void *b, size_t n, tri_dtype t, int p, int tag, tri_req *r) {
    store_unsupported(c, "receive");
}
static void store_wait(tri_comm *c, tri_req *r) { r->active = 0; }
static int store_test(tri_comm *c, tri_req *r) {
    r->active = 0;
    return 1;
}
static void store_free(tri_comm *c) { c->handle = NULL; /* the store belongs to tri_dist */ }

static const tri_comm_impl store_impl = {
    .name = "tcp-store",
    .allreduce = store_allreduce,
    .iallreduce = store_iallreduce,
    .reduce_scatter = store_reduce_scatter,
    .allgather = store_allgather,
    .ireduce_scatter = store_ireduce_scatter,
    .iallgather = store_iallgather,
    .broadcast = store_broadcast,
    .isend = store_isend,
    .irecv = store_irecv,
    .wait = store_wait,
    .test = store_test,
    .barrier = store_barrier,
    .free = store_free,
};

void tri_store_comm_world(tri_comm *c, tri_store *s) {
    tri_comm_init_self(c, s->rank);
    if (s->world == 1) return;
    c->size = s->world;
    c->rank = s->rank;
    c->impl = &store_impl;
    c->handle = s;
    snprintf(c->name, sizeof c->name, "world");
}
