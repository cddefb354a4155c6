/* The wrappers of comm.h, with the trivial path for groups of one. */
#include "parallel/comm.h"

#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/err.h"
#include "base/exit.h"
#include "kernels/half.h"
#include "kernels/ctx.h"

/* Bytes counted per call: the payload of the call as the algorithm-free
 * "bus" volume this rank contributes (all-reduce: n elements; reduce-scatter:
 * its whole input; all-gather: its own part; broadcast: n; send: n). */
static void count(tri_comm *c, size_t n, tri_dtype t, double t0) {
    c->stats.calls++;
    c->stats.bytes += (unsigned long long)(n * tri_dtype_size(t));
    if (t0 > 0) c->stats.seconds += tri_now_s() - t0;
}

/* Transports read and write backend memory in place: open it to host access
 * around the call (a no-op except under the cpu-guard backend, and a stream
 * synchronisation under CUDA). Not for a transport that works on the device
 * itself (NCCL orders its stream after the compute stream with events). */
static void window(tri_comm *c, int open) {
    if (c->ctx && !(c->impl && c->impl->device)) tri_ctx_host_window(c->ctx, open);
}

static int trivial(const tri_comm *c) { return c->size == 1 || c->impl == NULL; }

/* A device_only group: every buffer must be backend memory. Where the
 * context can tell (cpu-guard), host memory ends the job here, before any
 * transport sees it, with the rank, group, call and buffer. */
static void need_device(const tri_comm *c, const char *op, const char *what, const void *p, size_t n, tri_dtype t) {
    if (!c->device_only || n == 0) return;
    size_t bytes = n * tri_dtype_size(t);
    int own = c->ctx ? tri_ctx_owns(c->ctx, p, bytes) : 0;
    if (own != 0) return; /* backend memory, or the backend cannot tell */
    tri_error_rank(c->world_rank,
                   "%s over %s: %s (%zu bytes at %p) is %s, but the group's transport takes backend memory only "
                   "(NCCL); a host value must go through the _host calls (parallel/comm.h)",
                   op, c->name[0] ? c->name : "a group", what, bytes, p,
                   c->ctx ? "not backend memory" : "unchecked (no backend context bound)");
    exit(TRI_EXIT_FAILURE);
}

/* The copy a group of one makes (all-gather, reduce-scatter of one rank):
 * backend memory is copied by the backend where the group is device only. */
static void local_copy(tri_comm *c, void *dst, const void *src, size_t bytes) {
    if (dst == src || bytes == 0) return;
    if (c->device_only && c->ctx) {
        c->ctx->ops->copy(c->ctx, dst, src, bytes);
        return;
    }
    window(c, 1);
    memmove(dst, src, bytes);
    window(c, 0);
}

/* 16-bit reductions are widened on the host unless the transport sums them on the device. */
static int widen(const tri_comm *c, tri_dtype t) { return (t == TRI_BF16 || t == TRI_F16) && !c->impl->device; }

/* ---- reductions of 16-bit floats (bf16, fp16 activations under mixed
 * precision) ----
 * MPI has no bf16 or fp16 sum, so the wrappers do it for every transport:
 * the buffer is widened (exactly) into fp32 host scratch, the transport
 * reduces fp32, and each result is rounded once, to nearest even, into the
 * 16-bit buffer. Every rank gets the same fp32 sums, hence the same bits.
 * The wire carries fp32 (twice the 16-bit bytes; the stats count them). A
 * NCCL transport would instead sum bf16 / fp16 natively (ncclBfloat16,
 * ncclHalf, accumulating in the 16-bit type along its ring), moving half
 * the bytes at the cost of one rounding per hop. The non-blocking forms
 * complete at once (the request is left inactive). */

static float *widen16(const tri_comm *c, const void *src, tri_dtype t, size_t n, size_t room) {
    float *f = malloc((room ? room : 1) * sizeof *f);
    if (!f) {
        tri_error_rank(c->world_rank, "out of host memory widening a 16-bit reduction (%zu values)", room);
        abort();
    }
    const uint16_t *h = src;
    for (size_t i = 0; i < n; i++) f[i] = t == TRI_BF16 ? tri_bf16_to_f32(h[i]) : tri_f16_to_f32(h[i]);
    return f;
}

static void narrow16(void *dst, tri_dtype t, const float *f, size_t n) {
    uint16_t *h = dst;
    for (size_t i = 0; i < n; i++) h[i] = t == TRI_BF16 ? tri_f32_to_bf16(f[i]) : tri_f32_to_f16(f[i]);
}

static void allreduce16(tri_comm *c, void *buf, size_t n, tri_dtype t, tri_redop op) {
    double t0 = tri_now_s();
    window(c, 1);
    float *f = widen16(c, buf, t, n, n);
    c->impl->allreduce(c, f, n, TRI_F32, op);
    narrow16(buf, t, f, n);
    free(f);
    window(c, 0);
    count(c, n, TRI_F32, t0);
}

static void reduce_scatter16(tri_comm *c, void *recv, const void *send, size_t n, tri_dtype t) {
    double t0 = tri_now_s();
    window(c, 1);
    size_t all = n * (size_t)c->size;
    float *f = widen16(c, send, t, all, all + n); /* the sums go after the inputs */
    c->impl->reduce_scatter(c, f + all, f, n, TRI_F32);
    narrow16(recv, t, f + all, n);
    free(f);
    window(c, 0);
    count(c, all, TRI_F32, t0);
}

void tri_comm_allreduce(tri_comm *c, void *buf, size_t n, tri_dtype t, tri_redop op) {
    need_device(c, "all-reduce", "the buffer", buf, n, t);
    if (trivial(c) || n == 0) return;
    if (widen(c, t)) {
        allreduce16(c, buf, n, t, op);
        return;
    }
    double t0 = tri_now_s();
    window(c, 1);
    c->impl->allreduce(c, buf, n, t, op);
    window(c, 0);
    count(c, n, t, t0);
}

void tri_comm_iallreduce(tri_comm *c, void *buf, size_t n, tri_dtype t, tri_redop op, tri_req *r) {
    r->active = 0;
    need_device(c, "all-reduce", "the buffer", buf, n, t);
    if (trivial(c) || n == 0) return;
    if (widen(c, t)) {
        allreduce16(c, buf, n, t, op);
        return;
    }
    double t0 = tri_now_s();
    window(c, 1); /* closed again by tri_comm_wait */
    c->impl->iallreduce(c, buf, n, t, op, r);
    count(c, n, t, t0);
}

void tri_comm_reduce_scatter(tri_comm *c, void *recv, const void *send, size_t n, tri_dtype t) {
    need_device(c, "reduce-scatter", "the input", send, n * (size_t)c->size, t);
    need_device(c, "reduce-scatter", "the output", recv, n, t);
    if (trivial(c)) {
        local_copy(c, recv, send, n * tri_dtype_size(t));
        return;
    }
    if (widen(c, t)) {
        reduce_scatter16(c, recv, send, n, t);
        return;
    }
    double t0 = tri_now_s();
    window(c, 1);
    c->impl->reduce_scatter(c, recv, send, n, t);
    window(c, 0);
    count(c, n * (size_t)c->size, t, t0);
}

void tri_comm_allgather(tri_comm *c, void *recv, const void *send, size_t n, tri_dtype t) {
    need_device(c, "all-gather", "the input", send, n, t);
    need_device(c, "all-gather", "the output", recv, n * (size_t)c->size, t);
    if (trivial(c)) {
        local_copy(c, recv, send, n * tri_dtype_size(t));
        return;
    }
    double t0 = tri_now_s();
    window(c, 1);
    c->impl->allgather(c, recv, send, n, t);
    window(c, 0);
    count(c, n, t, t0);
}

void tri_comm_ireduce_scatter(tri_comm *c, void *recv, const void *send, size_t n, tri_dtype t, tri_req *r) {
    r->active = 0;
    need_device(c, "reduce-scatter", "the input", send, n * (size_t)c->size, t);
    need_device(c, "reduce-scatter", "the output", recv, n, t);
    if (trivial(c)) {
        local_copy(c, recv, send, n * tri_dtype_size(t));
        return;
    }
    if (widen(c, t)) {
        reduce_scatter16(c, recv, send, n, t);
        return;
    }
    double t0 = tri_now_s();
    window(c, 1); /* closed again by tri_comm_wait */
    c->impl->ireduce_scatter(c, recv, send, n, t, r);
    count(c, n * (size_t)c->size, t, t0);
}

void tri_comm_iallgather(tri_comm *c, void *recv, const void *send, size_t n, tri_dtype t, tri_req *r) {
    r->active = 0;
    need_device(c, "all-gather", "the input", send, n, t);
    need_device(c, "all-gather", "the output", recv, n * (size_t)c->size, t);
    if (trivial(c)) {
        local_copy(c, recv, send, n * tri_dtype_size(t));
        return;
    }
    double t0 = tri_now_s();
    window(c, 1); /* closed again by tri_comm_wait */
    c->impl->iallgather(c, recv, send, n, t, r);
    count(c, n, t, t0);
}

void tri_comm_broadcast(tri_comm *c, void *buf, size_t n, tri_dtype t, int root) {
    need_device(c, "broadcast", "the buffer", buf, n, t);
    if (trivial(c) || n == 0) return;
    double t0 = tri_now_s();
    window(c, 1);
    c->impl->broadcast(c, buf, n, t, root);
    window(c, 0);
    count(c, n, t, t0);
}

void tri_comm_isend(tri_comm *c, const void *buf, size_t n, tri_dtype t, int peer, int tag, tri_req *r) {
    r->active = 0;
    need_device(c, "send", "the buffer", buf, n, t);
    if (trivial(c)) {
        tri_error_rank(c->world_rank, "send to peer %d in a group of one", peer);
        abort();
    }
    window(c, 1); /* closed again by tri_comm_wait */
    c->impl->isend(c, buf, n, t, peer, tag, r);
    count(c, n, t, 0);
}

void tri_comm_irecv(tri_comm *c, void *buf, size_t n, tri_dtype t, int peer, int tag, tri_req *r) {
    r->active = 0;
    need_device(c, "receive", "the buffer", buf, n, t);
    if (trivial(c)) {
        tri_error_rank(c->world_rank, "receive from peer %d in a group of one", peer);
        abort();
    }
    window(c, 1); /* closed again by tri_comm_wait */
    c->impl->irecv(c, buf, n, t, peer, tag, r);
}

void tri_comm_wait(tri_comm *c, tri_req *r) {
    if (r->active && !trivial(c)) {
        double t0 = tri_now_s();
        c->impl->wait(c, r);
        window(c, 0);
        c->stats.seconds += tri_now_s() - t0;
    }
    r->active = 0;
}

int tri_comm_test(tri_comm *c, tri_req *r) {
    if (r->active && !trivial(c)) {
        if (!c->impl->test(c, r)) return 0;
        window(c, 0);
    }
    r->active = 0;
    return 1;
}

void tri_comm_barrier(tri_comm *c) {
    if (trivial(c)) return;
    double t0 = tri_now_s();
    window(c, 1);
    c->impl->barrier(c);
    window(c, 0);
    c->stats.seconds += tri_now_s() - t0;
}

/* ---- host control values ---- */

/* A backend scratch buffer for a _host call on a device_only group. */
static void *stage_alloc(tri_comm *c, const char *op, size_t bytes) {
    if (c->ctx == NULL) {
        tri_error_rank(c->world_rank, "%s of host values over %s: the group is device only but has no context", op,
                       c->name);
        exit(TRI_EXIT_FAILURE);
    }
    void *d = tri_ctx_alloc(c->ctx, bytes, TRI_MEM_OTHER, "a staged host value of a collective");
    if (d == NULL) exit(TRI_EXIT_FAILURE); /* said */
    return d;
}

void tri_comm_allreduce_host(tri_comm *c, void *buf, size_t n, tri_dtype t, tri_redop op) {
    if (trivial(c) || n == 0) return;
    if (!c->device_only) {
        tri_comm_allreduce(c, buf, n, t, op);
        return;
    }
    size_t bytes = n * tri_dtype_size(t);
    void *d = stage_alloc(c, "all-reduce", bytes);
    tri_ctx_to_device(c->ctx, d, buf, bytes);
    tri_comm_allreduce(c, d, n, t, op);
    tri_ctx_to_host(c->ctx, buf, d, bytes);
    tri_ctx_release(c->ctx, d, bytes, TRI_MEM_OTHER);
}

void tri_comm_allgather_host(tri_comm *c, void *recv, const void *send, size_t n, tri_dtype t) {
    size_t bytes = n * tri_dtype_size(t);
    if (trivial(c)) { /* host memory: never the backend's copy */
        if (recv != send && bytes) memmove(recv, send, bytes);
        return;
    }
    if (!c->device_only) {
        tri_comm_allgather(c, recv, send, n, t);
        return;
    }
    size_t all = bytes * (size_t)c->size;
    char *d = stage_alloc(c, "all-gather", all);
    tri_ctx_to_device(c->ctx, d + (size_t)c->rank * bytes, send, bytes);
    tri_comm_allgather(c, d, d + (size_t)c->rank * bytes, n, t);
    tri_ctx_to_host(c->ctx, recv, d, all);
    tri_ctx_release(c->ctx, d, all, TRI_MEM_OTHER);
}

void tri_comm_broadcast_host(tri_comm *c, void *buf, size_t n, tri_dtype t, int root) {
    if (trivial(c) || n == 0) return;
    if (!c->device_only) {
        tri_comm_broadcast(c, buf, n, t, root);
        return;
    }
    size_t bytes = n * tri_dtype_size(t);
    void *d = stage_alloc(c, "broadcast", bytes);
    if (c->rank == root) tri_ctx_to_device(c->ctx, d, buf, bytes);
    tri_comm_broadcast(c, d, n, t, root);
    tri_ctx_to_host(c->ctx, buf, d, bytes);
    tri_ctx_release(c->ctx, d, bytes, TRI_MEM_OTHER);
}

void tri_comm_free(tri_comm *c) {
    if (c == NULL) return;
    if (c->impl && c->impl->free) c->impl->free(c);
    int wr = c->world_rank;
    tri_comm_init_self(c, wr);
}
