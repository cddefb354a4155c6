/* GPT-2 parameters of one TP rank: shapes, the chunks' parameter tables,
 * their buffers and their initialisation. See model/gpt.h. Forward and
 * backward are in model/runtime.c. */
#include "model/gpt.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/half.h"
#include "model/init.h"
#include "base/err.h"
#include "base/size.h"

/* ------------------------------------------------------------------------ */
/* shapes                                                                    */

size_t tri_padded_vocab(int vocab_size, int tp) {
    size_t m = (size_t)128 * (size_t)tp;
    return ((size_t)vocab_size + m - 1) / m * m;
}

size_t tri_param_global_dim(const tri_param *p, int tp_rank, int tp, size_t i) {
    if (p->split == TRI_SPLIT_NONE) return i;
    int rep = p->tp_replicas > 1 ? p->tp_replicas : 1; /* ranks sharing one slice */
    size_t groups = (size_t)(tp / rep), slice = (size_t)(tp_rank / rep);
    size_t global = p->split == TRI_SPLIT_ROWS ? p->rows : p->cols;
    size_t seg_global = global / (size_t)p->segments; /* e.g. C for q|k|v */
    size_t seg_local = seg_global / groups;           /* this rank's share of one segment */
    return (i / seg_local) * seg_global + slice * seg_local + i % seg_local;
}

int tri_model_n_kv_head(const tri_model_cfg *cfg) {
    return cfg->arch == TRI_ARCH_LLAMA && cfg->n_kv_head > 0 ? cfg->n_kv_head : cfg->n_head;
}

int tri_model_ffn_hidden(const tri_model_cfg *cfg) {
    if (cfg->arch != TRI_ARCH_LLAMA) return 4 * cfg->n_embd;
    if (cfg->ffn_hidden > 0) return cfg->ffn_hidden;
    /* Llama's rule (meta-llama's model.py): int(2 * 4C / 3), rounded up to a
     * multiple of multiple_of */
    long m = cfg->ffn_multiple_of > 0 ? cfg->ffn_multiple_of : 256;
    long h = 2L * 4L * (long)cfg->n_embd / 3L;
    h = (h + m - 1) / m * m;
    return h > INT_MAX ? INT_MAX : (int)h;
}

int tri_model_tied(const tri_model_cfg *cfg) { return cfg->arch != TRI_ARCH_LLAMA || cfg->tie_embeddings == 1; }

int tri_model_arch_why(const tri_model_cfg *cfg, int tp, char *why, size_t n) {
    if (cfg->arch != TRI_ARCH_LLAMA) return 0;
    int NH = cfg->n_head, NKV = tri_model_n_kv_head(cfg), F = tri_model_ffn_hidden(cfg);
    if (cfg->n_kv_head < 0 || NKV > NH || NH % NKV != 0)
        return tri_why(why, n, "model.n_head (%d) is not a multiple of model.n_kv_head (%d): each key/value head "
                      "serves a whole group of query heads", NH, NKV);
    if (NH > 0 && cfg->n_embd % NH == 0 && (cfg->n_embd / NH) % 2 != 0)
        return tri_why(why, n, "model.n_embd (%d) / model.n_head (%d) = head size %d is odd: RoPE rotates pairs "
                      "of channels, it needs an even head size", cfg->n_embd, NH, cfg->n_embd / NH);
    if (tp > 0 && NKV % tp != 0 && tp % NKV != 0)
        return tri_why(why, n, "model.n_kv_head (%d) and parallel.tp (%d): neither divides the other (TP splits "
                      "the key/value heads, or replicates each over tp / n_kv_head ranks)", NKV, tp);
    if (F < 1) return tri_why(why, n, "model.ffn_hidden (%d) must be at least 1", F);
    if (tp > 0 && F % tp != 0)
        return tri_why(why, n, "model.ffn_hidden (%d%s) is not divisible by parallel.tp (%d)", F,
                      cfg->ffn_hidden > 0 ? "" : ", Llama's rule from model.n_embd and model.ffn_multiple_of", tp);
    if (cfg->rope_scaling_factor > 0) {
        if (cfg->rope_scaling_factor < 1)
            return tri_why(why, n, "model.rope_scaling_factor (%g) must be >= 1 (0: no scaling)",
                          cfg->rope_scaling_factor);
        if (!(cfg->rope_high_freq_factor > cfg->rope_low_freq_factor) || !(cfg->rope_low_freq_factor > 0))
            return tri_why(why, n, "model.rope_high_freq_factor (%g) must be above model.rope_low_freq_factor (%g) > 0",
                          cfg->rope_high_freq_factor, cfg->rope_low_freq_factor);
        if (cfg->rope_original_seq_len < 1)
            return tri_why(why, n, "model.rope_original_seq_len (%d) must be at least 1 with RoPE scaling",
                          cfg->rope_original_seq_len);
    }
    return 0;
}

void tri_rope_inv_freq(const tri_model_cfg *cfg, float *out) {
    int HS = cfg->n_embd / cfg->n_head;
    double theta = cfg->rope_theta > 0 ? cfg->rope_theta : 10000.0;
    const double pi = 3.14159265358979323846;
    for (int i = 0; i < HS / 2; i++) {
        /* as Hugging Face computes it: 1 / theta^(2i / HS) in fp32 */
        float f = (float)(1.0 / pow(theta, (double)(float)(2.0 * i) / (double)HS));
        if (cfg->rope_scaling_factor > 0) { /* Llama 3.1 (HF's _compute_llama3_parameters) */
            double factor = cfg->rope_scaling_factor, lo = cfg->rope_low_freq_factor, hi = cfg->rope_high_freq_factor;
            double old = (double)cfg->rope_original_seq_len;
            double wavelen = 2.0 * pi / (double)f, lo_wl = old / lo, hi_wl = old / hi;
            if (wavelen > lo_wl)
                f = (float)((double)f / factor);
            else if (wavelen >= hi_wl) {
                double smooth = (old / wavelen - lo) / (hi - lo);
                f = (float)((1.0 - smooth) * (double)f / factor + smooth * (double)f);
            }
        }
        out[i] = f;
    }
}

size_t tri_gpt_num_params(const tri_model_cfg *cfg) {
    size_t C = (size_t)cfg->n_embd, L = (size_t)cfg->n_layer, V = (size_t)cfg->vocab_size;
    if (cfg->arch == TRI_ARCH_LLAMA) {
        size_t HS = C / (size_t)cfg->n_head, KV = (size_t)tri_model_n_kv_head(cfg) * HS;
        size_t F = (size_t)tri_model_ffn_hidden(cfg);
        /* q, o: C^2 each; k, v: C KV each; gate, up, down: C F each; 2 RMSNorms */
        size_t per_layer = 2 * C * C + 2 * C * KV + 3 * C * F + 2 * C;
        return V * C * (tri_model_tied(cfg) ? 1 : 2) + L * per_layer + C;
    }
    size_t per_layer = 12 * C * C + 13 * C; /* qkv 3C^2+3C, proj C^2+C, fc 4C^2+4C, fcproj 4C^2+C, 2 LN 4C */
    return V * C + (size_t)cfg->seq_len * C + L * per_layer + 2 * C;
}

double tri_gpt_flops_per_token(const tri_model_cfg *cfg) {
    /* 6N for the matmuls of forward (2N) and backward (4N), with N the
     * parameters that take part in matmuls: everything but the position
     * embedding (the tied token embedding counts once, as the LM head; an
     * untied one is a lookup, not a matmul), plus 12 L C T for attention
     * scores and their use (QK^T and PV, fwd + bwd; GQA shares K and V but
     * every query head still does its own products). */
    double N = (double)tri_gpt_num_params(cfg);
    if (cfg->arch == TRI_ARCH_LLAMA)
        N -= tri_model_tied(cfg) ? 0.0 : (double)cfg->vocab_size * cfg->n_embd;
    else
        N -= (double)cfg->seq_len * cfg->n_embd;
    return 6.0 * N + 12.0 * cfg->n_layer * (double)cfg->n_embd * cfg->seq_len;
}

/* ------------------------------------------------------------------------ */
/* parameter tables                                                          */

typedef struct {
    tri_param *v;
    int n, cap;
    size_t offset;
} ptable;

/* One tensor of the table, as its line in build_table says it. Fields left
 * out are 0: no TP split, one segment, no transpose, all rows saved, init
 * value 0, no weight decay, not replicated. */
typedef struct param_spec {
    tri_param_kind kind;
    int layer;            /* global block index; -1 outside the blocks       */
    const char *name;     /* Hugging Face name                               */
    size_t rows, cols;    /* global shape, internal layout (out, in)         */
    tri_split split;      /* which dim TP splits                             */
    int segments;         /* 3 for q|k|v (each split separately); 0 means 1  */
    int hf_transposed;    /* a Conv1D weight, stored (in, out) by HF         */
    size_t hf_rows_saved; /* rows an HF file holds; 0: all of them           */
    float init_std;       /* normal(0, std); 0: the constant init_value      */
    float init_value;     /* the constant when init_std is 0                 */
    int decay;            /* takes weight decay                              */
    int replicated;       /* identical on every TP rank (TRI_SPLIT_NONE only) */
    int tp_replicas;      /* TP ranks sharing one slice; 0 means 1          */
    int fuse_next;        /* the next tensor follows with no padding: one
                             matrix with it (Llama's q|k|v, gate|up)         */
} param_spec;

/* Appends s's tensor as this rank's slice of tp, at the table's next
 * 16-element aligned offset. */
static void padd(ptable *t, int tp, param_spec s) {
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 64;
        tri_param *nv = realloc(t->v, (size_t)t->cap * sizeof *nv);
        if (!nv) TRI_FAIL("out of memory (parameter table)");
        t->v = nv;
    }
    tri_param *p = &t->v[t->n++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", s.name);
    p->kind = s.kind;
    p->layer = s.layer;
    p->rows = s.rows;
    p->cols = s.cols;
    p->split = s.split;
    p->segments = s.segments ? s.segments : 1;
    p->tp_replicas = s.tp_replicas > 1 ? s.tp_replicas : 1;
    size_t groups = (size_t)(tp / p->tp_replicas);
    p->lrows = s.split == TRI_SPLIT_ROWS ? s.rows / groups : s.rows;
    p->lcols = s.split == TRI_SPLIT_COLS ? s.cols / groups : s.cols;
    p->numel = p->lrows * p->lcols;
    p->offset = t->offset;
    p->dtype = TRI_F32;
    /* keep every tensor 16-element (64-byte in fp32) aligned for vector loads,
     * but a fused matrix's parts back to back */
    t->offset += s.fuse_next ? p->numel : (p->numel + 15) / 16 * 16;
    p->hf_transposed = s.hf_transposed;
    p->hf_rows_saved = s.hf_rows_saved ? s.hf_rows_saved : s.rows;
    p->init_std = s.init_std;
    p->init_value = s.init_value;
    p->decay = s.decay;
    p->replicated = s.split == TRI_SPLIT_NONE && s.replicated;
}

/* Llama's table, in Hugging Face's Llama names and layouts (every linear
 * (out, in), no transposes). Same buffer order as GPT-2's below. q|k|v and
 * gate|up are separate tensors (as HF stores them), laid back to back so that
 * each group is the one fused matrix the runtime multiplies by: this rank's
 * rows [q_l | k_l | v_l] and [gate_l | up_l]. When tp > n_kv_head, k and v
 * are replicated over the kv_rep ranks of a KV head (as Megatron does): each
 * holds its head's whole rows; the runtime sums their gradients over those
 * ranks. RMSNorm weights 1, replicated, no decay; linears normal(0.02),
 * o_proj and down_proj 0.02/sqrt(2L); embed_tokens no decay, lm_head decays. */
static void build_llama_table(const tri_gpt *g, const tri_chunk *ch, ptable *t) {
    size_t C = g->C, F = g->F, KV = (size_t)g->NKV * (size_t)g->HS;
    int tp = g->tp, L = g->cfg.n_layer;
    float std = 0.02f, res_std = 0.02f / sqrtf(2.0f * (float)L);
    char nm[64];
    if (ch->has_head) {
        padd(t, tp, (param_spec){.kind = TRI_P_LNFW, .layer = -1, .name = "model.norm.weight", .rows = 1, .cols = C,
                                 .init_value = 1, .replicated = 1});
        if (!g->tied)
            padd(t, tp, (param_spec){.kind = TRI_P_LMHEAD, .layer = -1, .name = "lm_head.weight", .rows = g->Vp,
                                     .cols = C, .split = TRI_SPLIT_ROWS, .init_std = std,
                                     .hf_rows_saved = (size_t)g->cfg.vocab_size, .decay = 1});
    }
    for (int i = ch->n_layers - 1; i >= 0; i--) {
        int l = ch->layers[i];
#define NAME(suffix) (snprintf(nm, sizeof nm, "model.layers.%d.%s", l, suffix), nm)
        padd(t, tp, (param_spec){.kind = TRI_P_FCPROJW, .layer = l, .name = NAME("mlp.down_proj.weight"), .rows = C,
                                 .cols = F, .split = TRI_SPLIT_COLS, .init_std = res_std, .decay = 1});
        padd(t, tp, (param_spec){.kind = TRI_P_FCW, .layer = l, .name = NAME("mlp.gate_proj.weight"), .rows = F,
                                 .cols = C, .split = TRI_SPLIT_ROWS, .init_std = std, .decay = 1, .fuse_next = 1});
        padd(t, tp, (param_spec){.kind = TRI_P_UPW, .layer = l, .name = NAME("mlp.up_proj.weight"), .rows = F,
                                 .cols = C, .split = TRI_SPLIT_ROWS, .init_std = std, .decay = 1});
        padd(t, tp, (param_spec){.kind = TRI_P_LN2W, .layer = l, .name = NAME("post_attention_layernorm.weight"),
                                 .rows = 1, .cols = C, .init_value = 1, .replicated = 1});
        padd(t, tp, (param_spec){.kind = TRI_P_ATTPROJW, .layer = l, .name = NAME("self_attn.o_proj.weight"),
                                 .rows = C, .cols = C, .split = TRI_SPLIT_COLS, .init_std = res_std, .decay = 1});
        padd(t, tp, (param_spec){.kind = TRI_P_QKVW, .layer = l, .name = NAME("self_attn.q_proj.weight"), .rows = C,
                                 .cols = C, .split = TRI_SPLIT_ROWS, .init_std = std, .decay = 1, .fuse_next = 1});
        padd(t, tp, (param_spec){.kind = TRI_P_KW, .layer = l, .name = NAME("self_attn.k_proj.weight"), .rows = KV,
                                 .cols = C, .split = TRI_SPLIT_ROWS, .init_std = std, .decay = 1,
                                 .tp_replicas = g->kv_rep, .fuse_next = 1});
        padd(t, tp, (param_spec){.kind = TRI_P_VW, .layer = l, .name = NAME("self_attn.v_proj.weight"), .rows = KV,
                                 .cols = C, .split = TRI_SPLIT_ROWS, .init_std = std, .decay = 1,
                                 .tp_replicas = g->kv_rep});
        padd(t, tp, (param_spec){.kind = TRI_P_LN1W, .layer = l, .name = NAME("input_layernorm.weight"), .rows = 1,
                                 .cols = C, .init_value = 1, .replicated = 1});
#undef NAME
    }
    if (ch->has_embedding || (ch->has_head && g->tied))
        padd(t, tp, (param_spec){.kind = TRI_P_WTE, .layer = -1, .name = "model.embed_tokens.weight", .rows = g->Vp,
                                 .cols = C, .split = TRI_SPLIT_ROWS, .init_std = std,
                                 .hf_rows_saved = (size_t)g->cfg.vocab_size});
}

/* The buffer order is the order in which backward finishes gradients (head
 * first, then blocks from last to first, embeddings last), so that gradient
 * buckets taken front to back become ready early. */
static void build_table(const tri_gpt *g, const tri_chunk *ch, ptable *t) {
    if (g->arch == TRI_ARCH_LLAMA) {
        build_llama_table(g, ch, t);
        return;
    }
    size_t C = g->C, F = g->F, T = (size_t)g->cfg.seq_len;
    int tp = g->tp, L = g->cfg.n_layer;
    float std = 0.02f, res_std = 0.02f / sqrtf(2.0f * (float)L);
    char nm[64];
    /* LayerNorms: weight 1, bias 0, replicated, no decay */
    if (ch->has_head) {
        padd(t, tp,
             (param_spec){.kind = TRI_P_LNFW,
                          .layer = -1,
                          .name = "transformer.ln_f.weight",
                          .rows = 1,
                          .cols = C,
                          .init_value = 1,
                          .replicated = 1});
        padd(t, tp,
             (param_spec){.kind = TRI_P_LNFB,
                          .layer = -1,
                          .name = "transformer.ln_f.bias",
                          .rows = 1,
                          .cols = C,
                          .replicated = 1});
    }
    for (int i = ch->n_layers - 1; i >= 0; i--) {
        int l = ch->layers[i];
#define NAME(suffix) (snprintf(nm, sizeof nm, "transformer.h.%d.%s", l, suffix), nm)
        /* MLP: fc column-parallel (rows of the weight, the bias), c_proj row-parallel (its bias replicated) */
        padd(t, tp,
             (param_spec){.kind = TRI_P_FCPROJW,
                          .layer = l,
                          .name = NAME("mlp.c_proj.weight"),
                          .rows = C,
                          .cols = F,
                          .split = TRI_SPLIT_COLS,
                          .hf_transposed = 1,
                          .init_std = res_std,
                          .decay = 1});
        padd(t, tp,
             (param_spec){.kind = TRI_P_FCPROJB,
                          .layer = l,
                          .name = NAME("mlp.c_proj.bias"),
                          .rows = 1,
                          .cols = C,
                          .replicated = 1});
        padd(t, tp,
             (param_spec){.kind = TRI_P_FCW,
                          .layer = l,
                          .name = NAME("mlp.c_fc.weight"),
                          .rows = F,
                          .cols = C,
                          .split = TRI_SPLIT_ROWS,
                          .hf_transposed = 1,
                          .init_std = std,
                          .decay = 1});
        padd(t, tp,
             (param_spec){.kind = TRI_P_FCB,
                          .layer = l,
                          .name = NAME("mlp.c_fc.bias"),
                          .rows = 1,
                          .cols = F,
                          .split = TRI_SPLIT_COLS});
        padd(t, tp,
             (param_spec){.kind = TRI_P_LN2W,
                          .layer = l,
                          .name = NAME("ln_2.weight"),
                          .rows = 1,
                          .cols = C,
                          .init_value = 1,
                          .replicated = 1});
        padd(t, tp,
             (param_spec){
                 .kind = TRI_P_LN2B, .layer = l, .name = NAME("ln_2.bias"), .rows = 1, .cols = C, .replicated = 1});
        /* attention: q|k|v column-parallel by heads (three segments), c_proj row-parallel */
        padd(t, tp,
             (param_spec){.kind = TRI_P_ATTPROJW,
                          .layer = l,
                          .name = NAME("attn.c_proj.weight"),
                          .rows = C,
                          .cols = C,
                          .split = TRI_SPLIT_COLS,
                          .hf_transposed = 1,
                          .init_std = res_std,
                          .decay = 1});
        padd(t, tp,
             (param_spec){.kind = TRI_P_ATTPROJB,
                          .layer = l,
                          .name = NAME("attn.c_proj.bias"),
                          .rows = 1,
                          .cols = C,
                          .replicated = 1});
        padd(t, tp,
             (param_spec){.kind = TRI_P_QKVW,
                          .layer = l,
                          .name = NAME("attn.c_attn.weight"),
                          .rows = 3 * C,
                          .cols = C,
                          .split = TRI_SPLIT_ROWS,
                          .segments = 3,
                          .hf_transposed = 1,
                          .init_std = std,
                          .decay = 1});
        padd(t, tp,
             (param_spec){.kind = TRI_P_QKVB,
                          .layer = l,
                          .name = NAME("attn.c_attn.bias"),
                          .rows = 1,
                          .cols = 3 * C,
                          .split = TRI_SPLIT_COLS,
                          .segments = 3});
        padd(t, tp,
             (param_spec){.kind = TRI_P_LN1W,
                          .layer = l,
                          .name = NAME("ln_1.weight"),
                          .rows = 1,
                          .cols = C,
                          .init_value = 1,
                          .replicated = 1});
        padd(t, tp,
             (param_spec){
                 .kind = TRI_P_LN1B, .layer = l, .name = NAME("ln_1.bias"), .rows = 1, .cols = C, .replicated = 1});
#undef NAME
    }
    /* embeddings: no decay; the position embedding replicated, the token
     * embedding vocab-parallel (only the real vocabulary rows are saved) */
    if (ch->has_embedding)
        padd(t, tp,
             (param_spec){.kind = TRI_P_WPE,
                          .layer = -1,
                          .name = "transformer.wpe.weight",
                          .rows = T,
                          .cols = C,
                          .init_std = std,
                          .replicated = 1});
    if (ch->has_embedding || ch->has_head)
        padd(t, tp,
             (param_spec){.kind = TRI_P_WTE,
                          .layer = -1,
                          .name = "transformer.wte.weight",
                          .rows = g->Vp,
                          .cols = C,
                          .split = TRI_SPLIT_ROWS,
                          .init_std = std,
                          .hf_rows_saved = (size_t)g->cfg.vocab_size});
}

/* The chunk-local index of global layer l (the chunk's list is ascending). */
static int local_layer(const tri_chunk *ch, int l) {
    int lo = 0, hi = ch->n_layers - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        if (ch->layers[mid] == l) return mid;
        if (ch->layers[mid] < l)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    TRI_FAIL("layer %d is not in the chunk", l);
}

/* Points w's fields of the tensors of ch at offsets [lo, hi) into mem, which
 * holds elements from elem0 on (of esz bytes); mem NULL: at nothing. */
static void bind_range(const tri_chunk *ch, char *mem, size_t elem0, size_t esz, tri_weights *w, size_t lo,
                       size_t hi) {
    for (int i = 0; i < ch->n_params; i++) {
        const tri_param *p = &ch->params[i];
        if (p->offset < lo || p->offset >= hi) continue;
        void *x = mem ? mem + (p->offset - elem0) * esz : NULL;
        tri_layer_w *lw = p->layer >= 0 ? &w->layers[local_layer(ch, p->layer)] : NULL;
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
        case TRI_P_LMHEAD: w->lm_head = x; break;
        case TRI_P_KW: /* parts of the fused q|k|v and gate|up matrices */
        case TRI_P_VW:
        case TRI_P_UPW:
        case TRI_P_KIND_COUNT: break;
        }
    }
}

/* Points w's fields at the tensors of ch inside mem (elements of esz bytes). */
static void bind(const tri_chunk *ch, char *mem, size_t esz, tri_weights *w) {
    memset(w->layers, 0, (size_t)ch->n_layers * sizeof *w->layers);
    bind_range(ch, mem, 0, esz, w, 0, SIZE_MAX);
}

void tri_gpt_params_view(tri_gpt *g, int k, size_t lo, size_t hi, void *mem, size_t elem0) {
    tri_chunk *ch = &g->chunks[k];
    bind_range(ch, mem, elem0, tri_dtype_size(ch->param_dtype), &ch->w, lo, hi);
}


/* n_embd by n_head, heads by tp: what any rank's parameter table needs.
 * 0, or -1 with the reason in why. */
static int check_shape(const tri_model_cfg *cfg, int tp, char *why, size_t n) {
    if (cfg->n_embd % cfg->n_head != 0)
        return tri_why(why, n, "model.n_embd (%d) is not a multiple of model.n_head (%d)", cfg->n_embd, cfg->n_head);
    if (cfg->n_head % tp != 0)
        return tri_why(why, n, "model.n_head (%d) is not divisible by parallel.tp (%d)", cfg->n_head, tp);
    return tri_model_arch_why(cfg, tp, why, n);
}

/* An even split of n layers over k chunks as a pp_layout string (the first
 * n % k chunks one layer more), for the error that suggests one. */
static void suggest_layout(char *buf, size_t n, int layers, int k) {
    size_t len = 0;
    buf[0] = '\0';
    for (int j = 0; j < k && len < n; j++) {
        int c = layers / k + (j < layers % k);
        int w = snprintf(buf + len, n - len, "%s%d", j ? "," : "", c);
        if (w < 0 || (size_t)w >= n - len) {
            snprintf(buf, n, "one number per chunk");
            return;
        }
        len += (size_t)w;
    }
}

/* Parses layout into counts[0 .. pp*vpp) (layers of each model chunk, in
 * model order) and checks it against the model; "" is the even split.
 * Returns 0, or -1 with the reason (naming the numbers) in why. */
static int layout_counts(const tri_model_cfg *cfg, int pp, int vpp, const char *layout, int *counts, char *why,
                         size_t why_n) {
    int k = pp * vpp;
    if (!layout || !layout[0]) {
        if (cfg->n_layer % k == 0) {
            for (int j = 0; j < k; j++) counts[j] = cfg->n_layer / k;
            return 0;
        }
        if (cfg->n_layer < k)
            return tri_why(why, why_n,
                          "model.n_layer (%d) is fewer than parallel.pp (%d) x parallel.vpp (%d) = %d chunks: "
                          "every chunk needs at least one layer; lower parallel.pp or parallel.vpp",
                          cfg->n_layer, pp, vpp, k);
        char sug[256];
        suggest_layout(sug, sizeof sug, cfg->n_layer, k);
        return tri_why(why, why_n,
                      "model.n_layer (%d) is not divisible by parallel.pp (%d) x parallel.vpp (%d) = %d; set "
                      "parallel.pp_layout to give each %s its layers, e.g. \"%s\"",
                      cfg->n_layer, pp, vpp, k, vpp > 1 ? "chunk (in model order)" : "stage", sug);
    }
    /* count the numbers first, for the message about how many there should be */
    int n = 1;
    for (const char *q = layout; *q; q++) n += *q == ',';
    if (n != k) {
        if (vpp > 1 && n == pp)
            return tri_why(why, why_n,
                          "parallel.pp_layout has %d numbers (one per stage), but with parallel.vpp %d it needs "
                          "one per chunk: parallel.pp %d x parallel.vpp %d = %d numbers, in model order",
                          n, vpp, pp, vpp, k);
        return tri_why(why, why_n, "parallel.pp_layout has %d number%s; parallel.pp %d x parallel.vpp %d needs %d", n,
                      n == 1 ? "" : "s", pp, vpp, k);
    }
    const char *q = layout;
    long sum = 0;
    for (int j = 0; j < k; j++) {
        const char *start = q;
        while (*q == ' ' || *q == '\t') q++;
        char *end;
        long v = strtol(q, &end, 10);
        int bad = end == q;
        while (*end == ' ' || *end == '\t') end++;
        if (bad || (*end != ',' && *end != '\0') || v > 1000000000L || v < -1000000000L) {
            char sug[256];
            suggest_layout(sug, sizeof sug, cfg->n_layer >= k ? cfg->n_layer : k, k);
            return tri_why(why, why_n,
                          "parallel.pp_layout \"%s\": \"%.*s\" is not a layer count (expected %d whole numbers "
                          "separated by commas, e.g. \"%s\")",
                          layout, (int)strcspn(start, ","), start, k, sug);
        }
        if (v <= 0) {
            if (vpp > 1)
                return tri_why(why, why_n,
                              "parallel.pp_layout \"%s\" leaves chunk %d (stage %d, its local chunk %d) %s: every "
                              "chunk needs at least one layer",
                              layout, j, j % pp, j / pp, v == 0 ? "empty" : "with a negative count");
            return tri_why(why, why_n,
                          "parallel.pp_layout \"%s\" leaves chunk %d (stage %d) %s: every stage needs at least "
                          "one layer",
                          layout, j, j, v == 0 ? "empty" : "with a negative count");
        }
        counts[j] = (int)v;
        sum += v;
        q = *end == ',' ? end + 1 : end;
    }
    if (sum != cfg->n_layer)
        return tri_why(why, why_n, "parallel.pp_layout \"%s\" sums to %ld layers, model.n_layer is %d", layout, sum,
                      cfg->n_layer);
    return 0;
}

int tri_chunks_layout(const tri_model_cfg *cfg, int pp, int pp_rank, int vpp, const char *layout, tri_chunk_spec *specs,
                      int *layers_buf) {
    if (pp < 1 || vpp < 1 || pp_rank < 0 || pp_rank >= pp)
        return tri_error("internal error: pipeline stage %d of parallel.pp %d with parallel.vpp %d", pp_rank, pp, vpp);
    if (vpp > 1 && pp < 2)
        return tri_error("parallel.vpp = %d needs parallel.pp >= 2 (virtual chunks interleave stages; with one "
                         "stage use parallel.vpp 1)",
                         vpp);
    int k = pp * vpp;
    int *counts = malloc((size_t)k * sizeof *counts);
    if (!counts) return tri_error("out of memory (pipeline layout of %d chunks)", k);
    char why[1024];
    if (layout_counts(cfg, pp, vpp, layout, counts, why, sizeof why) != 0) {
        free(counts);
        return tri_error("%s", why);
    }
    int first = 0, used = 0;
    for (int j = 0; j < k; j++) {
        if (j % pp == pp_rank) {
            int c = j / pp;
            int *ls = layers_buf + used;
            for (int i = 0; i < counts[j]; i++) ls[i] = first + i;
            specs[c] = (tri_chunk_spec){counts[j], ls, j == 0, j == k - 1};
            used += counts[j];
        }
        first += counts[j];
    }
    free(counts);
    return 0;
}

int tri_chunks_even(const tri_model_cfg *cfg, int pp, int pp_rank, int vpp, tri_chunk_spec *specs, int *layers_buf) {
    return tri_chunks_layout(cfg, pp, pp_rank, vpp, "", specs, layers_buf);
}

int tri_gpt_layout_why(const tri_model_cfg *cfg, int tp, int pp, int vpp, const char *layout, char *why, size_t n) {
    if (check_shape(cfg, tp, why, n) != 0) return -1;
    if (vpp > 1 && pp < 2)
        return tri_why(why, n,
                      "parallel.vpp = %d needs parallel.pp >= 2 (virtual chunks interleave stages; with one "
                      "stage use parallel.vpp 1)",
                      vpp);
    if (pp < 1 || vpp < 1) return tri_why(why, n, "parallel.pp (%d) and parallel.vpp (%d) must be at least 1", pp, vpp);
    int k = pp * vpp;
    int *counts = malloc((size_t)k * sizeof *counts);
    if (!counts) return tri_why(why, n, "out of memory (pipeline layout of %d chunks)", k);
    int rc = layout_counts(cfg, pp, vpp, layout, counts, why, n);
    free(counts);
    return rc;
}

int tri_gpt_check_layout(const tri_model_cfg *cfg, int tp, int pp, int vpp, const char *layout) {
    char why[1024];
    if (tri_gpt_layout_why(cfg, tp, pp, vpp, layout, why, sizeof why) != 0) return tri_error("%s", why);
    return 0;
}

static int describe_chunk(tri_gpt *g, tri_chunk *ch, const tri_chunk_spec *sp) {
    for (int i = 0; i < sp->n_layers; i++)
        if (sp->layers[i] < 0 || sp->layers[i] >= g->cfg.n_layer || (i > 0 && sp->layers[i] <= sp->layers[i - 1]))
            return tri_error("internal error: chunk layer list is not ascending within [0, %d)", g->cfg.n_layer);
    ch->n_layers = sp->n_layers;
    ch->layers = malloc(((size_t)sp->n_layers + 1) * sizeof *ch->layers);
    ch->layer_last_param = malloc(((size_t)sp->n_layers + 1) * sizeof *ch->layer_last_param);
    if (!ch->layers || !ch->layer_last_param) return tri_error("out of memory (parameter table)");
    if (sp->n_layers) memcpy(ch->layers, sp->layers, (size_t)sp->n_layers * sizeof *ch->layers);
    ch->has_embedding = sp->has_embedding;
    ch->has_head = sp->has_head;
    ch->param_dtype = TRI_F32;
    ch->grad_dtype = TRI_F32;
    ptable t = {0};
    build_table(g, ch, &t);
    ch->params = t.v;
    ch->n_params = t.n;
    ch->n_elems = t.offset;
    ch->head_params = 0;
    while (ch->head_params < ch->n_params && ch->params[ch->head_params].layer < 0 &&
           ch->params[ch->head_params].kind != TRI_P_WTE)
        ch->head_params++;
    for (int i = 0; i < ch->n_params; i++)
        if (ch->params[i].layer >= 0) ch->layer_last_param[local_layer(ch, ch->params[i].layer)] = i;
    return 0;
}

void tri_gpt_sizes(tri_gpt *g, const tri_model_cfg *cfg, int tp, int tp_rank) {
    g->cfg = *cfg;
    g->tp = tp;
    g->tp_rank = tp_rank;
    g->C = (size_t)cfg->n_embd;
    g->NH = cfg->n_head;
    g->NHl = cfg->n_head / tp;
    g->HS = cfg->n_embd / cfg->n_head;
    g->Cl = (size_t)g->NHl * (size_t)g->HS;
    g->arch = cfg->arch;
    g->NKV = tri_model_n_kv_head(cfg);
    g->NKVl = g->NKV >= tp ? g->NKV / tp : 1;
    g->kv_rep = g->NKV >= tp ? 1 : tp / g->NKV;
    g->QKVl = (size_t)(g->NHl + 2 * g->NKVl) * (size_t)g->HS;
    g->F = (size_t)tri_model_ffn_hidden(cfg);
    g->Fl = g->F / (size_t)tp;
    g->FCl = g->arch == TRI_ARCH_LLAMA ? 2 * g->Fl : g->Fl;
    g->tied = tri_model_tied(cfg);
    g->norm_eps = cfg->norm_eps > 0 ? (float)cfg->norm_eps : 1e-5f;
    g->Vp = tri_padded_vocab(cfg->vocab_size, tp);
    g->Vl = g->Vp / (size_t)tp;
    g->vstart = (size_t)tp_rank * g->Vl;
}

int tri_gpt_describe(tri_gpt *g, const tri_model_cfg *cfg, int tp, int tp_rank, const tri_chunk_spec *specs,
                     int n_chunks) {
    memset(g, 0, sizeof *g);
    char why[256];
    if (check_shape(cfg, tp, why, sizeof why) != 0) return tri_error("%s", why);
    tri_gpt_sizes(g, cfg, tp, tp_rank);
    g->chunks = calloc((size_t)n_chunks, sizeof *g->chunks);
    if (!g->chunks) return tri_error("out of memory (parameter table)");
    g->n_chunks = n_chunks;
    for (int k = 0; k < n_chunks; k++)
        if (describe_chunk(g, &g->chunks[k], &specs[k]) != 0) {
            tri_gpt_free(g);
            return -1;
        }
    return 0;
}

/* The one chunk of an unpipelined model: every layer, both ends. */
static int single_spec(const tri_model_cfg *cfg, tri_chunk_spec *sp, int **layers) {
    *layers = malloc(((size_t)cfg->n_layer + 1) * sizeof **layers);
    if (!*layers) return tri_error("out of memory (parameter table)");
    for (int l = 0; l < cfg->n_layer; l++) (*layers)[l] = l;
    *sp = (tri_chunk_spec){cfg->n_layer, *layers, 1, 1};
    return 0;
}

int tri_gpt_describe_single(tri_gpt *g, const tri_model_cfg *cfg, int tp, int tp_rank) {
    tri_chunk_spec sp;
    int *layers;
    memset(g, 0, sizeof *g);
    if (single_spec(cfg, &sp, &layers) != 0) return -1;
    int rc = tri_gpt_describe(g, cfg, tp, tp_rank, &sp, 1);
    free(layers);
    return rc;
}

int tri_gpt_init(tri_gpt *g, const tri_model_cfg *cfg, tri_ctx *ctx, tri_comm *tp_comm, int tp, int tp_rank,
                 const tri_chunk_spec *specs, int n_chunks) {
    if (tri_gpt_describe(g, cfg, tp, tp_rank, specs, n_chunks) != 0) return -1;
    g->ctx = ctx;
    g->tp_comm = tp_comm;
    if (g->arch == TRI_ARCH_LLAMA && (!ctx->ops->rmsnorm_fwd || !ctx->ops->rmsnorm_bwd || !ctx->ops->rope_fwd ||
                                      !ctx->ops->rope_bwd || !ctx->ops->swiglu_fwd || !ctx->ops->swiglu_bwd)) {
        tri_error("model.arch \"llama\" needs RMSNorm, RoPE and SwiGLU, which the %s backend does not have yet",
                  ctx->ops->name ? ctx->ops->name : "chosen");
        goto fail;
    }
    if (g->arch == TRI_ARCH_LLAMA) {
        size_t nf = (size_t)g->HS / 2;
        float *host = malloc((nf + 1) * sizeof *host);
        g->inv_freq = host ? tri_ctx_alloc(ctx, nf * sizeof(float), TRI_MEM_OTHER, "RoPE frequencies") : NULL;
        if (g->inv_freq) {
            tri_rope_inv_freq(cfg, host);
            tri_ctx_to_device(ctx, g->inv_freq, host, nf * sizeof(float));
        }
        free(host);
        if (!g->inv_freq) {
            if (!host) tri_error("out of memory (RoPE frequencies)");
            goto fail;
        }
    }
    for (int k = 0; k < g->n_chunks; k++) {
        tri_chunk *ch = &g->chunks[k];
        /* parameters as the ops read them: 16-bit under mixed precision (the
         * optimizer keeps the fp32 master weights); gradients stay fp32 */
        ch->param_dtype = ctx->param_dtype;
        for (int i = 0; i < ch->n_params; i++) ch->params[i].dtype = ch->param_dtype;
        size_t pbytes, gbytes;
        if (!tri_size_mul(&pbytes, ch->n_elems, tri_dtype_size(ch->param_dtype)) ||
            !tri_size_mul(&gbytes, ch->n_elems, tri_dtype_size(ch->grad_dtype))) {
            tri_error("the model's parameters (%zu elements) overflow a byte count", ch->n_elems);
            goto fail;
        }
        ch->n_alloc = ch->n_elems;
        ch->param_mem = tri_ctx_alloc(ctx, pbytes, TRI_MEM_PARAMS, "parameters");
        ch->grad_mem = ch->param_mem ? tri_ctx_alloc(ctx, gbytes, TRI_MEM_GRADS, "gradients") : NULL;
        ch->w.layers = calloc((size_t)ch->n_layers + 1, sizeof(tri_layer_w));
        ch->g.layers = calloc((size_t)ch->n_layers + 1, sizeof(tri_layer_w));
        if (!ch->param_mem || !ch->grad_mem || !ch->w.layers || !ch->g.layers) goto fail;
        bind(ch, ch->param_mem, tri_dtype_size(ch->param_dtype), &ch->w);
        bind(ch, (char *)ch->grad_mem, tri_dtype_size(ch->grad_dtype), &ch->g);
    }
    return 0;
fail:
    tri_gpt_free(g);
    return -1;
}

int tri_gpt_pad(tri_gpt *g, size_t multiple) {
    if (multiple == 0) multiple = 1;
    for (int k = 0; k < g->n_chunks; k++) {
        tri_chunk *ch = &g->chunks[k];
        size_t n = (ch->n_elems + multiple - 1) / multiple * multiple;
        if (n == ch->n_alloc) continue;
        size_t psz = tri_dtype_size(ch->param_dtype), gsz = tri_dtype_size(ch->grad_dtype);
        tri_ctx_release(g->ctx, ch->param_mem, ch->n_alloc * psz, TRI_MEM_PARAMS);
        tri_ctx_release(g->ctx, ch->grad_mem, ch->n_alloc * gsz, TRI_MEM_GRADS);
        ch->grad_mem = NULL;
        ch->n_alloc = n;
        ch->param_mem = tri_ctx_alloc(g->ctx, n * psz, TRI_MEM_PARAMS, "parameters");
        ch->grad_mem = ch->param_mem ? tri_ctx_alloc(g->ctx, n * gsz, TRI_MEM_GRADS, "gradients") : NULL;
        if (!ch->param_mem || !ch->grad_mem) {
            tri_gpt_free(g);
            return -1;
        }
        bind(ch, ch->param_mem, psz, &ch->w);
        bind(ch, (char *)ch->grad_mem, gsz, &ch->g);
    }
    return 0;
}

void tri_gpt_grads_release(tri_gpt *g, int k) {
    tri_chunk *ch = &g->chunks[k];
    tri_ctx_release(g->ctx, ch->grad_mem, ch->n_alloc * tri_dtype_size(ch->grad_dtype), TRI_MEM_GRADS);
    ch->grad_mem = NULL;
    tri_layer_w *layers = ch->g.layers; /* the views point nowhere until acquired */
    memset(layers, 0, (size_t)ch->n_layers * sizeof *layers);
    ch->g = (tri_weights){.layers = layers};
}

int tri_gpt_grads_acquire(tri_gpt *g, int k) {
    tri_chunk *ch = &g->chunks[k];
    if (ch->grad_mem) return 0;
    size_t gsz = tri_dtype_size(ch->grad_dtype);
    ch->grad_mem = tri_ctx_alloc(g->ctx, ch->n_alloc * gsz, TRI_MEM_GRADS, "gradients (ZeRO-2: one step's)");
    if (!ch->grad_mem) return -1;
    g->ctx->ops->zero(g->ctx, ch->grad_mem, ch->n_alloc * gsz);
    bind(ch, (char *)ch->grad_mem, gsz, &ch->g);
    return 0;
}

void tri_gpt_params_release(tri_gpt *g, int k) {
    tri_chunk *ch = &g->chunks[k];
    tri_ctx_release(g->ctx, ch->param_mem, ch->n_alloc * tri_dtype_size(ch->param_dtype), TRI_MEM_PARAMS);
    ch->param_mem = NULL;
    tri_layer_w *layers = ch->w.layers;
    memset(layers, 0, (size_t)ch->n_layers * sizeof *layers);
    ch->w = (tri_weights){.layers = layers};
}

int tri_gpt_params_acquire(tri_gpt *g, int k) {
    tri_chunk *ch = &g->chunks[k];
    if (ch->param_mem) return 0;
    size_t psz = tri_dtype_size(ch->param_dtype);
    ch->param_mem =
        tri_ctx_alloc(g->ctx, ch->n_alloc * psz, TRI_MEM_PARAMS, "parameters (ZeRO-3: one chunk's, gathered)");
    if (!ch->param_mem) return -1;
    bind(ch, ch->param_mem, psz, &ch->w);
    return 0;
}

int tri_gpt_init_single(tri_gpt *g, const tri_model_cfg *cfg, tri_ctx *ctx, tri_comm *tp_comm, int tp, int tp_rank) {
    tri_chunk_spec sp;
    int *layers;
    memset(g, 0, sizeof *g);
    if (single_spec(cfg, &sp, &layers) != 0) return -1;
    int rc = tri_gpt_init(g, cfg, ctx, tp_comm, tp, tp_rank, &sp, 1);
    free(layers);
    return rc;
}

void tri_gpt_free(tri_gpt *g) {
    if (!g) return;
    for (int k = 0; k < g->n_chunks; k++) {
        tri_chunk *ch = &g->chunks[k];
        if (g->ctx) {
            tri_ctx_release(g->ctx, ch->param_mem, ch->n_alloc * tri_dtype_size(ch->param_dtype), TRI_MEM_PARAMS);
            tri_ctx_release(g->ctx, ch->grad_mem, ch->n_alloc * tri_dtype_size(ch->grad_dtype), TRI_MEM_GRADS);
        }
        free(ch->w.layers);
        free(ch->g.layers);
        free(ch->params);
        free(ch->layers);
        free(ch->layer_last_param);
    }
    if (g->ctx && g->inv_freq) tri_ctx_release(g->ctx, g->inv_freq, (size_t)g->HS / 2 * sizeof(float), TRI_MEM_OTHER);
    free(g->chunks);
    memset(g, 0, sizeof *g);
}

int tri_gpt_set_sequence_parallel(tri_gpt *g, int on) {
    if (!on) {
        g->sp = 0;
        return 0;
    }
    if (g->tp < 2) return tri_error("parallel.sequence_parallel needs parallel.tp > 1, got parallel.tp = %d", g->tp);
    if (g->cfg.seq_len % g->tp != 0)
        return tri_error("parallel.sequence_parallel: model.seq_len (%d) is not divisible by parallel.tp (%d)",
                         g->cfg.seq_len, g->tp);
    g->sp = 1;
    return 0;
}

size_t tri_gpt_local_elems(const tri_gpt *g) {
    size_t n = 0;
    for (int k = 0; k < g->n_chunks; k++) n += g->chunks[k].n_elems;
    return n;
}

int tri_gpt_profile_roles(const tri_gpt *g, tri_profile *p) {
    for (int k = 0; k < g->n_chunks; k++) {
        const tri_chunk *ch = &g->chunks[k];
        const size_t esz = tri_dtype_size(ch->param_dtype);
        if (!ch->param_mem) continue; /* ZeRO-3: gathered into a new buffer each time; not attributed */
        for (int i = 0; i < ch->n_params; i++) {
            const tri_param *q = &ch->params[i];
            int role = -1;
            switch (q->kind) {
            case TRI_P_QKVW: role = TRI_PROF_QKV; break;
            case TRI_P_ATTPROJW: role = TRI_PROF_ATTPROJ; break;
            case TRI_P_FCW: role = TRI_PROF_FC; break;
            case TRI_P_FCPROJW: role = TRI_PROF_FCPROJ; break;
            case TRI_P_WTE: role = TRI_PROF_HEAD; break;
            case TRI_P_LMHEAD: role = TRI_PROF_HEAD; break;
            default: break;
            }
            if (role >= 0 &&
                tri_profile_role(p, (const char *)ch->param_mem + q->offset * esz, q->numel * esz, role) != 0)
                return -1;
        }
    }
    return 0;
}

/* Elements converted per staging pass of 16-bit parameters. */
#define STAGE_ELEMS ((size_t)1 << 16)

int tri_gpt_params_to_device(tri_gpt *g, int k, size_t elem, const float *host, size_t n) {
    tri_chunk *ch = &g->chunks[k];
    const tri_dtype t = ch->param_dtype;
    if (t == TRI_F32) {
        tri_ctx_to_device(g->ctx, (float *)ch->param_mem + elem, host, n * sizeof(float));
        return 0;
    }
    TRI_CHECK(t == TRI_BF16 || t == TRI_F16);
    uint16_t *h = malloc((n < STAGE_ELEMS ? n : STAGE_ELEMS) * sizeof *h + 1);
    if (!h) return tri_error("out of memory staging %zu parameters", n);
    for (size_t i0 = 0; i0 < n; i0 += STAGE_ELEMS) {
        size_t m = n - i0 < STAGE_ELEMS ? n - i0 : STAGE_ELEMS;
        for (size_t i = 0; i < m; i++)
            h[i] = t == TRI_BF16 ? tri_f32_to_bf16(host[i0 + i]) : tri_f32_to_f16(host[i0 + i]);
        tri_ctx_to_device(g->ctx, (uint16_t *)ch->param_mem + elem + i0, h, m * sizeof *h);
    }
    free(h);
    return 0;
}

int tri_gpt_params_to_host(const tri_gpt *g, int k, size_t elem, float *host, size_t n) {
    const tri_chunk *ch = &g->chunks[k];
    const tri_dtype t = ch->param_dtype;
    if (t == TRI_F32) {
        tri_ctx_to_host(g->ctx, host, (const float *)ch->param_mem + elem, n * sizeof(float));
        return 0;
    }
    TRI_CHECK(t == TRI_BF16 || t == TRI_F16);
    uint16_t *h = malloc((n < STAGE_ELEMS ? n : STAGE_ELEMS) * sizeof *h + 1);
    if (!h) return tri_error("out of memory staging %zu parameters", n);
    for (size_t i0 = 0; i0 < n; i0 += STAGE_ELEMS) {
        size_t m = n - i0 < STAGE_ELEMS ? n - i0 : STAGE_ELEMS;
        tri_ctx_to_host(g->ctx, h, (const uint16_t *)ch->param_mem + elem + i0, m * sizeof *h);
        for (size_t i = 0; i < m; i++) host[i0 + i] = t == TRI_BF16 ? tri_bf16_to_f32(h[i]) : tri_f16_to_f32(h[i]);
    }
    free(h);
    return 0;
}

int tri_gpt_init_params(tri_gpt *g, uint64_t seed) {
    for (int k = 0; k < g->n_chunks; k++) {
        tri_chunk *ch = &g->chunks[k];
        for (int i = 0; i < ch->n_params; i++) {
            const tri_param *p = &ch->params[i];
            float *x = malloc((p->numel ? p->numel : 1) * sizeof(float)); /* host staging */
            if (!x) return tri_error("out of memory initialising %s (%zu values)", p->name, p->numel);
            if (p->init_std == 0.0f) {
                for (size_t e = 0; e < p->numel; e++) x[e] = p->init_value;
            } else {
                uint64_t key = tri_init_key(seed, p->name);
                size_t real_rows = p->hf_rows_saved; /* padded vocab rows stay 0 */
#pragma omp parallel for schedule(static)
                for (size_t r = 0; r < p->lrows; r++) {
                    size_t gr = p->split == TRI_SPLIT_ROWS ? tri_param_global_dim(p, g->tp_rank, g->tp, r) : r;
                    for (size_t c = 0; c < p->lcols; c++) {
                        size_t gc = p->split == TRI_SPLIT_COLS ? tri_param_global_dim(p, g->tp_rank, g->tp, c) : c;
                        float v = 0.0f;
                        if (gr < real_rows)
                            v = p->init_std * (float)tri_init_normal(key, (uint64_t)(gr * p->cols + gc));
                        x[r * p->lcols + c] = v;
                    }
                }
            }
            /* fp32 host staging; 16-bit parameters are rounded (RNE) as they are copied */
            int rc = tri_gpt_params_to_device(g, k, p->offset, x, p->numel);
            free(x);
            if (rc != 0) return -1;
        }
    }
    return 0;
}
