/* The CUDA kernels of the Llama ops (kernels/cuda/rmsnorm.cu, rope.cu,
 * swiglu.cu), run under the emulation layer against the CPU ops
 * (kernels/cpu), as test_cuda_kernels.c does for the GPT-2 ops: awkward
 * shapes, several scheduling seeds, overwritten outputs and scratch poisoned
 * with NaN first, accumulated outputs pre-filled with random values, fp32
 * and bf16 storage (bf16: the CPU op on the bf16-rounded inputs, its outputs
 * rounded; the fp32 tolerance plus one bf16 spacing, BF16_EPS |want|).
 * Grouped-query attention is tested with the other attention cases in
 * test_cuda_kernels.c and test_cuda_attention_tc.c.
 *
 * Tolerances (fp32 on both sides, different summation orders and libm):
 *   RMSNorm: reductions of C terms (rstd, dinp) or N terms (dw):
 *     2 (L + 4) eps times the magnitudes of the terms;
 *   RoPE: no reduction; cos and sin of the same fp32 angle (CUDA's sincosf,
 *     the CPU's cosf / sinf, each within 2 ulp), then two products and a sum:
 *     8 eps (|x_i| + |x_{i+HS/2}|);
 *   SwiGLU: no reduction; CUDA's expf against the CPU's vec_expf (a few ulp),
 *     amplified by |g| through the sigmoid: (8 + 8 |g|) eps times the
 *     magnitudes of the terms (|g s u| forward; for dg the terms of
 *     s (1 + g (1 - s)), whose sum cancels near g = -1.28). */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/cpu/cpu_internal.h"
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

static double *dscale(size_t n) { return dev_calloc(n ? n : 1, sizeof(double)); }

static double sum_tol(size_t L) { return 2.0 * (double)(L + 4) * FLT_EPSILON; }

#define BF16_EPS (1.0 / 128.0)

/* n floats rounded to bf16: the bits, and the same values widened into as_f32 */
static uint16_t *to_bf16(const float *x, size_t n, float *as_f32) {
    uint16_t *h = dev_alloc(sizeof(uint16_t) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) {
        h[i] = tri_f32_to_bf16(x[i]);
        if (as_f32) as_f32[i] = tri_bf16_to_f32(h[i]);
    }
    return h;
}

static uint16_t *alloc_nan_bf16(size_t n) {
    uint16_t *h = dev_alloc(sizeof(uint16_t) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) h[i] = 0x7fc0;
    return h;
}

/* |got - want| <= tol * scale[i] (+ BF16_EPS |want| for bf16: got_h != NULL);
 * scale NULL: 1 + |want|. NaN never passes. */
static void expect_near(const char *what, const float *got, const uint16_t *got_h, const float *want,
                        const double *scale, size_t n, double tol, const char *shape) {
    for (size_t i = 0; i < n; i++) {
        const double g = got_h ? (double)tri_bf16_to_f32(got_h[i]) : (double)got[i];
        const double w = got_h ? (double)tri_round_bf16(want[i]) : (double)want[i];
        const double sc = scale ? scale[i] : 1.0 + fabs(w);
        const double lim = tol * sc + (got_h ? BF16_EPS * fabs(w) : 0.0);
        const double err = fabs(g - w);
        if (!(err <= lim))
            cr_assert_fail("%s %s%s: element %zu is %.9g, the CPU op gives %.9g (|diff| %.3g > tolerance %.3g)", what,
                           shape, got_h ? " (bf16)" : "", i, g, w, err, lim);
    }
}

/* ---- RMSNorm ---- */

static const size_t RMS_SHAPES[][2] = {{1, 1}, {3, 5}, {7, 33}, {17, 100}, {5, 257}, {100, 31}, {1100, 7}, {37, 768}};

/* The magnitudes behind rmsnorm_bwd's outputs (from the CPU's rstd):
 * dinp: rstd (|g| + |xhat| mean |g xhat|) + |dinp|, plus 1; dw: the sum over
 * rows of |dout xhat| plus |dw| plus 1. */
static void rms_bwd_scales(const float *dout, const float *inp, const float *w, const float *rrstd, const float *rdinp,
                           const float *rdw, size_t N, size_t C, double **sc_in_out, double **sc_w_out) {
    double *sc_in = dscale(N * C), *sc_w = dscale(C);
    for (size_t n = 0; n < N; n++) {
        double mgx = 0.0;
        for (size_t c = 0; c < C; c++)
            mgx += fabs((double)dout[n * C + c] * w[c] * inp[n * C + c] * rrstd[n]) / (double)C;
        for (size_t c = 0; c < C; c++) {
            const size_t i = n * C + c;
            const double xhat = (double)inp[i] * rrstd[n];
            sc_in[i] = 1.0 + fabs((double)rdinp[i]) + rrstd[n] * (fabs((double)dout[i] * w[c]) + fabs(xhat) * mgx);
            sc_w[c] += fabs(dout[i] * xhat);
        }
    }
    for (size_t c = 0; c < C; c++) sc_w[c] += 1.0 + fabs((double)rdw[c]);
    *sc_in_out = sc_in, *sc_w_out = sc_w;
}

/* fp32 (bf16 = 0) or bf16 storage of out, inp, w, dinp and dout. */
static void rmsnorm_case(size_t N, size_t C, uint64_t seed, int bf16) {
    char shape[96];
    snprintf(shape, sizeof shape, "(N %zu, C %zu, seed %llu)", N, C, (unsigned long long)seed);
    uint64_t s = seed * 7919 + N * 31 + C + (uint64_t)bf16;
    const tri_dtype dt = bf16 ? TRI_BF16 : TRI_F32;
    float *inp = alloc_fill(N * C, &s, -2.0f, 2.0f);
    for (size_t i = 0; i < N * C; i++) inp[i] *= (float)(1 + i / C % 3); /* rows of different scales */
    float *w = alloc_fill(C, &s, 0.5f, 1.5f);
    uint16_t *inp_h = bf16 ? to_bf16(inp, N * C, inp) : NULL, *w_h = bf16 ? to_bf16(w, C, w) : NULL;
    float *out = alloc_nan(N * C), *rstd = alloc_nan(N), *rout = alloc_nan(N * C), *rrstd = alloc_nan(N);
    uint16_t *out_h = bf16 ? alloc_nan_bf16(N * C) : NULL;
    tri_cuemu_set_seed(seed);
    tri_cuemu_rmsnorm_fwd(NULL, dt, bf16 ? (void *)out_h : out, rstd, bf16 ? (void *)inp_h : inp,
                          bf16 ? (void *)w_h : w, N, C, 1e-5f);
    tri_cpu_rmsnorm_fwd(rout, rrstd, inp, w, N, C, 1e-5f);
    expect_near("rmsnorm_fwd rstd", rstd, NULL, rrstd, NULL, N, sum_tol(C), shape);
    expect_near("rmsnorm_fwd out", out, out_h, rout, NULL, N * C, sum_tol(C), shape);

    /* backward from the CPU's rstd, into pre-filled gradients */
    float *dout = alloc_fill(N * C, &s, -1.0f, 1.0f), *dinp = alloc_fill(N * C, &s, -1.0f, 1.0f);
    uint16_t *dout_h = bf16 ? to_bf16(dout, N * C, dout) : NULL, *dinp_h = bf16 ? to_bf16(dinp, N * C, dinp) : NULL;
    float *dw = alloc_fill(C, &s, -1.0f, 1.0f), *rdinp = dup(dinp, N * C), *rdw = dup(dw, C);
    float *scratch = alloc_nan(tri_cuemu_rmsnorm_bwd_scratch_floats(N, C));
    tri_cuemu_set_seed(seed + 11);
    tri_cuemu_rmsnorm_bwd(NULL, dt, bf16 ? (void *)dinp_h : dinp, dw, scratch, bf16 ? (void *)dout_h : dout,
                          bf16 ? (void *)inp_h : inp, bf16 ? (void *)w_h : w, rrstd, N, C);
    tri_cpu_rmsnorm_bwd(rdinp, rdw, dout, inp, w, rrstd, N, C); /* rdinp = old + increment, fp32 */
    double *sc_in, *sc_w;
    rms_bwd_scales(dout, inp, w, rrstd, rdinp, rdw, N, C, &sc_in, &sc_w);
    expect_near("rmsnorm_bwd dinp", dinp, dinp_h, rdinp, sc_in, N * C, sum_tol(C), shape);
    expect_near("rmsnorm_bwd dw", dw, NULL, rdw, sc_w, C, sum_tol(N), shape);

    dev_free(sc_in), dev_free(sc_w), dev_free(inp), dev_free(w), dev_free(out), dev_free(rstd), dev_free(rout),
        dev_free(rrstd);
    dev_free(dout), dev_free(dinp), dev_free(dw), dev_free(rdinp), dev_free(rdw), dev_free(scratch);
    if (bf16) dev_free(inp_h), dev_free(w_h), dev_free(out_h), dev_free(dout_h), dev_free(dinp_h);
}

Test(cuda_emu_llama, rmsnorm_fwd_bwd_match_the_cpu_op) {
    for (size_t k = 0; k < sizeof RMS_SHAPES / sizeof RMS_SHAPES[0]; k++)
        for (uint64_t seed = 1; seed <= 3; seed++) rmsnorm_case(RMS_SHAPES[k][0], RMS_SHAPES[k][1], seed, 0);
}

Test(cuda_emu_llama, rmsnorm_bf16_matches_the_cpu_op_on_rounded_values) {
    for (size_t k = 0; k < sizeof RMS_SHAPES / sizeof RMS_SHAPES[0]; k++)
        for (uint64_t seed = 1; seed <= 2; seed++) rmsnorm_case(RMS_SHAPES[k][0], RMS_SHAPES[k][1], seed, 1);
}

/* dw is reduced in a fixed order (no atomics): the same bits under every
 * scheduling seed and worker count. */
Test(cuda_emu_llama, rmsnorm_bwd_weight_grad_does_not_depend_on_scheduling) {
    const size_t N = 203, C = 45;
    uint64_t s = 99;
    float *inp = alloc_fill(N * C, &s, -2.0f, 2.0f), *w = alloc_fill(C, &s, 0.5f, 1.5f);
    float *dout = alloc_fill(N * C, &s, -1.0f, 1.0f), *rstd = alloc_nan(N), *tmp = alloc_nan(N * C);
    tri_cpu_rmsnorm_fwd(tmp, rstd, inp, w, N, C, 1e-6f);
    float first[45], firstd[203 * 45];
    for (int run = 0; run < 6; run++) {
        float *dw = dev_calloc(C, sizeof(float)), *di = dev_calloc(N * C, sizeof(float));
        float *scratch = alloc_nan(tri_cuemu_rmsnorm_bwd_scratch_floats(N, C));
        tri_cuemu_set_workers(run % 2 + 1);
        tri_cuemu_set_seed((uint64_t)run * 17 + 1);
        tri_cuemu_rmsnorm_bwd(NULL, TRI_F32, di, dw, scratch, dout, inp, w, rstd, N, C);
        if (run == 0) {
            memcpy(first, dw, sizeof(float) * C);
            memcpy(firstd, di, sizeof(float) * N * C);
        } else {
            cr_expect(memcmp(first, dw, sizeof(float) * C) == 0 && memcmp(firstd, di, sizeof(float) * N * C) == 0,
                      "run %d gave other bits", run);
        }
        dev_free(scratch), dev_free(dw), dev_free(di);
    }
    tri_cuemu_set_workers(2);
    dev_free(inp), dev_free(w), dev_free(dout), dev_free(rstd), dev_free(tmp);
}

/* ---- RoPE ---- */

static float *inv_freqs(int HS, double theta) {
    float *f = dev_alloc(sizeof(float) * (size_t)(HS / 2 > 0 ? HS / 2 : 1));
    for (int i = 0; i < HS / 2; i++) f[i] = (float)pow(theta, -2.0 * i / HS);
    return f;
}

static void rope_case(size_t B, size_t T, int NH, int NKV, int HS, size_t pos0, uint64_t seed, int bf16) {
    char shape[128];
    snprintf(shape, sizeof shape, "(B %zu, T %zu, NH %d, NKV %d, HS %d, pos0 %zu, seed %llu)", B, T, NH, NKV, HS, pos0,
             (unsigned long long)seed);
    uint64_t s = seed * 4099 + T * 7 + (size_t)HS + pos0 + (uint64_t)bf16;
    const tri_dtype dt = bf16 ? TRI_BF16 : TRI_F32;
    const size_t W = (size_t)(NH + 2 * NKV) * (size_t)HS, n = B * T * W, half = (size_t)HS / 2;
    float *inv = inv_freqs(HS, 10000.0);
    for (int pass = 0; pass < 2; pass++) { /* forward, then backward */
        float *x = alloc_fill(n, &s, -2.0f, 2.0f);
        uint16_t *x_h = bf16 ? to_bf16(x, n, x) : NULL;
        float *got = dup(x, n), *want = dup(x, n);
        double *sc = dscale(n);
        for (size_t r = 0; r < B * T; r++)
            for (size_t hd = 0; hd < (size_t)(NH + 2 * NKV); hd++)
                for (size_t i = 0; i < half; i++) {
                    const size_t e = r * W + hd * (size_t)HS + i;
                    sc[e] = sc[e + half] = 8.0 * (fabs((double)x[e]) + fabs((double)x[e + half])) + FLT_MIN;
                }
        tri_cuemu_set_seed(seed + (uint64_t)pass);
        if (pass == 0) {
            tri_cuemu_rope_fwd(NULL, dt, bf16 ? (void *)x_h : got, inv, B, T, NH, NKV, HS, pos0);
            tri_cpu_rope_fwd(want, inv, B, T, NH, NKV, HS, pos0);
        } else {
            tri_cuemu_rope_bwd(NULL, dt, bf16 ? (void *)x_h : got, inv, B, T, NH, NKV, HS, pos0);
            tri_cpu_rope_bwd(want, inv, B, T, NH, NKV, HS, pos0);
        }
        expect_near(pass == 0 ? "rope_fwd" : "rope_bwd", got, x_h, want, sc, n, FLT_EPSILON, shape);
        /* the v heads are untouched, bit for bit */
        size_t moved = 0;
        for (size_t r = 0; r < B * T; r++)
            for (size_t e = (size_t)(NH + NKV) * HS; e < W; e++)
                moved += bf16 ? x_h[r * W + e] != tri_f32_to_bf16(x[r * W + e])
                              : memcmp(&got[r * W + e], &x[r * W + e], 4) != 0;
        cr_expect(moved == 0, "rope %s: %zu v elements changed", shape, moved);
        dev_free(x), dev_free(got), dev_free(want), dev_free(sc);
        if (bf16) dev_free(x_h);
    }
    dev_free(inv);
}

Test(cuda_emu_llama, rope_fwd_bwd_match_the_cpu_op) {
    /* (B, T, NH, NKV, HS, pos0): MHA, GQA and MQA; T = 1 and odd T; pos0 0,
     * small, and deep into a long context (angles of thousands of radians) */
    const size_t cases[][6] = {{1, 1, 1, 1, 2, 0},    {2, 7, 4, 4, 6, 0},      {2, 5, 4, 2, 8, 17},
                               {1, 1, 3, 1, 64, 999}, {3, 33, 8, 2, 64, 8131}, {1, 9, 6, 3, 128, 40000}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (uint64_t seed = 1; seed <= 2; seed++)
            for (int bf16 = 0; bf16 <= 1; bf16++)
                rope_case(cases[c][0], cases[c][1], (int)cases[c][2], (int)cases[c][3], (int)cases[c][4], cases[c][5],
                          seed, bf16);
}

/* ---- SwiGLU ---- */

static void swiglu_case(size_t N, size_t F, uint64_t seed, int bf16) {
    char shape[96];
    snprintf(shape, sizeof shape, "(N %zu, F %zu, seed %llu)", N, F, (unsigned long long)seed);
    uint64_t s = seed * 104729 + N * 3 + F + (uint64_t)bf16;
    const tri_dtype dt = bf16 ? TRI_BF16 : TRI_F32;
    float *inp = alloc_fill(2 * N * F, &s, -8.0f, 8.0f);
    /* gates at the edges: 0, around the zero of silu' (-1.278), huge values
     * whose exp overflows */
    const float edge[] = {0.0f, -0.0f, -1.2785f, 100.0f, -100.0f, 1e20f, -1e20f, 5e-39f, 30.0f, -30.0f};
    for (size_t k = 0; k < sizeof edge / sizeof edge[0] && k < N * F; k++) {
        const size_t i = (k * 7919) % (N * F);
        inp[i / F * 2 * F + i % F] = edge[k];
    }
    float *dout = alloc_fill(N * F, &s, -2.0f, 2.0f);
    uint16_t *inp_h = bf16 ? to_bf16(inp, 2 * N * F, inp) : NULL, *dout_h = bf16 ? to_bf16(dout, N * F, dout) : NULL;
    double *sc = dscale(N * F), *scb = dscale(2 * N * F);
    for (size_t r = 0; r < N; r++)
        for (size_t f = 0; f < F; f++) {
            const double g = inp[r * 2 * F + f], u = inp[r * 2 * F + F + f], d = dout[r * F + f];
            const double a = exp(-fabs(g)), sg = (g >= 0 ? 1.0 : a) / (1.0 + a), oms = (g >= 0 ? a : 1.0) / (1.0 + a);
            const double amp = 8.0 + 8.0 * fmin(fabs(g), 100.0);
            sc[r * F + f] = amp * fabs(g * sg * u) + FLT_MIN;
            scb[r * 2 * F + f] = amp * fabs(d * u) * sg * (1.0 + fabs(g) * oms) + FLT_MIN;
            scb[r * 2 * F + F + f] = amp * fabs(d * g * sg) + FLT_MIN;
        }
    float *out = alloc_nan(N * F), *ref = alloc_nan(N * F);
    uint16_t *out_h = bf16 ? alloc_nan_bf16(N * F) : NULL;
    tri_cuemu_set_seed(seed);
    tri_cuemu_swiglu_fwd(NULL, dt, bf16 ? (void *)out_h : out, bf16 ? (void *)inp_h : inp, N, F);
    tri_cpu_swiglu_fwd(ref, inp, N, F);
    expect_near("swiglu_fwd", out, out_h, ref, sc, N * F, FLT_EPSILON, shape);
    float *dinp = alloc_nan(2 * N * F), *rdinp = alloc_nan(2 * N * F);
    uint16_t *dinp_h = bf16 ? alloc_nan_bf16(2 * N * F) : NULL;
    tri_cuemu_set_seed(seed + 3);
    tri_cuemu_swiglu_bwd(NULL, dt, bf16 ? (void *)dinp_h : dinp, bf16 ? (void *)inp_h : inp,
                         bf16 ? (void *)dout_h : dout, N, F);
    tri_cpu_swiglu_bwd(rdinp, inp, dout, N, F);
    expect_near("swiglu_bwd", dinp, dinp_h, rdinp, scb, 2 * N * F, FLT_EPSILON, shape);
    dev_free(inp), dev_free(dout), dev_free(sc), dev_free(scb), dev_free(out), dev_free(ref), dev_free(dinp),
        dev_free(rdinp);
    if (bf16) dev_free(inp_h), dev_free(dout_h), dev_free(out_h), dev_free(dinp_h);
}

Test(cuda_emu_llama, swiglu_fwd_bwd_match_the_cpu_op) {
    const size_t shapes[][2] = {{1, 1}, {3, 37}, {17, 100}, {5, 1031}, {300, 257}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
        for (uint64_t seed = 1; seed <= 2; seed++)
            for (int bf16 = 0; bf16 <= 1; bf16++) swiglu_case(shapes[k][0], shapes[k][1], seed, bf16);
}
