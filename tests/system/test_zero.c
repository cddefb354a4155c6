/* ZeRO-2 and ZeRO-3 (parallel.zero = 2 | 3) through tridentrun, proven as
 * ZeRO-1 is (tests/system/test_parallel.c, suite "zero"): by equivalence with
 * one rank, checkpoints across stages, and the memory held against the
 * closed form.
 *
 * Tolerances: the same as ZeRO-1's, for the same reason. ZeRO-2 moves the
 * same reduce-scatter into another buffer (this rank's shards only) and
 * releases the full gradient buffer after it; ZeRO-3 all-gathers the same
 * updated shards from their own buffer before each chunk's compute instead
 * of once after the update. The sums are the ones ZeRO-1 takes, in the same
 * order, and the update of each element is the same AdamW on the same
 * values. So:
 *   - losses: 1e-6 relative (ZeRO-1 and every DP/TP layout measured at most
 *     9e-9 over 10 steps; a missing or doubled reduction moves a loss by 1e-3);
 *   - parameters after 10 AdamW steps: 1e-5 absolute (measured 1.8e-6 for
 *     TP/DP; a shard updated from the wrong gradient moves by ~lr = 1e-3 a step).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers/equiv.h"
#include "helpers/testutil.h"

#define LOSS_RTOL  1e-6
#define PARAM_ATOL 1e-5

#define PIPE_MODEL "--set model.n_layer=4 --set train.steps=10"

/* The tiny config with 4 heads (tp 1, 2 or 4) in dir, tp x dp ranks. */
static int run(const char *dir, int tp, int dp, const char *ck, const char *extra, char **out) {
    char sets[4096];
    snprintf(sets, sizeof sets, "--set model.n_head=4 %s", extra);
    return tt_equiv_run(dir, tp, dp, ck, sets, out);
}

static double *reference(const char *dir, const char *ck, const char *extra) {
    char sets[4096];
    snprintf(sets, sizeof sets, "--set model.n_head=4 %s", extra); /* as run() */
    return tt_equiv_reference(dir, ck, sets, 10);
}

typedef tt_layout layout;

/* Each layout (after `base`) as run "<prefix>_<i>": its 10 losses and final
 * parameters against the reference run ref_ck (tests/helpers/equiv.h). */
static void expect_layouts_follow(const char *dir, const double *ref, const char *ref_ck, const char *prefix,
                                  const char *base, const layout *L, size_t n) {
    char sets[4096];
    snprintf(sets, sizeof sets, "--set model.n_head=4 %s", base); /* as run() */
    tt_equiv_expect_layouts_follow(dir, ref, ref_ck, 10, prefix, sets, base, L, n, " held per rank between steps",
                                   LOSS_RTOL, PARAM_ATOL);
}

/* In a fresh directory: the reference run ref_ck (one rank, settings
 * ref_sets), then each layout following it (expect_layouts_follow). */
static void expect_all_follow(const char *ref_ck, const char *ref_sets, const char *prefix, const char *base,
                              const layout *L, size_t n) {
    char *dir = tt_equiv_dir();
    double *ref = reference(dir, ref_ck, ref_sets);
    expect_layouts_follow(dir, ref, ref_ck, prefix, base, L, n);
    free(ref);
    tt_rmrf(dir);
    free(dir);
}

#define ZERO2 "--set parallel.zero=2"
#define ZERO3 "--set parallel.zero=3"

Test(zero2, every_layout_follows_the_single_rank_run, .timeout = 600) {
    /* dp 1 (the shard is the whole chunk: a copy), dp 2 and 4; 0.01 MiB
     * buckets cut the 136 KB of gradients into ~14, shards inside rows;
     * tp2 dp2; the guarded backend (host access to backend memory faults,
     * also of a released gradient buffer) */
    const layout layouts[] = {{1, 1, ""},
                              {1, 2, ""},
                              {1, 4, ""},
                              {1, 2, "--set parallel.bucket_mb=0.01"},
                              {1, 4, "--set parallel.bucket_mb=0.01"},
                              {2, 2, ""},
                              {2, 2, "--set parallel.bucket_mb=0.01 --device cpu-guard"}};
    expect_all_follow("ref", "--set train.steps=10", "z2", "--set train.steps=10 " ZERO2, layouts,
                      sizeof layouts / sizeof layouts[0]);
}

/* Pipelines: the tied embedding's buckets wait for the embedding-group sum
 * and are then reduce-scattered into the shards too. */
Test(zero2, pipelines_follow_the_single_rank_run, .timeout = 600) {
    const layout layouts[] = {
        {2, 2, "--set parallel.pp=2"},
        {1, 2, "--set parallel.pp=2 --set parallel.bucket_mb=0.01"},
        {1, 2, "--set parallel.pp=2 --set parallel.vpp=2 --set parallel.bucket_mb=0.01"},
        {1, 1, "--set parallel.pp=2 --set parallel.schedule=zb-h1"},
    };
    expect_all_follow("pipe_ref", PIPE_MODEL, "z2pipe", PIPE_MODEL " " ZERO2, layouts,
                      sizeof layouts / sizeof layouts[0]);
}

/* Bytes held per rank between steps, against the ZeRO paper's closed forms
 * with Trident's dtypes (fp32 gradients; AdamW's two fp32 moments, plus fp32
 * master weights for 16-bit parameters): with P parameter bytes, O
 * optimizer bytes (8 fp32, 12 mixed) and d DP ranks,
 *   stage 1: P + 4 + O/d,   stage 2: P + (4 + O)/d,   stage 3: (P + 4 + O)/d,
 * computed here from the parameter count the banner prints and the ZeRO
 * padding (each chunk to a multiple of 16 d floats), to the byte; the
 * allocator's peak of gradients is the step's full buffer plus the shards
 * (stage 2's working set) against the full buffer alone at stage 1, and at
 * stage 3 the peak of parameters is the gathered chunk plus the shards. */
Test(zero_mem, held_memory_is_the_closed_form, .timeout = 300) {
    char *dir = tt_equiv_dir();
    struct {
        int zero, dp;
        const char *prec;
        int P, O;
    } cases[] = {{2, 2, "fp32", 4, 8},  {2, 4, "fp32", 4, 8}, {2, 2, "bf16", 2, 12}, {1, 2, "fp32", 4, 8},
                 {1, 4, "bf16", 2, 12}, {3, 2, "fp32", 4, 8}, {3, 4, "bf16", 2, 12}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int z = cases[i].zero, d = cases[i].dp, P = cases[i].P, O = cases[i].O;
        char ck[64], extra[512], *out = NULL, what[128];
        snprintf(ck, sizeof ck, "mem_%zu", i);
        snprintf(what, sizeof what, "zero %d dp %d %s", z, d, cases[i].prec);
        /* (stage 3 gathering each chunk whole: parallel.zero_unit_layers = 0; layer units:
         * tests/system/test_zero_units.c) */
        snprintf(
            extra, sizeof extra,
            "--set train.steps=2 --set parallel.zero=%d --set train.precision=%s --set parallel.zero_unit_layers=0", z,
            cases[i].prec);
        cr_assert_eq(run(dir, 1, d, ck, extra, &out), 0, "%s: %s", what, out);
        /* "trident: N parameters, tp=..." (the global count: tp = pp = 1 holds it all) */
        const char *banner = strstr(out, " parameters, tp=");
        cr_assert(banner != NULL, "%s: %s", what, out);
        const char *num = banner;
        while (num > out && num[-1] >= '0' && num[-1] <= '9') num--;
        size_t n = (size_t)strtoull(num, NULL, 10), unit = 16 * (size_t)d;
        size_t n_alloc = (n + unit - 1) / unit * unit;
        cr_expect_eq(tt_equiv_field(out, "n_params="), n, "%s", what);
        size_t params = tt_equiv_field(out, "bytes params="), grads = tt_equiv_field(out, " grads="),
               optim = tt_equiv_field(out, " optim=");
        size_t p_expect = z >= 3 ? n_alloc / (size_t)d * (size_t)P : n_alloc * (size_t)P;
        cr_expect_eq(params, p_expect, "%s: parameter bytes %zu, closed form %zu", what, params, p_expect);
        size_t g_expect = z >= 2 ? n_alloc / (size_t)d * 4 : n_alloc * 4;
        cr_expect_eq(grads, g_expect, "%s: gradient bytes %zu, closed form %zu", what, grads, g_expect);
        cr_expect_eq(optim, n_alloc / (size_t)d * (size_t)O, "%s: optimizer bytes", what);
        /* per parameter: the closed form, plus at most the padding's share */
        double per = (double)(params + grads + optim) / (double)n;
        double form = z >= 3 ? (P + 4.0 + O) / d : z >= 2 ? P + (4.0 + O) / d : P + 4.0 + (double)O / d;
        double slack = (double)(n_alloc - n) * (P + 4.0 + O) / (double)n;
        cr_expect(per >= form - 1e-12 && per <= form + slack + 1e-12, "%s: %.4f bytes per parameter, closed form %.4f",
                  what, per, form);
        free(out);
        /* the allocator's peak of gradient memory (metrics.jsonl's "mem"):
         * stage 2 holds the full buffer only within a step, with the shards */
        char p[4200];
        snprintf(p, sizeof p, "%s/log_%s/metrics.jsonl", dir, ck);
        char *text = tt_read(p);
        cr_assert(text != NULL, "%s", p);
        size_t peak = tt_equiv_field(text, "\"grads\": ");
        size_t peak_expect = n_alloc * 4 + (z >= 2 ? n_alloc / (size_t)d * 4 : 0);
        cr_expect_eq(peak, peak_expect, "%s: peak gradient bytes %zu, expected %zu", what, peak, peak_expect);
        /* stage 3: the full parameters of the (one) chunk while it computes, with the shards */
        size_t ppeak = tt_equiv_field(text, "\"params\": "),
               ppeak_expect = n_alloc * (size_t)P + (z >= 3 ? p_expect : 0);
        cr_expect_eq(ppeak, ppeak_expect, "%s: peak parameter bytes %zu, expected %zu", what, ppeak, ppeak_expect);
        free(text);
    }
    tt_rmrf(dir);
    free(dir);
}

/* Checkpoints between ZeRO-1 and stage z: saved at zero 1 they resume at
 * stage z (dp 2 and 4, small buckets); saved at stage z (dp 4, small
 * buckets) at zero 1 (dp 2 and 4), zero 0 at one rank and zero 2 at tp 2;
 * saved by a tp2 pp2 dp2 pipeline at stage z, resumed at pp 1 in each of
 * the two layouts pipe_to. Each save is after 5 of 10 steps, copied once
 * per resume layout; steps 6..10 must follow ref + 5
 * (tt_equiv_expect_reshard). */
static void expect_checkpoints_move(int z, const int (*pipe_to)[3]) {
    char *dir = tt_equiv_dir();
    double *ref = reference(dir, "full", "--set train.steps=10");
    const char *m = "--set model.n_head=4 --set train.steps=10", *small = "--set parallel.bucket_mb=0.01";
    const int from_z1[][3] = {{1, 2, z}, {1, 4, z}};
    tt_equiv_expect_reshard(dir, ref, m, 1, 2, 1, "", from_z1, 2, small, LOSS_RTOL);
    const int from_z[][3] = {{1, 2, 1}, {1, 4, 1}, {1, 1, 0}, {2, 1, 2}};
    tt_equiv_expect_reshard(dir, ref, m, 1, 4, z, small, from_z, 4, "", LOSS_RTOL);
    free(ref);
    ref = reference(dir, "pipe_full", PIPE_MODEL);
    tt_equiv_expect_reshard(dir, ref, "--set model.n_head=4 " PIPE_MODEL " --set parallel.pp=2", 2, 2, z, "", pipe_to,
                            2, "--set parallel.pp=1", LOSS_RTOL);
    free(ref);
    tt_rmrf(dir);
    free(dir);
}

/* Checkpoints stay global: saved at zero 1 they resume at zero 2 (another
 * dp, another bucket size), saved at zero 2 at zero 1, 0 and one rank, and
 * through a pipeline; wrong moments or shards would move steps 6..10 by ~lr. */
Test(zero2, checkpoints_move_between_zero_stages, .timeout = 600) {
    const int pipe_to[][3] = {{1, 2, 1}, {1, 1, 0}};
    expect_checkpoints_move(2, pipe_to);
}

/* A non-finite gradient written into the reduced shards (the test fault
 * debug.inject_kind = nan-grad, on the DP rank whose shard holds element 0)
 * still skips the step on every rank, and the run then follows on. */
Test(zero2, a_nan_gradient_in_a_shard_skips_the_step, .timeout = 300) {
    char *dir = tt_equiv_dir(), *out = NULL;
    int rc = run(dir, 1, 2, "nan",
                 "--set train.steps=4 " ZERO2 " --set debug.inject_kind=nan-grad --set debug.inject_step=2", &out);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "step     2/4 | skipped: ") != NULL, "step 2 was not skipped: %s", out);
    cr_expect(strstr(out, "step     3/4 | skipped") == NULL && strstr(out, "step     3/4") != NULL,
              "the run did not go on after the skipped step: %s", out);
    free(out);
    tt_rmrf(dir);
    free(dir);
}

/* ---- ZeRO-3 ---- */

Test(zero3, every_layout_follows_the_single_rank_run, .timeout = 600) {
    /* dp 1 (the gather is a copy), 2 and 4, buckets inside rows, TP, the
     * guarded backend (a released parameter buffer read faults), recompute
     * (the forward rerun inside backward reads the gathered parameters) */
    const layout layouts[] = {{1, 1, ""},
                              {1, 2, ""},
                              {1, 4, ""},
                              {1, 4, "--set parallel.bucket_mb=0.01"},
                              {2, 2, ""},
                              {2, 2, "--set parallel.bucket_mb=0.01 --device cpu-guard"},
                              {1, 2, "--set train.recompute=full"},
                              {1, 2, "--set parallel.zero_keep_params=true"}};
    expect_all_follow("ref", "--set train.steps=10", "z3", "--set train.steps=10 " ZERO3, layouts,
                      sizeof layouts / sizeof layouts[0]);
}

/* Pipeline chunks: vpp 2 puts two chunks on a rank, so each forward gathers
 * the next chunk early; the tied embedding's copies on two stages; zb-h1's
 * split backward. Validation (forward only) and checkpoints (every chunk
 * gathered for the save) run inside. */
Test(zero3, pipelines_follow_the_single_rank_run, .timeout = 600) {
    const layout layouts[] = {
        {2, 2, "--set parallel.pp=2"},
        {1, 2, "--set parallel.pp=2 --set parallel.vpp=2 --set parallel.bucket_mb=0.01"},
        {1, 2, "--set parallel.pp=2 --set parallel.schedule=zb-h1"},
        {1, 2, "--set parallel.pp=2 --set train.eval_every=5 --set checkpoint.every=5"},
        {1, 2, "--set parallel.pp=2 --set parallel.vpp=2 --set parallel.zero_keep_params=true"},
    };
    expect_all_follow("pipe_ref", PIPE_MODEL, "z3pipe", PIPE_MODEL " " ZERO3, layouts,
                      sizeof layouts / sizeof layouts[0]);
}

/* bf16 parameters: the 16-bit shards rounded from the fp32 masters and
 * gathered in 16 bits give the same bits as ZeRO-1's in-place shards (the
 * same roundings of the same values), so zero 3 follows zero 1 at the same
 * layout within the fp32 tolerance. */
/* 16-bit parameters (bf16; fp16 with its loss scale): the 16-bit shards
 * rounded from the fp32 masters and gathered in 16 bits give the same bits
 * as ZeRO-1's in-place shards (the same roundings of the same values), so
 * zero 3 follows zero 1 at the same layout within the fp32 tolerance. */
Test(zero3, sixteen_bit_parameters_follow_zero1, .timeout = 300) {
    char *dir = tt_equiv_dir();
    const char *precs[2] = {"bf16", "fp16"};
    for (int p = 0; p < 2; p++) {
        double *ref = NULL;
        char *out = NULL, extra[512], ck[32], prefix[32];
        snprintf(ck, sizeof ck, "%s_z1", precs[p]);
        snprintf(prefix, sizeof prefix, "%s_z3", precs[p]);
        snprintf(extra, sizeof extra, "--set train.steps=10 --set train.precision=%s --set parallel.zero=1", precs[p]);
        cr_assert_eq(run(dir, 1, 2, ck, extra, &out), 0, "%s", out);
        free(out);
        cr_assert_eq(tt_equiv_losses(dir, ck, &ref), 10);
        snprintf(extra, sizeof extra, "--set train.steps=10 --set train.precision=%s " ZERO3, precs[p]);
        const layout layouts[] = {{1, 2, ""}, {1, 2, "--set parallel.bucket_mb=0.01"}};
        expect_layouts_follow(dir, ref, ck, prefix, extra, layouts, sizeof layouts / sizeof layouts[0]);
        free(ref);
    }
    tt_rmrf(dir);
    free(dir);
}

/* Save at zero 1, resume at zero 3 (another dp) and back; a zero 3
 * pipeline's checkpoint resumed at one rank without ZeRO. */
Test(zero3, checkpoints_move_between_zero_stages, .timeout = 600) {
    const int pipe_to[][3] = {{1, 1, 0}, {1, 2, 3}};
    expect_checkpoints_move(3, pipe_to);
}

/* A rollback under ZeRO-3 (every chunk gathered for the load, then sharded
 * again), the fault a NaN loss on rank 1 only: the final model and optimizer
 * files equal, byte for byte, those of a rerun of the same layout from a
 * copy of step 4 given the recorded skips (tests/system/test_bad_steps.c
 * does the same at zero 1). Stale shards after the reload would differ. */
Test(zero3, a_rollback_equals_the_rerun, .timeout = 300) {
    char *dir = tt_equiv_dir(), *out = NULL;
    cr_assert_eq(run(dir, 1, 2, "rb",
                     ZERO3 " --set train.steps=12 --set checkpoint.every=4 --set train.max_bad_steps=2 "
                           "--set debug.inject_step=7 --set debug.inject_count=2 --set debug.inject_rank=1 "
                           "--set debug.inject_kind=nan-loss",
                     &out),
                 0, "%s", out);
    cr_expect(strstr(out, "rolled back to") != NULL, "%s", out);
    free(out);
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "mkdir -p %s/rr && cp -r %s/rb/step_00000004 %s/rr/", dir, dir, dir);
    cr_assert_eq(tt_run(cmd, NULL), 0);
    cr_assert_eq(run(dir, 1, 2, "rr",
                     ZERO3 " --set train.steps=12 --set checkpoint.every=4 --set train.skip_samples=48-64 --resume",
                     &out),
                 0, "%s", out);
    free(out);
    const char *files[2] = {"model.safetensors", "optimizer.safetensors"};
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof cmd, "cmp %s/rb/step_00000012/%s %s/rr/step_00000012/%s", dir, files[i], dir, files[i]);
        char *o = NULL;
        cr_expect_eq(tt_run(cmd, &o), 0, "rollback vs rerun: %s differs: %s", files[i], o);
        free(o);
    }
    tt_rmrf(dir);
    free(dir);
}

/* What crosses the DP group per step, from `trident bench`'s comm dp line
 * (a reduce-scatter booked at its whole input, an all-gather at this rank's
 * part, comm.h), against the closed forms of docs/parallelism.md for the
 * tiny model (Ψ parameters, one bucket, m = 2 micro-batches per rank at dp
 * 2, fp32): stage 1 reduce-scatters 4Ψ and gathers 4Ψ/2 once; stage 3
 * gathers before each forward and each backward, 2m times; keeping the
 * parameters from forward to backward gathers m times. The calls add the
 * loss and the norm (two host all-reduces of 8 bytes). Stage 3 here gathers
 * each chunk whole (parallel.zero_unit_layers = 0, one call per bucket);
 * layer units: tests/system/test_zero_units.c. */
Test(zero3, gathers_per_step_are_the_closed_form, .timeout = 300) {
    char *dir = tt_equiv_dir();
    const double psi =
        34176; /* the tiny model with 4 heads: 2 layers of 12 C^2 + 13 C, V C, T C, 2 C (C 32, V 256, T 16) */
    const struct {
        const char *sets;
        int calls;
        double bytes;
    } cases[] = {{"--set parallel.zero=1", 1 + 1 + 2, 4 * psi + 4 * psi / 2},
                 {ZERO3 " --set parallel.zero_unit_layers=0", 1 + 2 * 2 + 2, 4 * psi + 2 * 2 * 4 * psi / 2},
                 {ZERO3 " --set parallel.zero_unit_layers=0 --set parallel.zero_keep_params=true", 1 + 2 + 2,
                  4 * psi + 2 * 4 * psi / 2}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tt_equiv_expect_dp_comm(dir, i, cases[i].sets, cases[i].calls, cases[i].bytes);
    }
    tt_rmrf(dir);
    free(dir);
}

/* A Llama (RMSNorm, RoPE, SwiGLU, grouped KV heads replicated over TP, an
 * untied LM head: no embedding group) under zero 2 and 3, with sequence
 * parallelism and a pipeline: the same tolerances. */
#define LLAMA                                                                                        \
    "--set model.arch=llama --set model.n_kv_head=2 --set model.ffn_hidden=64 --set train.steps=10 " \
    "--set model.n_layer=4"

Test(zero3, a_llama_follows_the_single_rank_run, .timeout = 600) {
    const layout layouts[] = {
        {2, 2, ZERO3 " --set parallel.sequence_parallel=true"},
        {1, 2, ZERO3 " --set parallel.pp=2 --set parallel.bucket_mb=0.01"},
        {2, 2, ZERO2 " --set parallel.pp=2"},
    };
    expect_all_follow("llama_ref", LLAMA, "zllama", LLAMA, layouts, sizeof layouts / sizeof layouts[0]);
}
