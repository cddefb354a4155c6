/* One block of ring attention on CUDA (context parallelism, model/cp.h):
 * the contracts attention_block_fwd / attention_block_bwd /
 * attention_kv_copy of kernels/ops.h, the entry points in
 * kernels/cuda/kernels.h. Plain SIMT, as kernels/cpu/attention_ring.c: one
 * thread per (batch, query head, query row) for the forward (an online
 * softmax over the block's keys, then the merge by log-sum-exp) and for the
 * query gradient; one thread per (batch, key/value head, key row) for the
 * key and value gradients, which sums over the group's query heads and the
 * query rows in order. Every output element is written by one thread in a
 * fixed order (deterministic, no atomics); fp32 arithmetic, 16-bit inputs
 * widened by tri_cu_ld. Head sizes up to RING_MAX_HS (registers and local
 * memory per thread).
 *
 * bf16 with head size 64 or 128 (16-byte aligned buffers) takes the
 * tensor-core flash attention instead (attention_tc.cu, ring_tc below): the
 * same kernels as cp = 1 on views of the block (queries from row q0 of qkv,
 * keys and values from kv's rows), without the causal mask for a rectangle,
 * the forward's output in fp32 merged by log-sum-exp, the backward adding
 * fp32 gradients, its delta (dout . out per row) in the op's scratch. */
#include <limits.h>
#include <stdint.h>

#include "kernels/cuda/common.cuh"

#include "kernels/cuda/attention.cuh"

enum { RING_THREADS = 128, RING_MAX_HS = 256 };

/* the keys query row i sees in a block of Tk */
DEVFN size_t ring_keys(int causal, size_t i, size_t Tk) { return causal ? (i + 1 < Tk ? i + 1 : Tk) : Tk; }

template <typename S> DEVFN float ring_dot(const S *x, size_t xo, const S *y, size_t yo, int n) {
    float d = 0.0f;
    for (int e = 0; e < n; e++) d = fmaf(tri_cu_ld(x, xo + (size_t)e), tri_cu_ld(y, yo + (size_t)e), d);
    return d;
}

template <typename S>
KERNEL ring_fwd_kernel(float *o, float *lse, const S *qkv, const S *kv, size_t B, size_t T, size_t Tk, size_t q0,
                       int causal, int merge, int NH, int NKV, int HS, float scale) {
    const size_t rows = T - q0, n = B * (size_t)NH * rows;
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n) return;
    const size_t i = q0 + idx % rows, bh = idx / rows, b = bh / (size_t)NH, h = bh % (size_t)NH;
    const size_t kh = h / (size_t)(NH / NKV), hs = (size_t)HS;
    const size_t W = (size_t)(NH + 2 * NKV) * hs, KW = (size_t)(2 * NKV) * hs, C = (size_t)NH * hs;
    const size_t qo = (b * T + i) * W + h * hs, nk = ring_keys(causal, i, Tk);
    if (nk == 0) return;
    float acc[RING_MAX_HS];
    for (size_t e = 0; e < hs; e++) acc[e] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (size_t j = 0; j < nk; j++) {
        const size_t ko = (b * Tk + j) * KW + kh * hs, vo = ko + (size_t)NKV * hs;
        const float s = ring_dot(qkv, qo, kv, ko, HS) * scale, mn = s > m ? s : m;
        const float alpha = expf(m - mn), p = expf(s - mn); /* alpha 0 on the first key */
        l = l * alpha + p;
        for (size_t e = 0; e < hs; e++) acc[e] = fmaf(p, tri_cu_ld(kv, vo + e), acc[e] * alpha);
        m = mn;
    }
    const float inv = 1.0f / l, lb = m + logf(l);
    float *orow = o + (b * T + i) * C + h * hs, *L = lse + bh * T + i;
    if (!merge) {
        for (size_t e = 0; e < hs; e++) orow[e] = acc[e] * inv;
        *L = lb;
        return;
    }
    const float la = *L, mx = la > lb ? la : lb;
    const float lnew = mx + logf(expf(la - mx) + expf(lb - mx));
    const float wa = expf(la - lnew), wb = expf(lb - lnew) * inv;
    for (size_t e = 0; e < hs; e++) orow[e] = orow[e] * wa + acc[e] * wb;
    *L = lnew;
}

/* dQ of one (batch, query head, query row): over the keys it sees */
template <typename S>
KERNEL ring_dq_kernel(float *dqkv, const S *dout, const S *qkv, const S *kv, const S *out, const float *lse, size_t B,
                      size_t T, size_t Tk, size_t q0, int causal, int NH, int NKV, int HS, float scale) {
    const size_t rows = T - q0, n = B * (size_t)NH * rows;
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n) return;
    const size_t i = q0 + idx % rows, bh = idx / rows, b = bh / (size_t)NH, h = bh % (size_t)NH;
    const size_t kh = h / (size_t)(NH / NKV), hs = (size_t)HS;
    const size_t W = (size_t)(NH + 2 * NKV) * hs, KW = (size_t)(2 * NKV) * hs, C = (size_t)NH * hs;
    const size_t qo = (b * T + i) * W + h * hs, oo = (b * T + i) * C + h * hs, nk = ring_keys(causal, i, Tk);
    const float D = ring_dot(dout, oo, out, oo, HS), li = lse[bh * T + i];
    float acc[RING_MAX_HS];
    for (size_t e = 0; e < hs; e++) acc[e] = 0.0f;
    for (size_t j = 0; j < nk; j++) {
        const size_t ko = (b * Tk + j) * KW + kh * hs, vo = ko + (size_t)NKV * hs;
        const float p = expf(ring_dot(qkv, qo, kv, ko, HS) * scale - li);
        const float ds = p * (ring_dot(dout, oo, kv, vo, HS) - D) * scale;
        for (size_t e = 0; e < hs; e++) acc[e] = fmaf(ds, tri_cu_ld(kv, ko + e), acc[e]);
    }
    float *dq = dqkv + qo;
    for (size_t e = 0; e < hs; e++) dq[e] += acc[e];
}

/* dK, dV of one (batch, key/value head, key row): over the group's query
 * heads in order, and the query rows that see it */
template <typename S>
KERNEL ring_dkv_kernel(float *dkv, const S *dout, const S *qkv, const S *kv, const S *out, const float *lse, size_t B,
                       size_t T, size_t Tk, size_t q0, int causal, int NH, int NKV, int HS, float scale) {
    const size_t n = B * (size_t)NKV * Tk;
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n) return;
    const size_t j = idx % Tk, bk = idx / Tk, b = bk / (size_t)NKV, kh = bk % (size_t)NKV;
    const size_t G = (size_t)(NH / NKV), hs = (size_t)HS;
    const size_t W = (size_t)(NH + 2 * NKV) * hs, KW = (size_t)(2 * NKV) * hs, C = (size_t)NH * hs;
    const size_t ko = (b * Tk + j) * KW + kh * hs, vo = ko + (size_t)NKV * hs;
    float dk[RING_MAX_HS], dv[RING_MAX_HS];
    for (size_t e = 0; e < hs; e++) dk[e] = dv[e] = 0.0f;
    const size_t first = causal && j > q0 ? j : q0; /* causal: query i sees key j iff j <= i */
    for (size_t g = 0; g < G; g++) {
        const size_t h = kh * G + g;
        for (size_t i = first; i < T; i++) {
            const size_t qo = (b * T + i) * W + h * hs, oo = (b * T + i) * C + h * hs;
            const float D = ring_dot(dout, oo, out, oo, HS);
            const float p = expf(ring_dot(qkv, qo, kv, ko, HS) * scale - lse[(b * (size_t)NH + h) * T + i]);
            const float ds = p * (ring_dot(dout, oo, kv, vo, HS) - D) * scale;
            for (size_t e = 0; e < hs; e++) {
                dk[e] = fmaf(ds, tri_cu_ld(qkv, qo + e), dk[e]);
                dv[e] = fmaf(p, tri_cu_ld(dout, oo + e), dv[e]);
            }
        }
    }
    for (size_t e = 0; e < hs; e++) {
        dkv[ko + e] += dk[e];
        dkv[vo + e] += dv[e];
    }
}

/* the k and v heads of every row between qkv (rows W apart, after C) and kv */
template <typename E>
KERNEL ring_kv_copy_kernel(E *dst, const E *src, size_t rows, size_t W, size_t C, size_t KW, int to_qkv) {
    const size_t n = rows * KW, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += stride) {
        const size_t r = idx / KW, e = idx % KW;
        if (to_qkv)
            dst[r * W + C + e] = src[idx];
        else
            dst[idx] = src[r * W + C + e];
    }
}

static void ring_check(int NH, int NKV, int HS, size_t T, size_t Tk, size_t q0, int causal, const char *what) {
    if (NH <= 0 || NKV <= 0 || NH % NKV != 0 || HS <= 0)
        tri_cu_fail(what, "NH and NKV must be positive, NKV dividing NH", __FILE__, __LINE__);
    if (HS > RING_MAX_HS) tri_cu_fail(what, "head size above RING_MAX_HS (256)", __FILE__, __LINE__);
    if (q0 > T || (causal && (q0 != 0 || T != Tk)))
        tri_cu_fail(what, "q0 <= T, and a causal block is square from row 0", __FILE__, __LINE__);
}

static unsigned ring_grid(size_t n) { return (unsigned)tri_cu_blocks(n, RING_THREADS); }

/* Whether the block takes the tensor-core kernels: bf16, HS 64 or 128, every
 * buffer 16-byte aligned (the strides, multiples of HS, are multiples of 8). */
static int ring_tc(tri_dtype dt, int HS, const void *const *p, int n) {
    if (!TRI_CU(attention_uses_tensor_cores)(dt, HS)) return 0;
    for (int i = 0; i < n; i++)
        if ((uintptr_t)p[i] % 16 != 0) return 0;
    return 1;
}

/* The geometry of a block as the tensor-core kernels take it: queries rows
 * [q0, T) of qkv (B, T, W, HS) and out / o (B, T, NH, HS), keys and values
 * the Tk rows of kv (B, Tk, 2 NKV, HS); lse (B, NH, T) from row q0. */
static fa_geom ring_geom(size_t B, size_t T, size_t Tk, size_t q0, int causal, int NH, int NKV, int HS) {
    if (T - q0 > INT_MAX || Tk > INT_MAX || B > INT_MAX / (size_t)NH)
        tri_cu_fail("attention_block", "a block of more than INT_MAX rows or pairs", __FILE__, __LINE__);
    const size_t hs = (size_t)HS, W = (size_t)(NH + 2 * NKV) * hs, C = (size_t)NH * hs, KW = (size_t)(2 * NKV) * hs;
    fa_geom g = {};
    g.Tq = (int)(T - q0), g.Tk = (int)Tk, g.q0 = 0, g.NH = NH, g.HS = HS, g.NKV = NKV, g.G = NH / NKV;
    g.BNH = (int)(B * (size_t)NH), g.BNKV = (int)(B * (size_t)NKV);
    g.q_b = T * W, g.q_r = W, g.k_b = g.v_b = Tk * KW, g.k_r = g.v_r = KW;
    g.o_b = T * C, g.o_r = C, g.do_b = T * C, g.do_r = C;
    g.dq_b = T * W, g.dq_r = W, g.dk_b = g.dv_b = Tk * KW, g.dk_r = g.dv_r = KW;
    g.scale = 1.0f / sqrtf((float)HS);
    g.nomask = !causal, g.lse_T = T;
    return g;
}

extern "C" void TRI_CU(attention_block_fwd)(void *stream, tri_dtype dt, float *o, float *lse, const void *qkv,
                                            const void *kv, size_t B, size_t T, size_t Tk, size_t q0, int causal,
                                            int merge, int NH, int NKV, int HS) {
    ring_check(NH, NKV, HS, T, Tk, q0, causal, "attention_block_fwd");
    const size_t n = B * (size_t)NH * (T - q0);
    if (n == 0) return;
    const void *bufs[] = {o, qkv, kv};
    if (Tk > 0 && ring_tc(dt, HS, bufs, 3)) {
        fa_geom g = ring_geom(B, T, Tk, q0, causal, NH, NKV, HS);
        g.merge = merge;
        const size_t W = (size_t)(NH + 2 * NKV) * (size_t)HS, C = (size_t)NH * (size_t)HS;
        const tri_cu_bf16 *k = (const tri_cu_bf16 *)kv;
        TRI_CU(attention_tc_fwd)
        (stream, NULL, o + q0 * C, lse + q0, (const tri_cu_bf16 *)qkv + q0 * W, k, k + (size_t)NKV * (size_t)HS, g);
        return;
    }
    const float scale = 1.0f / sqrtf((float)HS);
    TRI_CU_DTYPE_SWITCH(dt, "attention_block_fwd", S,
                        LAUNCH(ring_fwd_kernel<S>, ring_grid(n), RING_THREADS, 0, stream, o, lse, (const S *)qkv,
                               (const S *)kv, B, T, Tk, q0, causal, merge, NH, NKV, HS, scale););
}

extern "C" void TRI_CU(attention_block_bwd)(void *stream, tri_dtype dt, float *dqkv, float *dkv, float *scratch,
                                            const void *dout, const void *qkv, const void *kv, const void *out,
                                            const float *lse, size_t B, size_t T, size_t Tk, size_t q0, int causal,
                                            int NH, int NKV, int HS) {
    ring_check(NH, NKV, HS, T, Tk, q0, causal, "attention_block_bwd");
    const size_t nq = B * (size_t)NH * (T - q0), nk = B * (size_t)NKV * Tk;
    const void *bufs[] = {dqkv, dkv, dout, qkv, kv, out};
    if (nq > 0 && Tk > 0 && ring_tc(dt, HS, bufs, 6)) {
        const fa_geom g = ring_geom(B, T, Tk, q0, causal, NH, NKV, HS);
        const size_t W = (size_t)(NH + 2 * NKV) * (size_t)HS, C = (size_t)NH * (size_t)HS, KV = (size_t)NKV * HS;
        const tri_cu_bf16 *k = (const tri_cu_bf16 *)kv, *dO = (const tri_cu_bf16 *)dout + q0 * C;
        TRI_CU(attention_delta)(stream, dt, scratch, dO, (const tri_cu_bf16 *)out + q0 * C, g);
        TRI_CU(attention_tc_bwd)
        (stream, NULL, NULL, NULL, dqkv + q0 * W, dkv, dkv + KV, dO, (const tri_cu_bf16 *)qkv + q0 * W, k, k + KV,
         lse + q0, scratch, g);
        return;
    }
    const float scale = 1.0f / sqrtf((float)HS);
    TRI_CU_DTYPE_SWITCH(dt, "attention_block_bwd", S, {
        if (nq > 0)
            LAUNCH(ring_dq_kernel<S>, ring_grid(nq), RING_THREADS, 0, stream, dqkv, (const S *)dout, (const S *)qkv,
                   (const S *)kv, (const S *)out, lse, B, T, Tk, q0, causal, NH, NKV, HS, scale);
        if (nk > 0 && nq > 0)
            LAUNCH(ring_dkv_kernel<S>, ring_grid(nk), RING_THREADS, 0, stream, dkv, (const S *)dout, (const S *)qkv,
                   (const S *)kv, (const S *)out, lse, B, T, Tk, q0, causal, NH, NKV, HS, scale);
    });
}

extern "C" void TRI_CU(attention_kv_copy)(void *stream, void *dst, const void *src, size_t esz, size_t B, size_t T,
                                          int NH, int NKV, int HS, int to_qkv) {
    const size_t hs = (size_t)HS, W = (size_t)(NH + 2 * NKV) * hs, C = (size_t)NH * hs, KW = (size_t)(2 * NKV) * hs;
    const size_t n = B * T * KW;
    if (n == 0) return;
    const size_t blocks = tri_cu_blocks(n, RING_THREADS);
    const unsigned grid = blocks < 4096 ? (unsigned)blocks : 4096u;
    if (esz == 4)
        LAUNCH(ring_kv_copy_kernel<uint32_t>, grid, RING_THREADS, 0, stream, (uint32_t *)dst, (const uint32_t *)src,
               B * T, W, C, KW, to_qkv);
    else if (esz == 2)
        LAUNCH(ring_kv_copy_kernel<uint16_t>, grid, RING_THREADS, 0, stream, (uint16_t *)dst, (const uint16_t *)src,
               B * T, W, C, KW, to_qkv);
    else
        tri_cu_fail("attention_kv_copy", "elements of 2 or 4 bytes only", __FILE__, __LINE__);
}
