/* RMSNorm over the last dimension on CUDA (Llama's norm: no mean, no bias),
 * fp32 or bf16 storage of out, inp, w, dinp, dout (fp32 arithmetic;
 * common.cuh's tri_cu_ld / tri_cu_st); rstd, dw and the partial sums fp32.
 * Contracts: rmsnorm_fwd / rmsnorm_bwd in kernels/ops.h, the entry points in
 * kernels/cuda/kernels.h. The formulas of kernels/cpu/rmsnorm.c:
 *   rstd = 1 / sqrt(mean(x^2) + eps),  out = (x rstd) w;
 *   dinp += rstd (g - xhat mean(g xhat)),  g = dout w,  xhat = x rstd;
 *   dw += sum over rows of dout xhat;
 * sums run as block reductions, so results agree with the CPU's within fp32
 * rounding, not bit for bit.
 *
 * Forward: one block per row. Backward: one block per row for dinp (which
 * accumulates: the old value widened, the increment added in fp32, the sum
 * rounded once); dw in two deterministic steps (no float atomics): partial
 * column sums over fixed row groups into scratch, then each column's
 * partials summed in group order and added to dw (as layernorm.cu). */
#include "kernels/cuda/common.cuh"

enum {
    RMS_THREADS = 256,   /* threads per row block, at most */
    RMS_COLS = 32,       /* columns per block of the partial sums */
    RMS_ROW_LANES = 8,   /* rows read at once by a block of the partial sums */
    RMS_MAX_GROUPS = 64, /* row groups of the partial sums, at most */
    RMS_GROUP_ROWS = 16, /* rows per group, at least (fewer groups for small N) */
    RMS_FINAL_THREADS = 256
};

/* The sum of v over the block, in every thread (blockDim.x a multiple of 32,
 * red 32 floats of shared memory): butterfly shuffles per warp, one value
 * per warp through shared memory, then the warp sums again. The closing
 * barrier frees red for the next call. */
DEVFN float rms_block_sum(float v, float *red) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(FULL_MASK, v, o);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float s = lane < nw ? red[lane] : 0.0f;
    for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(FULL_MASK, s, o);
    __syncthreads();
    return s;
}

/* Row blockIdx.x: out = (x rstd) w; rstd saved. */
template <typename T> KERNEL rmsnorm_fwd_kernel(T *out, float *rstd, const T *inp, const T *w, int C, float eps) {
    SHARED(float, red, 32);
    const size_t row = blockIdx.x;
    const T *x = inp + row * C;
    T *o = out + row * C;
    float ss = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        const float v = tri_cu_ld(x, c);
        ss += v * v;
    }
    const float rs = 1.0f / sqrtf(rms_block_sum(ss, red) * (1.0f / (float)C) + eps);
    for (int c = threadIdx.x; c < C; c += blockDim.x) tri_cu_st(o, c, (tri_cu_ld(x, c) * rs) * tri_cu_ld(w, c));
    if (threadIdx.x == 0) rstd[row] = rs;
}

/* Row blockIdx.x: dinp += rstd (g - xhat mean(g xhat)). */
template <typename T>
KERNEL rmsnorm_bwd_dinp_kernel(T *dinp, const T *dout, const T *inp, const T *w, const float *rstd, int C) {
    SHARED(float, red, 32);
    const size_t row = blockIdx.x;
    const T *x = inp + row * C, *d = dout + row * C;
    T *di = dinp + row * C;
    const float rs = rstd[row];
    float sgx = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        sgx += (tri_cu_ld(d, c) * tri_cu_ld(w, c)) * (tri_cu_ld(x, c) * rs);
    const float mgx = rms_block_sum(sgx, red) * (1.0f / (float)C);
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        const float g = tri_cu_ld(d, c) * tri_cu_ld(w, c), xhat = tri_cu_ld(x, c) * rs;
        tri_cu_st(di, c, tri_cu_ld(di, c) + (g - xhat * mgx) * rs);
    }
}

/* Block (column block, row group): the group's sums of dout * xhat for
 * RMS_COLS columns into part[g * C + c]; lane y of the RMS_ROW_LANES sums
 * rows y, y + RMS_ROW_LANES, ...; the lanes' sums added in lane order. */
template <typename T>
KERNEL rmsnorm_bwd_part_kernel(float *part, const T *dout, const T *inp, const float *rstd, int N, int C,
                               int rows_per_group) {
    SHARED(float, sw, RMS_ROW_LANES *RMS_COLS);
    const int tx = threadIdx.x, ty = threadIdx.y, g = blockIdx.y;
    const int c = blockIdx.x * RMS_COLS + tx;
    const int r0 = g * rows_per_group, r1 = r0 + rows_per_group < N ? r0 + rows_per_group : N;
    float aw = 0.0f;
    if (c < C)
        for (int n = r0 + ty; n < r1; n += RMS_ROW_LANES)
            aw += tri_cu_ld(dout, (size_t)n * C + c) * (tri_cu_ld(inp, (size_t)n * C + c) * rstd[n]);
    sw[ty * RMS_COLS + tx] = aw;
    __syncthreads();
    if (ty == 0 && c < C) {
        float tw = 0.0f;
        for (int y = 0; y < RMS_ROW_LANES; y++) tw += sw[y * RMS_COLS + tx];
        part[(size_t)g * C + c] = tw;
    }
}

/* Column c: dw[c] += sum over groups of its partials, in group order. */
KERNEL rmsnorm_bwd_final_kernel(float *dw, const float *part, int C, int G) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float tw = 0.0f;
    for (int g = 0; g < G; g++) tw += part[(size_t)g * C + c];
    dw[c] += tw;
}

/* Threads of a row block: C rounded up to a warp, at most RMS_THREADS. */
static unsigned rms_row_threads(size_t C) {
    const size_t t = (C + 31) / 32 * 32;
    return t < RMS_THREADS ? (unsigned)t : (unsigned)RMS_THREADS;
}

/* Row groups of the partial sums for N rows (from N only: the summation
 * order, hence the result, is the same on every GPU). */
static int rms_groups(size_t N) {
    const size_t g = (N + RMS_GROUP_ROWS - 1) / RMS_GROUP_ROWS;
    return g < RMS_MAX_GROUPS ? (int)(g > 0 ? g : 1) : (int)RMS_MAX_GROUPS;
}

extern "C" size_t TRI_CU(rmsnorm_bwd_scratch_floats)(size_t N, size_t C) { return (size_t)rms_groups(N) * C; }

extern "C" void TRI_CU(rmsnorm_fwd)(void *stream, tri_dtype dt, void *out, float *rstd, const void *inp, const void *w,
                                    size_t N, size_t C, float eps) {
    if (N == 0 || C == 0) return;
    TRI_CU_DTYPE_SWITCH(dt, "rmsnorm_fwd", T,
                        LAUNCH(rmsnorm_fwd_kernel<T>, (unsigned)N, rms_row_threads(C), 0, stream, (T *)out, rstd,
                               (const T *)inp, (const T *)w, (int)C, eps););
}

extern "C" void TRI_CU(rmsnorm_bwd)(void *stream, tri_dtype dt, void *dinp, float *dw, float *scratch, const void *dout,
                                    const void *inp, const void *w, const float *rstd, size_t N, size_t C) {
    if (N == 0 || C == 0) return;
    const int G = rms_groups(N);
    const int rows_per_group = (int)((N + (size_t)G - 1) / (size_t)G);
    TRI_CU_DTYPE_SWITCH(dt, "rmsnorm_bwd", T,
                        LAUNCH(rmsnorm_bwd_dinp_kernel<T>, (unsigned)N, rms_row_threads(C), 0, stream, (T *)dinp,
                               (const T *)dout, (const T *)inp, (const T *)w, rstd, (int)C);
                        LAUNCH(rmsnorm_bwd_part_kernel<T>, dim3(tri_cu_blocks(C, RMS_COLS), (unsigned)G),
                               dim3(RMS_COLS, RMS_ROW_LANES), 0, stream, scratch, (const T *)dout, (const T *)inp, rstd,
                               (int)N, (int)C, rows_per_group););
    LAUNCH(rmsnorm_bwd_final_kernel, tri_cu_blocks(C, RMS_FINAL_THREADS), RMS_FINAL_THREADS, 0, stream, dw, scratch,
           (int)C, G);
}
