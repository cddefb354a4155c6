/* The CUDA backend as a loadable module.
 *
 * The real CUDA backend (kernels/cuda: the nvcc kernels, cuda_ops.c,
 * gemm_lt.c, device.c) and the NCCL transport (parallel/comm_nccl.c) are
 * built as one shared object, libtri_cuda.so, next to the programs: they need
 * the CUDA runtime, cuBLASLt (libcublasLt.so, ~540 MB) and NCCL (libnccl.so,
 * ~220 MB), which a process on the CPU should neither map nor need. Programs
 * load it (dlopen) only when asked for the CUDA backend (`--device cuda`) or
 * the NCCL transport. It exports two symbols: its entry point
 * (TRI_CUDA_MODULE_ENTRY), which returns the backend's table below, and the
 * NCCL transport's own entry (TRI_NCCL_ENTRY, parallel/comm_nccl.h), which
 * parallel/ looks up by name (tri_cuda_module_symbol): kernels/ knows nothing
 * of the transports.
 *
 * Where it is looked for: $TRIDENT_CUDA_MODULE when set (the path of the file);
 * otherwise libtri_cuda.so in the directory of the running program
 * (/proc/self/exe), then in the build directory that made this program (the
 * test programs live in build/tests/). Plain C, built with or without CUDA:
 * a build without CUDA (TRI_HAVE_CUDA undefined) never opens anything. */
#ifndef TRI_CUDA_MODULE_H
#define TRI_CUDA_MODULE_H

#include <stddef.h>

#include "kernels/cuda/gemm.h"

/* Defined by kernels/ops.h and kernels/ctx.h, which this header does not
 * include: kernels/ops.c calls the loader, and the context sits above it. */
struct tri_ops;
struct tri_ctx;

/* Bumped whenever the table below changes. */
#define TRI_CUDA_MODULE_ABI 4
/* The module's exported entry point:
 * const tri_cuda_module *tri_cuda_module_entry(void). */
#define TRI_CUDA_MODULE_ENTRY "tri_cuda_module_entry"
#define TRI_CUDA_MODULE_FILE  "libtri_cuda.so"

/* The module's table. The sizes of what it shares with the program are
 * checked where the program knows them: tri_ops by tri_ops_get (ops_size),
 * tri_ctx by tri_ctx_init (the op table's ctx_size). */
typedef struct tri_cuda_module {
    int abi;                            /* TRI_CUDA_MODULE_ABI of the module's build */
    size_t ops_size;                    /* sizeof tri_ops in the module */
    int (*probe)(char *why, size_t n);  /* tri_cuda_probe (kernels/cuda/device.h) */
    const struct tri_ops *(*ops)(void); /* tri_cuda_ops (kernels/cuda/cuda_ops.h) */
    /* Tests (tests/gpu): tri_cuda_ops_gemm and tri_cuda_ops_set_dbias_policy
     * (kernels/cuda/cuda_ops.h), for a context of the table above. */
    const tri_gemm_exec *(*ops_gemm)(const struct tri_ctx *c);
    void (*ops_set_dbias_policy)(struct tri_ctx *c, tri_dbias_policy p);
} tri_cuda_module;

/* The module's table, the module opened if it is not open yet. NULL with the
 * reason in why[n] (one line, no "trident: " prefix): "built without CUDA",
 * or "the CUDA backend module PATH cannot be loaded: WHY" (dlopen's error,
 * e.g. libcublasLt.so.13 missing on this machine; no entry point; a table of
 * another version). Never aborts, and keeps nothing: the dynamic loader opens
 * a file once per process and hands back that copy to every later call (the
 * module is never closed: its tables and code stay in use). */
const tri_cuda_module *tri_cuda_module_get(char *why, size_t n);

/* Another symbol the module exports (beside its entry point), e.g. the NCCL
 * transport's entry (parallel/comm_nccl.h): its address, or NULL when the
 * module cannot be loaded (tri_cuda_module_get says why) or has no such
 * symbol. */
void *tri_cuda_module_symbol(const char *name);

#endif
