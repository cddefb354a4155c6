#include "tiny_steps.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "model/gpt.h"
#include "model/optim.h"
#include "model/runtime.h"

static uint64_t rng(uint64_t *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 33;
}

/* ZeRO's hook: counts the shards updated; ZeRO-3 gathers the updated shard
 * into the full parameter buffer at once (a copy at dp = 1). */
typedef struct shard_ctx {
    int *count;
    tri_grad_sync *sync;
} shard_ctx;

static void count_shard(void *ctx, int chunk, int bucket) {
    shard_ctx *s = ctx;
    (void)chunk;
    ++*s->count;
    if (s->sync->pshard) tri_grad_sync_gather_start(s->sync, bucket);
}

/* The chunk's grads_ready during a backward: to grad_sync, then the probe. */
typedef struct ready_ctx {
    tri_grad_sync *sync;
    const tt_tiny_opts *opts;
    int step;
} ready_ctx;

static void grads_ready(void *ctx, size_t n) {
    ready_ctx *r = ctx;
    tri_grad_sync_ready(r->sync, n);
    if (r->opts->probe) r->opts->probe(r->opts->probe_ctx, r->step, TT_BWD_READY, n);
}

/* opts->bucket_mb > 0: grad_sync over a group of one, buckets of that many
 * MiB (several, with ZeRO's shards that start and end inside tensors). */
static void run(tri_ctx *ctx, tri_dtype precision, int steps, int profile, const tt_tiny_opts *opts, int moments,
                tt_tiny_run *out) {
    const int offload = opts->offload;
    const double zero_mb = opts->zero ? opts->bucket_mb : 0;
    tri_model_cfg cfg = {.n_layer = TT_TINY_LAYERS, .n_head = 2, .n_embd = 32, .seq_len = 16, .vocab_size = 100};
    enum { B = 2, T = 16, BT = B * T };
    tri_comm self;
    tri_gpt g;
    tri_slot_pool pool;
    tri_workspace ws;
    cr_assert(steps > 0 && steps <= TT_TINY_MAX_STEPS);
    memset(out, 0, sizeof *out);
    cr_assert_eq(tri_ctx_set_precision(ctx, precision), 0);
    tri_comm_init_self(&self, 0);
    self.ctx = ctx;
    cr_assert_eq(tri_gpt_init_single(&g, &cfg, ctx, &self, 1, 0), 0);
    tri_comm *dp = opts->dp ? opts->dp : &self; /* the gradients' group */
    if (zero_mb > 0) cr_assert_eq(tri_gpt_pad(&g, (size_t)dp->size * TRI_ZERO_ALIGN), 0);
    cr_assert_eq(tri_slot_pool_init(&pool, &g, 0, B, T, TRI_RECOMPUTE_NONE, 1, 0), 0);
    cr_assert_eq(tri_workspace_init(&ws, &g, B, T, TRI_RECOMPUTE_NONE), 0);
    cr_assert_eq(tri_gpt_init_params(&g, 17), 0);
    tri_adamw_cfg oc = {.lr = 3e-3,
                        .min_lr = 3e-4,
                        .warmup_steps = 2,
                        .total_steps = steps,
                        .beta1 = 0.9,
                        .beta2 = 0.95,
                        .eps = 1e-8,
                        .weight_decay = 0.1,
                        .grad_clip = 1.0,
                        .offload = offload ? TRI_OFFLOAD_OPTIMIZER : TRI_OFFLOAD_NONE};
    tri_optim o;
    tri_grad_sync sync;
    float *shard = NULL;
    void *pshard = NULL;
    ready_ctx rc = {&sync, opts, 0};
    shard_ctx sc = {&out->shards_done, &sync};
    if (zero_mb > 0) {
        tri_chunk *c0 = &g.chunks[0];
        cr_assert_eq(tri_grad_sync_init_zero(&sync, c0->grad_mem, c0->param_mem, c0->param_dtype, c0->n_elems,
                                             c0->n_alloc, dp, zero_mb),
                     0);
        cr_assert_gt(sync.n_buckets, 2, "the test wants several buckets");
        if (opts->zero >= 2) { /* the reduce-scatter (a copy at dp = 1) into a shard buffer */
            shard = tri_ctx_alloc(ctx, tri_grad_sync_shard_floats(&sync) * sizeof(float), TRI_MEM_GRADS, "shards");
            cr_assert_not_null(shard);
            tri_grad_sync_set_shard(&sync, shard);
        }
        cr_assert_eq(tri_optim_init_zero(&o, &g, &oc, &sync), 0);
        o.shard_done = count_shard;
        o.shard_done_ctx = &sc;
    } else {
        if (opts->bucket_mb > 0) {
            cr_assert_eq(tri_grad_sync_init(&sync, g.chunks[0].grad_mem, g.chunks[0].n_elems, dp, opts->bucket_mb), 0);
            cr_assert_gt(sync.n_buckets, 2, "the test wants several buckets");
        }
        cr_assert_eq(tri_optim_init(&o, &g, &oc), 0);
    }
    if (opts->bucket_mb > 0) {
        g.chunks[0].grads_ready = grads_ready;
        g.chunks[0].grads_ready_ctx = &rc;
    }
    if (opts->overlap) cr_assert_eq(tri_optim_offload_overlap(&o, &g, &sync), 0);
    tri_optim_master_from_params(&o, &g);
    if (opts->zero == 3) {
        cr_assert_eq(
            dp->size, 1,
            "ZeRO-3 here over a group of one only"); /* the parameters' home: their shards (all of them at dp = 1), gathered after each update */
        const size_t bytes = tri_grad_sync_shard_floats(&sync) * tri_dtype_size(g.chunks[0].param_dtype);
        pshard = tri_ctx_alloc(ctx, bytes, TRI_MEM_PARAMS, "parameter shards");
        cr_assert_not_null(pshard);
        ctx->ops->copy(ctx, pshard, g.chunks[0].param_mem, bytes);
        tri_grad_sync_set_pshard(&sync, pshard);
    }
    tri_profile *prof = NULL;
    if (profile >= 0) {
        prof = tri_profile_start(ctx, profile);
        cr_assert_not_null(prof);
        cr_assert_eq(tri_gpt_profile_roles(&g, prof), 0);
    }
    tri_chunk *ch = &g.chunks[0];
    int32_t ids[BT], tgt[BT];
    uint64_t s = 77;
    const double t0 = tri_now_s();
    for (int step = 0; step < steps; step++) {
        for (size_t i = 0; i < BT; i++) {
            ids[i] = (int32_t)(rng(&s) % 100);
            tgt[i] = (int32_t)(rng(&s) % 100);
        }
        ctx->ops->zero(ctx, ch->grad_mem, ch->n_elems * sizeof(float));
        tri_slot *sl = tri_slot_acquire(&pool, &g);
        tri_slot_stage(&g, &pool, sl, ids, tgt);
        const double sum = tri_chunk_forward(&g, &pool, sl, &ws, NULL, TRI_FWD_TRAIN, (float)(1.0 / (double)BT));
        rc.step = step;
        if (opts->bucket_mb > 0) {
            tri_grad_sync_begin(&sync);
            tri_grad_sync_set_last(&sync, 1);
        }
        if (opts->probe) opts->probe(opts->probe_ctx, step, TT_BWD_START, 0);
        tri_chunk_backward(&g, &pool, sl, &ws, NULL);
        if (opts->probe) opts->probe(opts->probe_ctx, step, TT_BWD_END, ch->n_elems);
        if (opts->bucket_mb > 0) tri_grad_sync_finish(&sync);
        tri_slot_release(&pool, &g, sl);
        out->loss[step] = sum / (double)BT;
        const double norm = sqrt(tri_grad_sumsq_local(&g));
        /* ZeRO-2/3: the full gradient buffer is gone after the reduction (in
         * training it is released): poisoned, so that a step reading it shows */
        if (shard) ctx->ops->scale(ctx, ch->grad_mem, NAN, ch->n_elems);
        tri_optim_step(&o, &g, tri_lr_at(&oc, step), norm > 1.0 ? (float)(1.0 / (norm + 1e-6)) : 1.0f);
        if (prof) tri_profile_step(prof);
    }
    out->wall_ms = 1e3 * (tri_now_s() - t0);
    if (prof) {
        out->tot = *tri_profile_totals(prof);
        tri_profile_stop(prof);
    }
    /* (with ZeRO over dp > 1 the masters hold this rank's shards only) */
    out->n = o.master[0] && o.sync && dp->size > 1 ? o.n_state[0] : ch->n_elems;
    out->params = malloc(out->n * sizeof(float));
    cr_assert_not_null(out->params);
    tri_optim_copy_to_host(&o, &g, out->params, o.master[0] ? o.master[0] : ch->param_mem, out->n * sizeof(float));
    if (moments) {
        out->n_state = o.n_state[0];
        out->m = malloc(out->n_state * sizeof(float));
        out->v = malloc(out->n_state * sizeof(float));
        cr_assert(out->m && out->v);
        tri_optim_copy_to_host(&o, &g, out->m, o.m[0], out->n_state * sizeof(float));
        tri_optim_copy_to_host(&o, &g, out->v, o.v[0], out->n_state * sizeof(float));
    }
    out->mem = ctx->mem;
    tri_optim_free(&o, &g);
    if (shard) tri_ctx_release(ctx, shard, tri_grad_sync_shard_floats(&sync) * sizeof(float), TRI_MEM_GRADS);
    if (pshard)
        tri_ctx_release(ctx, pshard, tri_grad_sync_shard_floats(&sync) * tri_dtype_size(g.chunks[0].param_dtype),
                        TRI_MEM_PARAMS);
    if (opts->bucket_mb > 0) tri_grad_sync_free(&sync);
    tri_slot_pool_free(&pool, &g);
    tri_workspace_free(&ws, &g);
    tri_gpt_free(&g);
}

void tt_tiny_steps(tri_ctx *ctx, tri_dtype precision, int steps, int profile, tt_tiny_run *out) {
    const tt_tiny_opts opts = {0};
    run(ctx, precision, steps, profile, &opts, 0, out);
}

void tt_tiny_steps_offload(tri_ctx *ctx, tri_dtype precision, int steps, int offload, tt_tiny_run *out) {
    const tt_tiny_opts opts = {.offload = offload};
    run(ctx, precision, steps, -1, &opts, 0, out);
}

void tt_tiny_steps_zero(tri_ctx *ctx, tri_dtype precision, int steps, int offload, double bucket_mb, tt_tiny_run *out) {
    const tt_tiny_opts opts = {.offload = offload, .bucket_mb = bucket_mb, .zero = 1};
    run(ctx, precision, steps, -1, &opts, 0, out);
}

void tt_tiny_steps_opts(tri_ctx *ctx, tri_dtype precision, int steps, const tt_tiny_opts *opts, tt_tiny_run *out) {
    run(ctx, precision, steps, -1, opts, 1, out);
}
