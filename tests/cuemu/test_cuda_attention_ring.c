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
 * Tolerance: sums of HS products (scores) and of Tk terms (the weighted
 * values, the gradients), in another order and with CUDA's expf / logf
 * against the CPU's: 64 eps (1 + |want|) on values of order 1 (measured far
 * below). A wrong mask, merge or missing term is off by 1e-2 or more. */
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

#define TOL (64.0 * FLT_EPSILON)

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

static void expect_near(const char *what, const float *got, const float *want, size_t n, const char *shape) {
    for (size_t i = 0; i < n; i++) {
        const double err = fabs((double)got[i] - want[i]), lim = TOL * (1.0 + fabs((double)want[i]));
        if (!(err <= lim))
            cr_assert_fail("%s %s: element %zu is %.9g, the CPU block gives %.9g (|diff| %.3g > %.3g)", what, shape, i,
                           got[i], want[i], err, lim);
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
    const void *q_dev = bf16 ? (void *)qkv_h : qkv;
    tri_cuemu_attention_block_fwd(NULL, dt, o_got, l_got, q_dev, bf16 ? (void *)own_h : own, B, T, T, 0, 1, 0, NH, NKV,
                                  HS);
    tri_cpu_attention_block_fwd(o_want, l_want, qkv, own, B, T, T, 0, 1, 0, NH, NKV, HS);
    if (rect) {
        tri_cuemu_attention_block_fwd(NULL, dt, o_got, l_got, q_dev, bf16 ? (void *)kv_h : kv, B, T, Tk, q0, 0, 1, NH,
                                      NKV, HS);
        tri_cpu_attention_block_fwd(o_want, l_want, qkv, kv, B, T, Tk, q0, 0, 1, NH, NKV, HS);
    }
    expect_near("attention_block_fwd o", o_got, o_want, B * T * C, shape);
    expect_near("attention_block_fwd lse", l_got, l_want, B * NH * T, shape);
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
    tri_cuemu_attention_block_bwd(NULL, dt, dq_got, dkv_got, bf16 ? (void *)dout_h : dout, q_dev,
                                  bf16 ? (const void *)blk_h : blk, bf16 ? (void *)out_h : out, l_want, B, T, Tk, q0,
                                  rect == 0, NH, NKV, HS);
    tri_cpu_attention_block_bwd(dq_want, dkv_want, dout, qkv, blk, out, l_want, B, T, Tk, q0, rect == 0, NH, NKV, HS);
    expect_near("attention_block_bwd dqkv", dq_got, dq_want, B * T * W, shape);
    expect_near("attention_block_bwd dkv", dkv_got, dkv_want, B * Tk * KW, shape);
    dev_free(qkv), dev_free(own), dev_free(kv), dev_free(dout), dev_free(out);
    dev_free(o_got), dev_free(l_got), dev_free(o_want), dev_free(l_want);
    dev_free(dq_got), dev_free(dkv_got), dev_free(dq_want), dev_free(dkv_want);
    if (bf16) dev_free(qkv_h), dev_free(own_h), dev_free(kv_h), dev_free(dout_h), dev_free(out_h);
}

Test(cuda_emu_ring, blocks_match_the_cpu_blocks) {
    /* (B, T, NH, NKV, HS): MHA, GQA, MQA; T even (two chunks) */
    const int cases[][5] = {{1, 2, 1, 1, 4}, {2, 6, 4, 4, 8}, {1, 10, 4, 2, 16}, {2, 8, 3, 1, 32}, {1, 4, 2, 2, 64}};
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
