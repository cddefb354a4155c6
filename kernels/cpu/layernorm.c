/* LayerNorm over the last dimension on the CPU, eps = 1e-5.
 * Contracts in kernels/ops.h (layernorm_fwd, layernorm_bwd). */
#include "kernels/cpu/cpu_internal.h"

static const float LN_EPS = 1e-5f;

/* out (N, C) = (inp - mean) * rstd * w (C) + b (C)             [overwrite]
 * mean (N), rstd (N) = 1 / sqrt(var + eps) saved for the backward [overwrite]
 * var is the biased variance (divided by C), from a second pass over the
 * row (still in L1) rather than E[x^2] - mean^2, which cancels. */
void tri_cpu_layernorm_fwd(float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
                           size_t N, size_t C) {
    if (C == 0) return;
    const float invC = 1.0f / (float)C;
#pragma omp parallel for schedule(static) if (N * C >= TRI_CPU_PAR_MIN)
    for (size_t n = 0; n < N; n++) {
        const float *x = inp + n * C;
        float *o = out + n * C;
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (size_t c = 0; c < C; c++) sum += x[c];
        const float m = sum * invC;
        float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
        for (size_t c = 0; c < C; c++) {
            const float d = x[c] - m;
            ss += d * d;
        }
        const float rs = 1.0f / sqrtf(ss * invC + LN_EPS);
        for (size_t c = 0; c < C; c++) o[c] = (x[c] - m) * rs * w[c] + b[c];
        mean[n] = m;
        rstd[n] = rs;
    }
}

/* Columns per block of the dw/db reduction (4 AVX-512 registers each). */
enum { LN_COL_BLOCK = 64 };

/* dinp (N, C) += ..., dw (C) += ..., db (C) += ...            [all accumulate]
 * With xhat = (inp - mean) * rstd and g = dout * w:
 *   dinp += rstd * (g - mean(g) - xhat * mean(g * xhat))     (per row)
 *   dw   += sum over rows of dout * xhat;  db += sum over rows of dout.
 * The row part runs over rows; dw/db run over column blocks, each column summed
 * over rows in index order, so no partial buffers are needed and the result
 * is bitwise the same for any thread count. */
void tri_cpu_layernorm_bwd(float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                           const float *mean, const float *rstd, size_t N, size_t C) {
    if (C == 0 || N == 0) return;
    const float invC = 1.0f / (float)C;
    const size_t nblk = (C + LN_COL_BLOCK - 1) / LN_COL_BLOCK;
#pragma omp parallel if (N * C >= TRI_CPU_PAR_MIN)
    {
#pragma omp for schedule(static) nowait
        for (size_t n = 0; n < N; n++) {
            const float *x = inp + n * C, *d = dout + n * C;
            float *di = dinp + n * C;
            const float m = mean[n], rs = rstd[n];
            float sg = 0.0f, sgx = 0.0f;
#pragma omp simd reduction(+ : sg, sgx)
            for (size_t c = 0; c < C; c++) {
                const float xhat = (x[c] - m) * rs;
                const float g = d[c] * w[c];
                sg += g;
                sgx += g * xhat;
            }
            const float mg = sg * invC, mgx = sgx * invC;
            for (size_t c = 0; c < C; c++) {
                const float xhat = (x[c] - m) * rs;
                const float g = d[c] * w[c];
                di[c] += (g - mg - xhat * mgx) * rs;
            }
        }
#pragma omp for schedule(static)
        for (size_t bk = 0; bk < nblk; bk++) {
            const size_t c0 = bk * LN_COL_BLOCK;
            const size_t width = C - c0 < LN_COL_BLOCK ? C - c0 : LN_COL_BLOCK;
            float aw[LN_COL_BLOCK] = {0}, ab[LN_COL_BLOCK] = {0}; /* (width) sums */
            for (size_t n = 0; n < N; n++) {
                const float *x = inp + n * C + c0, *d = dout + n * C + c0;
                const float m = mean[n], rs = rstd[n];
                for (size_t j = 0; j < width; j++) {
                    aw[j] += d[j] * ((x[j] - m) * rs);
                    ab[j] += d[j];
                }
            }
            for (size_t j = 0; j < width; j++) {
                dw[c0 + j] += aw[j];
                db[c0 + j] += ab[j];
            }
        }
    }
}
