/* Backend selection by name (`--device cpu|cuda`). */
#include <stdio.h>
#include <string.h>

#include "kernels/ops.h"
#include "src/base/err.h"
#ifdef TRI_HAVE_CUDA
#include "kernels/cuda/device.h"
#endif

/* "cuda": always NULL for now, with the reason: this build has no CUDA
 * backend, or the CUDA runtime finds no driver or no device (the message
 * says which), or there is a GPU but the CUDA op table is not written yet. */
static const tri_ops *cuda_ops(void) {
#ifdef TRI_HAVE_CUDA
    char why[256];
    if (tri_cuda_probe(why, sizeof why) != 0) {
        tri_error("--device cuda: %s", why);
        return NULL;
    }
    tri_error("--device cuda: a CUDA device is present, but this build's CUDA op table is not written yet "
              "(kernels/cuda has the first kernels only)");
    return NULL;
#else
    tri_error("--device cuda: this build has no CUDA backend (built without CUDA: no nvcc was found at configure "
              "time, or -DTRI_CUDA=OFF)");
    return NULL;
#endif
}

/* "cpu" -> the CPU table; "cpu-guard" -> the CPU table with guarded memory
 * (tests and debugging); "cuda" -> NULL until the CUDA op table exists (see
 * cuda_ops); anything else (or NULL) -> NULL. Every NULL comes with one line
 * on stderr. */
const tri_ops *tri_ops_get(const char *name) {
    if (name != NULL && strcmp(name, "cpu") == 0) return tri_ops_cpu();
    if (name != NULL && strcmp(name, "cpu-guard") == 0) return tri_ops_cpu_guard();
    if (name != NULL && strcmp(name, "cuda") == 0) return cuda_ops();
    tri_error("unknown device '%s' (expected cpu, cpu-guard or cuda)", name != NULL ? name : "(null)");
    return NULL;
}
