/* The CUDA backend's GEMM executor: runs a planned GEMM (gemm_plan.h) on a
 * stream, through the plan cache. Two implementations behind one interface:
 *   - kernels/cuda/gemm_lt.c (tri_cuda_gemm_*): cuBLASLt; at the first call
 *     of a shape it builds the matmul descriptor and the layouts, asks the
 *     heuristics for an algorithm that fits the workspace and the operands'
 *     alignment, and caches all of it; later calls of that shape only set
 *     the bias pointer and run;
 *   - tests/cuemu/gemm_emu.c (tri_cuemu_gemm_*): the same cache, a stand-in
 *     "heuristic" that checks the plan as cuBLASLt would (leading dimensions,
 *     alignment, epilogue) and the CPU's sgemm (column-major, the plan's
 *     transposes and leading dimensions as given) plus the epilogue on the
 *     host.
 *
 * Fallback. Where the GEMM library has no algorithm for a GEMM with an
 * epilogue (a size, an aux leading dimension or a type it does not fuse),
 * run answers TRI_GEMM_NO_ALGO and runs nothing; the caller computes the same
 * unfused (kernels/cuda/cuda_ops.c: BIAS as the bias broadcast into D and the
 * GEMM with beta 1; BGRADB and the bias gradient of DGELU_BGRAD by the
 * bias_bwd reduction; the GELU ones as the GEMM, then the GELU kernels). The
 * decision is made once per distinct GEMM, at its first call (the search),
 * kept in the plan cache, and noted once per epilogue on stderr
 * (tri_gemm_cache_fallback); it never aborts a run. */
#ifndef TRI_CUDA_GEMM_H
#define TRI_CUDA_GEMM_H

#include <stddef.h>

#include "kernels/cuda/gemm_plan.h"
#include "kernels/cuda/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tri_gemm_exec {
    void *handle;    /* cublasLtHandle_t; NULL under the emulation */
    void *workspace; /* device memory the GEMMs may use   */
    size_t workspace_bytes;
    tri_gemm_cache cache;
    unsigned long long heuristic_calls; /* algorithm searches run (one per cache miss) */
} tri_gemm_exec;

/* Starts the executor with `bytes` of device workspace (owned by the caller).
 * Returns 0 or -1 (printed). */
int TRI_CU(gemm_init)(tri_gemm_exec *x, void *workspace, size_t bytes);
/* Runs g on `stream` (asynchronously under CUDA): TRI_GEMM_RAN. For a GEMM
 * with an epilogue for which the library has no algorithm (above), runs
 * nothing and returns TRI_GEMM_NO_ALGO. Aborts, naming the GEMM, the call and
 * the rank, when the library fails, or finds no algorithm for a GEMM without
 * an epilogue (there is nothing to fall back to). */
int TRI_CU(gemm_run)(tri_gemm_exec *x, void *stream, const tri_gemm_call *g);
/* Frees the cache and the handle (not the workspace); NULL-safe. */
void TRI_CU(gemm_free)(tri_gemm_exec *x);

#ifdef __cplusplus
}
#endif

#endif
