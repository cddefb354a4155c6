/* Backend selection by name (`--device cpu|cuda`). */
#include <stdio.h>
#include <string.h>

#include "kernels/cuda_module.h"
#include "kernels/ops.h"
#include "base/err.h"

/* "cuda": the CUDA op table of the CUDA module (kernels/cuda_module.h) once
 * the module loads and the CUDA runtime finds a driver and a device;
 * otherwise NULL with the reason: this build has no CUDA backend, the module
 * cannot be loaded (e.g. cuBLASLt missing) or is of another build, or there
 * is no driver or no device (the message says which). */
static const tri_ops *cuda_ops(void) {
    char why[4608];
    const tri_cuda_module *m = tri_cuda_module_get(why, sizeof why);
    if (m != NULL && m->ops_size != sizeof(tri_ops)) {
        snprintf(why, sizeof why,
                 "the CUDA backend module was built from another version of Trident (its tri_ops has %zu bytes, "
                 "this program's %zu)",
                 m->ops_size, sizeof(tri_ops));
        m = NULL;
    }
    if (m == NULL || m->probe(why, sizeof why) != 0) {
        tri_error("--device cuda: %s", why);
        return NULL;
    }
    return m->ops();
}

/* "cpu" -> the CPU table; "cpu-guard" -> the CPU table with guarded memory
 * (tests and debugging); "cuda" -> the CUDA table where a GPU is (see
 * cuda_ops); anything else (or NULL) -> NULL. Every NULL comes with one line
 * on stderr. */
const tri_ops *tri_ops_get(const char *name) {
    if (name != NULL && strcmp(name, "cpu") == 0) return tri_ops_cpu();
    if (name != NULL && strcmp(name, "cpu-guard") == 0) return tri_ops_cpu_guard();
    if (name != NULL && strcmp(name, "cuda") == 0) return cuda_ops();
    tri_error("unknown device '%s' (expected cpu, cpu-guard or cuda)", name != NULL ? name : "(null)");
    return NULL;
}
