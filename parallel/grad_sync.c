#include "parallel/grad_sync.h"
#include "base/err.h"
#include "kernels/ctx.h"
#include "kernels/ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whether bucket b overlaps the range of tri_grad_sync_defer. */
static int held(const tri_grad_sync *s, int b) {
    return s->defer_lo < s->defer_hi && s->bounds[b] < s->defer_hi && s->defer_lo < s->bounds[b + 1];
}

/* ZeRO: bucket b starts only in tri_grad_sync_finish_deferred. */
static int deferred(const tri_grad_sync *s, int b) { return s->zero && held(s, b); }

/* Whether the buckets move anything: ZeRO-2's shards are a copy even at dp = 1. */
static int active(const tri_grad_sync *s) { return s->dp->size > 1 || s->shard != NULL; }

static void start_bucket(tri_grad_sync *s, int b) {
    size_t lo = s->bounds[b], len = s->bounds[b + 1] - lo;
    if (!s->zero) {
        tri_comm_iallreduce(s->dp, s->grads + lo, len, TRI_F32, TRI_SUM, &s->reqs[b]);
        return;
    }
    size_t n = len / (size_t)s->dp->size;
    /* ZeRO-2: into the shard buffer (this bucket's shard at lo / dp) */
    float *recv = s->shard ? s->shard + lo / (size_t)s->dp->size : s->grads + lo + (size_t)s->dp->rank * n;
    if (s->dp->size == 1 && s->shard && s->dp->ctx) { /* a copy, by the backend (device memory on a GPU) */
        tri_ctx *c = s->dp->ctx;
        c->ops->copy(c, recv, s->grads + lo, n * sizeof(float));
        return;
    }
    tri_comm_ireduce_scatter(s->dp, recv, s->grads + lo, n, TRI_F32, &s->reqs[b]);
}

/* Every bucket inside grads[0, n_final) is final: started (where anything
 * moves; else only counted, for the hook). */
static void start_upto(tri_grad_sync *s, size_t n_final) {
    /* ZeRO: the model reports its own length; the padding is final too */
    if (s->zero && n_final >= s->n_real) n_final = s->n_floats;
    while (s->next < s->n_buckets && s->bounds[s->next + 1] <= n_final) {
        int b = s->next++;
        if (active(s) && !deferred(s, b)) start_bucket(s, b);
    }
}

/* Tells the hook (tri_grad_sync_on_bucket) of the buckets started so far
 * whose reduction is over: all of them once waited for (`waited`), else in
 * bucket order up to the first one still pending (one group's reductions
 * end in the order they started). A request never started (nothing sent,
 * or a copy queued on the backend's stream) tests done. Held buckets are
 * not told here. */
static void tell(tri_grad_sync *s, int waited) {
    if (!s->bucket_done) return;
    for (int b = 0; b < s->next; b++) {
        if (s->told[b] || held(s, b)) continue;
        if (!waited && !tri_comm_test(s->dp, &s->reqs[b])) break;
        s->told[b] = 1;
        s->bucket_done(s->bucket_done_ctx, b);
    }
}

void tri_grad_sync_ready(tri_grad_sync *s, size_t n_final) {
    if (!s->armed || !(active(s) || s->bucket_done)) return;
    start_upto(s, n_final);
    tell(s, 0);
}

int tri_grad_sync_on_bucket(tri_grad_sync *s, void (*done)(void *ctx, int b), void *ctx) {
    free(s->told);
    s->told = calloc((size_t)s->n_buckets, 1);
    if (!s->told) return tri_error("out of memory (gradient buckets)");
    s->bucket_done = done;
    s->bucket_done_ctx = ctx;
    return 0;
}

int tri_grad_sync_told(const tri_grad_sync *s, int b) { return s->told && s->told[b]; }

int tri_grad_sync_init(tri_grad_sync *s, float *grads, size_t n_floats, tri_comm *dp, double bucket_mb) {
    memset(s, 0, sizeof *s);
    s->grads = grads;
    s->n_floats = n_floats;
    s->dp = dp;
    size_t total = n_floats;
    size_t per = bucket_mb > 0 ? (size_t)(bucket_mb * 1024.0 * 1024.0 / sizeof(float)) : total;
    if (per == 0) per = 1;
    s->n_buckets = (int)((total + per - 1) / per);
    if (s->n_buckets == 0) s->n_buckets = 1;
    s->bounds = calloc((size_t)s->n_buckets + 1, sizeof *s->bounds);
    s->reqs = calloc((size_t)s->n_buckets, sizeof *s->reqs);
    if (!s->bounds || !s->reqs) {
        tri_error("out of memory (gradient buckets)");
        tri_grad_sync_free(s);
        return -1;
    }
    for (int b = 0; b < s->n_buckets; b++) s->bounds[b] = (size_t)b * per;
    s->bounds[s->n_buckets] = total;
    return 0;
}

int tri_grad_sync_init_zero(tri_grad_sync *s, float *grads, void *params, tri_dtype param_dtype, size_t n_real,
                            size_t n_floats, tri_comm *dp, double bucket_mb) {
    memset(s, 0, sizeof *s);
    size_t unit = (size_t)dp->size * TRI_ZERO_ALIGN;
    if (n_floats % unit != 0 || n_real > n_floats)
        return tri_error("internal error: ZeRO buffers of %zu floats (%zu used) are not padded to a multiple of %zu",
                         n_floats, n_real, unit);
    size_t per = bucket_mb > 0 ? (size_t)(bucket_mb * 1024.0 * 1024.0 / sizeof(float)) : n_floats;
    per = (per + unit - 1) / unit * unit;
    if (per == 0) per = unit;
    if (tri_grad_sync_init(s, grads, n_floats, dp, 0) != 0) return -1;
    free(s->bounds);
    free(s->reqs);
    s->n_buckets = (int)((n_floats + per - 1) / per);
    if (s->n_buckets == 0) s->n_buckets = 1;
    s->bounds = calloc((size_t)s->n_buckets + 1, sizeof *s->bounds);
    s->reqs = calloc((size_t)s->n_buckets, sizeof *s->reqs);
    s->gathers = calloc((size_t)s->n_buckets, sizeof *s->gathers);
    if (!s->bounds || !s->reqs || !s->gathers) {
        tri_error("out of memory (gradient buckets)");
        tri_grad_sync_free(s);
        return -1;
    }
    for (int b = 0; b < s->n_buckets; b++) s->bounds[b] = (size_t)b * per;
    s->bounds[s->n_buckets] = n_floats;
    s->zero = 1;
    s->n_real = n_real;
    s->params = params;
    s->param_dtype = param_dtype;
    return 0;
}

void tri_grad_sync_defer(tri_grad_sync *s, size_t lo, size_t hi) {
    s->defer_lo = lo;
    s->defer_hi = hi;
}

void tri_grad_sync_shard(const tri_grad_sync *s, int b, size_t *lo, size_t *hi) {
    size_t n = (s->bounds[b + 1] - s->bounds[b]) / (size_t)s->dp->size;
    *lo = s->bounds[b] + (size_t)s->dp->rank * n;
    *hi = *lo + n;
}

void tri_grad_sync_set_shard(tri_grad_sync *s, float *shard) { s->shard = shard; }

size_t tri_grad_sync_shard_floats(const tri_grad_sync *s) { return s->n_floats / (size_t)s->dp->size; }

void tri_grad_sync_set_grads(tri_grad_sync *s, float *grads) { s->grads = grads; }

void tri_grad_sync_set_pshard(tri_grad_sync *s, void *pshard) { s->pshard = pshard; }

void tri_grad_sync_set_params(tri_grad_sync *s, void *params) { s->params = params; }

void tri_grad_sync_free(tri_grad_sync *s) {
    if (!s) return;
    free(s->bounds);
    free(s->reqs);
    free(s->gathers);
    free(s->told);
    memset(s, 0, sizeof *s);
}

void tri_grad_sync_begin(tri_grad_sync *s) {
    s->next = 0;
    s->armed = 0;
    if (s->told) memset(s->told, 0, (size_t)s->n_buckets);
}

void tri_grad_sync_set_last(tri_grad_sync *s, int last) { s->armed = last != 0; }

void tri_grad_sync_finish(tri_grad_sync *s) {
    if (!active(s) && !s->bucket_done) return;
    start_upto(s, s->n_floats);
    if (active(s))
        for (int b = 0; b < s->n_buckets; b++) tri_comm_wait(s->dp, &s->reqs[b]);
    tell(s, 1);
    s->armed = 0;
}

void tri_grad_sync_finish_deferred(tri_grad_sync *s) {
    if (!s->zero) return;
    if (active(s)) {
        for (int b = 0; b < s->n_buckets; b++)
            if (deferred(s, b)) start_bucket(s, b);
        for (int b = 0; b < s->n_buckets; b++) tri_comm_wait(s->dp, &s->reqs[b]);
    }
    for (int b = 0; s->bucket_done && b < s->n_buckets; b++) {
        if (!deferred(s, b) || s->told[b]) continue;
        s->told[b] = 1;
        s->bucket_done(s->bucket_done_ctx, b);
    }
}

/* Bucket b's all-gather into dst (bounds[b]'s place), through req. */
static void gather_bucket(tri_grad_sync *s, int b, char *dst, tri_req *req) {
    size_t lo, hi;
    tri_grad_sync_shard(s, b, &lo, &hi);
    /* the parameters in their own dtype: 16-bit ones move 2 bytes an element */
    const size_t esz = tri_dtype_size(s->param_dtype);
    /* ZeRO-3: from the shard buffer (this bucket's shard at bounds[b] / dp) */
    const char *send = s->pshard ? (const char *)s->pshard + s->bounds[b] / (size_t)s->dp->size * esz
                                 : (const char *)s->params + lo * esz;
    if (s->dp->size == 1 && s->dp->ctx) { /* a copy, by the backend */
        s->dp->ctx->ops->copy(s->dp->ctx, dst, send, (hi - lo) * esz);
        return;
    }
    tri_comm_iallgather(s->dp, dst, send, hi - lo, s->param_dtype, req);
}

void tri_grad_sync_gather_start(tri_grad_sync *s, int b) {
    if (s->dp->size == 1 && !s->pshard) return;
    gather_bucket(s, b, (char *)s->params + s->bounds[b] * tri_dtype_size(s->param_dtype), &s->gathers[b]);
}

void tri_grad_sync_gather_into(tri_grad_sync *s, int b, void *dst, tri_req *req) { gather_bucket(s, b, dst, req); }

static int cmp_size(const void *a, const void *b) {
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

int tri_grad_sync_recut(tri_grad_sync *s, const size_t *cuts, int n_cuts, double bucket_mb) {
    const size_t unit = (size_t)s->dp->size * TRI_ZERO_ALIGN;
    size_t per = bucket_mb > 0 ? (size_t)(bucket_mb * 1024.0 * 1024.0 / sizeof(float)) : s->n_floats;
    per = (per + unit - 1) / unit * unit;
    if (per == 0) per = unit;
    /* the fixed edges: 0, n_floats and each cut rounded down and up */
    size_t *e = malloc(((size_t)n_cuts * 2 + 2) * sizeof *e);
    if (!e) return tri_error("out of memory (gradient buckets)");
    int ne = 0;
    e[ne++] = 0;
    e[ne++] = s->n_floats;
    for (int i = 0; i < n_cuts; i++) {
        if (cuts[i] > s->n_floats) {
            free(e);
            return tri_error("internal error: bucket cut at %zu beyond the %zu floats", cuts[i], s->n_floats);
        }
        e[ne++] = cuts[i] / unit * unit;
        e[ne++] = (cuts[i] + unit - 1) / unit * unit;
    }
    qsort(e, (size_t)ne, sizeof *e, cmp_size);
    /* count, then fill: each stretch between fixed edges in buckets of per */
    int n = 0;
    for (int pass = 0; pass < 2; pass++) {
        n = 0;
        for (int i = 0; i + 1 < ne; i++)
            for (size_t at = e[i]; at < e[i + 1]; at += per, n++)
                if (pass) s->bounds[n] = at;
        if (pass) break;
        size_t *bounds = calloc((size_t)n + 1, sizeof *bounds);
        tri_req *reqs = calloc((size_t)n, sizeof *reqs), *gathers = calloc((size_t)n, sizeof *gathers);
        if (!bounds || !reqs || !gathers) {
            free(bounds);
            free(reqs);
            free(gathers);
            free(e);
            return tri_error("out of memory (gradient buckets)");
        }
        free(s->bounds);
        free(s->reqs);
        free(s->gathers);
        s->bounds = bounds;
        s->reqs = reqs;
        s->gathers = gathers;
    }
    s->n_buckets = n;
    s->bounds[n] = s->n_floats;
    free(e);
    return 0;
}

void tri_grad_sync_gather_wait(tri_grad_sync *s) {
    if (s->dp->size == 1) return;
    for (int b = 0; b < s->n_buckets; b++) tri_comm_wait(s->dp, &s->gathers[b]);
}
