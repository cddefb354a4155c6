/* Backend selection by name (`--device cpu|cuda`). */
#include <stdio.h>
#include <string.h>

#include "kernels/ops.h"
#include "src/base/err.h"

/* "cpu" -> the CPU table; "cpu-guard" -> the CPU table with guarded memory
 * (tests and debugging); "cuda" -> NULL until a CUDA build exists; anything
 * else (or NULL) -> NULL. Every NULL comes with one line on stderr. */
const tri_ops *tri_ops_get(const char *name) {
    if (name != NULL && strcmp(name, "cpu") == 0) return tri_ops_cpu();
    if (name != NULL && strcmp(name, "cpu-guard") == 0) return tri_ops_cpu_guard();
    if (name != NULL && strcmp(name, "cuda") == 0) {
        tri_error("this build has no CUDA backend (configure with -DTRI_CUDA=ON)");
        return NULL;
    }
    tri_error("unknown device '%s' (expected cpu, cpu-guard or cuda)", name != NULL ? name : "(null)");
    return NULL;
}
