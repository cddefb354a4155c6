/* The CUDA module (kernels/cuda_module.h): programs do not link the CUDA
 * libraries, a CPU process never maps them, and every way the module can fail
 * to load is one line naming the module and the reason. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers/testutil.h"
#include "kernels/cuda_module.h"
#include "kernels/ops.h"

/* The libraries only the module may bring in. */
static const char *const cuda_libs[] = {"libcublasLt", "libcublas.", "libnccl", "libcudart", "libcuda."};

/* Whether this process has mapped a file whose name contains `what`. */
static int mapped(const char *what) {
    FILE *f = fopen("/proc/self/maps", "r");
    cr_assert(f != NULL);
    char line[4608];
    int found = 0;
    while (!found && fgets(line, sizeof line, f) != NULL) found = strstr(line, what) != NULL;
    fclose(f);
    return found;
}

/* The dynamic dependencies of each program, as the loader resolves them. */
Test(cuda_module, programs_do_not_link_the_cuda_libraries) {
    const char *progs[] = {"trident", "tridentrun", "tests/tri_tests"};
    for (size_t p = 0; p < sizeof progs / sizeof progs[0]; p++) {
        char cmd[4200], *out = NULL;
        snprintf(cmd, sizeof cmd, "ldd %s", tt_bin(progs[p]));
        int rc = tt_run(cmd, &out);
        cr_assert_eq(rc, 0, "%s: %s", cmd, out);
        cr_expect(strstr(out, "libc.so") != NULL, "ldd output without libc: %s", out);
        for (size_t i = 0; i < sizeof cuda_libs / sizeof cuda_libs[0]; i++)
            cr_expect(strstr(out, cuda_libs[i]) == NULL, "%s links %s:\n%s", progs[p], cuda_libs[i], out);
        free(out);
    }
}

/* A CPU process maps none of them; asking for "cuda" opens the module (in a
 * CUDA build: it then maps cuBLASLt and NCCL, whatever the GPU). */
Test(cuda_module, the_module_is_opened_only_for_the_cuda_backend, .init = cr_redirect_stderr) {
    cr_assert(tri_ops_get("cpu") != NULL);
    for (size_t i = 0; i < sizeof cuda_libs / sizeof cuda_libs[0]; i++)
        cr_expect(!mapped(cuda_libs[i]), "a CPU process maps %s", cuda_libs[i]);
    cr_expect(!mapped(TRI_CUDA_MODULE_FILE));
    (void)tri_ops_get("cuda");
#ifdef TRI_HAVE_CUDA
    cr_expect(mapped(TRI_CUDA_MODULE_FILE), "tri_ops_get(\"cuda\") did not open %s", TRI_CUDA_MODULE_FILE);
    cr_expect(mapped("libcublasLt"), "the module was opened without cuBLASLt");
#else
    cr_expect(!mapped(TRI_CUDA_MODULE_FILE), "a build without CUDA opened a module");
#endif
}

/* The one line tri_ops_get("cuda") printed, with TRIDENT_CUDA_MODULE=path. */
static void cuda_line_with(const char *path, char *line, size_t n) {
    setenv("TRIDENT_CUDA_MODULE", path, 1);
    cr_expect(tri_ops_get("cuda") == NULL);
    fflush(stderr);
    FILE *f = cr_get_redirected_stderr();
    char more[64] = {0};
    cr_assert(fgets(line, (int)n, f) != NULL);
    cr_expect(fgets(more, sizeof more, f) == NULL, "more than one line: %s%s", line, more);
    cr_expect(strncmp(line, "trident: --device cuda: ", 24) == 0, "message: %s", line);
}

Test(cuda_module, a_missing_module_is_named_with_dlopens_reason, .init = cr_redirect_stderr) {
    char line[4608];
    cuda_line_with("/nonexistent/libtri_cuda.so", line, sizeof line);
#ifdef TRI_HAVE_CUDA
    cr_expect(strstr(line, "the CUDA backend module /nonexistent/libtri_cuda.so cannot be loaded: ") != NULL, "%s",
              line);
    cr_expect(strstr(line, "No such file or directory") != NULL, "%s", line);
#else
    cr_expect(strstr(line, "built without CUDA") != NULL, "%s", line);
#endif
}

/* A file that is no shared object (this test's own source) and a shared
 * object without the entry point (the C library's libm). */
Test(cuda_module, a_file_that_is_not_the_module_is_refused, .init = cr_redirect_stderr) {
    char line[4608];
    cuda_line_with(TRI_SOURCE_DIR "/tests/test_cuda_module.c", line, sizeof line);
#ifdef TRI_HAVE_CUDA
    cr_expect(strstr(line, "the CUDA backend module " TRI_SOURCE_DIR "/tests/test_cuda_module.c cannot be loaded: ") !=
                  NULL,
              "%s", line);
#else
    cr_expect(strstr(line, "built without CUDA") != NULL, "%s", line);
#endif
}

Test(cuda_module, a_library_without_the_entry_point_is_refused, .init = cr_redirect_stderr) {
    char line[4608];
    cuda_line_with("libm.so.6", line, sizeof line);
#ifdef TRI_HAVE_CUDA
    cr_expect(strstr(line, "the CUDA backend module libm.so.6 cannot be loaded: it has no entry point "
                           "tri_cuda_module_entry") != NULL,
              "%s", line);
#else
    cr_expect(strstr(line, "built without CUDA") != NULL, "%s", line);
#endif
}

/* The program as a user starts it: exit code 2, one line, no training. */
Test(cuda_module, trident_with_an_unloadable_module_exits_2_naming_it) {
    char *dir = tt_mkdtemp(), cmd[8192], *out = NULL;
    snprintf(cmd, sizeof cmd,
             "TRIDENT_CUDA_MODULE=/nonexistent %s train %s/configs/tiny-test.json --device cuda "
             "--set checkpoint.dir=%s/ckpt --set log.dir=%s/log",
             tt_bin("trident"), TRI_SOURCE_DIR, dir, dir);
    int rc = tt_run(cmd, &out);
    cr_expect_eq(rc, 2, "exit code %d:\n%s", rc, out);
#ifdef TRI_HAVE_CUDA
    cr_expect(strstr(out, "trident: --device cuda: the CUDA backend module /nonexistent cannot be loaded: ") != NULL,
              "%s", out);
#else
    cr_expect(strstr(out, "trident: --device cuda: ") != NULL && strstr(out, "built without CUDA") != NULL, "%s", out);
#endif
    cr_expect(strstr(out, "step ") == NULL, "training started: %s", out);
    free(out);
    tt_rmrf(dir);
    free(dir);
}

/* "device": "cuda" in the config selects the backend as --device does (exit
 * 2, the same message, where it cannot start), and --device on the command
 * line wins over it. */
Test(cuda_module, the_config_device_key_selects_cuda_and_the_flag_wins) {
    char *dir = tt_mkdtemp(), cmd[8192], *out = NULL, cfgpath[4200];
    snprintf(cfgpath, sizeof cfgpath, "%s/c.json", dir);
    FILE *f = fopen(cfgpath, "w");
    cr_assert(f);
    fprintf(f, "{\"device\": \"cuda\", \"data\": {\"train\": \"%s/t.bin\"}}\n", dir);
    fclose(f);
    snprintf(cmd, sizeof cmd,
             "TRIDENT_CUDA_MODULE=/nonexistent %s train %s --set checkpoint.dir=%s/ckpt --set log.dir=%s/log",
             tt_bin("trident"), cfgpath, dir, dir);
    int rc = tt_run(cmd, &out);
    cr_expect_eq(rc, 2, "exit code %d:\n%s", rc, out);
    cr_expect(strstr(out, "trident: --device cuda: ") != NULL, "%s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "%s train %s --device cpu --print-config", tt_bin("trident"), cfgpath);
    rc = tt_run(cmd, &out);
    cr_expect_eq(rc, 0, "exit code %d:\n%s", rc, out);
    cr_expect(strstr(out, "device = \"cpu\"") != NULL, "--device cpu did not win: %s", out);
    free(out);
    tt_rmrf(dir);
    free(dir);
}
