/* Linear layer on the CPU: OpenBLAS sgemm (row-major), bias pre-filled.
 * Contracts in kernels/ops.h (matmul_fwd, matmul_bwd). */
#include <cblas.h>
#include <string.h>

#include "kernels/cpu/cpu_internal.h"

/* BLAS takes int sizes: every size (and leading dimension) must fit. */
static blasint blas_dim(size_t n) {
    TRI_CHECK(n <= (size_t)INT_MAX);
    return (blasint)n;
}

/* out (N, OC) = inp (N, C) @ weight (OC, C)^T + bias (OC)     [overwrite; bias may be NULL]
 * With a bias, every row of out is first set to the bias and sgemm adds the
 * product (beta = 1); without, sgemm overwrites (beta = 0). */
void tri_cpu_matmul_fwd(float *out, const float *inp, const float *weight, const float *bias, size_t N, size_t C,
                        size_t OC) {
    if (N == 0 || OC == 0) return;
    float beta = 0.0f;
    if (bias != NULL) {
        beta = 1.0f;
#pragma omp parallel for schedule(static) if (N * OC >= TRI_CPU_PAR_MIN)
        for (size_t n = 0; n < N; n++) memcpy(out + n * OC, bias, OC * sizeof(float));
    }
    if (C == 0) {
        if (bias == NULL) memset(out, 0, N * OC * sizeof(float));
        return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blas_dim(N), blas_dim(OC), blas_dim(C), 1.0f, inp, blas_dim(C),
                weight, blas_dim(C), beta, out, blas_dim(OC));
}

/* dinp (N, C)     = dout (N, OC) @ weight (OC, C)     [overwrite; dinp may be NULL]
 * dweight (OC, C) += dout^T @ inp (N, C)              [accumulate; may be NULL]
 * dbias (OC)      += column sums of dout              [accumulate; may be NULL]
 * The three are independent computations, so the outputs of one call with all
 * three equal those of calls that each ask for a part, bit for bit (the
 * zero-bubble split of backward relies on it: model/runtime.h). */
void tri_cpu_matmul_bwd(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                        const float *weight, size_t N, size_t C, size_t OC) {
    if (dbias != NULL) tri_cpu_colsum_acc(dbias, dout, N, OC);
    if (dinp != NULL && N > 0 && C > 0) {
        if (OC == 0)
            memset(dinp, 0, N * C * sizeof(float));
        else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, blas_dim(N), blas_dim(C), blas_dim(OC), 1.0f, dout,
                        blas_dim(OC), weight, blas_dim(C), 0.0f, dinp, blas_dim(C));
    }
    if (dweight != NULL && N > 0 && C > 0 && OC > 0)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, blas_dim(OC), blas_dim(C), blas_dim(N), 1.0f, dout,
                    blas_dim(OC), inp, blas_dim(C), 1.0f, dweight, blas_dim(C));
}
