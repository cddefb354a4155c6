/* The backend that tests/cuemu/test_cuda_ops.c runs against when it is built
 * as tri_gpu_tests (TRI_GPU_TEST): the real CUDA backend "cuda" of the
 * module libtri_cuda.so, and its test hooks through the module's table
 * (kernels/cuda_module.h). Only that file includes this one. */
#ifndef TRI_TESTS_GPU_BACKEND_H
#define TRI_TESTS_GPU_BACKEND_H

#include <stdio.h>
#include <stdlib.h>

#include "kernels/cuda_module.h"

#define DEV_NAME "cuda"

/* The module, loaded by tri_ops_get("cuda") before any test body runs (the
 * suite's init), so that this lookup cannot fail afterwards. */
static const tri_cuda_module *dev_module(void) {
    char why[4608];
    const tri_cuda_module *m = tri_cuda_module_get(why, sizeof why);
    if (m == NULL) {
        fprintf(stderr, "tri_gpu_tests: %s\n", why);
        abort();
    }
    return m;
}

static void dev_register(void) {}

static inline void dev_set_dbias_policy(tri_ctx *c, tri_dbias_policy p) { dev_module()->ops_set_dbias_policy(c, p); }

static inline const tri_gemm_exec *dev_gemm(const tri_ctx *c) { return dev_module()->ops_gemm(c); }

#endif
