/* Causal multi-head self-attention on CUDA, flash-style, fp32 or bf16
 * storage of qkv, out, dout and dqkv (the template parameter S; the tiles in
 * shared memory, the arithmetic, lse and the scratch are fp32: tensors are
 * widened as they are loaded (common.cuh's tri_cu_ld) and each output is
 * rounded once as it is stored (tri_cu_st)).
 * Contracts: attention_fwd / attention_bwd in kernels/ops.h, the entry points
 * in kernels/cuda/kernels.h. The (T, T) probabilities are never stored: the
 * forward keeps one log-sum-exp per row (the saved state, (B, NH, T)), the
 * backward recomputes the probabilities from q, k and it.
 *
 * Layouts (C = NH * HS), as kernels/cpu/attention.c:
 *   qkv  (B, T, 3, NH, HS): q of head h at h*HS, k at C + h*HS, v at 2C + h*HS;
 *   out  (B, T, NH, HS);  lse (B, NH, T): log sum_{j<=i} exp(s_ij),
 *   s_ij = q_i . k_j / sqrt(HS).
 *
 * Work: a block of FA_TILE threads per (tile of FA_TILE rows, head, batch);
 * each thread owns one row (a query in the forward and in dq, a key in
 * dk/dv) and keeps its vectors in shared memory with a padded stride (HS + 1:
 * no bank conflicts between the threads' rows); the other side's tiles are
 * loaded together and read by all threads at the same address (broadcast).
 *
 * Forward: online softmax over key tiles: per tile the row's scores, their
 * max, one rescale of the running sum and output, then the tile's p * v.
 * Backward, three launches and no atomics (every output element is written
 * by one thread, in a fixed order: deterministic):
 *   1. delta_i = dout_i . out_i   (into scratch, (B, NH, T));
 *   2. per key j: dv_j = sum_{i>=j} p_ij dout_i,  dk_j = scale sum_i ds_ij q_i;
 *   3. per query i: dq_i = scale sum_{j<=i} ds_ij k_j;
 * with p_ij = exp(s_ij - lse_i), ds_ij = p_ij (dout_i . v_j - delta_i).
 * Shared memory grows with HS: about 0.5 KiB (forward) and 0.75 KiB
 * (backward) per unit of HS; beyond 48 KiB the kernels ask for the opt-in
 * limit (HS <= 128 fits every sm_80 / sm_90 part). */
#include <math.h>

#include "kernels/cuda/common.cuh"

enum { FA_TILE = 32, FA_DELTA_THREADS = 128 };

#if defined(__CUDACC__)
#define FA_UNROLL _Pragma("unroll")
/* Dynamic shared memory above the default 48 KiB needs the kernel's opt-in. */
#define FA_SMEM_OPTIN(kernel, bytes)                                                                                 \
    do {                                                                                                             \
        if ((bytes) > 48 * 1024)                                                                                     \
            TRI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)(bytes))); \
    } while (0)
#else
#define FA_UNROLL
#define FA_SMEM_OPTIN(kernel, bytes) ((void)(bytes))
#endif

/* Rows [r0, r0 + FA_TILE) of a (T, HS) slab with row stride ld into dst (row
 * stride dst_ld), rows past T as zeros; all threads of the block take part. */
template <typename S>
DEVFN void fa_load_tile(float *dst, int dst_ld, const S *src, size_t ld, int r0, int nrows, int HS) {
    for (int idx = threadIdx.x; idx < FA_TILE * HS; idx += blockDim.x) {
        const int r = idx / HS, d = idx % HS;
        dst[r * dst_ld + d] = r0 + r < nrows ? tri_cu_ld(src, (size_t)(r0 + r) * ld + d) : 0.0f;
    }
}

DEVFN float fa_dot(const float *a, const float *b, int HS) {
    float s = 0.0f;
    for (int d = 0; d < HS; d++) s += a[d] * b[d];
    return s;
}

/* Block (query tile, head, batch): out and lse of its rows. */
template <typename S> KERNEL fa_fwd_kernel(S *out, float *lse, const S *qkv, int T, int NH, int HS, float scale) {
    DYN_SMEM(float, smem);
    const int i0 = blockIdx.x * FA_TILE, h = blockIdx.y, b = blockIdx.z, tid = threadIdx.x, i = i0 + tid;
    const size_t C = (size_t)NH * HS, C3 = 3 * C;
    const int P = HS + 1; /* padded stride of the rows a thread owns */
    float *Qs = smem, *Os = Qs + FA_TILE * P, *Ks = Os + FA_TILE * P, *Vs = Ks + FA_TILE * HS;
    const S *q = qkv + (size_t)b * T * C3 + (size_t)h * HS, *k = q + C, *v = q + 2 * C;
    fa_load_tile(Qs, P, q, C3, i0, T, HS);
    float *o = Os + tid * P;
    for (int d = 0; d < HS; d++) o[d] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    const int jend = i0 + FA_TILE < T ? i0 + FA_TILE : T; /* keys this tile's rows may see */
    for (int j0 = 0; j0 < jend; j0 += FA_TILE) {
        __syncthreads(); /* the previous tile's keys are used up (and Qs is loaded) */
        fa_load_tile(Ks, HS, k, C3, j0, T, HS);
        fa_load_tile(Vs, HS, v, C3, j0, T, HS);
        __syncthreads();
        if (i < T) {
            float s[FA_TILE];
            float mt = -INFINITY;
            FA_UNROLL
            for (int jj = 0; jj < FA_TILE; jj++) {
                s[jj] = j0 + jj <= i ? fa_dot(Qs + tid * P, Ks + jj * HS, HS) * scale : -INFINITY;
                mt = s[jj] > mt ? s[jj] : mt;
            }
            /* j0 <= i0 <= i: the tile holds key j0 <= i, so mt is finite */
            const float mn = mt > m ? mt : m, corr = expf(m - mn);
            float ls = 0.0f;
            FA_UNROLL
            for (int jj = 0; jj < FA_TILE; jj++) {
                s[jj] = expf(s[jj] - mn);
                ls += s[jj];
            }
            l = l * corr + ls;
            for (int d = 0; d < HS; d++) {
                float a = o[d] * corr;
                FA_UNROLL
                for (int jj = 0; jj < FA_TILE; jj++) a += s[jj] * Vs[jj * HS + d];
                o[d] = a;
            }
            m = mn;
        }
    }
    if (i < T) {
        const float inv = 1.0f / l;
        const size_t dst = ((size_t)b * T + i) * C + (size_t)h * HS;
        for (int d = 0; d < HS; d++) tri_cu_st(out, dst + d, o[d] * inv);
        lse[((size_t)b * NH + h) * T + i] = m + logf(l);
    }
}

/* Row (b = blockIdx.y, h, i) of delta (B, NH, T) = dout_i . out_i. */
template <typename S> KERNEL fa_delta_kernel(float *delta, const S *dout, const S *out, int T, int NH, int HS) {
    const size_t r = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t rows = (size_t)NH * T;
    if (r >= rows) return;
    const int h = (int)(r / T), i = (int)(r % T), b = blockIdx.y;
    const size_t off = ((size_t)b * T + i) * NH * HS + (size_t)h * HS;
    float s = 0.0f;
    for (int d = 0; d < HS; d++) s += tri_cu_ld(dout, off + d) * tri_cu_ld(out, off + d);
    delta[(size_t)b * rows + r] = s;
}

/* Block (key tile, head, batch): dk, dv of its keys. */
template <typename S>
KERNEL fa_bwd_dkdv_kernel(S *dqkv, const S *dout, const S *qkv, const float *lse, const float *delta, int T, int NH,
                          int HS, float scale) {
    DYN_SMEM(float, smem);
    const int j0 = blockIdx.x * FA_TILE, h = blockIdx.y, b = blockIdx.z, tid = threadIdx.x, j = j0 + tid;
    const size_t C = (size_t)NH * HS, C3 = 3 * C;
    const int P = HS + 1;
    float *Ks = smem, *Vs = Ks + FA_TILE * P, *dKs = Vs + FA_TILE * P, *dVs = dKs + FA_TILE * P;
    float *Qs = dVs + FA_TILE * P, *dOs = Qs + FA_TILE * HS, *Ls = dOs + FA_TILE * HS, *Ds = Ls + FA_TILE;
    const size_t base = (size_t)b * T * C3 + (size_t)h * HS;
    const S *q = qkv + base, *k = q + C, *v = q + 2 * C;
    const S *dO = dout + (size_t)b * T * C + (size_t)h * HS;
    const float *L = lse + ((size_t)b * NH + h) * T, *D = delta + ((size_t)b * NH + h) * T;
    fa_load_tile(Ks, P, k, C3, j0, T, HS);
    fa_load_tile(Vs, P, v, C3, j0, T, HS);
    float *dk = dKs + tid * P, *dv = dVs + tid * P;
    for (int d = 0; d < HS; d++) dk[d] = dv[d] = 0.0f;
    for (int i0 = j0; i0 < T; i0 += FA_TILE) {
        __syncthreads(); /* the previous query tile is used up (and Ks, Vs are loaded) */
        fa_load_tile(Qs, HS, q, C3, i0, T, HS);
        fa_load_tile(dOs, HS, dO, C, i0, T, HS);
        if (tid < FA_TILE) {
            Ls[tid] = i0 + tid < T ? L[i0 + tid] : 0.0f;
            Ds[tid] = i0 + tid < T ? D[i0 + tid] : 0.0f;
        }
        __syncthreads();
        if (j < T) {
            const float *kj = Ks + tid * P, *vj = Vs + tid * P;
            for (int ii = 0; ii < FA_TILE; ii++) {
                const int i = i0 + ii;
                if (i < j || i >= T) continue;
                const float *qi = Qs + ii * HS, *doi = dOs + ii * HS;
                const float p = expf(fa_dot(qi, kj, HS) * scale - Ls[ii]);
                const float ds = p * (fa_dot(doi, vj, HS) - Ds[ii]) * scale;
                for (int d = 0; d < HS; d++) {
                    dv[d] += p * doi[d];
                    dk[d] += ds * qi[d];
                }
            }
        }
    }
    if (j < T) {
        const size_t dst = base + (size_t)j * C3;
        for (int d = 0; d < HS; d++) {
            tri_cu_st(dqkv, dst + C + d, dk[d]);
            tri_cu_st(dqkv, dst + 2 * C + d, dv[d]);
        }
    }
}

/* Block (query tile, head, batch): dq of its queries. */
template <typename S>
KERNEL fa_bwd_dq_kernel(S *dqkv, const S *dout, const S *qkv, const float *lse, const float *delta, int T, int NH,
                        int HS, float scale) {
    DYN_SMEM(float, smem);
    const int i0 = blockIdx.x * FA_TILE, h = blockIdx.y, b = blockIdx.z, tid = threadIdx.x, i = i0 + tid;
    const size_t C = (size_t)NH * HS, C3 = 3 * C;
    const int P = HS + 1;
    float *Qs = smem, *dOs = Qs + FA_TILE * P, *dQs = dOs + FA_TILE * P, *Ks = dQs + FA_TILE * P;
    float *Vs = Ks + FA_TILE * HS;
    const size_t base = (size_t)b * T * C3 + (size_t)h * HS;
    const S *q = qkv + base, *k = q + C, *v = q + 2 * C;
    const S *dO = dout + (size_t)b * T * C + (size_t)h * HS;
    fa_load_tile(Qs, P, q, C3, i0, T, HS);
    fa_load_tile(dOs, P, dO, C, i0, T, HS);
    float *dq = dQs + tid * P;
    for (int d = 0; d < HS; d++) dq[d] = 0.0f;
    const float Li = i < T ? lse[((size_t)b * NH + h) * T + i] : 0.0f;
    const float Di = i < T ? delta[((size_t)b * NH + h) * T + i] : 0.0f;
    const int jend = i0 + FA_TILE < T ? i0 + FA_TILE : T;
    for (int j0 = 0; j0 < jend; j0 += FA_TILE) {
        __syncthreads();
        fa_load_tile(Ks, HS, k, C3, j0, T, HS);
        fa_load_tile(Vs, HS, v, C3, j0, T, HS);
        __syncthreads();
        if (i < T) {
            const float *qi = Qs + tid * P, *doi = dOs + tid * P;
            for (int jj = 0; jj < FA_TILE; jj++) {
                if (j0 + jj > i) break;
                const float *kj = Ks + jj * HS;
                const float p = expf(fa_dot(qi, kj, HS) * scale - Li);
                const float ds = p * (fa_dot(doi, Vs + jj * HS, HS) - Di) * scale;
                for (int d = 0; d < HS; d++) dq[d] += ds * kj[d];
            }
        }
    }
    if (i < T) {
        const size_t dst = base + (size_t)i * C3;
        for (int d = 0; d < HS; d++) tri_cu_st(dqkv, dst + d, dq[d]);
    }
}

extern "C" size_t TRI_CU(attention_saved_floats)(size_t B, size_t T, int NH, int HS) { return B * (size_t)NH * T; }

extern "C" size_t TRI_CU(attention_scratch_floats)(size_t B, size_t T, int NH, int HS) { return B * (size_t)NH * T; }

extern "C" void TRI_CU(attention_fwd)(void *stream, tri_dtype dt, void *out, float *lse, const void *qkv, size_t B,
                                      size_t T, int NH, int HS) {
    if (B == 0 || T == 0 || NH <= 0 || HS <= 0) return;
    const size_t smem = sizeof(float) * (size_t)FA_TILE * (2 * (size_t)(HS + 1) + 2 * (size_t)HS);
    const dim3 grid(tri_cu_blocks(T, FA_TILE), (unsigned)NH, (unsigned)B);
    TRI_CU_DTYPE_SWITCH(dt, "attention_fwd", S, FA_SMEM_OPTIN(fa_fwd_kernel<S>, smem);
                        LAUNCH(fa_fwd_kernel<S>, grid, FA_TILE, smem, stream, (S *)out, lse, (const S *)qkv, (int)T, NH,
                               HS, 1.0f / sqrtf((float)HS)););
}

extern "C" void TRI_CU(attention_bwd)(void *stream, tri_dtype dt, void *dqkv, float *scratch, const void *dout,
                                      const void *qkv, const void *out, const float *lse, size_t B, size_t T, int NH,
                                      int HS) {
    if (B == 0 || T == 0 || NH <= 0 || HS <= 0) return;
    const float scale = 1.0f / sqrtf((float)HS);
    float *delta = scratch;
    const dim3 dgrid(tri_cu_blocks((size_t)NH * T, FA_DELTA_THREADS), (unsigned)B);
    const dim3 grid(tri_cu_blocks(T, FA_TILE), (unsigned)NH, (unsigned)B);
    const size_t smem_kv = sizeof(float) * ((size_t)FA_TILE * (4 * (size_t)(HS + 1) + 2 * (size_t)HS) + 2 * FA_TILE);
    const size_t smem_q = sizeof(float) * (size_t)FA_TILE * (3 * (size_t)(HS + 1) + 2 * (size_t)HS);
    TRI_CU_DTYPE_SWITCH(dt, "attention_bwd", S,
                        LAUNCH(fa_delta_kernel<S>, dgrid, FA_DELTA_THREADS, 0, stream, delta, (const S *)dout,
                               (const S *)out, (int)T, NH, HS);
                        FA_SMEM_OPTIN(fa_bwd_dkdv_kernel<S>, smem_kv);
                        LAUNCH(fa_bwd_dkdv_kernel<S>, grid, FA_TILE, smem_kv, stream, (S *)dqkv, (const S *)dout,
                               (const S *)qkv, lse, delta, (int)T, NH, HS, scale);
                        FA_SMEM_OPTIN(fa_bwd_dq_kernel<S>, smem_q);
                        LAUNCH(fa_bwd_dq_kernel<S>, grid, FA_TILE, smem_q, stream, (S *)dqkv, (const S *)dout,
                               (const S *)qkv, lse, delta, (int)T, NH, HS, scale););
}
