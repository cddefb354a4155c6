/* The runtime as the pipeline executor's stage. See model/stage.h. */
#include "model/stage.h"

#include "base/err.h"
#include "kernels/ops.h"

static void *stage_acquire(void *stage, int c) {
    tri_stage *st = stage;
    return tri_slot_acquire(&st->pools[c], st->g);
}

static void stage_release(void *stage, int c, void *slot) {
    tri_stage *st = stage;
    tri_slot_release(&st->pools[c], st->g, slot);
}

static void stage_batch(void *stage, int c, void *slot, const int32_t *ids, const int32_t *targets) {
    tri_stage *st = stage;
    tri_slot_stage(st->g, &st->pools[c], slot, ids, targets);
}

static double stage_forward(void *stage, int c, void *slot, const void *x, tri_pipe_mode mode, float dscale) {
    tri_stage *st = stage;
    tri_fwd_mode m = mode == TRI_PIPE_TRAIN ? TRI_FWD_TRAIN : TRI_FWD_LOSS;
    return tri_chunk_forward(st->g, &st->pools[c], slot, st->ws, x, m, dscale);
}

static void stage_backward(void *stage, int c, void *slot, const void *dy) {
    tri_stage *st = stage;
    tri_chunk_backward(st->g, &st->pools[c], slot, st->ws, dy);
}

static void stage_backward_input(void *stage, int c, void *slot, const void *dy) {
    tri_stage *st = stage;
    tri_chunk_backward_input(st->g, &st->pools[c], slot, st->ws, dy);
}

static void stage_backward_weight(void *stage, int c, void *slot) {
    tri_stage *st = stage;
    tri_chunk_backward_weight(st->g, &st->pools[c], slot, st->ws);
}

static void stage_copy_act(void *stage, void *dst) {
    tri_stage *st = stage;
    tri_ctx *ctx = st->g->ctx;
    ctx->ops->copy(ctx, dst, st->ws->out, st->boundary_bytes);
}

static void stage_copy_grad(void *stage, void *dst) {
    tri_stage *st = stage;
    tri_ctx *ctx = st->g->ctx;
    ctx->ops->copy(ctx, dst, st->ws->dres, st->boundary_bytes);
}

static const tri_stage_ops RUNTIME_STAGE = {
    .acquire = stage_acquire,
    .release = stage_release,
    .stage_batch = stage_batch,
    .forward = stage_forward,
    .backward = stage_backward,
    .backward_input = stage_backward_input,
    .backward_weight = stage_backward_weight,
    .copy_act = stage_copy_act,
    .copy_grad = stage_copy_grad,
};

void tri_stage_ends(const tri_gpt *g, unsigned char *ends) {
    for (int c = 0; c < g->n_chunks; c++)
        ends[c] = (unsigned char)((g->chunks[c].has_embedding ? TRI_PIPE_FIRST : 0) |
                                  (g->chunks[c].has_head ? TRI_PIPE_LAST : 0));
}

tri_pipe_stage tri_stage_bind(tri_stage *st, tri_gpt *g, tri_slot_pool *pools, tri_workspace *ws) {
    TRI_CHECK(g->n_chunks >= 1 && g->n_chunks <= TRI_PIPE_MAX_CHUNKS);
    /* a chunk boundary: the rank's rows of the residual stream (a shard of
     * them under sequence parallelism) */
    size_t elems = tri_chunk_boundary_elems(g, pools[0].B, pools[0].T);
    st->g = g;
    st->pools = pools;
    st->ws = ws;
    st->boundary_bytes = elems * tri_dtype_size(g->ctx->act_dtype);
    tri_pipe_stage v = {.ops = &RUNTIME_STAGE,
                        .stage = st,
                        .n_chunks = g->n_chunks,
                        .ctx = g->ctx,
                        .boundary_elems = elems,
                        .dtype = g->ctx->act_dtype};
    tri_stage_ends(g, v.ends);
    return v;
}
