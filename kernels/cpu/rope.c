/* Rotary position embedding on the q and k heads of a packed qkv, on the
 * CPU, with Hugging Face's rotate-half pairing. Contracts in kernels/ops.h
 * (rope_fwd, rope_bwd).
 *
 * For row t (position pos = pos0 + t) and i < HS/2, the angle is
 * a = (float)pos * inv_freq[i], an fp32 product as Hugging Face forms it;
 * cos a and sin a come from libm in fp32 (correctly range-reduced), once
 * per (t, i), and serve every batch row and every q and k head. The pair
 * (x_i, x_{i+HS/2}) becomes (x_i cos - x_{i+HS/2} sin, x_{i+HS/2} cos + x_i sin);
 * the backward applies the transpose (angle -a). Every element is a fixed
 * sequence of fp32 operations: bitwise the same for any thread count. */
#include <omp.h>

#include "kernels/cpu/cpu_internal.h"

/* x (B, T, NH + 2 NKV, HS): rotate the first NH + NKV heads of every row by
 * +a (dir = 1) or -a (dir = -1). */
static void rope_apply(float *x, const float *inv_freq, size_t B, size_t T, int NH, int NKV, int HS, size_t pos0,
                       int dir) {
    TRI_CHECK(NH > 0 && NKV > 0 && HS > 0 && HS % 2 == 0);
    const size_t half = (size_t)HS / 2, W = (size_t)(NH + 2 * NKV) * (size_t)HS, heads = (size_t)(NH + NKV);
#pragma omp parallel if (B * T * heads * (size_t)HS >= TRI_CPU_PAR_MIN && T > 1)
    {
        float *cs = tri_cpu_alloc(2 * half * sizeof(float)); /* cos (half), then sin (half) */
        if (cs == NULL) TRI_FAIL("out of host memory: rope needs %zu bytes per thread", 2 * half * sizeof(float));
        float *sn = cs + half;
#pragma omp for schedule(static)
        for (size_t t = 0; t < T; t++) {
            const float pos = (float)(pos0 + t);
            for (size_t i = 0; i < half; i++) {
                const float a = pos * inv_freq[i];
                cs[i] = cosf(a);
                sn[i] = dir > 0 ? sinf(a) : -sinf(a);
            }
            for (size_t b = 0; b < B; b++)
                for (size_t hd = 0; hd < heads; hd++) {
                    float *x1 = x + (b * T + t) * W + hd * (size_t)HS, *x2 = x1 + half;
#pragma omp simd
                    for (size_t i = 0; i < half; i++) {
                        const float u = x1[i], v = x2[i];
                        x1[i] = u * cs[i] - v * sn[i];
                        x2[i] = v * cs[i] + u * sn[i];
                    }
                }
        }
        tri_cpu_free(cs);
    }
}

void tri_cpu_rope_fwd(float *qkv, const float *inv_freq, size_t B, size_t T, int NH, int NKV, int HS, size_t pos0) {
    rope_apply(qkv, inv_freq, B, T, NH, NKV, HS, pos0, 1);
}

void tri_cpu_rope_bwd(float *dqkv, const float *inv_freq, size_t B, size_t T, int NH, int NKV, int HS, size_t pos0) {
    rope_apply(dqkv, inv_freq, B, T, NH, NKV, HS, pos0, -1);
}
