/* RMSNorm over the last dimension on the CPU (Llama's norm, no mean and no
 * bias). Contracts in kernels/ops.h (rmsnorm_fwd, rmsnorm_bwd). */
#include "kernels/cpu/cpu_internal.h"

/* out (N, C) = inp * rstd * w (C)                             [overwrite]
 * rstd (N) = 1 / sqrt(mean(inp^2) + eps), saved for the backward [overwrite]
 * The product is taken as (inp * rstd) * w, Hugging Face's order. */
void tri_cpu_rmsnorm_fwd(float *out, float *rstd, const float *inp, const float *w, size_t N, size_t C, float eps) {
    if (C == 0) return;
    const float invC = 1.0f / (float)C;
#pragma omp parallel for schedule(static) if (N * C >= TRI_CPU_PAR_MIN)
    for (size_t n = 0; n < N; n++) {
        const float *x = inp + n * C;
        float *o = out + n * C;
        float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
        for (size_t c = 0; c < C; c++) ss += x[c] * x[c];
        const float rs = 1.0f / sqrtf(ss * invC + eps);
#pragma omp simd
        for (size_t c = 0; c < C; c++) o[c] = (x[c] * rs) * w[c];
        rstd[n] = rs;
    }
}

/* Columns per block of the dw reduction. */
enum { RMS_COL_BLOCK = 64 };

/* dinp (N, C) += ..., dw (C) += ...                           [both accumulate]
 * With xhat = inp * rstd and g = dout * w (per row):
 *   dinp += rstd * (g - xhat * mean(g * xhat));  dw += sum over rows of dout * xhat.
 * The row part runs over rows; dw over column blocks, each column summed over
 * rows in index order: bitwise the same for any thread count. */
void tri_cpu_rmsnorm_bwd(float *dinp, float *dw, const float *dout, const float *inp, const float *w, const float *rstd,
                         size_t N, size_t C) {
    if (C == 0 || N == 0) return;
    const float invC = 1.0f / (float)C;
    const size_t nblk = (C + RMS_COL_BLOCK - 1) / RMS_COL_BLOCK;
#pragma omp parallel if (N * C >= TRI_CPU_PAR_MIN)
    {
#pragma omp for schedule(static) nowait
        for (size_t n = 0; n < N; n++) {
            const float *x = inp + n * C, *d = dout + n * C;
            float *di = dinp + n * C;
            const float rs = rstd[n];
            float sgx = 0.0f;
#pragma omp simd reduction(+ : sgx)
            for (size_t c = 0; c < C; c++) sgx += (d[c] * w[c]) * (x[c] * rs);
            const float mgx = sgx * invC;
#pragma omp simd
            for (size_t c = 0; c < C; c++) di[c] += ((d[c] * w[c]) - (x[c] * rs) * mgx) * rs;
        }
#pragma omp for schedule(static)
        for (size_t bk = 0; bk < nblk; bk++) {
            const size_t c0 = bk * RMS_COL_BLOCK;
            const size_t width = C - c0 < RMS_COL_BLOCK ? C - c0 : RMS_COL_BLOCK;
            float aw[RMS_COL_BLOCK] = {0}; /* (width) sums */
            for (size_t n = 0; n < N; n++) {
                const float *x = inp + n * C + c0, *d = dout + n * C + c0;
                const float rs = rstd[n];
                for (size_t j = 0; j < width; j++) aw[j] += d[j] * (x[j] * rs);
            }
            for (size_t j = 0; j < width; j++) dw[c0 + j] += aw[j];
        }
    }
}
