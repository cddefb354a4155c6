/* The stage runtime: slots, workspace, blocks, chunks. See model/runtime.h. */
#include "model/runtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "model/cp.h"
#include "base/size.h"
#include "model/llama.h"
#include "parallel/tensor.h"

int tri_recompute_parse(const char *s) {
    if (strcmp(s, "none") == 0) return TRI_RECOMPUTE_NONE;
    if (strcmp(s, "selective") == 0) return TRI_RECOMPUTE_SELECTIVE;
    if (strcmp(s, "full") == 0) return TRI_RECOMPUTE_FULL;
    return -1;
}

const char *tri_recompute_name(tri_recompute r) {
    return r == TRI_RECOMPUTE_FULL ? "full" : r == TRI_RECOMPUTE_SELECTIVE ? "selective" : "none";
}

/* The backend whose ops run (or would run) the model: a description without
 * a context sizes buffers for the CPU backend. */
static const tri_ops *ops_of(const tri_gpt *g) { return g->ctx ? g->ctx->ops : tri_ops_cpu(); }
static size_t act_size(const tri_gpt *g) { return tri_dtype_size(g->ctx ? g->ctx->act_dtype : TRI_F32); }
/* Rows of the residual stream this rank holds for BT tokens: all of them, or
 * under sequence parallelism its shard of BT / tp (docs/parallelism.md). */
static size_t res_rows(const tri_gpt *g, size_t BT) { return g->sp ? BT / (size_t)g->tp : BT; }

size_t tri_chunk_boundary_elems(const tri_gpt *g, size_t B, size_t T) { return res_rows(g, B * T) * g->C; }

/* ------------------------------------------------------------------------ */
/* layouts: one function per buffer set, run twice (sizes, then pointers)    */

typedef struct carver {
    char *base;       /* NULL: only count       */
    tri_size_acc acc; /* bytes so far (aligned) */
} carver;

/* n elements of esz bytes, 64-byte aligned. NULL when only counting. */
static void *take(carver *cv, size_t n, size_t esz) {
    size_t off = cv->acc.total;
    tri_size_acc_add(&cv->acc, n, esz);
    tri_size_acc_add(&cv->acc, 1, (64 - cv->acc.total % 64) % 64);
    return cv->base && cv->acc.ok ? cv->base + off : NULL;
}

/* B * NHl * T fits size_t with room to spare (the attention state every
 * backend keeps: one float per (batch, head, query) row; no backend keeps
 * T x T values any more), so that the backend's own size arithmetic cannot
 * wrap. */
static int att_sizes_ok(const tri_gpt *g, size_t B, size_t T) {
    size_t f[3] = {B, T, (size_t)g->NHl}, n;
    return tri_size_prod(&n, 3, f) && n <= SIZE_MAX / 8;
}

static void carve_layer(const tri_gpt *g, carver *cv, tri_layer_acts *a, size_t B, size_t T, int with_att) {
    size_t BT = B * T, R = res_rows(g, BT), A = act_size(g), F4 = sizeof(float);
    int ln = g->arch != TRI_ARCH_LLAMA; /* LayerNorm keeps a mean, RMSNorm does not */
    a->ln1 = take(cv, R, A * g->C);
    a->ln1_mean = ln ? take(cv, R, F4) : NULL;
    a->ln1_rstd = take(cv, R, F4);
    a->qkv = take(cv, BT, A * g->QKVl);
    a->att = with_att ? take(cv, ops_of(g)->attention_saved_floats(B, T, g->NHl, g->NKVl, g->HS), F4) : NULL;
    a->atty = take(cv, BT, A * g->Cl);
    a->res2 = take(cv, R, A * g->C);
    a->ln2 = take(cv, R, A * g->C);
    a->ln2_mean = ln ? take(cv, R, F4) : NULL;
    a->ln2_rstd = take(cv, R, F4);
    a->fch = take(cv, BT, A * g->FCl);
    a->fch_gelu = take(cv, BT, A * g->Fl);
}

/* Split slots: what the deferred weight gradients of one layer need beyond
 * the saved activations. Under full recompute the inputs of the four linears
 * (the slot keeps none of them otherwise); under every policy the output
 * gradients of the four linears. */
static void carve_split(const tri_gpt *g, carver *cv, tri_layer_acts *a, tri_layer_douts *d, size_t BT,
                        tri_recompute policy) {
    size_t A = act_size(g), R = res_rows(g, BT);
    if (policy == TRI_RECOMPUTE_FULL) {
        a->ln1 = take(cv, R, A * g->C);
        a->atty = take(cv, BT, A * g->Cl);
        a->ln2 = take(cv, R, A * g->C);
        a->fch_gelu = take(cv, BT, A * g->Fl);
    }
    d->dqkv = take(cv, BT, A * g->QKVl);
    d->dattproj = take(cv, BT, A * g->C);
    d->dfc = take(cv, BT, A * g->FCl);
    d->dfcproj = take(cv, BT, A * g->C);
    /* sequence parallel: the slot keeps LayerNorm outputs as shards; B
     * all-gathers them here for W, which runs no collectives */
    d->ln1g = g->sp ? take(cv, BT, A * g->C) : NULL;
    d->ln2g = g->sp ? take(cv, BT, A * g->C) : NULL;
}

/* Lays out slot s (may be NULL when counting) of chunk k; returns the byte
 * count (SIZE_MAX on overflow); *layer_bytes gets one layer's share. */
static size_t slot_layout(const tri_gpt *g, int k, size_t B, size_t T, tri_recompute policy, int split, tri_slot *s,
                          char *base, size_t *layer_bytes) {
    const tri_chunk *ch = &g->chunks[k];
    size_t BT = B * T, R = res_rows(g, BT), A = act_size(g), F4 = sizeof(float);
    carver cv = {.base = base, .acc = TRI_SIZE_ACC_INIT};
    tri_slot dummy;
    tri_layer_acts la;
    tri_layer_douts ld;
    if (!s) s = &dummy;
    s->ids = ch->has_embedding ? take(&cv, BT, sizeof(int32_t)) : NULL;
    s->targets = ch->has_head ? take(&cv, BT, sizeof(int32_t)) : NULL;
    size_t lb = 0;
    for (int i = 0; i < ch->n_layers; i++) {
        size_t before = cv.acc.total;
        tri_layer_acts *a = s == &dummy ? &la : &s->layer[i];
        void *x = take(&cv, R, A * g->C);
        if (s != &dummy) s->x[i] = x;
        if (policy == TRI_RECOMPUTE_FULL)
            memset(a, 0, sizeof *a);
        else
            carve_layer(g, &cv, a, B, T, policy == TRI_RECOMPUTE_NONE);
        if (split) carve_split(g, &cv, a, s == &dummy ? &ld : &s->dout[i], BT, policy);
        if (i == 0) lb = cv.acc.total - before;
    }
    if (ch->has_head) {
        s->x_head = take(&cv, R, A * g->C);
        s->lnf_mean = g->arch != TRI_ARCH_LLAMA ? take(&cv, R, F4) : NULL;
        s->lnf_rstd = take(&cv, R, F4);
        s->dlnf = take(&cv, R, A * g->C);
    } else {
        s->x_head = NULL;
        s->lnf_mean = s->lnf_rstd = NULL;
        s->dlnf = NULL;
    }
    if (layer_bytes) *layer_bytes = lb;
    return cv.acc.ok ? cv.acc.total : SIZE_MAX;
}

static size_t workspace_layout(const tri_gpt *g, size_t B, size_t T, tri_recompute policy, tri_workspace *w,
                               char *base) {
    size_t BT = B * T, A = act_size(g), F4 = sizeof(float);
    int any_head = 0;
    for (int k = 0; k < g->n_chunks; k++) any_head |= g->chunks[k].has_head;
    carver cv = {.base = base, .acc = TRI_SIZE_ACC_INIT};
    tri_workspace dummy;
    if (!w) w = &dummy;
    w->logits = any_head ? take(&cv, BT, A * g->Vl) : NULL;
    w->ce_stats = any_head ? take(&cv, BT, 3 * F4) : NULL;
    w->ce_gather = any_head ? take(&cv, BT * 3, F4 * (size_t)g->tp) : NULL;
    w->losses = any_head ? take(&cv, BT, F4) : NULL;
    w->out = take(&cv, BT, A * g->C);
    w->dres = take(&cv, BT, A * g->C);
    w->dln = take(&cv, BT, A * g->C);
    w->dproj = take(&cv, BT, A * g->C);
    w->datty = take(&cv, BT, A * g->Cl);
    w->dqkv = take(&cv, BT, A * g->QKVl);
    w->dfch = take(&cv, BT, A * g->FCl);
    w->dsw = g->arch == TRI_ARCH_LLAMA ? take(&cv, BT, A * g->Fl) : NULL;
    /* replicated KV heads: every head's k|v weight gradients, and this rank's set aside */
    w->kv_dw = g->kv_rep > 1 ? take(&cv, (size_t)(g->NKV + 1) * 2 * (size_t)g->HS, F4 * g->C) : NULL;
    w->att_scratch = take(&cv, ops_of(g)->attention_scratch_floats(B, T, g->NHl, g->NKVl, g->HS), F4);
    w->seq = g->sp ? take(&cv, BT, A * g->C) : NULL;
    /* context parallelism: the ring's blocks and sums (model/cp.c) */
    const size_t KVW = 2 * (size_t)g->NKVl * (size_t)g->HS;
    const int cp = g->cp > 1;
    for (int i = 0; i < 2; i++) w->cp_kv[i] = cp ? take(&cv, BT, A * KVW) : NULL;
    for (int i = 0; i < 3; i++) w->cp_dkv[i] = cp ? take(&cv, BT, F4 * KVW) : NULL;
    w->cp_o = cp ? take(&cv, BT, F4 * g->Cl) : NULL;
    w->cp_dqkv = cp ? take(&cv, BT, F4 * g->QKVl) : NULL;
    w->tp_dw = g->sp ? take(&cv, 6 * g->C, F4) : NULL;
    memset(&w->re, 0, sizeof w->re);
    w->re_out = NULL;
    if (policy == TRI_RECOMPUTE_FULL) {
        carve_layer(g, &cv, &w->re, B, T, 1);
        w->re_out = take(&cv, res_rows(g, BT), A * g->C);
    } else if (policy == TRI_RECOMPUTE_SELECTIVE) {
        /* the attention state: forward's target when the slot does not keep
         * it, rebuilt in backward together with its output */
        w->re.att = take(&cv, ops_of(g)->attention_saved_floats(B, T, g->NHl, g->NKVl, g->HS), F4);
        w->re.atty = take(&cv, BT, A * g->Cl);
    }
    return cv.acc.ok ? cv.acc.total : SIZE_MAX;
}

size_t tri_slot_bytes_why(const tri_gpt *g, int k, size_t B, size_t T, tri_recompute policy, int split,
                          size_t *layer_bytes, char *why, size_t why_n) {
    size_t n = att_sizes_ok(g, B, T) ? slot_layout(g, k, B, T, policy, split, NULL, NULL, layer_bytes) : SIZE_MAX;
    if (n == SIZE_MAX) {
        snprintf(why, why_n,
                 "saved activations of micro-batch %zu x seq_len %zu (n_embd %d, n_head %d, %d layers) overflow "
                 "a byte count: reduce train.micro_batch or model.seq_len",
                 B, T, g->cfg.n_embd, g->cfg.n_head, g->chunks[k].n_layers);
        return 0;
    }
    return n;
}

size_t tri_slot_bytes(const tri_gpt *g, int k, size_t B, size_t T, tri_recompute policy, int split,
                      size_t *layer_bytes) {
    char why[512];
    size_t n = tri_slot_bytes_why(g, k, B, T, policy, split, layer_bytes, why, sizeof why);
    if (n == 0) tri_error("%s", why);
    return n;
}

size_t tri_workspace_bytes_why(const tri_gpt *g, size_t B, size_t T, tri_recompute policy, char *why, size_t why_n) {
    size_t n = att_sizes_ok(g, B, T) ? workspace_layout(g, B, T, policy, NULL, NULL) : SIZE_MAX;
    if (n == SIZE_MAX) {
        snprintf(why, why_n,
                 "the workspace of micro-batch %zu x seq_len %zu (n_embd %d, n_head %d, vocab %zu per rank) "
                 "overflows a byte count: reduce train.micro_batch or model.seq_len",
                 B, T, g->cfg.n_embd, g->cfg.n_head, g->Vl);
        return 0;
    }
    return n;
}

size_t tri_workspace_bytes(const tri_gpt *g, size_t B, size_t T, tri_recompute policy) {
    char why[512];
    size_t n = tri_workspace_bytes_why(g, B, T, policy, why, sizeof why);
    if (n == 0) tri_error("%s", why);
    return n;
}

int tri_slot_pool_init(tri_slot_pool *p, const tri_gpt *g, int k, size_t B, size_t T, tri_recompute policy, int n_slots,
                       int split) {
    memset(p, 0, sizeof *p);
    p->chunk = k;
    p->B = B;
    p->T = T;
    p->policy = policy;
    p->split = split != 0;
    p->slot_bytes = tri_slot_bytes(g, k, B, T, policy, p->split, &p->layer_bytes);
    if (p->slot_bytes == 0) return -1;
    p->slots = calloc((size_t)n_slots, sizeof *p->slots);
    if (!p->slots) return tri_error("out of memory (slot table)");
    p->n_slots = n_slots;
    const tri_chunk *ch = &g->chunks[k];
    for (int i = 0; i < n_slots; i++) {
        tri_slot *s = &p->slots[i];
        s->x = calloc((size_t)ch->n_layers + 1, sizeof *s->x);
        s->layer = calloc((size_t)ch->n_layers + 1, sizeof *s->layer);
        s->dout = p->split ? calloc((size_t)ch->n_layers + 1, sizeof *s->dout) : NULL;
        int tables = s->x && s->layer && (s->dout || !p->split);
        s->mem = tables ? tri_ctx_alloc(g->ctx, p->slot_bytes, TRI_MEM_SAVED, "saved activations") : NULL;
        if (!s->mem) {
            if (!tables) tri_error("out of memory (slot table)");
            tri_slot_pool_free(p, g);
            return -1;
        }
        size_t again = slot_layout(g, k, B, T, policy, p->split, s, s->mem, NULL);
        TRI_CHECK(again == p->slot_bytes);
    }
    return 0;
}

void tri_slot_pool_free(tri_slot_pool *p, const tri_gpt *g) {
    if (!p) return;
    for (int i = 0; i < p->n_slots; i++) {
        tri_slot *s = &p->slots[i];
        if (s->in_use) tri_ctx_saved_use(g->ctx, p->slot_bytes, 0);
        tri_ctx_release(g->ctx, s->mem, p->slot_bytes, TRI_MEM_SAVED);
        free(s->x);
        free(s->layer);
        free(s->dout);
    }
    free(p->slots);
    memset(p, 0, sizeof *p);
}

tri_slot *tri_slot_acquire(tri_slot_pool *p, const tri_gpt *g) {
    for (int i = 0; i < p->n_slots; i++)
        if (!p->slots[i].in_use) {
            p->slots[i].in_use = 1;
            tri_ctx_saved_use(g->ctx, p->slot_bytes, 1);
            return &p->slots[i];
        }
    return NULL;
}

void tri_slot_release(tri_slot_pool *p, const tri_gpt *g, tri_slot *s) {
    TRI_CHECK(s->in_use);
    s->in_use = 0;
    tri_ctx_saved_use(g->ctx, p->slot_bytes, 0);
}

int tri_workspace_init(tri_workspace *w, const tri_gpt *g, size_t B, size_t T, tri_recompute policy) {
    memset(w, 0, sizeof *w);
    w->B = B;
    w->T = T;
    w->bytes = tri_workspace_bytes(g, B, T, policy);
    if (w->bytes == 0) return -1;
    w->mem = tri_ctx_alloc(g->ctx, w->bytes, TRI_MEM_WORKSPACE, "workspace");
    if (!w->mem) return -1;
    size_t again = workspace_layout(g, B, T, policy, w, w->mem);
    TRI_CHECK(again == w->bytes);
    return 0;
}

void tri_workspace_free(tri_workspace *w, const tri_gpt *g) {
    if (!w) return;
    if (g && g->ctx) tri_ctx_release(g->ctx, w->mem, w->bytes, TRI_MEM_WORKSPACE);
    memset(w, 0, sizeof *w);
}

void tri_slot_stage(const tri_gpt *g, const tri_slot_pool *p, tri_slot *s, const int32_t *ids, const int32_t *targets) {
    size_t n = p->B * p->T * sizeof(int32_t);
    if (ids && s->ids) tri_ctx_to_device(g->ctx, s->ids, ids, n);
    if (targets && s->targets) tri_ctx_to_device(g->ctx, s->targets, targets, n);
}

/* ------------------------------------------------------------------------ */
/* tensor-parallel regions: Megatron's f and g, with and without sequence
 * parallelism (parallel/tensor.h says which direction each call is)        */

static tri_tp_region tp_region(const tri_gpt *g) {
    return (tri_tp_region){.comm = g->tp_comm, .tp = g->tp, .sp = g->sp, .C = g->C, .dtype = g->ctx->act_dtype};
}

/* forward of g / backward of f */
static void *tp_reduce(tri_gpt *g, void *full, void *shard, size_t BT) {
    tri_tp_region r = tp_region(g);
    return tri_tp_reduce(&r, full, shard, BT);
}

/* forward of f / backward of g */
static const void *tp_gather(tri_gpt *g, void *full, const void *shard, size_t BT) {
    tri_tp_region r = tp_region(g);
    return tri_tp_gather(&r, full, shard, BT);
}

/* The gradients of the tensors applied row by row to the residual stream
 * (LayerNorm weights and biases, the row-parallel linears' biases) summed
 * over the TP group: under sequence parallelism each rank saw only its rows.
 * n tensors of C; part holds them contiguously, dst points at each gradient. */
static void tp_sum_row_grads(tri_gpt *g, float *part, float **dst, int n) {
    tri_ctx *c = g->ctx;
    /* test-only fault (model/debug.h): the sum left out, the run leaves one
     * rank's curve (tests/system/test_parallel.c) */
    if (!g->debug.skip_sp_grad_reduce) tri_comm_allreduce(g->tp_comm, part, (size_t)n * g->C, TRI_F32, TRI_SUM);
    for (int i = 0; i < n; i++) c->ops->add(c, dst[i], part + (size_t)i * g->C, g->C);
}

/* ------------------------------------------------------------------------ */
/* the MLP's linear + GELU pairs: fused where the backend has them           */

/* fch = ln @ fcw^T + fcb, fch_gelu = gelu(fch): one op where the backend
 * fuses them (kernels/ops.h matmul_gelu_fwd), else the plain ops. */
static void fc_gelu_fwd(tri_ctx *c, tri_layer_acts *a, const void *ln, const tri_layer_w *w, size_t BT, size_t C,
                        size_t Fl) {
    if (c->ops->matmul_gelu_fwd) {
        c->ops->matmul_gelu_fwd(c, a->fch_gelu, a->fch, ln, w->fcw, w->fcb, BT, C, Fl);
        return;
    }
    c->ops->matmul_fwd(c, a->fch, ln, w->fcw, w->fcb, BT, C, Fl);
    c->ops->gelu_fwd(c, a->fch_gelu, a->fch, BT * Fl);
}

/* fcproj's backward continued through the GELU: dfch (BT, Fl) = the
 * gradient at fc's output, dfcprojw += (may be NULL). Returns fc's bias
 * gradient for fc's own matmul_bwd: dfcb, or NULL when the fused op
 * (kernels/ops.h matmul_bwd_dgelu) has already added it. */
static float *fcproj_gelu_bwd(tri_ctx *c, void *dfch, float *dfcprojw, float *dfcb, const void *dy,
                              const tri_layer_acts *a, const tri_layer_w *w, size_t BT, size_t Fl, size_t C) {
    if (c->ops->matmul_bwd_dgelu) {
        c->ops->matmul_bwd_dgelu(c, dfch, dfcprojw, dfcb, dy, a->fch_gelu, w->fcprojw, a->fch, BT, Fl, C);
        return NULL;
    }
    c->ops->matmul_bwd(c, dfch, dfcprojw, NULL, dy, a->fch_gelu, w->fcprojw, BT, Fl, C);
    c->ops->gelu_bwd(c, dfch, a->fch, dfch, BT * Fl);
    return dfcb;
}

/* ------------------------------------------------------------------------ */
/* the pieces                                                                */

void tri_block_fwd(tri_gpt *g, int k, int l, tri_layer_acts *a, const void *x, void *y, tri_workspace *ws, size_t B,
                   size_t T) {
    tri_ctx *c = g->ctx;
    const tri_ops *ops = c->ops;
    const tri_layer_w *w = &g->chunks[k].w.layers[l];
    size_t BT = B * T, R = res_rows(g, BT), C = g->C, Cl = g->Cl, Fl = g->Fl;
    if (g->arch == TRI_ARCH_LLAMA) {
        tri_llama_block_fwd(g, k, l, a, x, y, ws, B, T);
        return;
    }
    float *att = a->att ? a->att : ws->re.att; /* selective: the state goes to the workspace */
    ops->layernorm_fwd(c, a->ln1, a->ln1_mean, a->ln1_rstd, x, w->ln1w, w->ln1b, R, C);
    const void *ln = tp_gather(g, ws->seq, a->ln1, BT);
    ops->matmul_fwd(c, a->qkv, ln, w->qkvw, w->qkvb, BT, C, 3 * Cl);
    tri_cp_attention_fwd(g, ws, a->atty, att, a->qkv, B, T);
    ops->matmul_fwd(c, ws->dproj, a->atty, w->attprojw, NULL, BT, Cl, C);
    const void *proj = tp_reduce(g, ws->dproj, ws->dln, BT);
    ops->residual_fwd(c, a->res2, x, proj, w->attprojb, R, C);
    ops->layernorm_fwd(c, a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, w->ln2w, w->ln2b, R, C);
    ln = tp_gather(g, ws->seq, a->ln2, BT);
    fc_gelu_fwd(c, a, ln, w, BT, C, Fl);
    ops->matmul_fwd(c, ws->dproj, a->fch_gelu, w->fcprojw, NULL, BT, Fl, C);
    proj = tp_reduce(g, ws->dproj, ws->dln, BT);
    ops->residual_fwd(c, y, a->res2, proj, w->fcprojb, R, C);
}

/* Where a layer's backward puts the gradients of its row-wise tensors: the
 * layer's gradients, or under sequence parallelism (partial sums over this
 * rank's rows) the zeroed workspace part that tp_sum_row_grads reduces. */
typedef struct row_grads {
    float *ln1w, *ln1b, *ln2w, *ln2b, *attprojb, *fcprojb;
} row_grads;

static row_grads row_grads_begin(tri_gpt *g, const tri_layer_w *dw, tri_workspace *ws) {
    if (!g->sp) return (row_grads){dw->ln1w, dw->ln1b, dw->ln2w, dw->ln2b, dw->attprojb, dw->fcprojb};
    float *p = ws->tp_dw;
    size_t C = g->C;
    g->ctx->ops->zero(g->ctx, p, 6 * C * sizeof(float));
    return (row_grads){p, p + C, p + 2 * C, p + 3 * C, p + 4 * C, p + 5 * C};
}

static void row_grads_end(tri_gpt *g, const tri_layer_w *dw, tri_workspace *ws) {
    if (!g->sp) return;
    float *dst[6] = {dw->ln1w, dw->ln1b, dw->ln2w, dw->ln2b, dw->attprojb, dw->fcprojb};
    tp_sum_row_grads(g, ws->tp_dw, dst, 6);
}

void tri_block_bwd(tri_gpt *g, int k, int l, const tri_layer_acts *a, const void *x, tri_workspace *ws, size_t B,
                   size_t T) {
    tri_ctx *c = g->ctx;
    const tri_ops *ops = c->ops;
    const tri_layer_w *w = &g->chunks[k].w.layers[l];
    const tri_layer_w *dw = &g->chunks[k].g.layers[l];
    size_t BT = B * T, R = res_rows(g, BT), C = g->C, Cl = g->Cl, Fl = g->Fl;
    if (g->arch == TRI_ARCH_LLAMA) {
        tri_llama_block_bwd(g, k, l, a, x, ws, B, T);
        return;
    }
    row_grads rg = row_grads_begin(g, dw, ws);
    /* MLP: y = res2 + fcproj(gelu(fc(ln2(res2)))) + b; ws->dres holds dy (R rows) */
    ops->bias_bwd(c, rg.fcprojb, ws->dres, R, C);
    const void *dy = tp_gather(g, ws->dproj, ws->dres, BT);
    float *dfcb = fcproj_gelu_bwd(c, ws->dfch, dw->fcprojw, dw->fcb, dy, a, w, BT, Fl, C);
    const void *ln = tp_gather(g, ws->seq, a->ln2, BT); /* the shard the slot keeps, gathered again */
    ops->matmul_bwd(c, ws->dln, dw->fcw, dfcb, ws->dfch, ln, w->fcw, BT, C, Fl);
    const void *dln = tp_reduce(g, ws->dln, ws->dproj, BT);
    ops->layernorm_bwd(c, ws->dres, rg.ln2w, rg.ln2b, dln, a->res2, w->ln2w, a->ln2_mean, a->ln2_rstd, R, C);
    /* attention: res2 = x + attproj(attn(qkv(ln1(x)))) + b; ws->dres holds dres2 */
    const float *att = a->att;
    if (!att) { /* selective recompute: rebuild the state from the saved qkv */
        tri_cp_attention_fwd(g, ws, ws->re.atty, ws->re.att, a->qkv, B, T);
        att = ws->re.att;
    }
    ops->bias_bwd(c, rg.attprojb, ws->dres, R, C);
    const void *dres2 = tp_gather(g, ws->dproj, ws->dres, BT);
    ops->matmul_bwd(c, ws->datty, dw->attprojw, NULL, dres2, a->atty, w->attprojw, BT, Cl, C);
    tri_cp_attention_bwd(g, ws, ws->dqkv, ws->datty, a->qkv, a->atty, att, B, T);
    ln = tp_gather(g, ws->seq, a->ln1, BT);
    ops->matmul_bwd(c, ws->dln, dw->qkvw, dw->qkvb, ws->dqkv, ln, w->qkvw, BT, C, 3 * Cl);
    dln = tp_reduce(g, ws->dln, ws->dproj, BT);
    ops->layernorm_bwd(c, ws->dres, rg.ln1w, rg.ln1b, dln, x, w->ln1w, a->ln1_mean, a->ln1_rstd, R, C);
    row_grads_end(g, dw, ws);
}

/* tri_block_bwd with the four matmul_bwd calls asked for dinp (and dbias)
 * only, their douts kept in d for tri_block_bwd_weight. Same ops on the same
 * operands in the same order otherwise (the CPU matmul_bwd computes its three
 * outputs independently), so dL/dx and every gradient written here are those
 * of the fused backward bit for bit. Under sequence parallelism the douts of
 * the row-parallel linears are the all-gathered residual gradients (gathered
 * straight into d) and the LayerNorm outputs are gathered into d for W. */
void tri_block_bwd_input(tri_gpt *g, int k, int l, const tri_layer_acts *a, const void *x, tri_workspace *ws,
                         const tri_layer_douts *d, size_t B, size_t T) {
    tri_ctx *c = g->ctx;
    const tri_ops *ops = c->ops;
    const tri_layer_w *w = &g->chunks[k].w.layers[l];
    const tri_layer_w *dw = &g->chunks[k].g.layers[l];
    size_t BT = B * T, R = res_rows(g, BT), C = g->C, Cl = g->Cl, Fl = g->Fl, A = act_size(g);
    if (g->arch == TRI_ARCH_LLAMA) {
        tri_llama_block_bwd_input(g, k, l, a, x, ws, d, B, T);
        return;
    }
    row_grads rg = row_grads_begin(g, dw, ws);
    /* MLP; ws->dres holds dy, the output gradient of fcproj (layernorm_bwd
     * below accumulates into ws->dres, so W gets a copy) */
    if (g->sp)
        tp_gather(g, d->dfcproj, ws->dres, BT);
    else
        ops->copy(c, d->dfcproj, ws->dres, BT * C * A);
    ops->bias_bwd(c, rg.fcprojb, ws->dres, R, C);
    float *dfcb = dw->fcb;
    if (ops->matmul_bwd_dgelu) /* fc's output gradient (and bias gradient), straight into the slot */
        dfcb = fcproj_gelu_bwd(c, d->dfc, NULL, dfcb, d->dfcproj, a, w, BT, Fl, C);
    else {
        ops->matmul_bwd(c, ws->dfch, NULL, NULL, d->dfcproj, a->fch_gelu, w->fcprojw, BT, Fl, C);
        ops->gelu_bwd(c, d->dfc, a->fch, ws->dfch, BT * Fl); /* fc's output gradient, straight into the slot */
    }
    const void *ln = g->sp ? tp_gather(g, d->ln2g, a->ln2, BT) : a->ln2;
    ops->matmul_bwd(c, ws->dln, NULL, dfcb, d->dfc, ln, w->fcw, BT, C, Fl);
    const void *dln = tp_reduce(g, ws->dln, ws->dproj, BT);
    ops->layernorm_bwd(c, ws->dres, rg.ln2w, rg.ln2b, dln, a->res2, w->ln2w, a->ln2_mean, a->ln2_rstd, R, C);
    /* attention; ws->dres holds dres2, the output gradient of attproj */
    const float *att = a->att;
    if (!att) {
        tri_cp_attention_fwd(g, ws, ws->re.atty, ws->re.att, a->qkv, B, T);
        att = ws->re.att;
    }
    if (g->sp)
        tp_gather(g, d->dattproj, ws->dres, BT);
    else
        ops->copy(c, d->dattproj, ws->dres, BT * C * A);
    ops->bias_bwd(c, rg.attprojb, ws->dres, R, C);
    ops->matmul_bwd(c, ws->datty, NULL, NULL, d->dattproj, a->atty, w->attprojw, BT, Cl, C);
    tri_cp_attention_bwd(g, ws, d->dqkv, ws->datty, a->qkv, a->atty, att, B, T);
    ln = g->sp ? tp_gather(g, d->ln1g, a->ln1, BT) : a->ln1;
    ops->matmul_bwd(c, ws->dln, NULL, dw->qkvb, d->dqkv, ln, w->qkvw, BT, C, 3 * Cl);
    dln = tp_reduce(g, ws->dln, ws->dproj, BT);
    ops->layernorm_bwd(c, ws->dres, rg.ln1w, rg.ln1b, dln, x, w->ln1w, a->ln1_mean, a->ln1_rstd, R, C);
    row_grads_end(g, dw, ws);
}

/* The four weight gradients tri_block_bwd_input left: dW += dout^T @ input,
 * in the fused order (fcproj, fc, attproj, qkv). No collectives. */
void tri_block_bwd_weight(tri_gpt *g, int k, int l, const tri_layer_acts *a, const tri_layer_douts *d, size_t B,
                          size_t T) {
    tri_ctx *c = g->ctx;
    const tri_ops *ops = c->ops;
    const tri_layer_w *w = &g->chunks[k].w.layers[l];
    const tri_layer_w *dw = &g->chunks[k].g.layers[l];
    size_t BT = B * T, C = g->C, Cl = g->Cl, Fl = g->Fl;
    TRI_CHECK(g->arch != TRI_ARCH_LLAMA); /* tri_llama_block_bwd_weight, which takes the workspace */
    const void *ln1 = d->ln1g ? d->ln1g : a->ln1, *ln2 = d->ln2g ? d->ln2g : a->ln2;
    ops->matmul_bwd(c, NULL, dw->fcprojw, NULL, d->dfcproj, a->fch_gelu, w->fcprojw, BT, Fl, C);
    ops->matmul_bwd(c, NULL, dw->fcw, NULL, d->dfc, ln2, w->fcw, BT, C, Fl);
    ops->matmul_bwd(c, NULL, dw->attprojw, NULL, d->dattproj, a->atty, w->attprojw, BT, Cl, C);
    ops->matmul_bwd(c, NULL, dw->qkvw, NULL, d->dqkv, ln1, w->qkvw, BT, C, 3 * Cl);
}

void tri_embed_fwd(tri_gpt *g, int k, const int32_t *ids, void *x, tri_workspace *ws, size_t B, size_t T) {
    const tri_chunk *ch = &g->chunks[k];
    /* vocab-parallel lookup; only TP rank 0 adds the position embedding so
     * that the reduction holds it once (g: all-reduce forward, or under
     * sequence parallelism reduce-scatter of the full lookup into x's rows) */
    void *full = g->sp ? ws->dproj : x;
    tri_cp_embedding_fwd(g, full, ids, ch->w.wte, g->tp_rank == 0 ? ch->w.wpe : NULL, B, T); /* global positions */
    tp_reduce(g, full, x, B * T); /* leaves the result in x either way */
}

void tri_embed_bwd(tri_gpt *g, int k, const int32_t *ids, const void *dx, tri_workspace *ws, size_t B, size_t T) {
    const tri_chunk *ch = &g->chunks[k];
    /* every TP rank accumulates the (replicated) position-embedding grad from
     * the whole (gathered, under sequence parallelism) gradient, so the
     * copies stay identical without a reduction */
    const void *full = tp_gather(g, ws->dproj, dx, B * T);
    tri_cp_embedding_bwd(g, ch->g.wte, ch->g.wpe, full, ids, B, T);
}

double tri_head_fwd(tri_gpt *g, int k, tri_slot *s, tri_workspace *ws, size_t B, size_t T, tri_fwd_mode mode,
                    float dscale) {
    tri_ctx *c = g->ctx;
    const tri_ops *ops = c->ops;
    const tri_chunk *ch = &g->chunks[k];
    size_t BT = B * T, R = res_rows(g, BT), C = g->C, V = (size_t)g->cfg.vocab_size;
    /* the LayerNorm output is needed only here: backward restarts from dlnf;
     * under sequence parallelism the shard goes to dproj, gathered into dln */
    void *lnf_rows = g->sp ? ws->dproj : ws->dln;
    if (g->arch == TRI_ARCH_LLAMA)
        ops->rmsnorm_fwd(c, lnf_rows, s->lnf_rstd, s->x_head, ch->w.lnfw, R, C, g->norm_eps);
    else
        ops->layernorm_fwd(c, lnf_rows, s->lnf_mean, s->lnf_rstd, s->x_head, ch->w.lnfw, ch->w.lnfb, R, C);
    const void *lnf = tp_gather(g, ws->dln, lnf_rows, BT);
    /* the LM head: the tied token embedding, or Llama's own */
    const void *head_w = g->tied ? ch->w.wte : ch->w.lm_head;
    float *head_dw = g->tied ? (float *)ch->g.wte : (float *)ch->g.lm_head;
    ops->matmul_fwd(c, ws->logits, lnf, head_w, NULL, BT, C, g->Vl);
    if (mode == TRI_FWD_LOGITS) return 0.0;
    int train = mode == TRI_FWD_TRAIN;
    ops->crossentropy_stats(c, ws->ce_stats, ws->logits, s->targets, BT, g->Vl, g->vstart, V);
    if (g->tp_comm->size > 1) {
        tri_comm_allgather(g->tp_comm, ws->ce_gather, ws->ce_stats, 3 * BT, TRI_F32);
        ops->crossentropy_combine(c, ws->ce_stats, ws->ce_gather, BT, g->tp_comm->size);
    }
    ops->crossentropy_bwd(c, ws->losses, train ? ws->logits : NULL, ws->logits, ws->ce_stats, s->targets, dscale, BT,
                          g->Vl, g->vstart, V);
    double sum = ops->sum(c, ws->losses, BT);
    if (train) {
        /* logits = lnf @ wte^T; ws->logits now holds dlogits; f's backward
         * (all-reduce, or reduce-scatter into this rank's rows) */
        void *dlnf = g->sp ? ws->dproj : s->dlnf;
        ops->matmul_bwd(c, dlnf, head_dw, NULL, ws->logits, lnf, head_w, BT, C, g->Vl);
        tp_reduce(g, dlnf, s->dlnf, BT);
    }
    return sum;
}

/* grad_mem[0, end of param i) of chunk k is final */
static void grads_final_upto(tri_chunk *ch, int i) {
    if (!ch->grads_ready) return;
    size_t n = i + 1 < ch->n_params ? ch->params[i + 1].offset : ch->n_elems;
    ch->grads_ready(ch->grads_ready_ctx, n);
}

static void head_bwd(tri_gpt *g, int k, tri_slot *s, tri_workspace *ws, size_t B, size_t T) {
    tri_ctx *c = g->ctx;
    tri_chunk *ch = &g->chunks[k];
    size_t R = res_rows(g, B * T), C = g->C;
    float *dw = g->sp ? ws->tp_dw : (float *)ch->g.lnfw, *db = g->sp ? ws->tp_dw + C : (float *)ch->g.lnfb;
    if (g->sp) c->ops->zero(c, ws->tp_dw, 2 * C * sizeof(float));
    c->ops->zero(c, ws->dres, R * C * act_size(g));
    int llama = g->arch == TRI_ARCH_LLAMA;
    if (llama)
        c->ops->rmsnorm_bwd(c, ws->dres, dw, s->dlnf, s->x_head, ch->w.lnfw, s->lnf_rstd, R, C);
    else
        c->ops->layernorm_bwd(c, ws->dres, dw, db, s->dlnf, s->x_head, ch->w.lnfw, s->lnf_mean, s->lnf_rstd, R, C);
    if (g->sp) {
        float *dst[2] = {ch->g.lnfw, ch->g.lnfb};
        tp_sum_row_grads(g, ws->tp_dw, dst, llama ? 1 : 2);
    }
}

void tri_head_bwd(tri_gpt *g, int k, tri_slot *s, tri_workspace *ws, size_t B, size_t T) {
    head_bwd(g, k, s, ws, B, T);
    /* the head's tensors come first in the buffer (ln_f weight and bias;
     * Llama's norm and untied LM head, whose gradient forward made) */
    grads_final_upto(&g->chunks[k], g->chunks[k].head_params - 1);
}

/* ------------------------------------------------------------------------ */
/* one chunk                                                                 */

double tri_chunk_forward(tri_gpt *g, tri_slot_pool *p, tri_slot *s, tri_workspace *ws, const void *x_in,
                         tri_fwd_mode mode, float dscale) {
    int k = p->chunk;
    const tri_chunk *ch = &g->chunks[k];
    size_t B = p->B, T = p->T, xbytes = tri_chunk_boundary_elems(g, B, T) * act_size(g);
    void *first = ch->n_layers > 0 ? s->x[0] : ch->has_head ? s->x_head : ws->out;
    if (ch->has_embedding)
        tri_embed_fwd(g, k, s->ids, first, ws, B, T);
    else if (x_in != first)
        g->ctx->ops->copy(g->ctx, first, x_in, xbytes);
    for (int i = 0; i < ch->n_layers; i++) {
        void *y = i + 1 < ch->n_layers ? s->x[i + 1] : ch->has_head ? s->x_head : ws->out;
        tri_layer_acts *a = p->policy == TRI_RECOMPUTE_FULL ? &ws->re : &s->layer[i];
        if (ch->before_layer) ch->before_layer(ch->before_layer_ctx, i, 0);
        tri_block_fwd(g, k, i, a, s->x[i], y, ws, B, T);
    }
    if (!ch->has_head) return 0.0;
    if (ch->before_layer) ch->before_layer(ch->before_layer_ctx, ch->n_layers, 0); /* (the head's turn) */
    return tri_head_fwd(g, k, s, ws, B, T, mode, dscale);
}

void tri_chunk_backward(tri_gpt *g, tri_slot_pool *p, tri_slot *s, tri_workspace *ws, const void *dy) {
    int k = p->chunk;
    tri_chunk *ch = &g->chunks[k];
    size_t B = p->B, T = p->T;
    if (ch->has_head)
        tri_head_bwd(g, k, s, ws, B, T);
    else if (dy != ws->dres)
        g->ctx->ops->copy(g->ctx, ws->dres, dy, tri_chunk_boundary_elems(g, B, T) * act_size(g));
    for (int i = ch->n_layers - 1; i >= 0; i--) {
        if (ch->before_layer) ch->before_layer(ch->before_layer_ctx, i, 1);
        if (p->policy == TRI_RECOMPUTE_FULL) {
            /* rerun the layer from its saved input (TP collectives included) */
            tri_block_fwd(g, k, i, &ws->re, s->x[i], ws->re_out, ws, B, T);
            tri_block_bwd(g, k, i, &ws->re, s->x[i], ws, B, T);
        } else {
            tri_block_bwd(g, k, i, &s->layer[i], s->x[i], ws, B, T);
        }
        grads_final_upto(ch, ch->layer_last_param[i]);
    }
    if (ch->has_embedding) tri_embed_bwd(g, k, s->ids, ws->dres, ws, B, T);
    if (ch->grads_ready) ch->grads_ready(ch->grads_ready_ctx, ch->n_elems);
}

/* ------------------------------------------------------------------------ */
/* one chunk, backward split in two (zero-bubble schedules)                 */

void tri_chunk_backward_input(tri_gpt *g, tri_slot_pool *p, tri_slot *s, tri_workspace *ws, const void *dy) {
    int k = p->chunk;
    tri_chunk *ch = &g->chunks[k];
    size_t B = p->B, T = p->T;
    TRI_CHECK(p->split && s->in_use);
    if (ch->has_head)
        head_bwd(g, k, s, ws, B, T);
    else if (dy != ws->dres)
        g->ctx->ops->copy(g->ctx, ws->dres, dy, tri_chunk_boundary_elems(g, B, T) * act_size(g));
    for (int i = ch->n_layers - 1; i >= 0; i--) {
        if (ch->before_layer) ch->before_layer(ch->before_layer_ctx, i, 1);
        if (p->policy == TRI_RECOMPUTE_FULL) {
            /* rerun the layer as tri_chunk_backward does, but with the
             * linears' inputs written into the slot, where W finds them */
            tri_layer_acts a = ws->re;
            a.ln1 = s->layer[i].ln1;
            a.atty = s->layer[i].atty;
            a.ln2 = s->layer[i].ln2;
            a.fch_gelu = s->layer[i].fch_gelu;
            tri_block_fwd(g, k, i, &a, s->x[i], ws->re_out, ws, B, T);
            tri_block_bwd_input(g, k, i, &a, s->x[i], ws, &s->dout[i], B, T);
        } else {
            tri_block_bwd_input(g, k, i, &s->layer[i], s->x[i], ws, &s->dout[i], B, T);
        }
    }
    if (ch->has_embedding) tri_embed_bwd(g, k, s->ids, ws->dres, ws, B, T);
}

void tri_chunk_backward_weight(tri_gpt *g, tri_slot_pool *p, tri_slot *s, tri_workspace *ws) {
    /* W needs no scratch: ws (and the dres that B left there) is untouched,
     * but for Llama's replicated KV heads' sum in ws->kv_dw */
    int k = p->chunk;
    tri_chunk *ch = &g->chunks[k];
    TRI_CHECK(p->split && s->in_use);
    /* B finished every gradient but the linears' weights: the head's (ln_f,
     * its wte part from forward), the LayerNorms and biases of every layer and
     * the embedding's. So the prefixes become final exactly as in the fused
     * backward, now as W walks the layers in the same order. */
    if (ch->has_head) grads_final_upto(ch, ch->head_params - 1);
    for (int i = ch->n_layers - 1; i >= 0; i--) {
        if (g->arch == TRI_ARCH_LLAMA) /* (its only scratch: kv_dw, apart from dres) */
            tri_llama_block_bwd_weight(g, k, i, &s->layer[i], &s->dout[i], ws, p->B, p->T);
        else
            tri_block_bwd_weight(g, k, i, &s->layer[i], &s->dout[i], p->B, p->T);
        grads_final_upto(ch, ch->layer_last_param[i]);
    }
    if (ch->grads_ready) ch->grads_ready(ch->grads_ready_ctx, ch->n_elems);
}
