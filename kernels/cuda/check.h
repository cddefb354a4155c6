/* Checking every CUDA runtime call: TRI_CUDA_CHECK(call) prints
 * "trident: CUDA error at file:line (rank R): call: <name>: <description>"
 * and aborts when the call fails. R is the world rank the launcher put in the
 * environment (OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK, RANK or
 * SLURM_PROCID, the first that is set), -1 when none is. C or CUDA C++; needs
 * the CUDA headers, or, under the emulation (TRI_CUEMU), the emulated
 * runtime "cuemu_rt.h", whose failures print the same line: the emulated
 * build (tests/cuemu/CMakeLists.txt) defines TRI_CUEMU and puts that header's
 * folder on its include path, so that no product file names a test file. */
#ifndef TRI_CUDA_CHECK_H
#define TRI_CUDA_CHECK_H

#include <stdlib.h>

#ifdef TRI_CUEMU
#include "cuemu_rt.h" /* from the emulated build's include path (above) */
#define tri_cuda_fail  tri_cuemu_cuda_fail
#define tri_cuda_check tri_cuemu_cuda_check
#else
#include <cuda_runtime_api.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Prints the message for `err` (from `what` at file:line) and aborts. */
#ifdef __cplusplus
[[noreturn]]
#else
_Noreturn
#endif
void tri_cuda_fail(cudaError_t err, const char *what, const char *file, int line);

static inline void tri_cuda_check(cudaError_t err, const char *what, const char *file, int line) {
    if (err != cudaSuccess) tri_cuda_fail(err, what, file, line);
}

/* The world rank of this process as the launcher's environment gives it
 * (see above), or -1. Only digits count: "3x" or "" is not a rank. */
static inline int tri_cuda_world_rank(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "RANK", "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *s = getenv(vars[i]);
        if (s == NULL || *s == '\0') continue;
        long v = 0;
        const char *p = s;
        for (; *p >= '0' && *p <= '9' && v < 100000000; p++) v = v * 10 + (*p - '0');
        if (*p == '\0') return (int)v;
    }
    return -1;
}

#ifdef __cplusplus
}
#endif

#define TRI_CUDA_CHECK(call) tri_cuda_check((call), #call, __FILE__, __LINE__)

#endif
