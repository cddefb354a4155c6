/* Tests of the CPU backend's Llama ops (kernels/ops.h: rmsnorm_fwd/bwd,
 * rope_fwd/bwd, swiglu_fwd/bwd; grouped-query attention is tested with the
 * other attention cases in test_ops.c).
 *
 * As in test_ops.c, every op is checked against an independent computation
 * written here: forwards against naive double-precision references,
 * backwards against central finite differences (in double) of those
 * references on L = sum(out * R) with a random R. Overwritten outputs are
 * NaN-poisoned first; accumulated outputs start from random values that must
 * be added to. Every threaded op gives the same bits on one thread as on the
 * default count. A NaN never passes a comparison. */
#include <criterion/criterion.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ctx.h"

/* ------------------------------------------------------------------ helpers */

typedef struct {
    uint64_t s;
} rng;

static double rng_unit(rng *r) /* splitmix64 -> [0, 1) */
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
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

static int close_enough(double got, double want, double atol, double rtol) {
    return fabs(got - want) <= atol + rtol * fabs(want);
}

static size_t count_far(const char *what, const float *got, const double *want, size_t n, double atol, double rtol) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        if (!close_enough((double)got[i], want[i], atol, rtol)) {
            if (bad < 5) cr_log_error("%s[%zu]: got %.9g, want %.9g", what, i, (double)got[i], want[i]);
            bad++;
        }
    return bad;
}

#define EXPECT_CLOSE(what, got, want, n, atol, rtol) \
    cr_expect(count_far((what), (got), (want), (n), (atol), (rtol)) == 0, "%s differs from the reference", (what))

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

/* Filled by hand (no flush-to-zero), as in test_ops.c. */
static tri_ctx g_tctx = {
    .ops = NULL, .act_dtype = TRI_F32, .param_dtype = TRI_F32, .grad_dtype = TRI_F32, .master_dtype = TRI_F32};
#define TC (&g_tctx)

static const tri_ops *cpu(void) {
    g_tctx.ops = tri_ops_cpu();
    return g_tctx.ops;
}

static int same_bits(const float *a, const float *b, size_t n) { return memcmp(a, b, n * sizeof(float)) == 0; }

/* ------------------------------------------------------------------ RMSNorm */

/* out = x / sqrt(mean(x^2) + eps) * w, rstd per row, in double */
static void ref_rmsnorm(double *out, double *rstd, const double *x, const double *w, size_t N, size_t C, double eps) {
    for (size_t n = 0; n < N; n++) {
        double ss = 0;
        for (size_t c = 0; c < C; c++) ss += x[n * C + c] * x[n * C + c];
        const double rs = 1.0 / sqrt(ss / (double)C + eps);
        for (size_t c = 0; c < C; c++) out[n * C + c] = x[n * C + c] * rs * w[c];
        if (rstd) rstd[n] = rs;
    }
}

typedef struct {
    double *x, *w, *R, *tmp;
    size_t N, C;
    double eps;
} rms_ctx;

static double rms_loss(void *p) {
    rms_ctx *c = p;
    ref_rmsnorm(c->tmp, NULL, c->x, c->w, c->N, c->C, c->eps);
    return dot(c->tmp, c->R, c->N * c->C);
}

static void check_rmsnorm(size_t N, size_t C, float eps, double scale, int fd) {
    const tri_ops *o = cpu();
    rng r = {.s = 11 + N * 31 + C};
    float *x = frand(&r, N * C, -2 * scale, 3 * scale), *w = frand(&r, C, 0.5, 1.5), *R = frand(&r, N * C, -1, 1);
    float *out = fvec(N * C), *rstd = fvec(N);
    ffill(out, N * C, NAN), ffill(rstd, N, NAN);
    o->rmsnorm_fwd(TC, out, rstd, x, w, N, C, eps);
    rms_ctx c = {to_double(x, N * C), to_double(w, C), to_double(R, N * C), dvec(N * C), N, C, (double)eps};
    double *want_rstd = dvec(N);
    ref_rmsnorm(c.tmp, want_rstd, c.x, c.w, N, C, c.eps);
    EXPECT_CLOSE("rmsnorm out", out, c.tmp, N * C, 1e-6, 2e-6);
    EXPECT_CLOSE("rmsnorm rstd", rstd, want_rstd, N, 0, 2e-6);

    float *dinp = frand(&r, N * C, -1, 1), *dw = frand(&r, C, -1, 1);
    float *dinp0 = fcopy(dinp, N * C), *dw0 = fcopy(dw, C);
    o->rmsnorm_bwd(TC, dinp, dw, R, x, w, rstd, N, C);
    if (fd) {
        double *g = dvec(N * C);
        fd_grad(g, c.x, N * C, rms_loss, &c, 1e-5 * scale);
        for (size_t i = 0; i < N * C; i++) g[i] += dinp0[i];
        EXPECT_CLOSE("rmsnorm dinp", dinp, g, N * C, 2e-5 / scale, 1e-4);
        fd_grad(g, c.w, C, rms_loss, &c, 1e-5);
        for (size_t i = 0; i < C; i++) g[i] += dw0[i];
        EXPECT_CLOSE("rmsnorm dw", dw, g, C, 2e-5 * (double)N, 1e-4);
        free(g);
    }

    /* one thread: the same bits */
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    float *out1 = fvec(N * C), *rstd1 = fvec(N), *dinp1 = fcopy(dinp0, N * C), *dw1 = fcopy(dw0, C);
    o->rmsnorm_fwd(TC, out1, rstd1, x, w, N, C, eps);
    o->rmsnorm_bwd(TC, dinp1, dw1, R, x, w, rstd1, N, C);
    omp_set_num_threads(saved);
    cr_expect(same_bits(out, out1, N * C) && same_bits(rstd, rstd1, N), "rmsnorm_fwd depends on threads");
    cr_expect(same_bits(dinp, dinp1, N * C) && same_bits(dw, dw1, C), "rmsnorm_bwd depends on threads");
    free(x), free(w), free(R), free(out), free(rstd), free(c.x), free(c.w), free(c.R), free(c.tmp), free(want_rstd);
    free(dinp), free(dw), free(dinp0), free(dw0), free(out1), free(rstd1), free(dinp1), free(dw1);
}

Test(ops_rmsnorm, forward_and_accumulating_backward_against_finite_differences) {
    check_rmsnorm(5, 23, 1e-5f, 1.0, 1);
    check_rmsnorm(1, 1, 1e-6f, 1.0, 1);
    check_rmsnorm(3, 17, 1e-5f, 1e-3, 1); /* small inputs: eps matters */
}

Test(ops_rmsnorm, threaded_shape, .timeout = 60) { check_rmsnorm(517, 200, 1e-5f, 1.0, 0); }

/* ------------------------------------------------------------------ RoPE */

/* theta^(-2i/HS), i < HS/2, in fp32 as the model would compute it */
static float *inv_freqs(int HS, double theta) {
    float *f = fvec((size_t)HS / 2);
    for (int i = 0; i < HS / 2; i++) f[i] = (float)pow(theta, -2.0 * i / HS);
    return f;
}

/* The rotation of qkv's q and k heads in double. The angle is the fp32
 * product (float)pos * inv_freq[i] (as Hugging Face forms it: the contract's
 * angle); cos and sin of it in double. dir = -1: the inverse rotation. */
static void ref_rope(double *y, const double *x, const float *inv_freq, size_t B, size_t T, int NH, int NKV, int HS,
                     size_t pos0, int dir) {
    const size_t W = (size_t)(NH + 2 * NKV) * HS, half = (size_t)HS / 2;
    memcpy(y, x, B * T * W * sizeof(double));
    for (size_t b = 0; b < B; b++)
        for (size_t t = 0; t < T; t++)
            for (int h = 0; h < NH + NKV; h++)
                for (size_t i = 0; i < half; i++) {
                    const double a = (double)((float)(pos0 + t) * inv_freq[i]);
                    const double cs = cos(a), sn = dir * sin(a);
                    const size_t e = (b * T + t) * W + (size_t)h * HS + i;
                    y[e] = x[e] * cs - x[e + half] * sn;
                    y[e + half] = x[e + half] * cs + x[e] * sn;
                }
}

typedef struct {
    double *x, *R, *tmp;
    const float *inv_freq;
    size_t B, T, pos0;
    int NH, NKV, HS;
} rope_ctx;

static double rope_loss(void *p) {
    rope_ctx *c = p;
    ref_rope(c->tmp, c->x, c->inv_freq, c->B, c->T, c->NH, c->NKV, c->HS, c->pos0, 1);
    return dot(c->tmp, c->R, c->B * c->T * (size_t)(c->NH + 2 * c->NKV) * c->HS);
}

static void check_rope(size_t B, size_t T, int NH, int NKV, int HS, size_t pos0, int fd) {
    const tri_ops *o = cpu();
    const size_t n = B * T * (size_t)(NH + 2 * NKV) * HS, W = (size_t)(NH + 2 * NKV) * HS;
    rng r = {.s = 5 + T + pos0};
    float *x = frand(&r, n, -2, 2), *R = frand(&r, n, -1, 1), *inv = inv_freqs(HS, 10000.0);
    float *y = fcopy(x, n);
    o->rope_fwd(TC, y, inv, B, T, NH, NKV, HS, pos0);
    rope_ctx c = {to_double(x, n), to_double(R, n), dvec(n), inv, B, T, pos0, NH, NKV, HS};
    ref_rope(c.tmp, c.x, inv, B, T, NH, NKV, HS, pos0, 1);
    EXPECT_CLOSE("rope_fwd", y, c.tmp, n, 1e-6, 1e-6);
    size_t vbad = 0; /* the v heads: untouched, bit for bit */
    for (size_t bt = 0; bt < B * T; bt++)
        vbad +=
            !same_bits(y + bt * W + (size_t)(NH + NKV) * HS, x + bt * W + (size_t)(NH + NKV) * HS, (size_t)NKV * HS);
    cr_expect(vbad == 0, "rope_fwd changed %zu rows of v heads", vbad);

    /* backward: the gradient of sum(rope(x) * R), in place on a copy of R */
    float *d = fcopy(R, n);
    o->rope_bwd(TC, d, inv, B, T, NH, NKV, HS, pos0);
    if (fd) {
        double *g = dvec(n);
        fd_grad(g, c.x, n, rope_loss, &c, 1e-4);
        EXPECT_CLOSE("rope_bwd", d, g, n, 1e-6, 1e-5);
        free(g);
    } else { /* large shapes: the inverse rotation, in double, of R */
        ref_rope(c.tmp, c.R, inv, B, T, NH, NKV, HS, pos0, -1);
        EXPECT_CLOSE("rope_bwd", d, c.tmp, n, 1e-6, 1e-6);
    }
    /* fwd then bwd comes back to x (orthogonal rotation) */
    float *back = fcopy(y, n);
    o->rope_bwd(TC, back, inv, B, T, NH, NKV, HS, pos0);
    double *xd = to_double(x, n);
    EXPECT_CLOSE("rope_bwd(rope_fwd(x))", back, xd, n, 2e-6, 2e-6);

    /* one thread: the same bits */
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    float *y1 = fcopy(x, n), *d1 = fcopy(R, n);
    o->rope_fwd(TC, y1, inv, B, T, NH, NKV, HS, pos0);
    o->rope_bwd(TC, d1, inv, B, T, NH, NKV, HS, pos0);
    omp_set_num_threads(saved);
    cr_expect(same_bits(y, y1, n) && same_bits(d, d1, n), "rope depends on threads");
    free(x), free(R), free(inv), free(y), free(c.x), free(c.R), free(c.tmp), free(d), free(back), free(xd), free(y1);
    free(d1);
}

Test(ops_rope, forward_and_backward_with_gqa_layouts_and_offsets) {
    check_rope(2, 5, 4, 4, 6, 0, 1);    /* MHA, odd T, from position 0 */
    check_rope(2, 3, 4, 2, 8, 17, 1);   /* GQA, pos0 > 0 */
    check_rope(1, 1, 3, 1, 2, 1000, 1); /* MQA, T = 1 (one decoding step), HS = 2 */
}

/* Long positions (the fp32 angle reaches ~8000 rad: libm's range
 * reduction), threaded rows, head size of the Llama models. */
Test(ops_rope, long_positions_and_threads, .timeout = 60) {
    check_rope(2, 67, 8, 2, 64, 8130, 0);
    check_rope(3, 129, 4, 1, 128, 0, 0);
}

Test(ops_rope, pos0_equals_a_longer_sequence_tail) {
    /* rows [k, T) of a sequence rotated from 0 are the rows of the tail
     * rotated from pos0 = k: the same bits */
    const tri_ops *o = cpu();
    const size_t T = 9, k = 4;
    const int NH = 4, NKV = 2, HS = 16;
    const size_t W = (size_t)(NH + 2 * NKV) * HS;
    rng r = {.s = 77};
    float *x = frand(&r, T * W, -1, 1), *inv = inv_freqs(HS, 500000.0);
    float *tail = fcopy(x + k * W, (T - k) * W);
    o->rope_fwd(TC, x, inv, 1, T, NH, NKV, HS, 0);
    o->rope_fwd(TC, tail, inv, 1, T - k, NH, NKV, HS, k);
    cr_expect(same_bits(x + k * W, tail, (T - k) * W), "pos0 does not shift positions");
    free(x), free(inv), free(tail);
}

/* ------------------------------------------------------------------ SwiGLU */

static double ref_silu(double g) { return g / (1.0 + exp(-g)); }

typedef struct {
    double *x, *R;
    size_t N, F;
} swi_ctx;

static double swi_loss(void *p) {
    swi_ctx *c = p;
    double s = 0;
    for (size_t n = 0; n < c->N; n++)
        for (size_t i = 0; i < c->F; i++)
            s += ref_silu(c->x[n * 2 * c->F + i]) * c->x[n * 2 * c->F + c->F + i] * c->R[n * c->F + i];
    return s;
}

static void check_swiglu(size_t N, size_t F, double lo, double hi, int fd) {
    const tri_ops *o = cpu();
    rng r = {.s = 3 + N * F};
    float *x = frand(&r, N * 2 * F, lo, hi), *R = frand(&r, N * F, -1, 1);
    float *out = fvec(N * F), *dx = fvec(N * 2 * F);
    ffill(out, N * F, NAN), ffill(dx, N * 2 * F, NAN);
    o->swiglu_fwd(TC, out, x, N, F);
    swi_ctx c = {to_double(x, N * 2 * F), to_double(R, N * F), N, F};
    double *want = dvec(N * F);
    for (size_t n = 0; n < N; n++)
        for (size_t i = 0; i < F; i++) want[n * F + i] = ref_silu(c.x[n * 2 * F + i]) * c.x[n * 2 * F + F + i];
    EXPECT_CLOSE("swiglu out", out, want, N * F, 1e-30, 3e-6);
    o->swiglu_bwd(TC, dx, x, R, N, F);
    if (fd) {
        double *g = dvec(N * 2 * F);
        fd_grad(g, c.x, N * 2 * F, swi_loss, &c, 1e-5);
        EXPECT_CLOSE("swiglu dinp", dx, g, N * 2 * F, 2e-6 * hi, 1e-5);
        free(g);
    } else {
        /* the closed form, in double; silu'(g) = s (1 + g (1 - s)) crosses 0
         * near g = -1.28, where fp32 cancels: each element may be off by a
         * few ulp of the terms, |d u| s (1 + |g| (1 - s)), not of the sum;
         * results below 1e-35 (exp of large negative gates) are denormal */
        size_t bad = 0;
        for (size_t n = 0; n < N; n++)
            for (size_t i = 0; i < F; i++) {
                const double gt = c.x[n * 2 * F + i], u = c.x[n * 2 * F + F + i], d = c.R[n * F + i];
                const double s = 1.0 / (1.0 + exp(-gt));
                const double wg = d * u * s * (1.0 + gt * (1.0 - s)), wu = d * gt * s;
                const double terms = fabs(d * u) * s * (1.0 + fabs(gt) * (1.0 - s));
                const float got_g = dx[n * 2 * F + i], got_u = dx[n * 2 * F + F + i];
                if (!close_enough(got_g, wg, 1e-6 * terms + 1e-35, 1e-5) || !close_enough(got_u, wu, 1e-35, 1e-5)) {
                    if (bad < 5)
                        cr_log_error("swiglu dinp row %zu col %zu: got %.9g %.9g, want %.9g %.9g", n, i, (double)got_g,
                                     (double)got_u, wg, wu);
                    bad++;
                }
            }
        cr_expect(bad == 0, "swiglu dinp differs from the closed form");
    }
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    float *out1 = fvec(N * F), *dx1 = fvec(N * 2 * F);
    o->swiglu_fwd(TC, out1, x, N, F);
    o->swiglu_bwd(TC, dx1, x, R, N, F);
    omp_set_num_threads(saved);
    cr_expect(same_bits(out, out1, N * F) && same_bits(dx, dx1, N * 2 * F), "swiglu depends on threads");
    free(x), free(R), free(out), free(dx), free(c.x), free(c.R), free(want), free(out1), free(dx1);
}

Test(ops_swiglu, forward_and_backward_against_finite_differences) {
    check_swiglu(3, 37, -4, 4, 1); /* vector bodies and a scalar tail */
    check_swiglu(1, 1, -2, 2, 1);
}

Test(ops_swiglu, large_gates_saturate_without_overflow_and_threads, .timeout = 60) {
    check_swiglu(7, 19, -120, 120, 0); /* exp(-g) overflows fp32 for g < -88 */
    check_swiglu(301, 160, -6, 6, 0);  /* threaded */
}

Test(ops_swiglu, vector_bodies_and_scalar_tails_give_the_same_bits) {
    /* a row of F elements (vector bodies, then a tail) against rows of one
     * element (always the scalar tail), over gates of both signs, near 0
     * and large */
    const tri_ops *o = cpu();
    const size_t F = 203;
    rng r = {.s = 99};
    float *x = frand(&r, 2 * F, -40, 40), *d = frand(&r, F, -1, 1);
    for (size_t i = 0; i < F; i += 5) x[i] *= 1e-3f;
    float *y = fvec(F), *dx = fvec(2 * F);
    o->swiglu_fwd(TC, y, x, 1, F);
    o->swiglu_bwd(TC, dx, x, d, 1, F);
    size_t bad = 0;
    for (size_t i = 0; i < F; i++) {
        const float in[2] = {x[i], x[F + i]};
        float y1, dx1[2];
        o->swiglu_fwd(TC, &y1, in, 1, 1);
        o->swiglu_bwd(TC, dx1, in, &d[i], 1, 1);
        if (!same_bits(&y1, &y[i], 1) || !same_bits(&dx1[0], &dx[i], 1) || !same_bits(&dx1[1], &dx[F + i], 1)) {
            if (bad < 5) cr_log_error("gate %.9g: the row and the single element differ", (double)x[i]);
            bad++;
        }
    }
    cr_expect(bad == 0, "%zu elements depend on their position in the row", bad);
    free(x), free(d), free(y), free(dx);
}
