/* GELU, tanh approximation, on CUDA, fp32 or bf16 storage (fp32 arithmetic;
 * common.cuh's tri_cu_ld / tri_cu_st).
 * Contracts: gelu_fwd / gelu_bwd in kernels/ops.h, the entry points in
 * kernels/cuda/kernels.h. The formulas of kernels/cpu/gelu.c, one exp per
 * element and no cancellation for negative x:
 *   u = sqrt(2/pi) (x + 0.044715 x^3),  a = e^(-2|u|),
 *   s = 0.5 (1 + tanh(u)) = (u >= 0 ? 1 : a) / (1 + a),   gelu(x) = x s,
 *   gelu'(x) = s + 2 x u' a / (1 + a)^2,  u' = sqrt(2/pi) (1 + 3 * 0.044715 x^2),
 * and gelu' exactly 1 above x = 30, 0 below -30 (where x^2 may overflow).
 * expf is CUDA's (2 ulp), not the CPU's vec_expf (1.5 ulp): the two backends
 * agree within a few ulp, not bit for bit.
 * One thread per element, a grid-stride loop beyond GELU_MAX_BLOCKS blocks. */
#include "kernels/cuda/common.cuh"

#define GELU_K0 0.79788456080286535588f /* sqrt(2 / pi) */
#define GELU_K1 0.044715f

enum { GELU_THREADS = 256, GELU_MAX_BLOCKS = 1024 };

DEVFN float gelu_one(float x) {
    const float u = GELU_K0 * (x + GELU_K1 * x * x * x);
    const float a = expf(-2.0f * fabsf(u));
    return x * ((u >= 0.0f ? 1.0f : a) / (1.0f + a));
}

DEVFN float gelu_grad_one(float x) {
    const float x2 = x * x;
    const float u = GELU_K0 * (x + GELU_K1 * x2 * x);
    const float du = GELU_K0 * (1.0f + 3.0f * GELU_K1 * x2);
    const float a = expf(-2.0f * fabsf(u));
    const float r = 1.0f / (1.0f + a);
    const float s = (u >= 0.0f ? 1.0f : a) * r;
    const float g = s + 2.0f * x * du * (a * r * r);
    return x > 30.0f ? 1.0f : (x < -30.0f ? 0.0f : g);
}

template <typename T> KERNEL gelu_fwd_kernel(T *out, const T *inp, size_t N) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < N; i += stride)
        tri_cu_st(out, i, gelu_one(tri_cu_ld(inp, i)));
}

/* dinp may alias dout: each element is read before it is written, by the
 * same thread. */
template <typename T> KERNEL gelu_bwd_kernel(T *dinp, const T *inp, const T *dout, size_t N) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < N; i += stride)
        tri_cu_st(dinp, i, gelu_grad_one(tri_cu_ld(inp, i)) * tri_cu_ld(dout, i));
}

static unsigned gelu_blocks(size_t N) {
    const size_t b = (N + GELU_THREADS - 1) / GELU_THREADS;
    return b < GELU_MAX_BLOCKS ? (unsigned)b : (unsigned)GELU_MAX_BLOCKS;
}

extern "C" void TRI_CU(gelu_fwd)(void *stream, tri_dtype dt, void *out, const void *inp, size_t N) {
    if (N == 0) return;
    TRI_CU_DTYPE_SWITCH(dt, "gelu_fwd", T,
                        LAUNCH(gelu_fwd_kernel<T>, gelu_blocks(N), GELU_THREADS, 0, stream, (T *)out, (const T *)inp,
                               N););
}

extern "C" void TRI_CU(gelu_bwd)(void *stream, tri_dtype dt, void *dinp, const void *inp, const void *dout, size_t N) {
    if (N == 0) return;
    TRI_CU_DTYPE_SWITCH(dt, "gelu_bwd", T,
                        LAUNCH(gelu_bwd_kernel<T>, gelu_blocks(N), GELU_THREADS, 0, stream, (T *)dinp, (const T *)inp,
                               (const T *)dout, N););
}
