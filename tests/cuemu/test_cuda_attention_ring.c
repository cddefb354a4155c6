/* The CUDA kernels of ring attention (kernels/cuda/attention_ring.cu, context
 * parallelism) under the emulation layer, against the CPU's blocks
 * (kernels/cpu/attention_ring.c, themselves proven against the whole
 * sequence's attention in tests/kernels/test_attention_ring.c): the causal
 * own block, the two rectangles of the load-balanced layout (all rows
 * against the first half of the keys; the second half of the rows against
 * all of them), merged into a running output, and the gradients
 * accumulated into buffers pre-filled with random values; MHA, GQA and MQA;
 * fp32 and bf16 storage (bf16: the CPU blocks on the bf16-rounded inputs);
 * two scheduling seeds. attention_kv_copy bit for bit both ways.
 *
 * bf16 with HS 64 (and 128) takes the tensor-core kernels (attention_tc.cu
 * on the block's views; the emulator's mma count checks that they ran).
 *
 * Tolerance: sums of HS products (scores) and of Tk terms (the weighted
 * values, the gradients), in another order and with CUDA's expf / logf
 * against the CPU's: 64 eps (1 + |want|) on values of order 1 (measured far
 * below). The tensor-core kernels also round the probabilities P (and dS)
 * to bf16 as the mma's A operand, each by at most 2^-8 of itself, so a sum
 * moves by at most 2^-8 of the summed magnitudes of its terms (as
 * test_cuda_attention_tc.c derives it), computed here per element in
 * double: out_id: sum_j p_ij |v_jd| over every key the row saw (both
 * blocks, p with the final lse); dv_jd: sum_i p_ij |dout_id|; dk_jd: scale
 * sum_i p_ij (|dp_ij| + |D_i|) |q_id|; dq_id: scale sum_j p_ij (|dp_ij| +
 * |D_i|) |k_jd|; those paths get (2^-8 + 64 eps) times it on top. A wrong
 * mask, merge or missing term is off by 1e-2 or more. */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cuda/kernels.h"
#include "kernels/half.h"
#include "tests/cuemu/cuemu_api.h"
#include "tests/cuemu/dev_mem.h"

#define TOL    (64.0 * FLT_EPSILON)
#define BF16_U (1.0 / 256.0) /* one rounding to bf16, relative */

static float uniform(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(*s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* n random values in device memory; bf16: rounded, with their bf16 bits in *h */
static float *fill(size_t n, uint64_t *s, int bf16, uint16_t **h) {
    float *x = dev_alloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) x[i] = uniform(s);
    if (bf16) {
        *h = dev_alloc(sizeof(uint16_t) * (n ? n : 1));
        for (size_t i = 0; i < n; i++) {
            (*h)[i] = tri_f32_to_bf16(x[i]);
            x[i] = tri_bf16_to_f32((*h)[i]);
        }
    }
    return x;
}

static float *dup(const float *x, size_t n) {
    float *y = dev_alloc(sizeof(float) * (n ? n : 1));
    memcpy(y, x, sizeof(float) * n);
    return y;
}

/* mag: the summed magnitudes behind each element on the tensor-core path (NULL: none) */
static void expect_near(const char *what, const float *got, const float *want, size_t n, const char *shape,
                        const double *mag) {
    for (size_t i = 0; i < n; i++) {
        const double err = fabs((double)got[i] - want[i]);
        const double lim = TOL * (1.0 + fabs((double)want[i])) + (mag ? (BF16_U + TOL) * mag[i] : 0.0);
        if (!(err <= lim))
            cr_assert_fail("%s %s: element %zu is %.9g, the CPU block gives %.9g (|diff| %.3g > %.3g)", what, shape, i,
                           got[i], want[i], err, lim);
    }
}

/* The geometry of one block for the magnitudes: queries [q0, T) of qkv
 * against Tk keys of blk, causal (query i sees key j <= i) or all. */
typedef struct ring_blk {
    const float *qkv, *blk;
    size_t T, Tk, q0;
    int causal;
} ring_blk;

static double dotd(const float *x, const float *y, int n) {
    double d = 0;
    for (int e = 0; e < n; e++) d += (double)x[e] * y[e];
    return d;
}

/* Adds to mo (B, T, NH, HS) sum_j p_ij |v_jd| over the block's keys, p from
 * the final lse L (B, NH, T); with dout and out (the backward), to mq (B, T,
 * W, HS: the q heads) and mk (B, Tk, 2 NKV, HS) the dq and dk/dv magnitudes. */
static void ring_mags(const ring_blk *k, size_t B, int NH, int NKV, int HS, const float *L, double *mo,
                      const float *dout, const float *out, double *mq, double *mk) {
    const size_t W = (size_t)(NH + 2 * NKV) * HS, C = (size_t)NH * HS, KW = (size_t)(2 * NKV) * HS;
    const double scale = 1.0 / sqrt((double)HS);
    for (size_t b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const int kh = h / (NH / NKV);
            for (size_t i = k->q0; i < k->T; i++) {
                const float *q = k->qkv + (b * k->T + i) * W + (size_t)h * HS;
                const size_t n = k->causal ? i + 1 : k->Tk, oo = (b * k->T + i) * C + (size_t)h * HS;
                const double Li = L[(b * NH + h) * k->T + i], D = dout ? dotd(dout + oo, out + oo, HS) : 0;
                for (size_t j = 0; j < n; j++) {
                    const float *kj = k->blk + (b * k->Tk + j) * KW + (size_t)kh * HS, *vj = kj + (size_t)NKV * HS;
                    const double p = exp(dotd(q, kj, HS) * scale - Li);
                    if (!dout) {
                        for (int d = 0; d < HS; d++) mo[oo + d] += p * fabs(vj[d]);
                        continue;
                    }
                    const double ds = p * (fabs(dotd(dout + oo, vj, HS)) + fabs(D)) * scale;
                    double *mkj = mk + (b * k->Tk + j) * KW + (size_t)kh * HS, *mvj = mkj + (size_t)NKV * HS;
                    double *mqi = mq + (b * k->T + i) * W + (size_t)h * HS;
                    for (int d = 0; d < HS; d++) {
                        mvj[d] += p * fabs(dout[oo + d]);
                        mkj[d] += ds * fabs(q[d]);
                        mqi[d] += ds * fabs(kj[d]);
                    }
                }
            }
        }
}

/* One block (causal or a rectangle) merged into a running output that a
 * first (causal) block started, then its backward, for B sequences of T
 * rows against Tk keys. */
static void ring_case(size_t B, size_t T, int NH, int NKV, int HS, int rect, uint64_t seed, int bf16) {
    char shape[160];
    const size_t Tk = rect == 2 ? T : rect == 1 ? T / 2 : T, q0 = rect == 2 ? T / 2 : 0;
    snprintf(shape, sizeof shape, "(B %zu, T %zu, NH %d, NKV %d, HS %d, %s, seed %llu%s)", B, T, NH, NKV, HS,
             rect == 0   ? "causal"
             : rect == 1 ? "all rows x first half"
                         : "second half x all keys",
             (unsigned long long)seed, bf16 ? ", bf16" : "");
    const tri_dtype dt = bf16 ? TRI_BF16 : TRI_F32;
    const size_t W = (size_t)(NH + 2 * NKV) * HS, C = (size_t)NH * HS, KW = (size_t)(2 * NKV) * HS;
    uint64_t s = seed * 7919 + T * 31 + (uint64_t)HS + (uint64_t)rect;
    uint16_t *qkv_h = NULL, *kv_h = NULL, *own_h = NULL, *dout_h = NULL, *out_h = NULL;
    float *qkv = fill(B * T * W, &s, bf16, &qkv_h), *own = fill(B * T * KW, &s, bf16, &own_h);
    float *kv = fill(B * Tk * KW, &s, bf16, &kv_h), *dout = fill(B * T * C, &s, bf16, &dout_h);
    /* forward: the own block (causal, overwrite), then this block merged */
    float *o_got = dev_calloc(B * T * C, sizeof(float)), *l_got = dev_calloc(B * NH * T, sizeof(float));
    float *o_want = dev_calloc(B * T * C, sizeof(float)), *l_want = dev_calloc(B * NH * T, sizeof(float));
    tri_cuemu_set_seed(seed);
    const int tc = bf16 && (HS == 64 || HS == 128); /* the tensor-core kernels take the block */
    tri_cuemu_stats st0, st1;
    tri_cuemu_stats_get(&st0);
    const void *q_dev = bf16 ? (void *)qkv_h : qkv;
    tri_cuemu_attention_block_fwd(NULL, dt, o_got, l_got, q_dev, bf16 ? (void *)own_h : own, B, T, T, 0, 1, 0, NH, NKV,
                                  HS);
    tri_cpu_attention_block_fwd(o_want, l_want, qkv, own, B, T, T, 0, 1, 0, NH, NKV, HS);
    if (rect) {
        tri_cuemu_attention_block_fwd(NULL, dt, o_got, l_got, q_dev, bf16 ? (void *)kv_h : kv, B, T, Tk, q0, 0, 1, NH,
                                      NKV, HS);
        tri_cpu_attention_block_fwd(o_want, l_want, qkv, kv, B, T, Tk, q0, 0, 1, NH, NKV, HS);
    }
    tri_cuemu_stats_get(&st1);
    cr_expect_eq(st1.mma > st0.mma, tc, "%s: mma %llu (tensor cores expected: %d)", shape,
                 (unsigned long long)(st1.mma - st0.mma), tc);
    double *mo = tc ? calloc(B * T * C, sizeof(double)) : NULL;
    const ring_blk own_b = {qkv, own, T, T, 0, 1}, rect_b = {qkv, kv, T, Tk, q0, 0};
    if (tc) {
        cr_assert_not_null(mo);
        ring_mags(&own_b, B, NH, NKV, HS, l_want, mo, NULL, NULL, NULL, NULL);
        if (rect) ring_mags(&rect_b, B, NH, NKV, HS, l_want, mo, NULL, NULL, NULL, NULL);
    }
    expect_near("attention_block_fwd o", o_got, o_want, B * T * C, shape, mo);
    expect_near("attention_block_fwd lse", l_got, l_want, B * NH * T, shape, NULL);
    free(mo);
    /* backward of the merged block against the final output (as stored: bf16 rounded) */
    float *out = dup(o_want, B * T * C);
    if (bf16) {
        out_h = dev_alloc(sizeof(uint16_t) * B * T * C);
        for (size_t i = 0; i < B * T * C; i++) out_h[i] = tri_f32_to_bf16(out[i]), out[i] = tri_bf16_to_f32(out_h[i]);
    }
    const float *blk = rect ? kv : own;
    const uint16_t *blk_h = rect ? kv_h : own_h;
    float *dq_got = fill(B * T * W, &s, 0, NULL), *dkv_got = fill(B * Tk * KW, &s, 0, NULL);
    float *dq_want = dup(dq_got, B * T * W), *dkv_want = dup(dkv_got, B * Tk * KW);
    tri_cuemu_set_seed(seed + 5);
    float *scratch_d = fill(B * NH * T, &s, 0, NULL); /* the device's scratch: B NH T (the delta), NaN-free noise */
    float *scratch_h = tri_cpu_alloc(tri_cpu_attention_scratch_floats(B, T, NH, NKV, HS) * sizeof(float));
    cr_assert_not_null(scratch_h);
    tri_cuemu_attention_block_bwd(NULL, dt, dq_got, dkv_got, scratch_d, bf16 ? (void *)dout_h : dout, q_dev,
                                  bf16 ? (const void *)blk_h : blk, bf16 ? (void *)out_h : out, l_want, B, T, Tk, q0,
                                  rect == 0, NH, NKV, HS);
    tri_cpu_attention_block_bwd(dq_want, dkv_want, scratch_h, dout, qkv, blk, out, l_want, B, T, Tk, q0, rect == 0, NH,
                                NKV, HS);
    dev_free(scratch_d);
    tri_cpu_free(scratch_h);
    double *mq = tc ? calloc(B * T * W, sizeof(double)) : NULL, *mk = tc ? calloc(B * Tk * KW, sizeof(double)) : NULL;
    if (tc) {
        cr_assert(mq && mk);
        ring_mags(rect ? &rect_b : &own_b, B, NH, NKV, HS, l_want, NULL, dout, out, mq, mk);
    }
    expect_near("attention_block_bwd dqkv", dq_got, dq_want, B * T * W, shape, mq);
    expect_near("attention_block_bwd dkv", dkv_got, dkv_want, B * Tk * KW, shape, mk);
    free(mq), free(mk);
    dev_free(qkv), dev_free(own), dev_free(kv), dev_free(dout), dev_free(out);
    dev_free(o_got), dev_free(l_got), dev_free(o_want), dev_free(l_want);
    dev_free(dq_got), dev_free(dkv_got), dev_free(dq_want), dev_free(dkv_want);
    if (bf16) dev_free(qkv_h), dev_free(own_h), dev_free(kv_h), dev_free(dout_h), dev_free(out_h);
}

Test(cuda_emu_ring, blocks_match_the_cpu_blocks) {
    /* (B, T, NH, NKV, HS): MHA, GQA, MQA; T even (two chunks) */
    const int cases[][5] = {{1, 2, 1, 1, 4},   {2, 6, 4, 4, 8},   {1, 10, 4, 2, 16},
                            {2, 8, 3, 1, 32},  {1, 4, 2, 2, 64},  {2, 70, 4, 2, 64},
                            {1, 132, 2, 1, 64}, {1, 36, 2, 2, 128}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int rect = 0; rect <= 2; rect++)
            for (uint64_t seed = 1; seed <= 2; seed++)
                for (int bf16 = 0; bf16 <= 1; bf16++)
                    ring_case((size_t)cases[c][0], (size_t)cases[c][1], cases[c][2], cases[c][3], cases[c][4], rect,
                              seed, bf16);
}

Test(cuda_emu_ring, kv_copy_moves_the_k_and_v_heads_bit_for_bit) {
    const size_t B = 2, T = 5;
    const int NH = 4, NKV = 2, HS = 8;
    const size_t W = (size_t)(NH + 2 * NKV) * HS, C = (size_t)NH * HS, KW = (size_t)(2 * NKV) * HS;
    uint64_t s = 3;
    for (int esz = 2; esz <= 4; esz += 2) {
        unsigned char *qkv = dev_alloc(B * T * W * (size_t)esz), *kv = dev_alloc(B * T * KW * (size_t)esz);
        unsigned char *back = dev_alloc(B * T * W * (size_t)esz);
        for (size_t i = 0; i < B * T * W * (size_t)esz; i++) qkv[i] = (unsigned char)(uniform(&s) * 127 + 128);
        memset(back, 0xab, B * T * W * (size_t)esz);
        tri_cuemu_attention_kv_copy(NULL, kv, qkv, (size_t)esz, B, T, NH, NKV, HS, 0);
        tri_cuemu_attention_kv_copy(NULL, back, kv, (size_t)esz, B, T, NH, NKV, HS, 1);
        for (size_t r = 0; r < B * T; r++) {
            cr_expect(memcmp(kv + r * KW * esz, qkv + (r * W + C) * esz, KW * esz) == 0, "esz %d row %zu packed", esz,
                      r);
            cr_expect(memcmp(back + (r * W + C) * esz, qkv + (r * W + C) * esz, KW * esz) == 0, "esz %d row %zu back",
                      esz, r);
            for (size_t e = 0; e < C * (size_t)esz; e++) /* the q heads untouched */
                cr_expect(back[r * W * esz + e] == 0xab, "esz %d row %zu q byte %zu written", esz, r, e);
        }
        dev_free(qkv), dev_free(kv), dev_free(back);
    }
}
