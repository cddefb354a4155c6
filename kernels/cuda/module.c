/* The entry point of libtri_cuda.so (kernels/cuda_module.h): the module's
 * table. Built only into the module. The module carries its own copies of the
 * stateless files it calls, error reporting (src/base/err.c, log.c) among
 * them, so nothing here forwards to the program; the NCCL transport, built
 * into the same module, exports its own entry (parallel/comm_nccl.h). */
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device.h"

#include "kernels/cuda_module.h"

static const tri_cuda_module module = {
    .abi = TRI_CUDA_MODULE_ABI,
    .ops_size = sizeof(tri_ops),
    .probe = tri_cuda_probe,
    .ops = tri_cuda_ops,
    .ops_gemm = tri_cuda_ops_gemm,
    .ops_set_dbias_policy = tri_cuda_ops_set_dbias_policy,
};

__attribute__((visibility("default"))) const tri_cuda_module *tri_cuda_module_entry(void);

const tri_cuda_module *tri_cuda_module_entry(void) { return &module; }
