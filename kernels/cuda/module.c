/* The entry point of libtri_cuda.so (kernels/cuda_module.h): the one symbol
 * the module exports. Built only into the module. */
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device.h"
#include "kernels/ctx.h"
#include "kernels/cuda_module.h"
#include "parallel/comm.h"
#ifdef TRI_HAVE_NCCL
#include "parallel/comm_nccl.h"
#endif

static const tri_cuda_module module = {
    .abi = TRI_CUDA_MODULE_ABI,
    .ops_size = sizeof(tri_ops),
    .ctx_size = sizeof(tri_ctx),
    .comm_size = sizeof(tri_comm),
    .probe = tri_cuda_probe,
    .ops = tri_cuda_ops,
#ifdef TRI_HAVE_NCCL
    .nccl_init = tri_nccl_init,
#endif
};

__attribute__((visibility("default"))) const tri_cuda_module *tri_cuda_module_entry(void);

const tri_cuda_module *tri_cuda_module_entry(void) { return &module; }
