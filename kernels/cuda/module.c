/* The entry point of libtri_cuda.so (kernels/cuda_module.h): the one symbol
 * the module exports; and the module's error reporting, which forwards to the
 * program's (src/base/err.c is not built into the module: the program's
 * err.c prints every message, prefix included). Built only into the module. */
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/ctx.h"
#include "kernels/cuda_module.h"
#include "parallel/comm.h"
#include "base/err.h"
#ifdef TRI_HAVE_NCCL
#include "parallel/comm_nccl.h"
#endif

static const tri_cuda_module module = {
    .abi = TRI_CUDA_MODULE_ABI,
    .ops_size = sizeof(tri_ops),
    .ctx_size = sizeof(tri_ctx),
    .comm_size = sizeof(tri_comm),
    .probe = tri_cuda_probe,
    .ops = tri_cuda_ops,
#ifdef TRI_HAVE_NCCL
    .nccl_init = tri_nccl_init,
#endif
    .ops_gemm = tri_cuda_ops_gemm,
    .ops_set_dbias_policy = tri_cuda_ops_set_dbias_policy,
};

/* The program's, from the entry point's argument. */
static tri_cuda_host host;

int tri_verror(const char *fmt, va_list ap) {
    if (host.verror != NULL) return host.verror(fmt, ap);
    vfprintf(stderr, fmt, ap); /* (never: the entry point runs first) */
    fputc('\n', stderr);
    return -1;
}

int tri_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    tri_verror(fmt, ap);
    va_end(ap);
    return -1;
}

void tri_fail_at(const char *file, int line, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (host.fail_at != NULL) host.fail_at(file, line, "%s", msg);
    fprintf(stderr, "trident: internal error: %s:%d: %s\n", file, line, msg);
    abort();
}

__attribute__((visibility("default"))) const tri_cuda_module *tri_cuda_module_entry(const tri_cuda_host *h);

const tri_cuda_module *tri_cuda_module_entry(const tri_cuda_host *h) {
    if (h == NULL || h->verror == NULL || h->fail_at == NULL) return NULL;
    host = *h;
    return &module;
}
