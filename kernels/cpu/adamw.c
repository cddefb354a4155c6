/* AdamW on a contiguous span, on the CPU: one fused pass over the span, in
 * blocks that stay in L1. Contract in kernels/ops.h. */
#if defined(__AVX__)
#include <immintrin.h>
#endif

#include "kernels/cpu/cpu_internal.h"

/* Elements per block: the square roots of one block are taken together. */
enum { ADAMW_BLOCK = 256 };

/* x (n) = sqrt(x), x >= 0. sqrtf does not vectorise without -fno-math-errno
 * (it may set errno), so the vector square root is spelled out; it is
 * correctly rounded like sqrtf, so every path gives the same bits. */
static void sqrt_inplace(float *x, size_t n) {
    size_t i = 0;
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, _mm512_sqrt_ps(_mm512_loadu_ps(x + i)));
#elif defined(__AVX__)
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_sqrt_ps(_mm256_loadu_ps(x + i)));
#endif
    for (; i < n; i++) x[i] = sqrtf(x[i]);
}

/* param, m, v (n) updated in place; grad (n) read.
 *   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
 *   param -= lr * (mhat / (sqrt(vhat) + eps) + wd * param)
 * with mhat = m / (1 - b1^t), vhat = v / (1 - b2^t), t >= 1. The bias
 * corrections are computed once in double. */
void tri_cpu_adamw(float *param, float *m, float *v, const float *grad, size_t n, float lr, float beta1, float beta2,
                   float eps, float wd, int t) {
    TRI_CHECK(t >= 1);
    const float ibc1 = (float)(1.0 / (1.0 - pow((double)beta1, (double)t)));
    const float ibc2 = (float)(1.0 / (1.0 - pow((double)beta2, (double)t)));
    const float a1 = 1.0f - beta1, a2 = 1.0f - beta2;
    const size_t nblk = (n + ADAMW_BLOCK - 1) / ADAMW_BLOCK;
#pragma omp parallel for schedule(static) if (n >= TRI_CPU_PAR_MIN)
    for (size_t bk = 0; bk < nblk; bk++) {
        const size_t i0 = bk * ADAMW_BLOCK;
        const size_t w = n - i0 < ADAMW_BLOCK ? n - i0 : ADAMW_BLOCK;
        float *restrict pp = param + i0, *restrict mm = m + i0, *restrict vv = v + i0;
        const float *restrict gg = grad + i0;
        float den[ADAMW_BLOCK]; /* (w) sqrt(vhat) */
        for (size_t j = 0; j < w; j++) {
            const float g = gg[j];
            const float mi = beta1 * mm[j] + a1 * g;
            const float vi = beta2 * vv[j] + a2 * (g * g);
            mm[j] = mi;
            vv[j] = vi;
            den[j] = vi * ibc2;
        }
        sqrt_inplace(den, w);
        for (size_t j = 0; j < w; j++) {
            const float p = pp[j];
            pp[j] = p - lr * ((mm[j] * ibc1) / (den[j] + eps) + wd * p);
        }
    }
}
