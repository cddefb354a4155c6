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
 *     host. */
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
/* Runs g on `stream` (asynchronously under CUDA). Aborts, naming the GEMM, the
 * call and the rank, when the library refuses it or finds no algorithm. */
void TRI_CU(gemm_run)(tri_gemm_exec *x, void *stream, const tri_gemm_call *g);
/* Frees the cache and the handle (not the workspace); NULL-safe. */
void TRI_CU(gemm_free)(tri_gemm_exec *x);

#ifdef __cplusplus
}
#endif

#endif
