/* Shared inside kernels/cpu/: the CPU ops' prototypes (each documented in
 * kernels/ops.h, where the table's fields state the contracts) and the small
 * inline helpers several op files use.
 *
 * Numerical conventions of the CPU backend:
 *   - fp32 storage and arithmetic; sums over long axes are done in one fixed
 *     order that does not depend on the thread count (column blocks, or fixed
 *     chunks reduced in index order), so every op gives bitwise identical
 *     results run to run; only OpenBLAS's GEMMs depend on the thread count;
 *   - no float atomics, no dynamic scheduling;
 *   - exp is vec_expf below (<= 1.5 ulp); its vector twin vec_expf_v (vec.h)
 *     gives the same bits lane by lane, so a loop's vector body and scalar
 *     tail agree;
 *   - the exp-heavy loops (GELU, softmax, cross-entropy) are vectorised by
 *     hand through vec.h (AVX-512 or AVX2+FMA), because gcc leaves them scalar
 *     on AVX2-only machines (see vec.h). */
#ifndef TRI_CPU_INTERNAL_H
#define TRI_CPU_INTERNAL_H

#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/vec.h"
#include "kernels/ctx.h"
#include "base/err.h"

/* The CPU backend's state (ctx->backend): the host scratch that the 16-bit
 * emulation widens tensors into (one op at a time per context), grown as
 * needed. The plain "cpu" backend has none (NULL) until its first 16-bit op
 * asks for scratch; the "cpu-guard" backend's state begins with one (guard.c),
 * so that ctx->backend points at a tri_cpu_state under both. */
typedef struct tri_cpu_state {
    float *scratch;
    size_t scratch_floats;
} tri_cpu_state;

/* precision.c: the 16-bit emulation (docs/precision.md) */
/* At least `floats` floats of c's scratch, 64-byte aligned; valid until the
 * next call. Fails the program (TRI_FAIL) when host memory runs out. */
float *tri_cpu_scratch(tri_ctx *c, size_t floats);
/* Frees the scratch of s (NULL-safe), not s itself. */
void tri_cpu_state_release(tri_cpu_state *s);
/* dst (n) fp32 = src (n) of t (F32, BF16, F16), exact. */
void tri_cpu_widen(float *dst, const void *src, tri_dtype t, size_t n);
/* dst (n) of t = src (n) fp32, rounded to nearest even. */
void tri_cpu_narrow(void *dst, tri_dtype t, const float *src, size_t n);
/* The cast op (kernels/ops.h). */
void tri_cpu_cast(void *dst, tri_dtype dst_t, const void *src, tri_dtype src_t, size_t n);

/* An OpenMP loop is worth starting only above this much work (elements). */
#define TRI_CPU_PAR_MIN 16384

/* memory (elementwise.c) */
void *tri_cpu_alloc(size_t bytes);
void tri_cpu_free(void *p);
void tri_cpu_copy(void *dst, const void *src, size_t bytes);
void tri_cpu_zero(void *p, size_t bytes);
void tri_cpu_sync(void);

/* matmul.c */
void tri_cpu_matmul_fwd(float *out, const float *inp, const float *weight, const float *bias, size_t N, size_t C,
                        size_t OC);
void tri_cpu_matmul_bwd(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                        const float *weight, size_t N, size_t C, size_t OC);

/* layernorm.c */
void tri_cpu_layernorm_fwd(float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
                           size_t N, size_t C);
void tri_cpu_layernorm_bwd(float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                           const float *mean, const float *rstd, size_t N, size_t C);

/* attention.c: flash-style attention, saving only the row
 * log-sum-exp (B, NH, T); the backward recomputes the probabilities. The
 * core takes the keys and values from their own rows, so that one kernel
 * serves the whole causal sequence (attention_fwd/bwd: keys inside qkv) and
 * ring attention's blocks (attention_ring.c: a (B, Tk, 2 NKV, HS) block). */
typedef struct tri_cpu_fa {
    const float *qkv; /* (B, T, NH + 2 NKV, HS): the queries of rows [q0, T)         */
    const float *kv;  /* key head kh of key j of sequence b at kv + (b Tk + j) ks + kh HS,
                       * its value NKV HS further                                     */
    size_t ks;        /* floats from one key row to the next                          */
    size_t B, T, Tk, q0;
    int causal; /* query i sees keys j <= i (then q0 == 0, Tk == T); 0: all Tk keys */
    int NH, NKV, HS;
} tri_cpu_fa;
/* out (B, T, NH, HS) and lse (B, NH, T), rows [q0, T): merge 0 [overwrite];
 * 1 [merged with the running (out, lse) of the keys before, as if one
 * softmax had seen them all]. */
void tri_cpu_fa_fwd(const tri_cpu_fa *a, float *out, float *lse, int merge);
/* dqkv's q heads of rows [q0, T) and dkv (laid out as a->kv, rows ks apart,
 * from key head 0): accumulate 0 [overwrite: dqkv's q heads and every key's
 * dk, dv]; 1 [accumulate]. out and lse are the final ones; scratch holds
 * tri_cpu_attention_scratch_floats(B, T, NH, NKV, HS) floats. */
void tri_cpu_fa_bwd(const tri_cpu_fa *a, float *dqkv, float *dkv, int accumulate, float *scratch, const float *dout,
                    const float *out, const float *lse);
void tri_cpu_attention_fwd(float *out, float *lse, const float *qkv, size_t B, size_t T, int NH, int NKV, int HS);
void tri_cpu_attention_bwd(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *out,
                           const float *lse, size_t B, size_t T, int NH, int NKV, int HS);
size_t tri_cpu_attention_scratch_floats(size_t B, size_t T, int NH, int NKV, int HS);
/* attention_ring.c: one block of ring attention (kernels/ops.h) in fp32 */
void tri_cpu_attention_block_fwd(float *o, float *lse, const float *qkv, const float *kv, size_t B, size_t T, size_t Tk,
                                 size_t q0, int causal, int merge, int NH, int NKV, int HS);
void tri_cpu_attention_block_bwd(float *dqkv, float *dkv, float *scratch, const float *dout, const float *qkv,
                                 const float *kv, const float *out, const float *lse, size_t B, size_t T, size_t Tk,
                                 size_t q0, int causal, int NH, int NKV, int HS);
void tri_cpu_attention_kv_copy(void *dst, const void *src, size_t esz, size_t B, size_t T, int NH, int NKV, int HS,
                               int to_qkv);

/* rmsnorm.c, rope.c, swiglu.c: the Llama ops */
void tri_cpu_rmsnorm_fwd(float *out, float *rstd, const float *inp, const float *w, size_t N, size_t C, float eps);
void tri_cpu_rmsnorm_bwd(float *dinp, float *dw, const float *dout, const float *inp, const float *w, const float *rstd,
                         size_t N, size_t C);
void tri_cpu_rope_fwd(float *qkv, const float *inv_freq, size_t B, size_t T, int NH, int NKV, int HS, size_t pos0);
void tri_cpu_rope_bwd(float *dqkv, const float *inv_freq, size_t B, size_t T, int NH, int NKV, int HS, size_t pos0);
void tri_cpu_swiglu_fwd(float *out, const float *inp, size_t N, size_t F);
void tri_cpu_swiglu_bwd(float *dinp, const float *inp, const float *dout, size_t N, size_t F);

/* gelu.c */
void tri_cpu_gelu_fwd(float *out, const float *inp, size_t N);
void tri_cpu_gelu_bwd(float *dinp, const float *inp, const float *dout, size_t N);

/* elementwise.c */
void tri_cpu_residual_fwd(float *out, const float *res, const float *x, const float *bias, size_t N, size_t C);
void tri_cpu_bias_bwd(float *dbias, const float *dout, size_t N, size_t C);
double tri_cpu_sumsq(const float *x, size_t n);
double tri_cpu_sum(const float *x, size_t n);
void tri_cpu_scale(float *x, float s, size_t n);
void tri_cpu_add(float *y, const float *x, size_t n);

/* embedding.c */
void tri_cpu_embedding_fwd(float *out, const int32_t *ids, const float *wte, const float *wpe, size_t B, size_t T,
                           size_t C, size_t vstart, size_t Vl);
void tri_cpu_embedding_bwd(float *dwte, float *dwpe, const float *dout, const int32_t *ids, size_t B, size_t T,
                           size_t C, size_t vstart, size_t Vl);

/* crossentropy.c */
void tri_cpu_crossentropy_stats(float *stats, const float *logits, const int32_t *targets, size_t N, size_t Vl,
                                size_t vstart, size_t V);
void tri_cpu_crossentropy_combine(float *stats, const float *gather, size_t N, int R);
void tri_cpu_crossentropy_bwd(float *losses, float *dlogits, const float *logits, const float *stats,
                              const int32_t *targets, float dscale, size_t N, size_t Vl, size_t vstart, size_t V);

/* adamw.c */
void tri_cpu_adamw(float *param, float *m, float *v, const float *grad, size_t n, float lr, float beta1, float beta2,
                   float eps, float wd, int t);

/* dsum (C) += column sums of x (N, C), each column summed over rows in index
 * order (deterministic for any thread count). Used by matmul_bwd and bias_bwd. */
void tri_cpu_colsum_acc(float *dsum, const float *x, size_t N, size_t C);

/* Streaming loops over large arrays go in chunks of TRI_CPU_CHUNK floats
 * (4 KiB) and ask for the next chunk's cache lines before working on the
 * current one. On these machines the hardware prefetcher alone leaves the
 * exp-heavy and in-place streams waiting on memory (measured: the in-place
 * cross-entropy gradient pass ran 2.4x faster with it). */
#define TRI_CPU_CHUNK 1024

static inline void prefetch_read(const float *p, size_t n) {
    for (size_t q = 0; q < n; q += 16) /* 16 floats: one 64-byte line */
        __builtin_prefetch(p + q, 0, 3);
}

static inline void prefetch_write(float *p, size_t n) {
    for (size_t q = 0; q < n; q += 16) __builtin_prefetch(p + q, 1, 3);
}

/* The length of the chunk after the one starting at i0, within [0, n). */
static inline size_t next_chunk_len(size_t i0, size_t n) {
    const size_t next = i0 + TRI_CPU_CHUNK;
    if (next >= n) return 0;
    return n - next < TRI_CPU_CHUNK ? n - next : TRI_CPU_CHUNK;
}

/* e^x in fp32 for every x: relative error <= 1.5 ulp where the result is a
 * normal float, 0 below -103.97, +inf above ln(FLT_MAX), NaN stays NaN.
 * Branch-free and integer-punned through memcpy so that gcc -O3 vectorises
 * loops that call it (glibc's expf does not vectorise without -ffast-math).
 * Method: x = k ln2 + r with |r| <= ln2/2 (two-constant reduction with FMA),
 * e^r by its degree-7 Taylor polynomial (truncation < 1e-8 relative), and
 * 2^k built from exponent bits as 2^(k/2) * 2^(k - k/2) so that k in
 * [-150, 128] never leaves the normal range in either factor. */
static inline float vec_expf(float x) {
    const float lo = -103.97f, hi = 88.7228f;
    float xc = x < lo ? lo : x; /* comparisons keep NaN as it is */
    xc = xc > hi ? hi : xc;
    const float t = xc * 1.44269504088896341f;
    const float big = t + 12582912.0f; /* 1.5 * 2^23: rounds t to an integer k */
    const float kf = big - 12582912.0f;
    int32_t bits;
    memcpy(&bits, &big, sizeof bits);
    const int32_t k = bits - 0x4B400000; /* k in the low mantissa bits */
    const int32_t k1 = k >> 1, k2 = k - k1;
    /* biased exponents k1 + 127, k2 + 127 lie in [52, 191]: shift as unsigned */
    const int32_t e1 = (int32_t)((uint32_t)(k1 + 127) << 23);
    const int32_t e2 = (int32_t)((uint32_t)(k2 + 127) << 23);
    float s1, s2;
    memcpy(&s1, &e1, sizeof s1);
    memcpy(&s2, &e2, sizeof s2);
    float r = fmaf(-kf, 0.693145751953125f, xc); /* ln2 high part: exact product */
    r = fmaf(-kf, 1.428606820309417232e-6f, r);  /* ln2 low part */
    float p = 1.0f / 5040.0f;
    p = fmaf(p, r, 1.0f / 720.0f);
    p = fmaf(p, r, 1.0f / 120.0f);
    p = fmaf(p, r, 1.0f / 24.0f);
    p = fmaf(p, r, 1.0f / 6.0f);
    p = fmaf(p, r, 0.5f);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    float y = (p * s1) * s2;
    y = x < lo ? 0.0f : y;
    y = x > hi ? INFINITY : y;
    return y;
}

/* ---- row helpers of the softmax-like loops (vector bodies, scalar tails) ----
 * Sums run in VF_N lane sums added in a fixed order, then the tail: the same
 * order for any thread count. */

/* The largest of x[0, n), NaN ignored (as by x > m ? x : m); -inf if none. */
static inline float row_max(const float *x, size_t n) {
    float m = -INFINITY;
    size_t j = 0;
#ifdef TRI_CPU_VEC
    if (n >= VF_N) {
        vf acc = vf_set1(-INFINITY);
        for (; j + VF_N <= n; j += VF_N) acc = vf_max(vf_load(x + j), acc); /* x > acc ? x : acc */
        m = vf_hmax(acc);
    }
#endif
    for (; j < n; j++) m = x[j] > m ? x[j] : m;
    return m;
}

/* sum over j < n of exp(x[j] - m) */
static inline float row_sumexp(const float *x, size_t n, float m) {
    float s = 0.0f;
    size_t j = 0;
#ifdef TRI_CPU_VEC
    if (n >= VF_N) {
        const vf mv = vf_set1(m);
        vf acc = vf_zero();
        for (; j + VF_N <= n; j += VF_N) acc = vf_add(acc, vec_expf_v(vf_sub(vf_load(x + j), mv)));
        s = vf_hsum(acc);
    }
#endif
    for (; j < n; j++) s += vec_expf(x[j] - m);
    return s;
}

/* x[j] = exp(x[j] - m) for j < n, in place; returns their sum */
static inline float row_exp_sum_inplace(float *x, size_t n, float m) {
    float s = 0.0f;
    size_t j = 0;
#ifdef TRI_CPU_VEC
    if (n >= VF_N) {
        const vf mv = vf_set1(m);
        vf acc = vf_zero();
        for (; j + VF_N <= n; j += VF_N) {
            const vf e = vec_expf_v(vf_sub(vf_load(x + j), mv));
            vf_store(x + j, e);
            acc = vf_add(acc, e);
        }
        s = vf_hsum(acc);
    }
#endif
    for (; j < n; j++) {
        x[j] = vec_expf(x[j] - m);
        s += x[j];
    }
    return s;
}

/* y[j] = exp(x[j] - m) * k for j < n (y may equal x, not overlap it otherwise) */
static inline void row_exp_scale(float *y, const float *x, size_t n, float m, float k) {
    size_t j = 0;
#ifdef TRI_CPU_VEC
    const vf mv = vf_set1(m), kv = vf_set1(k);
    for (; j + VF_N <= n; j += VF_N) vf_store(y + j, vf_mul(vec_expf_v(vf_sub(vf_load(x + j), mv)), kv));
#endif
    for (; j < n; j++) y[j] = vec_expf(x[j] - m) * k;
}

#endif
