/* The tensor-core flash attention (kernels/cuda/attention_tc.cu) and the
 * strided slice entry points (attention_{fwd,bwd}_slice, kernels/cuda/kernels.h)
 * under the emulator, against the CPU's flash attention
 * (tri_cpu_attention_fwd / _bwd, fp32) on bf16-rounded inputs.
 *
 * A case is a whole problem, B sequences of Tk positions with NHt heads of
 * size HS in the caller's packed qkv (B, Tk, 3, NHt, HS) (rows optionally
 * padded by `pad` elements: a caller's wider rows), of which one call
 * computes the heads [h0, h0 + NH) (a tensor-parallel head slice: the views
 * point into the wider rows) and the queries [q0, q0 + Tq) (a query slice:
 * positions q0 + t see keys 0 .. q0 + t of the Tk). The CPU computes the
 * whole problem with dout zero outside the slice's rows, so that its dk and
 * dv are the gradients through the slice's queries only, as the contract
 * says; the kernels' outputs are compared on the slice, and everything
 * outside it must still hold the NaN poison it was filled with.
 * Both sides see the same values: the rounded inputs, and for the backward
 * the CPU's out (rounded to bf16) and its lse.
 *
 * Tolerance, per element, as the bf16 tests of test_cuda_kernels.c derive it:
 * the fp32 tolerance 2 (T + HS + 4) eps (1 + a) times the summed magnitudes
 * behind the value (out_id: sum_j p_ij |v_jd|; dv_jd: sum_i p_ij |dout_id|;
 * dk_jd: scale sum_i p_ij (|dp_ij| + |delta_i|) |q_id|; dq likewise with
 * |k_jd|), plus one bf16 spacing of the value, 2^-7 |want| (both sides round
 * their fp32 result once). The tensor-core kernels round one more thing: the
 * probabilities P (and dS) are rounded to bf16 to be the A operand of the
 * mma (P V, P^T dout, dS^T Q, dS K), each by at most 2^-8 of itself, so each
 * product term moves by at most 2^-8 of its magnitude and the sum by 2^-8
 * times the summed magnitudes above: the tensor-core tolerance adds 2^-8 to
 * the fp32 factor (BF16_U below). It is the only widening, and only where
 * the kernels take the tensor cores (the emulator's mma count says which).
 * (The scores, Q K^T and dout V^T, are exact products of bf16 inputs summed
 * in fp32: the fp32 tolerance. l sums the unrounded p.)
 * The lse is fp32 and keeps the fp32 tolerance. NaN never passes. Another
 * seed and one worker must give the same bits (no atomics). */
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

#define BF16_EPS (1.0 / 128.0) /* one bf16 spacing, relative */
#define BF16_U   (1.0 / 256.0) /* half of it: one rounding to bf16, relative */
#define POISON   0x7fc0u       /* the bf16 NaN outputs are filled with */

static uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static float uniform(uint64_t *s, float lo, float hi) {
    return lo + (hi - lo) * (float)((double)(rng_next(s) >> 11) / 9007199254740992.0);
}

static void *dev_nan(size_t n, size_t es) {
    void *p = dev_alloc(es * (n ? n : 1));
    for (size_t i = 0; i < n; i++) {
        if (es == 2)
            ((uint16_t *)p)[i] = POISON;
        else
            ((float *)p)[i] = NAN;
    }
    return p;
}

/* Element i of a device tensor of dtype dt (bf16 bits or fp32), as a float. */
static float get(const void *p, tri_dtype dt, size_t i) {
    return dt == TRI_BF16 ? tri_bf16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}
static void put(void *p, tri_dtype dt, size_t i, float v) {
    if (dt == TRI_BF16)
        ((uint16_t *)p)[i] = tri_f32_to_bf16(v);
    else
        ((float *)p)[i] = v;
}
static int poisoned(const void *p, tri_dtype dt, size_t i) {
    return dt == TRI_BF16 ? ((const uint16_t *)p)[i] == POISON : isnan(((const float *)p)[i]);
}

/* The magnitudes of the tolerance (above), in double, for the whole problem:
 * sc_o (B*T*C), sc_d (B*T*3C), the lse wlse (B*NH*T); tol = 2 (T + HS + 4) eps
 * (1 + a), a the largest scale sum_d |q_d k_d|. */
typedef struct scales {
    double *sc_o, *sc_d, *wlse, tol;
} scales;

static scales magnitudes(const float *qkv, const float *dout, const float *out, size_t B, size_t T, int NH, int HS) {
    const size_t C = (size_t)NH * (size_t)HS, C3 = 3 * C, BT = B * T;
    const double scale = 1.0 / sqrt((double)HS);
    scales r;
    r.sc_o = calloc(BT * C, sizeof(double)), r.sc_d = calloc(BT * C3, sizeof(double));
    r.wlse = malloc(sizeof(double) * B * (size_t)NH * T);
    double *p = malloc(sizeof(double) * T * T), *dp = malloc(sizeof(double) * T * T), *dl = malloc(sizeof(double) * T);
    double amax = 0.0;
    for (size_t b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *q = qkv + b * T * C3 + (size_t)h * HS, *k = q + C, *v = q + 2 * C;
            const float *dO = dout + b * T * C + (size_t)h * HS, *o = out + b * T * C + (size_t)h * HS;
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
                    p[i * T + j] = dot * scale, dp[i * T + j] = dd;
                    amax = fmax(amax, mag * scale), mx = fmax(mx, dot * scale);
                }
                for (size_t j = 0; j <= i; j++) sum += exp(p[i * T + j] - mx);
                r.wlse[bh * T + i] = mx + log(sum);
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
    r.tol = 2.0 * (double)(T + (size_t)HS + 4) * FLT_EPSILON * (1.0 + amax);
    free(p), free(dp), free(dl);
    return r;
}

/* The largest |got - want| / tolerance of the test so far (each test runs in
 * its own process), for its closing log line. */
static double worst;

/* |got - want| <= ftol sc + (bf16 ? BF16_EPS |want| : 0); NaN fails. */
static void expect_near(const char *what, const char *shape, size_t at, float got, float want, double sc, double ftol,
                        int bf16) {
    const double lim = ftol * sc + (bf16 ? BF16_EPS * fabs((double)want) : 0.0);
    const double err = fabs((double)got - (double)want);
    worst = fmax(worst, err / lim);
    if (!(err <= lim))
        cr_assert_fail("%s %s: element %zu is %.9g, the CPU gives %.9g (|diff| %.3g > tolerance %.3g)", what, shape, at,
                       got, want, err, lim);
}

typedef struct tc_case {
    size_t B, Tk;
    int NHt, HS; /* the caller's heads */
    int h0, NH;  /* the heads of the call */
    size_t q0, Tq;
    size_t pad; /* extra elements at the end of each row of the caller's qkv, dqkv, out and dout */
    int packed; /* through attention_fwd / attention_bwd (the op's layout; the whole problem, no pad) */
    tri_dtype dt;
} tc_case;

/* One case under one scheduling seed (above). Returns the emulator's mma
 * count of the forward, for the callers that check which kernels ran. */
static uint64_t run_case(tc_case c, uint64_t seed) {
    char shape[200];
    snprintf(shape, sizeof shape,
             "(%s, B %zu, Tk %zu, NHt %d, HS %d, heads [%d, %d), queries [%zu, %zu), pad %zu%s, seed %llu)",
             c.dt == TRI_BF16 ? "bf16" : "fp32", c.B, c.Tk, c.NHt, c.HS, c.h0, c.h0 + c.NH, c.q0, c.q0 + c.Tq, c.pad,
             c.packed ? ", packed" : "", (unsigned long long)seed);
    const size_t B = c.B, T = c.Tk, HS = (size_t)c.HS, C = (size_t)c.NHt * HS, C3 = 3 * C, BT = B * T;
    const size_t R3 = C3 + c.pad, R = C + c.pad; /* the caller's row lengths */
    const size_t es = c.dt == TRI_BF16 ? 2 : 4, nl = B * (size_t)c.NH * c.Tq;
    uint64_t s = seed * 7919 + T * 131 + C * 17 + c.q0 * 3 + (size_t)c.h0;

    /* the inputs, rounded to bf16 (for fp32 too: any values do) */
    float *qkv = malloc(sizeof(float) * BT * C3), *dout = calloc(BT * C, sizeof(float));
    for (size_t i = 0; i < BT * C3; i++) qkv[i] = tri_round_bf16(uniform(&s, -1.5f, 1.5f));
    for (size_t b = 0; b < B; b++)
        for (size_t t = c.q0; t < c.q0 + c.Tq; t++)
            for (size_t x = 0; x < C; x++) dout[(b * T + t) * C + x] = tri_round_bf16(uniform(&s, -1.0f, 1.0f));

    /* the CPU: the whole problem */
    float *rout = malloc(sizeof(float) * BT * C), *rlse = malloc(sizeof(float) * B * (size_t)c.NHt * T);
    float *rdqkv = malloc(sizeof(float) * BT * C3);
    float *rscr = malloc(sizeof(float) * (tri_cpu_attention_scratch_floats(B, T, c.NHt, c.NHt, c.HS) + 1));
    tri_cpu_attention_fwd(rout, rlse, qkv, B, T, c.NHt, c.NHt, c.HS);
    scales sc = magnitudes(qkv, dout, rout, B, T, c.NHt, c.HS);
    if (c.dt == TRI_BF16)
        for (size_t i = 0; i < BT * C; i++) rout[i] = tri_round_bf16(rout[i]);
    tri_cpu_attention_bwd(rdqkv, rscr, dout, qkv, rout, rlse, B, T, c.NHt, c.NHt, c.HS);

    /* the device tensors in the caller's layout (padded rows) */
    void *d_qkv = dev_nan(BT * R3, es), *d_dout = dev_nan(BT * R, es), *d_rout = dev_nan(BT * R, es);
    for (size_t r = 0; r < BT; r++) {
        for (size_t x = 0; x < C3; x++) put(d_qkv, c.dt, r * R3 + x, qkv[r * C3 + x]);
        for (size_t x = 0; x < C; x++) put(d_dout, c.dt, r * R + x, dout[r * C + x]);
        for (size_t x = 0; x < C; x++) put(d_rout, c.dt, r * R + x, rout[r * C + x]);
    }
    /* the CPU's lse of the call's heads and queries, (B, NH, Tq) */
    float *d_rlse = dev_alloc(sizeof(float) * (nl ? nl : 1));
    for (size_t b = 0; b < B; b++)
        for (int h = 0; h < c.NH; h++)
            for (size_t t = 0; t < c.Tq; t++)
                d_rlse[(b * c.NH + h) * c.Tq + t] = rlse[(b * c.NHt + c.h0 + h) * T + c.q0 + t];
    const size_t Ro = c.packed ? C : R; /* out's rows: (B, Tq, NHt, HS) of the caller */
    void *d_out = dev_nan(B * c.Tq * Ro, es), *d_dqkv = dev_nan(BT * R3, es);
    float *d_lse = dev_nan(nl, 4), *d_scr = dev_nan(nl, 4);
    const char *q = d_qkv, *hq = q + es * (size_t)c.h0 * HS;
    tri_cu_attn_fwd_args fa = {.B = B, .Tq = c.Tq, .Tk = T, .q0 = c.q0, .NH = c.NH, .HS = c.HS};
    fa.out = (tri_cu_view_out){(char *)d_out + es * (size_t)c.h0 * HS, c.Tq * Ro, Ro};
    fa.lse = d_lse;
    fa.q = (tri_cu_view){hq + es * c.q0 * R3, T * R3, R3};
    fa.k = (tri_cu_view){hq + es * C, T * R3, R3};
    fa.v = (tri_cu_view){hq + es * 2 * C, T * R3, R3};
    char *dq = (char *)d_dqkv + es * (size_t)c.h0 * HS;
    tri_cu_attn_bwd_args ba = {.B = B, .Tq = c.Tq, .Tk = T, .q0 = c.q0, .NH = c.NH, .HS = c.HS};
    ba.dq = (tri_cu_view_out){dq + es * c.q0 * R3, T * R3, R3};
    ba.dk = (tri_cu_view_out){dq + es * C, T * R3, R3};
    ba.dv = (tri_cu_view_out){dq + es * 2 * C, T * R3, R3};
    ba.scratch = d_scr;
    ba.dout = (tri_cu_view){(char *)d_dout + es * (c.q0 * R + (size_t)c.h0 * HS), T * R, R};
    ba.q = fa.q, ba.k = fa.k, ba.v = fa.v;
    ba.out = (tri_cu_view){(char *)d_rout + es * (c.q0 * R + (size_t)c.h0 * HS), T * R, R};
    ba.lse = d_rlse;

    tri_cuemu_stats st0, st1;
    tri_cuemu_set_seed(seed);
    tri_cuemu_stats_get(&st0);
    if (c.packed)
        tri_cuemu_attention_fwd(NULL, c.dt, d_out, d_lse, d_qkv, B, T, c.NH, c.NH, c.HS);
    else
        tri_cuemu_attention_fwd_slice(NULL, c.dt, &fa);
    tri_cuemu_stats_get(&st1);
    const uint64_t mma = st1.mma - st0.mma;
    tri_cuemu_set_seed(seed + 7);
    if (c.packed)
        tri_cuemu_attention_bwd(NULL, c.dt, d_dqkv, d_scr, d_dout, d_qkv, d_rout, d_rlse, B, T, c.NH, c.NH, c.HS);
    else
        tri_cuemu_attention_bwd_slice(NULL, c.dt, &ba);

    /* the tolerance's fp32 factor, with the P rounding where the tensor cores ran */
    const int bf16 = c.dt == TRI_BF16;
    const double ftol = sc.tol + (mma > 0 ? BF16_U : 0.0);
    for (size_t b = 0; b < B; b++)
        for (size_t t = 0; t < c.Tq; t++)
            for (size_t x = 0; x < Ro; x++) {
                const size_t at = (b * c.Tq + t) * Ro + x, h = x / HS;
                if (x < C && h >= (size_t)c.h0 && h < (size_t)(c.h0 + c.NH)) {
                    const size_t w = (b * T + c.q0 + t) * C + x;
                    expect_near("attention_fwd out", shape, at, get(d_out, c.dt, at), rout[w], sc.sc_o[w], ftol, bf16);
                } else {
                    cr_assert(poisoned(d_out, c.dt, at), "attention_fwd %s: out element %zu outside the slice written",
                              shape, at);
                }
            }
    for (size_t b = 0; b < B; b++)
        for (int h = 0; h < c.NH; h++)
            for (size_t t = 0; t < c.Tq; t++) {
                const size_t at = (b * c.NH + h) * c.Tq + t, w = (b * c.NHt + c.h0 + h) * T + c.q0 + t;
                expect_near("attention_fwd lse", shape, at, d_lse[at], (float)sc.wlse[w], 1.0 + fabs(sc.wlse[w]),
                            sc.tol, 0);
            }
    for (size_t b = 0; b < B; b++)
        for (size_t t = 0; t < T; t++)
            for (size_t x = 0; x < R3; x++) {
                const size_t at = (b * T + t) * R3 + x, part = x / C, h = x % C / HS;
                const int mine = x < C3 && h >= (size_t)c.h0 && h < (size_t)(c.h0 + c.NH) &&
                                 (part > 0 || (t >= c.q0 && t < c.q0 + c.Tq)); /* dq: the slice's rows */
                if (mine) {
                    const size_t w = (b * T + t) * C3 + x;
                    expect_near(part == 0   ? "attention_bwd dq"
                                : part == 1 ? "attention_bwd dk"
                                            : "attention_bwd dv",
                                shape, at, get(d_dqkv, c.dt, at), bf16 ? tri_round_bf16(rdqkv[w]) : rdqkv[w],
                                sc.sc_d[w], ftol, bf16);
                } else {
                    cr_assert(poisoned(d_dqkv, c.dt, at),
                              "attention_bwd %s: dqkv element %zu outside the slice written", shape, at);
                }
            }

    /* no atomics: another schedule, one worker, the same bits */
    void *out2 = dev_nan(B * c.Tq * Ro, es), *dqkv2 = dev_nan(BT * R3, es);
    float *lse2 = dev_nan(nl, 4);
    tri_cuemu_set_seed(seed * 977 + 5);
    tri_cuemu_set_workers(1);
    if (c.packed) {
        tri_cuemu_attention_fwd(NULL, c.dt, out2, lse2, d_qkv, B, T, c.NH, c.NH, c.HS);
        tri_cuemu_attention_bwd(NULL, c.dt, dqkv2, d_scr, d_dout, d_qkv, d_rout, d_rlse, B, T, c.NH, c.NH, c.HS);
    } else {
        tri_cu_attn_fwd_args fa2 = fa;
        tri_cu_attn_bwd_args ba2 = ba;
        fa2.out.p = (char *)out2 + es * (size_t)c.h0 * HS, fa2.lse = lse2;
        char *dq2 = (char *)dqkv2 + es * (size_t)c.h0 * HS;
        ba2.dq.p = dq2 + es * c.q0 * R3, ba2.dk.p = dq2 + es * C, ba2.dv.p = dq2 + es * 2 * C;
        tri_cuemu_attention_fwd_slice(NULL, c.dt, &fa2);
        tri_cuemu_attention_bwd_slice(NULL, c.dt, &ba2);
    }
    tri_cuemu_set_workers(2);
    cr_expect(memcmp(out2, d_out, es * B * c.Tq * Ro) == 0 && memcmp(lse2, d_lse, sizeof(float) * nl) == 0,
              "attention_fwd %s: other bits under another schedule", shape);
    cr_expect(memcmp(dqkv2, d_dqkv, es * BT * R3) == 0, "attention_bwd %s: other bits under another schedule", shape);

    dev_free(out2), dev_free(dqkv2), dev_free(lse2);
    dev_free(d_qkv), dev_free(d_dout), dev_free(d_rout), dev_free(d_rlse), dev_free(d_out), dev_free(d_dqkv);
    dev_free(d_lse), dev_free(d_scr);
    free(sc.sc_o), free(sc.sc_d), free(sc.wlse);
    free(qkv), free(dout), free(rout), free(rlse), free(rdqkv), free(rscr);
    return mma;
}

/* The whole problem through the op's entry points. */
static tc_case whole(size_t B, size_t T, int NH, int HS, tri_dtype dt) {
    return (tc_case){.B = B, .Tk = T, .NHt = NH, .HS = HS, .h0 = 0, .NH = NH, .q0 = 0, .Tq = T, .packed = 1, .dt = dt};
}

/* Runs a case under `seeds` seeds and checks which kernels ran: the tensor
 * cores (an mma in the forward) exactly when `tc`. */
static void check_case(tc_case c, int seeds, int tc) {
    for (int k = 1; k <= seeds; k++) {
        const uint64_t mma = run_case(c, (uint64_t)k * 1000003u + 11);
        cr_assert(tc ? mma > 0 : mma == 0, "B %zu T %zu HS %d: %s kernels expected, the forward ran %llu mma", c.B,
                  c.Tk, c.HS, tc ? "tensor-core" : "SIMT", (unsigned long long)mma);
    }
    cr_log_info("largest error so far: %.3g of the tolerance", worst);
}

Test(cuda_attention_tc, dispatch_takes_tensor_cores_for_bf16_head_sizes_64_and_128) {
    cr_expect(tri_cuemu_attention_uses_tensor_cores(TRI_BF16, 64));
    cr_expect(tri_cuemu_attention_uses_tensor_cores(TRI_BF16, 128));
    cr_expect(!tri_cuemu_attention_uses_tensor_cores(TRI_F32, 64));
    cr_expect(!tri_cuemu_attention_uses_tensor_cores(TRI_BF16, 32));
    cr_expect(!tri_cuemu_attention_uses_tensor_cores(TRI_BF16, 96));
}

/* T = 1, below, at and past the 64-row tile, two tiles and a bit; B NH from
 * 1 to 6; 3 seeds each. */
Test(cuda_attention_tc, head_size_64_matches_the_cpu_on_awkward_shapes) {
    const size_t cases[][3] = {{1, 1, 1}, {1, 17, 2}, {2, 63, 1}, {1, 64, 3}, {3, 65, 2}, {1, 130, 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_case(whole(cases[i][0], cases[i][1], (int)cases[i][2], 64, TRI_BF16), 3, 1);
}

Test(cuda_attention_tc, head_size_128_matches_the_cpu_on_awkward_shapes) {
    const size_t cases[][3] = {{1, 1, 1}, {2, 17, 1}, {1, 63, 2}, {1, 64, 1}, {2, 65, 1}, {1, 130, 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_case(whole(cases[i][0], cases[i][1], (int)cases[i][2], 128, TRI_BF16), 3, 1);
}

/* Enough (batch, head) blocks to fill a GPU's SMs (132 on an H100) twice
 * over: 4 x 66 pairs, each its own block of the grid's x. */
Test(cuda_attention_tc, a_grid_filling_count_of_heads_matches_the_cpu) {
    check_case(whole(4, 17, 66, 64, TRI_BF16), 1, 1);
}

/* The tensor-parallel head slice: heads [h0, h0 + NH) of a caller with NHt
 * heads, the strides from the caller's rows (as model/runtime.c would pass a
 * rank's heads of a wider qkv); nothing outside the slice is written. */
Test(cuda_attention_tc, a_head_slice_of_wider_rows_matches_the_cpu) {
    const tc_case cases[] = {
        {.B = 2, .Tk = 65, .NHt = 4, .HS = 64, .h0 = 1, .NH = 2, .q0 = 0, .Tq = 65, .dt = TRI_BF16},
        {.B = 1, .Tk = 33, .NHt = 3, .HS = 128, .h0 = 2, .NH = 1, .q0 = 0, .Tq = 33, .dt = TRI_BF16},
        {.B = 1, .Tk = 40, .NHt = 3, .HS = 64, .h0 = 0, .NH = 2, .q0 = 0, .Tq = 40, .pad = 8, .dt = TRI_BF16},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(cases[i], 2, 1);
}

/* A query slice: queries [q0, q0 + Tq) of Tk keys (context-parallel splits):
 * slices that start inside a tile, end before the keys do, hold one query, or
 * start at 0; dk and dv through these queries only (keys past them: zeros). */
Test(cuda_attention_tc, a_query_slice_matches_the_cpu_on_those_rows) {
    const tc_case cases[] = {
        {.B = 1, .Tk = 130, .NHt = 1, .HS = 64, .h0 = 0, .NH = 1, .q0 = 37, .Tq = 70, .dt = TRI_BF16},
        {.B = 2, .Tk = 65, .NHt = 2, .HS = 64, .h0 = 0, .NH = 2, .q0 = 64, .Tq = 1, .dt = TRI_BF16},
        {.B = 1, .Tk = 100, .NHt = 1, .HS = 64, .h0 = 0, .NH = 1, .q0 = 0, .Tq = 17, .dt = TRI_BF16},
        {.B = 1, .Tk = 90, .NHt = 2, .HS = 128, .h0 = 1, .NH = 1, .q0 = 20, .Tq = 50, .dt = TRI_BF16},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(cases[i], 2, 1);
}

/* What the tensor cores do not take keeps the SIMT kernels, with the same
 * slices: fp32 (the reference; the fp32 tolerance), bf16 of another head
 * size, and bf16 of head size 64 whose caller's rows are not a multiple of 8
 * elements (views cp.async cannot take). */
Test(cuda_attention_tc, the_simt_kernels_take_the_rest_with_the_same_slices) {
    const tc_case cases[] = {
        {.B = 1, .Tk = 70, .NHt = 3, .HS = 64, .h0 = 1, .NH = 2, .q0 = 33, .Tq = 30, .dt = TRI_F32},
        {.B = 2, .Tk = 45, .NHt = 2, .HS = 24, .h0 = 1, .NH = 1, .q0 = 5, .Tq = 40, .dt = TRI_BF16},
        {.B = 1, .Tk = 40, .NHt = 2, .HS = 64, .h0 = 1, .NH = 1, .q0 = 3, .Tq = 30, .pad = 4, .dt = TRI_BF16},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(cases[i], 2, 0);
    check_case(whole(2, 65, 2, 64, TRI_F32), 1, 0);
}
