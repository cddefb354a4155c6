/* Residual + bias, the bias gradient and small elementwise helpers on CUDA,
 * and the fp32 <-> bf16 casts. residual_fwd's tensors and bias_bwd's dout
 * are fp32 or bf16 (fp32 arithmetic; common.cuh's tri_cu_ld / tri_cu_st);
 * dbias, and scale's and add's tensors, are fp32. Contracts: residual_fwd,
 * bias_bwd, scale, add in kernels/ops.h (CPU: kernels/cpu/elementwise.c);
 * the entry points in kernels/cuda/kernels.h.
 *
 * Elementwise kernels: a thread per element, a grid-stride loop beyond
 * EW_MAX_BLOCKS blocks. bias_bwd: column sums in two deterministic steps (no
 * float atomics), as layernorm.cu's dw: partial sums over fixed row groups
 * into scratch, then each column's partials in group order added to dbias.
 * Casts: fp32 -> bf16 rounds to nearest, ties to even, NaN quieted with its
 * sign kept, the same bits as kernels/half.h's tri_f32_to_bf16 (bf16 is
 * stored as its 16 bits, uint16_t); bf16 -> fp32 is exact. */
#include <string.h>

#include "kernels/cuda/common.cuh"

enum {
    EW_THREADS = 256,
    EW_MAX_BLOCKS = 1024,
    BB_COLS = 32,       /* columns per block of the partial sums */
    BB_ROW_LANES = 8,   /* rows read at once by a block of the partial sums */
    BB_MAX_GROUPS = 64, /* row groups, at most */
    BB_GROUP_ROWS = 16  /* rows per group, at least */
};

static unsigned ew_blocks(size_t n) {
    const unsigned b = tri_cu_blocks(n, EW_THREADS);
    return b < EW_MAX_BLOCKS ? b : (unsigned)EW_MAX_BLOCKS;
}

#define EW_LOOP(i, n) \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

/* out = res + x (+ bias[column]); out may alias res or x (each element is
 * read, then written, by one thread). One rounding, at the store. */
template <typename T> KERNEL residual_kernel(T *out, const T *res, const T *x, const T *bias, size_t n, size_t C) {
    EW_LOOP(i, n) {
        const float v = tri_cu_ld(res, i) + tri_cu_ld(x, i);
        tri_cu_st(out, i, bias != NULL ? v + tri_cu_ld(bias, i % C) : v);
    }
}

KERNEL scale_kernel(float *x, float s, size_t n) { EW_LOOP(i, n) x[i] *= s; }

KERNEL add_kernel(float *y, const float *x, size_t n) { EW_LOOP(i, n) y[i] += x[i]; }

/* Block (column block, row group g): the group's column sums of dout into
 * part[g * C + c]; lanes y sum rows y, y + BB_ROW_LANES, ..., then the lanes'
 * sums are added in lane order. */
template <typename T> KERNEL bias_part_kernel(float *part, const T *dout, int N, int C, int rows_per_group) {
    SHARED(float, sb, BB_ROW_LANES *BB_COLS);
    const int tx = threadIdx.x, ty = threadIdx.y, g = blockIdx.y;
    const int c = blockIdx.x * BB_COLS + tx;
    const int r0 = g * rows_per_group, r1 = r0 + rows_per_group < N ? r0 + rows_per_group : N;
    float a = 0.0f;
    if (c < C)
        for (int n = r0 + ty; n < r1; n += BB_ROW_LANES) a += tri_cu_ld(dout, (size_t)n * C + c);
    sb[ty * BB_COLS + tx] = a;
    __syncthreads();
    if (ty == 0 && c < C) {
        float t = 0.0f;
        for (int y = 0; y < BB_ROW_LANES; y++) t += sb[y * BB_COLS + tx];
        part[(size_t)g * C + c] = t;
    }
}

/* dbias[c] += the partials of column c in group order. */
KERNEL bias_final_kernel(float *dbias, const float *part, int C, int G) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float t = 0.0f;
    for (int g = 0; g < G; g++) t += part[(size_t)g * C + c];
    dbias[c] += t;
}

DEVFN uint32_t ew_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

KERNEL cast_to_bf16_kernel(uint16_t *out, const float *in, size_t n) {
    EW_LOOP(i, n) {
        uint32_t u = ew_f32_bits(in[i]);
        if ((u & 0x7fffffffu) > 0x7f800000u) {
            out[i] = (uint16_t)((u >> 16) | 0x0040u); /* NaN: quiet, keep the sign */
        } else {
            u += 0x7fffu + ((u >> 16) & 1u); /* ties to even; a carry may reach the exponent or infinity */
            out[i] = (uint16_t)(u >> 16);
        }
    }
}

KERNEL cast_from_bf16_kernel(float *out, const uint16_t *in, size_t n) {
    EW_LOOP(i, n) {
        const uint32_t u = (uint32_t)in[i] << 16;
        float f;
        memcpy(&f, &u, sizeof f);
        out[i] = f;
    }
}

/* Row groups of the bias partial sums for N rows (N alone decides the
 * summation order). */
static int bb_groups(size_t N) {
    const size_t g = (N + BB_GROUP_ROWS - 1) / BB_GROUP_ROWS;
    return g < BB_MAX_GROUPS ? (int)(g > 0 ? g : 1) : (int)BB_MAX_GROUPS;
}

extern "C" void TRI_CU(residual_fwd)(void *stream, tri_dtype dt, void *out, const void *res, const void *x,
                                     const void *bias, size_t N, size_t C) {
    if (N * C == 0) return;
    TRI_CU_DTYPE_SWITCH(dt, "residual_fwd", T,
                        LAUNCH(residual_kernel<T>, ew_blocks(N * C), EW_THREADS, 0, stream, (T *)out, (const T *)res,
                               (const T *)x, (const T *)bias, N * C, C););
}

extern "C" size_t TRI_CU(bias_bwd_scratch_floats)(size_t N, size_t C) { return (size_t)bb_groups(N) * C; }

extern "C" void TRI_CU(bias_bwd)(void *stream, tri_dtype dt, float *dbias, float *scratch, const void *dout, size_t N,
                                 size_t C) {
    if (N == 0 || C == 0) return;
    const int G = bb_groups(N), rows_per_group = (int)((N + (size_t)G - 1) / (size_t)G);
    TRI_CU_DTYPE_SWITCH(dt, "bias_bwd", T,
                        LAUNCH(bias_part_kernel<T>, dim3(tri_cu_blocks(C, BB_COLS), (unsigned)G),
                               dim3(BB_COLS, BB_ROW_LANES), 0, stream, scratch, (const T *)dout, (int)N, (int)C,
                               rows_per_group););
    LAUNCH(bias_final_kernel, tri_cu_blocks(C, EW_THREADS), EW_THREADS, 0, stream, dbias, scratch, (int)C, G);
}

extern "C" void TRI_CU(scale)(void *stream, float *x, float s, size_t n) {
    if (n > 0) LAUNCH(scale_kernel, ew_blocks(n), EW_THREADS, 0, stream, x, s, n);
}

extern "C" void TRI_CU(add)(void *stream, float *y, const float *x, size_t n) {
    if (n > 0) LAUNCH(add_kernel, ew_blocks(n), EW_THREADS, 0, stream, y, x, n);
}

extern "C" void TRI_CU(cast_f32_to_bf16)(void *stream, uint16_t *out, const float *in, size_t n) {
    if (n > 0) LAUNCH(cast_to_bf16_kernel, ew_blocks(n), EW_THREADS, 0, stream, out, in, n);
}

extern "C" void TRI_CU(cast_bf16_to_f32)(void *stream, float *out, const uint16_t *in, size_t n) {
    if (n > 0) LAUNCH(cast_from_bf16_kernel, ew_blocks(n), EW_THREADS, 0, stream, out, in, n);
}
