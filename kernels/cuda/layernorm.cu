/* LayerNorm over the last dimension on CUDA, eps = 1e-5, fp32 or bf16
 * storage of out, inp, w, b, dinp, dout (fp32 arithmetic; common.cuh's
 * tri_cu_ld / tri_cu_st); mean, rstd, dw, db and the partial sums are fp32.
 * Contracts: layernorm_fwd / layernorm_bwd in kernels/ops.h, the entry
 * points in kernels/cuda/kernels.h. Same formulas as kernels/cpu/layernorm.c
 * (two-pass variance, biased, divided by C); sums run as block reductions,
 * so results agree with the CPU's within fp32 rounding, not bit for bit.
 *
 * Forward: one block per row. Backward: one block per row for dinp; dw and db
 * in two deterministic steps (no float atomics): partial column sums over
 * fixed row groups into scratch, then each column's partials summed in group
 * order and added to dw, db. dinp accumulates: the old value is widened,
 * the increment added in fp32 and the sum rounded once. */
#include "kernels/cuda/common.cuh"

#define LN_EPS 1e-5f

enum {
    LN_THREADS = 256,   /* threads per row block, at most */
    LN_COLS = 32,       /* columns per block of the partial sums */
    LN_ROW_LANES = 8,   /* rows read at once by a block of the partial sums */
    LN_MAX_GROUPS = 64, /* row groups of the partial sums, at most */
    LN_GROUP_ROWS = 16, /* rows per group, at least (fewer groups for small N) */
    LN_FINAL_THREADS = 256
};

/* The sum of v over the block, in every thread. blockDim.x is a multiple of
 * 32; red holds 32 floats of shared memory. Warp sums by butterfly shuffles
 * (every lane ends with the same bits), one per warp through shared memory,
 * then the warp sums again. The closing barrier frees red for the next call. */
DEVFN float block_sum(float v, float *red) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(FULL_MASK, v, o);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float s = lane < nw ? red[lane] : 0.0f;
    for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(FULL_MASK, s, o);
    __syncthreads();
    return s;
}

/* Row blockIdx.x: out = (x - mean) * rstd * w + b; mean, rstd saved. */
template <typename T>
KERNEL layernorm_fwd_kernel(T *out, float *mean, float *rstd, const T *inp, const T *w, const T *b, int C) {
    SHARED(float, red, 32);
    const size_t row = blockIdx.x;
    const T *x = inp + row * C;
    T *o = out + row * C;
    const float invC = 1.0f / (float)C;
    float s = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) s += tri_cu_ld(x, c);
    const float m = block_sum(s, red) * invC;
    float ss = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        const float d = tri_cu_ld(x, c) - m;
        ss += d * d;
    }
    const float rs = 1.0f / sqrtf(block_sum(ss, red) * invC + LN_EPS);
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        tri_cu_st(o, c, (tri_cu_ld(x, c) - m) * rs * tri_cu_ld(w, c) + tri_cu_ld(b, c));
    if (threadIdx.x == 0) {
        mean[row] = m;
        rstd[row] = rs;
    }
}

/* Row blockIdx.x: dinp += rstd * (g - mean(g) - xhat * mean(g * xhat)),
 * g = dout * w, xhat = (x - mean) * rstd. */
template <typename T>
KERNEL layernorm_bwd_dinp_kernel(T *dinp, const T *dout, const T *inp, const T *w, const float *mean, const float *rstd,
                                 int C) {
    SHARED(float, red, 32);
    const size_t row = blockIdx.x;
    const T *x = inp + row * C, *d = dout + row * C;
    T *di = dinp + row * C;
    const float m = mean[row], rs = rstd[row], invC = 1.0f / (float)C;
    float sg = 0.0f, sgx = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        const float g = tri_cu_ld(d, c) * tri_cu_ld(w, c);
        sg += g;
        sgx += g * ((tri_cu_ld(x, c) - m) * rs);
    }
    const float mg = block_sum(sg, red) * invC;
    const float mgx = block_sum(sgx, red) * invC;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        const float xhat = (tri_cu_ld(x, c) - m) * rs;
        tri_cu_st(di, c, tri_cu_ld(di, c) + (tri_cu_ld(d, c) * tri_cu_ld(w, c) - mg - xhat * mgx) * rs);
    }
}

/* Block (blockIdx.x, blockIdx.y) = (column block, row group): the group's
 * sums of dout * xhat and of dout for LN_COLS columns, into
 * part[g * C + c] (dw) and part[(G + g) * C + c] (db). Threads (LN_COLS,
 * LN_ROW_LANES): lane y sums rows y, y + LN_ROW_LANES, ... of the group; the
 * lanes' sums are then added in lane order. */
template <typename T>
KERNEL layernorm_bwd_part_kernel(float *part, const T *dout, const T *inp, const float *mean, const float *rstd, int N,
                                 int C, int rows_per_group) {
    SHARED(float, sw, LN_ROW_LANES *LN_COLS);
    SHARED(float, sb, LN_ROW_LANES *LN_COLS);
    const int tx = threadIdx.x, ty = threadIdx.y, g = blockIdx.y, G = gridDim.y;
    const int c = blockIdx.x * LN_COLS + tx;
    const int r0 = g * rows_per_group, r1 = r0 + rows_per_group < N ? r0 + rows_per_group : N;
    float aw = 0.0f, ab = 0.0f;
    if (c < C) {
        for (int n = r0 + ty; n < r1; n += LN_ROW_LANES) {
            const float dv = tri_cu_ld(dout, (size_t)n * C + c);
            aw += dv * ((tri_cu_ld(inp, (size_t)n * C + c) - mean[n]) * rstd[n]);
            ab += dv;
        }
    }
    sw[ty * LN_COLS + tx] = aw;
    sb[ty * LN_COLS + tx] = ab;
    __syncthreads();
    if (ty == 0 && c < C) {
        float tw = 0.0f, tb = 0.0f;
        for (int y = 0; y < LN_ROW_LANES; y++) {
            tw += sw[y * LN_COLS + tx];
            tb += sb[y * LN_COLS + tx];
        }
        part[(size_t)g * C + c] = tw;
        part[(size_t)(G + g) * C + c] = tb;
    }
}

/* Column c: dw[c] += sum over groups of the dw partials, db[c] likewise, in
 * group order. */
KERNEL layernorm_bwd_final_kernel(float *dw, float *db, const float *part, int C, int G) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float tw = 0.0f, tb = 0.0f;
    for (int g = 0; g < G; g++) {
        tw += part[(size_t)g * C + c];
        tb += part[(size_t)(G + g) * C + c];
    }
    dw[c] += tw;
    db[c] += tb;
}

/* Threads of a row block: C rounded up to a warp, at most LN_THREADS. */
static unsigned row_threads(size_t C) {
    const size_t t = (C + 31) / 32 * 32;
    return t < LN_THREADS ? (unsigned)t : (unsigned)LN_THREADS;
}

/* Row groups of the partial sums for N rows (depends on N only, so the
 * summation order, hence the result, is the same on every GPU). */
static int bwd_groups(size_t N) {
    const size_t g = (N + LN_GROUP_ROWS - 1) / LN_GROUP_ROWS;
    return g < LN_MAX_GROUPS ? (int)(g > 0 ? g : 1) : (int)LN_MAX_GROUPS;
}

extern "C" size_t TRI_CU(layernorm_bwd_scratch_floats)(size_t N, size_t C) { return 2 * (size_t)bwd_groups(N) * C; }

extern "C" void TRI_CU(layernorm_fwd)(void *stream, tri_dtype dt, void *out, float *mean, float *rstd, const void *inp,
                                      const void *w, const void *b, size_t N, size_t C) {
    if (N == 0 || C == 0) return;
    TRI_CU_DTYPE_SWITCH(dt, "layernorm_fwd", T,
                        LAUNCH(layernorm_fwd_kernel<T>, (unsigned)N, row_threads(C), 0, stream, (T *)out, mean, rstd,
                               (const T *)inp, (const T *)w, (const T *)b, (int)C););
}

extern "C" void TRI_CU(layernorm_bwd)(void *stream, tri_dtype dt, void *dinp, float *dw, float *db, float *scratch,
                                      const void *dout, const void *inp, const void *w, const float *mean,
                                      const float *rstd, size_t N, size_t C) {
    if (N == 0 || C == 0) return;
    const int G = bwd_groups(N);
    const int rows_per_group = (int)((N + (size_t)G - 1) / (size_t)G);
    TRI_CU_DTYPE_SWITCH(dt, "layernorm_bwd", T,
                        LAUNCH(layernorm_bwd_dinp_kernel<T>, (unsigned)N, row_threads(C), 0, stream, (T *)dinp,
                               (const T *)dout, (const T *)inp, (const T *)w, mean, rstd, (int)C);
                        LAUNCH(layernorm_bwd_part_kernel<T>, dim3(tri_cu_blocks(C, LN_COLS), (unsigned)G),
                               dim3(LN_COLS, LN_ROW_LANES), 0, stream, scratch, (const T *)dout, (const T *)inp, mean,
                               rstd, (int)N, (int)C, rows_per_group););
    LAUNCH(layernorm_bwd_final_kernel, tri_cu_blocks(C, LN_FINAL_THREADS), LN_FINAL_THREADS, 0, stream, dw, db, scratch,
           (int)C, G);
}
