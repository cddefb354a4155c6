/* The CPU ops with 16-bit compute dtypes (tri_ctx_set_precision, bf16 and
 * fp16) against the fp32 ops.
 *
 * The contract under test (kernels/ops.h, docs/precision.md): a 16-bit op
 * computes in fp32 on its widened inputs and rounds each `void *` output
 * once, to nearest even, as it stores it; an accumulating `void *` output is
 * widened, accumulated in fp32 and rounded once; `float *` outputs are fp32.
 * So for every op the reference is the fp32 op (tested against independent
 * references in tests/kernels/test_ops.c) run here on the same ROUNDED inputs, with
 * its `void *` outputs then rounded by kernels/half.h (tested bit for bit in
 * tests/kernels/test_half.c): the 16-bit outputs must equal it bit for bit, and the
 * fp32 outputs too. Overwritten 16-bit outputs are poisoned with NaN first.
 * Shapes are awkward (no multiple of a vector width) and some large enough
 * for the threaded paths; both contexts run in this process with the same
 * thread count, so OpenBLAS takes the same path for the same GEMM.
 *
 * Also: the cast op, tri_ctx_set_precision's checks, the guarded backend in
 * bf16, and the memory accounting: saved activations of a 16-bit context
 * take 2 bytes per element (closed form), LayerNorm statistics stay fp32. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/half.h"
#include "kernels/ctx.h"
#include "model/gpt.h"
#include "model/runtime.h"
#include "parallel/comm.h"

/* ------------------------------------------------------------------ helpers */

static uint64_t g_rng = 0x1234567ull;

static double unit(void) /* splitmix64 -> [0, 1) */
{
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

static void *xcalloc(size_t n, size_t sz) {
    void *p = calloc(n ? n : 1, sz);
    cr_assert(p != NULL, "out of memory");
    return p;
}

static uint16_t to16(tri_dtype t, float f) { return t == TRI_BF16 ? tri_f32_to_bf16(f) : tri_f32_to_f16(f); }
static float from16(tri_dtype t, uint16_t h) { return t == TRI_BF16 ? tri_bf16_to_f32(h) : tri_f16_to_f32(h); }

/* A tensor in both forms: h (16-bit storage) and f (its exact fp32 value). */
typedef struct {
    uint16_t *h;
    float *f;
    size_t n;
} t16;

static t16 t16_rand(tri_dtype t, size_t n, double lo, double hi) {
    t16 x = {xcalloc(n, 2), xcalloc(n, 4), n};
    for (size_t i = 0; i < n; i++) {
        x.h[i] = to16(t, (float)(lo + (hi - lo) * unit()));
        x.f[i] = from16(t, x.h[i]);
    }
    return x;
}

/* A 16-bit output poisoned with NaN (and its fp32 reference twin, also NaN). */
static t16 t16_nan(tri_dtype t, size_t n) {
    t16 x = {xcalloc(n, 2), xcalloc(n, 4), n};
    for (size_t i = 0; i < n; i++) {
        x.h[i] = t == TRI_BF16 ? 0x7fc1 : 0x7e01;
        x.f[i] = NAN;
    }
    return x;
}

static void t16_free(t16 *x) {
    free(x->h);
    free(x->f);
}

static float *frand(size_t n, double lo, double hi) {
    float *p = xcalloc(n, 4);
    for (size_t i = 0; i < n; i++) p[i] = (float)(lo + (hi - lo) * unit());
    return p;
}

static float *fdup(const float *x, size_t n) {
    float *p = xcalloc(n, 4);
    memcpy(p, x, n * 4);
    return p;
}

/* The 16-bit op's output h against the fp32 op's output f rounded once: bit
 * for bit, no NaN where the reference has none. */
static void expect_rounded(const char *what, tri_dtype t, const uint16_t *h, const float *f, size_t n) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        cr_assert(!isnan(f[i]), "%s[%zu]: the fp32 reference is NaN", what, i);
        const uint16_t want = to16(t, f[i]);
        if (h[i] != want) {
            if (bad < 5) cr_log_error("%s[%zu]: %04x, want %04x (fp32 %.9g)", what, i, h[i], want, (double)f[i]);
            bad++;
        }
    }
    cr_expect(bad == 0, "%s (%s): %zu of %zu values differ from the rounded fp32 op", what, tri_precision_name(t), bad,
              n);
}

/* fp32 outputs (statistics, weight gradients): bit for bit. */
static void expect_same(const char *what, const float *got, const float *want, size_t n) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        cr_assert(!isnan(want[i]), "%s[%zu]: the fp32 reference is NaN", what, i);
        if (memcmp(&got[i], &want[i], 4) != 0) {
            if (bad < 5) cr_log_error("%s[%zu]: %.9g, want %.9g", what, i, (double)got[i], (double)want[i]);
            bad++;
        }
    }
    cr_expect(bad == 0, "%s: %zu of %zu fp32 values differ", what, bad, n);
}

/* Two contexts of the plain CPU backend: c16 in t, c32 in fp32. */
typedef struct {
    tri_ctx c16, c32;
    const tri_ops *o;
} pair;

static void pair_init(pair *p, tri_dtype t) {
    cr_assert_eq(tri_ctx_init(&p->c16, "cpu", 0), 0);
    cr_assert_eq(tri_ctx_init(&p->c32, "cpu", 0), 0);
    cr_assert_eq(tri_ctx_set_precision(&p->c16, t), 0);
    p->o = p->c16.ops;
}

static void pair_free(pair *p) {
    tri_ctx_free(&p->c16);
    tri_ctx_free(&p->c32);
}

static const tri_dtype TYPES[2] = {TRI_BF16, TRI_F16};

/* ------------------------------------------------------------------ context */

Test(precision_ctx, set_precision_sets_act_and_param_keeps_grads_and_master_fp32) {
    for (int k = 0; k < 2; k++) {
        tri_ctx c;
        cr_assert_eq(tri_ctx_init(&c, "cpu", 0), 0);
        cr_expect(c.act_dtype == TRI_F32 && c.param_dtype == TRI_F32);
        cr_assert_eq(tri_ctx_set_precision(&c, TYPES[k]), 0);
        cr_expect(c.act_dtype == TYPES[k] && c.param_dtype == TYPES[k]);
        cr_expect(c.grad_dtype == TRI_F32 && c.master_dtype == TRI_F32);
        cr_assert_eq(tri_ctx_set_precision(&c, TRI_F32), 0);
        cr_expect(c.act_dtype == TRI_F32 && c.param_dtype == TRI_F32);
        tri_ctx_free(&c);
    }
    cr_expect(tri_precision_parse("bf16") == TRI_BF16 && tri_precision_parse("fp16") == TRI_F16 &&
              tri_precision_parse("fp32") == TRI_F32 && tri_precision_parse("f16") == -1 &&
              tri_precision_parse(NULL) == -1);
    cr_expect_str_eq(tri_precision_name(TRI_BF16), "bf16");
    cr_expect_str_eq(tri_precision_name(TRI_F16), "fp16");
}

Test(precision_ctx, a_non_compute_dtype_is_refused_with_a_message, .init = cr_redirect_stderr) {
    tri_ctx c;
    cr_assert_eq(tri_ctx_init(&c, "cpu", 0), 0);
    cr_expect_eq(tri_ctx_set_precision(&c, TRI_I32), -1);
    cr_expect(c.act_dtype == TRI_F32);
    tri_ctx_free(&c);
    fflush(stderr);
    cr_expect_stderr_eq_str("trident: i32 is not a compute dtype (expected fp32, bf16 or fp16)\n");
}

/* ------------------------------------------------------------------ cast */

Test(precision_cast, every_direction_matches_half_h) {
    const size_t n = 200003; /* past the threaded threshold, odd */
    tri_ctx c;
    cr_assert_eq(tri_ctx_init(&c, "cpu", 0), 0);
    float *x = frand(n, -70000.0, 70000.0); /* overflows fp16 at both ends */
    for (size_t i = 0; i < n; i += 7) x[i] *= 1e-6f;
    x[1] = NAN;
    x[2] = -INFINITY;
    x[3] = -0.0f;
    uint16_t *a = xcalloc(n, 2), *b = xcalloc(n, 2);
    float *back = xcalloc(n, 4);
    for (int k = 0; k < 2; k++) {
        const tri_dtype t = TYPES[k], u = TYPES[1 - k];
        c.ops->cast(&c, a, t, x, TRI_F32, n);
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) bad += a[i] != to16(t, x[i]);
        cr_expect(bad == 0, "fp32 -> %s: %zu values differ", tri_precision_name(t), bad);
        c.ops->cast(&c, back, TRI_F32, a, t, n);
        bad = 0;
        for (size_t i = 0; i < n; i++) {
            const float w = from16(t, a[i]);
            bad += memcmp(&back[i], &w, 4) != 0;
        }
        cr_expect(bad == 0, "%s -> fp32: %zu values differ", tri_precision_name(t), bad);
        c.ops->cast(&c, b, u, a, t, n); /* one rounding: the widening is exact */
        bad = 0;
        for (size_t i = 0; i < n; i++) bad += b[i] != to16(u, from16(t, a[i]));
        cr_expect(bad == 0, "%s -> %s: %zu values differ", tri_precision_name(t), tri_precision_name(u), bad);
        c.ops->cast(&c, b, t, a, t, n);
        cr_expect(memcmp(a, b, n * 2) == 0, "a same-type cast copies");
    }
    free(x);
    free(a);
    free(b);
    free(back);
    tri_ctx_free(&c);
}

/* ------------------------------------------------------------------ linear */

static void check_matmul(tri_dtype t, size_t N, size_t C, size_t OC, int with_bias) {
    pair p;
    pair_init(&p, t);
    t16 x = t16_rand(t, N * C, -1, 1), w = t16_rand(t, OC * C, -0.5, 0.5), b = t16_rand(t, OC, -1, 1);
    t16 out = t16_nan(t, N * OC), dout = t16_rand(t, N * OC, -1, 1), dinp = t16_nan(t, N * C);
    p.o->matmul_fwd(&p.c16, out.h, x.h, w.h, with_bias ? b.h : NULL, N, C, OC);
    p.o->matmul_fwd(&p.c32, out.f, x.f, w.f, with_bias ? b.f : NULL, N, C, OC);
    expect_rounded("matmul_fwd out", t, out.h, out.f, N * OC);
    /* weight gradients accumulate in fp32 onto what is there */
    float *dw = frand(OC * C, -1, 1), *db = frand(OC, -1, 1);
    float *dw32 = fdup(dw, OC * C), *db32 = fdup(db, OC);
    p.o->matmul_bwd(&p.c16, dinp.h, dw, db, dout.h, x.h, w.h, N, C, OC);
    p.o->matmul_bwd(&p.c32, dinp.f, dw32, db32, dout.f, x.f, w.f, N, C, OC);
    expect_rounded("matmul_bwd dinp", t, dinp.h, dinp.f, N * C);
    expect_same("matmul_bwd dweight", dw, dw32, OC * C);
    expect_same("matmul_bwd dbias", db, db32, OC);
    /* the parts alone (the zero-bubble split): dinp only, dweight only */
    t16 dinp2 = t16_nan(t, N * C);
    p.o->matmul_bwd(&p.c16, dinp2.h, NULL, NULL, dout.h, x.h, w.h, N, C, OC);
    cr_expect(memcmp(dinp2.h, dinp.h, N * C * 2) == 0, "dinp alone equals dinp of the full call");
    p.o->matmul_bwd(&p.c16, NULL, dw, NULL, dout.h, x.h, w.h, N, C, OC);
    p.o->matmul_bwd(&p.c32, NULL, dw32, NULL, dout.f, x.f, w.f, N, C, OC);
    expect_same("matmul_bwd dweight alone", dw, dw32, OC * C);
    t16_free(&x), t16_free(&w), t16_free(&b), t16_free(&out), t16_free(&dout), t16_free(&dinp), t16_free(&dinp2);
    free(dw), free(db), free(dw32), free(db32);
    pair_free(&p);
}

Test(precision_ops, matmul_small_awkward_shapes) {
    for (int k = 0; k < 2; k++) {
        check_matmul(TYPES[k], 13, 11, 7, 1);
        check_matmul(TYPES[k], 9, 17, 5, 0);
        check_matmul(TYPES[k], 1, 1, 1, 1);
    }
}

Test(precision_ops, matmul_threaded_shape, .timeout = 120) {
    for (int k = 0; k < 2; k++) check_matmul(TYPES[k], 67, 129, 193, 1);
}

/* ------------------------------------------------------------------ layernorm */

static void check_layernorm(tri_dtype t, size_t N, size_t C) {
    pair p;
    pair_init(&p, t);
    t16 x = t16_rand(t, N * C, -2, 3), w = t16_rand(t, C, 0.5, 1.5), b = t16_rand(t, C, -0.5, 0.5);
    t16 out = t16_nan(t, N * C), dout = t16_rand(t, N * C, -1, 1);
    float *mean = frand(N, 1e30, 1e30), *rstd = frand(N, 1e30, 1e30), *mean32 = xcalloc(N, 4), *rstd32 = xcalloc(N, 4);
    p.o->layernorm_fwd(&p.c16, out.h, mean, rstd, x.h, w.h, b.h, N, C);
    p.o->layernorm_fwd(&p.c32, out.f, mean32, rstd32, x.f, w.f, b.f, N, C);
    expect_rounded("layernorm_fwd out", t, out.h, out.f, N * C);
    expect_same("layernorm_fwd mean", mean, mean32, N);
    expect_same("layernorm_fwd rstd", rstd, rstd32, N);
    /* backward: all three accumulate; dinp is 16-bit, so it is widened,
     * accumulated in fp32 and rounded once */
    t16 dinp = t16_rand(t, N * C, -1, 1);
    float *dw = frand(C, -1, 1), *db = frand(C, -1, 1), *dw32 = fdup(dw, C), *db32 = fdup(db, C);
    p.o->layernorm_bwd(&p.c16, dinp.h, dw, db, dout.h, x.h, w.h, mean, rstd, N, C);
    p.o->layernorm_bwd(&p.c32, dinp.f, dw32, db32, dout.f, x.f, w.f, mean32, rstd32, N, C);
    expect_rounded("layernorm_bwd dinp", t, dinp.h, dinp.f, N * C);
    expect_same("layernorm_bwd dw", dw, dw32, C);
    expect_same("layernorm_bwd db", db, db32, C);
    t16_free(&x), t16_free(&w), t16_free(&b), t16_free(&out), t16_free(&dout), t16_free(&dinp);
    free(mean), free(rstd), free(mean32), free(rstd32), free(dw), free(db), free(dw32), free(db32);
    pair_free(&p);
}

Test(precision_ops, layernorm_forward_and_accumulating_backward) {
    for (int k = 0; k < 2; k++) {
        check_layernorm(TYPES[k], 7, 19);
        check_layernorm(TYPES[k], 130, 257); /* threaded */
    }
}

/* ------------------------------------------------------------------ attention */

static void check_attention(tri_dtype t, size_t B, size_t T, int NH, int NKV, int HS) {
    pair p;
    pair_init(&p, t);
    const size_t n = B * T * (size_t)NH * (size_t)HS, nq = B * T * (size_t)(NH + 2 * NKV) * (size_t)HS;
    const size_t ns = p.o->attention_saved_floats(B, T, NH, NKV, HS);
    const size_t nsc = p.o->attention_scratch_floats(B, T, NH, NKV, HS);
    t16 qkv = t16_rand(t, nq, -2, 2), out = t16_nan(t, n), dout = t16_rand(t, n, -1, 1), dqkv = t16_nan(t, nq);
    float *st = xcalloc(ns, 4), *st32 = xcalloc(ns, 4), *sc = xcalloc(nsc, 4);
    for (size_t i = 0; i < ns; i++) st[i] = st32[i] = NAN;
    p.o->attention_fwd(&p.c16, out.h, st, qkv.h, B, T, NH, NKV, HS);
    p.o->attention_fwd(&p.c32, out.f, st32, qkv.f, B, T, NH, NKV, HS);
    expect_rounded("attention_fwd out", t, out.h, out.f, n);
    /* the saved state (one log-sum-exp per row, fp32) is the fp32 op's */
    size_t bad = 0;
    for (size_t i = 0; i < ns; i++) bad += memcmp(&st[i], &st32[i], 4) != 0;
    cr_expect(bad == 0, "attention state: %zu of %zu values differ", bad, ns);
    /* the backward reads the forward's output: the 16-bit op its rounded
     * output as stored, so the fp32 reference gets that output widened */
    float *out_r = xcalloc(n, 4);
    for (size_t i = 0; i < n; i++) out_r[i] = from16(t, out.h[i]);
    p.o->attention_bwd(&p.c16, dqkv.h, sc, dout.h, qkv.h, out.h, st, B, T, NH, NKV, HS);
    p.o->attention_bwd(&p.c32, dqkv.f, sc, dout.f, qkv.f, out_r, st32, B, T, NH, NKV, HS);
    expect_rounded("attention_bwd dqkv", t, dqkv.h, dqkv.f, nq);
    t16_free(&qkv), t16_free(&out), t16_free(&dout), t16_free(&dqkv);
    free(st), free(st32), free(sc), free(out_r);
    pair_free(&p);
}

Test(precision_ops, attention_forward_and_backward) {
    for (int k = 0; k < 2; k++) {
        check_attention(TYPES[k], 2, 7, 3, 3, 5);
        check_attention(TYPES[k], 1, 1, 1, 1, 1);
        check_attention(TYPES[k], 2, 67, 2, 2, 19);
    }
}

Test(precision_ops, grouped_query_attention_forward_and_backward) {
    for (int k = 0; k < 2; k++) {
        check_attention(TYPES[k], 2, 7, 4, 2, 6);
        check_attention(TYPES[k], 1, 1, 3, 1, 2);
        check_attention(TYPES[k], 2, 67, 6, 1, 16);
    }
}

/* ------------------------------------------------------------------ Llama ops */

static void check_rmsnorm(tri_dtype t, size_t N, size_t C) {
    pair p;
    pair_init(&p, t);
    t16 x = t16_rand(t, N * C, -2, 3), w = t16_rand(t, C, 0.5, 1.5);
    t16 out = t16_nan(t, N * C), dout = t16_rand(t, N * C, -1, 1);
    float *rstd = frand(N, 1e30, 1e30), *rstd32 = xcalloc(N, 4);
    p.o->rmsnorm_fwd(&p.c16, out.h, rstd, x.h, w.h, N, C, 1e-5f);
    p.o->rmsnorm_fwd(&p.c32, out.f, rstd32, x.f, w.f, N, C, 1e-5f);
    expect_rounded("rmsnorm_fwd out", t, out.h, out.f, N * C);
    expect_same("rmsnorm_fwd rstd", rstd, rstd32, N);
    /* both accumulate; dinp is 16-bit: widened, accumulated, rounded once */
    t16 dinp = t16_rand(t, N * C, -1, 1);
    float *dw = frand(C, -1, 1), *dw32 = fdup(dw, C);
    p.o->rmsnorm_bwd(&p.c16, dinp.h, dw, dout.h, x.h, w.h, rstd, N, C);
    p.o->rmsnorm_bwd(&p.c32, dinp.f, dw32, dout.f, x.f, w.f, rstd32, N, C);
    expect_rounded("rmsnorm_bwd dinp", t, dinp.h, dinp.f, N * C);
    expect_same("rmsnorm_bwd dw", dw, dw32, C);
    t16_free(&x), t16_free(&w), t16_free(&out), t16_free(&dout), t16_free(&dinp);
    free(rstd), free(rstd32), free(dw), free(dw32);
    pair_free(&p);
}

Test(precision_ops, rmsnorm_forward_and_accumulating_backward) {
    for (int k = 0; k < 2; k++) {
        check_rmsnorm(TYPES[k], 7, 19);
        check_rmsnorm(TYPES[k], 130, 257); /* threaded */
    }
}

/* In place: the 16-bit tensor is rotated in fp32 and rounded once; the v
 * heads round to themselves. */
static void check_rope(tri_dtype t, size_t B, size_t T, int NH, int NKV, int HS, size_t pos0) {
    pair p;
    pair_init(&p, t);
    const size_t n = B * T * (size_t)(NH + 2 * NKV) * (size_t)HS;
    float *inv = xcalloc((size_t)HS / 2, 4);
    for (int i = 0; i < HS / 2; i++) inv[i] = powf(10000.0f, -2.0f * (float)i / (float)HS);
    t16 x = t16_rand(t, n, -2, 2);
    uint16_t *v0 = xcalloc(n, 2);
    memcpy(v0, x.h, n * 2);
    p.o->rope_fwd(&p.c16, x.h, inv, B, T, NH, NKV, HS, pos0);
    p.o->rope_fwd(&p.c32, x.f, inv, B, T, NH, NKV, HS, pos0);
    expect_rounded("rope_fwd", t, x.h, x.f, n);
    const size_t W = (size_t)(NH + 2 * NKV) * (size_t)HS, v = (size_t)(NH + NKV) * (size_t)HS;
    size_t bad = 0;
    for (size_t bt = 0; bt < B * T; bt++) bad += memcmp(x.h + bt * W + v, v0 + bt * W + v, (size_t)NKV * HS * 2) != 0;
    cr_expect(bad == 0, "rope_fwd changed %zu rows of 16-bit v heads", bad);
    t16 d = t16_rand(t, n, -1, 1);
    p.o->rope_bwd(&p.c16, d.h, inv, B, T, NH, NKV, HS, pos0);
    p.o->rope_bwd(&p.c32, d.f, inv, B, T, NH, NKV, HS, pos0);
    expect_rounded("rope_bwd", t, d.h, d.f, n);
    t16_free(&x), t16_free(&d);
    free(inv), free(v0);
    pair_free(&p);
}

Test(precision_ops, rope_forward_and_backward_in_place) {
    for (int k = 0; k < 2; k++) {
        check_rope(TYPES[k], 2, 5, 4, 2, 6, 3);
        check_rope(TYPES[k], 2, 67, 8, 2, 64, 100); /* threaded */
    }
}

static void check_swiglu(tri_dtype t, size_t N, size_t F) {
    pair p;
    pair_init(&p, t);
    t16 x = t16_rand(t, 2 * N * F, -5, 5), out = t16_nan(t, N * F), dout = t16_rand(t, N * F, -1, 1);
    t16 dx = t16_nan(t, 2 * N * F);
    p.o->swiglu_fwd(&p.c16, out.h, x.h, N, F);
    p.o->swiglu_fwd(&p.c32, out.f, x.f, N, F);
    expect_rounded("swiglu_fwd out", t, out.h, out.f, N * F);
    p.o->swiglu_bwd(&p.c16, dx.h, x.h, dout.h, N, F);
    p.o->swiglu_bwd(&p.c32, dx.f, x.f, dout.f, N, F);
    expect_rounded("swiglu_bwd dinp", t, dx.h, dx.f, 2 * N * F);
    t16_free(&x), t16_free(&out), t16_free(&dout), t16_free(&dx);
    pair_free(&p);
}

Test(precision_ops, swiglu_forward_and_backward) {
    for (int k = 0; k < 2; k++) {
        check_swiglu(TYPES[k], 7, 19);
        check_swiglu(TYPES[k], 130, 257); /* threaded */
    }
}

/* ------------------------------------------------------------------ elementwise */

Test(precision_ops, gelu_forward_and_backward_in_place) {
    for (int k = 0; k < 2; k++) {
        const tri_dtype t = TYPES[k];
        const size_t sizes[2] = {37, 70001};
        for (int s = 0; s < 2; s++) {
            const size_t N = sizes[s];
            pair p;
            pair_init(&p, t);
            t16 x = t16_rand(t, N, -6, 6), out = t16_nan(t, N), dout = t16_rand(t, N, -1, 1);
            p.o->gelu_fwd(&p.c16, out.h, x.h, N);
            p.o->gelu_fwd(&p.c32, out.f, x.f, N);
            expect_rounded("gelu_fwd out", t, out.h, out.f, N);
            t16 dinp = t16_nan(t, N);
            p.o->gelu_bwd(&p.c16, dinp.h, x.h, dout.h, N);
            p.o->gelu_bwd(&p.c32, dinp.f, x.f, dout.f, N);
            expect_rounded("gelu_bwd dinp", t, dinp.h, dinp.f, N);
            p.o->gelu_bwd(&p.c16, dout.h, x.h, dout.h, N); /* dinp aliasing dout */
            cr_expect(memcmp(dout.h, dinp.h, N * 2) == 0, "gelu_bwd in place equals out of place");
            t16_free(&x), t16_free(&out), t16_free(&dout), t16_free(&dinp);
            pair_free(&p);
        }
    }
}

Test(precision_ops, residual_with_bias_in_place_and_bias_backward) {
    for (int k = 0; k < 2; k++) {
        const tri_dtype t = TYPES[k];
        const size_t N = 131, C = 129;
        pair p;
        pair_init(&p, t);
        t16 r = t16_rand(t, N * C, -3, 3), x = t16_rand(t, N * C, -1, 1), b = t16_rand(t, C, -1, 1);
        t16 out = t16_nan(t, N * C);
        p.o->residual_fwd(&p.c16, out.h, r.h, x.h, b.h, N, C);
        p.o->residual_fwd(&p.c32, out.f, r.f, x.f, b.f, N, C);
        expect_rounded("residual_fwd out", t, out.h, out.f, N * C);
        p.o->residual_fwd(&p.c16, r.h, r.h, x.h, NULL, N, C); /* out aliasing res, no bias */
        p.o->residual_fwd(&p.c32, r.f, r.f, x.f, NULL, N, C);
        expect_rounded("residual_fwd in place", t, r.h, r.f, N * C);
        float *db = frand(C, -1, 1), *db32 = fdup(db, C);
        p.o->bias_bwd(&p.c16, db, x.h, N, C);
        p.o->bias_bwd(&p.c32, db32, x.f, N, C);
        expect_same("bias_bwd dbias", db, db32, C);
        t16_free(&r), t16_free(&x), t16_free(&b), t16_free(&out);
        free(db), free(db32);
        pair_free(&p);
    }
}

/* ------------------------------------------------------------------ embedding */

Test(precision_ops, embedding_vocab_slice_forward_and_backward) {
    for (int k = 0; k < 2; k++)
        for (int with_wpe = 0; with_wpe < 2; with_wpe++) {
            const tri_dtype t = TYPES[k];
            const size_t B = 3, T = 41, C = 37, vstart = 10, Vl = 23, V = 50;
            pair p;
            pair_init(&p, t);
            int32_t *ids = xcalloc(B * T, 4);
            for (size_t i = 0; i < B * T; i++) ids[i] = (int32_t)(unit() * V); /* some outside the slice */
            t16 wte = t16_rand(t, Vl * C, -1, 1), wpe = t16_rand(t, T * C, -1, 1), out = t16_nan(t, B * T * C);
            p.o->embedding_fwd(&p.c16, out.h, ids, wte.h, with_wpe ? wpe.h : NULL, B, T, C, vstart, Vl);
            p.o->embedding_fwd(&p.c32, out.f, ids, wte.f, with_wpe ? wpe.f : NULL, B, T, C, vstart, Vl);
            expect_rounded("embedding_fwd out", t, out.h, out.f, B * T * C);
            t16 dout = t16_rand(t, B * T * C, -1, 1);
            float *dwte = frand(Vl * C, -1, 1), *dwpe = frand(T * C, -1, 1);
            float *dwte32 = fdup(dwte, Vl * C), *dwpe32 = fdup(dwpe, T * C);
            p.o->embedding_bwd(&p.c16, dwte, with_wpe ? dwpe : NULL, dout.h, ids, B, T, C, vstart, Vl);
            p.o->embedding_bwd(&p.c32, dwte32, with_wpe ? dwpe32 : NULL, dout.f, ids, B, T, C, vstart, Vl);
            expect_same("embedding_bwd dwte", dwte, dwte32, Vl * C);
            expect_same("embedding_bwd dwpe", dwpe, dwpe32, T * C);
            t16_free(&wte), t16_free(&wpe), t16_free(&out), t16_free(&dout);
            free(ids), free(dwte), free(dwpe), free(dwte32), free(dwpe32);
            pair_free(&p);
        }
}

/* ------------------------------------------------------------------ cross-entropy */

/* Vl columns of which those with global index >= V are padding; the rows are
 * widened in blocks of about 4M values, so a large case crosses blocks. */
static void check_ce(tri_dtype t, size_t N, size_t V, size_t Vl, size_t vstart, int in_place) {
    pair p;
    pair_init(&p, t);
    int32_t *tg = xcalloc(N, 4);
    for (size_t i = 0; i < N; i++) tg[i] = (int32_t)(unit() * V);
    t16 lg = t16_rand(t, N * Vl, -8, 8);
    float *st = frand(3 * N, 1e30, 1e30), *st32 = xcalloc(3 * N, 4);
    p.o->crossentropy_stats(&p.c16, st, lg.h, tg, N, Vl, vstart, V);
    p.o->crossentropy_stats(&p.c32, st32, lg.f, tg, N, Vl, vstart, V);
    expect_same("crossentropy_stats", st, st32, 3 * N);
    float *loss = frand(N, 1e30, 1e30), *loss32 = xcalloc(N, 4);
    t16 dl = t16_nan(t, N * Vl);
    uint16_t *dst = in_place ? lg.h : dl.h;
    float *dst32 = in_place ? lg.f : dl.f;
    p.o->crossentropy_bwd(&p.c16, loss, dst, lg.h, st, tg, 0.37f, N, Vl, vstart, V);
    p.o->crossentropy_bwd(&p.c32, loss32, dst32, lg.f, st32, tg, 0.37f, N, Vl, vstart, V);
    expect_same("crossentropy losses", loss, loss32, N);
    expect_rounded("crossentropy dlogits", t, dst, dst32, N * Vl);
    t16_free(&lg), t16_free(&dl);
    free(tg), free(st), free(st32), free(loss), free(loss32);
    pair_free(&p);
}

Test(precision_ops, crossentropy_padded_columns_and_in_place) {
    for (int k = 0; k < 2; k++) {
        check_ce(TYPES[k], 5, 37, 40, 0, 0);
        check_ce(TYPES[k], 6, 70, 40, 40, 1); /* second rank of two, 10 padded columns */
    }
}

Test(precision_ops, crossentropy_rows_cross_widening_blocks, .timeout = 120) {
    check_ce(TRI_BF16, 230, 40000, 40000, 0, 1); /* 9.2M logits: three blocks */
}

/* ------------------------------------------------------------------ cpu-guard */

/* The guarded backend runs the same emulation (its state holds the CPU's
 * scratch): a bf16 linear layer and layernorm through staging copies give
 * the plain CPU's bits. */
Test(precision_guard, guarded_backend_gives_the_cpu_bits) {
    const tri_dtype t = TRI_BF16;
    const size_t N = 21, C = 19, OC = 23;
    tri_ctx g, c;
    cr_assert_eq(tri_ctx_init(&g, "cpu-guard", 0), 0);
    cr_assert_eq(tri_ctx_init(&c, "cpu", 0), 0);
    cr_assert_eq(tri_ctx_set_precision(&g, t), 0);
    cr_assert_eq(tri_ctx_set_precision(&c, t), 0);
    t16 x = t16_rand(t, N * C, -1, 1), w = t16_rand(t, OC * C, -1, 1), b = t16_rand(t, OC, -1, 1);
    uint16_t *want = xcalloc(N * OC, 2), *got = xcalloc(N * OC, 2);
    c.ops->matmul_fwd(&c, want, x.h, w.h, b.h, N, C, OC);
    void *dx = tri_ctx_alloc(&g, N * C * 2, TRI_MEM_WORKSPACE, "x"),
         *dw = tri_ctx_alloc(&g, OC * C * 2, TRI_MEM_PARAMS, "w");
    void *db = tri_ctx_alloc(&g, OC * 2, TRI_MEM_PARAMS, "b"),
         *dout = tri_ctx_alloc(&g, N * OC * 2, TRI_MEM_WORKSPACE, "o");
    float *dm = tri_ctx_alloc(&g, OC * C * 4, TRI_MEM_OPTIM, "master");
    cr_assert(dx && dw && db && dout && dm);
    tri_ctx_to_device(&g, dx, x.h, N * C * 2);
    tri_ctx_to_device(&g, dm, w.f, OC * C * 4); /* fp32 master -> bf16 params by the cast op */
    g.ops->cast(&g, dw, t, dm, TRI_F32, OC * C);
    tri_ctx_to_device(&g, db, b.h, OC * 2);
    g.ops->matmul_fwd(&g, dout, dx, dw, db, N, C, OC);
    tri_ctx_to_host(&g, got, dout, N * OC * 2);
    cr_expect(memcmp(got, want, N * OC * 2) == 0, "cpu-guard bf16 matmul differs from cpu");
    cr_expect(g.mem.bytes[TRI_MEM_PARAMS] == (OC * C + OC) * tri_dtype_size(g.param_dtype) &&
              tri_dtype_size(g.param_dtype) == 2);
    tri_ctx_release(&g, dx, N * C * 2, TRI_MEM_WORKSPACE);
    tri_ctx_release(&g, dw, OC * C * 2, TRI_MEM_PARAMS);
    tri_ctx_release(&g, db, OC * 2, TRI_MEM_PARAMS);
    tri_ctx_release(&g, dout, N * OC * 2, TRI_MEM_WORKSPACE);
    tri_ctx_release(&g, dm, OC * C * 4, TRI_MEM_OPTIM);
    t16_free(&x), t16_free(&w), t16_free(&b);
    free(want), free(got);
    tri_ctx_free(&g);
    tri_ctx_free(&c);
}

/* ------------------------------------------------------------------ memory */

/* Saved activations of a 16-bit context, from the runtime's slot layout and
 * the allocator's accounting, against the closed form (tp = 1, attention
 * keeping one fp32 log-sum-exp per row; docs/precision.md):
 *   none:      2 BT (4C + 12C) + 4 BT 4 + 4 B a T
 *   selective: 2 BT (4C + 12C) + 4 BT 4
 *   full:      2 BT C
 * (the 4 fp32 LayerNorm statistics per position stay 4 bytes). BT C a
 * multiple of 32 keeps every buffer 64-byte aligned, so the match is exact. */
Test(precision_memory, saved_activations_take_two_bytes_per_element) {
    for (int k = 0; k < 2; k++)
        for (int pol = 0; pol < 3; pol++) {
            tri_model_cfg cfg = {.n_layer = 2, .n_head = 4, .n_embd = 64, .seq_len = 32, .vocab_size = 300};
            const size_t B = 2, T = 32;
            tri_ctx ctx;
            tri_comm self;
            tri_gpt g;
            tri_slot_pool pool;
            cr_assert_eq(tri_ctx_init(&ctx, "cpu", 0), 0);
            cr_assert_eq(tri_ctx_set_precision(&ctx, TYPES[k]), 0);
            tri_comm_init_self(&self, 0);
            self.ctx = &ctx;
            cr_assert_eq(tri_gpt_init_single(&g, &cfg, &ctx, &self, 1, 0), 0);
            cr_assert_eq(tri_slot_pool_init(&pool, &g, 0, B, T, (tri_recompute)pol, 1, 0), 0);
            const double BT = (double)(B * T), C = cfg.n_embd, a = cfg.n_head, Tt = (double)T;
            const double want = pol == TRI_RECOMPUTE_NONE        ? 2 * BT * 16 * C + 16 * BT + 4 * (double)B * a * Tt
                                : pol == TRI_RECOMPUTE_SELECTIVE ? 2 * BT * 16 * C + 16 * BT
                                                                 : 2 * BT * C;
            cr_expect((double)pool.layer_bytes == want, "%s %s: %zu bytes per layer, closed form %.0f",
                      tri_precision_name(TYPES[k]), tri_recompute_name((tri_recompute)pol), pool.layer_bytes, want);
            /* ends: ids + targets (4 BT each), head input and dlnf (2 BTC each), LayerNorm stats (8 BT) */
            const double slot = cfg.n_layer * want + 8 * BT + 4 * BT * C + 8 * BT;
            cr_expect((double)ctx.mem.bytes[TRI_MEM_SAVED] == slot, "saved accounting %zu, closed form %.0f",
                      ctx.mem.bytes[TRI_MEM_SAVED], slot);
            tri_slot_pool_free(&pool, &g);
            tri_gpt_free(&g);
            tri_ctx_free(&ctx);
        }
}
