/* Vocab-parallel softmax cross-entropy on CUDA: logits and dlogits of fp32
 * or bf16 storage (the template parameter T: widened as they are read,
 * tri_cu_ld; dlogits rounded once as stored, tri_cu_st), the stats, the
 * gathered stats and the losses fp32, all arithmetic fp32.
 * Contracts: crossentropy_stats / crossentropy_combine / crossentropy_bwd in
 * kernels/ops.h, the entry points in kernels/cuda/kernels.h; the same three
 * steps as kernels/cpu/crossentropy.c.
 *
 * This rank holds logits (N, Vl) for global columns [vstart, vstart + Vl);
 * only columns with global index < V are real: per row the real local columns
 * are [0, Vr), Vr = min(Vl, V - vstart) (0 when vstart >= V). Padded columns
 * are never read.
 *
 * stats: a block per row; each thread keeps an online (max, sum of
 * exponentials) over its columns, and the pairs are merged across the warp by
 * shuffles and across warps through shared memory. NaN logits are skipped by
 * the max and make the sum NaN, as on the CPU. bwd: a block per row, one pass
 * (dlogits may alias logits: every element is read, then written, by one
 * thread; for bf16 too, as an element is 2 bytes of its own). combine: a
 * thread per row. */
#include <math.h>

#include "kernels/cuda/common.cuh"

enum { CE_THREADS = 256, CE_COMBINE_THREADS = 128 };

/* (m, s) merged with (m2, s2): the larger max, the sums rescaled to it. A side
 * with s = 0 (no columns yet, m = -inf) adds nothing: exp(-inf - -inf) would be
 * NaN. */
DEVFN void ce_merge(float &m, float &s, float m2, float s2) {
    const float M = m2 > m ? m2 : m;
    const float a = s != 0.0f ? s * expf(m - M) : 0.0f;
    const float b = s2 != 0.0f ? s2 * expf(m2 - M) : 0.0f;
    m = M;
    s = a + b;
}

DEVFN void warp_merge(float &m, float &s) {
    for (int o = 16; o > 0; o /= 2) {
        const float m2 = __shfl_xor_sync(FULL_MASK, m, o);
        const float s2 = __shfl_xor_sync(FULL_MASK, s, o);
        ce_merge(m, s, m2, s2);
    }
}

/* The local column of global target id, or -1 when this rank does not own it. */
DEVFN long long ce_local_target(int32_t tgt, size_t vstart, size_t Vr) {
    if (tgt < 0 || (size_t)tgt < vstart || (size_t)tgt - vstart >= Vr) return -1;
    return (long long)((size_t)tgt - vstart);
}

/* Row blockIdx.x: stats[3n..3n+2] = (local max, sum of exp(l - max), owned
 * target logit or 0). blockDim.x = CE_THREADS. */
template <typename T>
KERNEL ce_stats_kernel(float *stats, const T *logits, const int32_t *targets, size_t Vl, size_t vstart, size_t Vr) {
    SHARED(float, wm, 32);
    SHARED(float, ws, 32);
    const size_t n = blockIdx.x;
    const T *row = logits + n * Vl;
    float m = -INFINITY, s = 0.0f;
    for (size_t j = threadIdx.x; j < Vr; j += blockDim.x) {
        const float l = tri_cu_ld(row, j);
        if (l > m) { /* a new max (never for NaN): rescale the sum */
            s = (s != 0.0f ? s * expf(m - l) : 0.0f) + 1.0f;
            m = l;
        } else {
            s += expf(l - m);
        }
    }
    warp_merge(m, s);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
    if (lane == 0) {
        wm[warp] = m;
        ws[warp] = s;
    }
    __syncthreads();
    if (warp == 0) {
        m = lane < nw ? wm[lane] : -INFINITY;
        s = lane < nw ? ws[lane] : 0.0f;
        warp_merge(m, s);
        if (lane == 0) {
            const long long lt = ce_local_target(targets[n], vstart, Vr);
            stats[3 * n + 0] = m;
            stats[3 * n + 1] = s;
            stats[3 * n + 2] = lt >= 0 ? tri_cu_ld(row, (size_t)lt) : 0.0f;
        }
    }
}

/* Row n: the global (M, S, target) from the R ranks' (m, s, t) in gather
 * (R, N, 3), as the CPU's combine (a NaN max on any rank wins). */
KERNEL ce_combine_kernel(float *stats, const float *gather, size_t N, int R) {
    const size_t n = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    float M = -INFINITY;
    for (int r = 0; r < R; r++) {
        const float m = gather[((size_t)r * N + n) * 3];
        if (m > M || isnan(m)) M = m;
    }
    float S = 0.0f, t = 0.0f;
    for (int r = 0; r < R; r++) {
        const float *g = gather + ((size_t)r * N + n) * 3;
        if (g[1] != 0.0f) S += g[1] * expf(g[0] - M);
        t += g[2];
    }
    stats[3 * n + 0] = M;
    stats[3 * n + 1] = S;
    stats[3 * n + 2] = t;
}

/* Row n: losses[n] = log S + M - target (losses may be NULL). */
KERNEL ce_loss_kernel(float *losses, const float *stats, size_t N) {
    const size_t n = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    losses[n] = logf(stats[3 * n + 1]) + stats[3 * n + 0] - stats[3 * n + 2];
}

/* Row blockIdx.x: d[j] = exp(l[j] - M) * (dscale / S) for real columns, minus
 * dscale at the owned target; 0 for padded columns. */
template <typename T>
KERNEL ce_grad_kernel(T *dlogits, const T *logits, const float *stats, const int32_t *targets, float dscale, size_t Vl,
                      size_t vstart, size_t Vr) {
    const size_t n = blockIdx.x;
    const float M = stats[3 * n + 0], k = dscale / stats[3 * n + 1];
    const long long lt = ce_local_target(targets[n], vstart, Vr);
    const T *l = logits + n * Vl;
    T *d = dlogits + n * Vl;
    for (size_t j = threadIdx.x; j < Vl; j += blockDim.x) {
        float v = 0.0f;
        if (j < Vr) v = expf(tri_cu_ld(l, j) - M) * k;
        if ((long long)j == lt) v -= dscale;
        tri_cu_st(d, j, v);
    }
}

static size_t real_cols(size_t Vl, size_t vstart, size_t V) {
    if (vstart >= V) return 0;
    return V - vstart < Vl ? V - vstart : Vl;
}

extern "C" void TRI_CU(crossentropy_stats)(void *stream, tri_dtype dt, float *stats, const void *logits,
                                           const int32_t *targets, size_t N, size_t Vl, size_t vstart, size_t V) {
    if (N == 0) return;
    const size_t Vr = real_cols(Vl, vstart, V);
    TRI_CU_DTYPE_SWITCH(dt, "crossentropy_stats", T,
                        LAUNCH(ce_stats_kernel<T>, (unsigned)N, CE_THREADS, 0, stream, stats, (const T *)logits,
                               targets, Vl, vstart, Vr););
}

extern "C" void TRI_CU(crossentropy_combine)(void *stream, float *stats, const float *gather, size_t N, int R) {
    if (N == 0) return;
    LAUNCH(ce_combine_kernel, tri_cu_blocks(N, CE_COMBINE_THREADS), CE_COMBINE_THREADS, 0, stream, stats, gather, N, R);
}

extern "C" void TRI_CU(crossentropy_bwd)(void *stream, tri_dtype dt, float *losses, void *dlogits, const void *logits,
                                         const float *stats, const int32_t *targets, float dscale, size_t N, size_t Vl,
                                         size_t vstart, size_t V) {
    if (N == 0) return;
    if (losses)
        LAUNCH(ce_loss_kernel, tri_cu_blocks(N, CE_COMBINE_THREADS), CE_COMBINE_THREADS, 0, stream, losses, stats, N);
    if (dlogits && Vl > 0) {
        const size_t Vr = real_cols(Vl, vstart, V);
        TRI_CU_DTYPE_SWITCH(dt, "crossentropy_bwd", T,
                            LAUNCH(ce_grad_kernel<T>, (unsigned)N, CE_THREADS, 0, stream, (T *)dlogits,
                                   (const T *)logits, stats, targets, dscale, Vl, vstart, Vr););
    }
}
