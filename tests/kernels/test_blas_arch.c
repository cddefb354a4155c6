/* kernels/cpu/blas_arch.c through the built binary: `trident bench` reports
 * the OpenBLAS kernels it ran ("blas" in its JSON line). Where OpenBLAS falls
 * back to its generic Prescott kernels, trident must have started again with
 * the best set the CPU can run, read here from CPUID and XGETBV directly (a
 * route independent of the compiler's __builtin_cpu_supports that the product
 * uses); TRIDENT_BLAS_AUTO=0 and a user's OPENBLAS_CORETYPE keep their
 * choice. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "helpers/testutil.h"

/* the kernel set OpenBLAS can run here: "SkylakeX", "Haswell" or NULL */
static const char *cpu_best(void) {
#if defined(__x86_64__)
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return NULL;
    const int osxsave = (c >> 27) & 1, fma = (c >> 12) & 1;
    if (!osxsave) return NULL;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    const int ymm = (lo & 0x6) == 0x6, zmm = ymm && (lo & 0xe0) == 0xe0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return NULL;
    const int avx2 = (b >> 5) & 1, f = (b >> 16) & 1, dq = (b >> 17) & 1, bw = (b >> 30) & 1, vl = (b >> 31) & 1;
    if (zmm && f && dq && bw && vl) return "SkylakeX";
    if (ymm && avx2 && fma) return "Haswell";
#endif
    return NULL;
}

/* the "blas" of `trident bench` on the tiny config under env (VAR=value ...) */
static void kernels(const char *env, char *name, size_t n) {
    char *dir = tt_mkdtemp(), *out = NULL, cmd[8192];
    snprintf(cmd, sizeof cmd,
             "env -u OPENBLAS_CORETYPE %s %s bench %s/configs/tiny-test.json --steps 1 --threads 1 "
             "--set checkpoint.dir=%s/ckpt --set log.dir=%s/log",
             env, tt_bin("trident"), TRI_SOURCE_DIR, dir, dir);
    cr_assert_eq(tt_run(cmd, &out), 0, "%s: %s", cmd, out);
    const char *k = strstr(out, "\"blas\": \"");
    cr_assert_not_null(k, "no \"blas\" in: %s", out);
    k += strlen("\"blas\": \"");
    size_t len = strcspn(k, "\"");
    cr_assert_lt(len, n);
    memcpy(name, k, len);
    name[len] = '\0';
    free(out);
    tt_rmrf(dir);
    free(dir);
}

Test(blas_arch, trident_runs_the_kernels_the_cpu_can_run, .timeout = 120) {
    char native[64], chosen[64];
    kernels("TRIDENT_BLAS_AUTO=0", native, sizeof native); /* OpenBLAS's own choice */
    kernels("", chosen, sizeof chosen);
    const char *best = cpu_best();
    if (!strcmp(native, "Prescott") && best)
        cr_assert_str_eq(chosen, best, "OpenBLAS fell back to Prescott on a CPU that runs %s", best);
    else
        cr_assert_str_eq(chosen, native, "OpenBLAS knows this CPU (%s): its choice must stand", native);
}

Test(blas_arch, a_users_coretype_stands, .timeout = 120) {
    char chosen[64];
    kernels("OPENBLAS_CORETYPE=Prescott", chosen, sizeof chosen);
    cr_assert_str_eq(chosen, "Prescott");
}
