/* SwiGLU on CUDA (Llama's MLP nonlinearity), fp32 or bf16 storage (fp32
 * arithmetic; common.cuh's tri_cu_ld / tri_cu_st). Contracts: swiglu_fwd /
 * swiglu_bwd in kernels/ops.h, the entry points in kernels/cuda/kernels.h.
 * Rows of inp are [gate (F) | up (F)]. The formulas of kernels/cpu/swiglu.c,
 * one exp per element, no overflow, nothing cancels in s:
 *   a = e^(-|g|),  s = sigmoid(g) = (g >= 0 ? 1 : a) / (1 + a),
 *   1 - s = (g >= 0 ? a : 1) / (1 + a);
 *   out = (g s) u;  dg = (dout u) (s (1 + g (1 - s))),  du = dout (g s).
 * expf is CUDA's (2 ulp), not the CPU's vec_expf: the backends agree within
 * a few ulp, not bit for bit.
 * One thread per output element (row n, column f < F), a grid-stride loop
 * beyond SWIGLU_MAX_BLOCKS blocks. */
#include "kernels/cuda/common.cuh"

enum { SWIGLU_THREADS = 256, SWIGLU_MAX_BLOCKS = 4096 };

template <typename T> KERNEL swiglu_fwd_kernel(T *out, const T *inp, size_t N, size_t F) {
    const size_t n = N * F, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const size_t r = i / F, f = i % F;
        const float g = tri_cu_ld(inp, r * 2 * F + f), u = tri_cu_ld(inp, r * 2 * F + F + f);
        const float a = expf(-fabsf(g));
        const float s = (g >= 0.0f ? 1.0f : a) / (1.0f + a);
        tri_cu_st(out, i, (g * s) * u);
    }
}

/* dinp must not alias inp or dout (kernels/ops.h). */
template <typename T> KERNEL swiglu_bwd_kernel(T *dinp, const T *inp, const T *dout, size_t N, size_t F) {
    const size_t n = N * F, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const size_t r = i / F, f = i % F;
        const float g = tri_cu_ld(inp, r * 2 * F + f), u = tri_cu_ld(inp, r * 2 * F + F + f), d = tri_cu_ld(dout, i);
        const float a = expf(-fabsf(g));
        const float rr = 1.0f / (1.0f + a);
        const float s = (g >= 0.0f ? 1.0f : a) * rr, oms = (g >= 0.0f ? a : 1.0f) * rr;
        tri_cu_st(dinp, r * 2 * F + f, (d * u) * (s * (1.0f + g * oms)));
        tri_cu_st(dinp, r * 2 * F + F + f, d * (g * s));
    }
}

static unsigned swiglu_blocks(size_t n) {
    const size_t b = (n + SWIGLU_THREADS - 1) / SWIGLU_THREADS;
    return b < SWIGLU_MAX_BLOCKS ? (unsigned)b : (unsigned)SWIGLU_MAX_BLOCKS;
}

extern "C" void TRI_CU(swiglu_fwd)(void *stream, tri_dtype dt, void *out, const void *inp, size_t N, size_t F) {
    if (N == 0 || F == 0) return;
    TRI_CU_DTYPE_SWITCH(
        dt, "swiglu_fwd", T,
        LAUNCH(swiglu_fwd_kernel<T>, swiglu_blocks(N * F), SWIGLU_THREADS, 0, stream, (T *)out, (const T *)inp, N, F););
}

extern "C" void TRI_CU(swiglu_bwd)(void *stream, tri_dtype dt, void *dinp, const void *inp, const void *dout, size_t N,
                                   size_t F) {
    if (N == 0 || F == 0) return;
    TRI_CU_DTYPE_SWITCH(dt, "swiglu_bwd", T,
                        LAUNCH(swiglu_bwd_kernel<T>, swiglu_blocks(N * F), SWIGLU_THREADS, 0, stream, (T *)dinp,
                               (const T *)inp, (const T *)dout, N, F););
}
