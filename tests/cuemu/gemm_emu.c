/* The emulated backend's GEMM executor (kernels/cuda/gemm.h under
 * TRI_CUEMU): the plan cache exactly as the cuBLASLt executor uses it, a
 * stand-in for the heuristic search that checks what cuBLASLt would refuse
 * (leading dimensions shorter than the stored rows, pointers less aligned
 * than the plan says, a bias pointer missing for an epilogue), and the CPU's
 * sgemm in column-major terms with the plan's transposes and leading
 * dimensions as given, then the epilogue on the host. A plan with its
 * arithmetic wrong computes a wrong product here, so the op tests catch it. */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/gemm.h"
#include "src/base/err.h"

int TRI_CU(gemm_init)(tri_gemm_exec *x, void *workspace, size_t bytes) {
    memset(x, 0, sizeof *x);
    x->workspace = workspace;
    x->workspace_bytes = bytes;
    return 0;
}

void TRI_CU(gemm_free)(tri_gemm_exec *x) {
    if (x == NULL) return;
    tri_gemm_cache_free(&x->cache);
    memset(x, 0, sizeof *x);
}

/* What cuBLASLt checks before it runs a GEMM. */
static void validate(const tri_gemm_desc *d) {
    char s[256];
    tri_gemm_desc_str(d, s, sizeof s);
    const uint64_t arows = d->transa ? d->k : d->m, brows = d->transb ? d->n : d->k;
    if (d->m == 0 || d->n == 0 || d->k == 0 || d->lda < arows || d->ldb < brows || d->ldc < d->m)
        TRI_FAIL("emulated cuBLASLt: invalid GEMM %s", s);
    if (d->m > INT32_MAX || d->n > INT32_MAX || d->k > INT32_MAX || d->lda > INT32_MAX || d->ldb > INT32_MAX ||
        d->ldc > INT32_MAX)
        TRI_FAIL("emulated cuBLASLt: GEMM %s is beyond the CPU sgemm's int sizes", s);
    if (d->align == 0 || d->align > 16 || (d->align & (d->align - 1)) != 0)
        TRI_FAIL("emulated cuBLASLt: GEMM %s has a bad alignment", s);
}

void TRI_CU(gemm_run)(tri_gemm_exec *x, void *stream, const tri_gemm_call *g) {
    const tri_gemm_desc *d = &g->d;
    tri_gemm_entry *e = tri_gemm_cache_find(&x->cache, d);
    if (e == NULL) {
        validate(d);
        e = tri_gemm_cache_add(&x->cache, d);
        if (e == NULL) TRI_FAIL("out of host memory for the GEMM plan cache");
        x->heuristic_calls++;
        e->workspace = 0;
    }
    /* an algorithm chosen for an alignment holds only for pointers at least as aligned */
    const void *ptrs[4] = {g->A, g->B, g->D, g->bias};
    for (int i = 0; i < 4; i++)
        if (ptrs[i] != NULL && tri_gemm_ptr_align(ptrs[i]) < d->align)
            TRI_FAIL("emulated cuBLASLt: operand %d (%p) is less aligned than the plan's %u bytes", i, ptrs[i],
                     d->align);
    if (d->epilogue != TRI_GEMM_EPI_NONE && g->bias == NULL) TRI_FAIL("emulated cuBLASLt: epilogue without a bias");
    const int m = (int)d->m, n = (int)d->n, k = (int)d->k;
    const float *A = g->A, *B = g->B;
    float *D = g->D, *bias = g->bias;
    cblas_sgemm(CblasColMajor, d->transa ? CblasTrans : CblasNoTrans, d->transb ? CblasTrans : CblasNoTrans, m, n, k,
                1.0f, A, (int)d->lda, B, (int)d->ldb, d->accumulate ? 1.0f : 0.0f, D, (int)d->ldc);
    if (d->epilogue == TRI_GEMM_EPI_BIAS) {
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) D[i + (size_t)j * d->ldc] += bias[i];
    } else if (d->epilogue == TRI_GEMM_EPI_BGRADB) {
        /* bias (n) = sums of op(B) (k x n) over k */
        for (int j = 0; j < n; j++) {
            float s = 0.0f;
            for (int kk = 0; kk < k; kk++) s += d->transb ? B[j + (size_t)kk * d->ldb] : B[kk + (size_t)j * d->ldb];
            bias[j] = s;
        }
    }
}
