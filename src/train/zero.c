/* ZeRO-2 and ZeRO-3 around the trainer. See src/train/zero.h. */
#include "train/zero.h"

#include <stdio.h>
#include <stdlib.h>

#include "base/err.h"
#include "base/size.h"
#include "train/zero_units.h"

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

/* ---- ZeRO-3: units gathered around their compute (src/train/zero_units.h) ---- */

struct zero3 {
    trainer *t;
    tri_pipe_stage inner; /* the runtime's stage (model/stage.c) */
    zero_units *units;    /* zero_split_units; NULL before */
    size_t peak_before;   /* the allocator's parameter peak when the step began */
    int reported;         /* the first step's parameter peak printed */
};

/* Chunk k's full parameter buffer (the initial values, a checkpoint's)
 * released, its views at nothing. */
static void full_release(trainer *t, int k) {
    if (!t->gpt.chunks[k].param_mem) return;
    tri_gpt_params_release(&t->gpt, k);
    tri_grad_sync_set_params(&t->sync[k], NULL);
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

/* parallel.zero_keep_params: a training forward's units kept for the
 * backward (a validation forward has none) */
static double z_forward(void *st, int c, void *slot, const void *x, tri_pipe_mode mode, float dscale) {
    struct zero3 *z = st;
    zero_units_begin(z->units, c, 0, z->t->cfg->parallel.zero_keep_params && mode == TRI_PIPE_TRAIN);
    double loss = z->inner.ops->forward(z->inner.stage, c, slot, x, mode, dscale);
    zero_units_end(z->units, c);
    return loss;
}

static void z_backward(void *st, int c, void *slot, const void *dy) {
    struct zero3 *z = st;
    zero_units_begin(z->units, c, 1, 0);
    z->inner.ops->backward(z->inner.stage, c, slot, dy);
    zero_units_end(z->units, c);
}

static void z_backward_input(void *st, int c, void *slot, const void *dy) {
    struct zero3 *z = st;
    zero_units_begin(z->units, c, 1, 0);
    z->inner.ops->backward_input(z->inner.stage, c, slot, dy);
    zero_units_end(z->units, c);
}

/* the weight gradients read no weights (dout^T @ input): nothing gathered */
static void z_backward_weight(void *st, int c, void *slot) {
    struct zero3 *z = st;
    z->inner.ops->backward_weight(z->inner.stage, c, slot);
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
    t->zero3 = z;
    view->ops = &ZERO3_STAGE;
    view->stage = z;
    return 0;
}

int zero_split_units(trainer *t) {
    if (!t->zero3) return 0;
    const tri_config *cfg = t->cfg;
    if (zero_units_cut(&t->gpt, t->sync, cfg->parallel.zero_unit_layers, cfg->parallel.bucket_mb) != 0) return -1;
    t->zero3->units = zero_units_new(&t->gpt, t->sync, &t->ctx, cfg->parallel.zero_unit_layers);
    return t->zero3->units ? 0 : -1;
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
        full_release(t, k);
    }
    return 0;
}

int zero_params_gather_all(trainer *t) {
    if (!t->zero3) return 0;
    zero_units_release_all(t->zero3->units);
    for (int k = 0; k < t->gpt.n_chunks; k++) {
        if (tri_gpt_params_acquire(&t->gpt, k) != 0)
            TRI_FAIL("rank %d: no memory to gather chunk %d's parameters (ZeRO-3)", t->dist.mesh.rank, k);
        tri_grad_sync *s = &t->sync[k];
        tri_grad_sync_set_params(s, t->gpt.chunks[k].param_mem);
        for (int b = 0; b < s->n_buckets; b++) tri_grad_sync_gather_start(s, b);
    }
    for (int k = 0; k < t->gpt.n_chunks; k++) tri_grad_sync_gather_wait(&t->sync[k]);
    return 0;
}

void zero_params_release_all(trainer *t) {
    if (!t->zero3) return;
    zero_units_release_all(t->zero3->units);
    for (int k = 0; k < t->gpt.n_chunks; k++) full_release(t, k);
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
    zero_params_release_all(t); /* (a unit gathered early and not used since is stale now) */
    if (t->zero3) { /* the step's own parameter peak, measured by the allocator (zero_step_reduced) */
        t->zero3->peak_before = t->ctx.mem.peak[TRI_MEM_PARAMS];
        t->ctx.mem.peak[TRI_MEM_PARAMS] = t->ctx.mem.bytes[TRI_MEM_PARAMS];
    }
    tri_gpt *g = &t->gpt;
    for (int k = 0; k < g->n_chunks; k++) {
        if (tri_gpt_grads_acquire(g, k) != 0) return -1;
        tri_grad_sync_set_grads(&t->sync[k], g->chunks[k].grad_mem);
    }
    return 0;
}

/* The parameter bytes at most within the step that began with
 * zero_step_begin (the shards and the units gathered at once), printed once;
 * the allocator's run-long peak restored around it. */
static void step_peak(trainer *t) {
    struct zero3 *z = t->zero3;
    size_t *peak = &t->ctx.mem.peak[TRI_MEM_PARAMS], in_step = *peak;
    if (z->peak_before > *peak) *peak = z->peak_before;
    if (z->reported || !t->is_logger || t->opts.quiet) return;
    z->reported = 1;
    size_t shards = t->ctx.mem.bytes[TRI_MEM_PARAMS];
    char a[32], b[32];
    int L = t->cfg->parallel.zero_unit_layers;
    printf("trident: ZeRO-3 parameters within a step: %s, of which %s gathered (units of %d layer%s); bytes "
           "step_peak_params=%zu shards=%zu\n",
           tri_size_human(a, sizeof a, (double)in_step), tri_size_human(b, sizeof b, (double)(in_step - shards)), L,
           L == 1 ? "" : "s", in_step, shards);
    fflush(stdout);
}

void zero_step_reduced(trainer *t) {
    if (t->cfg->parallel.zero < 2) return;
    zero_params_release_all(t); /* before the update changes the shards */
    if (t->zero3) step_peak(t);
    tri_gpt *g = &t->gpt;
    for (int k = 0; k < g->n_chunks; k++) {
        tri_gpt_grads_release(g, k);
        tri_grad_sync_set_grads(&t->sync[k], NULL);
    }
}

void zero_free(trainer *t) {
    if (t->zero3) zero_units_free(t->zero3->units); /* (the units' buffers, before their buckets) */
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
