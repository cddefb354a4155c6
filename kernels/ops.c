/* Backend selection by name (`--device cpu|cuda`). */
#include <stdio.h>
#include <string.h>

#include "kernels/cuda_module.h"
#include "kernels/ops.h"
#include "base/err.h"

/* "cuda": the CUDA op table of the CUDA module (kernels/cuda_module.h) once
 * the module loads and the CUDA runtime finds a driver and a device;
 * otherwise NULL with the reason: this build has no CUDA backend, the module
 * cannot be loaded (e.g. cuBLASLt missing), or there is no driver or no
 * device (the message says which). */
static const tri_ops *cuda_ops(void) {
    char why[4608];
    const tri_cuda_module *m = tri_cuda_module_get(why, sizeof why);
    if (m == NULL || m->probe(why, sizeof why) != 0) {
        tri_error("--device cuda: %s", why);
        return NULL;
    }
    return m->ops();
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

void tri_ops_adamw_multi(tri_ctx *c, const tri_adamw_span *spans, int count, float lr, float beta1, float beta2,
                         float eps, int t) {
    if (count <= 0) return;
    if (c->ops->adamw_multi != NULL) {
        c->ops->adamw_multi(c, spans, count, lr, beta1, beta2, eps, t);
        return;
    }
    for (int i = 0; i < count; i++)
        c->ops->adamw(c, spans[i].param, spans[i].m, spans[i].v, spans[i].grad, spans[i].n, lr, beta1, beta2, eps,
                      spans[i].wd, t);
}

double tri_ops_sumsq_multi(tri_ctx *c, const float *const *xs, const size_t *ns, int count) {
    if (count <= 0) return 0.0;
    if (c->ops->sumsq_multi != NULL) return c->ops->sumsq_multi(c, xs, ns, count);
    double sum = 0.0;
    for (int i = 0; i < count; i++) sum += c->ops->sumsq(c, xs[i], ns[i]);
    return sum;
}
