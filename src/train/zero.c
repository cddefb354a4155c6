/* ZeRO-2 and ZeRO-3 around the trainer. See src/train/zero.h. */
#include "train/zero.h"

#include <stdio.h>
#include <stdlib.h>

#include "base/err.h"
#include "base/size.h"

/* The group gradients are reduced over and states sharded across: the
 * data-parallel group, or data x context with parallel.cp > 1 (the buckets,
 * tri_grad_sync_init_zero in setup.c, are made with the same). */
static const tri_comm *zero_group(const trainer *t) { return tri_dist_grad_group((tri_dist *)&t->dist); }

double zero_bytes_per_param(int zero, int d, int param_bytes) {
    double p = param_bytes, g = 4.0, o = param_bytes == 4 ? 8.0 : 12.0; /* fp32 parameters are their own masters */
    if (d < 1) d = 1;
    switch (zero) {
    case 0: return p + g + o;
    case 1: return p + g + o / d;
    case 2: return p + (g + o) / d;
    default: return (p + g + o) / d;
    }
}

/* ---- ZeRO-3: chunks gathered around their compute ---- */

enum { Z_OFF, Z_GATHERING, Z_HELD };

struct zero3 {
    trainer *t;
    tri_pipe_stage inner; /* the runtime's stage (model/stage.c) */
    int state[TRI_PIPE_MAX_CHUNKS];
};

/* Starts the all-gather of chunk c's parameters into a new full buffer
 * (nothing when it is held or on its way). */
static void gather_start(struct zero3 *z, int c) {
    if (z->state[c] != Z_OFF) return;
    trainer *t = z->t;
    if (tri_gpt_params_acquire(&t->gpt, c) != 0)
        TRI_FAIL("rank %d: no memory to gather chunk %d's parameters (ZeRO-3)", t->dist.mesh.rank, c);
    tri_grad_sync *s = &t->sync[c];
    tri_grad_sync_set_params(s, t->gpt.chunks[c].param_mem);
    for (int b = 0; b < s->n_buckets; b++) tri_grad_sync_gather_start(s, b);
    z->state[c] = Z_GATHERING;
}

/* Chunk c's full parameters, gathered. */
static void need(struct zero3 *z, int c) {
    gather_start(z, c);
    if (z->state[c] == Z_GATHERING) tri_grad_sync_gather_wait(&z->t->sync[c]);
    z->state[c] = Z_HELD;
}

/* Chunk c's full buffer released (after its gather completed). */
static void drop(struct zero3 *z, int c) {
    if (z->state[c] == Z_OFF) return;
    if (z->state[c] == Z_GATHERING) tri_grad_sync_gather_wait(&z->t->sync[c]);
    tri_gpt_params_release(&z->t->gpt, c);
    tri_grad_sync_set_params(&z->t->sync[c], NULL);
    z->state[c] = Z_OFF;
}

static void *z_acquire(void *st, int c) {
    struct zero3 *z = st;
    return z->inner.ops->acquire(z->inner.stage, c);
}

static void z_release(void *st, int c, void *slot) {
    struct zero3 *z = st;
    z->inner.ops->release(z->inner.stage, c, slot);
}

static void z_stage_batch(void *st, int c, void *slot, const int32_t *ids, const int32_t *targets) {
    struct zero3 *z = st;
    z->inner.ops->stage_batch(z->inner.stage, c, slot, ids, targets);
}

/* forward: chunk c gathered, chunk c+1's gather on its way meanwhile */
static double z_forward(void *st, int c, void *slot, const void *x, tri_pipe_mode mode, float dscale) {
    struct zero3 *z = st;
    need(z, c);
    if (c + 1 < z->inner.n_chunks) gather_start(z, c + 1);
    double loss = z->inner.ops->forward(z->inner.stage, c, slot, x, mode, dscale);
    /* parallel.zero_keep_params: kept for the backward (training only: a
     * validation forward has none) */
    if (!(z->t->cfg->parallel.zero_keep_params && mode == TRI_PIPE_TRAIN)) drop(z, c);
    return loss;
}

/* backward runs the chunks the other way: c-1's gather is the early one */
static void z_backward(void *st, int c, void *slot, const void *dy) {
    struct zero3 *z = st;
    need(z, c);
    if (c > 0) gather_start(z, c - 1);
    z->inner.ops->backward(z->inner.stage, c, slot, dy);
    drop(z, c);
}

static void z_backward_input(void *st, int c, void *slot, const void *dy) {
    struct zero3 *z = st;
    need(z, c);
    z->inner.ops->backward_input(z->inner.stage, c, slot, dy);
    drop(z, c);
}

/* (the weight gradients need no weights, but recompute reruns the forward) */
static void z_backward_weight(void *st, int c, void *slot) {
    struct zero3 *z = st;
    need(z, c);
    z->inner.ops->backward_weight(z->inner.stage, c, slot);
    drop(z, c);
}

static void z_copy_act(void *st, void *dst) {
    struct zero3 *z = st;
    z->inner.ops->copy_act(z->inner.stage, dst);
}

static void z_copy_grad(void *st, void *dst) {
    struct zero3 *z = st;
    z->inner.ops->copy_grad(z->inner.stage, dst);
}

static const tri_stage_ops ZERO3_STAGE = {
    .acquire = z_acquire,
    .release = z_release,
    .stage_batch = z_stage_batch,
    .forward = z_forward,
    .backward = z_backward,
    .backward_input = z_backward_input,
    .backward_weight = z_backward_weight,
    .copy_act = z_copy_act,
    .copy_grad = z_copy_grad,
};

int zero_wrap_stage(trainer *t, tri_pipe_stage *view) {
    if (t->cfg->parallel.zero < 3) return 0;
    struct zero3 *z = calloc(1, sizeof *z);
    if (!z) return tri_error("out of memory (ZeRO-3 state)");
    z->t = t;
    z->inner = *view;
    for (int c = 0; c < TRI_PIPE_MAX_CHUNKS; c++) z->state[c] = Z_HELD; /* until zero_params_shard */
    t->zero3 = z;
    view->ops = &ZERO3_STAGE;
    view->stage = z;
    return 0;
}

int zero_params_shard(trainer *t) {
    if (!t->zero3) return 0;
    tri_gpt *g = &t->gpt;
    for (int k = 0; k < g->n_chunks; k++) {
        tri_grad_sync *s = &t->sync[k];
        tri_chunk *ch = &g->chunks[k];
        const size_t esz = tri_dtype_size(ch->param_dtype), n = tri_grad_sync_shard_floats(s);
        if (!s->pshard) {
            void *p = tri_ctx_alloc(&t->ctx, n * esz, TRI_MEM_PARAMS, "parameter shards (ZeRO-3)");
            if (!p) return -1;
            tri_grad_sync_set_pshard(s, p);
        }
        TRI_CHECK(ch->param_mem != NULL);
        size_t s0 = 0;
        for (int b = 0; b < s->n_buckets; b++) {
            size_t lo, hi;
            tri_grad_sync_shard(s, b, &lo, &hi);
            t->ctx.ops->copy(&t->ctx, (char *)s->pshard + s0 * esz, (const char *)ch->param_mem + lo * esz,
                             (hi - lo) * esz);
            s0 += hi - lo;
        }
        t->zero3->state[k] = Z_HELD;
        drop(t->zero3, k);
    }
    return 0;
}

int zero_params_gather_all(trainer *t) {
    if (!t->zero3) return 0;
    for (int k = 0; k < t->gpt.n_chunks; k++) gather_start(t->zero3, k);
    for (int k = 0; k < t->gpt.n_chunks; k++) need(t->zero3, k);
    return 0;
}

void zero_params_release_all(trainer *t) {
    if (!t->zero3) return;
    for (int k = 0; k < t->gpt.n_chunks; k++) drop(t->zero3, k);
}

/* ---- ZeRO-2 (and 3): gradient shards ---- */

int zero_setup(trainer *t) {
    if (t->cfg->parallel.zero < 2) return 0;
    tri_gpt *g = &t->gpt;
    for (int k = 0; k < g->n_chunks; k++) {
        tri_grad_sync *s = &t->sync[k];
        size_t n = tri_grad_sync_shard_floats(s);
        float *shard = tri_ctx_alloc(&t->ctx, n * sizeof(float), TRI_MEM_GRADS, "gradient shards (ZeRO-2)");
        if (!shard) return -1;
        t->ctx.ops->zero(&t->ctx, shard, n * sizeof(float));
        tri_grad_sync_set_shard(s, shard);
        tri_gpt_grads_release(g, k);
        tri_grad_sync_set_grads(s, NULL);
    }
    /* ZeRO-3: the updated shards stay where they are until the next gather */
    if (t->zero3) t->opt.shard_done = NULL;
    return 0;
}

int zero_step_begin(trainer *t) {
    if (t->cfg->parallel.zero < 2) return 0;
    zero_params_release_all(t); /* (a chunk gathered early and not used since is stale now) */
    tri_gpt *g = &t->gpt;
    for (int k = 0; k < g->n_chunks; k++) {
        if (tri_gpt_grads_acquire(g, k) != 0) return -1;
        tri_grad_sync_set_grads(&t->sync[k], g->chunks[k].grad_mem);
    }
    return 0;
}

void zero_step_reduced(trainer *t) {
    if (t->cfg->parallel.zero < 2) return;
    zero_params_release_all(t); /* before the update changes the shards */
    tri_gpt *g = &t->gpt;
    for (int k = 0; k < g->n_chunks; k++) {
        tri_gpt_grads_release(g, k);
        tri_grad_sync_set_grads(&t->sync[k], NULL);
    }
}

void zero_free(trainer *t) {
    if (t->sync && t->ctx.ops) {
        for (int k = 0; k < t->gpt.n_chunks; k++) {
            tri_grad_sync *s = &t->sync[k];
            if (s->shard)
                tri_ctx_release(&t->ctx, s->shard, tri_grad_sync_shard_floats(s) * sizeof(float), TRI_MEM_GRADS);
            if (s->pshard && s->dp)
                tri_ctx_release(&t->ctx, s->pshard,
                                tri_grad_sync_shard_floats(s) * tri_dtype_size(t->gpt.chunks[k].param_dtype),
                                TRI_MEM_PARAMS);
            s->shard = NULL;
            s->pshard = NULL;
        }
    }
    free(t->zero3);
    t->zero3 = NULL;
}

void zero_report(const trainer *t) {
    int zero = t->cfg->parallel.zero;
    if (zero < 1 || !t->is_logger || t->opts.quiet) return;
    const tri_mem_stats *m = &t->ctx.mem;
    size_t n = 0, held = m->bytes[TRI_MEM_PARAMS] + m->bytes[TRI_MEM_GRADS] + m->bytes[TRI_MEM_OPTIM];
    for (int k = 0; k < t->gpt.n_chunks; k++) n += t->gpt.chunks[k].n_elems;
    int d = zero_group(t)->size, pb = (int)tri_dtype_size(t->gpt.chunks[0].param_dtype);
    char a[32], b[32], c[32];
    printf("trident: ZeRO-%d held per rank between steps: params %s, grads %s, optimizer %s = %.3f bytes per "
           "parameter (closed form %.3f over %s=%d, the rest is padding); bytes params=%zu grads=%zu optim=%zu "
           "n_params=%zu\n",
           zero, tri_size_human(a, sizeof a, (double)m->bytes[TRI_MEM_PARAMS]),
           tri_size_human(b, sizeof b, (double)m->bytes[TRI_MEM_GRADS]),
           tri_size_human(c, sizeof c, (double)m->bytes[TRI_MEM_OPTIM]), n ? (double)held / (double)n : 0.0,
           zero_bytes_per_param(zero, d, pb), t->dist.mesh.cp > 1 ? "dp x cp" : "dp", d, m->bytes[TRI_MEM_PARAMS],
           m->bytes[TRI_MEM_GRADS],
           m->bytes[TRI_MEM_OPTIM], n);
    fflush(stdout);
}
