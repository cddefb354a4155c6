/* `trident train / eval / sample` end to end on one rank, through the built
 * binary: determinism, resume, the initial checkpoint against an independent
 * numpy GPT-2, and bad input. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers/testutil.h"

/* A tiny run in dir: its own token files, config overrides on the command line. */
static int train(const char *dir, const char *extra, char **out) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "%s train %s/configs/tiny-test.json --threads 1 --set data.train=%s/train.bin --set data.val=%s/val.bin "
             "--set checkpoint.dir=%s/ckpt --set log.dir=%s/log %s",
             tt_bin("trident"), TRI_SOURCE_DIR, dir, dir, dir, dir, extra);
    return tt_run(cmd, out);
}

static char *make_run_dir(void) {
    char *dir = tt_mkdtemp();
    char p[4200];
    snprintf(p, sizeof p, "%s/train.bin", dir);
    tt_write_llmc_random(p, 20000, 256, 1);
    snprintf(p, sizeof p, "%s/val.bin", dir);
    tt_write_llmc_random(p, 4000, 256, 2);
    return dir;
}

static int losses_of(const char *dir, double **out) {
    char p[4200];
    snprintf(p, sizeof p, "%s/log/metrics.jsonl", dir);
    return tt_losses(p, out);
}

Test(train, same_seed_gives_bit_identical_losses, .timeout = 120) {
    char *a = make_run_dir(), *b = make_run_dir(), *out = NULL;
    cr_assert_eq(train(a, "--set train.steps=6", &out), 0, "%s", out);
    free(out);
    cr_assert_eq(train(b, "--set train.steps=6", &out), 0, "%s", out);
    free(out);
    double *la, *lb;
    int na = losses_of(a, &la), nb = losses_of(b, &lb);
    cr_assert_eq(na, 6);
    cr_assert_eq(nb, 6);
    for (int i = 0; i < na; i++) cr_expect(la[i] == lb[i], "step %d: %.17g vs %.17g", i + 1, la[i], lb[i]);
    /* and a different seed gives a different run (the comparison can fail) */
    char *c = make_run_dir();
    cr_assert_eq(train(c, "--set train.steps=2 --set train.seed=7", &out), 0, "%s", out);
    free(out);
    double *lc;
    cr_assert_eq(losses_of(c, &lc), 2);
    cr_expect(lc[0] != la[0], "a different seed gave the same first loss");
    free(la);
    free(lb);
    free(lc);
    tt_rmrf(a);
    tt_rmrf(b);
    tt_rmrf(c);
    free(a);
    free(b);
    free(c);
}

/* The resumed run's start-up line in metrics.jsonl: its parts (MPI and
 * groups, checkpoint found, loaded, the rest of set-up, the first step) add
 * up to its total, up to the rounding of each figure as printed. */
static void check_startup_line(const char *dir) {
    char p[4300];
    snprintf(p, sizeof p, "%s/log/metrics.jsonl", dir);
    char *m = tt_read(p);
    cr_assert_not_null(m, "%s", p);
    const char *l = strstr(m, "{\"step\": 5, \"perf_startup_s\": ");
    cr_assert_not_null(l, "no start-up line at step 5 in %s", m);
    const char *keys[] = {"perf_startup_s", "perf_startup_dist_s", "perf_startup_ckpt_find_ms",
                          "perf_startup_ckpt_load_ms", "perf_startup_other_s", "perf_startup_first_step_s"};
    double v[6];
    for (int i = 0; i < 6; i++) {
        char k[64];
        snprintf(k, sizeof k, "\"%s\": ", keys[i]);
        const char *q = strstr(l, k);
        cr_assert_not_null(q, "%s missing: %s", keys[i], l);
        v[i] = strtod(q + strlen(k), NULL);
        cr_expect(v[i] >= 0, "%s = %g", keys[i], v[i]);
    }
    const double parts = v[1] + v[2] * 1e-3 + v[3] * 1e-3 + v[4] + v[5];
    cr_expect(v[0] > 0 && v[5] > 0 && fabs(parts - v[0]) <= 5e-4, "parts %.6f vs total %.6f: %s", parts, v[0], l);
    free(m);
}

/* a run of 8 steps against 4 steps + --resume + 4 steps, with `data` the
 * data.train spec relative to the run directory */
static void check_resume(const char *data) {
    char *a = make_run_dir(), *b = make_run_dir(), *out = NULL, extra[4096];
    snprintf(extra, sizeof extra, "--set train.steps=8 --set 'data.train=%s'", data);
    char ea[4200], eb[4200];
    snprintf(ea, sizeof ea, extra, a, a);
    snprintf(eb, sizeof eb, extra, b, b);
    cr_assert_eq(train(a, ea, &out), 0, "%s", out);
    free(out);
    char stop[4300];
    snprintf(stop, sizeof stop, "%s --stop-at-step 4", eb);
    cr_assert_eq(train(b, stop, &out), 0, "%s", out);
    cr_expect(strstr(out, "stopped at step 4") != NULL, "%s", out);
    free(out);
    char resume[4300];
    snprintf(resume, sizeof resume, "%s --resume", eb);
    cr_assert_eq(train(b, resume, &out), 0, "%s", out);
    cr_expect(strstr(out, "resumed from") != NULL, "%s", out);
    cr_expect(strstr(out, "(32 samples consumed)") != NULL, "4 steps of 8: %s", out);
    cr_expect(strstr(out, "restart: ") != NULL, "the restart's breakdown: %s", out);
    free(out);
    check_startup_line(b);
    double *la, *lb;
    int na = losses_of(a, &la), nb = losses_of(b, &lb);
    cr_assert_eq(na, 8);
    cr_assert_eq(nb, 8, "the resumed run appends to metrics.jsonl: 4 + 4 lines");
    for (int i = 0; i < 8; i++) cr_expect(la[i] == lb[i], "step %d: %.17g vs %.17g", i + 1, la[i], lb[i]);
    free(la);
    free(lb);
    tt_rmrf(a);
    tt_rmrf(b);
    free(a);
    free(b);
}

Test(train, stop_and_resume_gives_the_uninterrupted_losses, .timeout = 120) { check_resume("%s/train.bin"); }

/* the same over a weighted blend of two files: the blend schedule and both
 * files' epoch permutations continue where they stopped */
Test(train, stop_and_resume_over_a_blend_reads_the_same_samples, .timeout = 120) {
    check_resume("0.7:%s/train.bin,0.3:%s/val.bin");
}

/* The checkpoint loads in an independent numpy GPT-2 (tests/ref/gpt2_numpy.py
 * reads safetensors bytes and HF names itself) and gives the loss that
 * `trident eval` reports on the same windows. Covers the HF layouts (Conv1D
 * transposes, q|k|v columns, trimmed tied wte) and the forward pass. */
static void check_against_numpy(const char *extra) {
    char *dir = make_run_dir(), *out = NULL;
    cr_assert_eq(train(dir, extra, &out), 0, "%s", out);
    free(out);
    char cmd[8192];
    /* eval: 2 batches of 2 sequential windows = windows 0..3, starting at w * T (T = 16) */
    snprintf(cmd, sizeof cmd, "%s eval --ckpt %s/ckpt --data %s/val.bin --batches 2 --batch 2 --json --threads 1",
             tt_bin("trident"), dir, dir);
    cr_assert_eq(tt_run(cmd, &out), 0, "%s", out);
    char *p = strstr(out, "\"loss\":");
    cr_assert(p, "%s", out);
    double ours = strtod(p + 7, NULL);
    free(out);
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 %s/tests/ref/gpt2_numpy.py %s/ckpt/$(cat %s/ckpt/latest) %s/val.bin 0 16 32 48",
             TRI_SOURCE_DIR, dir, dir, dir);
    cr_assert_eq(tt_run(cmd, &out), 0, "%s", out);
    p = strstr(out, "\"loss\":");
    cr_assert(p, "%s", out);
    double ref = strtod(p + 7, NULL);
    free(out);
    /* fp32 against fp64 over a 2-layer model: 1e-5 relative is ~100x the float error */
    cr_expect(fabs(ours - ref) <= 1e-5 * fabs(ref), "trident eval %.8f vs numpy %.8f", ours, ref);
    tt_rmrf(dir);
    free(dir);
}

Test(train, initial_checkpoint_matches_an_independent_numpy_gpt2, .timeout = 120) {
    check_against_numpy("--set train.steps=0");
}

Test(train, trained_checkpoint_matches_an_independent_numpy_gpt2, .timeout = 120) {
    check_against_numpy("--set train.steps=5");
}

/* `trident eval` on dir/ckpt and file: the JSON's loss, tokens and batches */
static void eval_json(const char *dir, const char *file, const char *args, double *loss, double *tokens,
                      double *batches) {
    char cmd[8192], *out = NULL;
    snprintf(cmd, sizeof cmd, "%s eval --ckpt %s/ckpt --data %s --json --threads 1 %s", tt_bin("trident"), dir, file,
             args);
    cr_assert_eq(tt_run(cmd, &out), 0, "%s\n%s", cmd, out);
    const char *keys[3] = {"\"loss\":", "\"tokens\":", "\"batches\":"};
    double *dst[3] = {loss, tokens, batches};
    for (int k = 0; k < 3; k++) {
        char *p = strstr(out, keys[k]);
        cr_assert(p, "no %s in %s", keys[k], out);
        *dst[k] = strtod(p + strlen(keys[k]), NULL);
    }
    free(out);
}

/* the independent numpy GPT-2's mean loss over windows 0 .. n-1 of file (T = 16) */
static double numpy_loss(const char *dir, const char *file, int n) {
    char cmd[8192], *out = NULL;
    int len = snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tests/ref/gpt2_numpy.py %s/ckpt/$(cat %s/ckpt/latest) %s",
                       TRI_SOURCE_DIR, dir, dir, file);
    for (int w = 0; w < n; w++) len += snprintf(cmd + len, sizeof cmd - (size_t)len, " %d", w * 16);
    cr_assert_eq(tt_run(cmd, &out), 0, "%s", out);
    char *p = strstr(out, "\"loss\":");
    cr_assert(p, "%s", out);
    double ref = strtod(p + 7, NULL);
    free(out);
    return ref;
}

/* A last batch with fewer windows than --batch is evaluated, each window
 * once, and the mean is over exactly its tokens: 7 windows in batches of 4
 * (4 + 3), of 1, and of 100 (one partial batch) give the numpy mean over the
 * 7 windows; a file of one window with the default --batch 4 as well. */
Test(train, eval_counts_a_partial_last_batch_once, .timeout = 120) {
    char *dir = make_run_dir(), *out = NULL, p7[4200], p1[4200];
    cr_assert_eq(train(dir, "--set train.steps=2", &out), 0, "%s", out);
    free(out);
    snprintf(p7, sizeof p7, "%s/seven.bin", dir);
    tt_write_llmc_random(p7, 7 * 16 + 1, 256, 3); /* windows of T + 1 = 17 tokens, overlapping by one */
    snprintf(p1, sizeof p1, "%s/one.bin", dir);
    tt_write_llmc_random(p1, 17, 256, 4);
    double ref = numpy_loss(dir, p7, 7);
    const struct {
        const char *args;
        int batches;
    } runs[] = {{"--batch 4", 2}, {"--batch 1", 7}, {"--batch 100", 1}, {"--batch 3 --batches 3", 3}};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        double loss, tokens, batches;
        eval_json(dir, p7, runs[i].args, &loss, &tokens, &batches);
        cr_expect_eq(tokens, 7 * 16, "%s: %g tokens", runs[i].args, tokens);
        cr_expect_eq(batches, runs[i].batches, "%s: %g batches", runs[i].args, batches);
        /* %.6f printed; fp32 against fp64 over a 2-layer model */
        cr_expect(fabs(loss - ref) <= 1e-5 * fabs(ref), "%s: trident eval %.6f vs numpy %.8f", runs[i].args, loss, ref);
    }
    double loss, tokens, batches;
    eval_json(dir, p1, "", &loss, &tokens, &batches);
    cr_expect_eq(tokens, 16, "%g tokens", tokens);
    cr_expect_eq(batches, 1, "%g batches", batches);
    double ref1 = numpy_loss(dir, p1, 1);
    cr_expect(fabs(loss - ref1) <= 1e-5 * fabs(ref1), "one window: trident eval %.6f vs numpy %.8f", loss, ref1);
    tt_rmrf(dir);
    free(dir);
}

Test(train, sample_prints_text_and_is_deterministic_at_temperature_zero, .timeout = 120) {
    char *dir = make_run_dir(), *out = NULL, *out2 = NULL;
    cr_assert_eq(train(dir, "--set train.steps=2", &out), 0, "%s", out);
    free(out);
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s sample --ckpt %s/ckpt --prompt 'In the' --tokens 20 --temperature 0 --threads 1",
             tt_bin("trident"), dir);
    cr_assert_eq(tt_run(cmd, &out), 0, "%s", out);
    cr_assert_eq(tt_run(cmd, &out2), 0, "%s", out2);
    cr_expect(strncmp(out, "In the", 6) == 0, "output starts with the prompt: %s", out);
    cr_expect(strlen(out) >= 6 + 20 + 1, "20 byte tokens after the prompt: '%s'", out);
    cr_expect_str_eq(out, out2);
    free(out);
    free(out2);
    tt_rmrf(dir);
    free(dir);
}

/* ---- bad input: exit code 2 and a message naming the culprit ---- */

static void expect_error(const char *cmd, const char *must1, const char *must2) {
    char *out = NULL;
    int rc = tt_run(cmd, &out);
    cr_expect_eq(rc, 2, "exit code %d for: %s\n%s", rc, cmd, out);
    cr_expect(strstr(out, must1) != NULL, "message lacks '%s': %s", must1, out);
    if (must2) cr_expect(strstr(out, must2) != NULL, "message lacks '%s': %s", must2, out);
    cr_expect(strstr(out, "step ") == NULL, "training started despite the error: %s", out);
    free(out);
}

Test(train_errors, unknown_key_wrong_type_out_of_range_and_missing_config) {
    char *dir = make_run_dir(), cmd[8192], cfg[4200];
    snprintf(cfg, sizeof cfg, "%s/bad.json", dir);
    FILE *f = fopen(cfg, "w");
    fprintf(f, "{\"train\": {\"lrr\": 0.1}}");
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s train %s", tt_bin("trident"), cfg);
    expect_error(cmd, "bad.json", "train.lrr");
    f = fopen(cfg, "w");
    fprintf(f, "{\"model\": {\"n_layer\": \"four\"}, \"data\": {\"train\": \"x\"}}");
    fclose(f);
    expect_error(cmd, "bad.json", "model.n_layer");
    snprintf(cmd, sizeof cmd, "%s train %s/configs/tiny-test.json --set train.lr=-1", tt_bin("trident"),
             TRI_SOURCE_DIR);
    expect_error(cmd, "train.lr", NULL);
    snprintf(cmd, sizeof cmd, "%s train %s/nonexistent.json", tt_bin("trident"), dir);
    expect_error(cmd, "nonexistent.json", NULL);
    tt_rmrf(dir);
    free(dir);
}

/* --device cuda where no GPU can be used (these machines: no CUDA driver;
 * or a build without CUDA): exit code 2 and a line naming what is missing. */
Test(train_errors, device_cuda_without_a_gpu_exits_2_naming_what_is_missing) {
    char *dir = make_run_dir(), *out = NULL;
    int rc = train(dir, "--device cuda", &out);
    cr_expect_eq(rc, 2, "exit code %d:\n%s", rc, out);
    cr_expect(strstr(out, "trident: --device cuda: ") != NULL, "%s", out);
    /* (on a GPU machine the op table is what is missing, for now) */
    cr_expect(strstr(out, "no CUDA driver") || strstr(out, "no CUDA device") || strstr(out, "built without CUDA") ||
                  strstr(out, "not written yet"),
              "%s", out);
    cr_expect(strstr(out, "step ") == NULL, "training started: %s", out);
    free(out);
    tt_rmrf(dir);
    free(dir);
}

Test(train_errors, bad_token_files_are_named) {
    char *dir = make_run_dir(), cmd[8192], p[4200];
    /* missing */
    snprintf(cmd, sizeof cmd, "%s train %s/configs/tiny-test.json --set data.train=%s/nope.bin", tt_bin("trident"),
             TRI_SOURCE_DIR, dir);
    expect_error(cmd, "nope.bin", NULL);
    /* wrong magic */
    snprintf(p, sizeof p, "%s/magic.bin", dir);
    FILE *f = fopen(p, "wb");
    int32_t h[256] = {12345, 1, 10};
    uint16_t t[10] = {0};
    fwrite(h, sizeof h, 1, f);
    fwrite(t, sizeof t, 1, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s train %s/configs/tiny-test.json --set data.train=%s", tt_bin("trident"),
             TRI_SOURCE_DIR, p);
    expect_error(cmd, "magic.bin", NULL);
    /* truncated: the header promises more tokens than the file holds */
    snprintf(p, sizeof p, "%s/short.bin", dir);
    f = fopen(p, "wb");
    int32_t h2[256] = {20240520, 1, 5000};
    fwrite(h2, sizeof h2, 1, f);
    fwrite(t, sizeof t, 1, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s train %s/configs/tiny-test.json --set data.train=%s", tt_bin("trident"),
             TRI_SOURCE_DIR, p);
    expect_error(cmd, "short.bin", NULL);
    /* a token id >= vocab_size (300 >= 256) at token index 7: byte offset 1024 + 14 */
    snprintf(p, sizeof p, "%s/big.bin", dir);
    uint16_t toks[4000];
    for (int i = 0; i < 4000; i++) toks[i] = (uint16_t)(i % 200);
    toks[7] = 300;
    tt_write_llmc(p, toks, 4000);
    snprintf(cmd, sizeof cmd, "%s train %s/configs/tiny-test.json --set data.train=%s", tt_bin("trident"),
             TRI_SOURCE_DIR, p);
    expect_error(cmd, "big.bin", "1038");
    tt_rmrf(dir);
    free(dir);
}

Test(train_errors, layout_that_does_not_divide_is_refused_with_the_numbers) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s train %s/configs/tiny-test.json --set train.global_batch=6 --set train.micro_batch=4",
             tt_bin("trident"), TRI_SOURCE_DIR);
    expect_error(cmd, "train.global_batch", "micro_batch");
}

/* A run that diverges stops with exit 1 before any non-finite update or
 * checkpoint: every tensor of the newest checkpoint is finite. */
Test(train_errors, a_diverging_run_stops_without_saving_nan, .timeout = 120) {
    char *dir = make_run_dir(), *out = NULL;
    int rc = train(dir,
                   "--set train.steps=40 --set train.lr=1e6 --set train.warmup_steps=0 --set train.grad_clip=0 "
                   "--set checkpoint.every=1 --set checkpoint.keep=1",
                   &out);
    cr_expect_eq(rc, 1, "%s", out);
    cr_expect(strstr(out, "not finite") != NULL, "%s", out);
    free(out);
    char cmd[8192];
    /* every float of the newest checkpoint finite: numpy, independently of our reader */
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 -c \"import json,struct,sys,numpy as np; p=sys.argv[1]; raw=open(p,'rb').read(); "
             "n=struct.unpack('<Q',raw[:8])[0]; d=np.frombuffer(raw[8+n:],'<f4'); print(d.size, "
             "bool(np.isfinite(d).all()))\" "
             "%s/ckpt/$(cat %s/ckpt/latest)/model.safetensors",
             dir, dir);
    cr_assert_eq(tt_run(cmd, &out), 0, "%s", out);
    cr_expect(strstr(out, "True") != NULL, "the newest checkpoint holds non-finite values: %s", out);
    free(out);
    tt_rmrf(dir);
    free(dir);
}

Test(train_errors, resume_with_another_model_shape_is_refused, .timeout = 120) {
    char *dir = make_run_dir(), *out = NULL;
    cr_assert_eq(train(dir, "--set train.steps=4 --stop-at-step 2", &out), 0, "%s", out);
    free(out);
    int rc = train(dir, "--set train.steps=4 --resume --set model.n_head=4", &out);
    cr_expect_eq(rc, 2, "%s", out);
    cr_expect(strstr(out, "model.n_head is 4") != NULL && strstr(out, "trained with 2") != NULL, "%s", out);
    cr_expect(strstr(out, "step ") == NULL, "training started: %s", out);
    free(out);
    tt_rmrf(dir);
    free(dir);
}

Test(train_errors, a_fresh_start_over_another_runs_checkpoints_is_refused, .timeout = 120) {
    char *dir = make_run_dir(), *out = NULL;
    cr_assert_eq(train(dir, "--set train.steps=2", &out), 0, "%s", out);
    free(out);
    int rc = train(dir, "--set train.steps=2", &out);
    cr_expect_eq(rc, 2, "%s", out);
    cr_expect(strstr(out, "already holds") != NULL && strstr(out, "--resume") != NULL, "%s", out);
    free(out);
    tt_rmrf(dir);
    free(dir);
}

/* The whole run, bit for bit, whatever the recompute policy and under the
 * guarded backend (where any host access to backend memory, in the step,
 * evaluation, checkpoint writing or loading, faults): 3 steps, a checkpoint
 * and evaluation, then --resume for 3 more. The metrics' memory line shows
 * the saved activations shrinking with the policy. */
Test(train, recompute_policies_and_the_guarded_backend_give_identical_runs, .timeout = 180) {
    const char *modes[] = {"--set train.recompute=none", "--set train.recompute=selective",
                           "--set train.recompute=full", "--set train.recompute=full --device cpu-guard"};
    double *ref = NULL;
    long saved[4] = {0};
    for (int m = 0; m < 4; m++) {
        char *dir = make_run_dir(), *out = NULL, extra[512];
        snprintf(extra, sizeof extra,
                 "%s --set train.steps=6 --set train.eval_every=3 --set checkpoint.every=3 --stop-at-step 3", modes[m]);
        cr_assert_eq(train(dir, extra, &out), 0, "%s: %s", modes[m], out);
        free(out);
        snprintf(extra, sizeof extra, "%s --set train.steps=6 --set train.eval_every=3 --resume", modes[m]);
        cr_assert_eq(train(dir, extra, &out), 0, "%s: %s", modes[m], out);
        free(out);
        double *l;
        cr_assert_eq(losses_of(dir, &l), 6, "%s", modes[m]);
        if (m == 0) ref = l;
        for (int i = 0; i < 6 && m > 0; i++)
            cr_expect(l[i] == ref[i], "%s: step %d loss %.17g vs %.17g", modes[m], i + 1, l[i], ref[i]);
        char p[4200], *txt = NULL;
        snprintf(p, sizeof p, "grep -o '\"saved_act_peak\": [0-9]*' %s/log/metrics.jsonl | head -1 | cut -d' ' -f2",
                 dir);
        cr_assert_eq(tt_run(p, &txt), 0);
        saved[m] = atol(txt);
        free(txt);
        if (m > 0) free(l);
        tt_rmrf(dir);
        free(dir);
    }
    cr_expect(saved[0] > saved[1] && saved[1] > saved[2] && saved[2] > 0 && saved[3] == saved[2],
              "saved activation peaks none %ld, selective %ld, full %ld, guard %ld", saved[0], saved[1], saved[2],
              saved[3]);
    free(ref);
}

/* parallel.offload = optimizer on the CPU backend moves only the accounting:
 * the same losses, bit for bit, as without, also across a checkpoint taken
 * with offload and resumed without, and the other way; the start-up says
 * where the state is (the memory line's host part, preflight's share). */
Test(train, offload_gives_the_same_run_and_its_checkpoints_resume_both_ways, .timeout = 180) {
    const char *common = "--set train.steps=6 --set train.eval_every=3 --set checkpoint.every=3";
    char *ref_dir = make_run_dir(), *out = NULL, extra[1024];
    snprintf(extra, sizeof extra, "%s", common);
    cr_assert_eq(train(ref_dir, extra, &out), 0, "%s", out);
    cr_expect(strstr(out, "host: optimizer") == NULL, "%s", out);
    free(out);
    double *ref;
    cr_assert_eq(losses_of(ref_dir, &ref), 6);
    const char *first[2] = {"optimizer", "none"}, *then[2] = {"none", "optimizer"};
    for (int w = 0; w < 2; w++) {
        char *dir = make_run_dir();
        snprintf(extra, sizeof extra, "%s --set parallel.offload=%s --stop-at-step 3", common, first[w]);
        cr_assert_eq(train(dir, extra, &out), 0, "%s", out);
        if (w == 0) {
            cr_expect(strstr(out, "; host: optimizer ") != NULL, "the memory line: %s", out);
            cr_expect(strstr(out, "of optimizer state in host memory") != NULL, "preflight: %s", out);
        }
        free(out);
        snprintf(extra, sizeof extra, "%s --set parallel.offload=%s --resume", common, then[w]);
        cr_assert_eq(train(dir, extra, &out), 0, "%s", out);
        free(out);
        double *l;
        cr_assert_eq(losses_of(dir, &l), 6);
        for (int i = 0; i < 6; i++)
            cr_expect(l[i] == ref[i], "offload %s then %s: step %d loss %.17g vs %.17g", first[w], then[w], i + 1,
                      l[i], ref[i]);
        free(l);
        tt_rmrf(dir);
        free(dir);
    }
    free(ref);
    tt_rmrf(ref_dir);
    free(ref_dir);
}
