/* Tests of the CPU op table (kernels/ops.h, kernels/cpu/).
 *
 * Every op is checked against an independent computation written here:
 *   - forwards against naive double-precision references;
 *   - backwards against central finite differences (in double) of those
 *     references, on the scalar loss L = sum(out * R) with a random R, so that
 *     no analytic gradient formula is shared between the op and its test;
 *   - AdamW against the closed form of two steps.
 * Outputs that an op overwrites are filled with NaN first (no NaN may survive);
 * outputs that accumulate are filled with known values (which must be added to).
 * A NaN never passes a comparison: every check is !(|got - want| <= tol). */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <dlfcn.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_internal.h" /* vec_expf, the CPU ops' exp */
#include "kernels/ctx.h"

/* ------------------------------------------------------------------ helpers */

typedef struct {
    uint64_t s;
} rng;

static uint64_t rng_next(rng *r) /* splitmix64 */
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double rng_unit(rng *r) /* [0, 1) */
{
    return (double)(rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

static void *xmalloc(size_t bytes) {
    void *p = malloc(bytes > 0 ? bytes : 1);
    cr_assert(p != NULL, "out of memory (%zu bytes)", bytes);
    return p;
}

static float *fvec(size_t n) { return xmalloc(n * sizeof(float)); }
static double *dvec(size_t n) { return xmalloc(n * sizeof(double)); }

static float *frand(rng *r, size_t n, double lo, double hi) {
    float *p = fvec(n);
    for (size_t i = 0; i < n; i++) p[i] = (float)(lo + (hi - lo) * rng_unit(r));
    return p;
}

static void ffill(float *p, size_t n, float v) {
    for (size_t i = 0; i < n; i++) p[i] = v;
}

static float *fcopy(const float *src, size_t n) {
    float *p = fvec(n);
    memcpy(p, src, n * sizeof(float));
    return p;
}

static double *to_double(const float *x, size_t n) {
    double *p = dvec(n);
    for (size_t i = 0; i < n; i++) p[i] = (double)x[i];
    return p;
}

/* True when got is within atol + rtol * |want| of want; false for any NaN. */
static int close_enough(double got, double want, double atol, double rtol) {
    return fabs(got - want) <= atol + rtol * fabs(want);
}

/* Number of elements of got (float) not close to want (double); the first
 * few are logged with their index. */
/* Elements of got outside the tolerance of want; the first few are logged
 * when log != 0 (a logged error makes Criterion's exit code non-zero, so
 * tests that expect mismatches count quietly). */
static size_t count_far_log(const char *what, const float *got, const double *want, size_t n, double atol, double rtol,
                            int log) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (!close_enough((double)got[i], want[i], atol, rtol)) {
            if (log && bad < 5) cr_log_error("%s[%zu]: got %.9g, want %.9g", what, i, (double)got[i], want[i]);
            bad++;
        }
    }
    return bad;
}

static size_t count_far(const char *what, const float *got, const double *want, size_t n, double atol, double rtol) {
    return count_far_log(what, got, want, n, atol, rtol, 1);
}

#define EXPECT_CLOSE(what, got, want, n, atol, rtol) \
    cr_expect(count_far((what), (got), (want), (n), (atol), (rtol)) == 0, "%s differs from the reference", (what))

static size_t count_nan(const float *x, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += isnan(x[i]) ? 1 : 0;
    return k;
}

/* Central finite differences of loss(ctx) with respect to x (n), which the
 * loss reads through ctx: grad[i] = (L(x + h e_i) - L(x - h e_i)) / 2h. */
typedef double (*loss_fn)(void *ctx);

static void fd_grad(double *grad, double *x, size_t n, loss_fn loss, void *ctx, double h) {
    for (size_t i = 0; i < n; i++) {
        const double x0 = x[i];
        x[i] = x0 + h;
        const double lp = loss(ctx);
        x[i] = x0 - h;
        const double lm = loss(ctx);
        x[i] = x0;
        grad[i] = (lp - lm) / (2.0 * h);
    }
}

static double dot(const double *a, const double *b, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* The context the ops run in. Filled by hand rather than by tri_ctx_init,
 * whose backend init turns on flush-to-zero: the accuracy tests compare with
 * denormal results too. (Each Criterion test is its own process.) */
static tri_ctx g_tctx = {
    .ops = NULL, .act_dtype = TRI_F32, .param_dtype = TRI_F32, .grad_dtype = TRI_F32, .master_dtype = TRI_F32};
#define TC (&g_tctx)

static const tri_ops *cpu(void) {
    g_tctx.ops = tri_ops_cpu();
    return g_tctx.ops;
}

/* ------------------------------------------------------ the comparison itself */

Test(ops_check, nan_never_passes_a_comparison) {
    cr_expect(!close_enough(NAN, 1.0, 1e9, 1e9));
    cr_expect(!close_enough(1.0, NAN, 1e9, 1e9));
    cr_expect(!close_enough(NAN, NAN, 1e9, 1e9));
    cr_expect(!close_enough(INFINITY, 1.0, 1e9, 1e9));
    cr_expect(close_enough(1.0 + 1e-7, 1.0, 0.0, 1e-6));
    const float got[3] = {1.0f, NAN, 3.0f};
    const double want[3] = {1.0, 2.0, 3.0};
    cr_expect(count_far_log("nan-probe", got, want, 3, 1e9, 1e9, 0) == 1);
}

/* ------------------------------------------------------------ table, memory */

Test(ops_table, every_entry_is_set) {
    const tri_ops *o = cpu();
    cr_expect_str_eq(o->name, "cpu");
#define EXPECT_SET(field) cr_expect(o->field != NULL, "tri_ops." #field " is NULL")
    EXPECT_SET(alloc);
    EXPECT_SET(free);
    EXPECT_SET(copy);
    EXPECT_SET(zero);
    EXPECT_SET(sync);
    EXPECT_SET(matmul_fwd);
    EXPECT_SET(matmul_bwd);
    EXPECT_SET(layernorm_fwd);
    EXPECT_SET(layernorm_bwd);
    EXPECT_SET(attention_fwd);
    EXPECT_SET(attention_bwd);
    EXPECT_SET(attention_scratch_floats);
    EXPECT_SET(rmsnorm_fwd);
    EXPECT_SET(rmsnorm_bwd);
    EXPECT_SET(rope_fwd);
    EXPECT_SET(rope_bwd);
    EXPECT_SET(swiglu_fwd);
    EXPECT_SET(swiglu_bwd);
    EXPECT_SET(gelu_fwd);
    EXPECT_SET(gelu_bwd);
    EXPECT_SET(residual_fwd);
    EXPECT_SET(bias_bwd);
    EXPECT_SET(embedding_fwd);
    EXPECT_SET(embedding_bwd);
    EXPECT_SET(crossentropy_stats);
    EXPECT_SET(crossentropy_combine);
    EXPECT_SET(crossentropy_bwd);
    EXPECT_SET(to_device);
    EXPECT_SET(to_host);
    EXPECT_SET(attention_saved_floats);
    EXPECT_SET(sum);
    EXPECT_SET(adamw);
    EXPECT_SET(sumsq);
    EXPECT_SET(scale);
    EXPECT_SET(add);
    EXPECT_SET(cast);
#undef EXPECT_SET
}

Test(ops_table, get_cpu_returns_the_cpu_table) { cr_expect(tri_ops_get("cpu") == tri_ops_cpu()); }

/* Without a usable GPU, "cuda" is NULL with one line that names what is
 * missing: the CUDA build, the driver (libcuda.so.1, absent on the machines
 * that build this project) or a device. (With a GPU it is NULL too, for now:
 * the CUDA op table is not written yet.) */
Test(ops_table, get_cuda_names_what_is_missing, .init = cr_redirect_stderr) {
    cr_expect(tri_ops_get("cuda") == NULL);
    fflush(stderr);
    FILE *f = cr_get_redirected_stderr();
    char line[512] = {0}, more[64] = {0};
    cr_assert(fgets(line, sizeof line, f) != NULL);
    cr_expect(fgets(more, sizeof more, f) == NULL, "more than one line: %s%s", line, more);
    cr_expect(strncmp(line, "trident: --device cuda: ", 24) == 0, "message: %s", line);
#ifdef TRI_HAVE_CUDA
    void *drv = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!drv) {
        cr_expect(strstr(line, "no CUDA driver") != NULL, "no libcuda.so.1 here, yet: %s", line);
    } else {
        dlclose(drv);
        cr_expect(strstr(line, "no CUDA driver") || strstr(line, "no CUDA device") || strstr(line, "not written yet"),
                  "message: %s", line);
    }
#else
    cr_expect(strstr(line, "built without CUDA") != NULL, "message: %s", line);
#endif
}

Test(ops_table, get_unknown_name_fails_with_a_message, .init = cr_redirect_stderr) {
    cr_expect(tri_ops_get("tpu") == NULL);
    cr_expect(tri_ops_get(NULL) == NULL);
    fflush(stderr);
    FILE *f = cr_get_redirected_stderr();
    char line[256] = {0};
    cr_assert(fgets(line, sizeof line, f) != NULL);
    cr_expect(strncmp(line, "trident: ", 9) == 0, "message: %s", line);
    cr_expect(strstr(line, "tpu") != NULL, "message should name the device: %s", line);
}

Test(ops_memory, alloc_is_zeroed_aligned_and_copy_zero_work) {
    const tri_ops *o = cpu();
    const size_t n = 1003;
    float *a = o->alloc(TC, n * sizeof(float));
    float *b = o->alloc(TC, n * sizeof(float));
    cr_assert(a != NULL && b != NULL);
    cr_expect((uintptr_t)a % 64 == 0 && (uintptr_t)b % 64 == 0);
    for (size_t i = 0; i < n; i++) cr_expect(a[i] == 0.0f, "alloc not zero at %zu", i);
    for (size_t i = 0; i < n; i++) a[i] = (float)i * 0.5f;
    o->copy(TC, b, a, n * sizeof(float));
    o->sync(TC);
    cr_expect(memcmp(a, b, n * sizeof(float)) == 0);
    o->zero(TC, b + 10, 20 * sizeof(float));
    for (size_t i = 0; i < n; i++) cr_expect(b[i] == ((i >= 10 && i < 30) ? 0.0f : (float)i * 0.5f), "zero at %zu", i);
    void *z = o->alloc(TC, 0);
    cr_expect(z != NULL, "alloc(0) should return a unique pointer");
    cr_expect(o->alloc(TC, SIZE_MAX) == NULL, "alloc(SIZE_MAX) must fail cleanly");
    o->free(TC, z, 0);
    o->free(TC, NULL, 0);
    o->free(TC, a, n * sizeof(float));
    o->free(TC, b, n * sizeof(float));
}

/* ------------------------------------------------------------------- matmul */

static void ref_matmul(double *out, const double *inp, const double *w, const double *b, size_t N, size_t C,
                       size_t OC) {
    for (size_t n = 0; n < N; n++)
        for (size_t o = 0; o < OC; o++) {
            double s = b != NULL ? b[o] : 0.0;
            for (size_t c = 0; c < C; c++) s += inp[n * C + c] * w[o * C + c];
            out[n * OC + o] = s;
        }
}

typedef struct {
    double *inp, *w, *b, *R, *tmp;
    size_t N, C, OC;
} mm_ctx;

static double mm_loss(void *p) {
    mm_ctx *c = p;
    ref_matmul(c->tmp, c->inp, c->w, c->b, c->N, c->C, c->OC);
    return dot(c->tmp, c->R, c->N * c->OC);
}

static void check_matmul(size_t N, size_t C, size_t OC, int with_bias, int with_dinp, int with_dbias) {
    const tri_ops *o = cpu();
    rng r = {.s = 11 + N * 7 + C * 3 + OC};
    float *inp = frand(&r, N * C, -1, 1), *w = frand(&r, OC * C, -1, 1);
    float *b = with_bias ? frand(&r, OC, -1, 1) : NULL;
    float *R = frand(&r, N * OC, -1, 1);
    float *out = fvec(N * OC);
    ffill(out, N * OC, NAN);
    o->matmul_fwd(TC, out, inp, w, b, N, C, OC);

    mm_ctx c = {to_double(inp, N * C),
                to_double(w, OC * C),
                b ? to_double(b, OC) : NULL,
                to_double(R, N * OC),
                dvec(N * OC),
                N,
                C,
                OC};
    ref_matmul(c.tmp, c.inp, c.w, c.b, N, C, OC);
    cr_expect(count_nan(out, N * OC) == 0);
    EXPECT_CLOSE("matmul out", out, c.tmp, N * OC, 1e-5, 1e-5);

    /* backward with dout = R: dinp overwrites (NaN first), dW and db accumulate */
    float *dinp = with_dinp ? fvec(N * C) : NULL;
    if (dinp) ffill(dinp, N * C, NAN);
    float *dw = frand(&r, OC * C, -2, 2), *dw0 = fcopy(dw, OC * C);
    float *db = with_dbias ? frand(&r, OC, -2, 2) : NULL;
    float *db0 = db ? fcopy(db, OC) : NULL;
    o->matmul_bwd(TC, dinp, dw, db, R, inp, w, N, C, OC);

    double *g = dvec(N * C > OC * C ? N * C : OC * C);
    if (dinp) {
        fd_grad(g, c.inp, N * C, mm_loss, &c, 1e-3); /* L is linear in inp: FD exact */
        EXPECT_CLOSE("matmul dinp", dinp, g, N * C, 1e-5, 1e-5);
    }
    fd_grad(g, c.w, OC * C, mm_loss, &c, 1e-3);
    for (size_t i = 0; i < OC * C; i++) g[i] += dw0[i];
    EXPECT_CLOSE("matmul dweight (accumulated)", dw, g, OC * C, 1e-5, 1e-5);
    if (db) {
        double *gb = dvec(OC);
        if (c.b) {
            fd_grad(gb, c.b, OC, mm_loss, &c, 1e-3);
        } else { /* no bias in the forward: the bias gradient is still the column sum */
            for (size_t j = 0; j < OC; j++) {
                gb[j] = 0.0;
                for (size_t n = 0; n < N; n++) gb[j] += c.R[n * OC + j];
            }
        }
        for (size_t j = 0; j < OC; j++) gb[j] += db0[j];
        EXPECT_CLOSE("matmul dbias (accumulated)", db, gb, OC, 1e-5, 1e-5);
        free(gb);
    }
    free(inp), free(w), free(b), free(R), free(out), free(dinp), free(dw), free(dw0);
    free(db), free(db0), free(g), free(c.inp), free(c.w), free(c.b), free(c.R), free(c.tmp);
}

Test(ops_matmul, with_bias_matches_reference_and_finite_differences) { check_matmul(13, 11, 7, 1, 1, 1); }

Test(ops_matmul, without_bias_matches_reference_and_finite_differences) { check_matmul(9, 17, 5, 0, 1, 1); }

Test(ops_matmul, dinp_null_and_dbias_null_are_skipped) {
    check_matmul(6, 5, 8, 1, 0, 1);
    check_matmul(6, 5, 8, 1, 1, 0);
    check_matmul(6, 5, 8, 0, 0, 0);
}

Test(ops_matmul, threaded_size_matches_naive_reference, .timeout = 60) {
    /* big enough for OpenBLAS's threads and the OpenMP bias/column-sum loops */
    const tri_ops *o = cpu();
    const size_t N = 301, C = 203, OC = 157;
    rng r = {.s = 5};
    float *inp = frand(&r, N * C, -1, 1), *w = frand(&r, OC * C, -1, 1);
    float *b = frand(&r, OC, -1, 1), *R = frand(&r, N * OC, -1, 1);
    float *out = fvec(N * OC);
    ffill(out, N * OC, NAN);
    o->matmul_fwd(TC, out, inp, w, b, N, C, OC);
    double *di = to_double(inp, N * C), *dw = to_double(w, OC * C), *dbb = to_double(b, OC);
    double *dR = to_double(R, N * OC), *ref = dvec(N * OC);
    ref_matmul(ref, di, dw, dbb, N, C, OC);
    EXPECT_CLOSE("matmul out (large)", out, ref, N * OC, 1e-4, 1e-5);

    float *ginp = fvec(N * C), *gw = fvec(OC * C), *gb = fvec(OC);
    ffill(ginp, N * C, NAN);
    ffill(gw, OC * C, 1.0f);
    ffill(gb, OC, -1.0f);
    o->matmul_bwd(TC, ginp, gw, gb, R, inp, w, N, C, OC);
    double *ri = dvec(N * C), *rw = dvec(OC * C), *rb = dvec(OC);
    for (size_t n = 0; n < N; n++)
        for (size_t c = 0; c < C; c++) {
            double s = 0;
            for (size_t k = 0; k < OC; k++) s += dR[n * OC + k] * dw[k * C + c];
            ri[n * C + c] = s;
        }
    for (size_t k = 0; k < OC; k++) {
        rb[k] = -1.0;
        for (size_t n = 0; n < N; n++) rb[k] += dR[n * OC + k];
        for (size_t c = 0; c < C; c++) {
            double s = 1.0;
            for (size_t n = 0; n < N; n++) s += dR[n * OC + k] * di[n * C + c];
            rw[k * C + c] = s;
        }
    }
    EXPECT_CLOSE("matmul dinp (large)", ginp, ri, N * C, 1e-4, 1e-5);
    EXPECT_CLOSE("matmul dweight (large)", gw, rw, OC * C, 1e-4, 1e-5);
    EXPECT_CLOSE("matmul dbias (large)", gb, rb, OC, 1e-4, 1e-5);
    free(inp), free(w), free(b), free(R), free(out), free(di), free(dw), free(dbb), free(dR);
    free(ref), free(ginp), free(gw), free(gb), free(ri), free(rw), free(rb);
}

/* dweight = NULL skips the weight gradient, and asking for the parts in two
 * calls (dinp and dbias, then dweight alone: the zero-bubble split of
 * backward, model/runtime.h) gives the one call's results bit for bit, at a
 * size where OpenBLAS threads. The one call's results are checked against a
 * reference above. */
Test(ops_matmul, dweight_null_is_skipped_and_split_calls_equal_one_call, .timeout = 60) {
    const tri_ops *o = cpu();
    const size_t N = 301, C = 203, OC = 157;
    rng r = {.s = 9};
    float *inp = frand(&r, N * C, -1, 1), *w = frand(&r, OC * C, -1, 1), *R = frand(&r, N * OC, -1, 1);
    float *dw0 = frand(&r, OC * C, -1, 1), *db0 = frand(&r, OC, -1, 1);
    float *i1 = fvec(N * C), *w1 = fcopy(dw0, OC * C), *b1 = fcopy(db0, OC);
    float *i2 = fvec(N * C), *w2 = fcopy(dw0, OC * C), *b2 = fcopy(db0, OC);
    ffill(i1, N * C, NAN);
    ffill(i2, N * C, NAN);
    o->matmul_bwd(TC, i1, w1, b1, R, inp, w, N, C, OC);
    o->matmul_bwd(TC, i2, NULL, b2, R, inp, w, N, C, OC);
    cr_expect(memcmp(w2, dw0, OC * C * sizeof(float)) == 0, "dweight = NULL must leave the weight gradient alone");
    o->matmul_bwd(TC, NULL, w2, NULL, R, inp, w, N, C, OC);
    cr_expect(memcmp(i1, i2, N * C * sizeof(float)) == 0, "dinp differs");
    cr_expect(memcmp(w1, w2, OC * C * sizeof(float)) == 0, "dweight differs");
    cr_expect(memcmp(b1, b2, OC * sizeof(float)) == 0, "dbias differs");
    cr_expect(memcmp(w1, dw0, OC * C * sizeof(float)) != 0, "the weight gradient was not accumulated at all");
    free(inp), free(w), free(R), free(dw0), free(db0), free(i1), free(w1), free(b1), free(i2), free(w2), free(b2);
}

/* ---------------------------------------------------------------- layernorm */

static void ref_layernorm(double *out, double *mean, double *rstd, const double *inp, const double *w, const double *b,
                          size_t N, size_t C) {
    for (size_t n = 0; n < N; n++) {
        const double *x = inp + n * C;
        double m = 0.0, v = 0.0;
        for (size_t c = 0; c < C; c++) m += x[c];
        m /= (double)C;
        for (size_t c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
        v /= (double)C;
        const double rs = 1.0 / sqrt(v + 1e-5);
        for (size_t c = 0; c < C; c++) out[n * C + c] = (x[c] - m) * rs * w[c] + b[c];
        if (mean) mean[n] = m;
        if (rstd) rstd[n] = rs;
    }
}

typedef struct {
    double *inp, *w, *b, *R, *tmp;
    size_t N, C;
} ln_ctx;

static double ln_loss(void *p) {
    ln_ctx *c = p;
    ref_layernorm(c->tmp, NULL, NULL, c->inp, c->w, c->b, c->N, c->C);
    return dot(c->tmp, c->R, c->N * c->C);
}

Test(ops_layernorm, forward_matches_reference_and_normalises) {
    const tri_ops *o = cpu();
    const size_t N = 6, C = 19;
    rng r = {.s = 21};
    float *inp = frand(&r, N * C, -3, 5), *w = frand(&r, C, 0.5, 1.5), *b = frand(&r, C, -1, 1);
    float *out = fvec(N * C), *mean = fvec(N), *rstd = fvec(N);
    ffill(out, N * C, NAN), ffill(mean, N, NAN), ffill(rstd, N, NAN);
    o->layernorm_fwd(TC, out, mean, rstd, inp, w, b, N, C);
    double *di = to_double(inp, N * C), *dw = to_double(w, C), *dbb = to_double(b, C);
    double *ref = dvec(N * C), *rm = dvec(N), *rr = dvec(N);
    ref_layernorm(ref, rm, rr, di, dw, dbb, N, C);
    EXPECT_CLOSE("layernorm out", out, ref, N * C, 1e-5, 1e-5);
    EXPECT_CLOSE("layernorm mean", mean, rm, N, 1e-6, 1e-6);
    EXPECT_CLOSE("layernorm rstd", rstd, rr, N, 1e-6, 1e-5);

    /* without the affine part every row has mean 0 and variance var/(var+eps) ~ 1 */
    float *ones = fvec(C), *zeros = fvec(C);
    ffill(ones, C, 1.0f), ffill(zeros, C, 0.0f);
    o->layernorm_fwd(TC, out, mean, rstd, inp, ones, zeros, N, C);
    for (size_t n = 0; n < N; n++) {
        double m = 0, v = 0;
        for (size_t c = 0; c < C; c++) m += out[n * C + c];
        m /= (double)C;
        for (size_t c = 0; c < C; c++) v += (out[n * C + c] - m) * (out[n * C + c] - m);
        v /= (double)C;
        cr_expect(close_enough(m, 0.0, 1e-6, 0), "row %zu mean %g", n, m);
        cr_expect(close_enough(v, 1.0, 1e-4, 0), "row %zu variance %g", n, v);
    }
    free(inp), free(w), free(b), free(out), free(mean), free(rstd), free(di), free(dw);
    free(dbb), free(ref), free(rm), free(rr), free(ones), free(zeros);
}

Test(ops_layernorm, backward_accumulates_finite_difference_gradients) {
    const tri_ops *o = cpu();
    const size_t N = 5, C = 23;
    rng r = {.s = 22};
    float *inp = frand(&r, N * C, -2, 3), *w = frand(&r, C, 0.5, 1.5), *b = frand(&r, C, -1, 1);
    float *R = frand(&r, N * C, -1, 1);
    float *out = fvec(N * C), *mean = fvec(N), *rstd = fvec(N);
    o->layernorm_fwd(TC, out, mean, rstd, inp, w, b, N, C);
    float *dinp = frand(&r, N * C, -1, 1), *dw = frand(&r, C, -1, 1), *db = frand(&r, C, -1, 1);
    float *dinp0 = fcopy(dinp, N * C), *dw0 = fcopy(dw, C), *db0 = fcopy(db, C);
    o->layernorm_bwd(TC, dinp, dw, db, R, inp, w, mean, rstd, N, C);

    ln_ctx c = {to_double(inp, N * C), to_double(w, C), to_double(b, C), to_double(R, N * C), dvec(N * C), N, C};
    double *g = dvec(N * C);
    fd_grad(g, c.inp, N * C, ln_loss, &c, 1e-5);
    for (size_t i = 0; i < N * C; i++) g[i] += dinp0[i];
    EXPECT_CLOSE("layernorm dinp", dinp, g, N * C, 2e-5, 1e-4);
    fd_grad(g, c.w, C, ln_loss, &c, 1e-5);
    for (size_t i = 0; i < C; i++) g[i] += dw0[i];
    EXPECT_CLOSE("layernorm dw", dw, g, C, 2e-5, 1e-4);
    fd_grad(g, c.b, C, ln_loss, &c, 1e-5);
    for (size_t i = 0; i < C; i++) g[i] += db0[i];
    EXPECT_CLOSE("layernorm db", db, g, C, 2e-5, 1e-4);
    free(inp), free(w), free(b), free(R), free(out), free(mean), free(rstd), free(dinp);
    free(dw), free(db), free(dinp0), free(dw0), free(db0), free(g);
    free(c.inp), free(c.w), free(c.b), free(c.R), free(c.tmp);
}

/* ---------------------------------------------------------------- attention */

/* The (B, T, NH + 2 NKV, HS) qkv layout of grouped-query attention, written
 * out here: query head h's q, and the k and v of its key/value head. */
static size_t q_at(size_t b, size_t t, size_t h, size_t T, size_t NH, size_t NKV, size_t HS) {
    return ((b * T + t) * (NH + 2 * NKV) + h) * HS;
}
static size_t k_at(size_t b, size_t t, size_t h, size_t T, size_t NH, size_t NKV, size_t HS) {
    return ((b * T + t) * (NH + 2 * NKV) + NH + h / (NH / NKV)) * HS;
}
static size_t v_at(size_t b, size_t t, size_t h, size_t T, size_t NH, size_t NKV, size_t HS) {
    return ((b * T + t) * (NH + 2 * NKV) + NH + NKV + h / (NH / NKV)) * HS;
}

/* out (B, T, NH, HS) of causal attention in double, each row's probabilities
 * p_ij = exp(s_ij - max) / sum_j exp(s_ij - max) formed explicitly */
static void ref_attention(double *out, const double *qkv, size_t B, size_t T, size_t NH, size_t NKV, size_t HS) {
    const size_t C = NH * HS;
    const double scale = 1.0 / sqrt((double)HS);
    double *s = dvec(T);
    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < NH; h++)
            for (size_t i = 0; i < T; i++) {
                const double *q = qkv + q_at(b, i, h, T, NH, NKV, HS);
                double mx = -INFINITY;
                for (size_t j = 0; j <= i; j++) {
                    const double *k = qkv + k_at(b, j, h, T, NH, NKV, HS);
                    double d = 0;
                    for (size_t e = 0; e < HS; e++) d += q[e] * k[e];
                    s[j] = d * scale;
                    if (s[j] > mx) mx = s[j];
                }
                double z = 0;
                for (size_t j = 0; j <= i; j++) z += exp(s[j] - mx);
                double *o = out + (b * T + i) * C + h * HS;
                for (size_t e = 0; e < HS; e++) o[e] = 0;
                for (size_t j = 0; j < T; j++) {
                    const double p = j <= i ? exp(s[j] - mx) / z : 0.0;
                    const double *v = qkv + v_at(b, j, h, T, NH, NKV, HS);
                    for (size_t e = 0; e < HS && j <= i; e++) o[e] += p * v[e];
                }
            }
    free(s);
}

/* lse (B, NH, T): log sum_{j <= i} exp(s_ij), s = q.k / sqrt(HS), in double */
static void ref_lse(double *lse, const double *qkv, size_t B, size_t T, size_t NH, size_t NKV, size_t HS) {
    const double scale = 1.0 / sqrt((double)HS);
    double *sc = dvec(T);
    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < NH; h++)
            for (size_t i = 0; i < T; i++) {
                const double *q = qkv + q_at(b, i, h, T, NH, NKV, HS);
                double mx = -INFINITY, z = 0;
                for (size_t j = 0; j <= i; j++) {
                    const double *k = qkv + k_at(b, j, h, T, NH, NKV, HS);
                    double d = 0;
                    for (size_t e = 0; e < HS; e++) d += q[e] * k[e];
                    sc[j] = d * scale;
                    mx = sc[j] > mx ? sc[j] : mx;
                }
                for (size_t j = 0; j <= i; j++) z += exp(sc[j] - mx);
                lse[(b * NH + h) * T + i] = mx + log(z);
            }
    free(sc);
}

typedef struct {
    double *qkv, *R, *tmp;
    size_t B, T, NH, NKV, HS;
} att_ctx;

static double att_loss(void *p) {
    att_ctx *c = p;
    ref_attention(c->tmp, c->qkv, c->B, c->T, c->NH, c->NKV, c->HS);
    return dot(c->tmp, c->R, c->B * c->T * c->NH * c->HS);
}

/* The op (flash-style: its state is one log-sum-exp per (batch, query
 * head, query) row, B * NH * T floats) against the double reference above,
 * which forms the probabilities explicitly: out and the state; the backward
 * against finite differences of the reference (all qkv entries when
 * n_samples == 0, else that many, half of them in the last rows, where most
 * keys take part). With NKV < NH the reference reads each group's key/value
 * head through its own indexing (k_at, v_at), so the finite differences of
 * a k or v entry sum over the group's query heads by construction. Outputs,
 * state and scratch are NaN-poisoned first; a second backward into dirty
 * buffers and a run on one thread give the same bits as the first (default
 * thread count). */
static void check_attention_gqa(size_t B, size_t T, int NH, int NKV, int HS, size_t n_samples) {
    const tri_ops *o = cpu();
    const size_t C = (size_t)NH * (size_t)HS, nq = B * T * (size_t)(NH + 2 * NKV) * (size_t)HS, no = B * T * C;
    const size_t nl = o->attention_saved_floats(B, T, NH, NKV, HS);
    cr_assert_eq(nl, B * (size_t)NH * T, "the state is one float per (batch, query head, query) row");
    rng r = {.s = 57 + T + (size_t)HS + 1000 * (size_t)NKV};
    float *qkv = frand(&r, nq, -1.5, 1.5), *R = frand(&r, no, -1, 1);
    float *out = fvec(no), *lse = fvec(nl);
    ffill(out, no, NAN), ffill(lse, nl, NAN);
    o->attention_fwd(TC, out, lse, qkv, B, T, NH, NKV, HS);

    att_ctx c = {to_double(qkv, nq), to_double(R, no), dvec(no), B, T, (size_t)NH, (size_t)NKV, (size_t)HS};
    double *want_lse = dvec(nl);
    ref_attention(c.tmp, c.qkv, B, T, (size_t)NH, (size_t)NKV, (size_t)HS);
    ref_lse(want_lse, c.qkv, B, T, (size_t)NH, (size_t)NKV, (size_t)HS);
    EXPECT_CLOSE("attention out", out, c.tmp, no, 1e-5, 1e-5);
    EXPECT_CLOSE("attention lse", lse, want_lse, nl, 1e-5, 1e-6);

    const size_t nscr = o->attention_scratch_floats(B, T, NH, NKV, HS);
    float *scratch = fvec(nscr), *dqkv = fvec(nq);
    ffill(scratch, nscr, NAN), ffill(dqkv, nq, NAN);
    o->attention_bwd(TC, dqkv, scratch, R, qkv, out, lse, B, T, NH, NKV, HS);
    cr_expect(count_nan(dqkv, nq) == 0, "dqkv must be overwritten everywhere");

    if (n_samples == 0) {
        double *g = dvec(nq);
        fd_grad(g, c.qkv, nq, att_loss, &c, 1e-5);
        EXPECT_CLOSE("attention dqkv", dqkv, g, nq, 2e-5, 1e-4);
        free(g);
    } else {
        const size_t row = (size_t)(NH + 2 * NKV) * (size_t)HS;
        size_t bad = 0;
        for (size_t s = 0; s < n_samples; s++) {
            size_t idx = (size_t)(rng_unit(&r) * (double)nq);
            if (s % 2 == 1) idx = nq - 1 - (size_t)(rng_unit(&r) * (double)(row * (T < 8 ? T : 8)));
            double g;
            fd_grad(&g, c.qkv + idx, 1, att_loss, &c, 1e-5);
            if (!close_enough(dqkv[idx], g, 2e-5, 1e-4)) {
                if (bad < 5) cr_log_error("attention dqkv[%zu]: got %.9g, want %.9g", idx, (double)dqkv[idx], g);
                bad++;
            }
        }
        cr_expect(bad == 0, "attention dqkv differs from finite differences");
    }

    /* bitwise reproducible: a second run into the same (dirty) buffers */
    float *dqkv2 = fvec(nq);
    ffill(dqkv2, nq, NAN);
    o->attention_bwd(TC, dqkv2, scratch, R, qkv, out, lse, B, T, NH, NKV, HS);
    cr_expect(memcmp(dqkv, dqkv2, nq * sizeof(float)) == 0, "attention_bwd not reproducible");

    /* one thread gives the same bits as the default count (scratch sized for it) */
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    float *out1 = fvec(no), *lse1 = fvec(nl), *dqkv1 = fvec(nq);
    ffill(out1, no, NAN), ffill(lse1, nl, NAN), ffill(dqkv1, nq, NAN);
    o->attention_fwd(TC, out1, lse1, qkv, B, T, NH, NKV, HS);
    o->attention_bwd(TC, dqkv1, scratch, R, qkv, out1, lse1, B, T, NH, NKV, HS);
    omp_set_num_threads(saved);
    cr_expect(memcmp(out, out1, no * sizeof(float)) == 0, "attention out depends on threads");
    cr_expect(memcmp(lse, lse1, nl * sizeof(float)) == 0, "attention lse depends on threads");
    cr_expect(memcmp(dqkv, dqkv1, nq * sizeof(float)) == 0, "attention dqkv depends on threads");

    free(qkv), free(R), free(out), free(lse), free(c.qkv), free(c.R), free(c.tmp);
    free(want_lse), free(scratch), free(dqkv), free(dqkv2), free(out1), free(lse1), free(dqkv1);
}

/* Multi-head attention: NKV = NH, the (B, T, 3, NH, HS) layout. */
static void check_attention(size_t B, size_t T, int NH, int HS, size_t n_samples) {
    check_attention_gqa(B, T, NH, NH, HS, n_samples);
}

Test(ops_attention, awkward_sizes_forward_and_finite_differences) { check_attention(2, 7, 3, 5, 0); }

Test(ops_attention, single_position_and_single_head) {
    check_attention(1, 1, 1, 3, 0);
    check_attention(3, 4, 1, 2, 0);
}

Test(ops_attention, blocks_and_vector_tiles_with_partial_edges, .timeout = 120) {
    /* T crosses the 32-query and 64-key blocks with a partial last one;
     * HS = 4, 24 and 40 take the vector tiles and the scalar columns on
     * AVX2 and AVX-512 */
    check_attention(2, 130, 2, 4, 200);
    check_attention(2, 70, 2, 24, 150);
    check_attention(1, 45, 3, 40, 150);
}

Test(ops_attention, long_sequence_with_gpt2_head_size, .timeout = 120) { check_attention(1, 130, 2, 64, 100); }

/* Every head size: 1; 1100, past the 64 KiB packed key block of AVX-512 code
 * (one vector of keys per block, T crossing many of them); 16400, past it
 * for every vector width, scalar included (the kernel once refused these:
 * its key block lived on the stack). */
Test(ops_attention, any_head_size, .timeout = 120) {
    check_attention(2, 9, 2, 1, 0);
    check_attention(1, 70, 1, 1100, 60);
    check_attention(1, 5, 1, 16400, 40);
}

/* Grouped-query attention: NKV = NH / 2 and NKV = 1 (multi-query), odd T
 * and T = 1, every qkv entry by finite differences (the k and v heads'
 * gradients sum over their groups). */
Test(ops_attention_gqa, groups_of_two_and_multi_query_every_entry) {
    check_attention_gqa(2, 7, 4, 2, 5, 0);
    check_attention_gqa(2, 7, 4, 1, 5, 0);
    check_attention_gqa(3, 1, 6, 3, 4, 0);
    check_attention_gqa(1, 1, 3, 1, 2, 0);
    check_attention_gqa(2, 5, 6, 2, 3, 0); /* groups of three */
}

/* Long enough to cross the query and key blocks, with several threads and
 * fewer (batch, key/value head) pairs than (batch, query head) pairs. */
Test(ops_attention_gqa, blocks_and_threads, .timeout = 120) {
    check_attention_gqa(2, 131, 4, 2, 24, 150);
    check_attention_gqa(3, 71, 8, 1, 16, 150);
    check_attention_gqa(1, 65, 6, 2, 64, 100);
}

/* With NKV = NH the GQA op is today's multi-head one; a grouped case equals
 * multi-head attention on the key/value heads copied out per query head
 * (an independent path through the op), outputs bitwise, and dq bitwise,
 * dk/dv of a group the sum of the copies' gradients (within fp32 rounding:
 * the op sums inside its kernel in another order). */
Test(ops_attention_gqa, equals_mha_on_repeated_kv_heads) {
    const tri_ops *o = cpu();
    const size_t B = 2, T = 37;
    const int NH = 6, NKV = 2, HS = 8, G = NH / NKV;
    const size_t W = (size_t)(NH + 2 * NKV) * HS, W3 = 3 * (size_t)NH * HS, no = B * T * NH * HS;
    rng r = {.s = 4242};
    float *qkv = frand(&r, B * T * W, -1, 1), *R = frand(&r, no, -1, 1);
    float *rep = fvec(B * T * W3);
    for (size_t bt = 0; bt < B * T; bt++)
        for (int h = 0; h < NH; h++)
            for (int e = 0; e < HS; e++) {
                rep[bt * W3 + (size_t)h * HS + e] = qkv[bt * W + (size_t)h * HS + e];
                rep[bt * W3 + (size_t)(NH + h) * HS + e] = qkv[bt * W + (size_t)(NH + h / G) * HS + e];
                rep[bt * W3 + (size_t)(2 * NH + h) * HS + e] = qkv[bt * W + (size_t)(NH + NKV + h / G) * HS + e];
            }
    float *out = fvec(no), *out_r = fvec(no), *lse = fvec(B * NH * T), *lse_r = fvec(B * NH * T);
    o->attention_fwd(TC, out, lse, qkv, B, T, NH, NKV, HS);
    o->attention_fwd(TC, out_r, lse_r, rep, B, T, NH, NH, HS);
    cr_expect(memcmp(out, out_r, no * sizeof(float)) == 0, "GQA out differs from MHA on repeated heads");
    cr_expect(memcmp(lse, lse_r, B * NH * T * sizeof(float)) == 0, "GQA lse differs from MHA on repeated heads");
    const size_t ns = o->attention_scratch_floats(B, T, NH, NKV, HS),
                 ns_r = o->attention_scratch_floats(B, T, NH, NH, HS);
    float *scr = fvec(ns > ns_r ? ns : ns_r), *d = fvec(B * T * W), *d_r = fvec(B * T * W3);
    o->attention_bwd(TC, d, scr, R, qkv, out, lse, B, T, NH, NKV, HS);
    o->attention_bwd(TC, d_r, scr, R, rep, out_r, lse_r, B, T, NH, NH, HS);
    size_t bad = 0;
    for (size_t bt = 0; bt < B * T; bt++) {
        for (size_t e = 0; e < (size_t)NH * HS; e++) bad += d[bt * W + e] != d_r[bt * W3 + e];
        for (int kh = 0; kh < NKV; kh++)
            for (int e = 0; e < HS; e++) {
                double sk = 0, sv = 0;
                for (int g = 0; g < G; g++) {
                    sk += d_r[bt * W3 + (size_t)(NH + kh * G + g) * HS + e];
                    sv += d_r[bt * W3 + (size_t)(2 * NH + kh * G + g) * HS + e];
                }
                const double gk = d[bt * W + (size_t)(NH + kh) * HS + e];
                const double gv = d[bt * W + (size_t)(NH + NKV + kh) * HS + e];
                bad += !close_enough(gk, sk, 1e-6, 1e-5) + !close_enough(gv, sv, 1e-6, 1e-5);
            }
    }
    cr_expect(bad == 0, "%zu GQA gradient entries differ from MHA on repeated heads", bad);
    free(qkv), free(R), free(rep), free(out), free(out_r), free(lse), free(lse_r), free(scr), free(d), free(d_r);
}

/* ------------------------------------------------------------- vec_expf */

Test(ops_exp, vec_expf_within_1_5_ulp_over_the_whole_range) {
    /* every 61st float in [-104, 89], plus the special values */
    size_t bad = 0;
    double worst = 0;
    uint32_t lo_bits, hi_bits;
    const float lo = -104.0f, hi = 89.0f;
    memcpy(&lo_bits, &lo, 4), memcpy(&hi_bits, &hi, 4);
    for (int sign = 0; sign < 2; sign++) {
        const uint32_t top = sign ? lo_bits : hi_bits, base = sign ? 0x80000000u : 0u;
        for (uint32_t b = base; b <= top; b += 61) {
            float x;
            memcpy(&x, &b, 4);
            const double want = exp((double)x), got = vec_expf(x);
            double ok;
            if (want > 0x1.fffffep127) /* overflows fp32 */
                ok = isinf(got) && got > 0;
            else if (want < 0x1p-126) /* subnormal or flushed: absolute */
                ok = fabs(got - want) <= 0x1p-148;
            else {
                const double ulps = fabs(got - want) / (want * 0x1p-23);
                worst = ulps > worst ? ulps : worst;
                ok = ulps <= 1.5;
            }
            if (!ok) {
                if (bad < 5) cr_log_error("vec_expf(%.9g) = %.9g, want %.9g", (double)x, got, want);
                bad++;
            }
        }
    }
    cr_expect(bad == 0, "%zu exp values off (worst %.2f ulp)", bad, worst);
    cr_expect(vec_expf(-INFINITY) == 0.0f);
    cr_expect(isinf(vec_expf(INFINITY)) && vec_expf(INFINITY) > 0);
    cr_expect(isnan(vec_expf(NAN)));
    cr_expect(vec_expf(0.0f) == 1.0f && vec_expf(-0.0f) == 1.0f);
    cr_expect(vec_expf(-200.0f) == 0.0f);
}

Test(ops_exp, vector_exp_gives_vec_expf_bits_in_every_lane) {
#ifdef TRI_CPU_VEC
    /* every 613th float in [-120, 100] in every lane position, plus the
     * special values: the vector bodies and scalar tails must agree */
    const float special[] = {NAN,      INFINITY, -INFINITY, 0.0f,    -0.0f,  -103.97f, -103.96f,
                             88.7228f, 88.7229f, 1e-30f,    -1e-30f, -87.5f, 1e30f,    -1e30f};
    size_t bad = 0, tried = 0;
    float x[VF_N], y[VF_N];
    uint32_t lo_bits, hi_bits;
    const float lo = -120.0f, hi = 100.0f;
    memcpy(&lo_bits, &lo, 4), memcpy(&hi_bits, &hi, 4);
    size_t fill = 0, k = 0;
    const size_t nspecial = sizeof special / sizeof special[0];
    for (int sign = 0; sign < 2; sign++) {
        const uint32_t top = sign ? lo_bits : hi_bits, base = sign ? 0x80000000u : 0u;
        for (uint32_t b = base; b <= top + 613u * nspecial; b += 613) {
            if (b <= top)
                memcpy(&x[fill], &b, 4);
            else
                x[fill] = special[k++ % nspecial];
            if (++fill < VF_N) continue;
            fill = 0;
            vf_store(y, vec_expf_v(vf_load(x)));
            for (int l = 0; l < VF_N; l++, tried++) {
                const float want = vec_expf(x[l]);
                /* NaN: any NaN (its sign and payload are the hardware's choice) */
                const int same = isnan(want) ? isnan(y[l]) : memcmp(&y[l], &want, 4) == 0;
                if (!same) {
                    if (bad < 5)
                        cr_log_error("lane %d: exp(%.9g) = %.9g, scalar %.9g", l, (double)x[l], (double)y[l],
                                     (double)want);
                    bad++;
                }
            }
        }
    }
    cr_expect(tried > 100000, "only %zu values tried", tried);
    cr_expect(bad == 0, "%zu of %zu vector exp values differ from vec_expf", bad, tried);
#else
    cr_skip_test("no vector path in this build (neither AVX-512 nor AVX2+FMA)");
#endif
}

/* --------------------------------------------------------------------- gelu */

/* gelu in double; for x < -3 the form e^{2u} / (1 + e^{2u}) replaces
 * (1 + tanh u) / 2, whose sum cancels there. */
static double ref_gelu(double x) {
    const double u = sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
    if (x >= -3.0) return 0.5 * x * (1.0 + tanh(u));
    const double e = exp(2.0 * u);
    return x * e / (1.0 + e);
}

Test(ops_gelu, forward_within_1e6_relative_over_a_fine_grid) {
    const tri_ops *o = cpu();
    const size_t n = 40001; /* [-20, 20] in steps of 1e-3, plus the extremes */
    const size_t m = n + 8;
    float *x = fvec(m), *y = fvec(m);
    for (size_t i = 0; i < n; i++) x[i] = (float)(-20.0 + 1e-3 * (double)i);
    const float extra[8] = {0.0f, -0.0f, 1e-30f, -1e-30f, 100.0f, -100.0f, 1e20f, -1e20f};
    memcpy(x + n, extra, sizeof extra);
    ffill(y, m, NAN);
    o->gelu_fwd(TC, y, x, m);
    size_t bad = 0;
    for (size_t i = 0; i < m; i++) {
        const double xd = x[i], want = ref_gelu(xd);
        /* 1e-6 relative, plus what no fp32 evaluation avoids: for x < 0,
         * gelu ~ x e^{2u}, so rounding u (3 ulp) moves gelu by 2|u| * 3 ulp */
        const double u = sqrt(2.0 / M_PI) * (xd + 0.044715 * xd * xd * xd);
        const double cond = xd < 0 ? 2.0 * fabs(u) * 3.0 * 0x1p-24 : 0.0;
        /* plus an absolute 2^-140 for deep subnormal results (exp flushes e^-104) */
        const double tol = (1e-6 + cond) * fabs(want) + 0x1p-140;
        if (!(fabs((double)y[i] - want) <= tol)) {
            if (bad < 5) cr_log_error("gelu(%.9g) = %.9g, want %.9g", (double)x[i], (double)y[i], want);
            bad++;
        }
    }
    cr_expect(bad == 0, "%zu gelu values off by more than 1e-6 relative", bad);
    float nanx = NAN, nany = 0.0f;
    o->gelu_fwd(TC, &nany, &nanx, 1);
    cr_expect(isnan(nany), "gelu(NaN) must be NaN");
    free(x), free(y);
}

typedef struct {
    double *x, *R;
    size_t n;
} gelu_ctx;

static double gelu_loss(void *p) {
    gelu_ctx *c = p;
    double s = 0;
    for (size_t i = 0; i < c->n; i++) s += ref_gelu(c->x[i]) * c->R[i];
    return s;
}

Test(ops_gelu, backward_matches_finite_differences_and_may_alias_dout) {
    const tri_ops *o = cpu();
    const size_t n = 2001;
    rng r = {.s = 41};
    float *x = fvec(n), *R = frand(&r, n, -1, 1), *dx = fvec(n);
    for (size_t i = 0; i < n; i++) x[i] = (float)(-8.0 + 16.0 * (double)i / (double)(n - 1));
    ffill(dx, n, NAN);
    o->gelu_bwd(TC, dx, x, R, n);
    gelu_ctx c = {to_double(x, n), to_double(R, n), n};
    double *g = dvec(n);
    fd_grad(g, c.x, n, gelu_loss, &c, 1e-6);
    EXPECT_CLOSE("gelu dinp", dx, g, n, 1e-6, 1e-5);

    float *inplace = fcopy(R, n); /* dinp aliases dout */
    o->gelu_bwd(TC, inplace, x, inplace, n);
    cr_expect(memcmp(inplace, dx, n * sizeof(float)) == 0, "aliased gelu_bwd differs");

    /* far tails: the derivative is exactly 0 / 1 in fp32, never NaN */
    float tx[6] = {-1e20f, -50.0f, -INFINITY, 1e20f, 50.0f, INFINITY}, tg[6], ones[6];
    ffill(ones, 6, 1.0f);
    o->gelu_bwd(TC, tg, tx, ones, 6);
    for (int i = 0; i < 6; i++)
        cr_expect(tg[i] == (i < 3 ? 0.0f : 1.0f), "gelu'(%g) = %g", (double)tx[i], (double)tg[i]);
    free(x), free(R), free(dx), free(c.x), free(c.R), free(g), free(inplace);
}

Test(ops_gelu, vector_bodies_and_scalar_tails_give_the_same_bits) {
    /* the whole array (vector bodies, then a tail) against one element at a
     * time (always the scalar tail), over a range that crosses every branch */
    const tri_ops *o = cpu();
    const size_t n = 1003;
    rng r = {.s = 43};
    float *x = frand(&r, n, -40, 40), *dy = frand(&r, n, -1, 1);
    for (size_t i = 0; i < n; i += 7) x[i] *= 0.05f; /* many near 0, where u changes sign */
    float *y = fvec(n), *dx = fvec(n);
    o->gelu_fwd(TC, y, x, n);
    o->gelu_bwd(TC, dx, x, dy, n);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        float y1, dx1;
        o->gelu_fwd(TC, &y1, &x[i], 1);
        o->gelu_bwd(TC, &dx1, &x[i], &dy[i], 1);
        if (memcmp(&y1, &y[i], 4) != 0 || memcmp(&dx1, &dx[i], 4) != 0) {
            if (bad < 5)
                cr_log_error("x=%.9g: gelu %.9g vs %.9g, grad %.9g vs %.9g", (double)x[i], (double)y[i], (double)y1,
                             (double)dx[i], (double)dx1);
            bad++;
        }
    }
    cr_expect(bad == 0, "%zu elements depend on their position in the array", bad);
    free(x), free(dy), free(y), free(dx);
}

/* ------------------------------------------------------- residual and bias */

Test(ops_residual, forward_with_and_without_bias_and_aliasing) {
    const tri_ops *o = cpu();
    const size_t N = 7, C = 13;
    rng r = {.s = 51};
    float *res = frand(&r, N * C, -1, 1), *x = frand(&r, N * C, -1, 1), *b = frand(&r, C, -1, 1);
    double *want = dvec(N * C), *want_nb = dvec(N * C);
    for (size_t n = 0; n < N; n++)
        for (size_t c = 0; c < C; c++) {
            want_nb[n * C + c] = (double)res[n * C + c] + (double)x[n * C + c];
            want[n * C + c] = want_nb[n * C + c] + (double)b[c];
        }
    float *out = fvec(N * C);
    ffill(out, N * C, NAN);
    o->residual_fwd(TC, out, res, x, b, N, C);
    EXPECT_CLOSE("residual out", out, want, N * C, 1e-6, 1e-6);
    ffill(out, N * C, NAN);
    o->residual_fwd(TC, out, res, x, NULL, N, C);
    EXPECT_CLOSE("residual out (no bias)", out, want_nb, N * C, 1e-6, 1e-6);
    float *a1 = fcopy(res, N * C), *a2 = fcopy(x, N * C);
    o->residual_fwd(TC, a1, a1, x, b, N, C); /* out aliases res */
    EXPECT_CLOSE("residual out (out == res)", a1, want, N * C, 1e-6, 1e-6);
    o->residual_fwd(TC, a2, res, a2, b, N, C); /* out aliases x */
    EXPECT_CLOSE("residual out (out == x)", a2, want, N * C, 1e-6, 1e-6);
    free(res), free(x), free(b), free(want), free(want_nb), free(out), free(a1), free(a2);
}

typedef struct {
    double *res, *x, *b, *R;
    size_t N, C;
} resid_ctx;

static double resid_loss(void *p) {
    resid_ctx *c = p;
    double s = 0;
    for (size_t n = 0; n < c->N; n++)
        for (size_t j = 0; j < c->C; j++)
            s += (c->res[n * c->C + j] + c->x[n * c->C + j] + c->b[j]) * c->R[n * c->C + j];
    return s;
}

Test(ops_residual, bias_backward_accumulates_finite_differences) {
    const tri_ops *o = cpu();
    rng r = {.s = 52};
    /* small, and large enough for the threaded column-sum path */
    const size_t shapes[2][2] = {{9, 21}, {700, 131}};
    for (int k = 0; k < 2; k++) {
        const size_t N = shapes[k][0], C = shapes[k][1];
        float *res = frand(&r, N * C, -1, 1), *x = frand(&r, N * C, -1, 1);
        float *b = frand(&r, C, -1, 1), *R = frand(&r, N * C, -1, 1);
        float *db = frand(&r, C, -3, 3), *db0 = fcopy(db, C);
        o->bias_bwd(TC, db, R, N, C);
        resid_ctx c = {to_double(res, N * C), to_double(x, N * C), to_double(b, C), to_double(R, N * C), N, C};
        double *g = dvec(C);
        fd_grad(g, c.b, C, resid_loss, &c, 1e-3);
        for (size_t j = 0; j < C; j++) g[j] += db0[j];
        EXPECT_CLOSE("bias_bwd dbias", db, g, C, 1e-4, 1e-5);
        free(res), free(x), free(b), free(R), free(db), free(db0), free(g);
        free(c.res), free(c.x), free(c.b), free(c.R);
    }
}

/* ---------------------------------------------------------------- embedding */

static void ref_embedding(double *out, const int32_t *ids, const double *wte, const double *wpe, size_t B, size_t T,
                          size_t C, size_t vstart, size_t Vl) {
    for (size_t r = 0; r < B * T; r++)
        for (size_t c = 0; c < C; c++) {
            const long long id = ids[r];
            double v = 0;
            if (id >= (long long)vstart && id < (long long)(vstart + Vl))
                v += wte[(size_t)(id - (long long)vstart) * C + c];
            if (wpe) v += wpe[(r % T) * C + c];
            out[r * C + c] = v;
        }
}

typedef struct {
    int32_t *ids;
    double *wte, *wpe, *R, *tmp;
    size_t B, T, C, vstart, Vl;
} emb_ctx;

static double emb_loss(void *p) {
    emb_ctx *c = p;
    ref_embedding(c->tmp, c->ids, c->wte, c->wpe, c->B, c->T, c->C, c->vstart, c->Vl);
    return dot(c->tmp, c->R, c->B * c->T * c->C);
}

Test(ops_embedding, vocab_slice_forward_and_backward) {
    const tri_ops *o = cpu();
    const size_t B = 2, T = 5, C = 7, vstart = 4, Vl = 6; /* this rank: ids 4..9 */
    /* out-of-range ids (below, above, negative) and repeated in-range ids */
    int32_t ids[10] = {-1, 0, 3, 4, 6, 9, 10, 12, 6, 4};
    rng r = {.s = 61};
    float *wte = frand(&r, Vl * C, -1, 1), *wpe = frand(&r, T * C, -1, 1);
    float *R = frand(&r, B * T * C, -1, 1), *out = fvec(B * T * C);
    emb_ctx c = {
        ids, to_double(wte, Vl * C), to_double(wpe, T * C), to_double(R, B * T * C), dvec(B * T * C), B, T, C, vstart,
        Vl};
    for (int with_wpe = 0; with_wpe < 2; with_wpe++) {
        ffill(out, B * T * C, NAN);
        o->embedding_fwd(TC, out, ids, wte, with_wpe ? wpe : NULL, B, T, C, vstart, Vl);
        ref_embedding(c.tmp, ids, c.wte, with_wpe ? c.wpe : NULL, B, T, C, vstart, Vl);
        EXPECT_CLOSE(with_wpe ? "embedding out" : "embedding out (no wpe)", out, c.tmp, B * T * C, 1e-6, 1e-6);
    }
    /* rows of out-of-range ids without wpe are exactly zero */
    o->embedding_fwd(TC, out, ids, wte, NULL, B, T, C, vstart, Vl);
    for (size_t cc = 0; cc < C; cc++) cr_expect(out[0 * C + cc] == 0.0f && out[6 * C + cc] == 0.0f);

    float *dwte = frand(&r, Vl * C, -1, 1), *dwpe = frand(&r, T * C, -1, 1);
    float *dwte0 = fcopy(dwte, Vl * C), *dwpe0 = fcopy(dwpe, T * C);
    o->embedding_bwd(TC, dwte, dwpe, R, ids, B, T, C, vstart, Vl);
    double *g = dvec(Vl * C);
    fd_grad(g, c.wte, Vl * C, emb_loss, &c, 1e-3);
    for (size_t i = 0; i < Vl * C; i++) g[i] += dwte0[i];
    EXPECT_CLOSE("embedding dwte", dwte, g, Vl * C, 1e-6, 1e-6);
    fd_grad(g, c.wpe, T * C, emb_loss, &c, 1e-3);
    for (size_t i = 0; i < T * C; i++) g[i] += dwpe0[i];
    EXPECT_CLOSE("embedding dwpe", dwpe, g, T * C, 1e-6, 1e-6);

    /* dwpe NULL: dwte still accumulates once more */
    float *dwte1 = fcopy(dwte, Vl * C);
    o->embedding_bwd(TC, dwte, NULL, R, ids, B, T, C, vstart, Vl);
    fd_grad(g, c.wte, Vl * C, emb_loss, &c, 1e-3);
    for (size_t i = 0; i < Vl * C; i++) g[i] += dwte1[i];
    EXPECT_CLOSE("embedding dwte (dwpe NULL)", dwte, g, Vl * C, 1e-6, 1e-6);
    free(wte), free(wpe), free(R), free(out), free(dwte), free(dwpe), free(dwte0);
    free(dwpe0), free(dwte1), free(g), free(c.wte), free(c.wpe), free(c.R), free(c.tmp);
}

Test(ops_embedding, threaded_backward_is_exact_and_thread_count_independent) {
    const tri_ops *o = cpu();
    const size_t B = 4, T = 50, C = 97, vstart = 100, Vl = 40;
    rng r = {.s = 62};
    int32_t *ids = xmalloc(B * T * sizeof(int32_t));
    for (size_t i = 0; i < B * T; i++)
        ids[i] = (int32_t)(80 + (size_t)(rng_unit(&r) * 80.0)); /* half in range, repeats */
    float *R = frand(&r, B * T * C, -1, 1);
    float *dwte = fvec(Vl * C), *dwpe = fvec(T * C);
    ffill(dwte, Vl * C, 0.5f), ffill(dwpe, T * C, -0.5f);
    o->embedding_bwd(TC, dwte, dwpe, R, ids, B, T, C, vstart, Vl);
    double *gw = dvec(Vl * C), *gp = dvec(T * C);
    for (size_t i = 0; i < Vl * C; i++) gw[i] = 0.5;
    for (size_t i = 0; i < T * C; i++) gp[i] = -0.5;
    for (size_t row = 0; row < B * T; row++) {
        const long long id = ids[row];
        for (size_t c = 0; c < C; c++) {
            if (id >= (long long)vstart && id < (long long)(vstart + Vl))
                gw[(size_t)(id - (long long)vstart) * C + c] += R[row * C + c];
            gp[(row % T) * C + c] += R[row * C + c];
        }
    }
    EXPECT_CLOSE("embedding dwte (threaded)", dwte, gw, Vl * C, 1e-5, 1e-6);
    EXPECT_CLOSE("embedding dwpe (threaded)", dwpe, gp, T * C, 1e-5, 1e-6);

    float *w1 = fvec(Vl * C), *p1 = fvec(T * C);
    ffill(w1, Vl * C, 0.5f), ffill(p1, T * C, -0.5f);
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    o->embedding_bwd(TC, w1, p1, R, ids, B, T, C, vstart, Vl);
    omp_set_num_threads(saved);
    cr_expect(memcmp(w1, dwte, Vl * C * sizeof(float)) == 0, "dwte depends on thread count");
    cr_expect(memcmp(p1, dwpe, T * C * sizeof(float)) == 0, "dwpe depends on thread count");
    free(ids), free(R), free(dwte), free(dwpe), free(gw), free(gp), free(w1), free(p1);
}

/* ------------------------------------------------------------- crossentropy */

/* losses (N) of full-vocabulary logits (N, V) in double. */
static void ref_ce(double *losses, const double *logits, const int32_t *targets, size_t N, size_t V) {
    for (size_t n = 0; n < N; n++) {
        const double *l = logits + n * V;
        double mx = -INFINITY, s = 0;
        for (size_t j = 0; j < V; j++) mx = l[j] > mx ? l[j] : mx;
        for (size_t j = 0; j < V; j++) s += exp(l[j] - mx);
        losses[n] = log(s) + mx - l[targets[n]];
    }
}

typedef struct {
    double *logits, *tmp, dscale;
    const int32_t *targets;
    size_t N, V;
} ce_ctx;

static double ce_loss(void *p) /* dscale * sum of the losses */
{
    ce_ctx *c = p;
    ref_ce(c->tmp, c->logits, c->targets, c->N, c->V);
    double s = 0;
    for (size_t n = 0; n < c->N; n++) s += c->tmp[n];
    return c->dscale * s;
}

/* Splits full logits (N, V) over `ranks` slices of Vl columns (Vl * ranks >= V,
 * padded columns filled with `pad`), runs the stats pass per rank, combines
 * the stats by hand as tensor-parallel ranks would (M = max m_r,
 * S = sum S_r exp(m_r - M), target from its owner), runs the backward per
 * rank and checks losses and gradients against the full-vocabulary double
 * reference and its finite differences. */
static void check_ce_ranks(size_t N, size_t V, size_t Vl, size_t ranks, float pad, int fd_check) {
    const tri_ops *o = cpu();
    const float dscale = 1.0f / (float)N;
    rng r = {.s = 71 + V};
    float *full = frand(&r, N * V, -4, 4);
    /* a rising trend, so that later chunks raise the running max */
    for (size_t n = 0; n < N; n++)
        for (size_t j = 0; j < V; j++) full[n * V + j] += (float)(3.0 * (double)j / (double)V);
    int32_t *targets = xmalloc(N * sizeof(int32_t));
    for (size_t n = 0; n < N; n++) { /* first, last, rank boundaries and random */
        size_t t = n == 0 ? 0 : n == 1 ? V - 1 : n == 2 ? Vl - 1 : n == 3 ? Vl : (size_t)(rng_unit(&r) * (double)V);
        targets[n] = (int32_t)(t < V ? t : V - 1);
    }

    float **slice = xmalloc(ranks * sizeof(float *)), **stats = xmalloc(ranks * sizeof(float *));
    for (size_t k = 0; k < ranks; k++) {
        slice[k] = fvec(N * Vl);
        stats[k] = fvec(3 * N);
        ffill(stats[k], 3 * N, NAN);
        for (size_t n = 0; n < N; n++)
            for (size_t j = 0; j < Vl; j++) {
                const size_t gj = k * Vl + j;
                slice[k][n * Vl + j] = gj < V ? full[n * V + gj] : pad;
            }
        o->crossentropy_stats(TC, stats[k], slice[k], targets, N, Vl, k * Vl, V);
        /* each rank's stats against its own columns in double */
        for (size_t n = 0; n < N; n++) {
            double m = -INFINITY, s = 0, t = 0;
            for (size_t j = 0; j < Vl && k * Vl + j < V; j++) m = fmax(m, (double)slice[k][n * Vl + j]);
            for (size_t j = 0; j < Vl && k * Vl + j < V; j++) s += exp((double)slice[k][n * Vl + j] - m);
            if ((size_t)targets[n] >= k * Vl && (size_t)targets[n] < k * Vl + Vl)
                t = slice[k][n * Vl + (size_t)targets[n] - k * Vl];
            const float *st = stats[k] + 3 * n;
            if (isinf(m)) /* a rank without real columns */
                cr_expect(isinf(st[0]) && st[0] < 0 && st[1] == 0.0f && st[2] == 0.0f, "rank %zu row %zu: (%g, %g, %g)",
                          k, n, st[0], st[1], st[2]);
            else
                cr_expect(st[0] == (float)m && close_enough(st[1], s, 0, 1e-5) && st[2] == (float)t,
                          "rank %zu row %zu stats (%g, %g, %g), want (%g, %g, %g)", k, n, (double)st[0], (double)st[1],
                          (double)st[2], m, s, t);
        }
    }
    float *comb = fvec(3 * N);
    for (size_t n = 0; n < N; n++) {
        double M = -INFINITY, S = 0, tl = 0;
        for (size_t k = 0; k < ranks; k++) M = fmax(M, (double)stats[k][3 * n]);
        for (size_t k = 0; k < ranks; k++) {
            const double m = stats[k][3 * n];
            S += isinf(m) ? 0.0 : (double)stats[k][3 * n + 1] * exp(m - M);
            tl += stats[k][3 * n + 2];
        }
        comb[3 * n] = (float)M, comb[3 * n + 1] = (float)S, comb[3 * n + 2] = (float)tl;
    }

    ce_ctx c = {to_double(full, N * V), dvec(N), dscale, targets, N, V};
    double *want_loss = dvec(N);
    ref_ce(want_loss, c.logits, targets, N, V);
    double *g = dvec(N * V);
    if (fd_check) {
        fd_grad(g, c.logits, N * V, ce_loss, &c, 1e-5);
    } else { /* large case: softmax - onehot written out in double */
        for (size_t n = 0; n < N; n++) {
            const double *l = c.logits + n * V;
            double mx = -INFINITY, s = 0;
            for (size_t j = 0; j < V; j++) mx = fmax(mx, l[j]);
            for (size_t j = 0; j < V; j++) s += exp(l[j] - mx);
            for (size_t j = 0; j < V; j++) g[n * V + j] = dscale * (exp(l[j] - mx) / s - (j == (size_t)targets[n]));
        }
    }
    float *losses = fvec(N), *dl = fvec(N * Vl), *got = fvec(N * V);
    for (size_t k = 0; k < ranks; k++) {
        ffill(losses, N, NAN), ffill(dl, N * Vl, NAN);
        o->crossentropy_bwd(TC, losses, dl, slice[k], comb, targets, dscale, N, Vl, k * Vl, V);
        EXPECT_CLOSE("ce losses", losses, want_loss, N, 1e-5, 1e-5);
        for (size_t n = 0; n < N; n++)
            for (size_t j = 0; j < Vl; j++) {
                const size_t gj = k * Vl + j;
                if (gj < V)
                    got[n * V + gj] = dl[n * Vl + j];
                else
                    cr_expect(dl[n * Vl + j] == 0.0f, "padded column %zu has gradient %g", gj, (double)dl[n * Vl + j]);
            }
        /* in place (dlogits == logits) gives the same bits; losses may be NULL */
        float *inplace = fcopy(slice[k], N * Vl);
        o->crossentropy_bwd(TC, NULL, inplace, inplace, comb, targets, dscale, N, Vl, k * Vl, V);
        cr_expect(memcmp(inplace, dl, N * Vl * sizeof(float)) == 0, "in-place ce_bwd differs");
        /* dlogits NULL: losses only */
        ffill(losses, N, NAN);
        o->crossentropy_bwd(TC, losses, NULL, slice[k], comb, targets, dscale, N, Vl, k * Vl, V);
        EXPECT_CLOSE("ce losses (no dlogits)", losses, want_loss, N, 1e-5, 1e-5);
        free(inplace);
    }
    EXPECT_CLOSE("ce dlogits", got, g, N * V, 1e-6, 1e-4);
    for (size_t k = 0; k < ranks; k++) free(slice[k]), free(stats[k]);
    free(slice), free(stats), free(full), free(targets), free(comb), free(c.logits), free(c.tmp);
    free(want_loss), free(g), free(losses), free(dl), free(got);
}

Test(ops_crossentropy, one_rank_with_padded_columns) { check_ce_ranks(5, 37, 40, 1, 50.0f, 1); }

Test(ops_crossentropy, two_ranks_combined_by_hand) {
    check_ce_ranks(6, 37, 20, 2, 50.0f, 1); /* rank 1: vstart 20, columns 37..39 padded */
}

Test(ops_crossentropy, three_ranks_one_without_real_columns) {
    check_ce_ranks(6, 30, 16, 3, -50.0f, 1); /* rank 2 starts at 32 >= V */
}

Test(ops_crossentropy, long_rows_cross_online_chunks, .timeout = 60) { check_ce_ranks(33, 3001, 1700, 2, 1000.0f, 0); }

Test(ops_crossentropy, nan_logit_gives_nan_loss) {
    const tri_ops *o = cpu();
    float logits[2 * 4] = {1, 2, NAN, 0, 1, 2, 3, 4};
    int32_t targets[2] = {1, 2};
    float stats[6], losses[2];
    o->crossentropy_stats(TC, stats, logits, targets, 2, 4, 0, 4);
    o->crossentropy_bwd(TC, losses, NULL, logits, stats, targets, 1.0f, 2, 4, 0, 4);
    cr_expect(isnan(losses[0]), "a NaN logit must not be hidden: loss %g", (double)losses[0]);
    cr_expect(!isnan(losses[1]));
}

/* -------------------------------------------------------------------- adamw */

Test(ops_adamw, two_steps_match_closed_form) {
    const tri_ops *o = cpu();
    const size_t n = 20001; /* beyond the threading threshold */
    const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f;
    rng r = {.s = 81};
    float *p0 = frand(&r, n, -1, 1), *g1 = frand(&r, n, -1, 1), *g2 = frand(&r, n, -1, 1);
    for (int with_wd = 0; with_wd < 2; with_wd++) {
        const float wd = with_wd ? 0.1f : 0.0f;
        float *p = fcopy(p0, n), *m = fvec(n), *v = fvec(n);
        ffill(m, n, 0.0f), ffill(v, n, 0.0f);
        o->adamw(TC, p, m, v, g1, n, lr, b1, b2, eps, wd, 1);
        o->adamw(TC, p, m, v, g2, n, lr, b1, b2, eps, wd, 2);
        double *wp = dvec(n), *wm = dvec(n), *wv = dvec(n);
        for (size_t i = 0; i < n; i++) {
            const double a = g1[i], b = g2[i], B1 = b1, B2 = b2;
            /* step 1: mhat = g1, vhat = g1^2 */
            const double p1 = p0[i] - lr * (a / (fabs(a) + eps) + wd * p0[i]);
            /* step 2: mhat = (b1 g1 + g2) / (1 + b1), vhat = (b2 g1^2 + g2^2) / (1 + b2) */
            const double mh = (B1 * a + b) / (1 + B1), vh = (B2 * a * a + b * b) / (1 + B2);
            wp[i] = p1 - lr * (mh / (sqrt(vh) + eps) + wd * p1);
            wm[i] = (1 - B1) * (B1 * a + b);
            wv[i] = (1 - B2) * (B2 * a * a + b * b);
        }
        EXPECT_CLOSE("adamw param", p, wp, n, 2e-6, 1e-5);
        EXPECT_CLOSE("adamw m", m, wm, n, 1e-7, 1e-5);
        EXPECT_CLOSE("adamw v", v, wv, n, 1e-8, 1e-5);
        free(p), free(m), free(v), free(wp), free(wm), free(wv);
    }
    free(p0), free(g1), free(g2);
}

/* ------------------------------------------------------ reductions, helpers */

/* sum (square = 0) or sum of squares (square = 1) against a long double
 * reference, within 1e-13 of the sum of magnitudes (the double rounding of
 * ~3e5 terms), reproducible and independent of the thread count */
static void check_reduction(int square) {
    const tri_ops *o = cpu();
    const size_t sizes[4] = {0, 5, 1000, 300007};
    rng r = {.s = 91};
    for (int k = 0; k < 4; k++) {
        const size_t n = sizes[k];
        float *x = frand(&r, n, -3, 3);
        long double want = 0, mag = 0;
        for (size_t i = 0; i < n; i++) {
            const long double t = square ? (long double)x[i] * (long double)x[i] : (long double)x[i];
            want += t;
            mag += fabsl(t);
        }
        double (*f)(tri_ctx *, const float *, size_t) = square ? o->sumsq : o->sum;
        const double got = f(TC, x, n);
        cr_expect(fabsl((long double)got - want) <= 1e-13L * mag + 1e-300L, "%s n=%zu: %.17g vs %.17Lg",
                  square ? "sumsq" : "sum", n, got, want);
        const double again = f(TC, x, n);
        cr_expect(memcmp(&got, &again, sizeof got) == 0, "not reproducible");
        const int saved = omp_get_max_threads();
        omp_set_num_threads(1);
        const double single = f(TC, x, n);
        omp_set_num_threads(saved);
        cr_expect(memcmp(&got, &single, sizeof got) == 0, "depends on the thread count");
        free(x);
    }
}

Test(ops_reduce, sumsq_in_double_and_reproducible) { check_reduction(1); }
Test(ops_reduce, sum_in_double_and_reproducible) { check_reduction(0); }

Test(ops_reduce, scale_and_add) {
    const tri_ops *o = cpu();
    const size_t sizes[2] = {37, 50001};
    rng r = {.s = 92};
    for (int k = 0; k < 2; k++) {
        const size_t n = sizes[k];
        float *x = frand(&r, n, -2, 2), *y = frand(&r, n, -2, 2);
        double *wy = dvec(n), *wx = dvec(n);
        for (size_t i = 0; i < n; i++) {
            wy[i] = (double)y[i] + (double)x[i];
            wx[i] = (double)x[i] * -0.75;
        }
        o->add(TC, y, x, n);
        EXPECT_CLOSE("add", y, wy, n, 1e-6, 1e-6);
        o->scale(TC, x, -0.75f, n);
        EXPECT_CLOSE("scale", x, wx, n, 0, 1e-7);
        free(x), free(y), free(wy), free(wx);
    }
}

/* ------------------------------------------------------------- determinism */

Test(ops_determinism, layernorm_and_bias_reductions_do_not_depend_on_threads) {
    const tri_ops *o = cpu();
    const size_t N = 517, C = 200; /* above the threading threshold */
    rng r = {.s = 101};
    float *inp = frand(&r, N * C, -2, 2), *w = frand(&r, C, 0.5, 1.5), *b = frand(&r, C, -1, 1);
    float *dout = frand(&r, N * C, -1, 1), *out = fvec(N * C), *mean = fvec(N), *rstd = fvec(N);
    o->layernorm_fwd(TC, out, mean, rstd, inp, w, b, N, C);
    float *res[2][4];
    const int saved = omp_get_max_threads();
    for (int pass = 0; pass < 2; pass++) {
        omp_set_num_threads(pass == 0 ? saved : 1);
        float *di = fvec(N * C), *dw = fvec(C), *db = fvec(C), *cs = fvec(C);
        ffill(di, N * C, 0.25f), ffill(dw, C, 0.25f), ffill(db, C, 0.25f), ffill(cs, C, 0.0f);
        o->layernorm_bwd(TC, di, dw, db, dout, inp, w, mean, rstd, N, C);
        o->bias_bwd(TC, cs, dout, N, C);
        res[pass][0] = di, res[pass][1] = dw, res[pass][2] = db, res[pass][3] = cs;
    }
    omp_set_num_threads(saved);
    cr_expect(memcmp(res[0][0], res[1][0], N * C * sizeof(float)) == 0, "layernorm dinp");
    cr_expect(memcmp(res[0][1], res[1][1], C * sizeof(float)) == 0, "layernorm dw");
    cr_expect(memcmp(res[0][2], res[1][2], C * sizeof(float)) == 0, "layernorm db");
    cr_expect(memcmp(res[0][3], res[1][3], C * sizeof(float)) == 0, "bias column sums");
    for (int p = 0; p < 2; p++)
        for (int k = 0; k < 4; k++) free(res[p][k]);
    free(inp), free(w), free(b), free(dout), free(out), free(mean), free(rstd);
}
