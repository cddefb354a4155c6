/* The CUDA backend's GEMMs through cuBLASLt (kernels/cuda/gemm.h): fp32 or
 * bf16 storage as the plan's types say (CUDA_R_32F / CUDA_R_16BF per
 * operand: fwd and dinp all in the compute dtype, dweight bf16 x bf16 into
 * an fp32 D and an fp32 BGRADB output), fp32 compute and fp32 alpha / beta
 * (CUBLAS_COMPUTE_32F, scale type CUDA_R_32F: no TF32, so that results stay
 * comparable with the CPU backend's), one plan per distinct GEMM, built and
 * searched at its first call and cached in the executor. Every cuBLASLt
 * status is checked (TRI_CUBLAS_CHECK: file:line, the call, the rank), but
 * one: the search itself may find nothing, or refuse the configuration
 * (CUBLAS_STATUS_NOT_SUPPORTED, or INVALID_VALUE for an epilogue's aux
 * leading dimension or type it does not take; size-1 GEMMs among them),
 * which for a GEMM with an epilogue is the plan-time fallback of gemm.h,
 * never an abort. */
#include <cublasLt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/check.h"
#include "kernels/cuda/gemm.h"
#include "base/err.h"

_Static_assert(sizeof(cublasLtMatmulAlgo_t) <= sizeof(((tri_gemm_entry *)0)->algo),
               "the plan cache's algorithm bytes must hold a cublasLtMatmulAlgo_t");

_Noreturn static void cublas_fail(cublasStatus_t st, const char *what, const char *file, int line) {
    tri_error("cuBLASLt error at %s:%d (rank %d): %s: %s: %s", file, line, tri_cuda_world_rank(), what,
              cublasLtGetStatusName(st), cublasLtGetStatusString(st));
    abort();
}

#define TRI_CUBLAS_CHECK(call)                                                         \
    do {                                                                               \
        const cublasStatus_t st_ = (call);                                             \
        if (st_ != CUBLAS_STATUS_SUCCESS) cublas_fail(st_, #call, __FILE__, __LINE__); \
    } while (0)

static void release_entry(tri_gemm_entry *e) {
    if (e->handles[0]) cublasLtMatmulDescDestroy((cublasLtMatmulDesc_t)e->handles[0]);
    for (int i = 1; i < 4; i++)
        if (e->handles[i]) cublasLtMatrixLayoutDestroy((cublasLtMatrixLayout_t)e->handles[i]);
    memset(e->handles, 0, sizeof e->handles);
}

int TRI_CU(gemm_init)(tri_gemm_exec *x, void *workspace, size_t bytes) {
    memset(x, 0, sizeof *x);
    cublasLtHandle_t h = NULL;
    const cublasStatus_t st = cublasLtCreate(&h);
    if (st != CUBLAS_STATUS_SUCCESS)
        return tri_error("cuBLASLt: cublasLtCreate: %s: %s", cublasLtGetStatusName(st), cublasLtGetStatusString(st));
    x->handle = h;
    x->workspace = workspace;
    x->workspace_bytes = bytes;
    x->cache.release = release_entry;
    return 0;
}

void TRI_CU(gemm_free)(tri_gemm_exec *x) {
    if (x == NULL) return;
    tri_gemm_cache_free(&x->cache);
    if (x->handle) cublasLtDestroy((cublasLtHandle_t)x->handle);
    memset(x, 0, sizeof *x);
}

static cudaDataType_t cuda_type(tri_dtype t) {
    if (t == TRI_F32) return CUDA_R_32F;
    if (t == TRI_BF16) return CUDA_R_16BF;
    TRI_FAIL("cuBLASLt GEMM: storage dtype %d is neither fp32 nor bf16", (int)t);
}

/* A stored matrix of the plan: rows x cols (column-major) with leading dim ld. */
static cublasLtMatrixLayout_t layout(tri_dtype t, uint64_t rows, uint64_t cols, uint64_t ld) {
    cublasLtMatrixLayout_t l = NULL;
    TRI_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, cuda_type(t), rows, cols, (int64_t)ld));
    return l;
}

static cublasLtEpilogue_t lt_epilogue(tri_gemm_epilogue e) {
    switch (e) {
    case TRI_GEMM_EPI_NONE: return CUBLASLT_EPILOGUE_DEFAULT;
    case TRI_GEMM_EPI_BIAS: return CUBLASLT_EPILOGUE_BIAS;
    case TRI_GEMM_EPI_BGRADB: return CUBLASLT_EPILOGUE_BGRADB;
    case TRI_GEMM_EPI_GELU_AUX: return CUBLASLT_EPILOGUE_GELU_AUX;
    case TRI_GEMM_EPI_GELU_AUX_BIAS: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case TRI_GEMM_EPI_DGELU: return CUBLASLT_EPILOGUE_DGELU;
    case TRI_GEMM_EPI_DGELU_BGRAD: return CUBLASLT_EPILOGUE_DGELU_BGRAD;
    default: break;
    }
    TRI_FAIL("cuBLASLt GEMM: unknown epilogue %d", (int)e);
}

/* The pointers of one call: the bias and the aux matrix live in the
 * descriptor (the search reads their alignment there too). */
static void set_pointers(cublasLtMatmulDesc_t md, const tri_gemm_call *g) {
    if (tri_gemm_epi_bias_in(g->d.epilogue) || tri_gemm_epi_bias_out(g->d.epilogue)) {
        const void *bias = g->bias;
        TRI_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(md, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    }
    if (tri_gemm_epi_aux(g->d.epilogue)) {
        const void *aux = g->aux;
        TRI_CUBLAS_CHECK(
            cublasLtMatmulDescSetAttribute(md, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
    }
}

/* First call of a shape: descriptor, layouts, and the heuristics' best
 * algorithm for this workspace and alignment; or, for a GEMM with an
 * epilogue that the search finds nothing for (or refuses), the fallback. */
static void build(tri_gemm_exec *x, tri_gemm_entry *e, const tri_gemm_call *g) {
    const tri_gemm_desc *d = &e->d;
    cublasLtMatmulDesc_t md = NULL;
    TRI_CUBLAS_CHECK(cublasLtMatmulDescCreate(&md, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = d->transa ? CUBLAS_OP_T : CUBLAS_OP_N, tb = d->transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    TRI_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(md, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    TRI_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(md, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    const cublasLtEpilogue_t epi = lt_epilogue(d->epilogue);
    TRI_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(md, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    if (tri_gemm_epi_bias_in(d->epilogue) || tri_gemm_epi_bias_out(d->epilogue)) {
        /* D's type by default; said all the same (DGELU_BGRAD's fp32 bias
         * gradient under a bf16 D is the search's to take or refuse) */
        const int32_t bt = (int32_t)cuda_type(d->biastype);
        TRI_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(md, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
    }
    if (tri_gemm_epi_aux(d->epilogue)) {
        /* the aux type is left at its default, D's (the plans' auxtype):
         * cublasLt.h makes cublasLtMatmul itself refuse an aux type set for a
         * combination that does not take one, past the search */
        if (d->auxtype != d->dtype) TRI_FAIL("cuBLASLt GEMM: an aux matrix of a type other than D's");
        const int64_t ld = (int64_t)d->auxld;
        TRI_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(md, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
    }
    set_pointers(md, g);
    e->handles[0] = md;
    /* stored shapes: A is m x k (k x m when transposed), B k x n (n x k), D m x n */
    e->handles[1] = layout(d->atype, d->transa ? d->k : d->m, d->transa ? d->m : d->k, d->lda);
    e->handles[2] = layout(d->btype, d->transb ? d->n : d->k, d->transb ? d->k : d->n, d->ldb);
    e->handles[3] = layout(d->dtype, d->m, d->n, d->ldc);

    cublasLtMatmulPreference_t pref = NULL;
    TRI_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = x->workspace_bytes;
    TRI_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    const uint32_t al = d->align;
    TRI_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al, sizeof al));
    TRI_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al, sizeof al));
    TRI_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al, sizeof al));
    TRI_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al, sizeof al));
    cublasLtMatmulHeuristicResult_t res;
    memset(&res, 0, sizeof res);
    int found = 0;
    x->heuristic_calls++;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic((cublasLtHandle_t)x->handle, md, e->handles[1],
                                                             e->handles[2], e->handles[3], e->handles[3], pref, 1,
                                                             &res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    /* none found, or (with an epilogue) the configuration refused: no kernel for it */
    const int epi_refused =
        d->epilogue != TRI_GEMM_EPI_NONE && (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE);
    const int none = epi_refused || st == CUBLAS_STATUS_NOT_SUPPORTED ||
                     (st == CUBLAS_STATUS_SUCCESS && (found < 1 || res.state != CUBLAS_STATUS_SUCCESS));
    if (!none && st != CUBLAS_STATUS_SUCCESS) cublas_fail(st, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
    if (none && d->epilogue != TRI_GEMM_EPI_NONE) {
        tri_gemm_cache_fallback(&x->cache, e);
        return;
    }
    if (none) {
        char s[320];
        tri_gemm_desc_str(d, s, sizeof s);
        tri_error("cuBLASLt (rank %d): no algorithm for the GEMM %s within %zu bytes of workspace",
                  tri_cuda_world_rank(), s, x->workspace_bytes);
        abort();
    }
    memcpy(e->algo, &res.algo, sizeof res.algo);
    e->workspace = res.workspaceSize;
}

int TRI_CU(gemm_run)(tri_gemm_exec *x, void *stream, const tri_gemm_call *g) {
    /* every call: two calls with one key may misalign different pointers */
    if (tri_gemm_check_types(g) != 0) {
        char s[320];
        tri_gemm_desc_str(&g->d, s, sizeof s);
        TRI_FAIL("cuBLASLt GEMM %s: a type is neither fp32 nor bf16, or a pointer is not aligned to its element", s);
    }
    tri_gemm_entry *e = tri_gemm_cache_find(&x->cache, &g->d);
    const int first = e == NULL;
    if (first) {
        e = tri_gemm_cache_add(&x->cache, &g->d);
        if (e == NULL) TRI_FAIL("out of host memory for the GEMM plan cache");
        build(x, e, g);
    }
    if (e->no_algo) {
        x->cache.fallbacks++;
        return TRI_GEMM_NO_ALGO;
    }
    cublasLtMatmulDesc_t md = (cublasLtMatmulDesc_t)e->handles[0];
    set_pointers(md, g);
    const float one = 1.0f, beta = g->d.accumulate ? 1.0f : 0.0f;
    cublasLtMatmulAlgo_t algo;
    memcpy(&algo, e->algo, sizeof algo);
    const cublasStatus_t st = cublasLtMatmul((cublasLtHandle_t)x->handle, md, &one, g->A, e->handles[1], g->B,
                                             e->handles[2], &beta, g->D, e->handles[3], g->D, e->handles[3], &algo,
                                             x->workspace, e->workspace, (cudaStream_t)stream);
    /* still plan time: an epilogue the search took but the call refuses
     * (validated before anything is launched) falls back as one it refused */
    if (first && g->d.epilogue != TRI_GEMM_EPI_NONE &&
        (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE)) {
        tri_gemm_cache_fallback(&x->cache, e);
        x->cache.fallbacks++;
        return TRI_GEMM_NO_ALGO;
    }
    if (st != CUBLAS_STATUS_SUCCESS) cublas_fail(st, "cublasLtMatmul", __FILE__, __LINE__);
    return TRI_GEMM_RAN;
}
