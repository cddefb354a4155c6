/* Finding and opening the CUDA module (kernels/cuda_module.h). No state of
 * its own: the dynamic loader keeps the module open and hands the same copy
 * back to every dlopen of the same file. */
#include "kernels/cuda_module.h"

#include <stdio.h>

#ifdef TRI_HAVE_CUDA
#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* dir/libtri_cuda.so into out[n]; 0, or -1 when it does not fit. */
static int join(char *out, size_t n, const char *dir, size_t dir_len) {
    int w = snprintf(out, n, "%.*s/%s", (int)dir_len, dir, TRI_CUDA_MODULE_FILE);
    return w > 0 && (size_t)w < n ? 0 : -1;
}

/* The path to open: $TRIDENT_CUDA_MODULE; else the first of <program's
 * directory>/libtri_cuda.so and <build directory>/libtri_cuda.so that
 * exists; else the first of them (whose dlopen then says it is missing). */
static void module_path(char *out, size_t n) {
    const char *env = getenv("TRIDENT_CUDA_MODULE");
    if (env != NULL && *env != '\0') {
        snprintf(out, n, "%s", env);
        return;
    }
    char exe[PATH_MAX], first[PATH_MAX + 32] = "";
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        exe[len] = '\0';
        const char *slash = strrchr(exe, '/');
        if (slash != NULL && join(first, sizeof first, exe, (size_t)(slash - exe)) == 0 && access(first, F_OK) == 0) {
            snprintf(out, n, "%s", first);
            return;
        }
    }
#ifdef TRI_CUDA_MODULE_DIR
    char built[PATH_MAX + 32];
    if (join(built, sizeof built, TRI_CUDA_MODULE_DIR, strlen(TRI_CUDA_MODULE_DIR)) == 0 && access(built, F_OK) == 0) {
        snprintf(out, n, "%s", built);
        return;
    }
#endif
    snprintf(out, n, "%s", first[0] ? first : TRI_CUDA_MODULE_FILE);
}

/* Opens the module and checks its table: the dlopen handle with the table in
 * *out, or NULL with the reason in why[n]. */
static void *open_module(const tri_cuda_module **out, char *why, size_t n) {
    char path[PATH_MAX + 32];
    module_path(path, sizeof path);
    /* RTLD_NOW: a library the module needs that this machine lacks is named
     * here, not at some later call. RTLD_LOCAL: its symbols stay its own. */
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        const char *e = dlerror();
        snprintf(why, n, "the CUDA backend module %s cannot be loaded: %s", path, e ? e : "dlopen failed");
        return NULL;
    }
    const tri_cuda_module *(*entry)(void) = NULL;
    *(void **)&entry = dlsym(h, TRI_CUDA_MODULE_ENTRY);
    const tri_cuda_module *m = entry != NULL ? entry() : NULL;
    if (m == NULL) {
        snprintf(why, n, "the CUDA backend module %s cannot be loaded: it has no entry point %s", path,
                 TRI_CUDA_MODULE_ENTRY);
        dlclose(h);
        return NULL;
    }
    if (m->abi != TRI_CUDA_MODULE_ABI) {
        snprintf(why, n,
                 "the CUDA backend module %s cannot be loaded: it was built from another version of Trident "
                 "(table version %d; this program has %d)",
                 path, m->abi, TRI_CUDA_MODULE_ABI);
        dlclose(h);
        return NULL;
    }
    *out = m;
    return h;
}

const tri_cuda_module *tri_cuda_module_get(char *why, size_t n) {
    const tri_cuda_module *m = NULL;
    return open_module(&m, why, n) != NULL ? m : NULL;
}

void *tri_cuda_module_symbol(const char *name) {
    char why[4608];
    const tri_cuda_module *m = NULL;
    void *h = open_module(&m, why, sizeof why);
    return h != NULL ? dlsym(h, name) : NULL;
}

#else

const tri_cuda_module *tri_cuda_module_get(char *why, size_t n) {
    snprintf(why, n,
             "this build has no CUDA backend (built without CUDA: no nvcc was found at configure time, or "
             "-DTRI_CUDA=OFF)");
    return NULL;
}

void *tri_cuda_module_symbol(const char *name) { return NULL; }

#endif
