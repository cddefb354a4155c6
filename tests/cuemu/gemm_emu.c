/* The emulated backend's GEMM executor (kernels/cuda/gemm.h under
 * TRI_CUEMU): the plan cache exactly as the cuBLASLt executor uses it, a
 * stand-in for the heuristic search that checks what cuBLASLt would refuse
 * (leading dimensions shorter than the stored rows, pointers less aligned
 * than the plan says, a bias pointer missing for an epilogue), and the CPU's
 * sgemm in column-major terms with the plan's transposes and leading
 * dimensions as given, then the epilogue on the host. A plan with its
 * arithmetic wrong computes a wrong product here, so the op tests catch it.
 *
 * bf16 operands (the plan's types) are widened to fp32 (exactly), the GEMM
 * and epilogue run in fp32 as cuBLASLt's CUBLAS_COMPUTE_32F does, and a bf16
 * D or bias output is rounded once, to nearest even, as it is stored (with
 * beta 1, the old bf16 D is widened and accumulated first). */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/gemm.h"
#include "kernels/half.h"
#include "base/err.h"

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

/* A stored rows x cols matrix (leading dimension ld) of type t as fp32 with
 * the same leading dimension: p itself for fp32, else a widened copy (the
 * gaps between columns zero). */
static float *widen(const void *p, tri_dtype t, uint64_t rows, uint64_t cols, uint64_t ld) {
    if (t == TRI_F32) return (float *)p;
    float *w = calloc(ld * cols > 0 ? ld * cols : 1, sizeof(float));
    if (w == NULL) TRI_FAIL("emulated cuBLASLt: out of host memory");
    const uint16_t *h = p;
    for (uint64_t j = 0; j < cols; j++)
        for (uint64_t i = 0; i < rows; i++) w[i + j * ld] = tri_bf16_to_f32(h[i + j * ld]);
    return w;
}

/* The fp32 values back into p (type t), each rounded once; frees w. */
static void narrow(void *p, tri_dtype t, float *w, uint64_t rows, uint64_t cols, uint64_t ld) {
    if (t == TRI_F32) return;
    uint16_t *h = p;
    for (uint64_t j = 0; j < cols; j++)
        for (uint64_t i = 0; i < rows; i++) h[i + j * ld] = tri_f32_to_bf16(w[i + j * ld]);
    free(w);
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
    if (tri_gemm_check_types(g) != 0) { /* every call, as gemm_lt.c */
        char s[320];
        tri_gemm_desc_str(d, s, sizeof s);
        TRI_FAIL("emulated cuBLASLt: GEMM %s: a type is neither fp32 nor bf16, or a pointer is not aligned to its "
                 "element",
                 s);
    }
    const int m = (int)d->m, n = (int)d->n, k = (int)d->k;
    const uint64_t arows = d->transa ? d->k : d->m, acols = d->transa ? d->m : d->k;
    const uint64_t brows = d->transb ? d->n : d->k, bcols = d->transb ? d->k : d->n;
    const float *A = widen(g->A, d->atype, arows, acols, d->lda), *B = widen(g->B, d->btype, brows, bcols, d->ldb);
    float *D = d->dtype == TRI_F32 ? (float *)g->D
               : d->accumulate     ? widen(g->D, d->dtype, d->m, d->n, d->ldc)
                                   : calloc(d->ldc * d->n, sizeof(float));
    if (D == NULL) TRI_FAIL("emulated cuBLASLt: out of host memory");
    const uint64_t blen = d->epilogue == TRI_GEMM_EPI_BIAS ? d->m : d->n;
    float *bias = NULL;
    if (d->epilogue == TRI_GEMM_EPI_BIAS)
        bias = widen(g->bias, d->biastype, blen, 1, blen);
    else if (d->epilogue == TRI_GEMM_EPI_BGRADB)
        bias = d->biastype == TRI_F32 ? g->bias : calloc(blen, sizeof(float));
    if (d->epilogue != TRI_GEMM_EPI_NONE && bias == NULL) TRI_FAIL("emulated cuBLASLt: out of host memory");
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
    narrow(g->D, d->dtype, D, d->m, d->n, d->ldc);
    if (d->epilogue == TRI_GEMM_EPI_BGRADB) narrow(g->bias, d->biastype, bias, blen, 1, blen);
    if (d->epilogue == TRI_GEMM_EPI_BIAS && d->biastype != TRI_F32) free(bias);
    if (d->atype != TRI_F32) free((float *)A);
    if (d->btype != TRI_F32) free((float *)B);
}
