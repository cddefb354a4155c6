/* `trident bench --device D --peak-tflops P` through the built binary: on the
 * CPU the peak is measured and a given one refused; with --device cuda the run
 * either trains on the GPU with MFU against the given peak, or, where this
 * machine has no usable GPU, exits 2 naming what is missing (the message of
 * tri_ops_get("cuda"), as `trident train --device cuda`). And `--profile`:
 * the per-op table and the JSON "profile" object. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers/testutil.h"

static int bench(const char *dir, const char *extra, char **out) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "%s bench %s/configs/tiny-test.json --steps 2 --threads 1 --set checkpoint.dir=%s/ckpt "
             "--set log.dir=%s/log %s",
             tt_bin("trident"), TRI_SOURCE_DIR, dir, dir, extra);
    return tt_run(cmd, out);
}

/* The number after "key": in the last JSON line of out. */
static double json_num(const char *out, const char *key) {
    const char *last = NULL;
    for (const char *q = strstr(out, "{\"config\""); q; q = strstr(q + 1, "{\"config\"")) last = q;
    cr_assert_not_null(last, "no JSON line in: %s", out);
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    const char *v = strstr(last, pat);
    cr_assert_not_null(v, "no %s in: %s", key, last);
    return strtod(v + strlen(pat), NULL);
}

Test(bench_device, the_cpu_measures_its_peak_and_refuses_a_given_one, .timeout = 120) {
    char *dir = tt_mkdtemp(), *out = NULL;
    cr_assert_eq(bench(dir, "", &out), 0, "%s", out);
    cr_assert(strstr(out, "\"device\": \"cpu\", \"precision\": \"fp32\"") && strstr(out, "  sgemm       best"), "%s",
              out);
    const double g = json_num(out, "gflops"), peak = json_num(out, "sgemm_gflops"), mfu = json_num(out, "mfu");
    /* the JSON rounds each figure (mfu to 4 decimals, gflops and sgemm_gflops to
     * 2): mfu = gflops / sgemm holds up to half a unit of each last digit,
     * carried through the quotient (a slow step of 2.5 GFLOP/s alone moves
     * it by 0.2%), and a little for the division's own rounding */
    const double tol = 0.5e-4 + mfu * (0.005 / g + 0.005 / peak) + 1e-9;
    cr_assert(peak > 0 && g > 0 && fabs(mfu - g / peak) <= tol, "mfu %g, gflops %g, sgemm %g (tolerance %g)", mfu, g,
              peak, tol);
    free(out);
    cr_assert_eq(bench(dir, "--peak-tflops 100", &out), 2, "%s", out);
    cr_assert(strstr(out, "trident: bench: --peak-tflops is for --device cuda"), "%s", out);
    free(out);
    cr_assert_eq(bench(dir, "--device cuda --peak-tflops fast", &out), 2, "%s", out);
    cr_assert(strstr(out, "--peak-tflops 'fast' is not a positive number"), "%s", out);
    free(out);
    tt_rmrf(dir);
    free(dir);
}

Test(bench_device, cuda_uses_the_given_peak_or_says_what_is_missing, .timeout = 120) {
    char *dir = tt_mkdtemp(), *out = NULL;
    const int rc = bench(dir, "--device cuda --peak-tflops 0.002", &out);
    if (rc == 2) {
        /* no GPU here: one line naming what is missing, and no run */
        cr_assert(strstr(out, "trident: --device cuda: ") && !strstr(out, "{\"config\""), "%s", out);
        cr_log_info("no GPU: %s", out);
    } else {
        cr_assert_eq(rc, 0, "%s", out);
        cr_assert(strstr(out, "\"device\": \"cuda\"") && !strstr(out, "  sgemm ") && strstr(out, "of the given peak"),
                  "%s", out);
        const double g = json_num(out, "gflops"), mfu = json_num(out, "mfu");
        cr_assert_eq(json_num(out, "sgemm_gflops"), 2.0, "the job's peak is the given one (2 GFLOP/s, one rank)");
        cr_assert(fabs(mfu - g / 2.0) <= 1e-4 + 1e-3 * mfu, "mfu %g, gflops %g", mfu, g);
    }
    free(out);
    tt_rmrf(dir);
    free(dir);
}

/* The JSON line (the last line starting with {"config"), parsed. */
static cJSON *json_line(const char *out) {
    const char *last = NULL;
    for (const char *q = strstr(out, "{\"config\""); q; q = strstr(q + 1, "{\"config\"")) last = q;
    cr_assert_not_null(last, "no JSON line in: %s", out);
    cJSON *j = cJSON_Parse(last);
    cr_assert_not_null(j, "the JSON line does not parse: %s", last);
    return j;
}

/* `trident bench configs/bench-gpt.json --steps 3 --profile`: the table, and
 * in the JSON line a "profile" object whose keys are the documented kinds
 * (docs/performance.md "Where the time goes") in order, each a number of
 * milliseconds per step: on one CPU rank every op kind the model runs takes
 * time, communication none, and the kinds add up to the step (the mean
 * step, "other" the rest, which cannot be negative on the CPU: the ops are
 * timed one after the other inside it). The GEMMs by layer part add up to
 * the three GEMM kinds. Without --profile the JSON line has no profile. */
Test(bench_device, profile_prints_the_table_and_the_documented_kinds, .timeout = 600) {
    static const char *const kinds[] = {
        "step_ms",      "gemm_fwd_ms", "gemm_dinp_ms",    "gemm_dweight_ms", "attention_fwd_ms", "attention_bwd_ms",
        "layernorm_ms", "gelu_ms",     "crossentropy_ms", "embedding_ms",    "elementwise_ms",   "optimizer_ms",
        "comm_tp_ms",   "comm_dp_ms",  "comm_pp_ms",      "comm_cp_ms",      "comm_dpcp_ms",     "other_ms"};
    static const char *const roles[] = {"qkv", "attproj", "fc", "fcproj", "head", "unknown"};
    const int n_kinds = (int)(sizeof kinds / sizeof kinds[0]);
    char *dir = tt_mkdtemp(), *out = NULL, cmd[8192];
    snprintf(cmd, sizeof cmd,
             "%s bench %s/configs/bench-gpt.json --steps 3 --threads 2 --profile --set checkpoint.dir=%s/ckpt "
             "--set log.dir=%s/log",
             tt_bin("trident"), TRI_SOURCE_DIR, dir, dir);
    cr_assert_eq(tt_run(cmd, &out), 0, "%s", out);
    cr_assert(strstr(out, "  profile     per step, the mean of 3 steps") &&
                  strstr(out, "by the clock around each op") && strstr(out, "    GEMM weight grad ") &&
                  strstr(out, "    other ") && strstr(out, "      fcproj "),
              "%s", out);
    cJSON *j = json_line(out), *prof = cJSON_GetObjectItemCaseSensitive(j, "profile");
    cr_assert(cJSON_IsObject(prof), "%s", out);
    cr_assert_eq(cJSON_GetArraySize(prof), n_kinds, "%s", out);
    double step = 0, sum = 0, other = 0;
    int i = 0;
    for (cJSON *e = prof->child; e; e = e->next, i++) {
        cr_assert_str_eq(e->string, kinds[i], "key %d", i);
        cr_assert(cJSON_IsNumber(e) && isfinite(e->valuedouble), "%s", e->string);
        const double v = e->valuedouble;
        if (i == 0)
            step = v;
        else if (i == n_kinds - 1)
            other = v;
        else if (strncmp(e->string, "comm_", 5) == 0)
            cr_expect_eq(v, 0.0, "%s on one rank", e->string);
        else {
            cr_expect(v > 0, "%s: %g ms: the model runs it", e->string, v);
            sum += v;
        }
    }
    cr_assert(step > 0 && sum <= step + 1e-3 * n_kinds, "the kinds take %.3f ms of a %.3f ms step", sum, step);
    cr_assert(other >= -1e-3 * n_kinds && fabs(sum + other - step) <= 1e-3 * n_kinds,
              "other %.3f, kinds %.3f, step %.3f", other, sum, step);
    cJSON *gemm = cJSON_GetObjectItemCaseSensitive(j, "profile_gemm_ms");
    cr_assert(cJSON_IsObject(gemm) && cJSON_GetArraySize(gemm) == 6, "%s", out);
    static const char *const dirs[3] = {"fwd", "dinp", "dweight"};
    for (int d = 0; d < 3; d++) {
        double by_role = 0;
        for (int r = 0; r < 6; r++) {
            cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(gemm, roles[r]), dirs[d]);
            cr_assert(cJSON_IsNumber(v), "%s.%s", roles[r], dirs[d]);
            cr_expect(r == 5 ? v->valuedouble == 0 : v->valuedouble > 0, "%s.%s: %g", roles[r], dirs[d],
                      v->valuedouble);
            by_role += v->valuedouble;
        }
        const double kind = cJSON_GetObjectItemCaseSensitive(prof, kinds[1 + d])->valuedouble;
        cr_expect(fabs(by_role - kind) <= 1e-2, "%s: %.3f by layer part, %.3f as a kind", dirs[d], by_role, kind);
    }
    cJSON_Delete(j);
    free(out);
    /* without --profile: no profile, no table */
    snprintf(
        cmd, sizeof cmd,
        "%s bench %s/configs/tiny-test.json --steps 1 --threads 1 --set checkpoint.dir=%s/ckpt --set log.dir=%s/log",
        tt_bin("trident"), TRI_SOURCE_DIR, dir, dir);
    cr_assert_eq(tt_run(cmd, &out), 0, "%s", out);
    cr_assert(!strstr(out, "\"profile") && !strstr(out, "  profile "), "%s", out);
    free(out);
    tt_rmrf(dir);
    free(dir);
}
