/* Rotary position embedding on the q and k heads of a packed qkv on CUDA,
 * Hugging Face's rotate-half pairing, fp32 or bf16 storage (fp32
 * arithmetic; common.cuh's tri_cu_ld / tri_cu_st), in place.
 * Contracts: rope_fwd / rope_bwd in kernels/ops.h, the entry points in
 * kernels/cuda/kernels.h. As kernels/cpu/rope.c: row t is position
 * pos = pos0 + t, the angle a = (float)pos * inv_freq[i] is an fp32 product
 * (Hugging Face's), cos and sin of it by sincosf (CUDA's accurate one, with
 * its full range reduction: angles reach thousands of radians), and
 *   (x_i, x_{i+HS/2}) -> (x_i cos - x_{i+HS/2} sin, x_{i+HS/2} cos + x_i sin),
 * the backward with sin negated (the transpose). The CPU's cosf / sinf and
 * CUDA's sincosf agree within an ulp or two, not bit for bit.
 * One thread per (row, pair i < HS/2): one sincosf, then the pair i of each
 * q and k head of the row in turn (a warp's lanes take consecutive i: each
 * head's reads and writes are contiguous); a thread reads and writes its own
 * elements only. A grid-stride loop beyond ROPE_MAX_BLOCKS blocks. */
#include "kernels/cuda/common.cuh"

enum { ROPE_THREADS = 256, ROPE_MAX_BLOCKS = 4096 };

/* x (B T rows of (NH + 2 NKV) HS): the first `heads` = NH + NKV heads of every
 * row rotated; sgn = 1 forward, -1 backward. */
template <typename T>
KERNEL rope_kernel(T *x, const float *inv_freq, size_t rows, int T_, int heads, int W, int half, size_t pos0,
                   float sgn) {
    const size_t n = rows * (size_t)half, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += stride) {
        const size_t i = idx % (size_t)half, row = idx / (size_t)half;
        const float pos = (float)(pos0 + row % (size_t)T_);
        float sn, cs;
        sincosf(pos * inv_freq[i], &sn, &cs);
        sn *= sgn;
        for (int hd = 0; hd < heads; hd++) {
            const size_t e = row * (size_t)W + (size_t)hd * (size_t)(2 * half) + i;
            const float u = tri_cu_ld(x, e), v = tri_cu_ld(x, e + half);
            tri_cu_st(x, e, u * cs - v * sn);
            tri_cu_st(x, e + half, v * cs + u * sn);
        }
    }
}

static void rope(void *stream, tri_dtype dt, void *x, const float *inv_freq, size_t B, size_t T, int NH, int NKV,
                 int HS, size_t pos0, float sgn, const char *what) {
    if (B == 0 || T == 0 || NH <= 0 || HS <= 0) return;
    if (NKV <= 0 || HS % 2 != 0) tri_cu_fail(what, "NKV must be positive and HS even", __FILE__, __LINE__);
    const int heads = NH + NKV, W = (NH + 2 * NKV) * HS, half = HS / 2;
    const size_t n = B * T * (size_t)half, blocks = tri_cu_blocks(n, ROPE_THREADS);
    const unsigned grid = blocks < ROPE_MAX_BLOCKS ? (unsigned)blocks : (unsigned)ROPE_MAX_BLOCKS;
    TRI_CU_DTYPE_SWITCH(dt, what, S,
                        LAUNCH(rope_kernel<S>, grid, ROPE_THREADS, 0, stream, (S *)x, inv_freq, B * T, (int)T, heads, W,
                               half, pos0, sgn););
}

extern "C" void TRI_CU(rope_fwd)(void *stream, tri_dtype dt, void *qkv, const float *inv_freq, size_t B, size_t T,
                                 int NH, int NKV, int HS, size_t pos0) {
    rope(stream, dt, qkv, inv_freq, B, T, NH, NKV, HS, pos0, 1.0f, "rope_fwd");
}

extern "C" void TRI_CU(rope_bwd)(void *stream, tri_dtype dt, void *dqkv, const float *inv_freq, size_t B, size_t T,
                                 int NH, int NKV, int HS, size_t pos0) {
    rope(stream, dt, dqkv, inv_freq, B, T, NH, NKV, HS, pos0, -1.0f, "rope_bwd");
}
