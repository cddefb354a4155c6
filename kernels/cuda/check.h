/* Checking every CUDA runtime call: TRI_CUDA_CHECK(call) prints
 * "trident: CUDA error at file:line: call: <name>: <description>" and aborts
 * when the call fails. C or CUDA C++; needs the CUDA headers. */
#ifndef TRI_CUDA_CHECK_H
#define TRI_CUDA_CHECK_H

#include <cuda_runtime_api.h>

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

#ifdef __cplusplus
}
#endif

#define TRI_CUDA_CHECK(call) tri_cuda_check((call), #call, __FILE__, __LINE__)

#endif
