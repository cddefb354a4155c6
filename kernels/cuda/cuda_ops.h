/* The CUDA backend's op table (kernels/cuda/cuda_ops.c), as tri_ops_get
 * hands it out, and the few hooks its tests use. The same source is built
 * twice: tri_cuda_ops() ("cuda", nvcc's kernels, the CUDA runtime, cuBLASLt)
 * and, in the tests only, tri_cuemu_ops() ("cuda-emu": the same table over
 * the emulated runtime of tests/cuemu/cuemu_rt.h, the kernels under the
 * emulator, the GEMMs through the plan cache into the CPU's sgemm). */
#ifndef TRI_CUDA_OPS_H
#define TRI_CUDA_OPS_H

#include "kernels/cuda/gemm.h"
#include "kernels/cuda/kernels.h"
#include "kernels/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The table; valid for the life of the program. Use it only after
 * tri_cuda_probe found a device (tri_ops_get("cuda") does). */
const tri_ops *TRI_CU(ops)(void);

/* Tests: the GEMM executor of a context of this table (plan cache counters). */
const tri_gemm_exec *TRI_CU(ops_gemm)(const tri_ctx *c);
/* Tests: how matmul_bwd gets dbias (default TRI_DBIAS_REDUCE). */
void TRI_CU(ops_set_dbias_policy)(tri_ctx *c, tri_dbias_policy p);

#ifdef __cplusplus
}
#endif

#endif
