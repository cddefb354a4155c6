/* The GPT model on one rank, in process: the analytic gradient of the whole
 * model against finite differences, overfitting one batch, and the
 * layout-independent initialisation. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ops.h"
#include "model/gpt.h"
#include "model/init.h"
#include "model/optim.h"

typedef struct fixture {
    tri_model_cfg cfg;
    tri_comm self;
    tri_gpt g;
    tri_acts a;
    int32_t *ids, *tgt;
    size_t B, T;
} fixture;

static void setup(fixture *f, int L, int NH, int C, int T, int V, size_t B, uint64_t seed) {
    memset(f, 0, sizeof *f);
    f->cfg = (tri_model_cfg){.n_layer = L, .n_head = NH, .n_embd = C, .seq_len = T, .vocab_size = V};
    tri_comm_init_self(&f->self, 0);
    cr_assert_eq(tri_gpt_init(&f->g, &f->cfg, tri_ops_cpu(), &f->self, 1, 0, 1, 0), 0);
    cr_assert_eq(tri_acts_init(&f->a, &f->g, B, (size_t)T), 0);
    tri_gpt_init_params(&f->g, seed);
    f->B = B;
    f->T = (size_t)T;
    f->ids = malloc(B * (size_t)T * sizeof(int32_t));
    f->tgt = malloc(B * (size_t)T * sizeof(int32_t));
    uint64_t s = seed;
    for (size_t i = 0; i < B * (size_t)T; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        f->ids[i] = (int32_t)((s >> 33) % (uint64_t)V);
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        f->tgt[i] = (int32_t)((s >> 33) % (uint64_t)V);
    }
}

static void teardown(fixture *f) {
    tri_acts_free(&f->a, &f->g);
    tri_gpt_free(&f->g);
    free(f->ids);
    free(f->tgt);
}

/* mean token loss, forward only */
static double loss_of(fixture *f) {
    double sum = tri_gpt_forward(&f->g, &f->a, f->ids, NULL, f->tgt, 0.0f);
    return sum / (double)(f->B * f->T);
}

/* The analytic gradient of the mean loss, tensor by tensor, against a central
 * finite difference of the loss along a direction d restricted to that tensor.
 * d = unit(g_t) + 0.5 unit(random): mostly along the gradient so the
 * directional derivative is well above the float noise of the loss, with a
 * random part so a gradient that is right only up to a scale or on some
 * elements still fails. */
Test(model, gradient_matches_finite_differences_for_every_tensor) {
    fixture f;
    /* V = 300 pads to 384: the padded rows and logits are on the path too */
    setup(&f, 2, 2, 16, 8, 300, 2, 42);
    tri_gpt *g = &f.g;
    size_t BT = f.B * f.T;
    g->ops->zero(g->grad_mem, g->n_floats * sizeof(float));
    tri_gpt_forward(g, &f.a, f.ids, NULL, f.tgt, (float)(1.0 / (double)BT));
    tri_gpt_backward(g, &f.a, f.ids, NULL, NULL);
    float *grad = malloc(g->n_floats * sizeof(float));
    memcpy(grad, g->grad_mem, g->n_floats * sizeof(float));
    float *d = malloc(g->n_floats * sizeof(float));
    int checked = 0;
    for (int i = 0; i < g->n_params; i++) {
        const tri_param *p = &g->params[i];
        float *th = g->param_mem + p->offset, *gr = grad + p->offset, *dd = d + p->offset;
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
        cr_expect(fabs(fd - an) <= tol, "%s: finite difference %.6g vs analytic %.6g (tol %.2g)", p->name, fd, an,
                  tol);
        checked++;
    }
    cr_assert_eq(checked, g->n_params);
    free(grad);
    free(d);
    teardown(&f);
}

/* A tiny model memorises one fixed batch of random tokens: AdamW at a constant
 * lr drives the loss from ~log(V) = 5.5 to under 0.05 in 300 steps. A broken
 * backward, optimizer or decay mask keeps it far above that. */
Test(model, overfits_one_batch) {
    fixture f;
    setup(&f, 2, 2, 32, 16, 256, 2, 3);
    tri_gpt *g = &f.g;
    tri_optim o;
    tri_adamw_cfg oc = {.lr = 1e-2, .min_lr = 1e-2, .warmup_steps = 0, .total_steps = 300,
                        .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.0, .grad_clip = 1.0};
    cr_assert_eq(tri_optim_init(&o, g, &oc), 0);
    size_t BT = f.B * f.T;
    double first = 0, last = 0;
    for (int s = 0; s < 300; s++) {
        g->ops->zero(g->grad_mem, g->n_floats * sizeof(float));
        double l = tri_gpt_forward(g, &f.a, f.ids, NULL, f.tgt, (float)(1.0 / (double)BT)) / (double)BT;
        tri_gpt_backward(g, &f.a, f.ids, NULL, NULL);
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
    tri_comm self;
    tri_comm_init_self(&self, 0);
    tri_gpt full;
    cr_assert_eq(tri_gpt_init(&full, &cfg, tri_ops_cpu(), &self, 1, 0, 1, 0), 0);
    tri_gpt_init_params(&full, 99);
    for (int tp = 2; tp <= 4; tp *= 2) {
        for (int r = 0; r < tp; r++) {
            tri_gpt sh;
            cr_assert_eq(tri_gpt_init(&sh, &cfg, tri_ops_cpu(), &self, tp, r, 1, 0), 0);
            tri_gpt_init_params(&sh, 99);
            cr_assert_eq(sh.n_params, full.n_params);
            for (int i = 0; i < sh.n_params; i++) {
                const tri_param *p = &sh.params[i], *q = &full.params[i];
                cr_assert_str_eq(p->name, q->name);
                const float *x = sh.param_mem + p->offset, *y = full.param_mem + q->offset;
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
                        cr_assert(x[rr * p->lcols + cc] == want, "%s tp=%d rank %d (%zu,%zu): %g vs %g", p->name,
                                  tp, r, rr, cc, x[rr * p->lcols + cc], want);
                    }
            }
            tri_gpt_free(&sh);
        }
    }
    tri_gpt_free(&full);
}

/* GPT-2 init statistics, against the closed-form targets: std 0.02, residual
 * projections 0.02/sqrt(2L), LayerNorm weights 1, biases 0, padded vocab rows 0. */
Test(model, init_statistics_follow_gpt2) {
    tri_model_cfg cfg = {.n_layer = 4, .n_head = 4, .n_embd = 64, .seq_len = 32, .vocab_size = 1000};
    tri_comm self;
    tri_comm_init_self(&self, 0);
    tri_gpt g;
    cr_assert_eq(tri_gpt_init(&g, &cfg, tri_ops_cpu(), &self, 1, 0, 1, 0), 0);
    tri_gpt_init_params(&g, 5);
    for (int i = 0; i < g.n_params; i++) {
        const tri_param *p = &g.params[i];
        const float *x = g.param_mem + p->offset;
        size_t rows = p->kind == TRI_P_WTE ? (size_t)cfg.vocab_size : p->lrows, n = rows * p->lcols;
        double mean = 0, sq = 0;
        for (size_t k = 0; k < n; k++) { mean += x[k]; sq += (double)x[k] * x[k]; }
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
}

/* ---- combining the vocab-parallel cross-entropy statistics ---- */

/* A TP group of 2 whose all-gather hands back a fixed "other rank" part. */
static const float *g_other_stats; /* test-only: the impl gets only the comm */

static void fake_allgather(tri_comm *c, void *recv, const void *send, size_t n, tri_dtype t) {
    (void)c;
    (void)t;
    memcpy(recv, send, n * sizeof(float));
    memcpy((float *)recv + n, g_other_stats, n * sizeof(float));
}

static const tri_comm_impl FAKE2 = {.name = "fake2", .allgather = fake_allgather};

#include "model/ce.h"

Test(model, ce_combine_matches_the_closed_form_propagates_nan_and_skips_padding_only_ranks) {
    tri_comm tp = {.size = 2, .rank = 0, .impl = &FAKE2};
    float gather[2 * 3 * 3];
    /* row 0: both ranks real; row 1: rank 1 owns only padding (-inf, 0, 0);
     * row 2: rank 1's slice holds a NaN logit */
    float mine[9] = {2.0f, 3.0f, 0.5f, 1.0f, 2.0f, 1.0f, 0.0f, 1.0f, 0.25f};
    float other[9] = {3.0f, 1.5f, 0.0f, -INFINITY, 0.0f, 0.0f, NAN, NAN, 0.0f};
    g_other_stats = other;
    tri_ce_combine(&tp, mine, gather, 3);
    /* closed form: M = max, S = sum S_r exp(m_r - M), target from its owner */
    cr_expect(mine[0] == 3.0f);
    cr_expect(fabsf(mine[1] - (3.0f * expf(-1.0f) + 1.5f)) <= 1e-6f, "S = %g", mine[1]);
    cr_expect(mine[2] == 0.5f);
    cr_expect(mine[3] == 1.0f && mine[4] == 2.0f && mine[5] == 1.0f, "a padding-only rank changes nothing: %g %g %g",
              mine[3], mine[4], mine[5]);
    cr_expect(isnan(mine[6]) || isnan(mine[7]), "a NaN on one rank must reach the loss: M %g S %g", mine[6], mine[7]);
}
