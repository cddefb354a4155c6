/* The CUDA backend as a loadable module.
 *
 * The real CUDA backend (kernels/cuda: the nvcc kernels, cuda_ops.c,
 * gemm_lt.c, device.c) and the NCCL transport (parallel/comm_nccl.c) are
 * built as one shared object, libtri_cuda.so, next to the programs: they need
 * the CUDA runtime, cuBLASLt (libcublasLt.so, ~540 MB) and NCCL (libnccl.so,
 * ~220 MB), which a process on the CPU should neither map nor need. Programs
 * load it (dlopen) only when asked for the CUDA backend (`--device cuda`) or
 * the NCCL transport; everything they get from it comes through the one table
 * below, which its one exported symbol (TRI_CUDA_MODULE_ENTRY) returns.
 *
 * Where it is looked for: $TRI_CUDA_MODULE when set (the path of the file);
 * otherwise libtri_cuda.so in the directory of the running program
 * (/proc/self/exe), then in the build directory that made this program (the
 * test programs live in build/tests/). Plain C, built with or without CUDA:
 * a build without CUDA (TRI_HAVE_CUDA undefined) never opens anything. */
#ifndef TRI_CUDA_MODULE_H
#define TRI_CUDA_MODULE_H

#include <stdarg.h>
#include <stddef.h>

#include "kernels/cuda/gemm.h"
#include "kernels/ops.h"

/* Bumped whenever the table below changes. */
#define TRI_CUDA_MODULE_ABI 2
/* The module's exported entry point:
 * const tri_cuda_module *tri_cuda_module_entry(const tri_cuda_host *host). */
#define TRI_CUDA_MODULE_ENTRY "tri_cuda_module_entry"
#define TRI_CUDA_MODULE_FILE  "libtri_cuda.so"

struct tri_mesh;
struct tri_comm;

/* What the module takes from the program: error reporting (src/base/err.h),
 * which prints in one place (the program's err.c, with its prefix); the
 * module's tri_error and tri_fail_at forward here. */
typedef struct tri_cuda_host {
    int (*verror)(const char *fmt, va_list ap);
    void (*fail_at)(const char *file, int line, const char *fmt, ...);
} tri_cuda_host;

typedef struct tri_cuda_module {
    int abi;                              /* TRI_CUDA_MODULE_ABI of the module's build */
    size_t ops_size, ctx_size, comm_size; /* sizeof tri_ops, tri_ctx, tri_comm in the module */
    int (*probe)(char *why, size_t n);    /* tri_cuda_probe (kernels/cuda/device.h) */
    const tri_ops *(*ops)(void);          /* tri_cuda_ops (kernels/cuda/cuda_ops.h) */
    /* tri_nccl_init (parallel/comm_nccl.h); NULL when the module was built without NCCL */
    int (*nccl_init)(const struct tri_mesh *m, int local_rank, int (*bcast)(void *ctx, void *buf, size_t len),
                     void *bctx, struct tri_comm *world, struct tri_comm *tp, struct tri_comm *dp, struct tri_comm *pp,
                     struct tri_comm *emb);
    /* Tests (tests/gpu): tri_cuda_ops_gemm and tri_cuda_ops_set_dbias_policy
     * (kernels/cuda/cuda_ops.h), for a context of the table above. */
    const tri_gemm_exec *(*ops_gemm)(const tri_ctx *c);
    void (*ops_set_dbias_policy)(tri_ctx *c, tri_dbias_policy p);
} tri_cuda_module;

/* The module, loaded at the first call and kept for the life of the process.
 * NULL with the reason in why[n] (one line, no "trident: " prefix): "built
 * without CUDA", or "the CUDA backend module PATH cannot be loaded: WHY"
 * (dlopen's error, e.g. libcublasLt.so.13 missing on this machine; no entry
 * point; a module of another build). Loads nothing and never aborts. */
const tri_cuda_module *tri_cuda_module_get(char *why, size_t n);

#endif
