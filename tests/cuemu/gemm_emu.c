/* The emulated backend's GEMM executor (kernels/cuda/gemm.h under
 * TRI_CUEMU): the plan cache exactly as the cuBLASLt executor uses it, a
 * stand-in for the heuristic search that checks what cuBLASLt would refuse
 * (leading dimensions shorter than the stored rows, pointers less aligned
 * than the plan says, a bias or aux pointer missing for an epilogue), and the
 * CPU's sgemm in column-major terms with the plan's transposes and leading
 * dimensions as given, then the epilogue on the host. A plan with its
 * arithmetic wrong computes a wrong product here, so the op tests catch it.
 *
 * The stand-in search finds no algorithm, as cuBLASLt's does not (the
 * fallback of gemm.h: TRI_GEMM_NO_ALGO, decided once per GEMM and noted once
 * per epilogue), for a GELU epilogue whose aux leading dimension is not a
 * multiple of 8 (cublasLt.h, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD), and for
 * any epilogue a test names (gemm_emu.h).
 *
 * bf16 operands (the plan's types) are widened to fp32 (exactly), the GEMM
 * and epilogue run in fp32 as cuBLASLt's CUBLAS_COMPUTE_32F does, and a bf16
 * D, bias or aux output is rounded once, to nearest even, as it is stored
 * (with beta 1, the old bf16 D is widened and accumulated first). The GELU
 * epilogues act on the fp32 values before D is rounded: GELU_AUX(_BIAS)
 * stores aux = X (+ bias) rounded and D = gelu(X (+ bias)) rounded, DGELU
 * multiplies X by gelu'(aux) (aux as stored), and BGRAD sums that product
 * before it is rounded. GELU is the tanh approximation of kernels/ops.h,
 * evaluated in double here (cuBLASLt's own is its own: neither is the CPU's
 * formula bit for bit). */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gemm_emu.h"
#include "kernels/cuda/gemm.h"
#include "kernels/half.h"
#include "base/err.h"

/* Test control (gemm_emu.h): one process per test, so one mask per process. */
static unsigned refused_epilogues;

void tri_cuemu_gemm_refuse(unsigned epilogue_mask) { refused_epilogues = epilogue_mask; }

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
    if (d->epilogue < 0 || d->epilogue >= TRI_GEMM_EPI_COUNT) TRI_FAIL("emulated cuBLASLt: GEMM %s", s);
    if (tri_gemm_epi_aux(d->epilogue) && d->auxld < d->m)
        TRI_FAIL("emulated cuBLASLt: GEMM %s: the aux leading dimension is below m", s);
}

/* The stand-in search: 1 when it finds an algorithm for d. */
static int search(const tri_gemm_desc *d) {
    if (refused_epilogues & (1u << (unsigned)d->epilogue)) return 0;
    if (tri_gemm_epi_aux(d->epilogue) && d->auxld % 8 != 0) return 0;
    return 1;
}

/* The tanh-approximated GELU and its derivative (kernels/ops.h), in double. */
static float gelu(float x) {
    const double u = 0.79788456080286535588 * (x + 0.044715 * (double)x * x * x);
    return (float)(0.5 * x * (1.0 + tanh(u)));
}

static float gelu_grad(float x) {
    const double u = 0.79788456080286535588 * (x + 0.044715 * (double)x * x * x);
    const double du = 0.79788456080286535588 * (1.0 + 3.0 * 0.044715 * (double)x * x);
    const double t = tanh(u);
    return (float)(0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du);
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

int TRI_CU(gemm_run)(tri_gemm_exec *x, void *stream, const tri_gemm_call *g) {
    const tri_gemm_desc *d = &g->d;
    tri_gemm_entry *e = tri_gemm_cache_find(&x->cache, d);
    if (e == NULL) {
        validate(d);
        e = tri_gemm_cache_add(&x->cache, d);
        if (e == NULL) TRI_FAIL("out of host memory for the GEMM plan cache");
        x->heuristic_calls++;
        e->workspace = 0;
        if (!search(d)) {
            if (d->epilogue == TRI_GEMM_EPI_NONE) TRI_FAIL("emulated cuBLASLt: no algorithm for a plain GEMM");
            tri_gemm_cache_fallback(&x->cache, e);
        }
    }
    if (e->no_algo) {
        x->cache.fallbacks++;
        return TRI_GEMM_NO_ALGO;
    }
    /* an algorithm chosen for an alignment holds only for pointers at least as aligned */
    const void *ptrs[5] = {g->A, g->B, g->D, g->bias, g->aux};
    for (int i = 0; i < 5; i++)
        if (ptrs[i] != NULL && tri_gemm_ptr_align(ptrs[i]) < d->align)
            TRI_FAIL("emulated cuBLASLt: operand %d (%p) is less aligned than the plan's %u bytes", i, ptrs[i],
                     d->align);
    const int bias_in = tri_gemm_epi_bias_in(d->epilogue), bias_out = tri_gemm_epi_bias_out(d->epilogue);
    const int has_aux = tri_gemm_epi_aux(d->epilogue);
    if ((bias_in || bias_out) && g->bias == NULL) TRI_FAIL("emulated cuBLASLt: epilogue without a bias");
    if (has_aux && g->aux == NULL) TRI_FAIL("emulated cuBLASLt: epilogue without its aux matrix");
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
    const uint64_t blen = d->epilogue == TRI_GEMM_EPI_BGRADB ? d->n : d->m;
    float *bias = NULL;
    if (bias_in)
        bias = widen(g->bias, d->biastype, blen, 1, blen);
    else if (bias_out)
        bias = d->biastype == TRI_F32 ? g->bias : calloc(blen, sizeof(float));
    if ((bias_in || bias_out) && bias == NULL) TRI_FAIL("emulated cuBLASLt: out of host memory");
    cblas_sgemm(CblasColMajor, d->transa ? CblasTrans : CblasNoTrans, d->transb ? CblasTrans : CblasNoTrans, m, n, k,
                1.0f, A, (int)d->lda, B, (int)d->ldb, d->accumulate ? 1.0f : 0.0f, D, (int)d->ldc);
    if (bias_in)
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) D[i + (size_t)j * d->ldc] += bias[i];
    if (d->epilogue == TRI_GEMM_EPI_BGRADB) {
        /* bias (n) = sums of op(B) (k x n) over k */
        for (int j = 0; j < n; j++) {
            float s = 0.0f;
            for (int kk = 0; kk < k; kk++) s += d->transb ? B[j + (size_t)kk * d->ldb] : B[kk + (size_t)j * d->ldb];
            bias[j] = s;
        }
    }
    if (d->epilogue == TRI_GEMM_EPI_GELU_AUX || d->epilogue == TRI_GEMM_EPI_GELU_AUX_BIAS) {
        /* aux = the pre-activation as stored, D = gelu of the unrounded one */
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                float *v = &D[i + (size_t)j * d->ldc];
                const size_t a = i + (size_t)j * d->auxld;
                if (d->auxtype == TRI_F32)
                    ((float *)g->aux)[a] = *v;
                else
                    ((uint16_t *)g->aux)[a] = tri_f32_to_bf16(*v);
                *v = gelu(*v);
            }
    } else if (d->epilogue == TRI_GEMM_EPI_DGELU || d->epilogue == TRI_GEMM_EPI_DGELU_BGRAD) {
        /* D = gelu'(aux) * X; the bias gradient (m) sums it over the n columns */
        for (int i = 0; i < m && bias; i++) bias[i] = 0.0f;
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                const size_t a = i + (size_t)j * d->auxld;
                const float p = d->auxtype == TRI_F32 ? ((const float *)g->aux)[a]
                                                      : tri_bf16_to_f32(((const uint16_t *)g->aux)[a]);
                float *v = &D[i + (size_t)j * d->ldc];
                *v *= gelu_grad(p);
                if (d->epilogue == TRI_GEMM_EPI_DGELU_BGRAD) bias[i] += *v;
            }
    }
    narrow(g->D, d->dtype, D, d->m, d->n, d->ldc);
    if (bias_out) narrow(g->bias, d->biastype, bias, blen, 1, blen);
    if (bias_in && d->biastype != TRI_F32) free(bias);
    if (d->atype != TRI_F32) free((float *)A);
    if (d->btype != TRI_F32) free((float *)B);
    return TRI_GEMM_RAN;
}
