/* The Llama model (GQA: 4 query heads over 2 KV heads, an untied LM head)
 * on every parallel axis through tridentrun, proven by equivalence with one
 * rank as tests/system/test_parallel.c does for GPT-2: tp 2, tp 4 (each KV
 * head replicated over 2 TP ranks), dp 2, sequence parallelism, ZeRO-1,
 * recompute, pipelines (1f1b, interleaved, zb-h1) and tp2 pp2 dp2 on 8
 * ranks, multi-query attention; a checkpoint saved at tp2 pp2 dp2 resumed
 * at one rank on the uninterrupted curve; bf16 and fp16 through the same
 * paths; and checkpoints that an independent numpy Hugging Face Llama
 * (tests/ref/llama_numpy.py) reads to the same loss.
 *
 * Tolerances, as for GPT-2 (float reduction order is the only allowed
 * difference): losses 1e-6 relative (measured: at most 3e-9 over 10 steps
 * for the layouts below), parameters after 10 AdamW steps 1e-5 absolute (a
 * lost gradient, such as a replicated KV head's share from the other rank,
 * moves an element by ~lr = 1e-3 per step). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers/equiv.h"
#include "helpers/testutil.h"
#include "model/ckpt/safetensors.h"

#define LOSS_RTOL  1e-6
#define PARAM_ATOL 1e-5

#define LLAMA \
    "--set model.arch=llama --set model.n_head=4 --set model.n_kv_head=2 --set model.ffn_hidden=64 --set train.steps=10"

/* One run of the tiny config as a Llama in dir with tp x dp ranks (times
 * parallel.pp in extra) through tridentrun (tests/helpers/equiv.h); `ck`
 * names the checkpoint root. */
static int run(const char *dir, int tp, int dp, const char *ck, const char *extra, char **out) {
    char sets[4096];
    snprintf(sets, sizeof sets, LLAMA " %s", extra);
    return tt_equiv_run(dir, tp, dp, ck, sets, out);
}

static char *make_dir(void) { return tt_equiv_dir(); }

static int losses(const char *dir, const char *ck, double **out) { return tt_equiv_losses(dir, ck, out); }

static void expect_losses_close(const double *a, const double *b, int n, const char *what) {
    tt_equiv_expect_losses(a, b, n, LOSS_RTOL, what);
}

static char *latest_model(const char *dir, const char *ck) { return tt_equiv_latest_model(dir, ck); }

/* Every tensor of the latest checkpoint under dir/ck_b against dir/ck_a:
 * the same Hugging Face Llama names and shapes, values within PARAM_ATOL. */
static void expect_params_close(const char *dir, const char *ck_a, const char *ck_b, const char *what) {
    char *pa = latest_model(dir, ck_a);
    tri_st_file fa;
    cr_assert_eq(tri_st_open(&fa, pa), 0);
    free(pa);
    /* n_layer x 9 tensors, embed_tokens, norm, lm_head */
    cr_expect(fa.layout.n == 21 || fa.layout.n == 39, "%s: %zu tensors", what, fa.layout.n);
    cr_expect(tri_st_layout_find(&fa.layout, "lm_head.weight") >= 0 &&
                  tri_st_layout_find(&fa.layout, "model.layers.1.self_attn.k_proj.weight") >= 0 &&
                  tri_st_layout_find(&fa.layout, "model.layers.1.mlp.up_proj.weight") >= 0,
              "%s: the Hugging Face Llama names", what);
    tri_st_close(&fa);
    tt_equiv_expect_params(dir, ck_a, ck_b, PARAM_ATOL, what);
}

/* The grad_norm values of run ck, in order (at most max). */
static int grad_norms(const char *dir, const char *ck, double *out, int max) {
    char p[4200];
    snprintf(p, sizeof p, "%s/log_%s/metrics.jsonl", dir, ck);
    char *text = tt_read(p);
    cr_assert_not_null(text, "%s", p);
    int n = 0;
    for (const char *q = text; n < max && (q = strstr(q, "\"grad_norm\":")) != NULL; q += 12)
        out[n++] = strtod(q + 12, NULL);
    free(text);
    return n;
}

typedef struct layout {
    int tp, dp;
    const char *more;
} layout;

/* Runs the reference (one rank, `base` settings) as ck "<prefix>_ref", then
 * each layout, and checks that each follows it: 10 losses, final parameters. */
static void expect_layouts_follow(const char *prefix, const char *base, const layout *L, size_t n) {
    char *dir = make_dir(), *out = NULL, ref_ck[64];
    snprintf(ref_ck, sizeof ref_ck, "%s_ref", prefix);
    cr_assert_eq(run(dir, 1, 1, ref_ck, base, &out), 0, "%s", out);
    free(out);
    double *ref;
    cr_assert_eq(losses(dir, ref_ck, &ref), 10);
    for (size_t i = 0; i < n; i++) {
        char ck[64], what[512], extra[1024];
        snprintf(ck, sizeof ck, "%s_%zu", prefix, i);
        snprintf(what, sizeof what, "llama %s tp=%d dp=%d %s", prefix, L[i].tp, L[i].dp, L[i].more);
        snprintf(extra, sizeof extra, "%s %s", base, L[i].more);
        cr_assert_eq(run(dir, L[i].tp, L[i].dp, ck, extra, &out), 0, "%s: %s", what, out);
        free(out);
        double *l;
        cr_assert_eq(losses(dir, ck, &l), 10, "%s", what);
        expect_losses_close(ref, l, 10, what);
        expect_params_close(dir, ref_ck, ck, what);
        /* the global gradient norm counts every tensor once (a replicated
         * KV head, the replicated norms, the two ends): the same as one rank's */
        double na[10], nb[10];
        cr_assert_eq(grad_norms(dir, ref_ck, na, 10), 10);
        cr_assert_eq(grad_norms(dir, ck, nb, 10), 10, "%s", what);
        for (int s = 0; s < 10; s++)
            cr_expect(fabs(na[s] - nb[s]) <= 1e-5 * na[s], "%s: step %d grad_norm %.9g vs %.9g", what, s + 1, nb[s],
                      na[s]);
        free(l);
    }
    free(ref);
    tt_rmrf(dir);
    free(dir);
}

Test(llama_parallel, tp_dp_sp_zero_and_recompute_follow_one_rank, .timeout = 600) {
    const layout layouts[] = {
        {2, 1, ""},
        {4, 1, ""}, /* tp 4 over 2 KV heads: each replicated on 2 ranks */
        {1, 2, ""},
        {2, 2, "--set parallel.zero=1"},
        {2, 1, "--set parallel.sequence_parallel=true"},
        {4, 1, "--set parallel.sequence_parallel=true --set train.recompute=selective"},
        {2, 1, "--set train.recompute=full --device cpu-guard"},
        {1, 2, "--set parallel.zero=1 --set parallel.bucket_mb=0.01"},
    };
    expect_layouts_follow("tp", "", layouts, sizeof layouts / sizeof layouts[0]);
}

/* Multi-query attention: one KV head replicated over both TP ranks */
Test(llama_parallel, multi_query_attention_follows_one_rank, .timeout = 300) {
    const layout layouts[] = {{2, 1, ""}, {2, 1, "--set parallel.sequence_parallel=true"}};
    expect_layouts_follow("mqa", "--set model.n_kv_head=1", layouts, sizeof layouts / sizeof layouts[0]);
}

#define PIPE "--set model.n_layer=4"

Test(llama_parallel, pipelines_follow_one_rank, .timeout = 600) {
    const layout layouts[] = {
        {1, 1, "--set parallel.pp=2"},
        {1, 1, "--set parallel.pp=2 --set parallel.vpp=2"},
        {1, 1, "--set parallel.pp=2 --set parallel.schedule=zb-h1"},
        {2, 1, "--set parallel.pp=2 --set parallel.schedule=zb-h1 --set train.recompute=full"},
        {1, 1, "--set parallel.pp=3 --set parallel.pp_layout=2,1,1"},
        {2, 2, "--set parallel.pp=2"},
        {2, 2, "--set parallel.pp=2 --set parallel.sequence_parallel=true --set parallel.zero=1"},
        {4, 1, "--set parallel.pp=2 --set parallel.vpp=2 --set parallel.sequence_parallel=true"},
        /* replicated KV heads under zb-h1: their sum runs in W, on every TP rank of the stage alike */
        {4, 1, "--set parallel.pp=2 --set parallel.schedule=zb-h1 --set train.recompute=selective"},
    };
    expect_layouts_follow("pipe", PIPE, layouts, sizeof layouts / sizeof layouts[0]);
}

/* Saved after 5 of 10 steps at tp2 pp2 dp2 (Hugging Face Llama tensors,
 * written by the ranks that own each slice), resumed at one rank: steps
 * 6..10 follow the uninterrupted single-rank run. */
Test(llama_parallel, a_tp2_pp2_dp2_checkpoint_resumes_at_one_rank_on_the_curve, .timeout = 300) {
    char *dir = make_dir(), *out = NULL, cmd[8400];
    cr_assert_eq(run(dir, 1, 1, "re_ref", PIPE, &out), 0, "%s", out);
    free(out);
    double *ref;
    cr_assert_eq(losses(dir, "re_ref", &ref), 10);
    cr_assert_eq(run(dir, 2, 2, "re_3d", PIPE " --set parallel.pp=2 --stop-at-step 5", &out), 0, "%s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "cp -r %s/re_3d %s/re_one", dir, dir);
    cr_assert_eq(tt_run(cmd, NULL), 0);
    cr_assert_eq(run(dir, 1, 1, "re_one", PIPE " --resume", &out), 0, "%s", out);
    cr_expect(strstr(out, "resumed from") != NULL, "%s", out);
    free(out);
    double *l;
    cr_assert_eq(losses(dir, "re_one", &l), 5);
    expect_losses_close(ref + 5, l, 5, "llama tp2 pp2 dp2 -> 1 rank");
    expect_params_close(dir, "re_ref", "re_one", "llama tp2 pp2 dp2 -> 1 rank");
    free(l);
    free(ref);
    tt_rmrf(dir);
    free(dir);
}

/* Replicated KV heads across layouts: saved at tp 4 (each of the 2 KV heads
 * on 2 ranks, written once) and resumed at tp 1 and tp 2; saved at one rank
 * and resumed at tp 4 (each copy reads its head whole). Steps 6..10 follow
 * the uninterrupted run. */
Test(llama_parallel, replicated_kv_heads_reshard_both_ways, .timeout = 300) {
    char *dir = make_dir(), *out = NULL, cmd[8400];
    cr_assert_eq(run(dir, 1, 1, "kv_ref", "", &out), 0, "%s", out);
    free(out);
    double *ref;
    cr_assert_eq(losses(dir, "kv_ref", &ref), 10);
    struct {
        int save_tp, resume_tp;
    } cases[] = {{4, 1}, {4, 2}, {1, 4}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char src[64], ck[64], what[64];
        snprintf(src, sizeof src, "kv_save%zu", i);
        snprintf(ck, sizeof ck, "kv_resume%zu", i);
        snprintf(what, sizeof what, "tp %d -> tp %d", cases[i].save_tp, cases[i].resume_tp);
        cr_assert_eq(run(dir, cases[i].save_tp, 1, src, "--stop-at-step 5", &out), 0, "%s", out);
        free(out);
        snprintf(cmd, sizeof cmd, "cp -r %s/%s %s/%s", dir, src, dir, ck);
        cr_assert_eq(tt_run(cmd, NULL), 0);
        cr_assert_eq(run(dir, cases[i].resume_tp, 1, ck, "--resume", &out), 0, "%s", out);
        cr_expect(strstr(out, "resumed from") != NULL, "%s", out);
        free(out);
        double *l;
        cr_assert_eq(losses(dir, ck, &l), 5, "%s", what);
        expect_losses_close(ref + 5, l, 5, what);
        expect_params_close(dir, "kv_ref", ck, what);
        free(l);
    }
    free(ref);
    tt_rmrf(dir);
    free(dir);
}

/* ---- 16-bit precision (bf16, fp16) through the same paths ---- */

/* Step s's loss of run ck (metrics.jsonl lines with "step" and "loss"). */
static int step_losses(const char *dir, const char *ck, double *out, int max) {
    double *l;
    int n = losses(dir, ck, &l);
    for (int i = 0; i < n && i < max; i++) out[i] = l[i];
    free(l);
    return n;
}

/* bf16 and fp16 track the fp32 curve (2% at the end, 5% any step, as
 * GPT-2's test_mixed_precision asks) over 60 steps that train (lr 3e-3);
 * bf16 at tp2 pp2 with SP, and ZeRO, track the single-rank bf16 run within
 * 0.2% (TP and PP change only where 16-bit values are rounded); a bf16 run
 * stopped at step 30 and resumed gives the uninterrupted losses bit for bit. */
Test(llama_precision, sixteen_bit_runs_track_fp32_and_each_other, .timeout = 600) {
    char *dir = make_dir(), *out = NULL;
    enum { N = 60 };
    const char *base = PIPE " --set train.steps=60 --set train.lr=3e-3 --set train.warmup_steps=5";
    struct {
        const char *ck, *more;
        int tp, dp;
    } runs[] = {
        {"p32", "", 1, 1},
        {"pbf", "--set train.precision=bf16", 1, 1},
        {"pf16", "--set train.precision=fp16", 1, 1},
        {"pbf3d", "--set train.precision=bf16 --set parallel.pp=2 --set parallel.sequence_parallel=true", 2, 1},
        {"pbfz", "--set train.precision=bf16 --set parallel.zero=1", 1, 2},
        {"pbfstop", "--set train.precision=bf16 --stop-at-step 30", 1, 1},
    };
    static double l[6][N];
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        char extra[1024];
        snprintf(extra, sizeof extra, "%s %s", base, runs[i].more);
        cr_assert_eq(run(dir, runs[i].tp, runs[i].dp, runs[i].ck, extra, &out), 0, "%s: %s", runs[i].ck, out);
        free(out);
        cr_assert_eq(step_losses(dir, runs[i].ck, l[i], N), i == 5 ? 30 : N, "%s", runs[i].ck);
    }
    cr_expect(l[0][N - 1] < 0.95 * l[0][0], "fp32 did not train: %g -> %g", l[0][0], l[0][N - 1]);
    for (int i = 1; i <= 2; i++) {
        cr_expect(fabs(l[i][N - 1] - l[0][N - 1]) <= 0.02 * l[0][N - 1], "%s final %.6f vs fp32 %.6f", runs[i].ck,
                  l[i][N - 1], l[0][N - 1]);
        for (int s = 0; s < N; s++)
            cr_expect(fabs(l[i][s] - l[0][s]) <= 0.05 * l[0][s], "%s step %d: %.6f vs fp32 %.6f", runs[i].ck, s + 1,
                      l[i][s], l[0][s]);
    }
    for (int i = 3; i <= 4; i++)
        for (int s = 0; s < N; s++)
            cr_expect(fabs(l[i][s] - l[1][s]) <= 0.002 * l[1][s], "%s step %d: %.17g vs bf16 %.17g", runs[i].ck, s + 1,
                      l[i][s], l[1][s]);
    char cmd[8400], extra[1024];
    snprintf(cmd, sizeof cmd, "cp -r %s/pbfstop %s/pbfre", dir, dir);
    cr_assert_eq(tt_run(cmd, NULL), 0);
    snprintf(extra, sizeof extra, "%s --set train.precision=bf16 --resume", base);
    cr_assert_eq(run(dir, 1, 1, "pbfre", extra, &out), 0, "%s", out);
    free(out);
    double re[N];
    cr_assert_eq(step_losses(dir, "pbfre", re, N), 30);
    for (int s = 0; s < 30; s++)
        cr_expect(re[s] == l[1][30 + s], "bf16 resumed step %d: %.17g vs %.17g", 31 + s, re[s], l[1][30 + s]);
    tt_rmrf(dir);
    free(dir);
}

/* ---- the checkpoint is Hugging Face's Llama ---- */

/* `trident eval`'s loss of the latest checkpoint under dir/ck on val.bin's
 * windows 0..3 (T = 16) against tests/ref/llama_numpy.py's, an independent
 * float64 forward written from Hugging Face's modeling_llama (rotate-half
 * RoPE, repeat_kv, SwiGLU, RMSNorm, (out, in) linears) that reads
 * config.json and the safetensors bytes itself. fp32 against fp64 over a
 * 2-layer model: 1e-5 relative is ~100x the float error; RoPE with HF's
 * pairing swapped for the interleaved one moves this loss by 1.5e-4. */
static void expect_numpy_loss(const char *dir, const char *ck) {
    char cmd[8192], *out = NULL;
    snprintf(cmd, sizeof cmd, "%s eval --ckpt %s/%s --data %s/val.bin --batches 2 --batch 2 --json --threads 1",
             tt_bin("trident"), dir, ck, dir);
    cr_assert_eq(tt_run(cmd, &out), 0, "%s", out);
    char *p = strstr(out, "\"loss\":");
    cr_assert(p, "%s", out);
    double ours = strtod(p + 7, NULL);
    free(out);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tests/ref/llama_numpy.py %s/%s/$(cat %s/%s/latest) %s/val.bin 0 16 32 48",
             TRI_SOURCE_DIR, dir, ck, dir, ck, dir);
    cr_assert_eq(tt_run(cmd, &out), 0, "%s", out);
    p = strstr(out, "\"loss\":");
    cr_assert(p, "%s", out);
    double ref = strtod(p + 7, NULL);
    free(out);
    cr_expect(fabs(ours - ref) <= 1e-5 * fabs(ref), "%s: trident eval %.8f vs numpy Llama %.8f", ck, ours, ref);
}

Test(llama_parallel, checkpoints_match_an_independent_numpy_hugging_face_llama, .timeout = 300) {
    char *dir = make_dir(), *out = NULL;
    /* GQA, untied, Llama 3.1 RoPE scaling that bites at this length, trained hard enough to move */
    cr_assert_eq(run(dir, 1, 1, "np_gqa",
                     "--set train.steps=30 --set train.lr=1e-2 --set model.rope_theta=500 "
                     "--set model.rope_scaling_factor=4 --set model.rope_original_seq_len=8",
                     &out),
                 0, "%s", out);
    free(out);
    expect_numpy_loss(dir, "np_gqa");
    /* MQA with a tied head, saved from tp2 pp2 (the replicated KV head written once) */
    cr_assert_eq(run(dir, 2, 1, "np_mqa",
                     "--set model.n_kv_head=1 --set model.tie_embeddings=true --set model.n_layer=4 "
                     "--set parallel.pp=2 --set train.lr=1e-2",
                     &out),
                 0, "%s", out);
    free(out);
    expect_numpy_loss(dir, "np_mqa");
    tt_rmrf(dir);
    free(dir);
}
