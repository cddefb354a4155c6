/* GPT-2 forward and backward for one pipeline stage of one TP rank.
 * See model/gpt.h for the layout and the tensor-parallel scheme. */
#include "model/gpt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/ce.h"
#include "model/init.h"

/* ------------------------------------------------------------------------ */
/* shapes                                                                    */

size_t tri_padded_vocab(int vocab_size, int tp) {
    size_t m = (size_t)128 * (size_t)tp;
    return ((size_t)vocab_size + m - 1) / m * m;
}

tri_stage tri_stage_of(const tri_model_cfg *cfg, int pp, int pp_rank) {
    tri_stage s;
    int per = cfg->n_layer / pp;
    s.first_layer = pp_rank * per;
    s.last_layer = s.first_layer + per;
    s.has_embedding = pp_rank == 0;
    s.has_head = pp_rank == pp - 1;
    return s;
}

size_t tri_param_global_dim(const tri_param *p, int tp_rank, int tp, size_t i) {
    if (p->split == TRI_SPLIT_NONE) return i;
    size_t global = p->split == TRI_SPLIT_ROWS ? p->rows : p->cols;
    size_t seg_global = global / (size_t)p->segments;      /* e.g. C for q|k|v */
    size_t seg_local = seg_global / (size_t)tp;            /* this rank's share of one segment */
    return (i / seg_local) * seg_global + (size_t)tp_rank * seg_local + i % seg_local;
}

size_t tri_gpt_num_params(const tri_model_cfg *cfg) {
    size_t C = (size_t)cfg->n_embd, L = (size_t)cfg->n_layer;
    size_t per_layer = 12 * C * C + 13 * C; /* qkv 3C^2+3C, proj C^2+C, fc 4C^2+4C, fcproj 4C^2+C, 2 LN 4C */
    return (size_t)cfg->vocab_size * C + (size_t)cfg->seq_len * C + L * per_layer + 2 * C;
}

double tri_gpt_flops_per_token(const tri_model_cfg *cfg) {
    /* 6N for the matmuls of forward (2N) and backward (4N), with N the
     * parameters that take part in matmuls: everything but the position
     * embedding (the tied token embedding counts once, as the LM head), plus
     * 12 L C T for attention scores and their use (QK^T and PV, fwd + bwd). */
    double N = (double)tri_gpt_num_params(cfg) - (double)cfg->seq_len * cfg->n_embd;
    return 6.0 * N + 12.0 * cfg->n_layer * (double)cfg->n_embd * cfg->seq_len;
}

/* ------------------------------------------------------------------------ */
/* parameter table                                                           */

typedef struct {
    tri_param *v;
    int n, cap;
    size_t offset;
} ptable;

static tri_param *padd(ptable *t, tri_param_kind kind, int layer, const char *name,
                       size_t rows, size_t cols, tri_split split, int segments, int tp,
                       int hf_transposed, float std, float value, int decay, int replicated) {
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 64;
        tri_param *nv = realloc(t->v, (size_t)t->cap * sizeof *nv);
        if (!nv) { fprintf(stderr, "trident: out of memory (parameter table)\n"); abort(); }
        t->v = nv;
    }
    tri_param *p = &t->v[t->n++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->kind = kind;
    p->layer = layer;
    p->rows = rows;
    p->cols = cols;
    p->split = split;
    p->segments = segments;
    p->lrows = split == TRI_SPLIT_ROWS ? rows / (size_t)tp : rows;
    p->lcols = split == TRI_SPLIT_COLS ? cols / (size_t)tp : cols;
    p->numel = p->lrows * p->lcols;
    p->offset = t->offset;
    /* keep every tensor 16-float (64-byte) aligned for vector loads */
    t->offset += (p->numel + 15) / 16 * 16;
    p->hf_transposed = hf_transposed;
    p->hf_rows_saved = rows;
    p->init_std = std;
    p->init_value = value;
    p->decay = decay;
    p->replicated = split == TRI_SPLIT_NONE && replicated;
    return p;
}

/* The buffer order is the order in which backward finishes gradients (head
 * first, then blocks from last to first, embeddings last), so that gradient
 * buckets taken front to back become ready early. */
static void build_table(tri_gpt *g, ptable *t) {
    size_t C = g->C, F = g->F, T = (size_t)g->cfg.seq_len;
    int tp = g->tp, L = g->cfg.n_layer;
    float std = 0.02f, res_std = 0.02f / sqrtf(2.0f * (float)L);
    char nm[64];
    if (g->stage.has_head) {
        padd(t, TRI_P_LNFW, -1, "transformer.ln_f.weight", 1, C, TRI_SPLIT_NONE, 1, tp, 0, 0, 1, 0, 1);
        padd(t, TRI_P_LNFB, -1, "transformer.ln_f.bias", 1, C, TRI_SPLIT_NONE, 1, tp, 0, 0, 0, 0, 1);
    }
    for (int l = g->stage.last_layer - 1; l >= g->stage.first_layer; l--) {
#define NAME(suffix) (snprintf(nm, sizeof nm, "transformer.h.%d.%s", l, suffix), nm)
        padd(t, TRI_P_FCPROJW, l, NAME("mlp.c_proj.weight"), C, F, TRI_SPLIT_COLS, 1, tp, 1, res_std, 0, 1, 0);
        padd(t, TRI_P_FCPROJB, l, NAME("mlp.c_proj.bias"), 1, C, TRI_SPLIT_NONE, 1, tp, 0, 0, 0, 0, 1);
        padd(t, TRI_P_FCW, l, NAME("mlp.c_fc.weight"), F, C, TRI_SPLIT_ROWS, 1, tp, 1, std, 0, 1, 0);
        padd(t, TRI_P_FCB, l, NAME("mlp.c_fc.bias"), 1, F, TRI_SPLIT_COLS, 1, tp, 0, 0, 0, 0, 0);
        padd(t, TRI_P_LN2W, l, NAME("ln_2.weight"), 1, C, TRI_SPLIT_NONE, 1, tp, 0, 0, 1, 0, 1);
        padd(t, TRI_P_LN2B, l, NAME("ln_2.bias"), 1, C, TRI_SPLIT_NONE, 1, tp, 0, 0, 0, 0, 1);
        padd(t, TRI_P_ATTPROJW, l, NAME("attn.c_proj.weight"), C, C, TRI_SPLIT_COLS, 1, tp, 1, res_std, 0, 1, 0);
        padd(t, TRI_P_ATTPROJB, l, NAME("attn.c_proj.bias"), 1, C, TRI_SPLIT_NONE, 1, tp, 0, 0, 0, 0, 1);
        padd(t, TRI_P_QKVW, l, NAME("attn.c_attn.weight"), 3 * C, C, TRI_SPLIT_ROWS, 3, tp, 1, std, 0, 1, 0);
        padd(t, TRI_P_QKVB, l, NAME("attn.c_attn.bias"), 1, 3 * C, TRI_SPLIT_COLS, 3, tp, 0, 0, 0, 0, 0);
        padd(t, TRI_P_LN1W, l, NAME("ln_1.weight"), 1, C, TRI_SPLIT_NONE, 1, tp, 0, 0, 1, 0, 1);
        padd(t, TRI_P_LN1B, l, NAME("ln_1.bias"), 1, C, TRI_SPLIT_NONE, 1, tp, 0, 0, 0, 0, 1);
#undef NAME
    }
    if (g->stage.has_embedding)
        padd(t, TRI_P_WPE, -1, "transformer.wpe.weight", T, C, TRI_SPLIT_NONE, 1, tp, 0, std, 0, 0, 1);
    if (g->stage.has_embedding || g->stage.has_head) {
        tri_param *p = padd(t, TRI_P_WTE, -1, "transformer.wte.weight", g->Vp, C, TRI_SPLIT_ROWS, 1, tp, 0,
                            std, 0, 0, 0);
        p->hf_rows_saved = (size_t)g->cfg.vocab_size;
    }
}

static void bind(tri_gpt *g, float *mem, tri_weights *w) {
    memset(w->layers, 0, (size_t)g->n_local_layers * sizeof *w->layers);
    for (int i = 0; i < g->n_params; i++) {
        const tri_param *p = &g->params[i];
        float *x = mem + p->offset;
        tri_layer_w *lw = p->layer >= 0 ? &w->layers[p->layer - g->stage.first_layer] : NULL;
        switch (p->kind) {
        case TRI_P_WTE: w->wte = x; break;
        case TRI_P_WPE: w->wpe = x; break;
        case TRI_P_LNFW: w->lnfw = x; break;
        case TRI_P_LNFB: w->lnfb = x; break;
        case TRI_P_LN1W: lw->ln1w = x; break;
        case TRI_P_LN1B: lw->ln1b = x; break;
        case TRI_P_QKVW: lw->qkvw = x; break;
        case TRI_P_QKVB: lw->qkvb = x; break;
        case TRI_P_ATTPROJW: lw->attprojw = x; break;
        case TRI_P_ATTPROJB: lw->attprojb = x; break;
        case TRI_P_LN2W: lw->ln2w = x; break;
        case TRI_P_LN2B: lw->ln2b = x; break;
        case TRI_P_FCW: lw->fcw = x; break;
        case TRI_P_FCB: lw->fcb = x; break;
        case TRI_P_FCPROJW: lw->fcprojw = x; break;
        case TRI_P_FCPROJB: lw->fcprojb = x; break;
        case TRI_P_KIND_COUNT: break;
        }
    }
}

int tri_gpt_check_layout(const tri_model_cfg *cfg, int tp, int pp) {
    if (cfg->n_embd % cfg->n_head != 0) {
        fprintf(stderr, "trident: model.n_embd (%d) is not a multiple of model.n_head (%d)\n",
                cfg->n_embd, cfg->n_head);
        return -1;
    }
    if (cfg->n_head % tp != 0) {
        fprintf(stderr, "trident: model.n_head (%d) is not divisible by parallel.tp (%d)\n", cfg->n_head, tp);
        return -1;
    }
    if (cfg->n_layer % pp != 0) {
        fprintf(stderr, "trident: model.n_layer (%d) is not divisible by parallel.pp (%d)\n", cfg->n_layer, pp);
        return -1;
    }
    return 0;
}

int tri_gpt_describe(tri_gpt *g, const tri_model_cfg *cfg, int tp, int tp_rank, int pp, int pp_rank) {
    memset(g, 0, sizeof *g);
    if (tri_gpt_check_layout(cfg, tp, pp) != 0) return -1;
    g->cfg = *cfg;
    g->tp = tp;
    g->tp_rank = tp_rank;
    g->stage = tri_stage_of(cfg, pp, pp_rank);
    g->n_local_layers = g->stage.last_layer - g->stage.first_layer;
    g->C = (size_t)cfg->n_embd;
    g->NH = cfg->n_head;
    g->NHl = cfg->n_head / tp;
    g->HS = cfg->n_embd / cfg->n_head;
    g->Cl = (size_t)g->NHl * (size_t)g->HS;
    g->F = 4 * g->C;
    g->Fl = g->F / (size_t)tp;
    g->Vp = tri_padded_vocab(cfg->vocab_size, tp);
    g->Vl = g->Vp / (size_t)tp;
    g->vstart = (size_t)tp_rank * g->Vl;
    ptable t = {0};
    build_table(g, &t);
    g->params = t.v;
    g->n_params = t.n;
    g->n_floats = t.offset;
    g->layer_last_param = malloc(((size_t)g->n_local_layers + 1) * sizeof *g->layer_last_param);
    if (!g->layer_last_param) {
        fprintf(stderr, "trident: out of memory (parameter table)\n");
        tri_gpt_free(g);
        return -1;
    }
    for (int i = 0; i < g->n_params; i++)
        if (g->params[i].layer >= 0) g->layer_last_param[g->params[i].layer - g->stage.first_layer] = i;
    return 0;
}

int tri_gpt_init(tri_gpt *g, const tri_model_cfg *cfg, const tri_ops *ops,
                 tri_comm *tp_comm, int tp, int tp_rank, int pp, int pp_rank) {
    if (tri_gpt_describe(g, cfg, tp, tp_rank, pp, pp_rank) != 0) return -1;
    g->ops = ops;
    g->tp_comm = tp_comm;
    g->param_mem = ops->alloc(g->n_floats * sizeof(float));
    g->grad_mem = ops->alloc(g->n_floats * sizeof(float));
    g->w.layers = calloc((size_t)g->n_local_layers + 1, sizeof(tri_layer_w));
    g->g.layers = calloc((size_t)g->n_local_layers + 1, sizeof(tri_layer_w));
    if (!g->param_mem || !g->grad_mem || !g->w.layers || !g->g.layers) {
        fprintf(stderr, "trident: out of memory allocating %zu parameters\n", g->n_floats);
        tri_gpt_free(g);
        return -1;
    }
    bind(g, g->param_mem, &g->w);
    bind(g, g->grad_mem, &g->g);
    return 0;
}

void tri_gpt_free(tri_gpt *g) {
    if (!g) return;
    if (g->ops) {
        g->ops->free(g->param_mem);
        g->ops->free(g->grad_mem);
    }
    free(g->w.layers);
    free(g->g.layers);
    free(g->params);
    free(g->layer_last_param);
    memset(g, 0, sizeof *g);
}

void tri_gpt_init_params(tri_gpt *g, uint64_t seed) {
    for (int i = 0; i < g->n_params; i++) {
        const tri_param *p = &g->params[i];
        float *x = g->param_mem + p->offset;
        if (p->init_std == 0.0f) {
            for (size_t k = 0; k < p->numel; k++) x[k] = p->init_value;
            continue;
        }
        uint64_t key = tri_init_key(seed, p->name);
        size_t real_rows = p->kind == TRI_P_WTE ? p->hf_rows_saved : p->rows;
        #pragma omp parallel for schedule(static)
        for (size_t r = 0; r < p->lrows; r++) {
            size_t gr = p->split == TRI_SPLIT_ROWS ? tri_param_global_dim(p, g->tp_rank, g->tp, r) : r;
            for (size_t c = 0; c < p->lcols; c++) {
                size_t gc = p->split == TRI_SPLIT_COLS ? tri_param_global_dim(p, g->tp_rank, g->tp, c) : c;
                float v = 0.0f;
                if (gr < real_rows) v = p->init_std * (float)tri_init_normal(key, (uint64_t)(gr * p->cols + gc));
                x[r * p->lcols + c] = v;
            }
        }
    }
}

/* ------------------------------------------------------------------------ */
/* activations                                                               */

int tri_acts_init(tri_acts *a, const tri_gpt *g, size_t B, size_t T) {
    memset(a, 0, sizeof *a);
    a->B = B;
    a->T = T;
    size_t BT = B * T, C = g->C, Cl = g->Cl, Fl = g->Fl, L = (size_t)g->n_local_layers;
    size_t att = B * (size_t)g->NHl * T * T;
    size_t per_layer = 3 * BT * C + 4 * BT + 3 * BT * Cl + att + Cl * BT + 2 * BT * Fl + BT * C;
    size_t head = g->stage.has_head ? BT * C + 2 * BT + BT * g->Vl + BT * 3 + BT * 3 * (size_t)g->tp + BT : 0;
    size_t scratch = 3 * BT * C + BT * Cl + 3 * BT * Cl + BT * Fl +
                     g->ops->attention_scratch_floats(B, T, g->NHl, g->HS);
    /* every buffer rounded up to 16 floats */
    size_t n_buffers = 1 + 14 * L + 7 + 7;
    a->n_floats = BT * C + L * per_layer + head + scratch + 16 * n_buffers;
    a->mem = g->ops->alloc(a->n_floats * sizeof(float));
    float **ptrs = calloc(14 * (L + 1), sizeof(float *));
    if (!a->mem || !ptrs) {
        fprintf(stderr, "trident: out of memory allocating activations (%zu floats)\n", a->n_floats);
        free(ptrs);
        tri_acts_free(a, g);
        return -1;
    }
    float *cur = a->mem;
#define TAKE(n) (cur += ((n) + 15) / 16 * 16, cur - ((n) + 15) / 16 * 16)
    a->x_in = TAKE(BT * C);
    float ***lists[] = {&a->ln1, &a->ln1_mean, &a->ln1_rstd, &a->qkv, &a->att, &a->atty, &a->res2,
                        &a->ln2, &a->ln2_mean, &a->ln2_rstd, &a->fch, &a->fch_gelu, &a->res3};
    size_t sizes[] = {BT * C, BT, BT, 3 * BT * Cl, att, BT * Cl, BT * C, BT * C, BT, BT, BT * Fl, BT * Fl, BT * C};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        *lists[k] = ptrs + k * (L + 1);
        for (size_t l = 0; l < L; l++) (*lists[k])[l] = TAKE(sizes[k]);
    }
    if (g->stage.has_head) {
        a->lnf = TAKE(BT * C);
        a->lnf_mean = TAKE(BT);
        a->lnf_rstd = TAKE(BT);
        a->logits = TAKE(BT * g->Vl);
        a->ce_stats = TAKE(BT * 3);
        a->ce_gather = TAKE(BT * 3 * (size_t)g->tp);
        a->losses = TAKE(BT);
    }
    a->dres = TAKE(BT * C);
    a->dln = TAKE(BT * C);
    a->dproj = TAKE(BT * C);
    a->datty = TAKE(BT * Cl);
    a->dqkv = TAKE(3 * BT * Cl);
    a->dfch = TAKE(BT * Fl);
    a->att_scratch = TAKE(g->ops->attention_scratch_floats(B, T, g->NHl, g->HS));
#undef TAKE
    if ((size_t)(cur - a->mem) > a->n_floats) {
        fprintf(stderr, "trident: internal error: activation layout overflows (%zu > %zu)\n",
                (size_t)(cur - a->mem), a->n_floats);
        abort();
    }
    return 0;
}

void tri_acts_free(tri_acts *a, const tri_gpt *g) {
    if (!a) return;
    if (g && g->ops) g->ops->free(a->mem);
    free(a->ln1); /* the pointer lists share one allocation that starts here */
    memset(a, 0, sizeof *a);
}

/* ------------------------------------------------------------------------ */
/* forward / backward                                                        */

/* Megatron's g: forward all-reduce over TP, backward identity
 * (output of a row-parallel linear). */
static void reduce_from_tp(tri_gpt *g, float *x, size_t n) {
    tri_comm_allreduce(g->tp_comm, x, n, TRI_F32, TRI_SUM);
}

/* Megatron's f, backward half: forward identity, backward all-reduce over TP
 * (input of a column-parallel linear). */
static void copy_to_tp_bwd(tri_gpt *g, float *dx, size_t n) {
    tri_comm_allreduce(g->tp_comm, dx, n, TRI_F32, TRI_SUM);
}

double tri_gpt_forward(tri_gpt *g, tri_acts *a, const int32_t *ids, const float *x,
                       const int32_t *targets, float dscale) {
    const tri_ops *ops = g->ops;
    size_t B = a->B, T = a->T, BT = B * T, C = g->C, Cl = g->Cl, Fl = g->Fl;
    if (g->stage.has_embedding) {
        /* vocab-parallel lookup; only TP rank 0 adds the position embedding so
         * that the all-reduce holds it once (g: all-reduce forward) */
        ops->embedding_fwd(a->x_in, ids, g->w.wte, g->tp_rank == 0 ? g->w.wpe : NULL, B, T, C, g->vstart, g->Vl);
        reduce_from_tp(g, a->x_in, BT * C);
    } else {
        ops->copy(a->x_in, x, BT * C * sizeof(float));
    }
    const float *res = a->x_in;
    for (int l = 0; l < g->n_local_layers; l++) {
        const tri_layer_w *w = &g->w.layers[l];
        ops->layernorm_fwd(a->ln1[l], a->ln1_mean[l], a->ln1_rstd[l], res, w->ln1w, w->ln1b, BT, C);
        ops->matmul_fwd(a->qkv[l], a->ln1[l], w->qkvw, w->qkvb, BT, C, 3 * Cl);
        ops->attention_fwd(a->atty[l], a->att[l], a->qkv[l], B, T, g->NHl, g->HS);
        ops->matmul_fwd(a->dproj, a->atty[l], w->attprojw, NULL, BT, Cl, C);
        reduce_from_tp(g, a->dproj, BT * C);
        ops->residual_fwd(a->res2[l], res, a->dproj, w->attprojb, BT, C);
        ops->layernorm_fwd(a->ln2[l], a->ln2_mean[l], a->ln2_rstd[l], a->res2[l], w->ln2w, w->ln2b, BT, C);
        ops->matmul_fwd(a->fch[l], a->ln2[l], w->fcw, w->fcb, BT, C, Fl);
        ops->gelu_fwd(a->fch_gelu[l], a->fch[l], BT * Fl);
        ops->matmul_fwd(a->dproj, a->fch_gelu[l], w->fcprojw, NULL, BT, Fl, C);
        reduce_from_tp(g, a->dproj, BT * C);
        ops->residual_fwd(a->res3[l], a->res2[l], a->dproj, w->fcprojb, BT, C);
        res = a->res3[l];
    }
    if (!g->stage.has_head) return 0.0;
    ops->layernorm_fwd(a->lnf, a->lnf_mean, a->lnf_rstd, res, g->w.lnfw, g->w.lnfb, BT, C);
    ops->matmul_fwd(a->logits, a->lnf, g->w.wte, NULL, BT, C, g->Vl);
    if (!targets) return 0.0;
    size_t V = (size_t)g->cfg.vocab_size;
    ops->crossentropy_stats(a->ce_stats, a->logits, targets, BT, g->Vl, g->vstart, V);
    tri_ce_combine(g->tp_comm, a->ce_stats, a->ce_gather, BT);
    ops->crossentropy_bwd(a->losses, dscale != 0.0f ? a->logits : NULL, a->logits, a->ce_stats, targets,
                          dscale, BT, g->Vl, g->vstart, V);
    double sum = 0.0;
    for (size_t i = 0; i < BT; i++) sum += a->losses[i];
    return sum;
}

/* grad_mem[0, end of param i) is final */
static void grads_final_upto(tri_gpt *g, int i) {
    if (!g->grads_ready) return;
    size_t n = i + 1 < g->n_params ? g->params[i + 1].offset : g->n_floats;
    g->grads_ready(g->grads_ready_ctx, n);
}

void tri_gpt_backward(tri_gpt *g, tri_acts *a, const int32_t *ids, const float *dy, float *dx) {
    const tri_ops *ops = g->ops;
    size_t B = a->B, T = a->T, BT = B * T, C = g->C, Cl = g->Cl, Fl = g->Fl;
    int Ll = g->n_local_layers;
    const float *res_last = Ll > 0 ? a->res3[Ll - 1] : a->x_in;
    if (g->stage.has_head) {
        /* logits = lnf @ wte^T; a->logits holds dlogits */
        ops->matmul_bwd(a->dln, g->g.wte, NULL, a->logits, a->lnf, g->w.wte, BT, C, g->Vl);
        copy_to_tp_bwd(g, a->dln, BT * C);
        ops->zero(a->dres, BT * C * sizeof(float));
        ops->layernorm_bwd(a->dres, g->g.lnfw, g->g.lnfb, a->dln, res_last, g->w.lnfw, a->lnf_mean, a->lnf_rstd,
                           BT, C);
        grads_final_upto(g, 1); /* ln_f weight and bias come first in the buffer */
    } else {
        ops->copy(a->dres, dy, BT * C * sizeof(float));
    }
    for (int l = Ll - 1; l >= 0; l--) {
        const tri_layer_w *w = &g->w.layers[l];
        tri_layer_w *dw = &g->g.layers[l];
        const float *res_in = l > 0 ? a->res3[l - 1] : a->x_in;
        /* MLP: res3 = res2 + fcproj(gelu(fc(ln2(res2)))) + b; a->dres holds dres3 */
        ops->bias_bwd(dw->fcprojb, a->dres, BT, C);
        ops->matmul_bwd(a->dfch, dw->fcprojw, NULL, a->dres, a->fch_gelu[l], w->fcprojw, BT, Fl, C);
        ops->gelu_bwd(a->dfch, a->fch[l], a->dfch, BT * Fl);
        ops->matmul_bwd(a->dln, dw->fcw, dw->fcb, a->dfch, a->ln2[l], w->fcw, BT, C, Fl);
        copy_to_tp_bwd(g, a->dln, BT * C);
        ops->layernorm_bwd(a->dres, dw->ln2w, dw->ln2b, a->dln, a->res2[l], w->ln2w, a->ln2_mean[l],
                           a->ln2_rstd[l], BT, C);
        /* attention: res2 = res_in + attproj(attn(qkv(ln1(res_in)))) + b; a->dres holds dres2 */
        ops->bias_bwd(dw->attprojb, a->dres, BT, C);
        ops->matmul_bwd(a->datty, dw->attprojw, NULL, a->dres, a->atty[l], w->attprojw, BT, Cl, C);
        ops->attention_bwd(a->dqkv, a->att_scratch, a->datty, a->qkv[l], a->att[l], B, T, g->NHl, g->HS);
        ops->matmul_bwd(a->dln, dw->qkvw, dw->qkvb, a->dqkv, a->ln1[l], w->qkvw, BT, C, 3 * Cl);
        copy_to_tp_bwd(g, a->dln, BT * C);
        ops->layernorm_bwd(a->dres, dw->ln1w, dw->ln1b, a->dln, res_in, w->ln1w, a->ln1_mean[l],
                           a->ln1_rstd[l], BT, C);
        if (g->grads_ready) grads_final_upto(g, g->layer_last_param[l]);
    }
    if (g->stage.has_embedding) {
        /* every TP rank accumulates the (replicated) position-embedding grad,
         * so the copies stay identical */
        ops->embedding_bwd(g->g.wte, g->g.wpe, a->dres, ids, B, T, C, g->vstart, g->Vl);
    } else if (dx) {
        ops->copy(dx, a->dres, BT * C * sizeof(float));
    }
    if (g->grads_ready) g->grads_ready(g->grads_ready_ctx, g->n_floats);
}
