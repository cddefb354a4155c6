/* The CUDA kernels of kernels/cuda, run under the emulation layer, against
 * the CPU ops (kernels/cpu), on awkward shapes (sizes that are not multiples
 * of 32 or of the block size), under several scheduling seeds, with every
 * overwritten output (and every scratch buffer) poisoned with NaN first and
 * every accumulated output pre-filled with random values. Every buffer is
 * emulated device memory (dev_mem.h), as a launch accepts no other pointer.
 *
 * Tolerances. Both sides compute in fp32 with sums in different orders, so
 * they differ by rounding only. A sum of L terms in fp32 is off by at most
 * about L * eps * (sum of the terms' magnitudes), eps = FLT_EPSILON; the
 * tests allow |cuda - cpu| <= 2 * (L + 4) * eps * scale, with L the longest
 * reduction behind the value (C for a row's statistics, N for dw, db) and
 * `scale` the magnitudes involved (said at each check). For GELU (no
 * reduction) the two exps differ by a few ulp and the argument's rounding is
 * amplified by |u|: |cuda - cpu| <= (8 + 8 |u|) * eps * scale. NaN never
 * passes. */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/kernels.h"
#include "kernels/half.h"
#include "tests/cuemu/cuemu_api.h"
#include "tests/cuemu/dev_mem.h"

static uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static float uniform(uint64_t *s, float lo, float hi) {
    return lo + (hi - lo) * (float)((double)(rng_next(s) >> 11) / 9007199254740992.0);
}

static float *alloc_fill(size_t n, uint64_t *s, float lo, float hi) {
    float *x = dev_alloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) x[i] = uniform(s, lo, hi);
    return x;
}

static float *alloc_nan(size_t n) {
    float *x = dev_alloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) x[i] = NAN;
    return x;
}

static float *dup(const float *x, size_t n) {
    float *y = dev_alloc(sizeof(float) * (n ? n : 1));
    memcpy(y, x, sizeof(float) * n);
    return y;
}

/* Every |got[i] - want[i]| <= tol * scale[i] (scale NULL: 1 + |want[i]|). */
static void expect_close(const char *what, const float *got, const float *want, const double *scale, size_t n,
                         double tol, const char *shape) {
    for (size_t i = 0; i < n; i++) {
        const double sc = scale ? scale[i] : 1.0 + fabs((double)want[i]);
        const double err = fabs((double)got[i] - (double)want[i]);
        const double ratio = err / (tol * sc);
        if (!(ratio <= 1.0)) { /* NaN fails here too */
            cr_assert_fail("%s %s: element %zu is %.9g, the CPU op gives %.9g (|diff| %.3g > tolerance %.3g)", what,
                           shape, i, got[i], want[i], err, tol * sc);
        }
    }
}

static double sum_tol(size_t L) { return 2.0 * (double)(L + 4) * FLT_EPSILON; }

/* ---- bf16 storage ----
 * A bf16 kernel reads bf16 tensors, computes in fp32 and rounds each stored
 * value once; the CPU's bf16 emulation (kernels/ops.h) does the same, so its
 * reference is the fp32 CPU op on the bf16 inputs, each output rounded to
 * bf16. The two fp32 values before rounding differ by the fp32 tolerance of
 * the op; rounding each to bf16 (8 significant bits) adds at most one bf16
 * spacing, BF16_EPS * |value| with BF16_EPS = 2^-7, between them. So a bf16
 * check allows (fp32 tolerance) + BF16_EPS * |want|. */
#define BF16_EPS (1.0 / 128.0)

/* n floats rounded to bf16: the bits (for the kernel) and, if `as_f32` is
 * non-NULL, the same values widened (for the CPU op). */
static uint16_t *to_bf16(const float *x, size_t n, float *as_f32) {
    uint16_t *h = dev_alloc(sizeof(uint16_t) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) {
        h[i] = tri_f32_to_bf16(x[i]);
        if (as_f32) as_f32[i] = tri_bf16_to_f32(h[i]);
    }
    return h;
}

/* n bf16 values, NaN (0x7fc0) everywhere: a poisoned bf16 output. */
static uint16_t *alloc_nan_bf16(size_t n) {
    uint16_t *h = dev_alloc(sizeof(uint16_t) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) h[i] = 0x7fc0;
    return h;
}

/* In place: every value rounded to bf16 (the CPU reference's stores). */
static void round_bf16(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = tri_round_bf16(x[i]);
}

/* The bf16 check: |got - want| <= tol * scale[i] + BF16_EPS * |want| (scale
 * NULL: 1 + |want|). */
static void expect_close_bf16(const char *what, const uint16_t *got_h, const float *want, const double *scale, size_t n,
                              double tol, const char *shape) {
    for (size_t i = 0; i < n; i++) {
        const float got = tri_bf16_to_f32(got_h[i]);
        const double sc = scale ? scale[i] : 1.0 + fabs((double)want[i]);
        const double lim = tol * sc + BF16_EPS * fabs((double)want[i]);
        const double err = fabs((double)got - (double)want[i]);
        if (!(err <= lim))
            cr_assert_fail("%s %s (bf16): element %zu is %.9g, the CPU op gives %.9g (|diff| %.3g > tolerance %.3g)",
                           what, shape, i, got, want[i], err, lim);
    }
}

/* ---- LayerNorm ---- */

static const size_t LN_SHAPES[][2] = {{1, 1}, {3, 5}, {7, 33}, {17, 100}, {5, 257}, {100, 31}, {1100, 7}, {37, 768}};

/* The magnitudes behind layernorm_bwd's outputs (the CPU's results r*):
 * dinp: rstd * (|g| + |mean g| + |xhat| |mean g xhat|) + |dinp before|,
 * bounded by rstd * (1 + |xhat|) * 2 max|g| + |dinp before|; dw, db: the
 * sums of |dout * xhat| and |dout| over rows plus |dw, db before|. */
static void ln_bwd_scales(const float *dout, const float *inp, const float *w, const float *rmean, const float *rrstd,
                          const float *rdinp, const float *rdw, const float *rdb, size_t N, size_t C,
                          double **sc_in_out, double **sc_w_out, double **sc_b_out) {
    double *sc_in = dev_alloc(sizeof(double) * N * C), *sc_w = dev_calloc(C, sizeof(double)),
           *sc_b = dev_calloc(C, sizeof(double));
    double gmax = 0;
    for (size_t i = 0; i < N * C; i++) gmax = fmax(gmax, fabs((double)dout[i] * w[i % C]));
    for (size_t n = 0; n < N; n++)
        for (size_t c = 0; c < C; c++) {
            const size_t i = n * C + c;
            const double xhat = ((double)inp[i] - rmean[n]) * rrstd[n];
            sc_in[i] = 1.0 + fabs((double)rdinp[i]) + rrstd[n] * (1.0 + fabs(xhat)) * 2.0 * gmax;
            sc_w[c] += fabs(dout[i] * xhat);
            sc_b[c] += fabs((double)dout[i]);
        }
    for (size_t c = 0; c < C; c++) {
        sc_w[c] += 1.0 + fabs((double)rdw[c]);
        sc_b[c] += 1.0 + fabs((double)rdb[c]);
    }
    *sc_in_out = sc_in, *sc_w_out = sc_w, *sc_b_out = sc_b;
}

static void layernorm_case(size_t N, size_t C, uint64_t seed) {
    char shape[96];
    snprintf(shape, sizeof shape, "(N %zu, C %zu, seed %llu)", N, C, (unsigned long long)seed);
    uint64_t s = seed * 7919 + N * 31 + C;
    float *inp = alloc_fill(N * C, &s, -2.0f, 2.0f);
    for (size_t i = 0; i < N * C; i++) inp[i] += (float)(i / C % 3); /* rows with different means */
    float *w = alloc_fill(C, &s, 0.5f, 1.5f), *b = alloc_fill(C, &s, -0.5f, 0.5f);
    float *out = alloc_nan(N * C), *mean = alloc_nan(N), *rstd = alloc_nan(N);
    float *rout = alloc_nan(N * C), *rmean = alloc_nan(N), *rrstd = alloc_nan(N);
    tri_cuemu_set_seed(seed);
    tri_cuemu_layernorm_fwd(NULL, TRI_F32, out, mean, rstd, inp, w, b, N, C);
    tri_cpu_layernorm_fwd(rout, rmean, rrstd, inp, w, b, N, C);
    /* mean: scale 1 + |mean| (inputs are O(1)); rstd and out: relative to
     * themselves plus 1 */
    expect_close("layernorm_fwd mean", mean, rmean, NULL, N, sum_tol(C), shape);
    expect_close("layernorm_fwd rstd", rstd, rrstd, NULL, N, sum_tol(C), shape);
    expect_close("layernorm_fwd out", out, rout, NULL, N * C, sum_tol(C), shape);

    /* backward from the CPU's saved statistics, into pre-filled gradients */
    float *dout = alloc_fill(N * C, &s, -1.0f, 1.0f);
    float *dinp = alloc_fill(N * C, &s, -1.0f, 1.0f), *dw = alloc_fill(C, &s, -1.0f, 1.0f);
    float *db = alloc_fill(C, &s, -1.0f, 1.0f);
    float *rdinp = dup(dinp, N * C), *rdw = dup(dw, C), *rdb = dup(db, C);
    float *scratch = alloc_nan(tri_cuemu_layernorm_bwd_scratch_floats(N, C));
    tri_cuemu_layernorm_bwd(NULL, TRI_F32, dinp, dw, db, scratch, dout, inp, w, rmean, rrstd, N, C);
    tri_cpu_layernorm_bwd(rdinp, rdw, rdb, dout, inp, w, rmean, rrstd, N, C);
    double *sc_in, *sc_w, *sc_b;
    ln_bwd_scales(dout, inp, w, rmean, rrstd, rdinp, rdw, rdb, N, C, &sc_in, &sc_w, &sc_b);
    expect_close("layernorm_bwd dinp", dinp, rdinp, sc_in, N * C, sum_tol(C), shape);
    expect_close("layernorm_bwd dw", dw, rdw, sc_w, C, sum_tol(N), shape);
    expect_close("layernorm_bwd db", db, rdb, sc_b, C, sum_tol(N), shape);

    dev_free(sc_in), dev_free(sc_w), dev_free(sc_b);
    dev_free(inp), dev_free(w), dev_free(b), dev_free(out), dev_free(mean), dev_free(rstd), dev_free(rout),
        dev_free(rmean), dev_free(rrstd);
    dev_free(dout), dev_free(dinp), dev_free(dw), dev_free(db), dev_free(rdinp), dev_free(rdw), dev_free(rdb),
        dev_free(scratch);
}

Test(cuda_emu, layernorm_fwd_bwd_match_the_cpu_op) {
    for (size_t k = 0; k < sizeof LN_SHAPES / sizeof LN_SHAPES[0]; k++)
        for (uint64_t seed = 1; seed <= 3; seed++) layernorm_case(LN_SHAPES[k][0], LN_SHAPES[k][1], seed);
}

/* bf16 storage: out, inp, w, b, dinp and dout bf16, mean, rstd, dw and db
 * fp32. The reference is the fp32 CPU op on the rounded inputs, its bf16
 * outputs rounded; dinp accumulates into bf16, so its reference is
 * round(old + the CPU's fp32 increment). The fp32 outputs (mean, rstd, dw,
 * db) are computed from the same fp32 values on both sides: the fp32
 * tolerances of layernorm_case; the bf16 ones add one bf16 spacing. */
static void layernorm_case_bf16(size_t N, size_t C, uint64_t seed) {
    char shape[96];
    snprintf(shape, sizeof shape, "(N %zu, C %zu, seed %llu)", N, C, (unsigned long long)seed);
    uint64_t s = seed * 7927 + N * 37 + C;
    float *inp = alloc_fill(N * C, &s, -2.0f, 2.0f);
    for (size_t i = 0; i < N * C; i++) inp[i] += (float)(i / C % 3); /* rows with different means */
    float *w = alloc_fill(C, &s, 0.5f, 1.5f), *b = alloc_fill(C, &s, -0.5f, 0.5f);
    uint16_t *inp_h = to_bf16(inp, N * C, inp), *w_h = to_bf16(w, C, w), *b_h = to_bf16(b, C, b);
    uint16_t *out_h = alloc_nan_bf16(N * C);
    float *mean = alloc_nan(N), *rstd = alloc_nan(N);
    float *rout = alloc_nan(N * C), *rmean = alloc_nan(N), *rrstd = alloc_nan(N);
    tri_cuemu_set_seed(seed);
    tri_cuemu_layernorm_fwd(NULL, TRI_BF16, out_h, mean, rstd, inp_h, w_h, b_h, N, C);
    tri_cpu_layernorm_fwd(rout, rmean, rrstd, inp, w, b, N, C);
    expect_close("layernorm_fwd mean", mean, rmean, NULL, N, sum_tol(C), shape);
    expect_close("layernorm_fwd rstd", rstd, rrstd, NULL, N, sum_tol(C), shape);
    float *want_out = dup(rout, N * C);
    round_bf16(want_out, N * C);
    expect_close_bf16("layernorm_fwd out", out_h, want_out, NULL, N * C, sum_tol(C), shape);

    /* backward from the CPU's saved statistics, into pre-filled gradients */
    float *dout = alloc_fill(N * C, &s, -1.0f, 1.0f), *dinp = alloc_fill(N * C, &s, -1.0f, 1.0f);
    uint16_t *dout_h = to_bf16(dout, N * C, dout), *dinp_h = to_bf16(dinp, N * C, dinp);
    float *dw = alloc_fill(C, &s, -1.0f, 1.0f), *db = alloc_fill(C, &s, -1.0f, 1.0f);
    float *rdinp = dup(dinp, N * C), *rdw = dup(dw, C), *rdb = dup(db, C);
    float *scratch = alloc_nan(tri_cuemu_layernorm_bwd_scratch_floats(N, C));
    tri_cuemu_set_seed(seed + 11);
    tri_cuemu_layernorm_bwd(NULL, TRI_BF16, dinp_h, dw, db, scratch, dout_h, inp_h, w_h, rmean, rrstd, N, C);
    tri_cpu_layernorm_bwd(rdinp, rdw, rdb, dout, inp, w, rmean, rrstd, N, C); /* rdinp = old + increment, fp32 */
    double *sc_in, *sc_w, *sc_b;
    ln_bwd_scales(dout, inp, w, rmean, rrstd, rdinp, rdw, rdb, N, C, &sc_in, &sc_w, &sc_b);
    round_bf16(rdinp, N * C);
    expect_close_bf16("layernorm_bwd dinp", dinp_h, rdinp, sc_in, N * C, sum_tol(C), shape);
    expect_close("layernorm_bwd dw", dw, rdw, sc_w, C, sum_tol(N), shape);
    expect_close("layernorm_bwd db", db, rdb, sc_b, C, sum_tol(N), shape);

    dev_free(sc_in), dev_free(sc_w), dev_free(sc_b), dev_free(want_out);
    dev_free(inp), dev_free(w), dev_free(b), dev_free(inp_h), dev_free(w_h), dev_free(b_h), dev_free(out_h),
        dev_free(mean), dev_free(rstd), dev_free(rout);
    dev_free(rmean), dev_free(rrstd), dev_free(dout), dev_free(dinp), dev_free(dout_h), dev_free(dinp_h), dev_free(dw),
        dev_free(db), dev_free(rdinp);
    dev_free(rdw), dev_free(rdb), dev_free(scratch);
}

Test(cuda_emu, layernorm_bf16_matches_the_cpu_op_on_rounded_values) {
    for (size_t k = 0; k < sizeof LN_SHAPES / sizeof LN_SHAPES[0]; k++)
        for (uint64_t seed = 1; seed <= 2; seed++) layernorm_case_bf16(LN_SHAPES[k][0], LN_SHAPES[k][1], seed);
}

/* The backward's dw and db are reduced in a fixed order (no atomics): the
 * same bits under every scheduling seed and worker count. */
Test(cuda_emu, layernorm_bwd_weight_grads_do_not_depend_on_scheduling) {
    const size_t N = 203, C = 45;
    uint64_t s = 99;
    float *inp = alloc_fill(N * C, &s, -2.0f, 2.0f), *w = alloc_fill(C, &s, 0.5f, 1.5f);
    float *dout = alloc_fill(N * C, &s, -1.0f, 1.0f), *mean = alloc_nan(N), *rstd = alloc_nan(N);
    float *tmp = alloc_nan(N * C), *b = alloc_fill(C, &s, -0.5f, 0.5f);
    tri_cpu_layernorm_fwd(tmp, mean, rstd, inp, w, b, N, C);
    float first[2 * 45];
    for (int run = 0; run < 6; run++) {
        float *dw = dev_calloc(C, sizeof(float)), *db = dev_calloc(C, sizeof(float));
        float *scratch = alloc_nan(tri_cuemu_layernorm_bwd_scratch_floats(N, C));
        tri_cuemu_set_workers(run % 2 + 1);
        tri_cuemu_set_seed((uint64_t)run * 17 + 1);
        tri_cuemu_layernorm_bwd(NULL, TRI_F32, tmp, dw, db, scratch, dout, inp, w, mean, rstd, N, C);
        if (run == 0) {
            memcpy(first, dw, sizeof(float) * C);
            memcpy(first + C, db, sizeof(float) * C);
        } else {
            cr_expect(memcmp(first, dw, sizeof(float) * C) == 0 && memcmp(first + C, db, sizeof(float) * C) == 0,
                      "run %d gave other bits", run);
        }
        dev_free(scratch), dev_free(dw), dev_free(db);
    }
    tri_cuemu_set_workers(2);
    dev_free(inp), dev_free(w), dev_free(dout), dev_free(mean), dev_free(rstd), dev_free(tmp), dev_free(b);
}

/* ---- GELU ---- */

static void gelu_terms(double x, double *u, double *s, double *t) {
    const double k0 = 0.79788456080286535588, k1 = 0.044715;
    *u = k0 * (x + k1 * x * x * x);
    const double a = exp(-2.0 * fabs(*u)); /* s = sigmoid(2u), s (1 - s) = a / (1 + a)^2: no cancellation */
    *s = (*u >= 0 ? 1.0 : a) / (1.0 + a);
    *t = 2.0 * x * k0 * (1.0 + 3.0 * k1 * x * x) * a / ((1.0 + a) * (1.0 + a));
}

static void gelu_case(size_t N, uint64_t seed) {
    char shape[64];
    snprintf(shape, sizeof shape, "(N %zu, seed %llu)", N, (unsigned long long)seed);
    uint64_t s = seed * 104729 + N;
    float *inp = alloc_fill(N, &s, -8.0f, 8.0f);
    /* the edges: zero, around the +-30 cut-offs, huge values whose cube overflows */
    const float edge[] = {0.0f, -0.0f, 29.9f, 30.1f, -29.9f, -30.1f, 1e20f, -1e20f, -0.7518f, 5e-39f};
    for (size_t i = 0; i < sizeof edge / sizeof edge[0] && i < N; i++) inp[(i * 7919) % N] = edge[i];
    float *out = alloc_nan(N), *ref = alloc_nan(N);
    tri_cuemu_set_seed(seed);
    tri_cuemu_gelu_fwd(NULL, TRI_F32, out, inp, N);
    tri_cpu_gelu_fwd(ref, inp, N);
    double *sc = dev_alloc(sizeof(double) * N), *scb = dev_alloc(sizeof(double) * N);
    float *dout = alloc_fill(N, &s, -2.0f, 2.0f);
    for (size_t i = 0; i < N; i++) {
        double u, sv, t;
        gelu_terms(fabs(inp[i]) > 30 ? 0.0 : inp[i], &u, &sv, &t);
        /* relative to the value itself (x s has no cancellation), widened by
         * |u| for the exp's argument; the backward relative to |s| + |t| */
        sc[i] = (8.0 + 8.0 * fabs(u)) * (fabs((double)ref[i]) + FLT_MIN);
        scb[i] = (8.0 + 8.0 * fabs(u)) * ((fabs(sv) + fabs(t)) * fabs((double)dout[i]) + FLT_MIN);
    }
    expect_close("gelu_fwd", out, ref, sc, N, FLT_EPSILON, shape);

    float *dinp = alloc_nan(N), *rdinp = alloc_nan(N);
    tri_cuemu_gelu_bwd(NULL, TRI_F32, dinp, inp, dout, N);
    tri_cpu_gelu_bwd(rdinp, inp, dout, N);
    expect_close("gelu_bwd", dinp, rdinp, scb, N, FLT_EPSILON, shape);
    /* dinp may alias dout */
    float *inplace = dup(dout, N);
    tri_cuemu_gelu_bwd(NULL, TRI_F32, inplace, inp, inplace, N);
    cr_expect(memcmp(inplace, dinp, sizeof(float) * N) == 0, "gelu_bwd in place differs from out of place %s", shape);
    dev_free(inp), dev_free(out), dev_free(ref), dev_free(sc), dev_free(scb), dev_free(dout), dev_free(dinp),
        dev_free(rdinp), dev_free(inplace);
}

/* bf16 storage: the kernels on bf16 inputs against the fp32 CPU op on the
 * same (rounded) values, outputs rounded; the tolerances of gelu_case plus
 * one bf16 spacing. */
static void gelu_case_bf16(size_t N, uint64_t seed) {
    char shape[64];
    snprintf(shape, sizeof shape, "(N %zu, seed %llu)", N, (unsigned long long)seed);
    uint64_t s = seed * 15485863 + N;
    float *inp = alloc_fill(N, &s, -8.0f, 8.0f), *dout = alloc_fill(N, &s, -2.0f, 2.0f);
    uint16_t *inp_h = to_bf16(inp, N, inp), *dout_h = to_bf16(dout, N, dout);
    uint16_t *out_h = alloc_nan_bf16(N), *dinp_h = alloc_nan_bf16(N);
    float *ref = alloc_nan(N), *rdinp = alloc_nan(N);
    double *sc = dev_alloc(sizeof(double) * N), *scb = dev_alloc(sizeof(double) * N);
    tri_cuemu_set_seed(seed);
    tri_cuemu_gelu_fwd(NULL, TRI_BF16, out_h, inp_h, N);
    tri_cuemu_gelu_bwd(NULL, TRI_BF16, dinp_h, inp_h, dout_h, N);
    tri_cpu_gelu_fwd(ref, inp, N);
    tri_cpu_gelu_bwd(rdinp, inp, dout, N);
    for (size_t i = 0; i < N; i++) {
        double u, sv, t;
        gelu_terms(inp[i], &u, &sv, &t);
        sc[i] = (8.0 + 8.0 * fabs(u)) * (fabs((double)ref[i]) + FLT_MIN);
        scb[i] = (8.0 + 8.0 * fabs(u)) * ((fabs(sv) + fabs(t)) * fabs((double)dout[i]) + FLT_MIN);
    }
    round_bf16(ref, N);
    round_bf16(rdinp, N);
    expect_close_bf16("gelu_fwd", out_h, ref, sc, N, FLT_EPSILON, shape);
    expect_close_bf16("gelu_bwd", dinp_h, rdinp, scb, N, FLT_EPSILON, shape);
    /* dinp may alias dout */
    uint16_t *inplace = to_bf16(dout, N, NULL);
    tri_cuemu_gelu_bwd(NULL, TRI_BF16, inplace, inp_h, inplace, N);
    cr_expect(memcmp(inplace, dinp_h, sizeof(uint16_t) * N) == 0, "bf16 gelu_bwd in place differs %s", shape);
    dev_free(inp), dev_free(dout), dev_free(inp_h), dev_free(dout_h), dev_free(out_h), dev_free(dinp_h), dev_free(ref),
        dev_free(rdinp), dev_free(sc);
    dev_free(scb), dev_free(inplace);
}

Test(cuda_emu, gelu_bf16_matches_the_cpu_op_on_rounded_values) {
    const size_t sizes[] = {1, 31, 257, 4097};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
        for (uint64_t seed = 1; seed <= 2; seed++) gelu_case_bf16(sizes[k], seed);
}

Test(cuda_emu, gelu_fwd_bwd_match_the_cpu_op) {
    /* 300000 > 1024 blocks * 256 threads: the grid-stride loop runs twice */
    const size_t sizes[] = {1, 31, 257, 1000, 4097, 300000};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
        for (uint64_t seed = 1; seed <= (sizes[k] > 10000 ? 1u : 3u); seed++) gelu_case(sizes[k], seed);
}

/* ---- vocab-parallel cross-entropy ---- */

/* Full logits (N, V) split into R slices of Vl columns (R * Vl >= V; padded
 * columns hold `pad`, which must never be read). Per slice: stats against the
 * CPU's; the emulated stats gathered and combined, against the CPU's combine
 * of the same gather; then losses and dlogits (out of place, in place, each
 * alone) from the CPU's combined stats, against the CPU's backward. */
static void crossentropy_case(size_t N, size_t V, size_t Vl, size_t R, uint64_t seed) {
    char shape[128];
    snprintf(shape, sizeof shape, "(N %zu, V %zu, Vl %zu, R %zu, seed %llu)", N, V, Vl, R, (unsigned long long)seed);
    uint64_t s = seed * 31337 + N * 7 + V;
    float *full = alloc_fill(N * V, &s, -6.0f, 6.0f);
    /* a rising trend so that later columns raise the running max */
    for (size_t i = 0; i < N * V; i++) full[i] += 3.0f * (float)(i % V) / (float)V;
    int32_t *targets = dev_alloc(sizeof(int32_t) * N);
    for (size_t n = 0; n < N; n++) { /* first, last, slice boundaries, an id no rank owns, random */
        const size_t t = n == 0 ? 0 : n == 1 ? V - 1 : n == 2 ? Vl - 1 : n == 3 ? Vl : (size_t)(rng_next(&s) % V);
        targets[n] = n == 4 ? -1 : (int32_t)(t < V ? t : V - 1);
    }
    const float pad = NAN, dscale = 1.0f / (float)N;
    float *gather = alloc_nan(R * N * 3), *rgather = alloc_nan(R * N * 3);
    float **slice = dev_alloc(sizeof(float *) * R);
    for (size_t k = 0; k < R; k++) {
        slice[k] = dev_alloc(sizeof(float) * N * Vl);
        for (size_t n = 0; n < N; n++)
            for (size_t j = 0; j < Vl; j++) slice[k][n * Vl + j] = k * Vl + j < V ? full[n * V + k * Vl + j] : pad;
        tri_cuemu_set_seed(seed + k);
        tri_cuemu_crossentropy_stats(NULL, TRI_F32, gather + k * N * 3, slice[k], targets, N, Vl, k * Vl, V);
        tri_cpu_crossentropy_stats(rgather + k * N * 3, slice[k], targets, N, Vl, k * Vl, V);
    }
    /* max and target logit: copies of one logit, exact; the sum of
     * exponentials: Vl positive terms (scale: the sum itself), plus the exps' ulps */
    for (size_t i = 0; i < R * N; i++) {
        const float *g = gather + 3 * i, *r = rgather + 3 * i;
        cr_assert(g[0] == r[0] && g[2] == r[2],
                  "crossentropy_stats %s: slice %zu row %zu: (max %g, target %g), "
                  "the CPU gives (%g, %g)",
                  shape, i / N, i % N, g[0], g[2], r[0], r[2]);
        const double sc = fabs((double)r[1]) + FLT_MIN;
        cr_assert(fabs((double)g[1] - r[1]) <= (sum_tol(Vl) + 4 * FLT_EPSILON) * sc,
                  "crossentropy_stats %s: slice %zu row %zu: sum %.9g, the CPU gives %.9g", shape, i / N, i % N, g[1],
                  r[1]);
    }
    float *comb = alloc_nan(N * 3), *rcomb = alloc_nan(N * 3);
    tri_cuemu_crossentropy_combine(NULL, comb, gather, N, (int)R);
    tri_cpu_crossentropy_combine(rcomb, gather, N, (int)R);
    for (size_t n = 0; n < N; n++) {
        cr_assert(comb[3 * n] == rcomb[3 * n] && comb[3 * n + 2] == rcomb[3 * n + 2],
                  "crossentropy_combine %s: row %zu", shape, n);
        cr_assert(fabs((double)comb[3 * n + 1] - rcomb[3 * n + 1]) <= (sum_tol(R) + 4 * FLT_EPSILON) * rcomb[3 * n + 1],
                  "crossentropy_combine %s: row %zu: sum %.9g, the CPU gives %.9g", shape, n, comb[3 * n + 1],
                  rcomb[3 * n + 1]);
    }
    /* backward from the CPU's combined stats; losses: scale 1 + |log S| + |M| +
     * |target|; dlogits: exp(l - M) / S carries the argument's rounding times
     * |l - M| (at most 2 * 12 here) and a few ulps, plus the target's dscale */
    float *losses = alloc_nan(N), *rlosses = alloc_nan(N);
    double *lsc = dev_alloc(sizeof(double) * N), *dsc = dev_alloc(sizeof(double) * N * Vl);
    for (size_t n = 0; n < N; n++)
        lsc[n] = 1.0 + fabs(log(rcomb[3 * n + 1])) + fabs((double)rcomb[3 * n]) + fabs((double)rcomb[3 * n + 2]);
    for (size_t k = 0; k < R; k++) {
        float *d = alloc_nan(N * Vl), *rd = alloc_nan(N * Vl);
        tri_cuemu_set_seed(seed * 3 + k);
        tri_cuemu_crossentropy_bwd(NULL, TRI_F32, losses, d, slice[k], rcomb, targets, dscale, N, Vl, k * Vl, V);
        tri_cpu_crossentropy_bwd(rlosses, rd, slice[k], rcomb, targets, dscale, N, Vl, k * Vl, V);
        expect_close("crossentropy_bwd losses", losses, rlosses, lsc, N, 8 * FLT_EPSILON, shape);
        for (size_t n = 0; n < N; n++)
            for (size_t j = 0; j < Vl; j++)
                dsc[n * Vl + j] = (8.0 + 2.0 * 24.0) * (fabs((double)rd[n * Vl + j]) + dscale) + FLT_MIN;
        expect_close("crossentropy_bwd dlogits", d, rd, dsc, N * Vl, FLT_EPSILON, shape);
        /* in place (dlogits = logits) gives the same bits; each output alone too */
        float *inplace = dup(slice[k], N * Vl), *only_d = alloc_nan(N * Vl), *only_l = alloc_nan(N);
        tri_cuemu_crossentropy_bwd(NULL, TRI_F32, NULL, inplace, inplace, rcomb, targets, dscale, N, Vl, k * Vl, V);
        tri_cuemu_crossentropy_bwd(NULL, TRI_F32, NULL, only_d, slice[k], rcomb, targets, dscale, N, Vl, k * Vl, V);
        tri_cuemu_crossentropy_bwd(NULL, TRI_F32, only_l, NULL, slice[k], rcomb, targets, dscale, N, Vl, k * Vl, V);
        cr_expect(memcmp(inplace, d, sizeof(float) * N * Vl) == 0, "in place differs %s slice %zu", shape, k);
        cr_expect(memcmp(only_d, d, sizeof(float) * N * Vl) == 0, "dlogits alone differs %s slice %zu", shape, k);
        cr_expect(memcmp(only_l, losses, sizeof(float) * N) == 0, "losses alone differ %s slice %zu", shape, k);
        dev_free(d), dev_free(rd), dev_free(inplace), dev_free(only_d), dev_free(only_l);
    }
    for (size_t k = 0; k < R; k++) dev_free(slice[k]);
    dev_free(slice), dev_free(full), dev_free(targets), dev_free(gather), dev_free(rgather), dev_free(comb),
        dev_free(rcomb);
    dev_free(losses), dev_free(rlosses), dev_free(lsc), dev_free(dsc);
}

Test(cuda_emu, crossentropy_stats_combine_bwd_match_the_cpu_op) {
    /* (N, V, Vl, R): one slice with padding; three slices, the last part
     * padding; a slice that is all padding; long rows; a single column */
    const size_t cases[][4] = {{5, 37, 40, 1},     {7, 100, 34, 3},  {6, 33, 16, 4}, {9, 50, 16, 4},
                               {5, 2000, 1001, 2}, {3, 300, 300, 1}, {6, 1, 1, 1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (uint64_t seed = 1; seed <= 3; seed++)
            crossentropy_case(cases[c][0], cases[c][1], cases[c][2], cases[c][3], seed);
}

/* bf16 logits and dlogits (stats, gather and losses fp32). The logits are
 * rounded to bf16 (padded columns hold a bf16 NaN, never read); the CPU ops
 * run in fp32 on the rounded values. stats and losses are fp32 outputs of
 * the same fp32 computation on the same values: the fp32 tolerances of
 * crossentropy_case (max and target logit exact). dlogits: the CPU's rounded
 * to bf16; the fp32 tolerance plus one bf16 spacing (expect_close_bf16).
 * In place (dlogits = logits, both bf16) must give the out-of-place bits. */
static void crossentropy_case_bf16(size_t N, size_t V, size_t Vl, size_t R, uint64_t seed) {
    char shape[128];
    snprintf(shape, sizeof shape, "(N %zu, V %zu, Vl %zu, R %zu, seed %llu)", N, V, Vl, R, (unsigned long long)seed);
    uint64_t s = seed * 7177 + N * 7 + V;
    float *full = alloc_fill(N * V, &s, -6.0f, 6.0f);
    for (size_t i = 0; i < N * V; i++) full[i] += 3.0f * (float)(i % V) / (float)V;
    round_bf16(full, N * V);
    int32_t *targets = dev_alloc(sizeof(int32_t) * N);
    for (size_t n = 0; n < N; n++) {
        const size_t t = n == 0 ? 0 : n == 1 ? V - 1 : n == 2 ? Vl - 1 : (size_t)(rng_next(&s) % V);
        targets[n] = n == 3 ? -1 : (int32_t)(t < V ? t : V - 1);
    }
    const float dscale = 1.0f / (float)N;
    float *gather = alloc_nan(R * N * 3), *rgather = alloc_nan(R * N * 3), *slice = dev_alloc(sizeof(float) * N * Vl);
    uint16_t **slice_h = dev_alloc(sizeof(uint16_t *) * R);
    for (size_t k = 0; k < R; k++) {
        for (size_t n = 0; n < N; n++)
            for (size_t j = 0; j < Vl; j++) slice[n * Vl + j] = k * Vl + j < V ? full[n * V + k * Vl + j] : NAN;
        slice_h[k] = to_bf16(slice, N * Vl, NULL);
        tri_cuemu_set_seed(seed + k);
        tri_cuemu_crossentropy_stats(NULL, TRI_BF16, gather + k * N * 3, slice_h[k], targets, N, Vl, k * Vl, V);
        tri_cpu_crossentropy_stats(rgather + k * N * 3, slice, targets, N, Vl, k * Vl, V);
    }
    for (size_t i = 0; i < R * N; i++) {
        const float *g = gather + 3 * i, *r = rgather + 3 * i;
        cr_assert(g[0] == r[0] && g[2] == r[2],
                  "bf16 crossentropy_stats %s: slice %zu row %zu: (max %g, target %g), "
                  "the CPU gives (%g, %g)",
                  shape, i / N, i % N, g[0], g[2], r[0], r[2]);
        cr_assert(fabs((double)g[1] - r[1]) <= (sum_tol(Vl) + 4 * FLT_EPSILON) * (fabs((double)r[1]) + FLT_MIN),
                  "bf16 crossentropy_stats %s: slice %zu row %zu: sum %.9g, the CPU gives %.9g", shape, i / N, i % N,
                  g[1], r[1]);
    }
    float *comb = alloc_nan(N * 3);
    tri_cpu_crossentropy_combine(comb, rgather, N, (int)R);
    float *losses = alloc_nan(N), *rlosses = alloc_nan(N), *rd = alloc_nan(N * Vl);
    double *lsc = dev_alloc(sizeof(double) * N), *dsc = dev_alloc(sizeof(double) * N * Vl);
    for (size_t n = 0; n < N; n++)
        lsc[n] = 1.0 + fabs(log(comb[3 * n + 1])) + fabs((double)comb[3 * n]) + fabs((double)comb[3 * n + 2]);
    for (size_t k = 0; k < R; k++) {
        for (size_t n = 0; n < N; n++)
            for (size_t j = 0; j < Vl; j++) slice[n * Vl + j] = tri_bf16_to_f32(slice_h[k][n * Vl + j]);
        uint16_t *d = alloc_nan_bf16(N * Vl);
        tri_cuemu_set_seed(seed * 3 + k);
        tri_cuemu_crossentropy_bwd(NULL, TRI_BF16, losses, d, slice_h[k], comb, targets, dscale, N, Vl, k * Vl, V);
        tri_cpu_crossentropy_bwd(rlosses, rd, slice, comb, targets, dscale, N, Vl, k * Vl, V);
        expect_close("bf16 crossentropy_bwd losses", losses, rlosses, lsc, N, 8 * FLT_EPSILON, shape);
        for (size_t i = 0; i < N * Vl; i++) dsc[i] = (8.0 + 2.0 * 24.0) * (fabs((double)rd[i]) + dscale) + FLT_MIN;
        round_bf16(rd, N * Vl);
        expect_close_bf16("crossentropy_bwd dlogits", d, rd, dsc, N * Vl, FLT_EPSILON, shape);
        uint16_t *inplace = dev_alloc(sizeof(uint16_t) * N * Vl);
        memcpy(inplace, slice_h[k], sizeof(uint16_t) * N * Vl);
        tri_cuemu_crossentropy_bwd(NULL, TRI_BF16, NULL, inplace, inplace, comb, targets, dscale, N, Vl, k * Vl, V);
        cr_expect(memcmp(inplace, d, sizeof(uint16_t) * N * Vl) == 0, "bf16 in place differs %s slice %zu", shape, k);
        dev_free(d), dev_free(inplace);
    }
    for (size_t k = 0; k < R; k++) dev_free(slice_h[k]);
    dev_free(slice_h), dev_free(slice), dev_free(full), dev_free(targets), dev_free(gather), dev_free(rgather),
        dev_free(comb), dev_free(losses);
    dev_free(rlosses), dev_free(rd), dev_free(lsc), dev_free(dsc);
}

Test(cuda_emu, crossentropy_bf16_matches_the_cpu_op_on_rounded_values) {
    /* (N, V, Vl, R): one slice with padding; three slices, the last part
     * padding; a slice that is all padding; long rows */
    const size_t cases[][4] = {{5, 37, 40, 1}, {7, 100, 34, 3}, {6, 33, 16, 4}, {5, 2000, 1001, 2}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (uint64_t seed = 1; seed <= 2; seed++)
            crossentropy_case_bf16(cases[c][0], cases[c][1], cases[c][2], cases[c][3], seed);
}

/* ---- bf16 GEMMs (the plans of kernels/cuda/gemm_plan.h through the
 * emulated executor, tests/cuemu/gemm_emu.c) ----
 * inp, weight, bias and dout rounded to bf16; the CPU's matmul in fp32 on the
 * rounded values is the reference. out and dinp are bf16 (the CPU's rounded
 * once); dweight (accumulated into pre-filled fp32) and the BGRADB bias
 * gradient are fp32 (not rounded). Tolerance: a dot of L terms in fp32,
 * sum_tol(L) times the sum of the terms' magnitudes (plus |bias| or |dweight
 * before|), plus one bf16 spacing of the value for the bf16 outputs. The
 * forward also runs with inp at an odd bf16 element (2-byte aligned: the
 * least a bf16 operand may have). */
static void matmul_case_bf16(size_t N, size_t C, size_t OC, uint64_t seed) {
    char shape[96];
    snprintf(shape, sizeof shape, "(N %zu, C %zu, OC %zu, seed %llu)", N, C, OC, (unsigned long long)seed);
    uint64_t s = seed * 2147483647u + N * 31 + C * 7 + OC;
    float *inp = alloc_fill(N * C, &s, -1.0f, 1.0f), *w = alloc_fill(OC * C, &s, -1.0f, 1.0f);
    float *b = alloc_fill(OC, &s, -1.0f, 1.0f), *dout = alloc_fill(N * OC, &s, -1.0f, 1.0f);
    uint16_t *w_h = to_bf16(w, OC * C, w), *b_h = to_bf16(b, OC, b), *dout_h = to_bf16(dout, N * OC, dout);
    uint16_t *inp_h = dev_alloc(sizeof(uint16_t) * (N * C + 1)); /* inp_h + 1: the odd copy */
    uint16_t *tmp = to_bf16(inp, N * C, inp);
    memcpy(inp_h + 1, tmp, sizeof(uint16_t) * N * C);
    tri_gemm_exec x;
    cr_assert_eq(tri_cuemu_gemm_init(&x, NULL, 0), 0);
    tri_gemm_call g;
    int fill = -1;
    for (int v = 0; v < 3; v++) { /* no bias, bias, bias with the odd inp */
        const uint16_t *in = v == 2 ? inp_h + 1 : tmp;
        uint16_t *out_h = alloc_nan_bf16(N * OC);
        float *rout = alloc_nan(N * OC);
        double *sc = dev_alloc(sizeof(double) * N * OC);
        cr_assert_eq(tri_gemm_plan_fwd(&g, &fill, TRI_BF16, out_h, in, w_h, v ? b_h : NULL, N, C, OC), 0);
        if (v == 2) cr_assert_eq(g.d.align, 2u, "a bf16 operand at an odd element: 2-byte alignment");
        tri_cuemu_gemm_run(&x, NULL, &g);
        tri_cpu_matmul_fwd(rout, inp, w, v ? b : NULL, N, C, OC);
        for (size_t n = 0; n < N; n++)
            for (size_t o = 0; o < OC; o++) {
                double m = v ? fabs((double)b[o]) : 0.0;
                for (size_t c = 0; c < C; c++) m += fabs((double)inp[n * C + c] * w[o * C + c]);
                sc[n * OC + o] = m + FLT_MIN;
            }
        round_bf16(rout, N * OC);
        expect_close_bf16(v ? "matmul_fwd with bias" : "matmul_fwd", out_h, rout, sc, N * OC, sum_tol(C + 1), shape);
        dev_free(out_h), dev_free(rout), dev_free(sc);
    }
    /* dinp = dout @ W */
    uint16_t *dinp_h = alloc_nan_bf16(N * C);
    float *rdinp = alloc_nan(N * C);
    double *sci = dev_alloc(sizeof(double) * N * C);
    cr_assert_eq(tri_gemm_plan_dinp(&g, &fill, TRI_BF16, dinp_h, dout_h, w_h, N, C, OC), 0);
    tri_cuemu_gemm_run(&x, NULL, &g);
    tri_cpu_matmul_bwd(rdinp, NULL, NULL, dout, inp, w, N, C, OC);
    for (size_t n = 0; n < N; n++)
        for (size_t c = 0; c < C; c++) {
            double m = 0.0;
            for (size_t o = 0; o < OC; o++) m += fabs((double)dout[n * OC + o] * w[o * C + c]);
            sci[n * C + c] = m + FLT_MIN;
        }
    round_bf16(rdinp, N * C);
    expect_close_bf16("matmul_bwd dinp", dinp_h, rdinp, sci, N * C, sum_tol(OC), shape);
    /* dweight (fp32) += dout^T @ inp, with and without the BGRADB bias gradient (fp32) */
    float *dw0 = alloc_fill(OC * C, &s, -1.0f, 1.0f);
    double *scw = dev_alloc(sizeof(double) * OC * C), *scb = dev_alloc(sizeof(double) * OC);
    for (size_t o = 0; o < OC; o++) {
        scb[o] = FLT_MIN;
        for (size_t n = 0; n < N; n++) scb[o] += fabs((double)dout[n * OC + o]);
        for (size_t c = 0; c < C; c++) {
            double m = fabs((double)dw0[o * C + c]);
            for (size_t n = 0; n < N; n++) m += fabs((double)dout[n * OC + o] * inp[n * C + c]);
            scw[o * C + c] = m + FLT_MIN;
        }
    }
    for (int epi = 0; epi < 2; epi++) {
        float *dw = dup(dw0, OC * C), *rdw = dup(dw0, OC * C), *bg = alloc_nan(OC),
              *rdb = dev_calloc(OC, sizeof(float));
        cr_assert_eq(tri_gemm_plan_dweight(&g, TRI_BF16, dw, epi ? bg : NULL, dout_h, tmp, N, C, OC), 0);
        cr_assert(g.d.atype == TRI_BF16 && g.d.btype == TRI_BF16 && g.d.dtype == TRI_F32 && g.d.biastype == TRI_F32);
        tri_cuemu_gemm_run(&x, NULL, &g);
        tri_cpu_matmul_bwd(NULL, rdw, rdb, dout, inp, w, N, C, OC);
        expect_close("bf16 matmul_bwd dweight (fp32)", dw, rdw, scw, OC * C, sum_tol(N + 1), shape);
        if (epi) expect_close("bf16 matmul_bwd dbias through BGRADB (fp32)", bg, rdb, scb, OC, sum_tol(N), shape);
        dev_free(dw), dev_free(rdw), dev_free(bg), dev_free(rdb);
    }
    tri_cuemu_gemm_free(&x);
    dev_free(inp), dev_free(w), dev_free(b), dev_free(dout), dev_free(w_h), dev_free(b_h), dev_free(dout_h),
        dev_free(inp_h), dev_free(tmp);
    dev_free(dinp_h), dev_free(rdinp), dev_free(sci), dev_free(dw0), dev_free(scw), dev_free(scb);
}

Test(cuda_emu, bf16_matmul_gemms_match_the_cpu_op_on_rounded_values) {
    /* (N, C, OC): one element; sizes not multiples of 2, 8 or 32; a long
     * inner dimension */
    const size_t shapes[][3] = {{1, 1, 1}, {7, 5, 3}, {33, 17, 70}, {64, 96, 40}, {5, 300, 9}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
        for (uint64_t seed = 1; seed <= 2; seed++) matmul_case_bf16(shapes[k][0], shapes[k][1], shapes[k][2], seed);
}

/* ---- vocab-parallel embedding ---- */

/* ids drawn over [-3, vstart + Vl + 5): negative ids, ids below and above this
 * rank's rows; half of them from a few hot ids, so that rows of dwte collect
 * many tokens. The forward has no reduction and the backward adds in token
 * order as the CPU does: both must give the CPU's bits. */
static void embedding_case(size_t B, size_t T, size_t C, size_t vstart, size_t Vl, int with_wpe, uint64_t seed) {
    char shape[128];
    snprintf(shape, sizeof shape, "(B %zu, T %zu, C %zu, vstart %zu, Vl %zu, wpe %d, seed %llu)", B, T, C, vstart, Vl,
             with_wpe, (unsigned long long)seed);
    uint64_t s = seed * 6151 + B * 97 + T * 13 + C;
    const size_t rows = B * T, span = vstart + Vl + 8;
    int32_t *ids = dev_alloc(sizeof(int32_t) * rows);
    for (size_t r = 0; r < rows; r++) {
        const uint64_t u = rng_next(&s);
        ids[r] = (u & 1) ? (int32_t)(vstart + (u >> 8) % 3) : (int32_t)((u >> 8) % span) - 3;
    }
    float *wte = alloc_fill(Vl * C, &s, -1.0f, 1.0f), *wpe = with_wpe ? alloc_fill(T * C, &s, -1.0f, 1.0f) : NULL;
    float *out = alloc_nan(rows * C), *rout = alloc_nan(rows * C);
    tri_cuemu_set_seed(seed);
    tri_cuemu_embedding_fwd(NULL, TRI_F32, out, ids, wte, wpe, B, T, C, vstart, Vl);
    tri_cpu_embedding_fwd(rout, ids, wte, wpe, B, T, C, vstart, Vl);
    cr_assert(memcmp(out, rout, sizeof(float) * rows * C) == 0, "embedding_fwd %s differs from the CPU op", shape);

    float *dout = alloc_fill(rows * C, &s, -1.0f, 1.0f);
    float *dwte = alloc_fill(Vl * C, &s, -1.0f, 1.0f), *dwpe = with_wpe ? alloc_fill(T * C, &s, -1.0f, 1.0f) : NULL;
    float *rdwte = dup(dwte, Vl * C), *rdwpe = with_wpe ? dup(dwpe, T * C) : NULL;
    float *first = NULL;
    tri_cpu_embedding_bwd(rdwte, rdwpe, dout, ids, B, T, C, vstart, Vl);
    for (int run = 0; run < 3; run++) {
        float *g = dup(dwte, Vl * C), *gp = with_wpe ? dup(dwpe, T * C) : NULL;
        float *scratch = alloc_nan(tri_cuemu_embedding_bwd_scratch_floats(B, T));
        tri_cuemu_set_workers(run % 2 + 1);
        tri_cuemu_set_seed(seed * 101 + (uint64_t)run);
        tri_cuemu_embedding_bwd(NULL, TRI_F32, g, gp, scratch, dout, ids, B, T, C, vstart, Vl);
        cr_assert(memcmp(g, rdwte, sizeof(float) * Vl * C) == 0, "embedding_bwd dwte %s run %d differs from the CPU op",
                  shape, run);
        if (with_wpe)
            cr_assert(memcmp(gp, rdwpe, sizeof(float) * T * C) == 0,
                      "embedding_bwd dwpe %s run %d differs from the CPU op", shape, run);
        if (run == 0)
            first = dup(g, Vl * C);
        else
            cr_assert(memcmp(g, first, sizeof(float) * Vl * C) == 0, "embedding_bwd %s: run %d other bits", shape, run);
        dev_free(g), dev_free(gp), dev_free(scratch);
    }
    tri_cuemu_set_workers(2);
    dev_free(first), dev_free(ids), dev_free(wte), dev_free(wpe), dev_free(out), dev_free(rout), dev_free(dout),
        dev_free(dwte), dev_free(dwpe);
    dev_free(rdwte), dev_free(rdwpe);
}

Test(cuda_emu, embedding_fwd_bwd_match_the_cpu_op_bit_for_bit) {
    /* (B, T, C, vstart, Vl, wpe): one token; rows not a power of two with a
     * slice from 0 and a slice further up; wide rows (C > the block); a single
     * local row; an empty slice (only dwpe) */
    const size_t cases[][6] = {{1, 1, 1, 0, 5, 1},    {2, 37, 33, 0, 30, 1},     {3, 50, 45, 40, 30, 0},
                               {4, 100, 7, 5, 64, 1}, {2, 19, 300, 1000, 17, 1}, {5, 9, 31, 7, 1, 0},
                               {2, 11, 40, 3, 0, 1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (uint64_t seed = 1; seed <= 3; seed++)
            embedding_case(cases[c][0], cases[c][1], cases[c][2], cases[c][3], cases[c][4], (int)cases[c][5], seed);
}

/* bf16 storage: wte, wpe, out and dout bf16, dwte and dwpe fp32. The forward
 * adds at most two widened values and rounds once, as the CPU op on the
 * rounded values followed by one rounding: the same bf16 bits. The backward
 * adds the same widened dout values in the CPU's order into fp32: the CPU's
 * fp32 bits, under every schedule. */
static void embedding_case_bf16(size_t B, size_t T, size_t C, size_t vstart, size_t Vl, int with_wpe, uint64_t seed) {
    char shape[128];
    snprintf(shape, sizeof shape, "(B %zu, T %zu, C %zu, vstart %zu, Vl %zu, wpe %d, seed %llu)", B, T, C, vstart, Vl,
             with_wpe, (unsigned long long)seed);
    uint64_t s = seed * 6163 + B * 89 + T * 11 + C;
    const size_t rows = B * T, span = vstart + Vl + 8;
    int32_t *ids = dev_alloc(sizeof(int32_t) * rows);
    for (size_t r = 0; r < rows; r++) {
        const uint64_t u = rng_next(&s);
        ids[r] = (u & 1) ? (int32_t)(vstart + (u >> 8) % 3) : (int32_t)((u >> 8) % span) - 3;
    }
    float *wte = alloc_fill(Vl * C, &s, -1.0f, 1.0f), *wpe = with_wpe ? alloc_fill(T * C, &s, -1.0f, 1.0f) : NULL;
    uint16_t *wte_h = to_bf16(wte, Vl * C, wte), *wpe_h = with_wpe ? to_bf16(wpe, T * C, wpe) : NULL;
    uint16_t *out_h = alloc_nan_bf16(rows * C);
    float *rout = alloc_nan(rows * C);
    tri_cuemu_set_seed(seed);
    tri_cuemu_embedding_fwd(NULL, TRI_BF16, out_h, ids, wte_h, wpe_h, B, T, C, vstart, Vl);
    tri_cpu_embedding_fwd(rout, ids, wte, wpe, B, T, C, vstart, Vl);
    uint16_t *want_h = to_bf16(rout, rows * C, NULL);
    cr_assert(memcmp(out_h, want_h, sizeof(uint16_t) * rows * C) == 0,
              "bf16 embedding_fwd %s differs from the CPU op on the rounded values", shape);

    float *dout = alloc_fill(rows * C, &s, -1.0f, 1.0f);
    uint16_t *dout_h = to_bf16(dout, rows * C, dout);
    float *dwte = alloc_fill(Vl * C, &s, -1.0f, 1.0f), *dwpe = with_wpe ? alloc_fill(T * C, &s, -1.0f, 1.0f) : NULL;
    float *rdwte = dup(dwte, Vl * C), *rdwpe = with_wpe ? dup(dwpe, T * C) : NULL;
    tri_cpu_embedding_bwd(rdwte, rdwpe, dout, ids, B, T, C, vstart, Vl);
    for (int run = 0; run < 3; run++) {
        float *g = dup(dwte, Vl * C), *gp = with_wpe ? dup(dwpe, T * C) : NULL;
        float *scratch = alloc_nan(tri_cuemu_embedding_bwd_scratch_floats(B, T));
        tri_cuemu_set_workers(run % 2 + 1);
        tri_cuemu_set_seed(seed * 103 + (uint64_t)run);
        tri_cuemu_embedding_bwd(NULL, TRI_BF16, g, gp, scratch, dout_h, ids, B, T, C, vstart, Vl);
        cr_assert(memcmp(g, rdwte, sizeof(float) * Vl * C) == 0,
                  "bf16 embedding_bwd dwte %s run %d differs from the CPU op", shape, run);
        if (with_wpe)
            cr_assert(memcmp(gp, rdwpe, sizeof(float) * T * C) == 0,
                      "bf16 embedding_bwd dwpe %s run %d differs from the CPU op", shape, run);
        dev_free(g), dev_free(gp), dev_free(scratch);
    }
    tri_cuemu_set_workers(2);
    dev_free(ids), dev_free(wte), dev_free(wpe), dev_free(wte_h), dev_free(wpe_h), dev_free(out_h), dev_free(rout),
        dev_free(want_h), dev_free(dout);
    dev_free(dout_h), dev_free(dwte), dev_free(dwpe), dev_free(rdwte), dev_free(rdwpe);
}

Test(cuda_emu, embedding_bf16_matches_the_cpu_op_bit_for_bit_on_rounded_values) {
    /* the shapes of the fp32 test */
    const size_t cases[][6] = {{1, 1, 1, 0, 5, 1},    {2, 37, 33, 0, 30, 1},     {3, 50, 45, 40, 30, 0},
                               {4, 100, 7, 5, 64, 1}, {2, 19, 300, 1000, 17, 1}, {5, 9, 31, 7, 1, 0},
                               {2, 11, 40, 3, 0, 1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (uint64_t seed = 1; seed <= 2; seed++)
            embedding_case_bf16(cases[c][0], cases[c][1], cases[c][2], cases[c][3], cases[c][4], (int)cases[c][5],
                                seed);
}

/* ---- causal attention (flash-style on CUDA) ---- */

/* The CUDA op keeps the row log-sum-exp, the CPU op the probabilities; both
 * are compared on what the contract fixes: out and dqkv (against the CPU op),
 * and the lse against a double-precision computation.
 * Tolerance: a score is a dot of HS terms, so its rounding error is about
 * HS eps times a = scale * sum |q_d k_d| (the largest over the case); the
 * exponential turns it into a relative error of the probabilities; the sums
 * over keys (or queries) add T terms. So each value may be off by
 * 2 (T + HS + 4) eps (1 + a) times the sum of the magnitudes that make it:
 *   out_id: sum_j p_ij |v_jd|;  dv_jd: sum_i p_ij |dout_id|;
 *   dk_jd: scale sum_i p_ij (|dp_ij| + |delta_i|) |q_id|;  dq_id likewise with |k_jd|;
 *   lse_i: 1 + |lse_i|. */
/* The magnitudes of the tolerance above, in double, from the inputs (qkv,
 * dout) and the forward's out `o`: sc_o (B*T*C) for out, sc_d (B*T*3C) for
 * dqkv, sc_l (B*NH*T) for the lse, wlse (B*NH*T) the lse itself; returns the
 * tolerance 2 (T + HS + 4) eps (1 + a). */
typedef struct att_scales {
    double *sc_o, *sc_d, *sc_l, *wlse, tol;
} att_scales;

static att_scales attention_scales(const float *qkv, const float *dout, const float *out, size_t B, size_t T, int NH,
                                   int HS) {
    const size_t C = (size_t)NH * (size_t)HS, C3 = 3 * C, BT = B * T;
    const double scale = 1.0 / sqrt((double)HS);
    att_scales r;
    r.sc_o = dev_calloc(BT * C, sizeof(double)), r.sc_d = dev_calloc(BT * C3, sizeof(double));
    r.sc_l = dev_alloc(sizeof(double) * B * NH * T), r.wlse = dev_alloc(sizeof(double) * B * NH * T);
    double *p = dev_alloc(sizeof(double) * T * T), *dp = dev_alloc(sizeof(double) * T * T),
           *dl = dev_alloc(sizeof(double) * T);
    double amax = 0.0;
    for (size_t b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *q = qkv + b * T * C3 + (size_t)h * HS, *k = q + C, *v = q + 2 * C;
            const float *dO = dout + b * T * C + (size_t)h * HS;
            const float *o = out + b * T * C + (size_t)h * HS;
            const size_t bh = b * (size_t)NH + (size_t)h;
            for (size_t i = 0; i < T; i++) {
                double mx = -INFINITY, sum = 0.0, dlt = 0.0;
                for (size_t j = 0; j <= i; j++) {
                    double dot = 0.0, mag = 0.0, dd = 0.0;
                    for (int d = 0; d < HS; d++) {
                        dot += (double)q[i * C3 + d] * k[j * C3 + d];
                        mag += fabs((double)q[i * C3 + d] * k[j * C3 + d]);
                        dd += (double)dO[i * C + d] * v[j * C3 + d];
                    }
                    p[i * T + j] = dot * scale;
                    dp[i * T + j] = dd;
                    amax = fmax(amax, mag * scale);
                    mx = fmax(mx, dot * scale);
                }
                for (size_t j = 0; j <= i; j++) sum += exp(p[i * T + j] - mx);
                r.wlse[bh * T + i] = mx + log(sum);
                r.sc_l[bh * T + i] = 1.0 + fabs(r.wlse[bh * T + i]);
                for (size_t j = 0; j <= i; j++) p[i * T + j] = exp(p[i * T + j] - r.wlse[bh * T + i]);
                for (int d = 0; d < HS; d++) dlt += (double)dO[i * C + d] * o[i * C + d];
                dl[i] = dlt;
            }
            for (size_t i = 0; i < T; i++)
                for (size_t j = 0; j <= i; j++) {
                    const double pij = p[i * T + j], g = pij * (fabs(dp[i * T + j]) + fabs(dl[i])) * scale;
                    for (int d = 0; d < HS; d++) {
                        r.sc_o[(b * T + i) * C + (size_t)h * HS + d] += pij * fabs((double)v[j * C3 + d]);
                        r.sc_d[(b * T + j) * C3 + 2 * C + (size_t)h * HS + d] += pij * fabs((double)dO[i * C + d]);
                        r.sc_d[(b * T + j) * C3 + C + (size_t)h * HS + d] += g * fabs((double)q[i * C3 + d]);
                        r.sc_d[(b * T + i) * C3 + (size_t)h * HS + d] += g * fabs((double)k[j * C3 + d]);
                    }
                }
        }
    for (size_t i = 0; i < BT * C; i++) r.sc_o[i] += FLT_MIN;
    for (size_t i = 0; i < BT * C3; i++) r.sc_d[i] += FLT_MIN;
    r.tol = sum_tol(T + (size_t)HS) * (1.0 + amax);
    dev_free(p), dev_free(dp), dev_free(dl);
    return r;
}

static void att_scales_free(att_scales *r) {
    dev_free(r->sc_o), dev_free(r->sc_d), dev_free(r->sc_l), dev_free(r->wlse);
}

static void attention_case(size_t B, size_t T, int NH, int HS, uint64_t seed) {
    char shape[128];
    snprintf(shape, sizeof shape, "(B %zu, T %zu, NH %d, HS %d, seed %llu)", B, T, NH, HS, (unsigned long long)seed);
    uint64_t s = seed * 40503 + T * 131 + (size_t)NH * 17 + (size_t)HS;
    const size_t C = (size_t)NH * (size_t)HS, C3 = 3 * C, BT = B * T;
    float *qkv = alloc_fill(BT * C3, &s, -1.5f, 1.5f), *dout = alloc_fill(BT * C, &s, -1.0f, 1.0f);
    float *out = alloc_nan(BT * C), *lse = alloc_nan(tri_cuemu_attention_saved_floats(B, T, NH, NH, HS));
    float *rout = alloc_nan(BT * C), *rlse = alloc_nan(B * (size_t)NH * T);
    tri_cuemu_set_seed(seed);
    tri_cuemu_attention_fwd(NULL, TRI_F32, out, lse, qkv, B, T, NH, NH, HS);
    tri_cpu_attention_fwd(rout, rlse, qkv, B, T, NH, NH, HS);

    float *dqkv = alloc_nan(BT * C3), *rdqkv = alloc_nan(BT * C3);
    float *scratch = alloc_nan(tri_cuemu_attention_scratch_floats(B, T, NH, NH, HS));
    float *rscratch = alloc_nan(tri_cpu_attention_scratch_floats(B, T, NH, NH, HS));
    tri_cuemu_set_seed(seed + 7);
    tri_cuemu_attention_bwd(NULL, TRI_F32, dqkv, scratch, dout, qkv, out, lse, B, T, NH, NH, HS);
    tri_cpu_attention_bwd(rdqkv, rscratch, dout, qkv, rout, rlse, B, T, NH, NH, HS);

    att_scales sc = attention_scales(qkv, dout, rout, B, T, NH, HS);
    expect_close("attention_fwd out", out, rout, sc.sc_o, BT * C, sc.tol, shape);
    float *wl = dev_alloc(sizeof(float) * B * NH * T);
    for (size_t i = 0; i < B * (size_t)NH * T; i++) wl[i] = (float)sc.wlse[i];
    expect_close("attention_fwd lse", lse, wl, sc.sc_l, B * (size_t)NH * T, sc.tol, shape);
    expect_close("attention_bwd dqkv", dqkv, rdqkv, sc.sc_d, BT * C3, sc.tol, shape);

    /* no atomics: another schedule gives the same bits */
    float *again = alloc_nan(BT * C3), *out2 = alloc_nan(BT * C);
    tri_cuemu_set_seed(seed * 977 + 3);
    tri_cuemu_set_workers(1);
    tri_cuemu_attention_fwd(NULL, TRI_F32, out2, lse, qkv, B, T, NH, NH, HS);
    tri_cuemu_attention_bwd(NULL, TRI_F32, again, scratch, dout, qkv, out, lse, B, T, NH, NH, HS);
    tri_cuemu_set_workers(2);
    cr_expect(memcmp(out2, out, sizeof(float) * BT * C) == 0, "attention_fwd %s: other bits under another seed", shape);
    cr_expect(memcmp(again, dqkv, sizeof(float) * BT * C3) == 0, "attention_bwd %s: other bits under another seed",
              shape);
    att_scales_free(&sc);
    dev_free(again), dev_free(out2), dev_free(wl);
    dev_free(qkv), dev_free(dout), dev_free(out), dev_free(lse), dev_free(rout), dev_free(rlse), dev_free(dqkv),
        dev_free(rdqkv), dev_free(scratch);
    dev_free(rscratch);
}

/* bf16 storage of qkv, out, dout and dqkv (lse and scratch fp32). Inputs are
 * rounded to bf16 and the CPU computes in fp32 on the rounded values with its
 * attention (kernels/cpu/attention.c, flash-style as the CUDA kernels): the
 * forward's out rounded to bf16; the backward fed the very inputs the CUDA
 * backward gets (the rounded out, the CPU's lse), so that both sides compute
 * the same fp32 function of the same values and differ by fp32 rounding and
 * the final rounding to bf16 only. Tolerance: the fp32 one above (magnitudes
 * from the rounded inputs) plus one bf16 spacing of the value
 * (expect_close_bf16). Where the kernels take the tensor cores (bf16, HS 64:
 * the case of HS 64 below), they also round the probabilities (and dS) to
 * bf16 for the mma, each by at most 2^-8 of itself, which moves every sum by
 * at most 2^-8 of the magnitudes it adds: 2^-8 joins the fp32 factor there
 * (test_cuda_attention_tc.c tests those kernels on their own). The lse is
 * fp32: the fp32 tolerance. Outputs NaN-poisoned; the bits must not depend on
 * the schedule. */
static void attention_case_bf16(size_t B, size_t T, int NH, int HS, uint64_t seed) {
    char shape[128];
    snprintf(shape, sizeof shape, "(B %zu, T %zu, NH %d, HS %d, seed %llu)", B, T, NH, HS, (unsigned long long)seed);
    uint64_t s = seed * 92821 + T * 131 + (size_t)NH * 17 + (size_t)HS;
    const size_t C = (size_t)NH * (size_t)HS, C3 = 3 * C, BT = B * T, nl = B * (size_t)NH * T;
    float *qkv = alloc_fill(BT * C3, &s, -1.5f, 1.5f), *dout = alloc_fill(BT * C, &s, -1.0f, 1.0f);
    uint16_t *qkv_h = to_bf16(qkv, BT * C3, qkv), *dout_h = to_bf16(dout, BT * C, dout);
    uint16_t *out_h = alloc_nan_bf16(BT * C), *dqkv_h = alloc_nan_bf16(BT * C3);
    float *lse = alloc_nan(tri_cuemu_attention_saved_floats(B, T, NH, NH, HS));
    float *scratch = alloc_nan(tri_cuemu_attention_scratch_floats(B, T, NH, NH, HS));
    tri_cuemu_set_seed(seed);
    tri_cuemu_attention_fwd(NULL, TRI_BF16, out_h, lse, qkv_h, B, T, NH, NH, HS);

    float *rout = alloc_nan(BT * C), *rlse = alloc_nan(nl);
    tri_cpu_attention_fwd(rout, rlse, qkv, B, T, NH, NH, HS);
    att_scales sc = attention_scales(qkv, dout, rout, B, T, NH, HS);
    const double ptol = tri_cuemu_attention_uses_tensor_cores(TRI_BF16, HS) ? 1.0 / 256.0 : 0.0; /* P in bf16 */
    round_bf16(rout, BT * C);
    expect_close_bf16("attention_fwd out", out_h, rout, sc.sc_o, BT * C, sc.tol + ptol, shape);
    float *wl = dev_alloc(sizeof(float) * nl);
    for (size_t i = 0; i < nl; i++) wl[i] = (float)sc.wlse[i];
    expect_close("attention_fwd lse (bf16 inputs)", lse, wl, sc.sc_l, nl, sc.tol, shape);

    /* the backward on the CPU op's rounded out and the CPU's lse, both sides */
    uint16_t *rout_h = to_bf16(rout, BT * C, NULL);
    float *rdqkv = alloc_nan(BT * C3), *rscratch = alloc_nan(tri_cpu_attention_scratch_floats(B, T, NH, NH, HS));
    tri_cuemu_set_seed(seed + 7);
    tri_cuemu_attention_bwd(NULL, TRI_BF16, dqkv_h, scratch, dout_h, qkv_h, rout_h, rlse, B, T, NH, NH, HS);
    tri_cpu_attention_bwd(rdqkv, rscratch, dout, qkv, rout, rlse, B, T, NH, NH, HS);
    round_bf16(rdqkv, BT * C3);
    expect_close_bf16("attention_bwd dqkv", dqkv_h, rdqkv, sc.sc_d, BT * C3, sc.tol + ptol, shape);

    /* no atomics: another schedule gives the same bits */
    uint16_t *out2 = alloc_nan_bf16(BT * C), *again = alloc_nan_bf16(BT * C3);
    float *lse2 = alloc_nan(nl);
    tri_cuemu_set_seed(seed * 977 + 5);
    tri_cuemu_set_workers(1);
    tri_cuemu_attention_fwd(NULL, TRI_BF16, out2, lse2, qkv_h, B, T, NH, NH, HS);
    tri_cuemu_attention_bwd(NULL, TRI_BF16, again, scratch, dout_h, qkv_h, rout_h, rlse, B, T, NH, NH, HS);
    tri_cuemu_set_workers(2);
    cr_expect(memcmp(out2, out_h, sizeof(uint16_t) * BT * C) == 0 && memcmp(lse2, lse, sizeof(float) * nl) == 0,
              "bf16 attention_fwd %s: other bits under another seed", shape);
    cr_expect(memcmp(again, dqkv_h, sizeof(uint16_t) * BT * C3) == 0,
              "bf16 attention_bwd %s: other bits under another seed", shape);
    att_scales_free(&sc);
    dev_free(qkv), dev_free(dout), dev_free(qkv_h), dev_free(dout_h), dev_free(out_h), dev_free(dqkv_h), dev_free(lse),
        dev_free(scratch), dev_free(rout);
    dev_free(rlse), dev_free(wl), dev_free(rout_h), dev_free(rdqkv), dev_free(rscratch), dev_free(out2);
    dev_free(again), dev_free(lse2);
}

Test(cuda_emu, attention_bf16_matches_the_cpu_op_on_rounded_values) {
    /* (B, T, NH, HS): T = 1; T not a multiple of the 32-row tile (one and
     * three tiles); HS 16, 24 and 64 */
    const size_t cases[][4] = {{1, 1, 2, 16}, {2, 37, 3, 24}, {1, 70, 2, 16}, {1, 33, 1, 64}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (uint64_t seed = 1; seed <= 2; seed++)
            attention_case_bf16(cases[c][0], cases[c][1], (int)cases[c][2], (int)cases[c][3], seed);
}

Test(cuda_emu, attention_fwd_bwd_match_the_cpu_op) {
    /* (B, T, NH, HS): T = 1; T below, at, and not a multiple of the 32-row
     * tile; HS 16, 24 and 64 */
    const size_t cases[][4] = {{1, 1, 1, 16},   {2, 1, 3, 64}, {2, 37, 3, 24}, {1, 32, 2, 16},
                               {1, 100, 2, 64}, {3, 5, 4, 24}, {1, 65, 1, 16}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (uint64_t seed = 1; seed <= 2; seed++)
            attention_case(cases[c][0], cases[c][1], (int)cases[c][2], (int)cases[c][3], seed);
}

/* ---- AdamW over many tensors, sums ---- */

/* Sizes around the 4096-element AdamW and 8192-element sum blocks, empty
 * tensors (also the last one) and tiny ones. */
static const size_t OPT_SIZES[] = {1, 31, 0, 4097, 9000, 257, 8192, 8193, 0};
enum { OPT_COUNT = sizeof OPT_SIZES / sizeof OPT_SIZES[0] };

/* Every tensor against the CPU's scale (when grad_scale != 1) and adamw ops.
 * No reduction: each value is a few roundings from the CPU's. Tolerances:
 * m and v 4 eps times the magnitudes of their two terms; param 16 eps times
 * |p| + lr (|mhat / (sqrt(vhat) + eps)| + wd |p|) (the division and square
 * root add a few eps relative to the update). */
static void adamw_case(float grad_scale, int t, uint64_t seed) {
    char shape[96];
    snprintf(shape, sizeof shape, "(grad_scale %g, t %d, seed %llu)", grad_scale, t, (unsigned long long)seed);
    uint64_t s = seed * 2654435761u + (uint64_t)t;
    const float lr = 3e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f;
    tri_cu_adamw_tensor *table = dev_alloc(sizeof(tri_cu_adamw_tensor) * OPT_COUNT);
    float *p0[OPT_COUNT], *m0[OPT_COUNT], *v0[OPT_COUNT], *g[OPT_COUNT];
    for (int k = 0; k < OPT_COUNT; k++) {
        const size_t n = OPT_SIZES[k];
        p0[k] = alloc_fill(n, &s, -1.0f, 1.0f), m0[k] = alloc_fill(n, &s, -0.1f, 0.1f);
        v0[k] = alloc_fill(n, &s, 0.0f, 0.01f), g[k] = alloc_fill(n, &s, -0.5f, 0.5f);
        table[k] = (tri_cu_adamw_tensor){dup(p0[k], n), dup(m0[k], n), dup(v0[k], n), g[k], n, k % 2 ? 0.1f : 0.0f, 0};
    }
    const size_t blocks = tri_cuemu_adamw_plan(table, OPT_COUNT);
    tri_cuemu_set_seed(seed);
    tri_cuemu_adamw_multi(NULL, table, OPT_COUNT, blocks, lr, b1, b2, eps, t, grad_scale);
    const double ibc1 = 1.0 / (1.0 - pow(b1, t)), ibc2 = 1.0 / (1.0 - pow(b2, t));
    for (int k = 0; k < OPT_COUNT; k++) {
        const size_t n = OPT_SIZES[k];
        float *p = dup(p0[k], n), *m = dup(m0[k], n), *v = dup(v0[k], n), *gs = dup(g[k], n);
        if (grad_scale != 1.0f) tri_cpu_scale(gs, grad_scale, n);
        tri_cpu_adamw(p, m, v, gs, n, lr, b1, b2, eps, table[k].wd, t);
        double *sp = dev_alloc(sizeof(double) * (n + 1)), *sm = dev_alloc(sizeof(double) * (n + 1)),
               *sv = dev_alloc(sizeof(double) * (n + 1));
        for (size_t i = 0; i < n; i++) {
            const double gi = gs[i];
            sm[i] = b1 * fabs((double)m0[k][i]) + (1 - b1) * fabs(gi) + FLT_MIN;
            sv[i] = b2 * (double)v0[k][i] + (1 - b2) * gi * gi + FLT_MIN;
            sp[i] = fabs((double)p0[k][i]) +
                    lr * (fabs(m[i] * ibc1) / (sqrt(v[i] * ibc2) + eps) + table[k].wd * fabs((double)p0[k][i]));
        }
        expect_close("adamw_multi m", table[k].m, m, sm, n, 4 * FLT_EPSILON, shape);
        expect_close("adamw_multi v", table[k].v, v, sv, n, 4 * FLT_EPSILON, shape);
        expect_close("adamw_multi param", table[k].param, p, sp, n, 16 * FLT_EPSILON, shape);
        dev_free(p), dev_free(m), dev_free(v), dev_free(gs), dev_free(sp), dev_free(sm), dev_free(sv);
        dev_free(table[k].param), dev_free(table[k].m), dev_free(table[k].v), dev_free(p0[k]), dev_free(m0[k]);
        dev_free(v0[k]), dev_free(g[k]);
    }
    dev_free(table);
}

Test(cuda_emu, adamw_multi_matches_the_cpu_op_on_every_tensor) {
    for (uint64_t seed = 1; seed <= 3; seed++) {
        adamw_case(1.0f, (int)seed, seed);
        adamw_case(0.37f, 1000, seed);
    }
}

/* The sums against the CPU's: both in double, so they differ by double
 * rounding only: 2 (n + 4) DBL_EPSILON times the sum of |terms|. The result
 * must not depend on the schedule (bits compared across seeds and workers). */
Test(cuda_emu, sums_match_the_cpu_op_and_do_not_depend_on_scheduling) {
    uint64_t s = 4242;
    tri_cu_span *table = dev_alloc(sizeof(tri_cu_span) * OPT_COUNT);
    double *result = dev_alloc(sizeof(double));
    float *x[OPT_COUNT];
    size_t total = 0;
    for (int k = 0; k < OPT_COUNT; k++) {
        x[k] = alloc_fill(OPT_SIZES[k], &s, -3.0f, 2.0f); /* mean not 0: the sum does not cancel to noise */
        table[k] = (tri_cu_span){x[k], OPT_SIZES[k], 0};
        total += OPT_SIZES[k];
    }
    const size_t blocks = tri_cuemu_sum_plan(table, OPT_COUNT);
    for (int square = 0; square <= 1; square++) {
        double want = 0.0, mag = 0.0, first = NAN;
        for (int k = 0; k < OPT_COUNT; k++) {
            want += square ? tri_cpu_sumsq(x[k], OPT_SIZES[k]) : tri_cpu_sum(x[k], OPT_SIZES[k]);
            for (size_t i = 0; i < OPT_SIZES[k]; i++) mag += square ? (double)x[k][i] * x[k][i] : fabs((double)x[k][i]);
        }
        for (int run = 0; run < 4; run++) {
            double *partial = dev_alloc(sizeof(double) * (blocks + 1));
            *result = NAN;
            for (size_t b = 0; b <= blocks; b++) partial[b] = NAN;
            tri_cuemu_set_workers(run % 2 + 1);
            tri_cuemu_set_seed((uint64_t)run * 31 + 5);
            tri_cuemu_sum_multi(NULL, result, partial, table, OPT_COUNT, blocks, square);
            cr_assert(fabs(*result - want) <= 2.0 * (double)(total + 4) * DBL_EPSILON * mag,
                      "sum_multi (square %d): %.17g, the CPU ops give %.17g", square, *result, want);
            if (run == 0)
                first = *result;
            else
                cr_assert(memcmp(&first, result, sizeof first) == 0, "sum_multi (square %d) run %d: other bits", square,
                          run);
            dev_free(partial);
        }
        /* one tensor at a time, empty ones included */
        for (int k = 0; k < OPT_COUNT; k++) {
            const size_t n = OPT_SIZES[k];
            const size_t np = tri_cuemu_sum_partials(n);
            double *partial = dev_alloc(sizeof(double) * np), m1 = 0.0;
            *result = NAN;
            for (size_t b = 0; b < np; b++) partial[b] = NAN;
            tri_cuemu_sum(NULL, result, partial, x[k], n, square);
            const double w = square ? tri_cpu_sumsq(x[k], n) : tri_cpu_sum(x[k], n);
            for (size_t i = 0; i < n; i++) m1 += square ? (double)x[k][i] * x[k][i] : fabs((double)x[k][i]);
            cr_assert(fabs(*result - w) <= 2.0 * (double)(n + 4) * DBL_EPSILON * m1,
                      "sum (n %zu, square %d): %.17g, the CPU op gives %.17g", n, square, *result, w);
            dev_free(partial);
        }
    }
    tri_cuemu_set_workers(2);
    for (int k = 0; k < OPT_COUNT; k++) dev_free(x[k]);
    dev_free(table), dev_free(result);
}

/* ---- residual, bias gradient, scale, add ---- */

/* residual, scale and add do one rounding per element in the CPU's order: the
 * CPU's bits. bias_bwd sums N rows in another order: 2 (N + 4) eps times the
 * sum of |dout| over the column plus |dbias before|. */
/* bias_bwd of dout (dtype dt; x: the same values as floats) into a
 * pre-filled dbias against the CPU op, under three schedules that must
 * give the same bits (fixed row groups, no atomics). */
static void bias_bwd_check(tri_dtype dt, const void *dout, const float *x, size_t N, size_t C, uint64_t seed0,
                           uint64_t *s, const char *shape) {
    const char *what = dt == TRI_BF16 ? "bf16 bias_bwd" : "bias_bwd";
    float *db = alloc_fill(C, s, -1.0f, 1.0f), *rdb = dup(db, C), *first = NULL;
    tri_cpu_bias_bwd(rdb, x, N, C);
    double *sc = dev_alloc(sizeof(double) * C);
    for (size_t c = 0; c < C; c++) {
        sc[c] = 1.0 + fabs((double)db[c]);
        for (size_t r = 0; r < N; r++) sc[c] += fabs((double)x[r * C + c]);
    }
    for (int run = 0; run < 3; run++) {
        float *g = dup(db, C), *scratch = alloc_nan(tri_cuemu_bias_bwd_scratch_floats(N, C));
        tri_cuemu_set_workers(run % 2 + 1);
        tri_cuemu_set_seed(seed0 + (uint64_t)run);
        tri_cuemu_bias_bwd(NULL, dt, g, scratch, dout, N, C);
        expect_close(what, g, rdb, sc, C, sum_tol(N), shape);
        if (run == 0)
            first = dup(g, C);
        else
            cr_assert(memcmp(first, g, sizeof(float) * C) == 0, "%s %s run %d: other bits", what, shape, run);
        dev_free(g), dev_free(scratch);
    }
    tri_cuemu_set_workers(2);
    dev_free(db), dev_free(rdb), dev_free(first), dev_free(sc);
}

static void elementwise_case(size_t N, size_t C, uint64_t seed) {
    char shape[96];
    snprintf(shape, sizeof shape, "(N %zu, C %zu, seed %llu)", N, C, (unsigned long long)seed);
    uint64_t s = seed * 1299709 + N * 3 + C;
    const size_t n = N * C;
    float *res = alloc_fill(n, &s, -2.0f, 2.0f), *x = alloc_fill(n, &s, -2.0f, 2.0f), *bias = alloc_fill(C, &s, -1, 1);
    for (int with_bias = 0; with_bias <= 1; with_bias++) {
        const float *bb = with_bias ? bias : NULL;
        float *out = alloc_nan(n), *rout = alloc_nan(n);
        tri_cuemu_set_seed(seed);
        tri_cuemu_residual_fwd(NULL, TRI_F32, out, res, x, bb, N, C);
        tri_cpu_residual_fwd(rout, res, x, bb, N, C);
        cr_assert(memcmp(out, rout, sizeof(float) * n) == 0, "residual_fwd %s bias %d differs", shape, with_bias);
        float *a = dup(res, n), *b = dup(x, n); /* out aliasing res, then x */
        tri_cuemu_residual_fwd(NULL, TRI_F32, a, a, x, bb, N, C);
        tri_cuemu_residual_fwd(NULL, TRI_F32, b, res, b, bb, N, C);
        cr_assert(memcmp(a, rout, sizeof(float) * n) == 0 && memcmp(b, rout, sizeof(float) * n) == 0,
                  "residual_fwd in place %s bias %d differs", shape, with_bias);
        dev_free(out), dev_free(rout), dev_free(a), dev_free(b);
    }
    bias_bwd_check(TRI_F32, x, x, N, C, seed * 13, &s, shape);
    float *y = dup(res, n), *ry = dup(res, n);
    tri_cuemu_add(NULL, y, x, n);
    tri_cpu_add(ry, x, n);
    cr_assert(memcmp(y, ry, sizeof(float) * n) == 0, "add %s differs", shape);
    tri_cuemu_scale(NULL, y, 0.3f, n);
    tri_cpu_scale(ry, 0.3f, n);
    cr_assert(memcmp(y, ry, sizeof(float) * n) == 0, "scale %s differs", shape);
    dev_free(res), dev_free(x), dev_free(bias), dev_free(y), dev_free(ry);
}

Test(cuda_emu, residual_bias_scale_add_match_the_cpu_ops) {
    /* 1100 * 257 > 1024 blocks * 256 threads: the grid-stride loop runs twice */
    const size_t shapes[][2] = {{1, 1}, {3, 5}, {7, 33}, {100, 31}, {17, 300}, {1100, 257}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
        for (uint64_t seed = 1; seed <= 2; seed++) elementwise_case(shapes[k][0], shapes[k][1], seed);
}

/* bf16 storage: residual_fwd's out, res, x and bias bf16; bias_bwd's dout
 * bf16 and dbias fp32. residual_fwd rounds once the fp32 value the CPU op
 * computes on the rounded inputs (same order: (res + x) + bias), so the
 * fp32 tolerance is 0 and the bf16 bits must be those of that value rounded
 * (out of place and aliasing res or x). bias_bwd sums the same widened
 * values as the CPU op on the rounded dout: the fp32 tolerance of
 * elementwise_case, and the same bits under every schedule. */
static void elementwise_case_bf16(size_t N, size_t C, uint64_t seed) {
    char shape[96];
    snprintf(shape, sizeof shape, "(N %zu, C %zu, seed %llu)", N, C, (unsigned long long)seed);
    uint64_t s = seed * 1299721 + N * 5 + C;
    const size_t n = N * C;
    float *res = alloc_fill(n, &s, -2.0f, 2.0f), *x = alloc_fill(n, &s, -2.0f, 2.0f), *bias = alloc_fill(C, &s, -1, 1);
    uint16_t *res_h = to_bf16(res, n, res), *x_h = to_bf16(x, n, x), *bias_h = to_bf16(bias, C, bias);
    for (int with_bias = 0; with_bias <= 1; with_bias++) {
        float *rout = alloc_nan(n);
        uint16_t *out_h = alloc_nan_bf16(n);
        tri_cuemu_set_seed(seed);
        tri_cuemu_residual_fwd(NULL, TRI_BF16, out_h, res_h, x_h, with_bias ? bias_h : NULL, N, C);
        tri_cpu_residual_fwd(rout, res, x, with_bias ? bias : NULL, N, C);
        uint16_t *want_h = to_bf16(rout, n, NULL);
        cr_assert(memcmp(out_h, want_h, sizeof(uint16_t) * n) == 0, "bf16 residual_fwd %s bias %d differs", shape,
                  with_bias);
        uint16_t *a = to_bf16(res, n, NULL), *b = to_bf16(x, n, NULL); /* out aliasing res, then x */
        tri_cuemu_residual_fwd(NULL, TRI_BF16, a, a, x_h, with_bias ? bias_h : NULL, N, C);
        tri_cuemu_residual_fwd(NULL, TRI_BF16, b, res_h, b, with_bias ? bias_h : NULL, N, C);
        cr_assert(memcmp(a, want_h, sizeof(uint16_t) * n) == 0 && memcmp(b, want_h, sizeof(uint16_t) * n) == 0,
                  "bf16 residual_fwd in place %s bias %d differs", shape, with_bias);
        dev_free(rout), dev_free(out_h), dev_free(want_h), dev_free(a), dev_free(b);
    }
    bias_bwd_check(TRI_BF16, x_h, x, N, C, seed * 17, &s, shape);
    dev_free(res), dev_free(x), dev_free(bias), dev_free(res_h), dev_free(x_h), dev_free(bias_h);
}

Test(cuda_emu, residual_bias_bwd_bf16_match_the_cpu_ops_on_rounded_values) {
    const size_t shapes[][2] = {{1, 1}, {3, 5}, {7, 33}, {100, 31}, {17, 300}, {1100, 257}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
        for (uint64_t seed = 1; seed <= 2; seed++) elementwise_case_bf16(shapes[k][0], shapes[k][1], seed);
}

/* ---- fp32 <-> bf16 casts, bit for bit against kernels/half.h ---- */

Test(cuda_emu, bf16_casts_match_half_h_bit_for_bit) {
    /* every bf16 value, each halfway point above it (a tie), one ulp either
     * side of the tie, and random fp32 patterns (NaNs, infinities,
     * subnormals, the largest finite values included) */
    const size_t nb = 65536, nr = 300000, n = 4 * nb + nr;
    uint32_t *bits = dev_alloc(sizeof(uint32_t) * n);
    uint64_t s = 77;
    for (size_t h = 0; h < nb; h++) {
        bits[4 * h] = (uint32_t)h << 16;
        bits[4 * h + 1] = ((uint32_t)h << 16) | 0x8000u;
        bits[4 * h + 2] = ((uint32_t)h << 16) | 0x7fffu;
        bits[4 * h + 3] = ((uint32_t)h << 16) | 0x8001u;
    }
    for (size_t i = 0; i < nr; i++) bits[4 * nb + i] = (uint32_t)rng_next(&s);
    float *f = dev_alloc(sizeof(float) * n);
    memcpy(f, bits, sizeof(float) * n);
    uint16_t *got = dev_alloc(sizeof(uint16_t) * n);
    memset(got, 0xa5, sizeof(uint16_t) * n);
    tri_cuemu_cast_f32_to_bf16(NULL, got, f, n);
    for (size_t i = 0; i < n; i++)
        cr_assert(got[i] == tri_f32_to_bf16(f[i]), "fp32 0x%08x -> bf16 0x%04x, half.h gives 0x%04x", bits[i], got[i],
                  tri_f32_to_bf16(f[i]));
    uint16_t *all = dev_alloc(sizeof(uint16_t) * nb);
    for (size_t h = 0; h < nb; h++) all[h] = (uint16_t)h;
    float *back = alloc_nan(nb);
    tri_cuemu_cast_bf16_to_f32(NULL, back, all, nb);
    for (size_t h = 0; h < nb; h++) {
        const float want = tri_bf16_to_f32((uint16_t)h);
        cr_assert(memcmp(&back[h], &want, sizeof want) == 0, "bf16 0x%04zx -> fp32 differs from half.h", h);
    }
    dev_free(bits), dev_free(f), dev_free(got), dev_free(all), dev_free(back);
}
