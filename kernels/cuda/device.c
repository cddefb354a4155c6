/* The CUDA runtime's view of this machine (kernels/cuda/device.h) and the
 * failure path of every checked CUDA call (kernels/cuda/check.h). Plain C
 * against the runtime API; linked with the static CUDA runtime, which loads
 * the driver (libcuda.so.1) itself at the first call. */
#include "kernels/cuda/device.h"

#include <stdio.h>
#include <stdlib.h>

#include "kernels/cuda/check.h"
#include "base/err.h"

void tri_cuda_fail(cudaError_t err, const char *what, const char *file, int line) {
    tri_error("CUDA error at %s:%d (rank %d): %s: %s: %s", file, line, tri_cuda_world_rank(), what,
              cudaGetErrorName(err), cudaGetErrorString(err));
    abort();
}

int tri_cuda_probe(char *why, size_t n) {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    int rt = 0;
    cudaRuntimeGetVersion(&rt);
    if (e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice || e == cudaSuccess) {
        int drv = 0;
        if (cudaDriverGetVersion(&drv) != cudaSuccess || drv == 0) {
            snprintf(why, n, "no CUDA driver (libcuda.so.1 was not found; this build's CUDA runtime is %d.%d)",
                     rt / 1000, rt % 1000 / 10);
            return -1;
        }
        if (e == cudaErrorInsufficientDriver) {
            snprintf(why, n, "no CUDA driver: the driver supports CUDA %d.%d, this build's runtime needs %d.%d",
                     drv / 1000, drv % 1000 / 10, rt / 1000, rt % 1000 / 10);
            return -1;
        }
        if (e == cudaErrorNoDevice || count == 0) {
            const char *vis = getenv("CUDA_VISIBLE_DEVICES");
            snprintf(why, n, "no CUDA device (the driver, CUDA %d.%d, reports none%s%s)", drv / 1000, drv % 1000 / 10,
                     vis ? "; CUDA_VISIBLE_DEVICES=" : "", vis ? vis : "");
            return -1;
        }
        return 0;
    }
    snprintf(why, n, "the CUDA runtime cannot start: cudaGetDeviceCount: %s: %s", cudaGetErrorName(e),
             cudaGetErrorString(e));
    return -1;
}
