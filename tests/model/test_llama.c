/* The Llama model on one rank, in process: the parameter table (Hugging Face
 * names and shapes, the fused q|k|v and gate|up matrices, KV heads replicated
 * over TP ranks when tp > n_kv_head, the shard init a slice of the whole),
 * the analytic gradient through one block and through the whole model
 * against finite differences (every recompute policy; GQA, MQA, untied and
 * tied heads), the split backward of zero-bubble schedules against the fused
 * one, and the saved-activation bytes against the closed forms of
 * docs/performance.md. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers/testutil.h"
#include "kernels/ctx.h"
#include "model/ckpt/checkpoint.h"
#include "model/gpt.h"
#include "model/init.h"
#include "model/runtime.h"

/* A small Llama: n_head 4, n_kv_head kv, head size HS = C / 4 */
static tri_model_cfg llama_cfg(int L, int NH, int NKV, int C, int T, int V, int F, int tied) {
    return (tri_model_cfg){.n_layer = L,
                           .n_head = NH,
                           .n_embd = C,
                           .seq_len = T,
                           .vocab_size = V,
                           .arch = TRI_ARCH_LLAMA,
                           .n_kv_head = NKV,
                           .ffn_hidden = F,
                           .tie_embeddings = tied,
                           .norm_eps = 1e-5,
                           .rope_theta = 10000};
}

typedef struct fixture {
    tri_model_cfg cfg;
    tri_ctx ctx;
    tri_comm self;
    tri_gpt g;
    tri_slot_pool pool;
    tri_workspace ws;
    int32_t *ids, *tgt;
    size_t B, T;
} fixture;

static void fill_tokens(int32_t *ids, int32_t *tgt, size_t n, int V, uint64_t s) {
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        ids[i] = (int32_t)((s >> 33) % (uint64_t)V);
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        tgt[i] = (int32_t)((s >> 33) % (uint64_t)V);
    }
}

static void setup(fixture *f, tri_model_cfg cfg, size_t B, uint64_t seed, tri_recompute policy, int split) {
    memset(f, 0, sizeof *f);
    f->cfg = cfg;
    cr_assert_eq(tri_ctx_init(&f->ctx, "cpu", 0), 0);
    tri_comm_init_self(&f->self, 0);
    f->self.ctx = &f->ctx;
    cr_assert_eq(tri_gpt_init_single(&f->g, &f->cfg, &f->ctx, &f->self, 1, 0), 0);
    cr_assert_eq(tri_slot_pool_init(&f->pool, &f->g, 0, B, (size_t)cfg.seq_len, policy, 1, split), 0);
    cr_assert_eq(tri_workspace_init(&f->ws, &f->g, B, (size_t)cfg.seq_len, policy), 0);
    cr_assert_eq(tri_gpt_init_params(&f->g, seed), 0);
    f->B = B;
    f->T = (size_t)cfg.seq_len;
    f->ids = malloc(B * f->T * sizeof(int32_t));
    f->tgt = malloc(B * f->T * sizeof(int32_t));
    fill_tokens(f->ids, f->tgt, B * f->T, cfg.vocab_size, seed);
}

static void teardown(fixture *f) {
    tri_slot_pool_free(&f->pool, &f->g);
    tri_workspace_free(&f->ws, &f->g);
    tri_gpt_free(&f->g);
    tri_ctx_free(&f->ctx);
    free(f->ids);
    free(f->tgt);
}

static tri_chunk *chunk(fixture *f) { return &f->g.chunks[0]; }
static float *params(fixture *f) { return chunk(f)->param_mem; }
static float *grads(fixture *f) { return chunk(f)->grad_mem; }
static void zero_grads(fixture *f) { memset(grads(f), 0, chunk(f)->n_elems * sizeof(float)); }

/* One micro-batch, forward (and backward when train: fused, or B then W). */
static double step_mb(fixture *f, int train, int split) {
    tri_slot *s = tri_slot_acquire(&f->pool, &f->g);
    cr_assert(s != NULL);
    tri_slot_stage(&f->g, &f->pool, s, f->ids, f->tgt);
    double sum = tri_chunk_forward(&f->g, &f->pool, s, &f->ws, NULL, train ? TRI_FWD_TRAIN : TRI_FWD_LOSS,
                                   (float)(1.0 / (double)(f->B * f->T)));
    if (train && split) {
        tri_chunk_backward_input(&f->g, &f->pool, s, &f->ws, NULL);
        tri_chunk_backward_weight(&f->g, &f->pool, s, &f->ws);
    } else if (train) {
        tri_chunk_backward(&f->g, &f->pool, s, &f->ws, NULL);
    }
    tri_slot_release(&f->pool, &f->g, s);
    return sum;
}

static double loss_of(fixture *f) { return step_mb(f, 0, 0) / (double)(f->B * f->T); }

/* ---- the parameter table ---- */

static const tri_param *find(const tri_chunk *ch, const char *name) {
    for (int i = 0; i < ch->n_params; i++)
        if (!strcmp(ch->params[i].name, name)) return &ch->params[i];
    return NULL;
}

/* Hugging Face's Llama names and (out, in) shapes, no biases, no position
 * table; q|k|v and gate|up back to back in the buffer (the fused matrices
 * the runtime multiplies by); lm_head only when untied. */
Test(llama, parameter_table_has_hugging_face_names_and_shapes) {
    for (int tied = 0; tied <= 1; tied++) {
        tri_model_cfg cfg = llama_cfg(2, 8, 2, 64, 16, 300, 96, tied);
        tri_gpt g;
        cr_assert_eq(tri_gpt_describe_single(&g, &cfg, 1, 0), 0);
        const tri_chunk *ch = &g.chunks[0];
        cr_expect_eq(ch->n_params, 2 * 9 + 2 + !tied);
        cr_expect_eq(ch->head_params, tied ? 1 : 2);
        struct {
            const char *name;
            size_t rows, cols;
        } want[] = {
            {"model.embed_tokens.weight", 384, 64},
            {"model.norm.weight", 1, 64},
            {"model.layers.1.self_attn.q_proj.weight", 64, 64},
            {"model.layers.1.self_attn.k_proj.weight", 16, 64},
            {"model.layers.1.self_attn.v_proj.weight", 16, 64},
            {"model.layers.1.self_attn.o_proj.weight", 64, 64},
            {"model.layers.0.mlp.gate_proj.weight", 96, 64},
            {"model.layers.0.mlp.up_proj.weight", 96, 64},
            {"model.layers.0.mlp.down_proj.weight", 64, 96},
            {"model.layers.0.input_layernorm.weight", 1, 64},
            {"model.layers.0.post_attention_layernorm.weight", 1, 64},
        };
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
            const tri_param *p = find(ch, want[i].name);
            cr_assert(p != NULL, "%s missing", want[i].name);
            cr_expect(p->rows == want[i].rows && p->cols == want[i].cols && !p->hf_transposed,
                      "%s: (%zu, %zu), want (%zu, %zu)", p->name, p->rows, p->cols, want[i].rows, want[i].cols);
        }
        const tri_param *lm = find(ch, "lm_head.weight");
        cr_expect(tied ? lm == NULL : (lm && lm->rows == 384 && lm->hf_rows_saved == 300), "lm_head");
        for (int l = 0; l < 2; l++) {
            char q[64], kk[64], v[64], ga[64], up[64];
            snprintf(q, sizeof q, "model.layers.%d.self_attn.q_proj.weight", l);
            snprintf(kk, sizeof kk, "model.layers.%d.self_attn.k_proj.weight", l);
            snprintf(v, sizeof v, "model.layers.%d.self_attn.v_proj.weight", l);
            snprintf(ga, sizeof ga, "model.layers.%d.mlp.gate_proj.weight", l);
            snprintf(up, sizeof up, "model.layers.%d.mlp.up_proj.weight", l);
            cr_expect_eq(find(ch, kk)->offset, find(ch, q)->offset + find(ch, q)->numel);
            cr_expect_eq(find(ch, v)->offset, find(ch, kk)->offset + find(ch, kk)->numel);
            cr_expect_eq(find(ch, up)->offset, find(ch, ga)->offset + find(ch, ga)->numel);
        }
        for (int i = 0; i < ch->n_params; i++)
            cr_expect(strstr(ch->params[i].name, "bias") == NULL && ch->params[i].kind != TRI_P_WPE, "%s",
                      ch->params[i].name);
        cr_expect_eq((double)tri_gpt_num_params(&cfg),
                     300.0 * 64 * (tied ? 1 : 2) + 2 * (64.0 * 64 * 2 + 2 * 64 * 16 + 3 * 64 * 96 + 2 * 64) + 64);
        tri_gpt_free(&g);
    }
    /* Llama's rule for the default width: int(2/3 4C) rounded up to the multiple */
    tri_model_cfg d = llama_cfg(1, 4, 0, 128, 8, 256, 0, 0);
    cr_expect_eq(tri_model_ffn_hidden(&d), 512); /* 341 -> 512 (multiple of 256) */
    d.ffn_multiple_of = 32;
    cr_expect_eq(tri_model_ffn_hidden(&d), 352);
    d.n_embd = 4096, d.ffn_multiple_of = 256;
    cr_expect_eq(tri_model_ffn_hidden(&d), 11008); /* Llama 2 7B */
    cr_expect_eq(tri_model_n_kv_head(&d), 4);
}

/* Every TP shard's init is the slice of the one-rank model; with tp 4 over 2
 * KV heads, ranks 0-1 hold KV head 0 and ranks 2-3 KV head 1, whole. */
Test(llama, shard_init_is_the_slice_of_the_whole_and_kv_heads_replicate) {
    tri_model_cfg cfg = llama_cfg(1, 4, 2, 32, 8, 300, 64, 0);
    tri_ctx ctx;
    tri_comm self;
    cr_assert_eq(tri_ctx_init(&ctx, "cpu", 0), 0);
    tri_comm_init_self(&self, 0);
    self.ctx = &ctx;
    tri_gpt full;
    cr_assert_eq(tri_gpt_init_single(&full, &cfg, &ctx, &self, 1, 0), 0);
    cr_assert_eq(tri_gpt_init_params(&full, 5), 0);
    for (int tp = 2; tp <= 4; tp *= 2)
        for (int r = 0; r < tp; r++) {
            tri_gpt s;
            cr_assert_eq(tri_gpt_init_single(&s, &cfg, &ctx, &self, tp, r), 0);
            cr_assert_eq(tri_gpt_init_params(&s, 5), 0);
            cr_expect_eq(s.NKVl, 1);
            cr_expect_eq(s.kv_rep, tp / 2);
            cr_expect_eq(s.QKVl, (size_t)(4 / tp + 2 * s.NKVl) * 8);
            const tri_chunk *ch = &s.chunks[0], *fc = &full.chunks[0];
            for (int i = 0; i < ch->n_params; i++) {
                const tri_param *p = &ch->params[i], *q = find(fc, p->name);
                const float *x = (const float *)ch->param_mem + p->offset, *y = (const float *)fc->param_mem + q->offset;
                for (size_t rr = 0; rr < p->lrows; rr++)
                    for (size_t cc = 0; cc < p->lcols; cc++) {
                        size_t gr = p->split == TRI_SPLIT_ROWS ? tri_param_global_dim(p, r, tp, rr) : rr;
                        size_t gc = p->split == TRI_SPLIT_COLS ? tri_param_global_dim(p, r, tp, cc) : cc;
                        /* (the padded vocabulary differs with tp: its rows are 0) */
                        float want = gr < q->hf_rows_saved ? y[gr * q->cols + gc] : 0.0f;
                        cr_assert(x[rr * p->lcols + cc] == want, "tp %d rank %d %s[%zu,%zu]", tp, r, p->name, rr, cc);
                    }
                if (p->kind == TRI_P_KW) /* the KV head of rank r: r / (tp / 2) */
                    cr_expect_eq(tri_param_global_dim(p, r, tp, 0), (size_t)(r / (tp / 2)) * 8);
            }
            tri_gpt_free(&s);
        }
    tri_gpt_free(&full);
    tri_ctx_free(&ctx);
}

/* ---- gradients against finite differences ---- */

/* As tests/model/test_model.c's gradient_check: per tensor, the analytic
 * directional derivative along d = unit(g) + 0.5 unit(random) against a
 * central difference of the mean loss. */
static void gradient_check(tri_model_cfg cfg, tri_recompute policy, int split) {
    fixture f;
    setup(&f, cfg, 2, 42, policy, split);
    tri_chunk *ch = chunk(&f);
    zero_grads(&f);
    step_mb(&f, 1, split);
    float *grad = malloc(ch->n_elems * sizeof(float));
    memcpy(grad, grads(&f), ch->n_elems * sizeof(float));
    float *d = malloc(ch->n_elems * sizeof(float));
    int checked = 0;
    for (int i = 0; i < ch->n_params; i++) {
        const tri_param *p = &ch->params[i];
        float *th = params(&f) + p->offset, *gr = grad + p->offset, *dd = d + p->offset;
        size_t n = (p->hf_rows_saved < p->lrows ? p->hf_rows_saved : p->lrows) * p->lcols;
        double gn = 0, rn = 0;
        uint64_t key = tri_init_key(7, p->name);
        for (size_t k = 0; k < n; k++) {
            gn += (double)gr[k] * gr[k];
            double r = tri_init_normal(key, k);
            rn += r * r;
        }
        cr_assert(gn > 0, "%s: gradient is exactly zero", p->name);
        gn = sqrt(gn);
        rn = sqrt(rn);
        double an = 0.0;
        for (size_t k = 0; k < n; k++) {
            dd[k] = (float)(gr[k] / gn + 0.5 * tri_init_normal(key, k) / rn);
            an += (double)gr[k] * dd[k];
        }
        const double eps = 1e-2;
        float *save = malloc(n * sizeof(float));
        memcpy(save, th, n * sizeof(float));
        for (size_t k = 0; k < n; k++) th[k] = save[k] + (float)eps * dd[k];
        double lp = loss_of(&f);
        for (size_t k = 0; k < n; k++) th[k] = save[k] - (float)eps * dd[k];
        double lm = loss_of(&f);
        memcpy(th, save, n * sizeof(float));
        free(save);
        double fd = (lp - lm) / (2 * eps);
        /* 2% relative, as for GPT-2: the O(eps^2) truncation stays well below
         * (measured worst case here under 0.5%); a missing or mis-scaled term
         * (a wrong RoPE sign, a KV group summed wrong) is off by far more */
        double tol = 2e-2 * fabs(an) + 2e-5;
        cr_expect(fabs(fd - an) <= tol, "%s: finite difference %.6g vs analytic %.6g (tol %.2g)", p->name, fd, an, tol);
        checked++;
    }
    cr_assert_eq(checked, ch->n_params);
    free(grad);
    free(d);
    teardown(&f);
}

/* GQA (4 query heads over 2 KV heads), untied head; V = 300 pads to 384 */
Test(llama, model_gradient_matches_finite_differences) {
    gradient_check(llama_cfg(2, 4, 2, 32, 8, 300, 48, 0), TRI_RECOMPUTE_NONE, 0);
}
Test(llama, model_gradient_with_selective_recompute_matches_finite_differences) {
    gradient_check(llama_cfg(2, 4, 2, 32, 8, 300, 48, 0), TRI_RECOMPUTE_SELECTIVE, 0);
}
Test(llama, model_gradient_with_full_recompute_matches_finite_differences) {
    gradient_check(llama_cfg(2, 4, 2, 32, 8, 300, 48, 0), TRI_RECOMPUTE_FULL, 0);
}
/* multi-query attention with a tied head; multi-head with the split backward */
Test(llama, mqa_tied_gradient_matches_finite_differences) {
    gradient_check(llama_cfg(2, 4, 1, 32, 8, 300, 48, 1), TRI_RECOMPUTE_NONE, 0);
}
Test(llama, split_backward_gradient_matches_finite_differences) {
    gradient_check(llama_cfg(2, 4, 4, 32, 8, 300, 48, 0), TRI_RECOMPUTE_FULL, 1);
}
/* RoPE with Llama 3.1's frequency scaling and another base on the path */
Test(llama, scaled_rope_gradient_matches_finite_differences) {
    tri_model_cfg cfg = llama_cfg(1, 4, 2, 32, 8, 300, 48, 0);
    cfg.rope_theta = 500000;
    cfg.rope_scaling_factor = 8, cfg.rope_low_freq_factor = 1, cfg.rope_high_freq_factor = 4;
    cfg.rope_original_seq_len = 4;
    gradient_check(cfg, TRI_RECOMPUTE_NONE, 0);
}

/* One whole block, alone: L = sum(y * r) for a fixed random r, so dL/dy = r;
 * dL/dx and every weight gradient of the block against central differences
 * (double accumulation of L over float activations). */
Test(llama, block_gradient_matches_finite_differences) {
    fixture f;
    setup(&f, llama_cfg(1, 4, 2, 32, 8, 100, 48, 0), 2, 9, TRI_RECOMPUTE_NONE, 0);
    size_t B = f.B, T = f.T, BT = B * T, C = f.g.C;
    tri_slot *s = tri_slot_acquire(&f.pool, &f.g);
    float *x = malloc(BT * C * sizeof(float)), *y = malloc(BT * C * sizeof(float)), *r = malloc(BT * C * sizeof(float));
    uint64_t key = tri_init_key(3, "block");
    for (size_t i = 0; i < BT * C; i++) {
        x[i] = (float)tri_init_normal(key, i);
        r[i] = (float)tri_init_normal(key, BT * C + i);
    }
#define BLOCK_LOSS(out)                                                                          \
    do {                                                                                         \
        tri_block_fwd(&f.g, 0, 0, &s->layer[0], x, y, &f.ws, B, T);                              \
        double acc = 0;                                                                          \
        for (size_t i = 0; i < BT * C; i++) acc += (double)y[i] * r[i];                          \
        (out) = acc;                                                                             \
    } while (0)
    double L0;
    BLOCK_LOSS(L0);
    cr_assert(isfinite(L0));
    zero_grads(&f);
    memcpy(f.ws.dres, r, BT * C * sizeof(float));
    tri_block_bwd(&f.g, 0, 0, &s->layer[0], x, &f.ws, B, T);
    float *dx = malloc(BT * C * sizeof(float));
    memcpy(dx, f.ws.dres, BT * C * sizeof(float));
    /* dL/dx along a random direction */
    const double eps = 1e-2;
    double an = 0, lp, lm;
    float *x0 = malloc(BT * C * sizeof(float));
    memcpy(x0, x, BT * C * sizeof(float));
    for (size_t i = 0; i < BT * C; i++) an += (double)dx[i] * tri_init_normal(key, 2 * BT * C + i);
    for (size_t i = 0; i < BT * C; i++) x[i] = x0[i] + (float)(eps * tri_init_normal(key, 2 * BT * C + i));
    BLOCK_LOSS(lp);
    for (size_t i = 0; i < BT * C; i++) x[i] = x0[i] - (float)(eps * tri_init_normal(key, 2 * BT * C + i));
    BLOCK_LOSS(lm);
    memcpy(x, x0, BT * C * sizeof(float));
    double fd = (lp - lm) / (2 * eps);
    cr_expect(fabs(fd - an) <= 1e-2 * fabs(an) + 1e-3, "dL/dx: finite difference %.6g vs analytic %.6g", fd, an);
    /* every tensor of the block (the chunk's head and embedding are not on this path) */
    const tri_chunk *ch = chunk(&f);
    int checked = 0;
    for (int i = 0; i < ch->n_params; i++) {
        const tri_param *p = &ch->params[i];
        if (p->layer != 0) continue;
        float *th = params(&f) + p->offset, *gr = grads(&f) + p->offset;
        uint64_t pk = tri_init_key(11, p->name);
        an = 0;
        for (size_t k = 0; k < p->numel; k++) an += (double)gr[k] * tri_init_normal(pk, k);
        float *save = malloc(p->numel * sizeof(float));
        memcpy(save, th, p->numel * sizeof(float));
        for (size_t k = 0; k < p->numel; k++) th[k] = save[k] + (float)(eps * tri_init_normal(pk, k));
        BLOCK_LOSS(lp);
        for (size_t k = 0; k < p->numel; k++) th[k] = save[k] - (float)(eps * tri_init_normal(pk, k));
        BLOCK_LOSS(lm);
        memcpy(th, save, p->numel * sizeof(float));
        free(save);
        fd = (lp - lm) / (2 * eps);
        /* L is a sum of BT C = 512 terms of size ~1: float noise ~1e-4 on the
         * difference, truncation O(eps^2) relative */
        cr_expect(fabs(fd - an) <= 1e-2 * fabs(an) + 1e-3, "%s: finite difference %.6g vs analytic %.6g", p->name, fd,
                  an);
        checked++;
    }
    cr_expect_eq(checked, 9, "every tensor of the block: q, k, v, o, gate, up, down, 2 norms");
#undef BLOCK_LOSS
    tri_slot_release(&f.pool, &f.g, s);
    free(x), free(y), free(r), free(dx), free(x0);
    teardown(&f);
}

/* B then W gives the fused backward's gradients and loss bit for bit (same
 * ops on the same operands), for every policy. */
Test(llama, split_backward_equals_fused) {
    for (int pol = 0; pol < 3; pol++) {
        fixture a, b;
        tri_model_cfg cfg = llama_cfg(2, 4, 2, 32, 8, 300, 48, 0);
        setup(&a, cfg, 2, 13, (tri_recompute)pol, 0);
        setup(&b, cfg, 2, 13, (tri_recompute)pol, 1);
        zero_grads(&a);
        zero_grads(&b);
        double la = step_mb(&a, 1, 0), lb = step_mb(&b, 1, 1);
        cr_expect(la == lb, "loss %.17g vs %.17g", la, lb);
        cr_expect(memcmp(grads(&a), grads(&b), chunk(&a)->n_elems * sizeof(float)) == 0, "%s: gradients differ",
                  tri_recompute_name((tri_recompute)pol));
        teardown(&a);
        teardown(&b);
    }
}

/* ---- saved bytes against the closed forms of docs/performance.md ---- */

/* Per layer, fp32 (4 bytes), t TP ranks, a heads, k KV heads, h = C / a,
 * kl = h max(k / t, 1) (a rank's KV width), Fl = F / t, R = BT (BT / t under
 * sequence parallelism):
 *   none:      4 [R (4C + 2) + BT (2C/t + 2 kl + 3 Fl) + B (a/t) T]
 *   selective: 4 [R (4C + 2) + BT (2C/t + 2 kl + 3 Fl)]
 *   full:      4 R C
 * a split slot adding 4 BT (C/t + 2 kl + 2C + 2 Fl) (the four douts) + under
 * sequence parallelism 8 BT C (the gathered norm outputs), and under full
 * 4 [2 R C + BT (C/t + Fl)] (the linears' inputs); the ends 8 BT (ids,
 * targets) + 4 R (2C + 1) (head input, dlnf, RMSNorm rstd). From described
 * shards; BT / t a multiple of 16 keeps every buffer aligned exactly. */
Test(llama, saved_bytes_match_the_closed_form) {
    const size_t B = 2, T = 32;
    int kvs[] = {8, 2, 1};
    for (size_t ki = 0; ki < 3; ki++)
        for (int tp = 1; tp <= 4; tp *= 2)
            for (int sp = 0; sp <= (tp > 1); sp++)
                for (int pol = 0; pol < 3; pol++)
                    for (int split = 0; split <= 1; split++) {
                        tri_model_cfg cfg = llama_cfg(3, 8, kvs[ki], 128, 32, 1000, 352, 0);
                        tri_gpt g;
                        cr_assert_eq(tri_gpt_describe_single(&g, &cfg, tp, tp - 1), 0);
                        if (sp) cr_assert_eq(tri_gpt_set_sequence_parallel(&g, 1), 0);
                        size_t lb = 0;
                        size_t slot = tri_slot_bytes(&g, 0, B, T, (tri_recompute)pol, split, &lb);
                        cr_assert(slot > 0);
                        double BT = (double)(B * T), C = 128, a = 8, k = kvs[ki], t = tp, h = C / a;
                        double kl = h * fmax(k / t, 1), Fl = 352 / t, R = sp ? BT / t : BT;
                        double want = pol == TRI_RECOMPUTE_FULL ? 4 * R * C
                                                                : 4 * (R * (4 * C + 2) + BT * (2 * C / t + 2 * kl + 3 * Fl));
                        if (pol == TRI_RECOMPUTE_NONE) want += 4 * B * (a / t) * T;
                        if (split) {
                            want += 4 * BT * (C / t + 2 * kl + 2 * C + 2 * Fl) + (sp ? 8 * BT * C : 0);
                            if (pol == TRI_RECOMPUTE_FULL) want += 4 * (2 * R * C + BT * (C / t + Fl));
                        }
                        double ends = 8 * BT + 4 * R * (2 * C + 1);
                        cr_expect((double)lb == want, "k=%d tp=%d sp=%d %s split %d: %zu bytes per layer, closed form %.0f",
                                  kvs[ki], tp, sp, tri_recompute_name((tri_recompute)pol), split, lb, want);
                        cr_expect((double)slot == 3 * want + ends,
                                  "k=%d tp=%d sp=%d %s split %d: slot %zu, closed form %.0f", kvs[ki], tp, sp,
                                  tri_recompute_name((tri_recompute)pol), split, slot, 3 * want + ends);
                        tri_gpt_free(&g);
                    }
    /* and an allocated pool's accounting after a step */
    fixture f;
    setup(&f, llama_cfg(2, 4, 2, 32, 8, 300, 48, 0), 2, 1, TRI_RECOMPUTE_NONE, 0);
    step_mb(&f, 1, 0);
    cr_expect(f.ctx.mem.saved_in_use_peak == f.pool.slot_bytes && f.ctx.mem.peak[TRI_MEM_SAVED] == f.pool.slot_bytes,
              "accounting: peak in use %zu, allocated %zu, slot %zu", f.ctx.mem.saved_in_use_peak,
              f.ctx.mem.peak[TRI_MEM_SAVED], f.pool.slot_bytes);
    teardown(&f);
}

/* The shape rules, each refused with its numbers. */
Test(llama, impossible_shapes_are_refused_with_their_numbers) {
    struct {
        tri_model_cfg cfg;
        int tp;
        const char *says;
    } bad[] = {
        {llama_cfg(1, 6, 4, 48, 8, 256, 64, 0), 1, "model.n_head (6) is not a multiple of model.n_kv_head (4)"},
        {llama_cfg(1, 4, 2, 36, 8, 256, 64, 0), 1, "head size 9 is odd"},
        {llama_cfg(1, 6, 3, 48, 8, 256, 64, 0), 2, "model.n_kv_head (3) and parallel.tp (2)"},
        {llama_cfg(1, 4, 2, 32, 8, 256, 66, 0), 4, "model.ffn_hidden (66) is not divisible by parallel.tp (4)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char why[512] = "";
        cr_expect_eq(tri_model_arch_why(&bad[i].cfg, bad[i].tp, why, sizeof why), -1, "case %zu", i);
        cr_expect(strstr(why, bad[i].says) != NULL, "case %zu: \"%s\" does not say \"%s\"", i, why, bad[i].says);
        cr_expect_eq(tri_gpt_layout_why(&bad[i].cfg, bad[i].tp, 1, 1, "", why, sizeof why), -1, "case %zu", i);
    }
    /* and what is fine: tp 4 over 2 KV heads (replicated), tp 2 over 4 */
    char why[512];
    tri_model_cfg ok = llama_cfg(1, 8, 2, 64, 8, 256, 64, 0);
    cr_expect_eq(tri_model_arch_why(&ok, 4, why, sizeof why), 0);
    cr_expect_eq(tri_model_arch_why(&ok, 2, why, sizeof why), 0);
    cr_expect_eq(tri_model_arch_why(&ok, 8, why, sizeof why), 0);
}

/* The config.json a Llama checkpoint carries is Hugging Face's
 * LlamaForCausalLM config, and reads back to the same shape. */
Test(llama, hugging_face_config_json_round_trips) {
    tri_model_cfg cfg = llama_cfg(3, 8, 2, 64, 32, 1000, 96, 0);
    cfg.rope_theta = 500000, cfg.norm_eps = 1e-6;
    cfg.rope_scaling_factor = 8, cfg.rope_low_freq_factor = 1, cfg.rope_high_freq_factor = 4;
    cfg.rope_original_seq_len = 8192;
    char *j = tri_hf_config_json(&cfg);
    cr_assert_not_null(j);
    const char *want[] = {"\"LlamaForCausalLM\"", "\"model_type\":\t\"llama\"", "\"num_key_value_heads\":\t2",
                          "\"intermediate_size\":\t96", "\"tie_word_embeddings\":\tfalse", "\"rope_type\":\t\"llama3\"",
                          "\"hidden_act\":\t\"silu\""};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_expect(strstr(j, want[i]) != NULL, "config.json lacks %s:\n%s", want[i], j);
    tri_model_cfg back = {0};
    cr_assert_eq(tri_hf_config_parse(j, "config.json", &back), 0);
    cr_expect(back.arch == TRI_ARCH_LLAMA && back.n_layer == 3 && back.n_head == 8 && back.n_kv_head == 2 &&
              back.n_embd == 64 && back.seq_len == 32 && back.vocab_size == 1000 && back.ffn_hidden == 96 &&
              back.tie_embeddings == 0 && back.norm_eps == 1e-6 && back.rope_theta == 500000 &&
              back.rope_scaling_factor == 8 && back.rope_low_freq_factor == 1 && back.rope_high_freq_factor == 4 &&
              back.rope_original_seq_len == 8192);
    free(j);
    /* another rope_scaling kind is refused by name, never run as something else */
    char err[512];
    const char *dyn = "{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_attention_heads\": 8, "
                      "\"num_hidden_layers\": 1, \"max_position_embeddings\": 32, \"vocab_size\": 100, "
                      "\"intermediate_size\": 96, \"rope_scaling\": {\"rope_type\": \"dynamic\", \"factor\": 2}}";
    tt_err_capture(err, sizeof err);
    int rc = tri_hf_config_parse(dyn, "config.json", &back);
    tt_err_capture(NULL, 0);
    cr_expect_eq(rc, -1);
    cr_expect(strstr(err, "dynamic") != NULL, "%s", err);
}
