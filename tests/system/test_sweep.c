/* `trident sweep` end to end through the built binary: a 2 x 2 grid of a tiny
 * model writes four run directories and four summary lines whose parameter and
 * FLOP counts match the checkpoints' own tensors; a second sweep reruns
 * nothing; a point killed halfway resumes and ends where an uninterrupted run
 * ends; a dp = 2 point goes through tridentrun and gives the one-rank losses;
 * bad sweep files are refused with the file and the key named. Also
 * `log.plot = true` on `trident train`. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "helpers/testutil.h"

/* A directory with token files and a tiny base config (vocab 256, T = 16). */
static char *make_dir(void) {
    char *dir = tt_mkdtemp(), p[4200];
    snprintf(p, sizeof p, "%s/train.bin", dir);
    tt_write_llmc_random(p, 20000, 256, 1);
    snprintf(p, sizeof p, "%s/val.bin", dir);
    tt_write_llmc_random(p, 4000, 256, 2);
    snprintf(p, sizeof p, "%s/base.json", dir);
    FILE *f = fopen(p, "w");
    cr_assert(f);
    fprintf(f,
            "{\"model\": {\"n_layer\": 1, \"n_head\": 2, \"n_embd\": 32, \"seq_len\": 16, \"vocab_size\": 256},\n"
            " \"train\": {\"global_batch\": 8, \"micro_batch\": 2, \"steps\": 6, \"lr\": 1e-3, \"min_lr\": 1e-4,\n"
            "           \"warmup_steps\": 1, \"eval_every\": 3, \"eval_batches\": 2},\n"
            " \"data\": {\"train\": \"%s/train.bin\", \"val\": \"%s/val.bin\"}}\n",
            dir, dir);
    fclose(f);
    return dir;
}

static void write_text(const char *dir, const char *name, const char *text) {
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    cr_assert(f, "%s", p);
    fputs(text, f);
    fclose(f);
}

static int sweep(const char *dir, const char *file, const char *extra, char **out) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "cd %s && timeout 300 %s sweep %s %s", dir, tt_bin("trident"), file, extra);
    return tt_run(cmd, out);
}

/* The summary's lines, parsed. */
static int summary(const char *dir, cJSON **lines, int max) {
    char p[4200];
    snprintf(p, sizeof p, "%s/out/summary.jsonl", dir);
    char *text = tt_read(p);
    cr_assert(text, "no %s", p);
    int n = 0;
    for (char *save = NULL, *ln = strtok_r(text, "\n", &save); ln && n < max; ln = strtok_r(NULL, "\n", &save)) {
        lines[n] = cJSON_Parse(ln);
        cr_assert(lines[n], "unparsable summary line: %s", ln);
        n++;
    }
    free(text);
    return n;
}

static double num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    cr_assert(cJSON_IsNumber(v), "summary key %s missing or not a number", key);
    return v->valuedouble;
}

static const char *str(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    cr_assert(cJSON_IsString(v), "summary key %s missing or not a string", key);
    return v->valuestring;
}

/* Elements of every tensor in a checkpoint's model.safetensors, counted from
 * its header (an independent count of the parameters). */
static double safetensors_elements(const char *ckpt_dir) {
    char p[8800];
    snprintf(p, sizeof p, "%s/latest", ckpt_dir);
    char *latest = tt_read(p);
    cr_assert(latest, "no %s", p);
    latest[strcspn(latest, "\n")] = '\0';
    snprintf(p, sizeof p, "%s/%s/model.safetensors", ckpt_dir,
             strrchr(latest, '/') ? strrchr(latest, '/') + 1 : latest);
    free(latest);
    FILE *f = fopen(p, "rb");
    cr_assert(f, "%s", p);
    unsigned char h8[8];
    cr_assert_eq(fread(h8, 1, 8, f), 8);
    unsigned long long hl = 0;
    for (int i = 7; i >= 0; i--) hl = (hl << 8) | h8[i];
    char *hdr = malloc(hl + 1);
    cr_assert_eq(fread(hdr, 1, hl, f), hl);
    hdr[hl] = '\0';
    fclose(f);
    cJSON *o = cJSON_Parse(hdr);
    free(hdr);
    double total = 0;
    for (const cJSON *t = o ? o->child : NULL; t; t = t->next) {
        const cJSON *shape = cJSON_GetObjectItemCaseSensitive(t, "shape");
        if (!cJSON_IsArray(shape)) continue; /* __metadata__ */
        double e = 1;
        for (const cJSON *d = shape->child; d; d = d->next) e *= d->valuedouble;
        total += e;
    }
    cJSON_Delete(o);
    return total;
}

static double mtime_of(const char *path) {
    struct stat st;
    cr_assert_eq(stat(path, &st), 0, "%s", path);
    return (double)st.st_mtim.tv_sec + 1e-9 * (double)st.st_mtim.tv_nsec;
}

Test(sweep, grid_runs_each_point_once_and_summarises_it, .timeout = 300) {
    char *dir = make_dir(), *out = NULL;
    write_text(dir, "s.json",
               "{\"description\": \"a 2 x 2 test grid\", \"base\": \"base.json\", \"out\": \"out\", \"threads\": 1,\n"
               " \"set\": {\"train.seed\": 7},\n"
               " \"grid\": {\"model.n_layer\": [1, 2]},\n"
               " \"zip\": [{\"model.n_embd\": [32, 64], \"model.n_head\": [2, 4]}]}\n");
    cr_assert_eq(sweep(dir, "s.json", "", &out), 0, "%s", out);
    cr_expect(strstr(out, "4 points: 4 run, 0 already done, 0 failed") != NULL, "%s", out);
    free(out);
    cJSON *lines[8];
    int n = summary(dir, lines, 8);
    cr_assert_eq(n, 4, "summary lines");
    static const int want[4][3] = {{1, 32, 2}, {1, 64, 4}, {2, 32, 2}, {2, 64, 4}}; /* last axis fastest */
    double mt[4];
    for (int i = 0; i < 4; i++) {
        const cJSON *o = lines[i];
        int L = want[i][0], C = want[i][1], T = 16, G = 8, steps = 6;
        cr_expect_eq((int)num(o, "model.n_layer"), L);
        cr_expect_eq((int)num(o, "model.n_embd"), C);
        cr_expect_eq((int)num(o, "model.n_head"), want[i][2]);
        cr_expect_str_eq(str(o, "status"), "ok");
        char rd[4200], ck[4300], m[4300], done[4300];
        snprintf(rd, sizeof rd, "%s/%s", dir, str(o, "run_dir"));
        snprintf(ck, sizeof ck, "%s/ckpt", rd);
        snprintf(m, sizeof m, "%s/metrics.jsonl", rd);
        snprintf(done, sizeof done, "%s/done", rd);
        mt[i] = mtime_of(m);
        (void)mtime_of(done);
        /* parameters: the checkpoint's tensors; FLOPs: 6 (N - T C) + 12 L C T per token (docs/performance.md) */
        double params = safetensors_elements(ck);
        cr_expect(num(o, "params") == params, "point %d: params %g, the checkpoint holds %g", i, num(o, "params"),
                  params);
        double fpt = 6.0 * (params - (double)T * C) + 12.0 * L * C * T;
        cr_expect(num(o, "flops_per_token") == fpt, "point %d: flops/token %g, expected %g", i,
                  num(o, "flops_per_token"), fpt);
        cr_expect_eq((int)num(o, "steps"), steps);
        cr_expect(num(o, "tokens") == (double)steps * G * T);
        cr_expect(fabs(num(o, "flops") - fpt * steps * G * T) <= 1e-9 * fpt * steps * G * T);
        /* the losses are the run's own: the last line of its metrics */
        double *loss;
        int nl = tt_losses(m, &loss);
        cr_assert_eq(nl, steps);
        cr_expect(num(o, "final_loss") == loss[nl - 1], "final loss %.17g vs metrics %.17g", num(o, "final_loss"),
                  loss[nl - 1]);
        free(loss);
        cr_expect(isfinite(num(o, "final_val_loss")) && num(o, "best_val_loss") <= num(o, "final_val_loss"));
        cr_expect(num(o, "step_ms") > 0 && num(o, "tokens_per_s") > 0 && num(o, "mfu") > 0);
        cr_expect_eq((int)num(o, "ranks"), 1);
        cJSON_Delete(lines[i]);
    }
    /* different sizes gave different runs (the checks above can tell points apart) */
    /* a second sweep reruns nothing: the same metrics files, untouched */
    cr_assert_eq(sweep(dir, "s.json", "", &out), 0, "%s", out);
    cr_expect(strstr(out, "4 points: 0 run, 4 already done, 0 failed") != NULL, "%s", out);
    free(out);
    n = summary(dir, lines, 8);
    cr_assert_eq(n, 4);
    for (int i = 0; i < 4; i++) {
        char m[4300];
        snprintf(m, sizeof m, "%s/%s/metrics.jsonl", dir, str(lines[i], "run_dir"));
        cr_expect(mtime_of(m) == mt[i], "point %d was rerun", i);
        cr_expect_str_eq(str(lines[i], "status"), "ok");
        cJSON_Delete(lines[i]);
    }
    /* a changed fixed setting does not silently reuse the finished run directories */
    cr_expect_eq(sweep(dir, "s.json", "--set train.steps=8", &out), 2, "%s", out);
    cr_expect(strstr(out, "was written for other settings") != NULL, "%s", out);
    free(out);
    tt_rmrf(dir);
    free(dir);
}

Test(sweep, point_killed_halfway_resumes_to_the_uninterrupted_result, .timeout = 300) {
    char *dir = make_dir(), *out = NULL;
    /* both points die at step 4 (debug.fail_step 3) after a checkpoint at step 2
     * (synchronous: an asynchronous one may still be in its background write
     * when the injected _exit comes a step later, and is then rightly lost) */
    write_text(dir, "s.json",
               "{\"base\": \"base.json\", \"out\": \"out\", \"threads\": 1,\n"
               " \"set\": {\"debug.fail_step\": 3, \"debug.fail_rank\": 0, \"checkpoint.every\": 2,\n"
               "         \"checkpoint.async\": false},\n"
               " \"grid\": {\"train.lr\": [0.001, 0.003]}}\n");
    cr_assert_eq(sweep(dir, "s.json", "", &out), 1, "%s", out);
    cr_expect(strstr(out, "2 run, 0 already done, 2 failed") != NULL, "%s", out);
    cr_expect(strstr(out, "failed with exit code 3") != NULL, "%s", out);
    free(out);
    cJSON *lines[4];
    cr_assert_eq(summary(dir, lines, 4), 2);
    for (int i = 0; i < 2; i++) {
        cr_expect_str_eq(str(lines[i], "status"), "failed");
        cr_expect_eq((int)num(lines[i], "exit_code"), 3);
        cr_expect_eq((int)num(lines[i], "steps"), 3, "logged steps before the crash");
        cJSON_Delete(lines[i]);
    }
    /* the second sweep resumes both from step 2 (--resume skips the fault) */
    cr_assert_eq(sweep(dir, "s.json", "", &out), 0, "%s", out);
    cr_expect(strstr(out, "2 run, 0 already done, 0 failed") != NULL, "%s", out);
    cr_expect(strstr(out, "resuming") != NULL, "%s", out);
    free(out);
    cr_assert_eq(summary(dir, lines, 4), 2);
    for (int i = 0; i < 2; i++) {
        cr_expect_str_eq(str(lines[i], "status"), "ok");
        cr_expect_eq((int)num(lines[i], "steps"), 6);
        char log[4300];
        snprintf(log, sizeof log, "%s/%s/train.log", dir, str(lines[i], "run_dir"));
        char *text = tt_read(log);
        cr_expect(text && strstr(text, "resumed from") && strstr(text, "at step 2"), "%s", text ? text : log);
        free(text);
        /* the uninterrupted run of the same point ends with the same loss */
        char cmd[12288], ref[4300];
        snprintf(ref, sizeof ref, "%s/ref%d", dir, i);
        const cJSON *lr = cJSON_GetObjectItemCaseSensitive(lines[i], "train.lr");
        cr_assert(cJSON_IsNumber(lr));
        snprintf(cmd, sizeof cmd,
                 "cd %s && %s train base.json --threads 1 --set train.lr=%.17g --set checkpoint.dir=%s/ckpt "
                 "--set log.dir=%s",
                 dir, tt_bin("trident"), lr->valuedouble, ref, ref);
        cr_assert_eq(tt_run(cmd, &out), 0, "%s", out);
        free(out);
        char m[4400];
        snprintf(m, sizeof m, "%s/metrics.jsonl", ref);
        double *loss;
        int nl = tt_losses(m, &loss);
        cr_assert_eq(nl, 6);
        cr_expect(num(lines[i], "final_loss") == loss[5], "resumed %.17g vs uninterrupted %.17g",
                  num(lines[i], "final_loss"), loss[5]);
        free(loss);
        cJSON_Delete(lines[i]);
    }
    tt_rmrf(dir);
    free(dir);
}

/* parallel.dp = 2 runs through tridentrun (2 ranks) and, the batch being a
 * function of (seed, step) only, gives the one-rank losses */
Test(sweep, two_rank_point_runs_through_tridentrun, .timeout = 300) {
    char *dir = make_dir(), *out = NULL;
    write_text(dir, "s.json",
               "{\"base\": \"base.json\", \"out\": \"elsewhere\", \"set\": {\"train.steps\": 100},\n"
               " \"grid\": {\"parallel.dp\": [1, 2]}}\n");
    /* the command line's --set wins over the file's "set", --out over its "out" */
    static const char *const opts = "--out out --set train.steps=4";
    cr_assert_eq(sweep(dir, "s.json", "--dry-run --out out --set train.steps=4", &out), 0, "%s", out);
    cr_expect(strstr(out, "--set train.steps=4") != NULL && strstr(out, "train.steps=100") == NULL, "%s", out);
    cr_expect(strstr(out, "tridentrun --log-dir") != NULL, "dry run shows the launcher: %s", out);
    free(out);
    char p[4200];
    snprintf(p, sizeof p, "%s/out", dir);
    struct stat st;
    cr_expect(stat(p, &st) != 0, "--dry-run created %s", p);
    cr_assert_eq(sweep(dir, "s.json", opts, &out), 0, "%s", out);
    free(out);
    cJSON *lines[4];
    cr_assert_eq(summary(dir, lines, 4), 2);
    cr_expect_eq((int)num(lines[0], "steps"), 4);
    cr_expect_eq((int)num(lines[1], "steps"), 4);
    cr_expect_eq((int)num(lines[1], "ranks"), 2);
    cr_expect_eq((int)num(lines[1], "dp"), 2);
    snprintf(p, sizeof p, "%s/%s/ranks/rank_1.log", dir, str(lines[1], "run_dir"));
    cr_expect(stat(p, &st) == 0, "no %s: not run through tridentrun", p);
    double l1 = num(lines[0], "final_loss"), l2 = num(lines[1], "final_loss");
    cr_expect(fabs(l1 - l2) <= 1e-5 * fabs(l1), "dp=1 %.9g vs dp=2 %.9g", l1, l2);
    cr_expect_str_eq(str(lines[1], "status"), "ok");
    for (int i = 0; i < 2; i++) cJSON_Delete(lines[i]);
    tt_rmrf(dir);
    free(dir);
}

/* Each bad file: exit code 2, a message naming the file and the key, nothing run. */
Test(sweep, bad_sweep_files_name_the_file_and_the_key, .timeout = 120) {
    char *dir = make_dir();
    static const struct {
        const char *json, *expect;
    } cases[] = {
        {"{\"base\": \"base.json\", \"out\": \"out\", \"grid\": {\"model.n_embdd\": [32]}}",
         "s.json: grid: model.n_embdd: unknown config key"},
        {"{\"base\": \"base.json\", \"out\": \"out\", \"grid\": {\"model.n_embd\": 32}}",
         "s.json: grid: model.n_embd: expected a non-empty array of values, got a number"},
        {"{\"base\": \"base.json\", \"out\": \"out\", \"grid\": {\"model.n_embd\": []}}",
         "s.json: grid: model.n_embd: expected a non-empty array of values, got an empty array"},
        {"{\"base\": \"base.json\", \"out\": \"out\", \"grid\": {\"train.lr\": [0.001, [1]]}}",
         "s.json: grid: train.lr[1]: expected a number, string or boolean, got an array"},
        {"{\"base\": \"base.json\", \"out\": \"out\", \"zip\": [{\"model.n_embd\": [32, 64], \"model.n_head\": [2]}]}",
         "s.json: zip[0]: model.n_head has 1 values but model.n_embd has 2"},
        {"{\"base\": \"base.json\", \"out\": \"out\", \"set\": {\"train.lr\": 0.1}, \"grid\": {\"train.lr\": [0.1]}}",
         "s.json: grid: train.lr: given twice"},
        {"{\"base\": \"base.json\", \"out\": \"out\", \"grid\": {\"log.dir\": [\"x\"]}}",
         "s.json: grid: log.dir: set by the sweep for each point"},
        {"{\"base\": \"base.json\", \"out\": \"out\", \"gird\": {}}", "s.json: gird: unknown key"},
        {"{\"out\": \"out\"}", "s.json: base: expected the path of a config file"},
        {"{\"base\": \"base.json\"}", "s.json: out: expected an output directory"},
        {"{\"base\": \"base.json\", \"out\": \"out\", \"plot\": 1}", "s.json: plot: expected true or false"},
        {"{\"base\": \"base.json\", \"out\": \"out\",\n \"grid\": [}", "s.json: JSON syntax error at line 2"},
        {"[1]", "s.json: expected a JSON object at the top level, got an array"},
        /* a value the config refuses, in one point only: caught before any point runs */
        {"{\"base\": \"base.json\", \"out\": \"out\", \"zip\": [{\"model.n_embd\": [32, 30], \"model.n_head\": [2, "
         "4]}]}",
         "s.json: point 2 (n_embd=30_n_head=4): not a valid config"},
        {"{\"base\": \"nope.json\", \"out\": \"out\"}", "nope.json"},
        /* data that is not there: refused once, before any point runs, naming the file and the point */
        {"{\"base\": \"base.json\", \"out\": \"out\", \"set\": {\"data.train\": \"gone.bin\"}}",
         "s.json: point 1 (base): data.train = \"gone.bin\" cannot be read"},
        {"{\"base\": \"base.json\", \"out\": \"out\", \"description\": \"make val2.bin first\",\n"
         " \"grid\": {\"data.val\": [\"val.bin\", \"val2.bin\"]}}",
         "point 2 (val=val2.bin): data.val = \"val2.bin\" cannot be read (above); nothing was run (the sweep's "
         "\"description\""},
        {"{\"base\": \"base.json\", \"out\": \"out\", \"set\": {\"data.tokenizer\": \"tok.json\"}}",
         "point 1 (base): data.tokenizer = \"tok.json\": no such file"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_text(dir, "s.json", cases[i].json);
        char *out = NULL;
        int rc = sweep(dir, "s.json", "", &out);
        cr_expect_eq(rc, 2, "case %zu: exit %d: %s", i, rc, out);
        cr_expect(strstr(out, cases[i].expect) != NULL, "case %zu: expected \"%s\" in: %s", i, cases[i].expect, out);
        free(out);
        char p[4200];
        struct stat st;
        snprintf(p, sizeof p, "%s/out", dir);
        cr_expect(stat(p, &st) != 0, "case %zu: %s was created", i, p);
    }
    /* the invalid point's own message names the key the config refused */
    write_text(dir, "s.json",
               "{\"base\": \"base.json\", \"out\": \"out\", \"zip\": [{\"model.n_embd\": [32, 30], \"model.n_head\": "
               "[2, 4]}]}");
    char *out = NULL;
    cr_expect_eq(sweep(dir, "s.json", "", &out), 2);
    cr_expect(strstr(out, "model.n_embd") != NULL, "%s", out);
    free(out);
    cr_expect_eq(sweep(dir, "s.json", "--set model.bogus=1", &out), 2);
    cr_expect(strstr(out, "--set: model.bogus: unknown config key") != NULL, "%s", out);
    free(out);
    tt_rmrf(dir);
    free(dir);
}

/* log.plot = true: the run's PNGs land in log.dir; without python it is a warning, not a failure */
Test(sweep, train_log_plot_draws_the_run_or_warns, .timeout = 300) {
    char *dir = make_dir(), *out = NULL, cmd[8192];
    snprintf(cmd, sizeof cmd,
             "cd %s && %s train base.json --threads 1 --set log.plot=true --set checkpoint.dir=a/ckpt "
             "--set log.dir=a",
             dir, tt_bin("trident"));
    cr_assert_eq(tt_run(cmd, &out), 0, "%s", out);
    cr_expect(strstr(out, "loss_vs_step.png") != NULL, "%s", out);
    free(out);
    static const char *const pngs[] = {"loss_vs_step.png", "loss_vs_tokens.png"};
    for (int i = 0; i < 2; i++) {
        char p[4300];
        snprintf(p, sizeof p, "%s/a/%s", dir, pngs[i]);
        FILE *f = fopen(p, "rb");
        cr_assert(f, "no %s", p);
        unsigned char magic[8] = {0};
        cr_expect_eq(fread(magic, 1, 8, f), 8);
        fclose(f);
        cr_expect(memcmp(magic, "\x89PNG\r\n\x1a\n", 8) == 0, "%s is not a PNG", p);
    }
    snprintf(cmd, sizeof cmd,
             "cd %s && TRIDENT_PYTHON=/nonexistent/python3 %s train base.json --threads 1 --set log.plot=true "
             "--set checkpoint.dir=b/ckpt --set log.dir=b",
             dir, tt_bin("trident"));
    cr_assert_eq(tt_run(cmd, &out), 0, "a missing python must not fail the run: %s", out);
    cr_expect(strstr(out, "warning: log.plot") != NULL, "%s", out);
    free(out);
    tt_rmrf(dir);
    free(dir);
}
