/* Context parallelism (parallel.cp; model/cp.h) through tridentrun, proven
 * by equivalence with one rank as tests/system/test_parallel.c does for TP
 * and DP: GPT-2 and Llama at cp 2 and 4, cp 2 with tp 2 (and sequence
 * parallelism), with pp 2, with dp 2 (and ZeRO-1, sharded over dp x cp),
 * with both recompute policies and on the guarded backend; bf16 at cp 2
 * and fp16 at cp 2 and 4 against one rank in the same precision (fp16's
 * overflow skipped on every cp rank alike); the saved activations per rank
 * against the closed form at seq_len / cp, to the byte; the K/V ring's bytes
 * and the dp x cp reduction that `trident bench` reports against their
 * closed forms; a long sequence that preflight refuses at cp 1 under a
 * per-rank memory cap trains at cp 4; and the layouts refused with the keys
 * named.
 *
 * Tolerances (float reduction order is the only allowed difference), those
 * of test_parallel.c: losses 1e-6 relative, parameters after 10 AdamW steps
 * 1e-5 absolute (measured: losses at most 1.1e-8 relative, parameters at
 * most 3.7e-6, for GPT-2 cp2, cp4, cp2 tp2 and Llama cp2, cp4). The ring merges each row's softmax over blocks by their
 * log-sum-exps (another association of the same sums, ~1e-7 relative), and
 * the gradients of replicated parameters are summed over dp x cp in another
 * order; a wrong mask, a position embedding at the local rather than the
 * global position or a missing sum over cp moves a loss by 1e-3 or more
 * (tests/kernels/test_attention_ring.c checks the blocks alone). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers/equiv.h"
#include "helpers/testutil.h"

#define LOSS_RTOL  1e-6
#define PARAM_ATOL 1e-5

/* The per-rank address-space cap of the long-sequence test (bytes, a
 * string for prlimit): above what a rank at cp 4 maps, below what
 * preflight estimates for cp 1 (figures in the test). */
#define LONG_AS_LIMIT "1000000000"

#define LLAMA         "--set model.arch=llama --set model.n_kv_head=2 --set model.ffn_hidden=64"

/* A layout: tp, dp and more settings (parallel.cp among them). */
typedef tt_layout layout;

/* Every run's settings first: 4 heads, 10 steps. */
#define BASE "--set model.n_head=4 --set train.steps=10"

static int run(const char *dir, int tp, int dp, const char *ck, const char *sets, char **out) {
    char all[4096];
    snprintf(all, sizeof all, BASE " %s", sets);
    return tt_equiv_run(dir, tp, dp, ck, all, out);
}

/* Runs the reference (one rank, settings base) and every layout, each
 * following it: its 10 losses and its final parameters. */
static void expect_layouts_follow(const char *prefix, const char *base, const layout *L, size_t n) {
    char *dir = tt_equiv_dir(), ref_ck[64], sets[4096];
    snprintf(ref_ck, sizeof ref_ck, "%s_ref", prefix);
    snprintf(sets, sizeof sets, BASE " %s", base); /* as run() */
    double *ref = tt_equiv_reference(dir, ref_ck, sets, 10);
    tt_equiv_expect_layouts_follow(dir, ref, ref_ck, 10, prefix, sets, "", L, n, " cp=", LOSS_RTOL, PARAM_ATOL);
    free(ref);
    tt_rmrf(dir);
    free(dir);
}

Test(cp, gpt2_layouts_follow_the_single_rank_run, .timeout = 900) {
    static const layout L[] = {
        {1, 1, "--set parallel.cp=2"},
        {1, 1, "--set parallel.cp=4"},
        {2, 1, "--set parallel.cp=2"},
        {1, 2, "--set parallel.cp=2"},
        {1, 1, "--set parallel.cp=2 --set parallel.pp=2"},
        {1, 1, "--set parallel.cp=2 --set train.recompute=selective"},
        {1, 1, "--set parallel.cp=2 --set train.recompute=full --device cpu-guard"},
        {2, 1, "--set parallel.cp=2 --set parallel.sequence_parallel=true"},
        {1, 2, "--set parallel.cp=2 --set parallel.zero=1"},
        /* ZeRO-2/3 shard gradients and parameters over dp x cp too */
        {1, 2, "--set parallel.cp=2 --set parallel.zero=2"},
        {1, 2, "--set parallel.cp=2 --set parallel.zero=3"},
    };
    expect_layouts_follow("gpt2", "", L, sizeof L / sizeof L[0]);
}

Test(cp, llama_layouts_follow_the_single_rank_run, .timeout = 900) {
    static const layout L[] = {
        {1, 1, "--set parallel.cp=2"},
        {1, 1, "--set parallel.cp=4"},
        {2, 1, "--set parallel.cp=2"},
        {1, 2, "--set parallel.cp=2"},
        {1, 1, "--set parallel.cp=2 --set parallel.pp=2 --set train.recompute=full"},
    };
    expect_layouts_follow("llama", LLAMA, L, sizeof L / sizeof L[0]);
}

/* Checkpoints stay global: saved after 5 of 10 steps at one cp (with ZeRO-1
 * at dp 2: the optimizer's shards over dp x cp), resumed at another, steps
 * 6..10 follow the uninterrupted single-rank run, both ways. */
Test(cp, checkpoints_cross_between_cp_sizes, .timeout = 300) {
    char *dir = tt_equiv_dir();
    double *ref = tt_equiv_reference(dir, "re_ref", BASE, 10);
    static const struct {
        int dp;
        const char *save, *resume;
    } pairs[] = {{1, "--set parallel.cp=2", "--set parallel.cp=1"},
                 {1, "--set parallel.cp=1", "--set parallel.cp=4"},
                 {2, "--set parallel.cp=2 --set parallel.zero=1", "--set parallel.cp=1 --set parallel.zero=1"}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        char ck[32], sets[256], what[256];
        snprintf(ck, sizeof ck, "re_%zu", i);
        snprintf(what, sizeof what, "saved at dp %d %s, resumed at %s", pairs[i].dp, pairs[i].save, pairs[i].resume);
        /* (the resumed run must not see the first run's log lines: moved away) */
        snprintf(sets, sizeof sets, BASE " %s", pairs[i].save);
        tt_equiv_save_at(dir, ck, 1, pairs[i].dp, sets, 5);
        snprintf(sets, sizeof sets, BASE " %s", pairs[i].resume);
        tt_equiv_expect_resumed(dir, ref, 5, 10, ck, 1, pairs[i].dp, sets, LOSS_RTOL, what);
    }
    free(ref);
    tt_rmrf(dir);
    free(dir);
}

/* Without the sum of the CP ranks' shares the loss would be one rank's
 * part of the tokens; without the global positions GPT-2's position
 * embedding would be read at the wrong rows: a bf16 run at cp 2 must still
 * track the single-rank bf16 run within test_mixed_precision.c's 0.2% per
 * step (each rank rounds its attention output once after the ring's fp32
 * merge, as one rank rounds it once). */
Test(cp, bf16_cp2_tracks_the_single_rank_bf16_run, .timeout = 300) {
    char *dir = tt_equiv_dir(), *out = NULL;
    const char *bf = "--set train.precision=bf16";
    cr_assert_eq(run(dir, 1, 1, "bf_ref", bf, &out), 0, "%s", out);
    free(out);
    char sets[256];
    snprintf(sets, sizeof sets, "%s --set parallel.cp=2", bf);
    cr_assert_eq(run(dir, 1, 1, "bf_cp2", sets, &out), 0, "%s", out);
    free(out);
    double *a, *b;
    cr_assert_eq(tt_equiv_losses(dir, "bf_ref", &a), 10);
    cr_assert_eq(tt_equiv_losses(dir, "bf_cp2", &b), 10);
    for (int s = 0; s < 10; s++)
        cr_expect(fabs(a[s] - b[s]) <= 0.002 * a[s], "bf16 cp2 step %d: %.17g vs %.17g", s + 1, b[s], a[s]);
    free(a);
    free(b);
    tt_rmrf(dir);
    free(dir);
}

/* fp16 keeps 11 significant bits where bf16 keeps 8, and scales the loss
 * (train.loss_scale_init, 65536) before the backward: the ring carries the
 * fp16 K/V blocks and the scaled fp32 dK/dV, merges in fp32 and rounds each
 * output once, as one rank does. The cp run rounds the same values after
 * other associations of its fp32 sums, so now and then an element rounds to
 * the neighbouring fp16 value (2^-11 relative); those flips average out in
 * the loss (measured at most 2.3e-6 relative for cp 2, 2.9e-6 for cp 4 and
 * cp 2 x dp 2 over 10 steps; one rank's fp16 against its fp32: 3.2e-6).
 * The bound, 2e-5 relative, is 7x that and below what a missing sum over cp
 * or a position read at the local index moves a loss (1e-3 at a loss of
 * 5.5: 1.8e-4 relative). */
#define FP16_RTOL 2e-5

/* Run ck's steps (n of them) against ref's: the same steps skipped, the same
 * loss scale after each, the other losses within FP16_RTOL. */
static void expect_fp16_follows(const char *dir, const char *ref, const char *ck, int n, const char *what) {
    tt_step a[16], b[16];
    cr_assert_eq(tt_equiv_steps(dir, ref, a, 16), n, "%s: the reference", what);
    cr_assert_eq(tt_equiv_steps(dir, ck, b, 16), n, "%s", what);
    for (int s = 0; s < n; s++) {
        cr_expect_eq(b[s].skipped, a[s].skipped, "%s step %d: skipped %d, one rank %d", what, s + 1, b[s].skipped,
                     a[s].skipped);
        cr_expect_eq(b[s].scale, a[s].scale, "%s step %d: loss scale %g, one rank %g", what, s + 1, b[s].scale,
                     a[s].scale);
        if (!a[s].skipped)
            cr_expect(fabs(a[s].loss - b[s].loss) <= FP16_RTOL * a[s].loss, "%s step %d: loss %.17g, one rank %.17g",
                      what, s + 1, b[s].loss, a[s].loss);
    }
}

/* fp16 at cp 2 and 4 follows one rank's fp16 run; an overflow (the test fault
 * TRIDENT_DEBUG_FP16_OVERFLOW_STEP=4: one gradient element made infinite
 * after the reductions) is skipped as one rank skips it: that step alone,
 * the scale halved, the run going on. Without ZeRO every cp rank holds the
 * element and sees it; with ZeRO-1 over dp x cp only the rank whose shard
 * holds element 0 does, and the other's norm is finite: it must skip too
 * (badstep_judge's maximum over the world). Had it updated its shard, the
 * step 4 checkpoint would differ from step 3's of the same layout run
 * without the fault: both files are compared bit for bit. */
Test(cp, fp16_cp2_tracks_the_single_rank_fp16_run_and_skips_an_overflow_on_every_rank, .timeout = 300) {
    char *dir = tt_equiv_dir(), *out = NULL;
    const char *fp16 = "--set train.precision=fp16";
    const struct {
        const char *ck, *sets;
    } plain[] = {{"h_ref", ""}, {"h_cp2", "--set parallel.cp=2"}, {"h_cp4", "--set parallel.cp=4"}};
    for (int i = 0; i < 3; i++) {
        char sets[256];
        snprintf(sets, sizeof sets, "%s %s", fp16, plain[i].sets);
        cr_assert_eq(run(dir, 1, 1, plain[i].ck, sets, &out), 0, "%s: %s", plain[i].ck, out);
        free(out);
    }
    expect_fp16_follows(dir, "h_ref", "h_cp2", 10, "fp16 cp2");
    expect_fp16_follows(dir, "h_ref", "h_cp4", 10, "fp16 cp4");
    tt_step r[16];
    tt_equiv_steps(dir, "h_ref", r, 16);
    for (int s = 0; s < 10; s++) /* (so that the overflow below is the only skip) */
        cr_expect(!r[s].skipped && r[s].scale == 65536, "one rank fp16 step %d: skipped %d, scale %g", s + 1,
                  r[s].skipped, r[s].scale);
    const struct {
        const char *ck, *sets;
    } ov[] = {
        {"ov_ref", ""}, {"ov_cp2", "--set parallel.cp=2"}, {"ov_cp2z", "--set parallel.cp=2 --set parallel.zero=1"}};
    cr_assert_eq(setenv("TRIDENT_DEBUG_FP16_OVERFLOW_STEP", "4", 1), 0);
    for (int i = 0; i < 3; i++) {
        char sets[512];
        snprintf(sets, sizeof sets, "%s --set train.steps=8 --set checkpoint.every=4 %s", fp16, ov[i].sets);
        cr_assert_eq(run(dir, 1, 1, ov[i].ck, sets, &out), 0, "%s: %s", ov[i].ck, out);
        cr_expect(strstr(out, "step     4/8 | skipped: fp16 gradient overflow") != NULL, "%s: %s", ov[i].ck, out);
        free(out);
    }
    unsetenv("TRIDENT_DEBUG_FP16_OVERFLOW_STEP");
    tt_step o[16];
    cr_assert_eq(tt_equiv_steps(dir, "ov_ref", o, 16), 8);
    for (int s = 0; s < 8; s++)
        cr_expect(o[s].skipped == (s == 3) && o[s].scale == (s < 3 ? 65536 : 32768),
                  "one rank, overflow at 4: step %d skipped %d, scale %g", s + 1, o[s].skipped, o[s].scale);
    expect_fp16_follows(dir, "ov_ref", "ov_cp2", 8, "fp16 cp2, overflow at step 4");
    expect_fp16_follows(dir, "ov_ref", "ov_cp2z", 8, "fp16 cp2 zero 1, overflow at step 4 in one rank's shard");
    /* no rank updated at step 4: its checkpoint is step 3's of the run without the fault */
    char sets[256], a[4200], b[4200];
    snprintf(sets, sizeof sets, "%s --set train.steps=3 --set parallel.cp=2 --set parallel.zero=1", fp16);
    cr_assert_eq(run(dir, 1, 1, "ov_cp2z_3", sets, &out), 0, "%s", out);
    free(out);
    snprintf(a, sizeof a, "%s/ov_cp2z/step_00000004", dir);
    snprintf(b, sizeof b, "%s/ov_cp2z_3/step_00000003", dir);
    tt_expect_same_file(a, b, "model.safetensors");
    tt_expect_same_tensors(a, b, "optimizer.safetensors", "fp16 cp2 zero 1: the skipped step's optimizer");
    tt_rmrf(dir);
    free(dir);
}

/* Saved activations per rank at cp 1, 2 and 4 against docs/performance.md's
 * closed form for one rank (tiny: L 2, h 32, a 4 heads, b 4, fp32; no
 * recompute) at s = 16 / cp positions:
 *   L [4 sb (16h + 4) + 4 a s b] + 8 sb + 8 sbh + 8 sb bytes,
 * so exactly 1/cp of cp 1's (every buffer a multiple of 64 bytes here, the
 * allocator's alignment). */
Test(cp, saved_activation_bytes_divide_by_cp, .timeout = 300) {
    char *dir = tt_equiv_dir(), *out = NULL;
    const double L = 2, h = 32, a = 4, b = 4;
    double one = 0;
    for (int cp = 1; cp <= 4; cp *= 2) {
        char ck[32], sets[256];
        snprintf(ck, sizeof ck, "mem_cp%d", cp);
        snprintf(sets, sizeof sets, "--set train.micro_batch=4 --set parallel.cp=%d", cp);
        cr_assert_eq(run(dir, 1, 1, ck, sets, &out), 0, "%s", out);
        free(out);
        double s = 16.0 / cp, sb = s * b;
        double want = L * (4 * sb * (16 * h + 4) + 4 * a * s * b) + 8 * sb + 8 * sb * h + 8 * sb;
        double got = tt_equiv_metric(dir, ck, "saved_act_peak");
        cr_expect(got == want, "cp %d: saved_act_peak %.0f, closed form %.0f", cp, got, want);
        if (cp == 1) one = got;
        cr_expect(got * cp == one, "cp %d: %.0f bytes x %d != %.0f at cp 1", cp, got, cp, one);
    }
    tt_rmrf(dir);
    free(dir);
}

/* seq_len 8192 on a small GPT-2 under a per-rank address-space cap (prlimit
 * --as, as the fault tests cap memory): preflight refuses cp 1 for memory
 * before allocating anything, naming the cap; cp 4 (2048 positions per rank)
 * fits it and trains two steps. The memory that grows with the sequence is
 * made mostly the logits' (a vocabulary of 32768: 128 KiB a position in
 * fp32, 1 GiB at 8192 positions, a quarter at cp 4), so that the ring's
 * attention stays cheap on a small machine. One thread per rank. */
Test(cp, long_sequence_refused_at_cp1_trains_at_cp4, .timeout = 600) {
#ifdef TT_ASAN
    cr_skip_test("an address-space cap is not usable under AddressSanitizer (its shadow memory)");
#endif
    char *dir = tt_equiv_dir(), *out = NULL, cmd[8192];
    const char *model = "--set model.seq_len=8192 --set model.n_embd=64 --set model.n_head=2 --set model.n_layer=1 "
                        "--set model.vocab_size=32768 --set train.micro_batch=1 --set train.global_batch=1 "
                        "--set train.steps=2 "
                        "--set train.warmup_steps=0 --set train.eval_every=0 --set checkpoint.every=0";
    for (int cp = 1; cp <= 4; cp += 3) {
        snprintf(
            cmd, sizeof cmd,
            "cd %s && OMP_NUM_THREADS=1 MALLOC_ARENA_MAX=2 timeout -k 5 400 prlimit " TT_PRLIMIT_AS(
                LONG_AS_LIMIT) " %s --log-dir "
                               "%s/ranks_long%d -- %s train %s/configs/tiny-test.json --set data.train=%s/train.bin "
                               "--set data.val=%s/train.bin --set parallel.cp=%d --set checkpoint.dir=%s/ck_long%d "
                               "--set log.dir=%s/log_long%d %s",
            dir, tt_bin("tridentrun"), dir, cp, tt_bin("trident"), TRI_SOURCE_DIR, dir, dir, cp, dir, cp, dir, cp,
            model);
        int rc = tt_run(cmd, &out);
        if (cp == 1) {
            cr_expect_neq(rc, 0, "cp 1 trained under the cap: %s", out);
            cr_expect(strstr(out, "address-space limit") != NULL && strstr(out, "parallel.cp") != NULL,
                      "cp 1: preflight's message names the cap and parallel.cp: %s", out);
        } else {
            cr_expect_eq(rc, 0, "cp 4 under the cap: %s", out);
            cr_expect(strstr(out, "cp=4 (2048 positions per rank)") != NULL, "%s", out);
        }
        free(out);
    }
    tt_rmrf(dir);
    free(dir);
}

/* `trident bench`'s exact figures per step for group g ("cp", "dpcp") from
 * its JSON line's "comm_per_step" (asserting they are there). */
static void comm_per_step(const char *out, const char *g, double *bytes, double *calls) {
    const char *at = strstr(out, "\"comm_per_step\": {");
    cr_assert(at != NULL, "no comm_per_step: %s", out);
    char key[32];
    snprintf(key, sizeof key, "\"%s\": {", g);
    at = strstr(at, key);
    cr_assert(at != NULL, "no %s in comm_per_step: %s", g, out);
    cr_assert_eq(sscanf(at + strlen(key), "\"bytes\": %lf, \"calls\": %lf", bytes, calls), 2, "%s", at);
}

/* What the K/V ring sends per step, as `trident bench` reports it (the cp
 * group's sends, comm.h books a send at its buffer), against
 * docs/parallelism.md's closed form, per layer and micro-batch per rank with
 * b sequences, s = T / cp positions, w the K/V width on the TP rank and A
 * bytes an activation element:
 *   forward  (cp - 1) sends of 2 b s w A (the K and V blocks),
 *   backward (cp - 1) of the blocks again and (cp - 1) of their fp32
 *            gradients, 2 b s w (A + 4) bytes,
 *   full recompute: one forward more,
 * times L = 2 layers and m = global_batch / (b dp) micro-batches, plus the
 * step's loss summed over cp (one host all-reduce of 8 bytes). The tiny
 * model: b 2, T 16, C 32, 4 heads (w = 32 / tp), global batch 8. The
 * gradients of the Ψ parameters a TP rank holds (fp32, one bucket) are
 * all-reduced once a step over dp x cp: 4Ψ bytes in one call, in dp's
 * place. */
Test(cp, bench_reports_the_ring_and_the_dp_x_cp_reduction_in_closed_form, .timeout = 300) {
    char *dir = tt_equiv_dir();
    const struct {
        int cp, tp, dp, A, full;
        const char *sets;
    } cases[] = {{2, 1, 1, 4, 0, ""},
                 {4, 1, 1, 4, 0, ""},
                 {2, 1, 2, 4, 0, ""},
                 {2, 1, 1, 4, 1, "--set train.recompute=full"},
                 {2, 1, 1, 2, 0, "--set train.precision=bf16"},
                 {2, 2, 1, 4, 0, ""}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int cp = cases[i].cp, tp = cases[i].tp, dp = cases[i].dp, A = cases[i].A;
        char tag[32], sets[512], *out = NULL, what[256];
        snprintf(what, sizeof what, "cp %d tp %d dp %d %s", cp, tp, dp, cases[i].sets);
        snprintf(tag, sizeof tag, "bench%zu", i);
        snprintf(sets, sizeof sets,
                 "--set model.n_head=4 --set parallel.cp=%d --set parallel.tp=%d --set parallel.dp=%d %s", cp, tp, dp,
                 cases[i].sets);
        cr_assert_eq(tt_equiv_bench(dir, tag, sets, &out), 0, "%s: %s", what, out);
        const double b = 2, s = 16.0 / cp, w = 32.0 / tp, L = 2, m = 8 / (b * dp);
        const double fwd = (cp - 1) * 2 * b * s * w * A, bwd = (cp - 1) * 2 * b * s * w * (A + 4);
        const double ring = L * m * (fwd * (1 + cases[i].full) + bwd) + 8;
        const double ring_calls = L * m * (cp - 1) * (1 + cases[i].full + 2) + 1;
        double bytes, calls;
        comm_per_step(out, "cp", &bytes, &calls);
        cr_expect_eq(bytes, ring, "%s: the ring sent %.0f bytes a step, closed form %.0f", what, bytes, ring);
        cr_expect_eq(calls, ring_calls, "%s: %.0f ring calls a step, closed form %.0f", what, calls, ring_calls);
        cr_expect(strstr(out, "  comm cp     ") != NULL && strstr(out, "the K/V ring's sends") != NULL, "%s: %s", what,
                  out);
        /* the parameters on a TP rank (C 32, V 256): per layer the split
         * qkv, attention projection, fc and its projection (12 C^2 / tp and
         * their column biases 7 C / tp), the row-parallel biases and the two
         * LayerNorms whole (6 C); the vocabulary-parallel wte, wpe and ln_f
         * (34176 at tp 1) */
        const double C = 32, psi = L * (12 * C * C / tp + 7 * C / tp + 6 * C) + 256 * C / tp + 16 * C + 2 * C;
        comm_per_step(out, "dpcp", &bytes, &calls);
        cr_expect(bytes == 4 * psi && calls == 1, "%s: dp x cp reduced %.0f bytes in %.0f calls, closed form %.0f in 1",
                  what, bytes, calls, 4 * psi);
        cr_expect(strstr(out, "  comm dp x cp ") != NULL, "%s: %s", what, out);
        free(out);
    }
    tt_rmrf(dir);
    free(dir);
}

/* Layouts refused before anything starts, the keys and numbers named. */
Test(cp, bad_layouts_name_the_keys, .timeout = 120) {
    char *dir = tt_equiv_dir(), *out = NULL, cmd[8192];
    /* seq_len 16 does not split into 2 x 3 chunks */
    snprintf(cmd, sizeof cmd, "cd %s && timeout 60 %s train %s/configs/tiny-test.json --set parallel.cp=3", dir,
             tt_bin("trident"), TRI_SOURCE_DIR);
    cr_expect_neq(tt_run(cmd, &out), 0);
    cr_expect(strstr(out, "parallel.cp (3)") && strstr(out, "model.seq_len (16)") && strstr(out, "2 x parallel.cp = 6"),
              "%s", out);
    free(out);
    /* the world: tp x cp x pp x dp, checked by tridentrun before it starts a rank */
    snprintf(cmd, sizeof cmd,
             "cd %s && timeout 60 %s --nproc-per-node 3 -- %s train %s/configs/tiny-test.json --set parallel.cp=2", dir,
             tt_bin("tridentrun"), tt_bin("trident"), TRI_SOURCE_DIR);
    cr_expect_neq(tt_run(cmd, &out), 0);
    cr_expect(strstr(out, "parallel.cp (2)") != NULL, "%s", out);
    free(out);
    /* the CUDA backend has no ring yet: said, naming the key */
    snprintf(cmd, sizeof cmd,
             "cd %s && timeout 60 %s train %s/configs/tiny-test.json --device cuda --set parallel.cp=2", dir,
             tt_bin("trident"), TRI_SOURCE_DIR);
    cr_expect_neq(tt_run(cmd, &out), 0);
    cr_expect(strstr(out, "parallel.cp") != NULL, "%s", out);
    free(out);
    tt_rmrf(dir);
    free(dir);
}

/* tridentrun --dry-run shows the cp axis: the layout with its rank order and
 * a cp column (ranks a tp apart share a ring). */
Test(cp, dry_run_shows_the_cp_column, .timeout = 60) {
    char *dir = tt_equiv_dir(), *out = NULL, cmd[8192];
    snprintf(cmd, sizeof cmd,
             "cd %s && timeout 60 %s --dry-run -- %s train %s/configs/tiny-test.json --set parallel.tp=2 "
             "--set parallel.cp=2",
             dir, tt_bin("tridentrun"), tt_bin("trident"), TRI_SOURCE_DIR);
    cr_assert_eq(tt_run(cmd, &out), 0, "%s", out);
    cr_expect(strstr(out, "parallel.tp 2 x cp 2 x pp 1 x dp 1 (rank order tp-cp-dp-pp)") != NULL, "%s", out);
    cr_expect(strstr(out, "  tp   cp   dp   pp") != NULL, "%s", out);
    /* rank 2: tp 0, cp 1 */
    cr_expect(strstr(out, "   0    1    0    0") != NULL, "%s", out);
    free(out);
    tt_rmrf(dir);
    free(dir);
}
