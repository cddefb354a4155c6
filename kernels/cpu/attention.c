/* Causal multi-head self-attention on the CPU. Contracts in kernels/ops.h.
 *
 * One (batch, head) pair is one unit of work: an OpenMP loop runs over the
 * B*NH pairs and each pair calls OpenBLAS single-threaded (Debian's OpenMP
 * OpenBLAS does not spawn threads inside a parallel region). Within a pair the
 * T query rows go in blocks of ATT_BLOCK rows; a block [i0, i1) needs keys
 * [0, i1) only, so the GEMMs skip most of the masked upper triangle.
 *
 * Layouts (C = NH * HS):
 *   qkv  (B, T, 3, NH, HS): q of head h at row offset h*HS, k at C + h*HS,
 *        v at 2C + h*HS; rows of one head are 3C floats apart.
 *   out  (B, T, NH, HS): rows C floats apart.
 *   att  (B, NH, T, T): probabilities, zeros above the diagonal. */
#include <cblas.h>
#include <omp.h>

#include "kernels/cpu/cpu_internal.h"

enum { ATT_BLOCK = 64 };

static blasint blas_dim(size_t n) {
    TRI_CHECK(n <= (size_t)INT_MAX);
    return (blasint)n;
}

/* Row i of a (T, T) block of scores S (already scaled) becomes softmax over
 * j <= i, in place, and zeros for i < j < T. */
static void causal_softmax_row(float *p, size_t i, size_t T) {
    const size_t n = i + 1;
    const float mx = row_max(p, n);
    const float inv = 1.0f / row_exp_sum_inplace(p, n, mx);
    for (size_t j = 0; j < n; j++) p[j] *= inv;
    if (n < T) memset(p + n, 0, (T - n) * sizeof(float));
}

/* out (B, T, NH, HS) = softmax(causal(Q K^T / sqrt(HS))) V     [overwrite]
 * att (B, NH, T, T) = the probabilities                        [overwrite] */
void tri_cpu_attention_fwd(float *out, float *att, const float *qkv, size_t B, size_t T, int NH, int HS) {
    TRI_CHECK(NH > 0 && HS > 0);
    const size_t C = (size_t)NH * (size_t)HS, C3 = 3 * C;
    const size_t pairs = B * (size_t)NH;
    const float scale = 1.0f / sqrtf((float)HS);
    const blasint hs = blas_dim((size_t)HS), ld3 = blas_dim(C3), ldo = blas_dim(C), ldt = blas_dim(T);
#pragma omp parallel for schedule(static) if (pairs > 1)
    for (size_t bh = 0; bh < pairs; bh++) {
        const size_t b = bh / (size_t)NH, h = bh % (size_t)NH;
        const float *q = qkv + b * T * C3 + h * (size_t)HS; /* (T, HS), ld 3C */
        const float *k = q + C, *v = q + 2 * C;
        float *P = att + bh * T * T;                 /* (T, T) */
        float *o = out + b * T * C + h * (size_t)HS; /* (T, HS), ld C */
        for (size_t i0 = 0; i0 < T; i0 += ATT_BLOCK) {
            const size_t i1 = i0 + ATT_BLOCK < T ? i0 + ATT_BLOCK : T;
            const blasint rows = (blasint)(i1 - i0), keys = (blasint)i1;
            /* S[i0:i1, 0:i1] = scale * Q[i0:i1] K[0:i1]^T */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, keys, hs, scale, q + i0 * C3, ld3, k, ld3, 0.0f,
                        P + i0 * T, ldt);
            for (size_t i = i0; i < i1; i++) causal_softmax_row(P + i * T, i, T);
            /* O[i0:i1] = P[i0:i1, 0:i1] V[0:i1] (P is 0 above the diagonal) */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, keys, 1.0f, P + i0 * T, ldt, v, ld3, 0.0f,
                        o + i0 * C, ldo);
        }
    }
}

/* One (T, T) tile per thread, for dP and then dS in place. The backward uses
 * at most omp_get_max_threads() threads, so the thread count must not grow
 * between this call and attention_bwd. */
size_t tri_cpu_attention_scratch_floats(size_t B, size_t T, int NH, int HS) {
    const size_t nt = (size_t)omp_get_max_threads();
    return nt * T * T;
}

/* dqkv (B, T, 3, NH, HS)                                       [overwrite]
 * With P = att, dO = dout, per (b, h):
 *   dP = dO V^T;  dS = P * (dP - rowsum(dP * P));
 *   dQ = scale * dS K;  dK = scale * dS^T Q;  dV = P^T dO.
 * dP/dS live in this thread's (T, T) scratch tile; only the block-causal part
 * (rows of block [i0, i1), columns [0, i1)) is computed, with dS set to 0 above
 * the diagonal inside each block, so every region a later GEMM reads is written. */
void tri_cpu_attention_bwd(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *att, size_t B,
                           size_t T, int NH, int HS) {
    TRI_CHECK(NH > 0 && HS > 0);
    const size_t C = (size_t)NH * (size_t)HS, C3 = 3 * C;
    const size_t pairs = B * (size_t)NH;
    const float scale = 1.0f / sqrtf((float)HS);
    const blasint hs = blas_dim((size_t)HS), ld3 = blas_dim(C3), ldo = blas_dim(C), ldt = blas_dim(T);
    const int nslots = omp_get_max_threads();
#pragma omp parallel num_threads(nslots) if (pairs > 1)
    {
        float *dS = scratch + (size_t)omp_get_thread_num() * T * T; /* (T, T) */
#pragma omp for schedule(static)
        for (size_t bh = 0; bh < pairs; bh++) {
            const size_t b = bh / (size_t)NH, h = bh % (size_t)NH;
            const size_t off = b * T * C3 + h * (size_t)HS;
            const float *q = qkv + off, *k = q + C, *v = q + 2 * C; /* (T, HS), ld 3C */
            float *dq = dqkv + off, *dk = dq + C, *dv = dq + 2 * C; /* (T, HS), ld 3C */
            const float *P = att + bh * T * T;                      /* (T, T) */
            const float *dO = dout + b * T * C + h * (size_t)HS;    /* (T, HS), ld C */
            for (size_t i0 = 0; i0 < T; i0 += ATT_BLOCK) {
                const size_t i1 = i0 + ATT_BLOCK < T ? i0 + ATT_BLOCK : T;
                const blasint rows = (blasint)(i1 - i0), keys = (blasint)i1;
                /* dP[i0:i1, 0:i1] = dO[i0:i1] V[0:i1]^T */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, keys, hs, 1.0f, dO + i0 * C, ldo, v, ld3,
                            0.0f, dS + i0 * T, ldt);
                for (size_t i = i0; i < i1; i++) {
                    const float *p = P + i * T;
                    float *d = dS + i * T;
                    const size_t n = i + 1;
                    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
                    for (size_t j = 0; j < n; j++) dot += d[j] * p[j];
                    for (size_t j = 0; j < n; j++) d[j] = p[j] * (d[j] - dot);
                    for (size_t j = n; j < i1; j++) d[j] = 0.0f;
                }
                /* dQ[i0:i1] = scale * dS[i0:i1, 0:i1] K[0:i1] */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, keys, scale, dS + i0 * T, ldt, k, ld3,
                            0.0f, dq + i0 * C3, ld3);
            }
            for (size_t j0 = 0; j0 < T; j0 += ATT_BLOCK) {
                const size_t j1 = j0 + ATT_BLOCK < T ? j0 + ATT_BLOCK : T;
                const blasint cols = (blasint)(j1 - j0), queries = (blasint)(T - j0);
                /* dV[j0:j1] = P[j0:T, j0:j1]^T dO[j0:T]  (P[i, j] = 0 for i < j) */
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, hs, queries, 1.0f, P + j0 * T + j0, ldt,
                            dO + j0 * C, ldo, 0.0f, dv + j0 * C3, ld3);
                /* dK[j0:j1] = scale * dS[j0:T, j0:j1]^T Q[j0:T] */
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, hs, queries, scale, dS + j0 * T + j0, ldt,
                            q + j0 * C3, ld3, 0.0f, dk + j0 * C3, ld3);
            }
        }
    }
}
