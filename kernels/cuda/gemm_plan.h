/* The CUDA backend's GEMMs as plain arithmetic (no GPU, no CUDA headers):
 * how each call of matmul_fwd / matmul_bwd (kernels/ops.h) becomes one
 * column-major GEMM of cuBLASLt, D = op(A) op(B) * 1 + beta * D (+ epilogue),
 * and the plan cache that keeps, per distinct GEMM, what the GEMM library
 * chose for it at first use.
 *
 * Row-major to column-major. A row-major (R, S) matrix with row stride S is
 * the column-major (S, R) matrix with leading dimension S: its transpose, for
 * free. So the row-major product out (N, OC) = inp (N, C) @ W (OC, C)^T is
 * computed as its transpose out^T (OC, N) = W (OC, C) @ inp^T (C, N) in
 * column-major terms:
 *   fwd      D = out^T (OC x N, ld OC) = op(A = W: (C x OC, ld C), T) op(B = inp: (C x N, ld C), N)
 *                                        m = OC, n = N, k = C, beta 0, bias (OC) as the BIAS epilogue
 *   dinp     D = dinp^T (C x N, ld C)  = op(A = W: (C x OC, ld C), N) op(B = dout: (OC x N, ld OC), N)
 *                                        m = C, n = N, k = OC, beta 0
 *   dweight  D = dW^T (C x OC, ld C)   = op(A = inp: (C x N, ld C), N) op(B = dout: (OC x N, ld OC), T)
 *                                        m = C, n = OC, k = N, beta 1 (dW accumulates)
 * dbias (OC) += column sums of dout: either a separate reduction (the
 * backend's bias_bwd) or, with the BGRADB epilogue of the dweight GEMM (the
 * sums of op(B) over k, i.e. of dout over its N rows), written into scratch
 * and then added (the epilogue overwrites; the op accumulates).
 *
 * Types. The `void *` operands are in the compute dtype dt (TRI_F32 or
 * TRI_BF16: ctx->act_dtype); every GEMM computes and scales in fp32. fwd and
 * dinp: A, B, D and the BIAS epilogue's bias in dt. dweight: A, B in dt, D
 * (dW, the fp32 gradient it accumulates into) and the BGRADB output in fp32.
 * A pointer must be aligned to its element size (2 bytes for bf16, 4 for
 * fp32); the plan's `align` is the least alignment of its pointers.
 *
 * The MLP's GELU, fused as llm.c fuses it (the ops matmul_gelu_fwd and
 * matmul_bwd_dgelu of kernels/ops.h):
 *   fwd + GELU   the fwd GEMM above with GELU_AUX_BIAS (GELU_AUX without a
 *                bias): D = out^T = gelu(W inp^T + bias), and the aux
 *                output pre^T (OC x N, ld OC) = the pre-activation, which the
 *                backward needs;
 *   dinp + dGELU the dinp GEMM above of the linear that reads gelu(pre) (fc2,
 *                "fcproj") with DGELU_BGRAD (DGELU without the bias
 *                gradient): D = dpre^T = gelu'(pre^T) * (W^T dout^T), the aux
 *                input pre^T (C x N, ld C), and bias (C) = the sums of D over
 *                its N columns: the bias gradient of the linear that made pre
 *                (fc), written into scratch and then added (it overwrites).
 * cuBLASLt wants the aux leading dimension (OC, or C) divisible by 8; where
 * it has no algorithm for an epilogue the executor says so (tri_gemm_cache_
 * fallback) and the backend computes the same unfused (gemm.h). */
#ifndef TRI_CUDA_GEMM_PLAN_H
#define TRI_CUDA_GEMM_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* With X = op(A) op(B) + beta D (m x n): */
typedef enum {
    TRI_GEMM_EPI_NONE = 0,      /* D = X                                                        */
    TRI_GEMM_EPI_BIAS,          /* D = X + bias (m), broadcast over the n columns              */
    TRI_GEMM_EPI_BGRADB,        /* D = X; bias (n) = sums of op(B) over k          [overwrite] */
    TRI_GEMM_EPI_GELU_AUX,      /* aux = X, D = gelu(X)                            [overwrite] */
    TRI_GEMM_EPI_GELU_AUX_BIAS, /* aux = X + bias (m), D = gelu(aux)               [overwrite] */
    TRI_GEMM_EPI_DGELU,         /* D = gelu'(aux) * X                    (aux an input, m x n) */
    TRI_GEMM_EPI_DGELU_BGRAD,   /* ... and bias (m) = sums of D over its n columns [overwrite] */
    TRI_GEMM_EPI_COUNT
} tri_gemm_epilogue;
/* The epilogue reads a bias (BIAS, GELU_AUX_BIAS); writes one (BGRADB,
 * DGELU_BGRAD); reads or writes the aux matrix (the GELU ones). */
int tri_gemm_epi_bias_in(tri_gemm_epilogue e);
int tri_gemm_epi_bias_out(tri_gemm_epilogue e);
int tri_gemm_epi_aux(tri_gemm_epilogue e);
/* "none", "bias", "bgradb", "gelu_aux", "gelu_aux_bias", "dgelu", "dgelu_bgrad" ("?" otherwise). */
const char *tri_gemm_epi_name(tri_gemm_epilogue e);

/* How matmul_bwd gets dbias when it is asked for. */
typedef enum {
    TRI_DBIAS_REDUCE = 0, /* the backend's column-sum reduction (bias_bwd): the default */
    TRI_DBIAS_EPILOGUE    /* BGRADB on the dweight GEMM when that GEMM runs, into scratch, then added */
} tri_dbias_policy;

/* One column-major GEMM: what the plan cache is keyed on. */
typedef struct tri_gemm_desc {
    int transa, transb;     /* 0: N, 1: T */
    uint64_t m, n, k;       /* D is m x n; op(A) m x k; op(B) k x n */
    uint64_t lda, ldb, ldc; /* leading dimensions of A, B and C = D as stored */
    int accumulate;         /* beta: 0 (overwrite) or 1 */
    tri_gemm_epilogue epilogue;
    unsigned align; /* bytes (1..16, a power of two) that divide every pointer of the call */
    /* storage types (TRI_F32 or TRI_BF16) of A, B, C = D, of the bias
     * vector (the epilogue's input or output; D's type when there is none)
     * and of the aux matrix (D's type) */
    tri_dtype atype, btype, dtype, biastype, auxtype;
    uint64_t auxld; /* the aux matrix's leading dimension (m x n as stored); 0 without one */
} tri_gemm_desc;

/* A GEMM with its operands. bias: the epilogue's bias input or output, aux
 * its aux matrix (NULL when the epilogue has none). */
typedef struct tri_gemm_call {
    tri_gemm_desc d;
    const void *A, *B;
    void *D;
    void *bias;
    void *aux;
} tri_gemm_call;

/* The largest power of two <= 16 dividing the address (16 for NULL). */
unsigned tri_gemm_ptr_align(const void *p);
/* Bytes per element of a GEMM storage type: 4 (TRI_F32), 2 (TRI_BF16), 0
 * for any other type (no GEMM takes it). */
unsigned tri_gemm_type_size(tri_dtype t);
/* 0 when every pointer of g is aligned to its element size and g's types
 * are fp32 or bf16; -1 otherwise (what cuBLASLt would refuse). */
int tri_gemm_check_types(const tri_gemm_call *g);

/* out (N, OC) = inp (N, C) @ weight (OC, C)^T (+ bias): the GEMM, with the
 * BIAS epilogue when bias is non-NULL. Returns 0, or 1 when there is no GEMM
 * to run: N or OC is 0 (nothing to write) or C is 0 (out is the bias
 * broadcast, or 0: *fill is set to 1). */
int tri_gemm_plan_fwd(tri_gemm_call *g, int *fill, tri_dtype dt, void *out, const void *inp, const void *weight,
                      const void *bias, size_t N, size_t C, size_t OC);
/* dinp (N, C) = dout (N, OC) @ weight (OC, C). 1 when nothing to run (*fill
 * set to 1 when dinp must be zeroed: OC = 0). */
int tri_gemm_plan_dinp(tri_gemm_call *g, int *fill, tri_dtype dt, void *dinp, const void *dout, const void *weight,
                       size_t N, size_t C, size_t OC);
/* dweight (OC, C) += dout^T @ inp, with the BGRADB epilogue into
 * dbias_scratch when it is non-NULL. 1 when nothing to run. */
int tri_gemm_plan_dweight(tri_gemm_call *g, tri_dtype dt, float *dweight, float *dbias_scratch, const void *dout,
                          const void *inp, size_t N, size_t C, size_t OC);
/* The fwd GEMM of out = gelu(pre), pre (N, OC) = inp @ weight^T (+ bias):
 * GELU_AUX_BIAS (GELU_AUX when bias is NULL), D = out, aux = pre (both of
 * dtype dt). 1 when there is no GEMM to run (tri_gemm_plan_fwd's cases:
 * *fill set when C is 0). */
int tri_gemm_plan_fwd_gelu(tri_gemm_call *g, int *fill, tri_dtype dt, void *out, void *pre, const void *inp,
                           const void *weight, const void *bias, size_t N, size_t C, size_t OC);
/* The dinp GEMM continued through the GELU that made this linear's input:
 * dpre (N, C) = gelu'(pre) * (dout (N, OC) @ weight (OC, C)), pre (N, C) the
 * aux input: DGELU_BGRAD with dbias_scratch (C, fp32) = the column sums of
 * dpre [overwrite] when it is non-NULL, else DGELU. 1 when there is no GEMM
 * to run (tri_gemm_plan_dinp's cases: *fill set when OC is 0). */
int tri_gemm_plan_dinp_dgelu(tri_gemm_call *g, int *fill, tri_dtype dt, void *dpre, float *dbias_scratch,
                             const void *dout, const void *weight, const void *pre, size_t N, size_t C, size_t OC);

/* g without its epilogue: the plain GEMM of the same operands (bias and aux
 * dropped, their types D's, the alignment that of A, B and D); what the
 * epilogue did is then the caller's (the unfused path of gemm.h). */
void tri_gemm_unfuse(tri_gemm_call *g);

/* Where matmul_bwd's dbias comes from: 0 (not asked for), TRI_DBIAS_EPILOGUE
 * (the policy allows it and the dweight GEMM runs: dweight asked for and
 * N, C, OC > 0) or TRI_DBIAS_REDUCE. */
typedef enum { TRI_DBIAS_ROUTE_NONE = 0, TRI_DBIAS_ROUTE_EPILOGUE, TRI_DBIAS_ROUTE_REDUCE } tri_dbias_route;
tri_dbias_route tri_gemm_dbias_route(tri_dbias_policy policy, int want_dweight, int want_dbias, size_t N, size_t C,
                                     size_t OC);

/* ---- the plan cache ----
 * One entry per distinct tri_gemm_desc, holding what the GEMM library chose
 * at the first call of that shape (an algorithm as opaque bytes, its
 * workspace size) and the library objects built for it (descriptor and
 * layouts, as opaque handles released by `release`). Lookups are linear over
 * a small array (a model has a handful of shapes) with a hash to skip most
 * compares. */
typedef struct tri_gemm_entry {
    tri_gemm_desc d;
    uint64_t hash;
    unsigned char algo[64]; /* cublasLtMatmulAlgo_t (64 bytes) under CUDA */
    size_t workspace;       /* bytes the chosen algorithm needs */
    void *handles[4];       /* matmul descriptor, layouts of A, B, D */
    uint64_t uses;
    int no_algo; /* the search found no algorithm: every call of this GEMM falls back */
} tri_gemm_entry;

typedef struct tri_gemm_cache {
    tri_gemm_entry *e;
    size_t n, cap;
    uint64_t hits, misses;
    uint64_t fallbacks;                 /* calls answered TRI_GEMM_NO_ALGO */
    unsigned noted;                     /* epilogues (bits 1u << e) whose fallback was noted */
    void (*release)(tri_gemm_entry *e); /* frees an entry's handles; may be NULL */
} tri_gemm_cache;

/* What the executor's run answers (gemm.h): it ran, or the GEMM library has
 * no algorithm for this GEMM's epilogue and nothing ran. */
enum { TRI_GEMM_RAN = 0, TRI_GEMM_NO_ALGO = 1 };

uint64_t tri_gemm_desc_hash(const tri_gemm_desc *d);
int tri_gemm_desc_equal(const tri_gemm_desc *a, const tri_gemm_desc *b);
/* The entry for d, or NULL; counts a hit or a miss. */
tri_gemm_entry *tri_gemm_cache_find(tri_gemm_cache *c, const tri_gemm_desc *d);
/* A new zeroed entry for d (after a miss; the caller fills it in). NULL when
 * out of memory. Pointers to entries stay valid until the next add. */
tri_gemm_entry *tri_gemm_cache_add(tri_gemm_cache *c, const tri_gemm_desc *d);
/* Releases every entry (through release) and the array; NULL-safe. */
void tri_gemm_cache_free(tri_gemm_cache *c);
/* The plan-time decision when the search for e found no algorithm: e is
 * marked (no_algo; every later call of it falls back without a search), and
 * the first time this cache sees an epilogue fall back it says so in one
 * line on stderr (tri_note: the GEMM, the epilogue, that the unfused path
 * runs instead). A GEMM without an epilogue has nothing to fall back to:
 * that is the caller's error (the executor aborts naming the GEMM). */
void tri_gemm_cache_fallback(tri_gemm_cache *c, tri_gemm_entry *e);

/* "m 768 n 512 k 256, A^T B, ... beta 1, epilogue bias, align 16, types
 * bf16 bf16 -> f32 (bias f32)" (and ", aux ld 768 bf16" with an aux
 * matrix), for messages. */
void tri_gemm_desc_str(const tri_gemm_desc *d, char *buf, size_t n);

#ifdef __cplusplus
}
#endif

#endif
