/* The optimizer's kernels on CUDA: AdamW over many tensors in one launch, and
 * the sum / sum of squares (in double) of one or many fp32 tensors (the
 * global gradient norm). Contracts: adamw, sum, sumsq in kernels/ops.h; the
 * entry points and the table types in kernels/cuda/kernels.h.
 *
 * Multi-tensor launches: the host plans a table of tensors once (plan: each
 * tensor's first block, a fixed number of elements per block), copies it to
 * the device, and each launch's block finds its tensor by a binary search of
 * the table. The pointers in the table are device memory and must stay valid
 * while it is used.
 *
 * AdamW: the CPU's formulas (kernels/cpu/adamw.c), the bias corrections
 * computed on the host in double and rounded to float, as there.
 * Reductions: each block sums a fixed chunk of one tensor (threads over a
 * fixed stride, then a fixed shuffle tree, all in double) into a partial;
 * one block then sums the partials in a fixed tree. The result depends only
 * on the tensors' sizes: the same bits under any schedule, on any GPU. */
#include <math.h>

#include "kernels/cuda/common.cuh"

enum {
    OPT_THREADS = 256,
    ADAMW_CHUNK = 4096, /* elements per block of AdamW */
    SUM_CHUNK = 8192,   /* elements per block of the sums */
    SUM_FINAL_THREADS = 256
};

/* The table entry that owns block b: the last one whose first block is <= b
 * (entries with no elements share their successor's first block). */
template <class E> DEVFN int opt_find(const E *table, int count, unsigned b) {
    int lo = 0, hi = count - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (table[mid].first_block <= b)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* The sum of v over the block (blockDim.x a multiple of 32, at most 1024),
 * valid in thread 0: a butterfly within each warp, the warps' sums in warp
 * order. red: 32 doubles of shared memory. */
DEVFN double opt_block_sum(double v, double *red) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(FULL_MASK, v, o);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    double s = 0.0;
    if (threadIdx.x == 0)
        for (int w = 0; w < nw; w++) s += red[w];
    return s;
}

KERNEL adamw_multi_kernel(const tri_cu_adamw_tensor *table, int count, float lr, float beta1, float beta2, float eps,
                          float ibc1, float ibc2, float grad_scale) {
    const tri_cu_adamw_tensor e = table[opt_find(table, count, blockIdx.x)];
    const size_t i0 = (size_t)(blockIdx.x - e.first_block) * ADAMW_CHUNK;
    const size_t i1 = i0 + ADAMW_CHUNK < e.n ? i0 + ADAMW_CHUNK : e.n;
    const float a1 = 1.0f - beta1, a2 = 1.0f - beta2;
    for (size_t i = i0 + threadIdx.x; i < i1; i += blockDim.x) {
        const float g = e.grad[i] * grad_scale;
        const float mi = beta1 * e.m[i] + a1 * g;
        const float vi = beta2 * e.v[i] + a2 * (g * g);
        e.m[i] = mi;
        e.v[i] = vi;
        const float den = sqrtf(vi * ibc2);
        const float p = e.param[i];
        e.param[i] = p - lr * ((mi * ibc1) / (den + eps) + e.wd * p);
    }
}

/* partial[b] = the sum of x[i] (or x[i]^2) over block b's chunk. */
DEVFN void sum_chunk(double *partial, const float *x, size_t i0, size_t i1, int square, double *red) {
    double s = 0.0;
    for (size_t i = i0 + threadIdx.x; i < i1; i += blockDim.x) {
        const double v = (double)x[i];
        s += square ? v * v : v;
    }
    s = opt_block_sum(s, red);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

KERNEL sum_multi_kernel(double *partial, const tri_cu_span *table, int count, int square) {
    SHARED(double, red, 32);
    const tri_cu_span e = table[opt_find(table, count, blockIdx.x)];
    const size_t i0 = (size_t)(blockIdx.x - e.first_block) * SUM_CHUNK;
    sum_chunk(partial, e.x, i0, i0 + SUM_CHUNK < e.n ? i0 + SUM_CHUNK : e.n, square, red);
}

KERNEL sum_one_kernel(double *partial, const float *x, size_t n, int square) {
    SHARED(double, red, 32);
    const size_t i0 = (size_t)blockIdx.x * SUM_CHUNK;
    sum_chunk(partial, x, i0, i0 + SUM_CHUNK < n ? i0 + SUM_CHUNK : n, square, red);
}

/* *result = the sum of partial[0 .. blocks), in a fixed tree (one block). */
KERNEL sum_final_kernel(double *result, const double *partial, size_t blocks) {
    SHARED(double, red, 32);
    double s = 0.0;
    for (size_t b = threadIdx.x; b < blocks; b += blockDim.x) s += partial[b];
    s = opt_block_sum(s, red);
    if (threadIdx.x == 0) *result = s;
}

template <class E> static size_t opt_plan(E *table, int count, size_t chunk) {
    size_t blocks = 0;
    for (int k = 0; k < count; k++) {
        table[k].first_block = (unsigned)blocks;
        blocks += (table[k].n + chunk - 1) / chunk;
    }
    return blocks;
}

extern "C" size_t TRI_CU(adamw_plan)(tri_cu_adamw_tensor *table, int count) {
    return opt_plan(table, count, ADAMW_CHUNK);
}

extern "C" size_t TRI_CU(sum_plan)(tri_cu_span *table, int count) { return opt_plan(table, count, SUM_CHUNK); }

extern "C" size_t TRI_CU(sum_partials)(size_t n) { return n > 0 ? (n + SUM_CHUNK - 1) / SUM_CHUNK : 1; }

extern "C" void TRI_CU(adamw_multi)(void *stream, const tri_cu_adamw_tensor *table, int count, size_t blocks, float lr,
                                    float beta1, float beta2, float eps, int t, float grad_scale) {
    if (count <= 0 || blocks == 0) return;
    const float ibc1 = (float)(1.0 / (1.0 - pow((double)beta1, (double)t)));
    const float ibc2 = (float)(1.0 / (1.0 - pow((double)beta2, (double)t)));
    LAUNCH(adamw_multi_kernel, (unsigned)blocks, OPT_THREADS, 0, stream, table, count, lr, beta1, beta2, eps, ibc1,
           ibc2, grad_scale);
}

extern "C" void TRI_CU(sum_multi)(void *stream, double *result, double *partial, const tri_cu_span *table, int count,
                                  size_t blocks, int square) {
    if (count > 0 && blocks > 0)
        LAUNCH(sum_multi_kernel, (unsigned)blocks, OPT_THREADS, 0, stream, partial, table, count, square);
    LAUNCH(sum_final_kernel, 1, SUM_FINAL_THREADS, 0, stream, result, partial, count > 0 ? blocks : 0);
}

extern "C" void TRI_CU(sum)(void *stream, double *result, double *partial, const float *x, size_t n, int square) {
    const size_t blocks = n > 0 ? (n + SUM_CHUNK - 1) / SUM_CHUNK : 0;
    if (blocks > 0) LAUNCH(sum_one_kernel, (unsigned)blocks, OPT_THREADS, 0, stream, partial, x, n, square);
    LAUNCH(sum_final_kernel, 1, SUM_FINAL_THREADS, 0, stream, result, partial, blocks);
}
