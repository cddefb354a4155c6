/* `trident bench --device D --peak-tflops P` through the built binary: on the
 * CPU the peak is measured and a given one refused; with --device cuda the run
 * either trains on the GPU with MFU against the given peak, or, where this
 * machine has no usable GPU, exits 2 naming what is missing (the message of
 * tri_ops_get("cuda"), as `trident train --device cuda`). */
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
