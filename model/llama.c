/* The Llama block. See model/llama.h. */
#include "model/llama.h"

#include "base/err.h"
#include "model/cp.h"
#include "parallel/tensor.h"

static size_t act_size(const tri_gpt *g) { return tri_dtype_size(g->ctx->act_dtype); }
static size_t res_rows(const tri_gpt *g, size_t BT) { return g->sp ? BT / (size_t)g->tp : BT; }

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

/* Where the RMSNorm weight gradients go: the layer's, or under sequence
 * parallelism (partial sums over this rank's rows) the zeroed workspace part
 * that rows_end sums over the TP group. */
static void rows_begin(tri_gpt *g, const tri_layer_w *dw, tri_workspace *ws, float **d1, float **d2) {
    if (!g->sp) {
        *d1 = dw->ln1w, *d2 = dw->ln2w;
        return;
    }
    g->ctx->ops->zero(g->ctx, ws->tp_dw, 2 * g->C * sizeof(float));
    *d1 = ws->tp_dw, *d2 = ws->tp_dw + g->C;
}

static void rows_end(tri_gpt *g, const tri_layer_w *dw, tri_workspace *ws) {
    if (!g->sp) return;
    tri_ctx *c = g->ctx;
    /* test-only fault (model/debug.h), as for GPT-2's row-wise gradients */
    if (!g->debug.skip_sp_grad_reduce) tri_comm_allreduce(g->tp_comm, ws->tp_dw, 2 * g->C, TRI_F32, TRI_SUM);
    c->ops->add(c, dw->ln1w, ws->tp_dw, g->C);
    c->ops->add(c, dw->ln2w, ws->tp_dw + g->C, g->C);
}

/* dqkvw += dqkv^T @ ln, with replicated KV heads summed over their ranks:
 * the k|v rows (2 HS of them, right after the q rows) are set aside, the
 * product goes into zeroed rows, every rank puts its fresh k|v rows at its
 * head's place in a buffer of all NKV heads, one all-reduce over TP sums the
 * replicas, and each rank adds its head's sum to what it set aside. */
static void qkv_weight_grad(tri_gpt *g, float *dqkvw, const void *dqkv, const void *ln, const void *qkvw,
                            tri_workspace *ws, size_t BT) {
    tri_ctx *c = g->ctx;
    const tri_ops *ops = c->ops;
    size_t C = g->C;
    if (g->kv_rep <= 1) {
        ops->matmul_bwd(c, NULL, dqkvw, NULL, dqkv, ln, qkvw, BT, C, g->QKVl);
        return;
    }
    size_t kvn = 2 * (size_t)g->HS * C, qn = (size_t)g->NHl * (size_t)g->HS * C;
    float *kv = dqkvw + qn, *all = ws->kv_dw, *kept = ws->kv_dw + (size_t)g->NKV * kvn;
    ops->copy(c, kept, kv, kvn * sizeof(float));
    ops->zero(c, kv, kvn * sizeof(float));
    ops->matmul_bwd(c, NULL, dqkvw, NULL, dqkv, ln, qkvw, BT, C, g->QKVl);
    ops->zero(c, all, (size_t)g->NKV * kvn * sizeof(float));
    float *mine = all + (size_t)(g->tp_rank / g->kv_rep) * kvn;
    ops->copy(c, mine, kv, kvn * sizeof(float));
    tri_comm_allreduce(g->tp_comm, all, (size_t)g->NKV * kvn, TRI_F32, TRI_SUM);
    ops->copy(c, kv, kept, kvn * sizeof(float));
    ops->add(c, kv, mine, kvn);
}

void tri_llama_block_fwd(tri_gpt *g, int k, int l, tri_layer_acts *a, const void *x, void *y, tri_workspace *ws,
                         size_t B, size_t T) {
    tri_ctx *c = g->ctx;
    const tri_ops *ops = c->ops;
    const tri_layer_w *w = &g->chunks[k].w.layers[l];
    size_t BT = B * T, R = res_rows(g, BT), C = g->C, Cl = g->Cl, Fl = g->Fl;
    float *att = a->att ? a->att : ws->re.att; /* selective: the state goes to the workspace */
    ops->rmsnorm_fwd(c, a->ln1, a->ln1_rstd, x, w->ln1w, R, C, g->norm_eps);
    const void *ln = tp_gather(g, ws->seq, a->ln1, BT);
    ops->matmul_fwd(c, a->qkv, ln, w->qkvw, NULL, BT, C, g->QKVl);
    tri_cp_rope(g, a->qkv, B, T, 0);
    tri_cp_attention_fwd(g, ws, a->atty, att, a->qkv, B, T);
    ops->matmul_fwd(c, ws->dproj, a->atty, w->attprojw, NULL, BT, Cl, C);
    const void *proj = tp_reduce(g, ws->dproj, ws->dln, BT);
    ops->residual_fwd(c, a->res2, x, proj, NULL, R, C);
    ops->rmsnorm_fwd(c, a->ln2, a->ln2_rstd, a->res2, w->ln2w, R, C, g->norm_eps);
    ln = tp_gather(g, ws->seq, a->ln2, BT);
    ops->matmul_fwd(c, a->fch, ln, w->fcw, NULL, BT, C, 2 * Fl);
    ops->swiglu_fwd(c, a->fch_gelu, a->fch, BT, Fl);
    ops->matmul_fwd(c, ws->dproj, a->fch_gelu, w->fcprojw, NULL, BT, Fl, C);
    proj = tp_reduce(g, ws->dproj, ws->dln, BT);
    ops->residual_fwd(c, y, a->res2, proj, NULL, R, C);
}

/* The attention state: the slot's, or (selective recompute) rebuilt from the
 * saved qkv into the workspace, with its output. */
static const float *att_state(tri_gpt *g, const tri_layer_acts *a, tri_workspace *ws, size_t B, size_t T) {
    if (a->att) return a->att;
    tri_cp_attention_fwd(g, ws, ws->re.atty, ws->re.att, a->qkv, B, T);
    return ws->re.att;
}

void tri_llama_block_bwd(tri_gpt *g, int k, int l, const tri_layer_acts *a, const void *x, tri_workspace *ws, size_t B,
                         size_t T) {
    tri_ctx *c = g->ctx;
    const tri_ops *ops = c->ops;
    const tri_layer_w *w = &g->chunks[k].w.layers[l];
    const tri_layer_w *dw = &g->chunks[k].g.layers[l];
    size_t BT = B * T, R = res_rows(g, BT), C = g->C, Cl = g->Cl, Fl = g->Fl;
    float *dln1w, *dln2w;
    rows_begin(g, dw, ws, &dln1w, &dln2w);
    /* MLP: y = res2 + down(swiglu(gate|up(rms(res2)))); ws->dres holds dy (R rows) */
    const void *dy = tp_gather(g, ws->dproj, ws->dres, BT);
    ops->matmul_bwd(c, ws->dsw, dw->fcprojw, NULL, dy, a->fch_gelu, w->fcprojw, BT, Fl, C);
    ops->swiglu_bwd(c, ws->dfch, a->fch, ws->dsw, BT, Fl);
    const void *ln = tp_gather(g, ws->seq, a->ln2, BT);
    ops->matmul_bwd(c, ws->dln, dw->fcw, NULL, ws->dfch, ln, w->fcw, BT, C, 2 * Fl);
    const void *dln = tp_reduce(g, ws->dln, ws->dproj, BT);
    ops->rmsnorm_bwd(c, ws->dres, dln2w, dln, a->res2, w->ln2w, a->ln2_rstd, R, C);
    /* attention: res2 = x + o(attn(rope(qkv(rms(x))))); ws->dres holds dres2 */
    const float *att = att_state(g, a, ws, B, T);
    const void *dres2 = tp_gather(g, ws->dproj, ws->dres, BT);
    ops->matmul_bwd(c, ws->datty, dw->attprojw, NULL, dres2, a->atty, w->attprojw, BT, Cl, C);
    tri_cp_attention_bwd(g, ws, ws->dqkv, ws->datty, a->qkv, a->atty, att, B, T);
    tri_cp_rope(g, ws->dqkv, B, T, 1);
    ln = tp_gather(g, ws->seq, a->ln1, BT);
    ops->matmul_bwd(c, ws->dln, NULL, NULL, ws->dqkv, ln, w->qkvw, BT, C, g->QKVl);
    qkv_weight_grad(g, dw->qkvw, ws->dqkv, ln, w->qkvw, ws, BT);
    dln = tp_reduce(g, ws->dln, ws->dproj, BT);
    ops->rmsnorm_bwd(c, ws->dres, dln1w, dln, x, w->ln1w, a->ln1_rstd, R, C);
    rows_end(g, dw, ws);
}

/* tri_llama_block_bwd without the four linears' weight gradients, their
 * output gradients kept in d (and under sequence parallelism the gathered
 * RMSNorm outputs) for tri_llama_block_bwd_weight. */
void tri_llama_block_bwd_input(tri_gpt *g, int k, int l, const tri_layer_acts *a, const void *x, tri_workspace *ws,
                               const tri_layer_douts *d, size_t B, size_t T) {
    tri_ctx *c = g->ctx;
    const tri_ops *ops = c->ops;
    const tri_layer_w *w = &g->chunks[k].w.layers[l];
    const tri_layer_w *dw = &g->chunks[k].g.layers[l];
    size_t BT = B * T, R = res_rows(g, BT), C = g->C, Cl = g->Cl, Fl = g->Fl, A = act_size(g);
    float *dln1w, *dln2w;
    rows_begin(g, dw, ws, &dln1w, &dln2w);
    if (g->sp)
        tp_gather(g, d->dfcproj, ws->dres, BT);
    else
        ops->copy(c, d->dfcproj, ws->dres, BT * C * A);
    ops->matmul_bwd(c, ws->dsw, NULL, NULL, d->dfcproj, a->fch_gelu, w->fcprojw, BT, Fl, C);
    ops->swiglu_bwd(c, d->dfc, a->fch, ws->dsw, BT, Fl);
    const void *ln = g->sp ? tp_gather(g, d->ln2g, a->ln2, BT) : a->ln2;
    ops->matmul_bwd(c, ws->dln, NULL, NULL, d->dfc, ln, w->fcw, BT, C, 2 * Fl);
    const void *dln = tp_reduce(g, ws->dln, ws->dproj, BT);
    ops->rmsnorm_bwd(c, ws->dres, dln2w, dln, a->res2, w->ln2w, a->ln2_rstd, R, C);
    const float *att = att_state(g, a, ws, B, T);
    if (g->sp)
        tp_gather(g, d->dattproj, ws->dres, BT);
    else
        ops->copy(c, d->dattproj, ws->dres, BT * C * A);
    ops->matmul_bwd(c, ws->datty, NULL, NULL, d->dattproj, a->atty, w->attprojw, BT, Cl, C);
    tri_cp_attention_bwd(g, ws, d->dqkv, ws->datty, a->qkv, a->atty, att, B, T);
    tri_cp_rope(g, d->dqkv, B, T, 1);
    ln = g->sp ? tp_gather(g, d->ln1g, a->ln1, BT) : a->ln1;
    ops->matmul_bwd(c, ws->dln, NULL, NULL, d->dqkv, ln, w->qkvw, BT, C, g->QKVl);
    dln = tp_reduce(g, ws->dln, ws->dproj, BT);
    ops->rmsnorm_bwd(c, ws->dres, dln1w, dln, x, w->ln1w, a->ln1_rstd, R, C);
    rows_end(g, dw, ws);
}

void tri_llama_block_bwd_weight(tri_gpt *g, int k, int l, const tri_layer_acts *a, const tri_layer_douts *d,
                                tri_workspace *ws, size_t B, size_t T) {
    tri_ctx *c = g->ctx;
    const tri_ops *ops = c->ops;
    const tri_layer_w *w = &g->chunks[k].w.layers[l];
    const tri_layer_w *dw = &g->chunks[k].g.layers[l];
    size_t BT = B * T, C = g->C, Cl = g->Cl, Fl = g->Fl;
    const void *ln1 = d->ln1g ? d->ln1g : a->ln1, *ln2 = d->ln2g ? d->ln2g : a->ln2;
    ops->matmul_bwd(c, NULL, dw->fcprojw, NULL, d->dfcproj, a->fch_gelu, w->fcprojw, BT, Fl, C);
    ops->matmul_bwd(c, NULL, dw->fcw, NULL, d->dfc, ln2, w->fcw, BT, C, 2 * Fl);
    ops->matmul_bwd(c, NULL, dw->attprojw, NULL, d->dattproj, a->atty, w->attprojw, BT, Cl, C);
    qkv_weight_grad(g, dw->qkvw, d->dqkv, ln1, w->qkvw, ws, BT);
}
