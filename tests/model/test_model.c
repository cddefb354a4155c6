/* The GPT model on one rank, in process, through the stage runtime: the
 * analytic gradient of the whole model against finite differences (for every
 * recompute policy), recompute giving bit-identical gradients, two
 * micro-batches in flight, overfitting one batch, the saved-activation bytes
 * against their closed form, the guarded backend, and the layout-independent
 * initialisation. */
#include <criterion/criterion.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ctx.h"
#include "model/gpt.h"
#include "model/init.h"
#include "model/optim.h"
#include "model/runtime.h"

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

static void setup_with(fixture *f, int L, int NH, int C, int T, int V, size_t B, uint64_t seed, tri_recompute policy,
                       int n_slots, const char *device) {
    memset(f, 0, sizeof *f);
    f->cfg = (tri_model_cfg){.n_layer = L, .n_head = NH, .n_embd = C, .seq_len = T, .vocab_size = V};
    cr_assert_eq(tri_ctx_init(&f->ctx, device, 0), 0);
    tri_comm_init_self(&f->self, 0);
    f->self.ctx = &f->ctx;
    cr_assert_eq(tri_gpt_init_single(&f->g, &f->cfg, &f->ctx, &f->self, 1, 0), 0);
    cr_assert_eq(tri_slot_pool_init(&f->pool, &f->g, 0, B, (size_t)T, policy, n_slots, 0), 0);
    cr_assert_eq(tri_workspace_init(&f->ws, &f->g, B, (size_t)T, policy), 0);
    cr_assert_eq(tri_gpt_init_params(&f->g, seed), 0);
    f->B = B;
    f->T = (size_t)T;
    f->ids = malloc(B * (size_t)T * sizeof(int32_t));
    f->tgt = malloc(B * (size_t)T * sizeof(int32_t));
    fill_tokens(f->ids, f->tgt, B * (size_t)T, V, seed);
}

static void setup(fixture *f, int L, int NH, int C, int T, int V, size_t B, uint64_t seed) {
    setup_with(f, L, NH, C, T, V, B, seed, TRI_RECOMPUTE_NONE, 1, "cpu");
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

/* One micro-batch, forward (and backward when train), in a slot of its own. */
static double step_mb(fixture *f, const int32_t *ids, const int32_t *tgt, int train) {
    tri_slot *s = tri_slot_acquire(&f->pool, &f->g);
    cr_assert(s != NULL);
    tri_slot_stage(&f->g, &f->pool, s, ids, tgt);
    double sum = tri_chunk_forward(&f->g, &f->pool, s, &f->ws, NULL, train ? TRI_FWD_TRAIN : TRI_FWD_LOSS,
                                   (float)(1.0 / (double)(f->B * f->T)));
    if (train) tri_chunk_backward(&f->g, &f->pool, s, &f->ws, NULL);
    tri_slot_release(&f->pool, &f->g, s);
    return sum;
}

/* mean token loss, forward only */
static double loss_of(fixture *f) { return step_mb(f, f->ids, f->tgt, 0) / (double)(f->B * f->T); }

/* The analytic gradient of the mean loss, tensor by tensor, against a central
 * finite difference of the loss along a direction d restricted to that tensor.
 * d = unit(g_t) + 0.5 unit(random): mostly along the gradient so the
 * directional derivative is well above the float noise of the loss, with a
 * random part so a gradient that is right only up to a scale or on some
 * elements still fails. */
static void gradient_check(tri_recompute policy) {
    fixture f;
    /* V = 300 pads to 384: the padded rows and logits are on the path too */
    setup_with(&f, 2, 2, 16, 8, 300, 2, 42, policy, 1, "cpu");
    tri_chunk *ch = chunk(&f);
    zero_grads(&f);
    step_mb(&f, f.ids, f.tgt, 1);
    float *grad = malloc(ch->n_elems * sizeof(float));
    memcpy(grad, grads(&f), ch->n_elems * sizeof(float));
    float *d = malloc(ch->n_elems * sizeof(float));
    int checked = 0;
    for (int i = 0; i < ch->n_params; i++) {
        const tri_param *p = &ch->params[i];
        float *th = params(&f) + p->offset, *gr = grad + p->offset, *dd = d + p->offset;
        size_t rows_used = p->kind == TRI_P_WTE ? (size_t)f.cfg.vocab_size : p->lrows;
        size_t n = rows_used * p->lcols;
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
        /* eps along a unit-norm d: large enough that the float noise of the
         * loss (~1e-6 absolute on ~5.7) is ~1e-4 of the smallest directional
         * derivatives here (~1e-3, LayerNorm tensors), small enough that the
         * O(eps^2) truncation of the central difference stays under 0.6%
         * (measured worst case: the attention output bias, 5.8e-3) */
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
        /* 2% relative: 3.5x the worst truncation error measured above; a
         * missing or mis-scaled gradient term is off by far more */
        double tol = 2e-2 * fabs(an) + 2e-5;
        cr_expect(fabs(fd - an) <= tol, "%s: finite difference %.6g vs analytic %.6g (tol %.2g)", p->name, fd, an, tol);
        checked++;
    }
    cr_assert_eq(checked, ch->n_params);
    free(grad);
    free(d);
    teardown(&f);
}

Test(model, gradient_matches_finite_differences_for_every_tensor) { gradient_check(TRI_RECOMPUTE_NONE); }
Test(model, gradient_with_selective_recompute_matches_finite_differences) { gradient_check(TRI_RECOMPUTE_SELECTIVE); }
Test(model, gradient_with_full_recompute_matches_finite_differences) { gradient_check(TRI_RECOMPUTE_FULL); }

/* A tiny model memorises one fixed batch of random tokens: AdamW at a constant
 * lr drives the loss from ~log(V) = 5.5 to under 0.05 in 300 steps. A broken
 * backward, optimizer or decay mask keeps it far above that. */
Test(model, overfits_one_batch) {
    fixture f;
    setup(&f, 2, 2, 32, 16, 256, 2, 3);
    tri_gpt *g = &f.g;
    tri_optim o;
    tri_adamw_cfg oc = {.lr = 1e-2,
                        .min_lr = 1e-2,
                        .warmup_steps = 0,
                        .total_steps = 300,
                        .beta1 = 0.9,
                        .beta2 = 0.95,
                        .eps = 1e-8,
                        .weight_decay = 0.0,
                        .grad_clip = 1.0};
    cr_assert_eq(tri_optim_init(&o, g, &oc), 0);
    size_t BT = f.B * f.T;
    double first = 0, last = 0;
    for (int s = 0; s < 300; s++) {
        zero_grads(&f);
        double l = step_mb(&f, f.ids, f.tgt, 1) / (double)BT;
        double norm = sqrt(tri_grad_sumsq_local(g));
        float clip = norm > 1.0 ? (float)(1.0 / (norm + 1e-6)) : 1.0f;
        tri_optim_step(&o, g, tri_lr_at(&oc, s), clip);
        if (s == 0) first = l;
        last = l;
        cr_assert(isfinite(l), "loss is not finite at step %d", s);
    }
    cr_expect(fabs(first - log(256.0)) < 0.3, "initial loss %.3f should be near log(256) = 5.545", first);
    cr_expect(last < 0.05, "loss after 300 steps on one batch: %.4f, expected < 0.05", last);
    tri_optim_free(&o, g);
    teardown(&f);
}

/* Every tensor of a tp=2 shard starts equal to the matching slice of the tp=1
 * model: the initialiser is keyed by global element index, not by rank. */
Test(model, init_of_a_tensor_parallel_shard_is_the_slice_of_the_full_model) {
    tri_model_cfg cfg = {.n_layer = 2, .n_head = 4, .n_embd = 32, .seq_len = 8, .vocab_size = 300};
    tri_ctx ctx;
    cr_assert_eq(tri_ctx_init(&ctx, "cpu", 0), 0);
    tri_comm self;
    tri_comm_init_self(&self, 0);
    tri_gpt full;
    cr_assert_eq(tri_gpt_init_single(&full, &cfg, &ctx, &self, 1, 0), 0);
    cr_assert_eq(tri_gpt_init_params(&full, 99), 0);
    for (int tp = 2; tp <= 4; tp *= 2) {
        for (int r = 0; r < tp; r++) {
            tri_gpt sh;
            cr_assert_eq(tri_gpt_init_single(&sh, &cfg, &ctx, &self, tp, r), 0);
            cr_assert_eq(tri_gpt_init_params(&sh, 99), 0);
            const tri_chunk *a = &sh.chunks[0], *b = &full.chunks[0];
            cr_assert_eq(a->n_params, b->n_params);
            for (int i = 0; i < a->n_params; i++) {
                const tri_param *p = &a->params[i], *q = &b->params[i];
                cr_assert_str_eq(p->name, q->name);
                const float *x = (const float *)a->param_mem + p->offset, *y = (const float *)b->param_mem + q->offset;
                /* the full model's element behind local (r, c), by explicit arithmetic:
                 * each of the `segments` blocks along the split dim is cut in tp parts */
                for (size_t rr = 0; rr < p->lrows; rr++)
                    for (size_t cc = 0; cc < p->lcols; cc++) {
                        size_t gr = rr, gc = cc;
                        if (p->split == TRI_SPLIT_ROWS) {
                            size_t part = p->rows / (size_t)p->segments / (size_t)tp;
                            gr = (rr / part) * (p->rows / (size_t)p->segments) + (size_t)r * part + rr % part;
                        } else if (p->split == TRI_SPLIT_COLS) {
                            size_t part = p->cols / (size_t)p->segments / (size_t)tp;
                            gc = (cc / part) * (p->cols / (size_t)p->segments) + (size_t)r * part + cc % part;
                        }
                        float want = gr < q->lrows ? y[gr * q->lcols + gc] : 0.0f;
                        cr_assert(x[rr * p->lcols + cc] == want, "%s tp=%d rank %d (%zu,%zu): %g vs %g", p->name, tp, r,
                                  rr, cc, x[rr * p->lcols + cc], want);
                    }
            }
            tri_gpt_free(&sh);
        }
    }
    tri_gpt_free(&full);
    tri_ctx_free(&ctx);
}

/* GPT-2 init statistics, against the closed-form targets: std 0.02, residual
 * projections 0.02/sqrt(2L), LayerNorm weights 1, biases 0, padded vocab rows 0. */
Test(model, init_statistics_follow_gpt2) {
    tri_model_cfg cfg = {.n_layer = 4, .n_head = 4, .n_embd = 64, .seq_len = 32, .vocab_size = 1000};
    tri_ctx ctx;
    cr_assert_eq(tri_ctx_init(&ctx, "cpu", 0), 0);
    tri_comm self;
    tri_comm_init_self(&self, 0);
    tri_gpt g;
    cr_assert_eq(tri_gpt_init_single(&g, &cfg, &ctx, &self, 1, 0), 0);
    cr_assert_eq(tri_gpt_init_params(&g, 5), 0);
    const tri_chunk *ch = &g.chunks[0];
    for (int i = 0; i < ch->n_params; i++) {
        const tri_param *p = &ch->params[i];
        const float *x = (const float *)ch->param_mem + p->offset;
        size_t rows = p->kind == TRI_P_WTE ? (size_t)cfg.vocab_size : p->lrows, n = rows * p->lcols;
        double mean = 0, sq = 0;
        for (size_t k = 0; k < n; k++) {
            mean += x[k];
            sq += (double)x[k] * x[k];
        }
        mean /= (double)n;
        double sd = sqrt(sq / (double)n - mean * mean);
        if (p->init_std == 0) {
            for (size_t k = 0; k < n; k++) cr_assert(x[k] == p->init_value, "%s[%zu] = %g", p->name, k, x[k]);
            continue;
        }
        int resid = p->kind == TRI_P_ATTPROJW || p->kind == TRI_P_FCPROJW;
        double want = resid ? 0.02 / sqrt(2.0 * cfg.n_layer) : 0.02;
        /* n >= 2048 samples: the sample std is within 10% of sigma with overwhelming probability */
        cr_expect(fabs(sd - want) < 0.1 * want, "%s: std %.5f, want %.5f", p->name, sd, want);
        cr_expect(fabs(mean) < 5 * want / sqrt((double)n), "%s: mean %.3g", p->name, mean);
        if (p->kind == TRI_P_WTE)
            for (size_t k = n; k < p->numel; k++) cr_assert(x[k] == 0.0f, "padded wte row value %g", x[k]);
    }
    tri_gpt_free(&g);
    tri_ctx_free(&ctx);
}

/* ---- combining the vocab-parallel cross-entropy statistics (an op) ---- */

Test(model, ce_combine_matches_the_closed_form_propagates_nan_and_skips_padding_only_ranks) {
    tri_ctx ctx;
    cr_assert_eq(tri_ctx_init(&ctx, "cpu", 0), 0);
    /* gather (R=2, N=3, 3): row 0: both ranks real; row 1: rank 1 owns only
     * padding (-inf, 0, 0); row 2: rank 1's slice holds a NaN logit */
    float gather[18] = {2.0f, 3.0f, 0.5f, 1.0f,      2.0f, 1.0f, 0.0f, 1.0f, 0.25f,
                        3.0f, 1.5f, 0.0f, -INFINITY, 0.0f, 0.0f, NAN,  NAN,  0.0f};
    float mine[9];
    for (int i = 0; i < 9; i++) mine[i] = NAN;
    ctx.ops->crossentropy_combine(&ctx, mine, gather, 3, 2);
    /* closed form: M = max, S = sum S_r exp(m_r - M), target from its owner */
    cr_expect(mine[0] == 3.0f);
    cr_expect(fabsf(mine[1] - (3.0f * expf(-1.0f) + 1.5f)) <= 1e-6f, "S = %g", mine[1]);
    cr_expect(mine[2] == 0.5f);
    cr_expect(mine[3] == 1.0f && mine[4] == 2.0f && mine[5] == 1.0f, "a padding-only rank changes nothing: %g %g %g",
              mine[3], mine[4], mine[5]);
    cr_expect(isnan(mine[6]) || isnan(mine[7]), "a NaN on one rank must reach the loss: M %g S %g", mine[6], mine[7]);
    tri_ctx_free(&ctx);
}

/* ---- the stage runtime: recompute, slots in flight, memory, guard ---- */

/* Gradients of two accumulated micro-batches under a policy, copied out. */
static float *grads_under(tri_recompute policy, const char *device, size_t *n) {
    fixture f;
    setup_with(&f, 3, 4, 32, 16, 300, 2, 11, policy, 1, device);
    int32_t *ids2 = malloc(f.B * f.T * sizeof(int32_t)), *tgt2 = malloc(f.B * f.T * sizeof(int32_t));
    fill_tokens(ids2, tgt2, f.B * f.T, 300, 77);
    tri_chunk *ch = chunk(&f);
    f.ctx.ops->zero(&f.ctx, ch->grad_mem, ch->n_elems * sizeof(float));
    step_mb(&f, f.ids, f.tgt, 1);
    step_mb(&f, ids2, tgt2, 1);
    *n = ch->n_elems;
    float *out = malloc(*n * sizeof(float));
    tri_ctx_to_host(&f.ctx, out, ch->grad_mem, *n * sizeof(float));
    free(ids2);
    free(tgt2);
    teardown(&f);
    return out;
}

/* Recompute reruns the very same ops on the very same inputs: the gradients
 * are bit for bit those of keeping everything. */
Test(runtime, selective_and_full_recompute_give_bit_identical_gradients) {
    size_t n0, n1, n2;
    float *none = grads_under(TRI_RECOMPUTE_NONE, "cpu", &n0);
    float *sel = grads_under(TRI_RECOMPUTE_SELECTIVE, "cpu", &n1);
    float *full = grads_under(TRI_RECOMPUTE_FULL, "cpu", &n2);
    cr_assert(n0 == n1 && n0 == n2);
    double gn = 0;
    for (size_t i = 0; i < n0; i++) gn += (double)none[i] * none[i];
    cr_assert(gn > 0 && isfinite(gn));
    cr_expect(memcmp(none, sel, n0 * sizeof(float)) == 0, "selective recompute changed the gradients");
    cr_expect(memcmp(none, full, n0 * sizeof(float)) == 0, "full recompute changed the gradients");
    free(none);
    free(sel);
    free(full);
}

/* Two micro-batches in flight (two slots: forward A, forward B, backward A,
 * backward B) against one after the other. Every gradient but the tied
 * embedding's is accumulated in the same order either way, so it is bit for
 * bit equal; the embedding takes its head part in forward (model/runtime.h),
 * so its additions come in another order: equal within float rounding
 * (relative 1e-6 of the tensor's largest element: a few ulps of fp32 sums of
 * 4 terms). */
static void two_in_flight(tri_recompute policy) {
    fixture f;
    setup_with(&f, 2, 2, 32, 16, 300, 2, 5, policy, 2, "cpu");
    tri_chunk *ch = chunk(&f);
    size_t BT = f.B * f.T;
    int32_t *ids2 = malloc(BT * sizeof(int32_t)), *tgt2 = malloc(BT * sizeof(int32_t));
    fill_tokens(ids2, tgt2, BT, 300, 99);
    float dscale = (float)(1.0 / (double)(2 * BT));
    /* sequential */
    zero_grads(&f);
    double seq = 0;
    const int32_t *I[2] = {f.ids, ids2}, *G[2] = {f.tgt, tgt2};
    for (int m = 0; m < 2; m++) {
        tri_slot *s = tri_slot_acquire(&f.pool, &f.g);
        tri_slot_stage(&f.g, &f.pool, s, I[m], G[m]);
        seq += tri_chunk_forward(&f.g, &f.pool, s, &f.ws, NULL, TRI_FWD_TRAIN, dscale);
        tri_chunk_backward(&f.g, &f.pool, s, &f.ws, NULL);
        tri_slot_release(&f.pool, &f.g, s);
    }
    float *ref = malloc(ch->n_elems * sizeof(float));
    memcpy(ref, grads(&f), ch->n_elems * sizeof(float));
    /* interleaved */
    zero_grads(&f);
    tri_slot *s[2];
    double par = 0;
    for (int m = 0; m < 2; m++) {
        s[m] = tri_slot_acquire(&f.pool, &f.g);
        cr_assert(s[m] != NULL, "the pool of two slots ran out");
        tri_slot_stage(&f.g, &f.pool, s[m], I[m], G[m]);
        par += tri_chunk_forward(&f.g, &f.pool, s[m], &f.ws, NULL, TRI_FWD_TRAIN, dscale);
    }
    cr_expect(tri_slot_acquire(&f.pool, &f.g) == NULL, "a third slot from a pool of two");
    cr_expect(f.ctx.mem.saved_in_use == 2 * f.pool.slot_bytes);
    for (int m = 0; m < 2; m++) {
        tri_chunk_backward(&f.g, &f.pool, s[m], &f.ws, NULL);
        tri_slot_release(&f.pool, &f.g, s[m]);
    }
    cr_expect(f.ctx.mem.saved_in_use == 0 && f.ctx.mem.saved_in_use_peak == 2 * f.pool.slot_bytes);
    cr_expect(seq == par, "loss sums differ: %.17g vs %.17g", seq, par);
    int checked = 0;
    for (int i = 0; i < ch->n_params; i++) {
        const tri_param *p = &ch->params[i];
        const float *a = ref + p->offset, *b = grads(&f) + p->offset;
        if (p->kind != TRI_P_WTE) {
            cr_expect(memcmp(a, b, p->numel * sizeof(float)) == 0, "%s differs with two micro-batches in flight",
                      p->name);
        } else {
            float big = 0;
            for (size_t k = 0; k < p->numel; k++) big = fmaxf(big, fabsf(a[k]));
            for (size_t k = 0; k < p->numel; k++)
                cr_assert(fabsf(a[k] - b[k]) <= 1e-6f * big, "%s[%zu]: %g vs %g", p->name, k, a[k], b[k]);
        }
        checked++;
    }
    cr_expect(checked == ch->n_params);
    free(ref);
    free(ids2);
    free(tgt2);
    teardown(&f);
}

Test(runtime, two_micro_batches_in_flight_match_one_after_the_other) { two_in_flight(TRI_RECOMPUTE_NONE); }
Test(runtime, two_in_flight_with_full_recompute_match_one_after_the_other) { two_in_flight(TRI_RECOMPUTE_FULL); }

/* Saved-activation bytes per layer against the closed form of
 * docs/performance.md (fp32, attention keeping one log-sum-exp per row):
 *   none:      4 [BT (4C + 4 + 12C/t) + B (a/t) T]
 *   selective: 4  BT (4C + 4 + 12C/t)
 *   full:      4  BT C
 * and a whole slot (ends included) against the allocator's accounting after
 * a forward. Shapes with BT a multiple of 16 keep every buffer 64-byte
 * aligned already, so the match is exact. */
Test(runtime, saved_bytes_per_layer_match_the_closed_form) {
    struct {
        int L, NH, C, T, V;
        size_t B;
    } shapes[] = {
        {2, 2, 32, 16, 256, 2},
        {3, 4, 64, 32, 300, 1},
        {1, 6, 48, 64, 512, 3},
        {2, 8, 128, 16, 1000, 4},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int pol = 0; pol < 3; pol++) {
            fixture f;
            setup_with(&f, shapes[i].L, shapes[i].NH, shapes[i].C, shapes[i].T, shapes[i].V, shapes[i].B, 1,
                       (tri_recompute)pol, 1, "cpu");
            double B = (double)f.B, T = (double)f.T, BT = B * T, C = shapes[i].C, a = shapes[i].NH, t = 1;
            double want = pol == TRI_RECOMPUTE_NONE        ? 4 * (BT * (4 * C + 4 + 12 * C / t) + B * (a / t) * T)
                          : pol == TRI_RECOMPUTE_SELECTIVE ? 4 * BT * (4 * C + 4 + 12 * C / t)
                                                           : 4 * BT * C;
            cr_expect((double)f.pool.layer_bytes == want, "shape %zu, %s: %zu bytes per layer, closed form %.0f", i,
                      tri_recompute_name((tri_recompute)pol), f.pool.layer_bytes, want);
            /* ends: ids + targets (4 BT each), head input and dlnf (4 BTC each), LayerNorm stats (8 BT) */
            double ends = 4 * BT + 4 * BT + 8 * BT * C + 8 * BT;
            double slot = shapes[i].L * want + ends;
            cr_expect((double)f.pool.slot_bytes == slot, "slot %zu vs %.0f", f.pool.slot_bytes, slot);
            step_mb(&f, f.ids, f.tgt, 1);
            cr_expect(f.ctx.mem.saved_in_use_peak == f.pool.slot_bytes &&
                          f.ctx.mem.peak[TRI_MEM_SAVED] == f.pool.slot_bytes,
                      "accounting: peak in use %zu, allocated %zu, slot %zu", f.ctx.mem.saved_in_use_peak,
                      f.ctx.mem.peak[TRI_MEM_SAVED], f.pool.slot_bytes);
            teardown(&f);
        }
}

/* The same closed form under tensor parallelism (t = 2, 4: qkv, attention
 * output, attention's log-sum-exp and the MLP are split, the rest replicated), from
 * the layout of a described shard (no memory, no ranks needed). */
Test(runtime, saved_bytes_per_layer_under_tp_match_the_closed_form) {
    tri_model_cfg cfg = {.n_layer = 2, .n_head = 8, .n_embd = 128, .seq_len = 32, .vocab_size = 1000};
    const size_t B = 2, T = 32;
    for (int tp = 2; tp <= 4; tp *= 2)
        for (int pol = 0; pol < 3; pol++) {
            tri_gpt g;
            cr_assert_eq(tri_gpt_describe_single(&g, &cfg, tp, tp - 1), 0);
            size_t lb = 0;
            cr_assert(tri_slot_bytes(&g, 0, B, T, (tri_recompute)pol, 0, &lb) > 0);
            double BT = (double)(B * T), C = cfg.n_embd, a = cfg.n_head, t = tp;
            double want = pol == TRI_RECOMPUTE_NONE        ? 4 * (BT * (4 * C + 4 + 12 * C / t) + B * (a / t) * T)
                          : pol == TRI_RECOMPUTE_SELECTIVE ? 4 * BT * (4 * C + 4 + 12 * C / t)
                                                           : 4 * BT * C;
            cr_expect((double)lb == want, "tp=%d %s: %zu bytes per layer, closed form %.0f", tp,
                      tri_recompute_name((tri_recompute)pol), lb, want);
            tri_gpt_free(&g);
        }
}

/* Under sequence parallelism (docs/performance.md) every replicated part of
 * a layer (its input, both LayerNorm outputs and statistics, the residual
 * after attention) and of the head's end (its input, dlnf, statistics) is
 * kept for B T / t rows, so per layer
 *   none:      [4 BT (16C + 4) + 4 B a T] / t
 *   selective:  4 BT (16C + 4) / t
 *   full:       4 BT C / t
 * a split slot adding 4 BT (3 Cl + C + Fl + C) + 8 BT C (the gathered
 * LayerNorm outputs W needs), and under full 4 BT (C/t + Cl + C/t + Fl);
 * the ends 8 BT (ids, targets) + (8 BT C + 8 BT) / t. From described shards
 * (t = 2, 4; BT / t a multiple of 16, so aligned exactly). */
Test(runtime, saved_bytes_under_sequence_parallel_match_the_closed_form) {
    tri_model_cfg cfg = {.n_layer = 3, .n_head = 8, .n_embd = 128, .seq_len = 32, .vocab_size = 1000};
    const size_t B = 2, T = 32;
    for (int tp = 2; tp <= 4; tp *= 2)
        for (int pol = 0; pol < 3; pol++)
            for (int split = 0; split <= 1; split++) {
                tri_gpt g;
                cr_assert_eq(tri_gpt_describe_single(&g, &cfg, tp, tp - 1), 0);
                size_t lb_tp = 0, lb = 0;
                cr_assert(tri_slot_bytes(&g, 0, B, T, (tri_recompute)pol, split, &lb_tp) > 0);
                cr_assert_eq(tri_gpt_set_sequence_parallel(&g, 1), 0);
                size_t slot = tri_slot_bytes(&g, 0, B, T, (tri_recompute)pol, split, &lb);
                cr_assert(slot > 0);
                double BT = (double)(B * T), C = cfg.n_embd, a = cfg.n_head, t = tp, Cl = C / t, Fl = 4 * C / t;
                double want = pol == TRI_RECOMPUTE_NONE        ? (4 * BT * (16 * C + 4) + 4 * B * a * T) / t
                              : pol == TRI_RECOMPUTE_SELECTIVE ? 4 * BT * (16 * C + 4) / t
                                                               : 4 * BT * C / t;
                if (split)
                    want += 4 * BT * (3 * Cl + C + Fl + C) + 8 * BT * C +
                            (pol == TRI_RECOMPUTE_FULL ? 4 * BT * (C / t + Cl + C / t + Fl) : 0);
                double ends = 8 * BT + (8 * BT * C + 8 * BT) / t;
                cr_expect((double)lb == want, "tp=%d %s split %d: %zu bytes per layer, closed form %.0f", tp,
                          tri_recompute_name((tri_recompute)pol), split, lb, want);
                cr_expect((double)slot == cfg.n_layer * want + ends, "tp=%d %s split %d: slot %zu, closed form %.0f",
                          tp, tri_recompute_name((tri_recompute)pol), split, slot, cfg.n_layer * want + ends);
                /* the saving against plain TP: the replicated parts' (t - 1) / t */
                if (!split) {
                    double repl = pol == TRI_RECOMPUTE_FULL ? 4 * BT * C : 4 * BT * (4 * C + 4);
                    cr_expect((double)lb_tp - (double)lb == repl * (t - 1) / t, "tp=%d %s: saved %zu -> %zu", tp,
                              tri_recompute_name((tri_recompute)pol), lb_tp, lb);
                }
                tri_gpt_free(&g);
            }
    /* refused where it cannot shard: tp 1, and seq_len not divisible by tp */
    tri_gpt g;
    cr_assert_eq(tri_gpt_describe_single(&g, &cfg, 1, 0), 0);
    cr_expect_eq(tri_gpt_set_sequence_parallel(&g, 1), -1);
    tri_gpt_free(&g);
    tri_model_cfg odd = cfg;
    odd.seq_len = 30;
    cr_assert_eq(tri_gpt_describe_single(&g, &odd, 4, 0), 0);
    cr_expect_eq(tri_gpt_set_sequence_parallel(&g, 1), -1);
    tri_gpt_free(&g);
}

/* Under the guarded backend the same training micro-batches give the same
 * gradients: no code path of the model reads backend memory from the host
 * (it would fault). */
Test(runtime, guarded_backend_runs_the_model_and_matches_the_cpu) {
    size_t n0, n1;
    float *cpu = grads_under(TRI_RECOMPUTE_SELECTIVE, "cpu", &n0);
    float *guard = grads_under(TRI_RECOMPUTE_SELECTIVE, "cpu-guard", &n1);
    cr_assert(n0 == n1);
    cr_expect(memcmp(cpu, guard, n0 * sizeof(float)) == 0);
    free(cpu);
    free(guard);
}

/* ... and the guard does catch a host read of backend memory. */
Test(runtime, guarded_backend_faults_on_a_host_read, .signal = SIGSEGV) {
    tri_ctx ctx;
    cr_assert_eq(tri_ctx_init(&ctx, "cpu-guard", 0), 0);
    float *p = tri_ctx_alloc(&ctx, 64 * sizeof(float), TRI_MEM_OTHER, "probe");
    cr_assert(p != NULL);
    float one = 1.0f, back = 0.0f;
    tri_ctx_to_device(&ctx, p, &one, sizeof one);
    tri_ctx_to_host(&ctx, &back, p, sizeof back);
    cr_assert(back == 1.0f, "a staging copy must work");
    signal(SIGSEGV, SIG_DFL); /* a sanitizer's handler would turn the fault into exit 1 */
    volatile float x = p[0];  /* a host read outside any op: faults */
    (void)x;
}

/* ---- chunks ---- */

/* Interleaved specs: stage s of p with v chunks holds blocks c*p + s of
 * L/(p v) layers; the embedding is on chunk 0 of stage 0, the head on chunk
 * v-1 of stage p-1, and each chunk's parameter table names exactly its layers. */
Test(chunks, interleaved_specs_give_each_stage_the_blocks_c_p_plus_s) {
    tri_model_cfg cfg = {.n_layer = 8, .n_head = 2, .n_embd = 16, .seq_len = 8, .vocab_size = 256};
    const int p = 2, v = 2;
    for (int s = 0; s < p; s++) {
        tri_chunk_spec specs[2];
        int buf[8];
        cr_assert_eq(tri_chunks_even(&cfg, p, s, v, specs, buf), 0);
        for (int c = 0; c < v; c++) {
            cr_expect_eq(specs[c].n_layers, 2);
            for (int i = 0; i < 2; i++) cr_expect_eq(specs[c].layers[i], (c * p + s) * 2 + i);
            cr_expect_eq(specs[c].has_embedding, c == 0 && s == 0);
            cr_expect_eq(specs[c].has_head, c == v - 1 && s == p - 1);
        }
        tri_gpt g;
        cr_assert_eq(tri_gpt_describe(&g, &cfg, 1, 0, specs, v), 0);
        for (int c = 0; c < v; c++) {
            int blocks = 0;
            for (int i = 0; i < g.chunks[c].n_params; i++) {
                int l = g.chunks[c].params[i].layer;
                if (l < 0) continue;
                cr_expect(l == specs[c].layers[0] || l == specs[c].layers[1], "chunk %d holds a tensor of layer %d", c,
                          l);
                blocks++;
            }
            cr_expect_eq(blocks, 2 * 12);
        }
        tri_gpt_free(&g);
    }
    tri_chunk_spec specs[3];
    int buf[8];
    cr_expect_neq(tri_chunks_even(&cfg, 3, 0, 1, specs, buf), 0, "8 layers do not split over 3 stages");
}

/* The model as two chunks on one rank (embedding + layer 0, then layers 1-2 +
 * head), each with its own slot pool, sharing one workspace, against the
 * model as one chunk: the same loss, the same gradients tensor by tensor
 * (the tied embedding is held by both chunks: the sum of its two gradients
 * is the one-chunk gradient, within rounding). */
Test(chunks, two_chunks_on_one_rank_match_one_chunk) {
    fixture f;
    setup(&f, 3, 2, 32, 16, 300, 2, 21);
    float dscale = (float)(1.0 / (double)(f.B * f.T));
    zero_grads(&f);
    double one = step_mb(&f, f.ids, f.tgt, 1);

    int l0[1] = {0}, l1[2] = {1, 2};
    tri_chunk_spec specs[2] = {{1, l0, 1, 0}, {2, l1, 0, 1}};
    tri_gpt g2;
    cr_assert_eq(tri_gpt_init(&g2, &f.cfg, &f.ctx, &f.self, 1, 0, specs, 2), 0);
    cr_assert_eq(tri_gpt_init_params(&g2, 21), 0);
    tri_slot_pool pools[2];
    tri_workspace ws;
    for (int k = 0; k < 2; k++)
        cr_assert_eq(tri_slot_pool_init(&pools[k], &g2, k, f.B, f.T, TRI_RECOMPUTE_NONE, 1, 0), 0);
    cr_assert_eq(tri_workspace_init(&ws, &g2, f.B, f.T, TRI_RECOMPUTE_NONE), 0);
    tri_slot *s[2];
    double two = 0;
    for (int k = 0; k < 2; k++) {
        s[k] = tri_slot_acquire(&pools[k], &g2);
        tri_slot_stage(&g2, &pools[k], s[k], f.ids, f.tgt);
        two += tri_chunk_forward(&g2, &pools[k], s[k], &ws, k == 0 ? NULL : ws.out, TRI_FWD_TRAIN, dscale);
    }
    tri_chunk_backward(&g2, &pools[1], s[1], &ws, NULL);
    tri_chunk_backward(&g2, &pools[0], s[0], &ws, ws.dres);
    cr_expect(one == two, "loss %.17g vs %.17g", one, two);

    const tri_chunk *c1 = chunk(&f);
    int found = 0;
    for (int i = 0; i < c1->n_params; i++) {
        const tri_param *p = &c1->params[i];
        const float *want = grads(&f) + p->offset;
        const float *got[2] = {NULL, NULL};
        for (int k = 0; k < 2; k++)
            for (int j = 0; j < g2.chunks[k].n_params; j++)
                if (!strcmp(g2.chunks[k].params[j].name, p->name))
                    got[k] = g2.chunks[k].grad_mem + g2.chunks[k].params[j].offset;
        cr_assert(got[0] || got[1], "%s is in neither chunk", p->name);
        if (p->kind == TRI_P_WTE) {
            cr_assert(got[0] && got[1], "the tied embedding must be in both chunks");
            float big = 0;
            for (size_t e = 0; e < p->numel; e++) big = fmaxf(big, fabsf(want[e]));
            for (size_t e = 0; e < p->numel; e++)
                cr_assert(fabsf(got[0][e] + got[1][e] - want[e]) <= 1e-6f * big, "wte[%zu]", e);
        } else {
            cr_assert(!(got[0] && got[1]), "%s is in both chunks", p->name);
            cr_expect(memcmp(got[0] ? got[0] : got[1], want, p->numel * sizeof(float)) == 0, "%s differs", p->name);
        }
        found++;
    }
    cr_expect_eq(found, c1->n_params);
    for (int k = 0; k < 2; k++) {
        tri_slot_release(&pools[k], &g2, s[k]);
        tri_slot_pool_free(&pools[k], &g2);
    }
    tri_workspace_free(&ws, &g2);
    tri_gpt_free(&g2);
    teardown(&f);
}

/* ---- backward split in B and W (zero-bubble schedules) ---- */

/* What grads_ready saw during one micro-batch's backward (the fused one, or
 * its W), and whether it was called from anywhere else. */
typedef struct zb_hook {
    const tri_chunk *ch;
    int allowed;          /* set by the runner around fused backward and W */
    int outside;          /* calls while not allowed (from B)              */
    int decreasing;       /* calls with n below the previous one           */
    size_t seq[2][64];    /* n of each call, per micro-batch               */
    int n_seq[2];         /* calls per micro-batch                         */
    int mb;               /* micro-batch being reported                    */
    size_t last;          /* largest prefix reported in this backward      */
    float *snap;          /* grad_mem[0, last) when declared final         */
    int prefix_rewritten; /* a declared-final prefix changed before the backward ended */
} zb_hook;

static void zb_ready(void *ctx, size_t n) {
    zb_hook *h = ctx;
    if (!h->allowed) {
        h->outside++;
        return;
    }
    if (n < h->last) h->decreasing++;
    if (h->n_seq[h->mb] < 64) h->seq[h->mb][h->n_seq[h->mb]++] = n;
    if (n > h->last) { /* grads are host memory on the plain CPU backend */
        memcpy(h->snap + h->last, h->ch->grad_mem + h->last, (n - h->last) * sizeof(float));
        h->last = n;
    }
}

static void zb_backward_begins(zb_hook *h, int mb) {
    h->allowed = 1;
    h->mb = mb;
    h->last = 0;
}

static void zb_backward_ends(zb_hook *h) {
    h->allowed = 0;
    if (memcmp(h->snap, h->ch->grad_mem, h->last * sizeof(float)) != 0) h->prefix_rewritten++;
}

typedef struct zb_result {
    size_t n;     /* gradient elements */
    float *grads; /* accumulated over the schedule  */
    float *dx[2]; /* dL/d(chunk input) of each micro-batch, (BT, C) */
    double loss;
    zb_hook hook;
    size_t slot_bytes, peak_in_use;
} zb_result;

static void zb_result_free(zb_result *r) {
    free(r->grads);
    free(r->dx[0]);
    free(r->dx[1]);
    free(r->hook.snap);
}

/* Runs a schedule of two micro-batches through one chunk of a 4-layer model
 * in a pool of two slots (split or not) and one workspace: "F0" forward of
 * micro-batch 0, "b0" its fused backward, "B0" / "W0" its split backward's
 * two halves. A slot is released after b or W (or at the end). The chunk is
 * the whole model (embedding, 4 layers, head) or a middle one (layers 1-2,
 * its input and output gradient given as random tensors). */
static void zb_run(int middle, tri_recompute policy, int split, const char *sched, zb_result *r) {
    tri_model_cfg cfg = {.n_layer = 4, .n_head = 2, .n_embd = 32, .seq_len = 16, .vocab_size = 300};
    const size_t B = 2, T = 16, BT = B * T, C = 32, xbytes = BT * C * sizeof(float);
    memset(r, 0, sizeof *r);
    tri_ctx ctx;
    cr_assert_eq(tri_ctx_init(&ctx, "cpu", 0), 0);
    tri_comm self;
    tri_comm_init_self(&self, 0);
    self.ctx = &ctx;
    int mids[2] = {1, 2}, all[4] = {0, 1, 2, 3};
    tri_chunk_spec spec = middle ? (tri_chunk_spec){2, mids, 0, 0} : (tri_chunk_spec){4, all, 1, 1};
    tri_gpt g;
    cr_assert_eq(tri_gpt_init(&g, &cfg, &ctx, &self, 1, 0, &spec, 1), 0);
    cr_assert_eq(tri_gpt_init_params(&g, 31), 0);
    tri_chunk *ch = &g.chunks[0];
    tri_slot_pool pool;
    tri_workspace ws;
    cr_assert_eq(tri_slot_pool_init(&pool, &g, 0, B, T, policy, 2, split), 0);
    cr_assert_eq(tri_workspace_init(&ws, &g, B, T, policy), 0);
    ctx.ops->zero(&ctx, ch->grad_mem, ch->n_elems * sizeof(float));
    r->n = ch->n_elems;
    r->hook.ch = ch;
    r->hook.snap = malloc(ch->n_elems * sizeof(float));
    ch->grads_ready = zb_ready;
    ch->grads_ready_ctx = &r->hook;

    int32_t *ids[2], *tgt[2];
    void *x_in[2], *dy[2];
    float *host = malloc(xbytes);
    for (int m = 0; m < 2; m++) {
        ids[m] = malloc(BT * sizeof(int32_t));
        tgt[m] = malloc(BT * sizeof(int32_t));
        fill_tokens(ids[m], tgt[m], BT, cfg.vocab_size, 100 + (uint64_t)m);
        r->dx[m] = calloc(BT * C, sizeof(float));
        x_in[m] = tri_ctx_alloc(&ctx, xbytes, TRI_MEM_OTHER, "test chunk input");
        dy[m] = tri_ctx_alloc(&ctx, xbytes, TRI_MEM_OTHER, "test output gradient");
        cr_assert(x_in[m] && dy[m]);
        uint64_t key = tri_init_key(200 + (uint64_t)m, "zb");
        for (size_t i = 0; i < BT * C; i++) host[i] = (float)tri_init_normal(key, i);
        tri_ctx_to_device(&ctx, x_in[m], host, xbytes);
        for (size_t i = 0; i < BT * C; i++) host[i] = 1e-2f * (float)tri_init_normal(key, BT * C + i);
        tri_ctx_to_device(&ctx, dy[m], host, xbytes);
    }
    free(host);

    float dscale = (float)(1.0 / (double)(2 * BT));
    tri_slot *s[2] = {NULL, NULL};
    for (const char *op = sched; op[0] && op[1]; op += 2) {
        int m = op[1] - '0';
        cr_assert(m == 0 || m == 1, "bad schedule %s", sched);
        switch (op[0]) {
        case 'F':
            s[m] = tri_slot_acquire(&pool, &g);
            cr_assert(s[m] != NULL, "no free slot for micro-batch %d in %s", m, sched);
            tri_slot_stage(&g, &pool, s[m], ids[m], tgt[m]);
            r->loss += tri_chunk_forward(&g, &pool, s[m], &ws, middle ? x_in[m] : NULL, TRI_FWD_TRAIN, dscale);
            break;
        case 'b':
            zb_backward_begins(&r->hook, m);
            tri_chunk_backward(&g, &pool, s[m], &ws, middle ? dy[m] : NULL);
            zb_backward_ends(&r->hook);
            tri_ctx_to_host(&ctx, r->dx[m], ws.dres, xbytes);
            tri_slot_release(&pool, &g, s[m]);
            s[m] = NULL;
            break;
        case 'B':
            tri_chunk_backward_input(&g, &pool, s[m], &ws, middle ? dy[m] : NULL);
            tri_ctx_to_host(&ctx, r->dx[m], ws.dres, xbytes);
            break;
        case 'W':
            zb_backward_begins(&r->hook, m);
            tri_chunk_backward_weight(&g, &pool, s[m], &ws);
            zb_backward_ends(&r->hook);
            tri_slot_release(&pool, &g, s[m]);
            s[m] = NULL;
            break;
        default: cr_assert_fail("bad schedule %s", sched);
        }
    }
    for (int m = 0; m < 2; m++)
        if (s[m]) tri_slot_release(&pool, &g, s[m]);
    r->slot_bytes = pool.slot_bytes;
    r->peak_in_use = ctx.mem.saved_in_use_peak;
    r->grads = malloc(ch->n_elems * sizeof(float));
    tri_ctx_to_host(&ctx, r->grads, ch->grad_mem, ch->n_elems * sizeof(float));
    for (int m = 0; m < 2; m++) {
        free(ids[m]);
        free(tgt[m]);
        tri_ctx_release(&ctx, x_in[m], xbytes, TRI_MEM_OTHER);
        tri_ctx_release(&ctx, dy[m], xbytes, TRI_MEM_OTHER);
    }
    tri_slot_pool_free(&pool, &g);
    tri_workspace_free(&ws, &g);
    tri_gpt_free(&g);
    tri_ctx_free(&ctx);
}

/* The parameter table of the chunk zb_run uses (for names and offsets). */
static void zb_describe(int middle, tri_gpt *g) {
    tri_model_cfg cfg = {.n_layer = 4, .n_head = 2, .n_embd = 32, .seq_len = 16, .vocab_size = 300};
    int mids[2] = {1, 2}, all[4] = {0, 1, 2, 3};
    tri_chunk_spec spec = middle ? (tri_chunk_spec){2, mids, 0, 0} : (tri_chunk_spec){4, all, 1, 1};
    cr_assert_eq(tri_gpt_describe(g, &cfg, 1, 0, &spec, 1), 0);
}

static int is_linear_weight(tri_param_kind k) {
    return k == TRI_P_QKVW || k == TRI_P_ATTPROJW || k == TRI_P_FCW || k == TRI_P_FCPROJW;
}

/* The grads_ready calls of one micro-batch's backward: non-decreasing (no
 * call went back, counted by the hook), ending at n_elems, no prefix rewritten
 * after it was declared final, none from B; and the same sequence as the
 * fused backward's (ref), since W walks the layers in the same order. */
static void zb_expect_hook(const zb_result *r, const zb_result *ref, int mb, const char *what) {
    const zb_hook *h = &r->hook;
    cr_expect(h->outside == 0, "%s: grads_ready called %d times outside W", what, h->outside);
    cr_expect(h->decreasing == 0, "%s: grads_ready went backwards %d times", what, h->decreasing);
    cr_expect(h->prefix_rewritten == 0, "%s: a prefix declared final was written again", what);
    cr_assert(h->n_seq[mb] > 0, "%s: grads_ready never called for micro-batch %d", what, mb);
    cr_expect(h->seq[mb][h->n_seq[mb] - 1] == r->n, "%s: last grads_ready(%zu), n_elems %zu", what,
              h->seq[mb][h->n_seq[mb] - 1], r->n);
    cr_expect(h->n_seq[mb] == ref->hook.n_seq[mb] &&
                  memcmp(h->seq[mb], ref->hook.seq[mb], (size_t)h->n_seq[mb] * sizeof(size_t)) == 0,
              "%s: W reports other prefixes (%d calls) than the fused backward (%d calls)", what, h->n_seq[mb],
              ref->hook.n_seq[mb]);
}

/* B then W against the fused backward, one micro-batch: the same ops on the
 * same operands (matmul_bwd's three outputs are independent computations, the
 * saved output gradients are copies, full recompute writes the same values
 * into the slot instead of the workspace), and each gradient element gets one
 * addition in the same place of the sequence, so the parameter gradients and
 * dL/d(input) are equal bit for bit. */
static void zb_one(int middle, tri_recompute policy) {
    const char *what = middle ? "middle chunk" : "whole chunk";
    zb_result ref, got;
    zb_run(middle, policy, 0, "F0b0", &ref);
    zb_run(middle, policy, 1, "F0B0W0", &got);
    double gn = 0, xn = 0;
    for (size_t i = 0; i < ref.n; i++) gn += (double)ref.grads[i] * ref.grads[i];
    for (size_t i = 0; i < 2 * 16 * 32; i++) xn += (double)ref.dx[0][i] * ref.dx[0][i];
    cr_assert(gn > 0 && isfinite(gn) && xn > 0 && isfinite(xn), "%s: degenerate reference", what);
    cr_expect(ref.loss == got.loss);
    cr_expect(memcmp(ref.grads, got.grads, ref.n * sizeof(float)) == 0, "%s, %s: B + W gradients differ from fused",
              what, tri_recompute_name(policy));
    cr_expect(memcmp(ref.dx[0], got.dx[0], 2 * 16 * 32 * sizeof(float)) == 0,
              "%s, %s: B's input gradient differs from fused", what, tri_recompute_name(policy));
    zb_expect_hook(&got, &ref, 0, what);
    zb_result_free(&ref);
    zb_result_free(&got);
}

Test(zb, split_backward_equals_fused_without_recompute) {
    zb_one(0, TRI_RECOMPUTE_NONE);
    zb_one(1, TRI_RECOMPUTE_NONE);
}
Test(zb, split_backward_equals_fused_with_selective_recompute) {
    zb_one(0, TRI_RECOMPUTE_SELECTIVE);
    zb_one(1, TRI_RECOMPUTE_SELECTIVE);
}
Test(zb, split_backward_equals_fused_with_full_recompute) {
    zb_one(0, TRI_RECOMPUTE_FULL);
    zb_one(1, TRI_RECOMPUTE_FULL);
}

/* Two micro-batches in a two-slot split pool, F0 F1 B0 B1 W0 W1, against the
 * fused F0 B0 F1 B1 and F0 F1 B0 B1. Every gradient but the tied embedding's
 * takes micro-batch 0's addition then micro-batch 1's in each: bit for bit.
 * The whole chunk's embedding takes its head part in forward, so in F0 F1 ..
 * its additions come in another order than in F0 B0 F1 B1: equal within
 * rounding there (as in two_in_flight above), bit for bit with the fused
 * F0 F1 B0 B1. */
static void zb_two(int middle, tri_recompute policy) {
    const char *what = middle ? "middle chunk" : "whole chunk";
    zb_result seq, flight, got;
    zb_run(middle, policy, 0, "F0b0F1b1", &seq);
    zb_run(middle, policy, 0, "F0F1b0b1", &flight);
    zb_run(middle, policy, 1, "F0F1B0B1W0W1", &got);
    cr_expect(got.peak_in_use == 2 * got.slot_bytes, "both split slots held at once");
    cr_expect(memcmp(flight.grads, got.grads, got.n * sizeof(float)) == 0, "%s, %s: differs from fused F0 F1 B0 B1",
              what, tri_recompute_name(policy));
    for (int m = 0; m < 2; m++) {
        cr_expect(memcmp(seq.dx[m], got.dx[m], 2 * 16 * 32 * sizeof(float)) == 0,
                  "%s, %s: input gradient of micro-batch %d differs", what, tri_recompute_name(policy), m);
        zb_expect_hook(&got, &seq, m, what);
    }
    tri_gpt d;
    zb_describe(middle, &d);
    const tri_chunk *ch = &d.chunks[0];
    cr_assert_eq(ch->n_elems, got.n);
    for (int i = 0; i < ch->n_params; i++) {
        const tri_param *p = &ch->params[i];
        const float *a = seq.grads + p->offset, *b = got.grads + p->offset;
        if (p->kind != TRI_P_WTE) {
            cr_expect(memcmp(a, b, p->numel * sizeof(float)) == 0, "%s, %s: %s differs from F0 B0 F1 B1", what,
                      tri_recompute_name(policy), p->name);
        } else {
            float big = 0;
            for (size_t k = 0; k < p->numel; k++) big = fmaxf(big, fabsf(a[k]));
            cr_assert(big > 0);
            for (size_t k = 0; k < p->numel; k++)
                cr_assert(fabsf(a[k] - b[k]) <= 1e-6f * big, "%s[%zu]: %g vs %g", p->name, k, a[k], b[k]);
        }
    }
    tri_gpt_free(&d);
    zb_result_free(&seq);
    zb_result_free(&flight);
    zb_result_free(&got);
}

Test(zb, f0_f1_b0_b1_w0_w1_equals_f0_b0_f1_b1_without_recompute) {
    zb_two(0, TRI_RECOMPUTE_NONE);
    zb_two(1, TRI_RECOMPUTE_NONE);
}
Test(zb, f0_f1_b0_b1_w0_w1_equals_f0_b0_f1_b1_with_selective_recompute) {
    zb_two(0, TRI_RECOMPUTE_SELECTIVE);
    zb_two(1, TRI_RECOMPUTE_SELECTIVE);
}
Test(zb, f0_f1_b0_b1_w0_w1_equals_f0_b0_f1_b1_with_full_recompute) {
    zb_two(0, TRI_RECOMPUTE_FULL);
    zb_two(1, TRI_RECOMPUTE_FULL);
}

/* Skipping W loses exactly the four linear weights of every layer (still
 * zero after B alone, nonzero in the fused reference) and nothing else: the
 * equalities above depend on W, and B does all the rest. */
Test(zb, skipping_w_loses_exactly_the_linear_weight_gradients) {
    for (int middle = 0; middle < 2; middle++)
        for (int pol = 0; pol < 3; pol++) {
            zb_result ref, bonly;
            zb_run(middle, (tri_recompute)pol, 0, "F0b0", &ref);
            zb_run(middle, (tri_recompute)pol, 1, "F0B0", &bonly);
            cr_expect(bonly.hook.n_seq[0] == 0 && bonly.hook.outside == 0, "B alone called grads_ready");
            tri_gpt d;
            zb_describe(middle, &d);
            const tri_chunk *ch = &d.chunks[0];
            int linear = 0;
            for (int i = 0; i < ch->n_params; i++) {
                const tri_param *p = &ch->params[i];
                const float *a = ref.grads + p->offset, *b = bonly.grads + p->offset;
                if (is_linear_weight(p->kind)) {
                    double an = 0, bn = 0;
                    for (size_t k = 0; k < p->numel; k++) {
                        an += fabs(a[k]);
                        bn += fabs(b[k]);
                    }
                    cr_expect(an > 0 && bn == 0, "%s: fused |g| %g, B alone |g| %g", p->name, an, bn);
                    linear++;
                } else {
                    cr_expect(memcmp(a, b, p->numel * sizeof(float)) == 0, "%s: B alone differs from fused", p->name);
                }
            }
            cr_expect_eq(linear, 4 * ch->n_layers);
            tri_gpt_free(&d);
            zb_result_free(&ref);
            zb_result_free(&bonly);
        }
}

/* The bytes a split slot adds, against the closed form of model/runtime.h
 * (fp32: A = 4; shapes with BT a multiple of 16 keep every buffer 64-byte
 * aligned, so the match is exact), per layer:
 *   every policy: 4 BT (3 Cl + C + Fl + C)
 *   full, also:   4 BT (C + Cl + C + Fl)
 * for t = 1, 2, 4 from described shards, and the allocator's accounting of
 * an allocated split pool after a step. */
Test(zb, split_slot_bytes_match_the_closed_form) {
    tri_model_cfg cfg = {.n_layer = 3, .n_head = 8, .n_embd = 128, .seq_len = 32, .vocab_size = 1000};
    const size_t B = 2, T = 32;
    for (int tp = 1; tp <= 4; tp *= 2)
        for (int pol = 0; pol < 3; pol++) {
            tri_gpt g;
            cr_assert_eq(tri_gpt_describe_single(&g, &cfg, tp, tp - 1), 0);
            size_t lb0 = 0, lb1 = 0;
            size_t s0 = tri_slot_bytes(&g, 0, B, T, (tri_recompute)pol, 0, &lb0);
            size_t s1 = tri_slot_bytes(&g, 0, B, T, (tri_recompute)pol, 1, &lb1);
            cr_assert(s0 > 0 && s1 > 0);
            double BT = (double)(B * T), C = cfg.n_embd, Cl = C / tp, Fl = 4 * C / tp;
            double extra =
                4 * BT * (3 * Cl + C + Fl + C) + (pol == TRI_RECOMPUTE_FULL ? 4 * BT * (C + Cl + C + Fl) : 0);
            cr_expect((double)(lb1 - lb0) == extra, "tp=%d %s: a split layer adds %zu bytes, closed form %.0f", tp,
                      tri_recompute_name((tri_recompute)pol), lb1 - lb0, extra);
            cr_expect((double)(s1 - s0) == cfg.n_layer * extra,
                      "tp=%d %s: a split slot adds %zu bytes, closed form %.0f", tp,
                      tri_recompute_name((tri_recompute)pol), s1 - s0, cfg.n_layer * extra);
            tri_gpt_free(&g);
        }
    for (int pol = 0; pol < 3; pol++) {
        zb_result r;
        zb_run(0, (tri_recompute)pol, 1, "F0B0W0", &r);
        tri_gpt d;
        zb_describe(0, &d);
        size_t want = tri_slot_bytes(&d, 0, 2, 16, (tri_recompute)pol, 1, NULL);
        double BT = 32, C = 32, extra = 4 * BT * 9 * C + (pol == TRI_RECOMPUTE_FULL ? 4 * BT * 7 * C : 0);
        cr_expect(r.slot_bytes == want && r.peak_in_use == want, "pool slot %zu, peak in use %zu, formula %zu",
                  r.slot_bytes, r.peak_in_use, want);
        cr_expect((double)(want - tri_slot_bytes(&d, 0, 2, 16, (tri_recompute)pol, 0, NULL)) == 4 * extra,
                  "%s: the allocated split slot's extra", tri_recompute_name((tri_recompute)pol));
        tri_gpt_free(&d);
        zb_result_free(&r);
    }
}
