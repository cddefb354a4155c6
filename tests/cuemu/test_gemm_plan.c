/* The CUDA backend's GEMM plans (kernels/cuda/gemm_plan.c) on the host:
 * the layouts of each call of matmul_fwd / matmul_bwd, checked field by field
 * against the column-major transposition worked out in gemm_plan.h and, as a
 * second implementation, by running every plan through a naive column-major
 * GEMM (triple loop, double accumulation; not the sgemm of the emulated
 * executor) and comparing with the op's row-major formula computed directly;
 * where dbias comes from; the alignment in the key; the plan cache's hits,
 * misses and growth; the MLP's GELU epilogues (fwd + GELU saving the
 * pre-activation, dinp + dGELU with the bias gradient), how a GEMM drops its
 * epilogue, and the fallback kept in the cache and noted once. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/gemm_plan.h"

static double gelu_d(double x) { return 0.5 * x * (1.0 + tanh(0.79788456080286535588 * (x + 0.044715 * x * x * x))); }

static double gelu_grad_d(double x) {
    const double u = 0.79788456080286535588 * (x + 0.044715 * x * x * x);
    const double du = 0.79788456080286535588 * (1.0 + 3.0 * 0.044715 * x * x);
    const double t = tanh(u);
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du;
}

static uint64_t rng(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static float *rnd(size_t n, uint64_t *s) {
    /* aligned_alloc wants a size that is a multiple of the alignment */
    float *x = aligned_alloc(64, ((n ? n : 1) * sizeof(float) + 64 + 63) / 64 * 64);
    for (size_t i = 0; i < n; i++) x[i] = (float)((double)(rng(s) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    return x;
}

/* D = op(A) op(B) + beta D (+ epilogue), column-major, as cuBLASLt defines it
 * (cublasLt.h, cublasLtEpilogue_t); fp32 operands. */
static void naive_run(const tri_gemm_call *g) {
    const tri_gemm_desc *d = &g->d;
    const float *A = g->A, *B = g->B;
    float *D = g->D, *bias = g->bias, *aux = g->aux;
    if (d->epilogue == TRI_GEMM_EPI_DGELU_BGRAD)
        for (uint64_t i = 0; i < d->m; i++) bias[i] = 0.0f;
    for (uint64_t j = 0; j < d->n; j++)
        for (uint64_t i = 0; i < d->m; i++) {
            double acc = 0;
            for (uint64_t k = 0; k < d->k; k++) {
                const double a = d->transa ? A[k + i * d->lda] : A[i + k * d->lda];
                const double b = d->transb ? B[j + k * d->ldb] : B[k + j * d->ldb];
                acc += a * b;
            }
            if (d->accumulate) acc += D[i + j * d->ldc];
            if (d->epilogue == TRI_GEMM_EPI_BIAS || d->epilogue == TRI_GEMM_EPI_GELU_AUX_BIAS) acc += bias[i];
            if (d->epilogue == TRI_GEMM_EPI_GELU_AUX || d->epilogue == TRI_GEMM_EPI_GELU_AUX_BIAS) {
                aux[i + j * d->auxld] = (float)acc;
                acc = gelu_d(acc);
            }
            if (d->epilogue == TRI_GEMM_EPI_DGELU || d->epilogue == TRI_GEMM_EPI_DGELU_BGRAD)
                acc *= gelu_grad_d(aux[i + j * d->auxld]);
            if (d->epilogue == TRI_GEMM_EPI_DGELU_BGRAD) bias[i] += (float)acc;
            D[i + j * d->ldc] = (float)acc;
        }
    if (d->epilogue == TRI_GEMM_EPI_BGRADB)
        for (uint64_t j = 0; j < d->n; j++) {
            double acc = 0;
            for (uint64_t k = 0; k < d->k; k++) acc += d->transb ? B[j + k * d->ldb] : B[k + j * d->ldb];
            bias[j] = (float)acc;
        }
}

static void expect_near(const char *what, const float *got, const double *want, size_t n, size_t N, size_t C,
                        size_t OC) {
    for (size_t i = 0; i < n; i++)
        cr_assert(fabs(got[i] - want[i]) <= 1e-5 * (1.0 + fabs(want[i])),
                  "%s (N %zu, C %zu, OC %zu): element %zu is %.8g, the op's formula gives %.8g", what, N, C, OC, i,
                  got[i], want[i]);
}

static const size_t SHAPES[][3] = {{1, 1, 1}, {5, 7, 3}, {3, 33, 17}, {13, 4, 29}, {64, 32, 96}};

Test(gemm_plan, fwd_dinp_dweight_plans_compute_the_ops_row_major_formulas) {
    for (size_t si = 0; si < sizeof SHAPES / sizeof SHAPES[0]; si++) {
        const size_t N = SHAPES[si][0], C = SHAPES[si][1], OC = SHAPES[si][2];
        uint64_t s = 11 + si;
        float *inp = rnd(N * C, &s), *w = rnd(OC * C, &s), *b = rnd(OC, &s), *dout = rnd(N * OC, &s);
        float *out = rnd(N * OC, &s), *dinp = rnd(N * C, &s), *dw = rnd(OC * C, &s), *bg = rnd(OC, &s);
        double *want = malloc(sizeof(double) * (N * OC + N * C + OC * C + OC));
        tri_gemm_call g;
        int fill = -1;
        for (int with_bias = 0; with_bias < 2; with_bias++) {
            cr_assert_eq(tri_gemm_plan_fwd(&g, &fill, TRI_F32, out, inp, w, with_bias ? b : NULL, N, C, OC), 0);
            cr_assert_eq(fill, 0);
            cr_assert_eq(g.d.epilogue, with_bias ? TRI_GEMM_EPI_BIAS : TRI_GEMM_EPI_NONE);
            naive_run(&g);
            for (size_t n = 0; n < N; n++)
                for (size_t o = 0; o < OC; o++) {
                    double a = with_bias ? b[o] : 0.0;
                    for (size_t c = 0; c < C; c++) a += (double)inp[n * C + c] * w[o * C + c];
                    want[n * OC + o] = a;
                }
            expect_near(with_bias ? "fwd with bias" : "fwd", out, want, N * OC, N, C, OC);
        }
        cr_assert_eq(tri_gemm_plan_dinp(&g, &fill, TRI_F32, dinp, dout, w, N, C, OC), 0);
        naive_run(&g);
        for (size_t n = 0; n < N; n++)
            for (size_t c = 0; c < C; c++) {
                double a = 0;
                for (size_t o = 0; o < OC; o++) a += (double)dout[n * OC + o] * w[o * C + c];
                want[n * C + c] = a;
            }
        expect_near("dinp", dinp, want, N * C, N, C, OC);
        for (int epi = 0; epi < 2; epi++) {
            for (size_t o = 0; o < OC; o++)
                for (size_t c = 0; c < C; c++) {
                    double a = dw[o * C + c]; /* accumulates */
                    for (size_t n = 0; n < N; n++) a += (double)dout[n * OC + o] * inp[n * C + c];
                    want[o * C + c] = a;
                }
            for (size_t o = 0; o < OC; o++) {
                double a = 0; /* the epilogue overwrites */
                for (size_t n = 0; n < N; n++) a += dout[n * OC + o];
                want[OC * C + o] = a;
            }
            cr_assert_eq(tri_gemm_plan_dweight(&g, TRI_F32, dw, epi ? bg : NULL, dout, inp, N, C, OC), 0);
            cr_assert_eq(g.d.epilogue, epi ? TRI_GEMM_EPI_BGRADB : TRI_GEMM_EPI_NONE);
            naive_run(&g);
            expect_near("dweight", dw, want, OC * C, N, C, OC);
            if (epi) expect_near("dbias through BGRADB", bg, want + OC * C, OC, N, C, OC);
        }
        free(inp), free(w), free(b), free(dout), free(out), free(dinp), free(dw), free(bg), free(want);
    }
}

/* The fields themselves, for one shape: what gemm_plan.h says. */
Test(gemm_plan, layouts_are_the_column_major_transposes) {
    _Alignas(64) static float buf[4096];
    const size_t N = 5, C = 7, OC = 3;
    tri_gemm_call g;
    int fill;
    cr_assert_eq(tri_gemm_plan_fwd(&g, &fill, TRI_F32, buf, buf + 64, buf + 128, buf + 192, N, C, OC), 0);
    cr_assert(g.d.transa == 1 && g.d.transb == 0 && g.d.m == OC && g.d.n == N && g.d.k == C);
    cr_assert(g.d.lda == C && g.d.ldb == C && g.d.ldc == OC && g.d.accumulate == 0 && g.d.align == 16);
    cr_assert(g.A == buf + 128 && g.B == buf + 64 && g.D == buf && g.bias == buf + 192);
    cr_assert_eq(tri_gemm_plan_dinp(&g, &fill, TRI_F32, buf, buf + 64, buf + 128, N, C, OC), 0);
    cr_assert(g.d.transa == 0 && g.d.transb == 0 && g.d.m == C && g.d.n == N && g.d.k == OC);
    cr_assert(g.d.lda == C && g.d.ldb == OC && g.d.ldc == C && g.d.accumulate == 0);
    cr_assert(g.A == buf + 128 && g.B == buf + 64 && g.D == buf && g.bias == NULL);
    cr_assert_eq(tri_gemm_plan_dweight(&g, TRI_F32, buf, NULL, buf + 64, buf + 128, N, C, OC), 0);
    cr_assert(g.d.transa == 0 && g.d.transb == 1 && g.d.m == C && g.d.n == OC && g.d.k == N);
    cr_assert(g.d.lda == C && g.d.ldb == OC && g.d.ldc == C && g.d.accumulate == 1);
    cr_assert(g.A == buf + 128 && g.B == buf + 64 && g.D == buf);
}

Test(gemm_plan, empty_sizes_run_no_gemm_and_say_what_to_fill) {
    _Alignas(64) static float buf[64];
    tri_gemm_call g;
    int fill = -1;
    cr_assert_eq(tri_gemm_plan_fwd(&g, &fill, TRI_F32, buf, buf, buf, NULL, 0, 4, 4), 1);
    cr_assert_eq(fill, 0);
    cr_assert_eq(tri_gemm_plan_fwd(&g, &fill, TRI_F32, buf, buf, buf, NULL, 4, 4, 0), 1);
    cr_assert_eq(fill, 0);
    cr_assert_eq(tri_gemm_plan_fwd(&g, &fill, TRI_F32, buf, buf, buf, buf, 4, 0, 4), 1);
    cr_assert_eq(fill, 1); /* out = bias broadcast */
    cr_assert_eq(tri_gemm_plan_dinp(&g, &fill, TRI_F32, NULL, buf, buf, 4, 4, 4), 1);
    cr_assert_eq(fill, 0);
    cr_assert_eq(tri_gemm_plan_dinp(&g, &fill, TRI_F32, buf, buf, buf, 4, 4, 0), 1);
    cr_assert_eq(fill, 1); /* dinp = 0 */
    cr_assert_eq(tri_gemm_plan_dinp(&g, &fill, TRI_F32, buf, buf, buf, 0, 4, 4), 1);
    cr_assert_eq(fill, 0);
    cr_assert_eq(tri_gemm_plan_dweight(&g, TRI_F32, NULL, NULL, buf, buf, 4, 4, 4), 1);
    cr_assert_eq(tri_gemm_plan_dweight(&g, TRI_F32, buf, NULL, buf, buf, 0, 4, 4), 1); /* += nothing */
    cr_assert_eq(tri_gemm_plan_dweight(&g, TRI_F32, buf, NULL, buf, buf, 4, 4, 4), 0);
}

Test(gemm_plan, dbias_route_follows_the_policy_and_what_runs) {
    /* not asked for, or nothing to write */
    cr_assert_eq(tri_gemm_dbias_route(TRI_DBIAS_EPILOGUE, 1, 0, 4, 4, 4), TRI_DBIAS_ROUTE_NONE);
    cr_assert_eq(tri_gemm_dbias_route(TRI_DBIAS_REDUCE, 1, 1, 4, 4, 0), TRI_DBIAS_ROUTE_NONE);
    /* the default: always the reduction (the bits do not depend on whether
     * dweight is asked for in the same call: the zero-bubble split asks for
     * dbias with dinp and dweight alone later) */
    cr_assert_eq(tri_gemm_dbias_route(TRI_DBIAS_REDUCE, 1, 1, 4, 4, 4), TRI_DBIAS_ROUTE_REDUCE);
    cr_assert_eq(tri_gemm_dbias_route(TRI_DBIAS_REDUCE, 0, 1, 4, 4, 4), TRI_DBIAS_ROUTE_REDUCE);
    /* the epilogue only rides on a dweight GEMM that runs */
    cr_assert_eq(tri_gemm_dbias_route(TRI_DBIAS_EPILOGUE, 1, 1, 4, 4, 4), TRI_DBIAS_ROUTE_EPILOGUE);
    cr_assert_eq(tri_gemm_dbias_route(TRI_DBIAS_EPILOGUE, 0, 1, 4, 4, 4), TRI_DBIAS_ROUTE_REDUCE);
    cr_assert_eq(tri_gemm_dbias_route(TRI_DBIAS_EPILOGUE, 1, 1, 4, 0, 4), TRI_DBIAS_ROUTE_REDUCE);
    cr_assert_eq(tri_gemm_dbias_route(TRI_DBIAS_EPILOGUE, 1, 1, 0, 4, 4), TRI_DBIAS_ROUTE_REDUCE);
}

Test(gemm_plan, alignment_is_the_least_of_the_operands_and_part_of_the_key) {
    _Alignas(64) static float buf[256];
    cr_assert_eq(tri_gemm_ptr_align(buf), 16);
    cr_assert_eq(tri_gemm_ptr_align(buf + 1), 4);
    cr_assert_eq(tri_gemm_ptr_align(buf + 2), 8);
    cr_assert_eq(tri_gemm_ptr_align((char *)buf + 1), 1);
    cr_assert_eq(tri_gemm_ptr_align(NULL), 16);
    tri_gemm_call a, b;
    int fill;
    tri_gemm_plan_fwd(&a, &fill, TRI_F32, buf, buf + 64, buf + 128, NULL, 4, 8, 4);
    tri_gemm_plan_fwd(&b, &fill, TRI_F32, buf, buf + 65, buf + 128, NULL, 4, 8, 4); /* inp 4-byte aligned */
    cr_assert_eq(a.d.align, 16);
    cr_assert_eq(b.d.align, 4);
    cr_assert_not(tri_gemm_desc_equal(&a.d, &b.d));
    tri_gemm_plan_fwd(&b, &fill, TRI_F32, buf, buf + 64, buf + 128, buf + 2, 4, 8, 4); /* bias 8-byte aligned */
    cr_assert_eq(b.d.align, 8);
}

static int released;
static void count_release(tri_gemm_entry *e) {
    released++;
    cr_assert_eq(e->handles[0], (void *)e->hash, "each entry's own handles are released");
}

Test(gemm_plan, cache_misses_once_per_distinct_gemm_and_hits_after) {
    _Alignas(64) static float buf[4096];
    tri_gemm_cache c = {.release = count_release};
    tri_gemm_call g;
    int fill;
    /* 40 distinct GEMMs (grows the array past its first 16 entries) */
    tri_gemm_desc ds[40];
    for (int i = 0; i < 40; i++) {
        if (i % 4 == 0) tri_gemm_plan_fwd(&g, &fill, TRI_F32, buf, buf + 64, buf + 128, NULL, 2 + i, 8, 4);
        if (i % 4 == 1) tri_gemm_plan_fwd(&g, &fill, TRI_F32, buf, buf + 64, buf + 128, buf + 192, 2 + i, 8, 4);
        if (i % 4 == 2) tri_gemm_plan_dinp(&g, &fill, TRI_F32, buf, buf + 64, buf + 128, 2 + i, 8, 4);
        if (i % 4 == 3) tri_gemm_plan_dweight(&g, TRI_F32, buf, NULL, buf + 64, buf + 128, 2 + i, 8, 4);
        ds[i] = g.d;
        cr_assert_null(tri_gemm_cache_find(&c, &g.d));
        tri_gemm_entry *e = tri_gemm_cache_add(&c, &g.d);
        cr_assert_not_null(e);
        e->handles[0] = (void *)e->hash;
    }
    cr_assert_eq(c.misses, 40);
    cr_assert_eq(c.hits, 0);
    for (int r = 0; r < 3; r++)
        for (int i = 0; i < 40; i++) {
            tri_gemm_entry *e = tri_gemm_cache_find(&c, &ds[i]);
            cr_assert_not_null(e);
            cr_assert(tri_gemm_desc_equal(&e->d, &ds[i]));
        }
    cr_assert_eq(c.hits, 120);
    cr_assert_eq(c.misses, 40);
    cr_assert_eq(c.n, 40);
    /* each field of the key matters */
    tri_gemm_desc d = ds[3];
    uint64_t *fields[] = {&d.m, &d.n, &d.k, &d.lda, &d.ldb, &d.ldc};
    for (int f = 0; f < 6; f++) {
        d = ds[3];
        *fields[f] += 1000;
        cr_assert_null(tri_gemm_cache_find(&c, &d), "field %d changed, still a hit", f);
    }
    d = ds[3];
    d.transa ^= 1;
    cr_assert_null(tri_gemm_cache_find(&c, &d));
    d = ds[3];
    d.accumulate = 0;
    cr_assert_null(tri_gemm_cache_find(&c, &d));
    d = ds[3];
    d.epilogue = TRI_GEMM_EPI_BGRADB;
    cr_assert_null(tri_gemm_cache_find(&c, &d));
    d = ds[3];
    d.align = 4;
    cr_assert_null(tri_gemm_cache_find(&c, &d));
    released = 0;
    tri_gemm_cache_free(&c);
    cr_assert_eq(released, 40);
    cr_assert_eq(c.n, 0);
}

/* The operand types of each plan: all in the compute dtype for fwd (bias
 * too) and dinp; dweight reads bf16 (or fp32) and writes fp32, the BGRADB
 * bias gradient fp32. */
Test(gemm_plan, types_follow_the_compute_dtype_and_dweight_accumulates_in_fp32) {
    _Alignas(64) static float buf[4096];
    const tri_dtype dts[2] = {TRI_F32, TRI_BF16};
    tri_gemm_call g;
    int fill;
    for (int i = 0; i < 2; i++) {
        const tri_dtype dt = dts[i];
        cr_assert_eq(tri_gemm_plan_fwd(&g, &fill, dt, buf, buf + 64, buf + 128, buf + 192, 5, 7, 3), 0);
        cr_assert(g.d.atype == dt && g.d.btype == dt && g.d.dtype == dt && g.d.biastype == dt, "fwd, dtype %d", dt);
        cr_assert_eq(tri_gemm_check_types(&g), 0);
        cr_assert_eq(tri_gemm_plan_dinp(&g, &fill, dt, buf, buf + 64, buf + 128, 5, 7, 3), 0);
        cr_assert(g.d.atype == dt && g.d.btype == dt && g.d.dtype == dt, "dinp, dtype %d", dt);
        cr_assert_eq(tri_gemm_plan_dweight(&g, dt, buf, buf + 256, buf + 64, buf + 128, 5, 7, 3), 0);
        cr_assert(g.d.atype == dt && g.d.btype == dt && g.d.dtype == TRI_F32 && g.d.biastype == TRI_F32,
                  "dweight, dtype %d", dt);
        cr_assert_eq(tri_gemm_check_types(&g), 0);
    }
    cr_assert_eq(tri_gemm_type_size(TRI_F32), 4);
    cr_assert_eq(tri_gemm_type_size(TRI_BF16), 2);
    cr_assert_eq(tri_gemm_type_size(TRI_F16), 0);
    char s[320];
    tri_gemm_plan_dweight(&g, TRI_BF16, buf, buf + 256, buf + 64, buf + 128, 5, 7, 3);
    tri_gemm_desc_str(&g.d, s, sizeof s);
    cr_assert(strstr(s, "types bf16 bf16 -> f32 (bias f32)") != NULL, "%s", s);
}

/* A pointer must be aligned to its element: 2 bytes are enough for a bf16
 * operand, not for an fp32 one (nor for the fp32 dweight of a bf16 plan). */
Test(gemm_plan, pointers_must_be_aligned_to_their_elements_type) {
    _Alignas(64) static unsigned char raw[8192];
    void *a16 = raw, *a2 = raw + 2050;
    tri_gemm_call g;
    int fill;
    cr_assert_eq(tri_gemm_plan_fwd(&g, &fill, TRI_BF16, a16, a2, a16, NULL, 4, 8, 4), 0);
    cr_assert_eq(g.d.align, 2);
    cr_assert_eq(tri_gemm_check_types(&g), 0);
    cr_assert_eq(tri_gemm_plan_fwd(&g, &fill, TRI_F32, a16, a2, a16, NULL, 4, 8, 4), 0);
    cr_assert_eq(tri_gemm_check_types(&g), -1, "a 2-byte aligned fp32 operand");
    cr_assert_eq(tri_gemm_plan_dweight(&g, TRI_BF16, (float *)(void *)(raw + 4096 + 2), NULL, a16, a2, 4, 8, 4), 0);
    cr_assert_eq(tri_gemm_check_types(&g), -1, "a 2-byte aligned fp32 dweight");
    cr_assert_eq(tri_gemm_plan_dweight(&g, TRI_BF16, (float *)(void *)(raw + 4096 + 4), NULL, a16, a2, 4, 8, 4), 0);
    cr_assert_eq(tri_gemm_check_types(&g), 0);
    g.d.dtype = TRI_F16;
    cr_assert_eq(tri_gemm_check_types(&g), -1, "fp16 is not a type of these GEMMs");
}

/* The same shapes in fp32 and bf16 are different GEMMs: different plans in
 * the cache; and each type field of the key matters on its own. */
Test(gemm_plan, types_are_part_of_the_key) {
    _Alignas(64) static float buf[4096];
    tri_gemm_cache c = {0};
    tri_gemm_call g;
    int fill;
    tri_gemm_plan_fwd(&g, &fill, TRI_F32, buf, buf + 64, buf + 128, buf + 192, 6, 8, 4);
    const tri_gemm_desc f32 = g.d;
    tri_gemm_plan_fwd(&g, &fill, TRI_BF16, buf, buf + 64, buf + 128, buf + 192, 6, 8, 4);
    const tri_gemm_desc bf16 = g.d;
    cr_assert_not(tri_gemm_desc_equal(&f32, &bf16));
    cr_assert_null(tri_gemm_cache_find(&c, &f32));
    cr_assert_not_null(tri_gemm_cache_add(&c, &f32));
    cr_assert_null(tri_gemm_cache_find(&c, &bf16), "a bf16 GEMM found the fp32 plan");
    cr_assert_not_null(tri_gemm_cache_add(&c, &bf16));
    cr_assert_not_null(tri_gemm_cache_find(&c, &f32));
    cr_assert_not_null(tri_gemm_cache_find(&c, &bf16));
    cr_assert_eq(c.n, 2);
    for (int f = 0; f < 4; f++) {
        tri_gemm_desc d = bf16;
        tri_dtype *t[4] = {&d.atype, &d.btype, &d.dtype, &d.biastype};
        *t[f] = TRI_F32;
        cr_assert_not(tri_gemm_desc_equal(&d, &bf16), "type field %d", f);
        cr_assert_neq(tri_gemm_desc_hash(&d), tri_gemm_desc_hash(&bf16), "type field %d", f);
        cr_assert_null(tri_gemm_cache_find(&c, &d), "type field %d changed, still a hit", f);
    }
    tri_gemm_cache_free(&c);
}

/* ---- the MLP's GELU epilogues ---- */

/* fwd + GELU and dinp + dGELU (with and without the bias and the bias
 * gradient) through the naive GEMM against the ops' row-major formulas
 * (kernels/ops.h matmul_gelu_fwd, matmul_bwd_dgelu) computed directly:
 *   pre (N, OC) = inp @ W^T + b, out = gelu(pre);
 *   dpre (N, C) = gelu'(pre) * (dout @ W), dbias (C) = sums of dpre over N.
 * Here `pre` of the backward is an (N, C) tensor of its own (the input of
 * the next linear is gelu(pre)). Shapes with {1, 1, 1} last. */
Test(gemm_plan, gelu_epilogue_plans_compute_the_fused_mlp_formulas) {
    static const size_t shapes[][3] = {{5, 7, 3}, {3, 33, 17}, {13, 4, 29}, {64, 32, 96}, {1, 1, 1}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const size_t N = shapes[si][0], C = shapes[si][1], OC = shapes[si][2];
        uint64_t s = 41 + si;
        float *inp = rnd(N * C, &s), *w = rnd(OC * C, &s), *b = rnd(OC, &s), *dout = rnd(N * OC, &s);
        float *out = rnd(N * OC, &s), *pre = rnd(N * OC, &s), *ppre = rnd(N * C, &s), *dpre = rnd(N * C, &s);
        float *bg = rnd(C, &s);
        for (size_t i = 0; i < N * C; i++) ppre[i] *= 3.0f; /* GELU's curved part */
        double *want = malloc(sizeof(double) * (2 * N * OC + N * C + C));
        tri_gemm_call g;
        int fill = -1;
        for (int with_bias = 0; with_bias < 2; with_bias++) {
            cr_assert_eq(tri_gemm_plan_fwd_gelu(&g, &fill, TRI_F32, out, pre, inp, w, with_bias ? b : NULL, N, C, OC),
                         0);
            cr_assert_eq(fill, 0);
            cr_assert_eq(g.d.epilogue, with_bias ? TRI_GEMM_EPI_GELU_AUX_BIAS : TRI_GEMM_EPI_GELU_AUX);
            cr_assert(g.aux == pre && g.d.auxld == OC && g.d.auxtype == TRI_F32 && g.bias == (with_bias ? b : NULL));
            naive_run(&g);
            for (size_t n = 0; n < N; n++)
                for (size_t o = 0; o < OC; o++) {
                    double a = with_bias ? b[o] : 0.0;
                    for (size_t c = 0; c < C; c++) a += (double)inp[n * C + c] * w[o * C + c];
                    want[n * OC + o] = a;
                    want[N * OC + n * OC + o] = gelu_d(a);
                }
            expect_near("fwd + GELU: pre", pre, want, N * OC, N, C, OC);
            expect_near("fwd + GELU: out", out, want + N * OC, N * OC, N, C, OC);
        }
        for (int with_bgrad = 0; with_bgrad < 2; with_bgrad++) {
            cr_assert_eq(tri_gemm_plan_dinp_dgelu(&g, &fill, TRI_F32, dpre, with_bgrad ? bg : NULL, dout, w, ppre, N,
                                                  C, OC),
                         0);
            cr_assert_eq(g.d.epilogue, with_bgrad ? TRI_GEMM_EPI_DGELU_BGRAD : TRI_GEMM_EPI_DGELU);
            cr_assert(g.aux == ppre && g.d.auxld == C && g.d.biastype == TRI_F32);
            naive_run(&g);
            double *wd = want + 2 * N * OC, *wb = wd + N * C;
            for (size_t c = 0; c < C; c++) wb[c] = 0;
            for (size_t n = 0; n < N; n++)
                for (size_t c = 0; c < C; c++) {
                    double a = 0;
                    for (size_t o = 0; o < OC; o++) a += (double)dout[n * OC + o] * w[o * C + c];
                    wd[n * C + c] = gelu_grad_d(ppre[n * C + c]) * a;
                    wb[c] += wd[n * C + c];
                }
            expect_near("dinp + dGELU", dpre, wd, N * C, N, C, OC);
            if (with_bgrad) expect_near("dinp + dGELU: the bias gradient", bg, wb, C, N, C, OC);
        }
        free(inp), free(w), free(b), free(dout), free(out), free(pre), free(ppre), free(dpre), free(bg), free(want);
    }
}

/* The fields the GELU plans add: the aux matrix laid out as D (its leading
 * dimension, its type D's), its pointer in the alignment, the bias gradient
 * fp32 under a bf16 D; empty sizes as the plain plans. */
Test(gemm_plan, gelu_plans_lay_the_aux_matrix_out_as_d) {
    _Alignas(64) static float buf[4096];
    tri_gemm_call g;
    int fill = -1;
    cr_assert_eq(tri_gemm_plan_fwd_gelu(&g, &fill, TRI_BF16, buf, buf + 64, buf + 128, buf + 192, buf + 256, 5, 7,
                                        24),
                 0);
    cr_assert(g.d.transa == 1 && g.d.m == 24 && g.d.n == 5 && g.d.k == 7 && g.d.ldc == 24 && g.d.auxld == 24);
    cr_assert(g.d.dtype == TRI_BF16 && g.d.auxtype == TRI_BF16 && g.d.biastype == TRI_BF16);
    cr_assert_eq(g.d.align, 16);
    cr_assert_eq(tri_gemm_check_types(&g), 0);
    cr_assert_eq(tri_gemm_plan_fwd_gelu(&g, &fill, TRI_BF16, buf, (char *)(buf + 64) + 2, buf + 128, buf + 192,
                                        buf + 256, 5, 7, 24),
                 0);
    cr_assert_eq(g.d.align, 2, "the aux pointer counts in the alignment");
    cr_assert_eq(tri_gemm_plan_dinp_dgelu(&g, &fill, TRI_BF16, buf, buf + 64, buf + 128, buf + 192, buf + 256, 5, 16,
                                          3),
                 0);
    cr_assert(g.d.transa == 0 && g.d.m == 16 && g.d.n == 5 && g.d.k == 3 && g.d.ldc == 16 && g.d.auxld == 16);
    cr_assert(g.d.dtype == TRI_BF16 && g.d.auxtype == TRI_BF16 && g.d.biastype == TRI_F32);
    cr_assert(g.A == buf + 192 && g.B == buf + 128 && g.D == buf && g.bias == buf + 64 && g.aux == buf + 256);
    char str[384];
    tri_gemm_desc_str(&g.d, str, sizeof str);
    cr_assert(strstr(str, "epilogue dgelu_bgrad") && strstr(str, "(bias f32), aux ld 16 bf16"), "%s", str);
    /* nothing to run: as tri_gemm_plan_fwd / _dinp */
    cr_assert_eq(tri_gemm_plan_fwd_gelu(&g, &fill, TRI_F32, buf, buf, buf, buf, buf, 0, 4, 8), 1);
    cr_assert_eq(fill, 0);
    cr_assert_eq(tri_gemm_plan_fwd_gelu(&g, &fill, TRI_F32, buf, buf, buf, buf, buf, 4, 0, 8), 1);
    cr_assert_eq(fill, 1);
    cr_assert_eq(tri_gemm_plan_dinp_dgelu(&g, &fill, TRI_F32, buf, buf, buf, buf, buf, 4, 8, 0), 1);
    cr_assert_eq(fill, 1);
    cr_assert_eq(tri_gemm_plan_dinp_dgelu(&g, &fill, TRI_F32, buf, buf, buf, buf, buf, 4, 0, 8), 1);
    cr_assert_eq(fill, 0);
    cr_assert_str_eq(tri_gemm_epi_name(TRI_GEMM_EPI_GELU_AUX_BIAS), "gelu_aux_bias");
    cr_assert_str_eq(tri_gemm_epi_name(TRI_GEMM_EPI_COUNT), "?");
    cr_assert(tri_gemm_epi_bias_in(TRI_GEMM_EPI_GELU_AUX_BIAS) && !tri_gemm_epi_bias_in(TRI_GEMM_EPI_GELU_AUX));
    cr_assert(tri_gemm_epi_bias_out(TRI_GEMM_EPI_DGELU_BGRAD) && !tri_gemm_epi_bias_out(TRI_GEMM_EPI_DGELU));
    cr_assert(tri_gemm_epi_aux(TRI_GEMM_EPI_DGELU) && !tri_gemm_epi_aux(TRI_GEMM_EPI_BGRADB));
}

/* Dropping the epilogue (the unfused path): the plain GEMM of the same
 * operands, as the plain plan of the same call would make it (the same key). */
Test(gemm_plan, unfuse_gives_the_plain_plan_of_the_same_call) {
    _Alignas(64) static float buf[4096];
    tri_gemm_call g, plain;
    int fill;
    tri_gemm_plan_fwd_gelu(&g, &fill, TRI_BF16, buf, (char *)(buf + 64) + 2, buf + 128, buf + 192, buf + 256, 5, 7,
                           24);
    tri_gemm_unfuse(&g);
    tri_gemm_plan_fwd(&plain, &fill, TRI_BF16, buf, buf + 128, buf + 192, NULL, 5, 7, 24);
    cr_assert(tri_gemm_desc_equal(&g.d, &plain.d), "fwd + GELU without its epilogue is the plain fwd");
    cr_assert(g.bias == NULL && g.aux == NULL && g.d.align == 16);
    tri_gemm_plan_dinp_dgelu(&g, &fill, TRI_F32, buf, buf + 64, buf + 128, buf + 192, buf + 256, 5, 16, 3);
    tri_gemm_unfuse(&g);
    tri_gemm_plan_dinp(&plain, &fill, TRI_F32, buf, buf + 128, buf + 192, 5, 16, 3);
    cr_assert(tri_gemm_desc_equal(&g.d, &plain.d), "dinp + dGELU without its epilogue is the plain dinp");
    tri_gemm_plan_dweight(&g, TRI_BF16, buf, buf + 64, buf + 128, buf + 192, 5, 16, 3);
    tri_gemm_unfuse(&g);
    tri_gemm_plan_dweight(&plain, TRI_BF16, buf, NULL, buf + 128, buf + 192, 5, 16, 3);
    cr_assert(tri_gemm_desc_equal(&g.d, &plain.d), "dweight without BGRADB is the plain dweight");
}

/* The aux matrix's leading dimension and type are part of the key. */
Test(gemm_plan, the_aux_matrix_is_part_of_the_key) {
    _Alignas(64) static float buf[4096];
    tri_gemm_call g;
    int fill;
    tri_gemm_plan_fwd_gelu(&g, &fill, TRI_BF16, buf, buf + 64, buf + 128, buf + 192, buf + 256, 5, 7, 24);
    tri_gemm_desc d = g.d;
    d.auxld = 32;
    cr_assert_not(tri_gemm_desc_equal(&d, &g.d));
    cr_assert_neq(tri_gemm_desc_hash(&d), tri_gemm_desc_hash(&g.d));
    d = g.d;
    d.auxtype = TRI_F32;
    cr_assert_not(tri_gemm_desc_equal(&d, &g.d));
    cr_assert_neq(tri_gemm_desc_hash(&d), tri_gemm_desc_hash(&g.d));
}

/* A search that found nothing: the entry keeps the answer, and the first
 * fallback of each epilogue is noted in one line on stderr, the later ones
 * (another GEMM of that epilogue, or the same again) not at all. */
Test(gemm_plan, a_fallback_is_kept_in_its_entry_and_noted_once_per_epilogue, .init = cr_redirect_stderr) {
    _Alignas(64) static float buf[4096];
    tri_gemm_cache c = {0};
    tri_gemm_call g;
    int fill;
    for (int i = 0; i < 3; i++) {
        tri_gemm_plan_fwd_gelu(&g, &fill, TRI_F32, buf, buf + 64, buf + 128, buf + 192, buf + 256, 5 + i, 7, 24);
        tri_gemm_entry *e = tri_gemm_cache_add(&c, &g.d);
        cr_assert_eq(e->no_algo, 0);
        tri_gemm_cache_fallback(&c, e);
        cr_assert_eq(e->no_algo, 1);
    }
    tri_gemm_plan_dinp_dgelu(&g, &fill, TRI_F32, buf, buf + 64, buf + 128, buf + 192, buf + 256, 5, 16, 3);
    tri_gemm_cache_fallback(&c, tri_gemm_cache_add(&c, &g.d));
    cr_assert_eq(c.noted, (1u << TRI_GEMM_EPI_GELU_AUX_BIAS) | (1u << TRI_GEMM_EPI_DGELU_BGRAD));
    fflush(stderr);
    FILE *f = cr_get_redirected_stderr();
    char l1[1024] = {0}, l2[1024] = {0}, more[64] = {0};
    cr_assert(fgets(l1, sizeof l1, f) != NULL && fgets(l2, sizeof l2, f) != NULL);
    cr_expect(fgets(more, sizeof more, f) == NULL, "a third line: %s", more);
    cr_expect(strncmp(l1, "trident: note: ", 15) == 0, "%s", l1);
    cr_expect(strstr(l1, "no algorithm for the gelu_aux_bias epilogue of the GEMM m 24 n 5 k 7") != NULL, "%s", l1);
    cr_expect(strstr(l2, "dgelu_bgrad epilogue of the GEMM m 16 n 5 k 3") != NULL, "%s", l2);
    tri_gemm_cache_free(&c);
}
