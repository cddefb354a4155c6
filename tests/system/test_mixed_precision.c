/* Mixed precision end to end (train.precision bf16 | fp16, docs/precision.md)
 * through the built binary: bf16 and fp16 track the fp32 loss curve, the
 * parameters really are 16-bit and the master weights fp32 (allocator
 * accounting, checkpoint dtypes), fp16's dynamic loss scale skips exactly an
 * overflowing step and halves (and grows after its window), resume is bit
 * for bit in bf16 and fp16, checkpoints cross between precisions, and a
 * tp=2 dp=2 bf16 run tracks the single-rank bf16 run. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers/equiv.h"
#include "helpers/testutil.h"
#include "kernels/half.h"
#include "model/ckpt/safetensors.h"

#define MAX_STEPS 256

/* A run of the tiny config in dir/<name> (its own token files in dir). */
static int train(const char *dir, const char *name, const char *env, const char *extra, char **out) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "%s timeout 120 %s train %s/configs/tiny-test.json --threads 1 --set data.train=%s/train.bin "
             "--set data.val=%s/val.bin --set checkpoint.dir=%s/ck_%s --set log.dir=%s/log_%s %s",
             env ? env : "", tt_bin("trident"), TRI_SOURCE_DIR, dir, dir, dir, name, dir, name, extra);
    return tt_run(cmd, out);
}

static char *make_dir(void) {
    char *dir = tt_mkdtemp(), p[4200];
    snprintf(p, sizeof p, "%s/train.bin", dir);
    tt_write_llmc_random(p, 20000, 256, 21);
    snprintf(p, sizeof p, "%s/val.bin", dir);
    tt_write_llmc_random(p, 4000, 256, 22);
    return dir;
}

/* One run's metrics.jsonl by step: loss[s-1] (NaN where none), skipped[s-1],
 * scale[s-1] (the loss scale after step s; 0 when not logged), and the
 * accounting of the "mem" line. */
typedef struct metrics {
    double loss[MAX_STEPS], scale[MAX_STEPS];
    int skipped[MAX_STEPS];
    int n; /* last step seen */
    double mem_params, mem_grads, mem_optim;
} metrics;

static double num_after(const char *line, const char *key) {
    const char *p = strstr(line, key);
    return p ? strtod(p + strlen(key), NULL) : NAN;
}

static void read_metrics(const char *dir, const char *name, metrics *m) {
    char p[4200];
    snprintf(p, sizeof p, "%s/log_%s/metrics.jsonl", dir, name);
    char *text = tt_read(p);
    cr_assert(text != NULL, "no %s", p);
    memset(m, 0, sizeof *m);
    for (int i = 0; i < MAX_STEPS; i++) m->loss[i] = NAN;
    for (char *line = text; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = '\0';
        int s = (int)num_after(line, "\"step\": ");
        cr_assert(s >= 1 && s <= MAX_STEPS, "%s: %s", p, line);
        if (strstr(line, "\"mem\": ")) {
            m->mem_params = num_after(line, "\"params\": ");
            m->mem_grads = num_after(line, "\"grads\": ");
            m->mem_optim = num_after(line, "\"optim\": ");
        }
        if (strstr(line, "\"loss\": ")) m->loss[s - 1] = num_after(line, "\"loss\": ");
        if (strstr(line, "\"skipped\": true")) m->skipped[s - 1] = 1;
        if (strstr(line, "\"loss_scale\": ")) m->scale[s - 1] = num_after(line, "\"loss_scale\": ");
        if (s > m->n && !strstr(line, "\"val_loss\"")) m->n = s;
        line = nl ? nl + 1 : NULL;
    }
    free(text);
}

/* The latest checkpoint directory of dir/ck_<name> (malloc'd). */
static char *latest(const char *dir, const char *name) {
    char cmd[4300], *out = NULL;
    snprintf(cmd, sizeof cmd, "cat %s/ck_%s/latest", dir, name);
    cr_assert_eq(tt_run(cmd, &out), 0);
    out[strcspn(out, "\n")] = '\0';
    char *p = malloc(8400);
    snprintf(p, 8400, "%s/ck_%s/%s", dir, name, out);
    free(out);
    return p;
}

/* Tensor `name` of t (asserts it is there). */
static const float *tensor(const tt_tensors *t, const char *name, size_t *n, tri_dtype *dt) {
    int e = tri_st_layout_find(&t->f.layout, name);
    cr_assert(e >= 0, "%s: no tensor %s", t->f.path, name);
    *n = tri_st_numel(&t->f.layout.entries[e]);
    if (dt) *dt = t->f.layout.entries[e].dtype;
    return t->v[e];
}

/* ------------------------------------------------------------------------ */

/* 200 steps of the tiny model (about a second each run). Tolerance: the
 * final loss within 2% of fp32's (the issue's), every step within 5%: bf16
 * keeps 8 significant bits in the weights and activations, so the curves
 * part by a fraction of a percent (measured: at most 0.2% over the 200
 * steps); fp16 has 11 bits but a dynamic loss scale that may skip a step
 * (measured: one skip, at most 1.7% on the step after it). (Measured on
 * the KJV text; on this test's token stream see the messages.) The loss
 * falls by more than 10% over the run (asserted), so a 16-bit run that did
 * not train would leave these bounds. */
Test(mixed, bf16_and_fp16_track_the_fp32_loss_curve_over_200_steps, .timeout = 240) {
    char *dir = make_dir(), *out = NULL;
    const char *names[3] = {"fp32", "bf16", "fp16"};
    static metrics m[3];
    for (int i = 0; i < 3; i++) {
        char extra[256];
        snprintf(extra, sizeof extra, "--set train.steps=200 --set train.precision=%s", names[i]);
        cr_assert_eq(train(dir, names[i], NULL, extra, &out), 0, "%s", out);
        free(out);
        read_metrics(dir, names[i], &m[i]);
        cr_assert_eq(m[i].n, 200, "%s", names[i]);
    }
    double f32 = m[0].loss[199];
    cr_expect(f32 < 0.9 * m[0].loss[0], "fp32 did not train: %g -> %g", m[0].loss[0], f32);
    for (int i = 1; i < 3; i++) {
        double d = fabs(m[i].loss[199] - f32) / f32;
        cr_expect(d <= 0.02, "%s final loss %.6f vs fp32 %.6f: %.3f%% apart (> 2%%)", names[i], m[i].loss[199], f32,
                  100 * d);
        int compared = 0;
        double worst = 0;
        for (int s = 0; s < 200; s++) {
            if (m[i].skipped[s]) continue;
            cr_assert(isfinite(m[i].loss[s]), "%s step %d: no loss", names[i], s + 1);
            double ds = fabs(m[i].loss[s] - m[0].loss[s]) / m[0].loss[s];
            worst = ds > worst ? ds : worst;
            cr_expect(ds <= 0.05, "%s step %d: %.6f vs fp32 %.6f", names[i], s + 1, m[i].loss[s], m[0].loss[s]);
            compared++;
        }
        cr_expect(compared >= 190, "%s: only %d steps not skipped", names[i], compared);
        cr_log_info("%s: final loss %.6f vs fp32 %.6f (%.3f%%), worst step %.3f%%, %d skipped\n", names[i],
                    m[i].loss[199], f32, 100 * d, 100 * worst, 200 - compared);
    }
    /* the parameters are 16-bit, the gradients fp32, and the optimizer holds
     * fp32 master weights besides the two moments (allocator accounting) */
    for (int i = 1; i < 3; i++) {
        cr_expect(m[i].mem_params * 2 == m[0].mem_params, "%s params %g B vs fp32 %g B", names[i], m[i].mem_params,
                  m[0].mem_params);
        cr_expect(m[i].mem_grads == m[0].mem_grads, "%s grads %g B vs fp32 %g B", names[i], m[i].mem_grads,
                  m[0].mem_grads);
        cr_expect(m[i].mem_optim * 2 == m[0].mem_optim * 3, "%s optim %g B vs fp32 %g B (want 3/2: master + 2 moments)",
                  names[i], m[i].mem_optim, m[0].mem_optim);
    }
    /* bf16's checkpoint: model.safetensors fp32 by default, equal to its
     * bf16 parameters (exactly representable), and fp32 master.* tensors in
     * the optimizer file from which those parameters round */
    char *ck = latest(dir, "bf16");
    tt_tensors mod, opt;
    tt_tensors_load(&mod, ck, "model.safetensors");
    tt_tensors_load(&opt, ck, "optimizer.safetensors");
    size_t checked = 0, differ = 0;
    for (size_t e = 0; e < mod.f.layout.n; e++) {
        const tri_st_entry *en = &mod.f.layout.entries[e];
        cr_expect_eq(en->dtype, TRI_F32, "%s", en->name);
        char mname[300];
        snprintf(mname, sizeof mname, "master.%s", en->name);
        size_t n;
        tri_dtype dt;
        const float *w = mod.v[e], *mw = tensor(&opt, mname, &n, &dt);
        cr_expect_eq(dt, TRI_F32, "%s", mname);
        cr_assert_eq(n, tri_st_numel(en));
        for (size_t j = 0; j < n; j++) {
            cr_assert(tri_f32_bits(w[j]) == tri_f32_bits(tri_round_bf16(mw[j])), "%s[%zu]: %a is not bf16(%a)",
                      en->name, j, w[j], mw[j]);
            differ += w[j] != mw[j];
        }
        checked += n;
    }
    cr_expect(differ > checked / 2, "the masters should carry more bits than bf16: %zu of %zu differ", differ, checked);
    tt_tensors_free(&mod);
    tt_tensors_free(&opt);
    free(ck);
    /* fp32 keeps its checkpoint format: no master.* tensors */
    ck = latest(dir, "fp32");
    tt_tensors_load(&opt, ck, "optimizer.safetensors");
    cr_expect_eq(tri_st_layout_find(&opt.f.layout, "master.transformer.wte.weight"), -1);
    tt_tensors_free(&opt);
    free(ck);
    tt_rmrf(dir);
    free(dir);
}

/* TRIDENT_DEBUG_FP16_OVERFLOW_STEP=4 makes step 4's gradient non-finite:
 * that step, and only it, is skipped (logged), the scale halves, and the
 * parameters and moments after step 4 are exactly those after step 3 of a
 * run without the fault (no update happened). A high initial scale
 * overflows by itself and is halved until it fits. */
Test(mixed, fp16_forced_overflow_skips_exactly_that_step_and_halves_the_scale, .timeout = 120) {
    char *dir = make_dir(), *out = NULL;
    cr_assert_eq(train(dir, "inj", "TRIDENT_DEBUG_FP16_OVERFLOW_STEP=4",
                       "--set train.steps=8 --set train.precision=fp16 --set checkpoint.every=4", &out),
                 0, "%s", out);
    cr_expect(strstr(out, "step     4/8 | skipped: fp16 gradient overflow") != NULL, "%s", out);
    cr_expect(strstr(out, "loss scale now 32768") != NULL, "%s", out);
    free(out);
    metrics m;
    read_metrics(dir, "inj", &m);
    cr_assert_eq(m.n, 8);
    for (int s = 0; s < 8; s++) {
        cr_expect_eq(m.skipped[s], s == 3, "step %d skipped: %d", s + 1, m.skipped[s]);
        cr_expect(s == 3 ? isnan(m.loss[s]) : isfinite(m.loss[s]), "step %d loss %g", s + 1, m.loss[s]);
        cr_expect_eq(m.scale[s], s < 3 ? 65536.0 : 32768.0, "step %d: loss scale %g", s + 1, m.scale[s]);
    }
    /* the same run stopped after step 3, without the fault */
    cr_assert_eq(train(dir, "ref", NULL, "--set train.steps=3 --set train.precision=fp16", &out), 0, "%s", out);
    free(out);
    metrics r;
    read_metrics(dir, "ref", &r);
    for (int s = 0; s < 3; s++)
        cr_expect(r.loss[s] == m.loss[s], "step %d: %.17g vs %.17g", s + 1, r.loss[s], m.loss[s]);
    char a[4300], b[4300], cmd[9000];
    snprintf(a, sizeof a, "%s/ck_inj/step_00000004", dir);
    snprintf(b, sizeof b, "%s/ck_ref/step_00000003", dir);
    snprintf(cmd, sizeof cmd, "cmp %s/model.safetensors %s/model.safetensors", a, b);
    cr_expect_eq(tt_run(cmd, &out), 0, "the skipped step changed the parameters: %s", out);
    free(out);
    /* the optimizer files differ only in their step metadata: compare tensors */
    tt_expect_same_tensors(a, b, "optimizer.safetensors", "the skipped step's optimizer");
    snprintf(cmd, sizeof cmd, "cat %s/state.json", a);
    cr_assert_eq(tt_run(cmd, &out), 0);
    cr_expect(strstr(out, "\"optimizer_updates\":\t3") != NULL, "%s", out);
    cr_expect(strstr(out, "\"loss_scale\":\t32768") != NULL, "%s", out);
    cr_expect(strstr(out, "\"samples_consumed\":\t32") != NULL, "the skipped batch is consumed: %s", out);
    free(out);
    /* growth: with a window of 2 the scale doubles after every 2 clean steps */
    cr_assert_eq(train(dir, "grow", NULL,
                       "--set train.steps=6 --set train.precision=fp16 --set train.loss_scale_window=2", &out),
                 0, "%s", out);
    free(out);
    metrics g;
    read_metrics(dir, "grow", &g);
    const double want[6] = {65536, 131072, 131072, 262144, 262144, 524288};
    for (int s = 0; s < 6; s++) cr_expect_eq(g.scale[s], want[s], "step %d: scale %g", s + 1, g.scale[s]);
    /* too large a scale overflows in fp16 by itself and is halved until it fits */
    cr_assert_eq(train(dir, "big", NULL,
                       "--set train.steps=30 --set train.precision=fp16 --set train.loss_scale_init=1e9", &out),
                 0, "%s", out);
    free(out);
    metrics big;
    read_metrics(dir, "big", &big);
    int skips = 0;
    for (int s = 0; s < 30; s++) skips += big.skipped[s];
    cr_expect(skips > 0 && big.scale[29] < 1e9 && isfinite(big.loss[29]), "skips %d, final scale %g, loss %g", skips,
              big.scale[29], big.loss[29]);
    for (int s = 1; s < 30; s++)
        if (big.skipped[s]) cr_expect_eq(big.scale[s], big.scale[s - 1] / 2, "step %d", s + 1);
    tt_rmrf(dir);
    free(dir);
}

/* a run of 8 steps against 4 + --resume + 4, in `prec` with `extra` */
static void check_resume(const char *prec, const char *extra) {
    char *dir = make_dir(), *out = NULL, ea[1024], eb[1100];
    snprintf(ea, sizeof ea, "--set train.steps=8 --set train.precision=%s %s", prec, extra);
    cr_assert_eq(train(dir, "a", NULL, ea, &out), 0, "%s", out);
    free(out);
    snprintf(eb, sizeof eb, "%s --stop-at-step 4", ea);
    cr_assert_eq(train(dir, "b", NULL, eb, &out), 0, "%s", out);
    free(out);
    snprintf(eb, sizeof eb, "%s --resume", ea);
    cr_assert_eq(train(dir, "b", NULL, eb, &out), 0, "%s", out);
    cr_expect(strstr(out, "resumed from") != NULL, "%s", out);
    free(out);
    metrics a, b;
    read_metrics(dir, "a", &a);
    read_metrics(dir, "b", &b);
    cr_assert_eq(a.n, 8);
    cr_assert_eq(b.n, 8);
    for (int s = 0; s < 8; s++) {
        cr_expect(memcmp(&a.loss[s], &b.loss[s], sizeof(double)) == 0, "%s step %d: %.17g vs %.17g", prec, s + 1,
                  a.loss[s], b.loss[s]);
        cr_expect_eq(a.scale[s], b.scale[s], "%s step %d: loss scale", prec, s + 1);
        cr_expect_eq(a.skipped[s], b.skipped[s], "%s step %d: skipped", prec, s + 1);
    }
    tt_rmrf(dir);
    free(dir);
}

/* model.safetensors in bf16 loses the master weights' low bits: the
 * optimizer file's master.* bring them back, so resume is exact */
Test(mixed, bf16_resume_gives_the_uninterrupted_losses, .timeout = 120) {
    check_resume("bf16", "--set checkpoint.dtype=bf16");
    check_resume("bf16", "--set parallel.zero=1");
}

/* the scale changes before the stop (window 3, an overflow at step 2) and is
 * restored from state.json with its clean-step count */
Test(mixed, fp16_resume_restores_the_loss_scale, .timeout = 120) {
    char env[] = "TRIDENT_DEBUG_FP16_OVERFLOW_STEP=2";
    cr_assert_eq(putenv(env), 0);
    check_resume("fp16", "--set train.loss_scale_window=3 --set checkpoint.dtype=fp16");
}

/* A bf16 run's checkpoint (model.safetensors in BF16) loads in an fp32 run,
 * which takes the fp32 master weights as its parameters; an fp32 run's
 * checkpoint loads in a bf16 run, whose masters are then the fp32 values and
 * its parameters their bf16 rounding. Each is checked by saving right after
 * the load (train.steps = the step resumed) and reading the tensors back. */
Test(mixed, checkpoints_cross_between_fp32_and_bf16, .timeout = 120) {
    char *dir = make_dir(), *out = NULL, cmd[9000];
    cr_assert_eq(
        train(dir, "b16", NULL, "--set train.steps=4 --set train.precision=bf16 --set checkpoint.dtype=bf16", &out), 0,
        "%s", out);
    free(out);
    cr_assert_eq(train(dir, "f32", NULL, "--set train.steps=4", &out), 0, "%s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "cp -r %s/ck_b16 %s/ck_b16_to_f32 && cp -r %s/ck_f32 %s/ck_f32_to_b16", dir, dir, dir,
             dir);
    cr_assert_eq(tt_run(cmd, &out), 0, "%s", out);
    free(out);
    cr_assert_eq(train(dir, "b16_to_f32", NULL, "--set train.steps=4 --resume", &out), 0, "%s", out);
    free(out);
    cr_assert_eq(train(dir, "f32_to_b16", NULL, "--set train.steps=4 --resume --set train.precision=bf16", &out), 0,
                 "%s", out);
    free(out);
    char *c_b16 = latest(dir, "b16"), *c_f32 = latest(dir, "f32"), *c_bf = latest(dir, "b16_to_f32"),
         *c_fb = latest(dir, "f32_to_b16");
    tt_tensors b16m, b16o, f32m, bfm, bfo, fbm, fbo;
    tt_tensors_load(&b16m, c_b16, "model.safetensors");
    tt_tensors_load(&b16o, c_b16, "optimizer.safetensors");
    tt_tensors_load(&f32m, c_f32, "model.safetensors");
    tt_tensors_load(&bfm, c_bf, "model.safetensors");
    tt_tensors_load(&bfo, c_bf, "optimizer.safetensors");
    tt_tensors_load(&fbm, c_fb, "model.safetensors");
    tt_tensors_load(&fbo, c_fb, "optimizer.safetensors");
    for (size_t e = 0; e < b16m.f.layout.n; e++) {
        const char *name = b16m.f.layout.entries[e].name;
        char mname[300];
        snprintf(mname, sizeof mname, "master.%s", name);
        size_t n, n2;
        tri_dtype dt;
        cr_expect_eq(b16m.f.layout.entries[e].dtype, TRI_BF16, "%s", name);
        const float *master = tensor(&b16o, mname, &n, NULL);
        const float *as_f32 = tensor(&bfm, name, &n2, &dt); /* the fp32 run's parameters */
        cr_assert_eq(n, n2);
        cr_expect_eq(dt, TRI_F32);
        cr_expect(memcmp(master, as_f32, n * sizeof(float)) == 0, "bf16 -> fp32: %s is not the master weights", name);
        const float *f = tensor(&f32m, name, &n, NULL);
        const float *w = tensor(&fbm, name, &n2, NULL), *mw = tensor(&fbo, mname, &n2, NULL);
        for (size_t j = 0; j < n; j++) {
            cr_assert(tri_f32_bits(mw[j]) == tri_f32_bits(f[j]), "fp32 -> bf16: master %s[%zu] %a vs %a", name, j,
                      mw[j], f[j]);
            cr_assert(tri_f32_bits(w[j]) == tri_f32_bits(tri_round_bf16(f[j])), "fp32 -> bf16: %s[%zu] %a", name, j,
                      w[j]);
        }
        /* and the bf16 file holds the bf16 parameters: the rounded masters */
        const float *b = b16m.v[e];
        for (size_t j = 0; j < n; j++)
            cr_assert(tri_f32_bits(b[j]) == tri_f32_bits(tri_round_bf16(master[j])), "%s[%zu]", name, j);
    }
    cr_expect_eq(tri_st_layout_find(&bfo.f.layout, "master.transformer.wte.weight"), -1,
                 "an fp32 run saving fp32 writes no master.* (model.safetensors is the masters)");
    tt_tensors_free(&b16m);
    tt_tensors_free(&b16o);
    tt_tensors_free(&f32m);
    tt_tensors_free(&bfm);
    tt_tensors_free(&bfo);
    tt_tensors_free(&fbm);
    tt_tensors_free(&fbo);
    free(c_b16);
    free(c_f32);
    free(c_bf);
    free(c_fb);
    tt_rmrf(dir);
    free(dir);
}

/* tp=2 dp=2 (and with zero=1), pp=2 dp=2 zero=1 and tp=2 pp=2 with sequence
 * parallelism in bf16 against one rank in bf16, 20 steps.
 * Not bit for bit: with tensor parallelism each rank rounds its partial
 * output of a row-parallel linear to bf16 before the all-reduce (which sums
 * in fp32 and rounds once), where one rank rounds the whole sum once; the
 * data-parallel sum of fp32 gradients is associated differently. Each such
 * rounding moves an activation by at most 2^-9 relative (bf16's half ulp);
 * the loss averages B*T of them, so the curves stay within a small fraction
 * of that: 0.2% per step is asserted (measured: about 0.01%). The same
 * layouts in fp32 agree to 1e-6 (tests/system/test_parallel.c), so a larger gap
 * would be a precision bug, not parallelism. */
Test(mixed, bf16_layouts_track_the_single_rank_bf16_run, .timeout = 240) {
    char *dir = make_dir(), *out = NULL, cmd[9000];
    enum { N_LAYOUTS = 5 };
    const char *names[N_LAYOUTS] = {"one", "tp2dp2", "tp2dp2z", "pp2dp2z", "tp2pp2sp"};
    const char *layouts[N_LAYOUTS] = {"", "--set parallel.tp=2 --set parallel.dp=2",
                                      "--set parallel.tp=2 --set parallel.dp=2 --set parallel.zero=1",
                                      /* pipelines: 16-bit activations cross the stages, the tied embedding's
         * two 16-bit copies take the same master update */
                                      "--set parallel.pp=2 --set parallel.dp=2 --set parallel.zero=1",
                                      "--set parallel.tp=2 --set parallel.pp=2 --set parallel.sequence_parallel=1"};
    static metrics m[N_LAYOUTS];
    for (int i = 0; i < N_LAYOUTS; i++) {
        snprintf(cmd, sizeof cmd,
                 "cd %s && timeout 200 %s --log-dir %s/ranks_%s -- %s train %s/configs/tiny-test.json "
                 "--set data.train=%s/train.bin --set data.val=%s/val.bin --set model.n_head=4 --set train.steps=20 "
                 "--set train.precision=bf16 --set checkpoint.dir=%s/ck_%s --set log.dir=%s/log_%s %s",
                 dir, tt_bin("tridentrun"), dir, names[i], tt_bin("trident"), TRI_SOURCE_DIR, dir, dir, dir, names[i],
                 dir, names[i], layouts[i]);
        cr_assert_eq(tt_run(cmd, &out), 0, "%s", out);
        free(out);
        read_metrics(dir, names[i], &m[i]);
        cr_assert_eq(m[i].n, 20);
    }
    for (int i = 1; i < N_LAYOUTS; i++)
        for (int s = 0; s < 20; s++)
            cr_expect(fabs(m[i].loss[s] - m[0].loss[s]) <= 0.002 * m[0].loss[s], "%s step %d: %.17g vs %.17g", names[i],
                      s + 1, m[i].loss[s], m[0].loss[s]);
    /* ZeRO changes where the update runs, not its arithmetic: bit for bit */
    for (int s = 0; s < 20; s++)
        cr_expect(m[2].loss[s] == m[1].loss[s], "zero=1 step %d: %.17g vs %.17g", s + 1, m[2].loss[s], m[1].loss[s]);
    tt_rmrf(dir);
    free(dir);
}
