/* Backend selection by name (`--device cpu|cuda`). */
#include <stdio.h>
#include <string.h>

#include "kernels/ops.h"
#include "src/base/err.h"
#ifdef TRI_HAVE_CUDA
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device.h"
#endif

/* "cuda": the CUDA op table once the CUDA runtime finds a driver and a
 * device; otherwise NULL with the reason: this build has no CUDA backend, or
 * there is no driver or no device (the message says which). */
static const tri_ops *cuda_ops(void) {
#ifdef TRI_HAVE_CUDA
    char why[256];
    if (tri_cuda_probe(why, sizeof why) != 0) {
        tri_error("--device cuda: %s", why);
        return NULL;
    }
    return tri_cuda_ops();
#else
    tri_error("--device cuda: this build has no CUDA backend (built without CUDA: no nvcc was found at configure "
              "time, or -DTRI_CUDA=OFF)");
    return NULL;
#endif
}

/* The backend a test registered (tri_ops_register_test), or NULL. */
static const tri_ops *test_ops;

void tri_ops_register_test(const tri_ops *ops) { test_ops = ops; }

/* "cpu" -> the CPU table; "cpu-guard" -> the CPU table with guarded memory
 * (tests and debugging); "cuda" -> the CUDA table where a GPU is (see
 * cuda_ops); the name of a backend a test registered -> that backend;
 * anything else (or NULL) -> NULL. Every NULL comes with one line on stderr. */
const tri_ops *tri_ops_get(const char *name) {
    if (name != NULL && test_ops != NULL && strcmp(name, test_ops->name) == 0) return test_ops;
    if (name != NULL && strcmp(name, "cpu") == 0) return tri_ops_cpu();
    if (name != NULL && strcmp(name, "cpu-guard") == 0) return tri_ops_cpu_guard();
    if (name != NULL && strcmp(name, "cuda") == 0) return cuda_ops();
    tri_error("unknown device '%s' (expected cpu, cpu-guard or cuda)", name != NULL ? name : "(null)");
    return NULL;
}
