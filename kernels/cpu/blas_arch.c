/* OpenBLAS's kernel choice (kernels/blas.h). */
#include "kernels/blas.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The best of OpenBLAS's x86 kernel sets this CPU can run, by the features
 * each needs (OpenBLAS's own checks in driver/others/dynamic.c ask for the
 * same ones); NULL elsewhere. */
static const char *best_kernels(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
#endif
    return NULL;
}

const char *tri_blas_kernels(void) {
    const char *c = openblas_get_corename();
    return c ? c : "unknown";
}

void tri_blas_pick_kernels(char **argv) {
    if (getenv("OPENBLAS_CORETYPE")) return; /* the user's choice, or ours on the second start */
    const char *opt = getenv("TRIDENT_BLAS_AUTO");
    if (opt && strcmp(opt, "0") == 0) return;
    /* only the fallback for a model OpenBLAS does not know: a CPU it knows
     * keeps the kernels it picked for it */
    if (strcmp(tri_blas_kernels(), "Prescott") != 0) return;
    const char *want = best_kernels();
    if (!want || setenv("OPENBLAS_CORETYPE", want, 1) != 0) return;
    execv("/proc/self/exe", argv);
    unsetenv("OPENBLAS_CORETYPE"); /* could not start again: carry on as we are */
}
