/* Bad steps end to end (src/train/badstep.h, docs/reliability.md "Bad
 * steps") through the built binary, with faults planted by debug.inject_*:
 *   - a NaN (or inf) in the gradients or the loss skips exactly that step in
 *     fp32, bf16 and fp16: the parameters, AdamW moments and step count after
 *     it are bit for bit those of a run stopped before it (no update);
 *   - a spike is skipped with train.skip_spikes and trained on without, and
 *     a skipped spike leaves the same model as a skipped NaN;
 *   - train.max_bad_steps = 2 with two bad steps in a row rolls back to the
 *     last checkpoint; the final files equal those of a rerun from that
 *     checkpoint given the recorded skips (train.skip_samples) and of a resume
 *     from a checkpoint written after the rollback; without a checkpoint the
 *     run stops (exit 1) saying so;
 *   - a fault on one rank (tp 2, dp 2 with ZeRO) makes every rank skip, and
 *     a rollback on dp 2 with ZeRO equals its rerun;
 *   - train.loss_scale_init = 1e308 is refused (exit 2, naming the key), and
 *     a run in which every step was skipped fails (exit 1) and saves nothing.
 * Every run is the tiny config (a second or so), capped by timeout. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "helpers/equiv.h"
#include "helpers/testutil.h"
#include "model/ckpt/safetensors.h"

#define MAX_STEPS 64

/* One rank: the tiny config in dir/ck_<name>, logs in dir/log_<name>. */
static int train(const char *dir, const char *name, const char *extra, char **out) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "timeout 120 %s train %s/configs/tiny-test.json --threads 1 --set data.train=%s/train.bin "
             "--set data.val=%s/val.bin --set checkpoint.dir=%s/ck_%s --set log.dir=%s/log_%s %s",
             tt_bin("trident"), TRI_SOURCE_DIR, dir, dir, dir, name, dir, name, extra);
    return tt_run(cmd, out);
}

/* metrics.jsonl by step (1-based index s-1); a rollback replays steps, the
 * last line of a step wins, rollbacks are counted */
typedef struct metrics {
    double loss[MAX_STEPS];
    int skipped[MAX_STEPS];
    char reason[MAX_STEPS][32];
    int n, rollbacks;
} metrics;

static void read_metrics(const char *logdir, metrics *m) {
    char p[4200];
    snprintf(p, sizeof p, "%s/metrics.jsonl", logdir);
    char *text = tt_read(p);
    cr_assert(text != NULL, "no %s", p);
    memset(m, 0, sizeof *m);
    for (int i = 0; i < MAX_STEPS; i++) m->loss[i] = NAN;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        const char *q = strstr(line, "\"step\": ");
        cr_assert(q != NULL, "%s: %s", p, line);
        int s = atoi(q + 8);
        cr_assert(s >= 1 && s <= MAX_STEPS, "%s: %s", p, line);
        if (strstr(line, "\"rollback\": true")) {
            m->rollbacks++;
            continue;
        }
        if ((q = strstr(line, "\"loss\": ")) != NULL) {
            m->loss[s - 1] = strtod(q + 8, NULL);
            m->skipped[s - 1] = 0;
        }
        if (strstr(line, "\"skipped\": true")) {
            m->skipped[s - 1] = 1;
            m->loss[s - 1] = NAN;
            q = strstr(line, "\"reason\": \"");
            cr_assert(q != NULL, "%s", line);
            snprintf(m->reason[s - 1], sizeof m->reason[0], "%.*s", (int)strcspn(q + 11, "\""), q + 11);
        }
        if (s > m->n && !strstr(line, "val_loss")) m->n = s;
    }
    free(text);
}

/* The model and optimizer tensors of checkpoint dirs a and b are bit for bit
 * equal (the optimizer file's metadata names its step: tensors compared). */
static void expect_same_state(const char *a, const char *b, const char *what) {
    tt_expect_same_tensors(a, b, "model.safetensors", what);
    tt_expect_same_tensors(a, b, "optimizer.safetensors", what);
}

/* The number after `key` in dir/state.json (NaN when absent). */
static double state_num(const char *ckdir, const char *key) {
    char p[4400];
    snprintf(p, sizeof p, "%s/state.json", ckdir);
    char *text = tt_read(p);
    cr_assert(text != NULL, "no %s", p);
    char k[128];
    snprintf(k, sizeof k, "\"%s\":", key);
    const char *q = strstr(text, k);
    double v = q ? strtod(q + strlen(k), NULL) : NAN;
    free(text);
    return v;
}

static char *ck(const char *dir, const char *name, int step) {
    char *p = malloc(4300);
    snprintf(p, 4300, "%s/ck_%s/step_%08d", dir, name, step);
    return p;
}

/* ------------------------------------------------------------------------ */

/* A fault planted at step 4 of 8 (checkpoints every 4) against the same run
 * stopped after step 3 without it: the checkpoint after the skipped step 4
 * holds exactly the parameters, moments and step count of step 3, step 4 is
 * the only one skipped (for the reason the fault gives), and the run trains
 * on after it. fp16's gradient overflow also halves the loss scale. */
Test(bad_steps, a_nan_skips_exactly_that_step_in_every_precision, .timeout = 240) {
    char *dir = tt_equiv_dir(), *out = NULL;
    static const struct {
        const char *prec, *kind, *reason;
        double scale_after; /* fp16: state.json's loss_scale after step 4 */
    } cases[] = {
        {"fp32", "nan-grad", "nonfinite_grad_norm", 0},  {"fp32", "nan-loss", "nonfinite_loss", 0},
        {"bf16", "nan-grad", "nonfinite_grad_norm", 0},  {"bf16", "inf-grad", "nonfinite_grad_norm", 0},
        {"fp16", "nan-loss", "nonfinite_loss", 65536.0}, {"fp16", "nan-grad", "fp16_overflow", 32768.0},
    };
    const char *precs[3] = {"fp32", "bf16", "fp16"};
    char extra[1024], name[64];
    for (int p = 0; p < 3; p++) {
        snprintf(extra, sizeof extra, "--set train.steps=3 --set train.precision=%s", precs[p]);
        snprintf(name, sizeof name, "ref_%s", precs[p]);
        cr_assert_eq(train(dir, name, extra, &out), 0, "%s", out);
        free(out);
    }
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        snprintf(name, sizeof name, "%s_%s", cases[c].prec, cases[c].kind);
        snprintf(extra, sizeof extra,
                 "--set train.steps=8 --set checkpoint.every=4 --set train.precision=%s --set debug.inject_step=4 "
                 "--set debug.inject_kind=%s",
                 cases[c].prec, cases[c].kind);
        cr_assert_eq(train(dir, name, extra, &out), 0, "%s: %s", name, out);
        cr_expect(strstr(out, "step     4/8 | skipped: ") != NULL, "%s: %s", name, out);
        free(out);
        char logdir[4300], refname[64];
        snprintf(logdir, sizeof logdir, "%s/log_%s", dir, name);
        metrics m, r;
        read_metrics(logdir, &m);
        snprintf(refname, sizeof refname, "ref_%s", cases[c].prec);
        snprintf(logdir, sizeof logdir, "%s/log_%s", dir, refname);
        read_metrics(logdir, &r);
        cr_expect_eq(m.n, 8, "%s", name);
        for (int s = 0; s < 8; s++) {
            cr_expect_eq(m.skipped[s], s == 3, "%s: step %d skipped %d", name, s + 1, m.skipped[s]);
            if (s != 3) cr_expect(isfinite(m.loss[s]), "%s: step %d loss %g", name, s + 1, m.loss[s]);
            if (s < 3)
                cr_expect(m.loss[s] == r.loss[s], "%s: step %d %.17g vs %.17g", name, s + 1, m.loss[s], r.loss[s]);
        }
        cr_expect_str_eq(m.reason[3], cases[c].reason, "%s", name);
        char *a = ck(dir, name, 4), *b = ck(dir, refname, 3);
        expect_same_state(a, b, name);
        cr_expect_eq(state_num(a, "optimizer_updates"), 3.0, "%s: AdamW's step count moved", name);
        cr_expect_eq(state_num(a, "samples_consumed"), 32.0, "%s: the skipped batch is consumed", name);
        cr_expect_eq(state_num(a, "skipped_steps"), 1.0, "%s", name);
        if (cases[c].scale_after > 0)
            cr_expect_eq(state_num(a, "loss_scale"), cases[c].scale_after, "%s: loss scale", name);
        free(a);
        free(b);
        a = ck(dir, name, 8);
        cr_expect_eq(state_num(a, "optimizer_updates"), 7.0, "%s", name);
        free(a);
    }
    tt_rmrf(dir);
    free(dir);
}

/* A loss x 1e4 at step 13 (after the 10-step warm-up of the running mean):
 * skipped with train.skip_spikes (and the model then equals that of a run
 * whose step 13 is skipped for a NaN loss), trained on without it (the
 * loss logged is the spike's: the fault touches the loss only). No step of
 * the clean run counts as a spike with the default factor. */
Test(bad_steps, a_spike_is_skipped_only_with_skip_spikes, .timeout = 120) {
    char *dir = tt_equiv_dir(), *out = NULL;
    const char *base = "--set train.steps=16 --set debug.inject_step=13";
    char extra[1024];
    snprintf(extra, sizeof extra, "%s --set debug.inject_kind=spike --set train.skip_spikes=true", base);
    cr_assert_eq(train(dir, "on", extra, &out), 0, "%s", out);
    free(out);
    snprintf(extra, sizeof extra, "%s --set debug.inject_kind=spike", base);
    cr_assert_eq(train(dir, "off", extra, &out), 0, "%s", out);
    free(out);
    snprintf(extra, sizeof extra, "%s --set debug.inject_kind=nan-loss", base);
    cr_assert_eq(train(dir, "nan", extra, &out), 0, "%s", out);
    free(out);
    cr_assert_eq(train(dir, "clean", "--set train.steps=16 --set train.skip_spikes=true", &out), 0, "%s", out);
    free(out);
    metrics on, off, clean;
    char p[4300];
    snprintf(p, sizeof p, "%s/log_on", dir);
    read_metrics(p, &on);
    snprintf(p, sizeof p, "%s/log_off", dir);
    read_metrics(p, &off);
    snprintf(p, sizeof p, "%s/log_clean", dir);
    read_metrics(p, &clean);
    for (int s = 0; s < 16; s++) {
        cr_expect_eq(on.skipped[s], s == 12, "on: step %d", s + 1);
        cr_expect_eq(off.skipped[s], 0, "off: step %d", s + 1);
        cr_expect_eq(clean.skipped[s], 0, "clean: step %d is not a spike", s + 1);
    }
    cr_expect_str_eq(on.reason[12], "loss_spike");
    cr_expect(off.loss[12] > 1e3 * clean.loss[12] && off.loss[12] < 1e5 * clean.loss[12], "off: %g vs %g", off.loss[12],
              clean.loss[12]);
    /* without skipping, the spike (a loss-only fault) trains as the clean run does */
    char *a = ck(dir, "off", 16), *b = ck(dir, "clean", 16), *c = ck(dir, "on", 16), *d = ck(dir, "nan", 16);
    expect_same_state(a, b, "spike not skipped vs clean");
    expect_same_state(c, d, "spike skipped vs NaN skipped");
    free(a);
    free(b);
    free(c);
    free(d);
    tt_rmrf(dir);
    free(dir);
}

/* Steps 7 and 8 of 12 bad (checkpoints every 4), max_bad_steps = 2: the run
 * rolls back to step 4, skips samples [48, 64) (the 8-sample windows of
 * steps 7 and 8), replays 5 and 6 and goes on to 12. Its final model and
 * optimizer equal (bit for bit) those of a rerun from a copy of step 4 with
 * --set train.skip_samples=48-64 and no fault, and those of a resume from a
 * copy of its step 8 (written after the rollback, with the ranges in its
 * state.json, and the fault still configured: it does not come back). */
Test(bad_steps, a_rollback_reproduces_bit_for_bit, .timeout = 180) {
    char *dir = tt_equiv_dir(), *out = NULL;
    const char *run =
        "--set train.steps=12 --set checkpoint.every=4 --set train.max_bad_steps=2 --set debug.inject_step=7 "
        "--set debug.inject_count=2";
    cr_assert_eq(train(dir, "rb", run, &out), 0, "%s", out);
    cr_expect(strstr(out, "rolled back to") && strstr(out, "[48, 64)"), "%s", out);
    free(out);
    metrics m;
    char p[4300];
    snprintf(p, sizeof p, "%s/log_rb", dir);
    read_metrics(p, &m);
    cr_expect_eq(m.rollbacks, 1);
    for (int s = 0; s < 12; s++) cr_expect(m.skipped[s] == 0 && isfinite(m.loss[s]), "step %d after the replay", s + 1);
    char *s8 = ck(dir, "rb", 8);
    cr_expect_eq(state_num(s8, "samples_consumed"), 80.0, "8 steps of 8 plus the 16 skipped");
    cr_expect_eq(state_num(s8, "optimizer_updates"), 8.0);
    cr_expect_eq(state_num(s8, "rollbacks"), 1.0);
    char *text = NULL, cmd[9000];
    snprintf(cmd, sizeof cmd, "tr -d ' \\t\\n' < %s/state.json", s8);
    cr_assert_eq(tt_run(cmd, &text), 0);
    cr_expect(strstr(text, "\"skip_samples\":[[48,64]]") != NULL, "%s", text);
    free(text);
    /* the rerun: a copy of step 4, the recorded skips, no fault */
    snprintf(cmd, sizeof cmd,
             "mkdir -p %s/ck_rr %s/ck_rs && cp -r %s/ck_rb/step_00000004 %s/ck_rr/ && cp -r %s %s/ck_rs/", dir, dir,
             dir, dir, s8, dir);
    cr_assert_eq(tt_run(cmd, &out), 0, "%s", out);
    free(out);
    cr_assert_eq(
        train(dir, "rr", "--set train.steps=12 --set checkpoint.every=4 --set train.skip_samples=48-64 --resume", &out),
        0, "%s", out);
    free(out);
    char extra[2048];
    snprintf(extra, sizeof extra, "%s --resume", run);
    cr_assert_eq(train(dir, "rs", extra, &out), 0, "%s", out);
    cr_expect(strstr(out, "skipped") == NULL, "the resumed run met the fault again: %s", out);
    free(out);
    char *a = ck(dir, "rb", 12), *b = ck(dir, "rr", 12), *c = ck(dir, "rs", 12);
    expect_same_state(a, b, "rollback vs rerun from step 4 with the recorded skips");
    expect_same_state(a, c, "rollback vs resume from its step 8");
    /* and the rerun did change something: step 4 differs from step 12 */
    char *s4 = ck(dir, "rb", 4);
    snprintf(cmd, sizeof cmd, "cmp -s %s/model.safetensors %s/model.safetensors", s4, a);
    cr_expect_neq(tt_run(cmd, &out), 0, "the run after the rollback did not train");
    free(out);
    free(a);
    free(b);
    free(c);
    free(s4);
    free(s8);
    /* no checkpoint yet: the run stops and says so */
    cr_expect_eq(train(dir, "nock",
                       "--set train.steps=6 --set train.max_bad_steps=2 --set debug.inject_step=2 "
                       "--set debug.inject_count=2",
                       &out),
                 1, "%s", out);
    cr_expect(strstr(out, "no checkpoint to roll back to") && strstr(out, "train.max_bad_steps"), "%s", out);
    free(out);
    tt_rmrf(dir);
    free(dir);
}

/* A NaN loss on world rank 1 only (the loss of rank 0 is finite): with tp 2,
 * and with dp 2 under ZeRO (each rank writes its own slices and shards, so a
 * rank that updated would show in the files), step 4 is skipped on every
 * rank: its checkpoint equals step 3 of the same layout without the fault. */
Test(bad_steps, a_fault_on_one_rank_makes_every_rank_skip, .timeout = 240) {
    char *dir = tt_equiv_dir(), *out = NULL;
    static const struct {
        int tp, dp;
        const char *sets;
    } layouts[] = {{2, 1, ""}, {1, 2, "--set parallel.zero=1"}};
    for (int l = 0; l < 2; l++) {
        char ref[32], inj[32], sets[1024];
        snprintf(ref, sizeof ref, "ref%d", l);
        snprintf(inj, sizeof inj, "inj%d", l);
        snprintf(sets, sizeof sets, "--set train.steps=3 %s", layouts[l].sets);
        cr_assert_eq(tt_equiv_run(dir, layouts[l].tp, layouts[l].dp, ref, sets, &out), 0, "%s", out);
        free(out);
        snprintf(sets, sizeof sets,
                 "--set train.steps=6 --set checkpoint.every=4 --set debug.inject_step=4 --set debug.inject_rank=1 "
                 "--set debug.inject_kind=nan-loss %s",
                 layouts[l].sets);
        cr_assert_eq(tt_equiv_run(dir, layouts[l].tp, layouts[l].dp, inj, sets, &out), 0, "%s", out);
        free(out);
        char p[4300];
        snprintf(p, sizeof p, "%s/log_%s", dir, inj);
        metrics m;
        read_metrics(p, &m);
        for (int s = 0; s < 6; s++)
            cr_expect_eq(m.skipped[s], s == 3, "tp %d dp %d: step %d", layouts[l].tp, layouts[l].dp, s + 1);
        cr_expect_str_eq(m.reason[3], "nonfinite_loss");
        char a[4300], b[4300];
        snprintf(a, sizeof a, "%s/%s/step_00000004", dir, inj);
        snprintf(b, sizeof b, "%s/%s/step_00000003", dir, ref);
        expect_same_state(a, b, layouts[l].tp > 1 ? "tp 2" : "dp 2 zero");
    }
    tt_rmrf(dir);
    free(dir);
}

/* The rollback on dp 2 with ZeRO (every rank reloads its shards), the fault
 * a NaN loss on rank 1 only: the final model and optimizer equal those of a
 * rerun of the same layout from a copy of step 4 given the recorded skips. */
Test(bad_steps, a_rollback_on_two_ranks_equals_the_rerun, .timeout = 240) {
    char *dir = tt_equiv_dir(), *out = NULL;
    cr_assert_eq(tt_equiv_run(dir, 1, 2, "rb",
                              "--set parallel.zero=1 --set train.steps=12 --set checkpoint.every=4 "
                              "--set train.max_bad_steps=2 --set debug.inject_step=7 --set debug.inject_count=2 "
                              "--set debug.inject_rank=1 --set debug.inject_kind=nan-loss",
                              &out),
                 0, "%s", out);
    cr_expect(strstr(out, "rolled back to") && strstr(out, "[48, 64)"), "%s", out);
    free(out);
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "mkdir -p %s/rr && cp -r %s/rb/step_00000004 %s/rr/", dir, dir, dir);
    cr_assert_eq(tt_run(cmd, &out), 0, "%s", out);
    free(out);
    cr_assert_eq(tt_equiv_run(dir, 1, 2, "rr",
                              "--set parallel.zero=1 --set train.steps=12 --set checkpoint.every=4 "
                              "--set train.skip_samples=48-64 --resume",
                              &out),
                 0, "%s", out);
    free(out);
    char a[4300], b[4300];
    snprintf(a, sizeof a, "%s/rb/step_00000012", dir);
    snprintf(b, sizeof b, "%s/rr/step_00000012", dir);
    expect_same_state(a, b, "dp 2 zero: rollback vs rerun");
    tt_rmrf(dir);
    free(dir);
}

/* train.loss_scale_init = 1e308 halved once per skipped step would skip
 * ~1000 steps: refused naming the key and the bound; Megatron's 2^32 is
 * taken. A run whose every step is skipped exits 1, says so and writes no
 * final checkpoint. */
Test(bad_steps, a_run_that_trained_nothing_fails, .timeout = 120) {
    char *dir = tt_equiv_dir(), *out = NULL;
    cr_expect_eq(train(dir, "big", "--set train.precision=fp16 --set train.loss_scale_init=1e308", &out), 2, "%s", out);
    cr_expect(strstr(out, "train.loss_scale_init") && strstr(out, "4294967296"), "%s", out);
    free(out);
    cr_expect_eq(train(dir, "m32",
                       "--set train.steps=30 --set train.precision=fp16 --set train.loss_scale_init=4294967296", &out),
                 0, "2^32 is Megatron's default: %s", out);
    free(out);
    cr_expect_eq(train(dir, "none",
                       "--set train.steps=3 --set debug.inject_step=1 --set debug.inject_count=3 "
                       "--set debug.inject_kind=nan-loss",
                       &out),
                 1, "%s", out);
    cr_expect(strstr(out, "every one of the 3 steps run was skipped") != NULL, "%s", out);
    free(out);
    char p[4300];
    snprintf(p, sizeof p, "%s/ck_none/step_00000003", dir);
    struct stat st;
    cr_expect(stat(p, &st) != 0, "a final checkpoint was written: %s", p);
    tt_rmrf(dir);
    free(dir);
}
