/* The context every op and every comm call runs in.
 *
 * A tri_ctx is one backend instance of one rank: the op table, the stream and
 * library handles a GPU backend needs (a CUDA stream, a cuBLASLt handle; NULL
 * on the CPU, where the stream is a no-op), the backend's own state, the
 * compute dtypes, and an allocator with accounting by kind of memory. There
 * is no global state in a backend: everything an op needs beyond its
 * arguments is here.
 *
 * Memory accounting: every allocation of backend memory names its kind
 * (parameters, gradients, optimizer state, saved activations, workspace,
 * other); the context keeps the bytes allocated of each kind and their peak.
 * `trident bench` prints these, and docs/performance.md checks the saved
 * activation figures against a closed form.
 *
 * Backend memory is not host memory: model code never dereferences it. Ids,
 * targets, losses and checkpoint tensors cross with tri_ctx_to_device /
 * tri_ctx_to_host (explicit staging copies). The "cpu-guard" backend enforces
 * this: its allocations are inaccessible (PROT_NONE) except while an op or a
 * staging copy runs, so a host read of backend memory faults at once. */
#ifndef TRI_CTX_H
#define TRI_CTX_H

#include <stddef.h>

#include "kernels/dtype.h"
#include "kernels/ops.h"

typedef enum {
    TRI_MEM_PARAMS = 0, /* parameters (compute copies)                    */
    TRI_MEM_GRADS,      /* gradient accumulation buffers                  */
    TRI_MEM_OPTIM,      /* optimizer state: moments (and master weights)  */
    TRI_MEM_SAVED,      /* saved-activation slots (what backward needs)   */
    TRI_MEM_WORKSPACE,  /* per-stage scratch: logits, temporaries, recompute */
    TRI_MEM_OTHER,      /* staging buffers, ids, communication scratch    */
    TRI_MEM_KINDS
} tri_mem_kind;

typedef struct tri_mem_stats {
    size_t bytes[TRI_MEM_KINDS]; /* allocated now         */
    size_t peak[TRI_MEM_KINDS];  /* most ever allocated   */
    /* Saved-activation slots in use (acquired from a slot pool), now and at
     * most: the pools are allocated up front, this is what the schedule used. */
    size_t saved_in_use, saved_in_use_peak;
    /* Host-side memory (tri_ctx_host_alloc) by kind, now and at most: the
     * offloaded optimizer's state and its staging buffers. Not in bytes[]. */
    size_t host_bytes[TRI_MEM_KINDS], host_peak[TRI_MEM_KINDS];
} tri_mem_stats;

typedef struct tri_ctx {
    const struct tri_ops *ops;
    void *stream;           /* backend stream (cudaStream_t); NULL on the CPU    */
    void *blas;             /* GEMM library handle (cublasLtHandle_t); NULL on the CPU */
    void *backend;          /* the backend's own state; NULL on the CPU          */
    tri_dtype act_dtype;    /* activations and activation gradients              */
    tri_dtype param_dtype;  /* parameters as the ops read them                   */
    tri_dtype grad_dtype;   /* gradient accumulation                             */
    tri_dtype master_dtype; /* optimizer master weights and moments              */
    tri_mem_stats mem;
} tri_ctx;

/* The backends a run can ask for (the config's "device", --device), started
 * by name (tri_device_name). */
typedef enum { TRI_DEVICE_CPU = 0, TRI_DEVICE_CPU_GUARD, TRI_DEVICE_CUDA } tri_device;

/* "cpu", "cpu-guard", "cuda". */
const char *tri_device_name(tri_device d);

/* Starts the backend named `device` ("cpu", "cpu-guard", "cuda";
 * tri_ops_get) on this process with `threads` worker threads (0: as the
 * environment says). Returns 0, or -1 after a message naming what is missing. */
int tri_ctx_init(tri_ctx *c, const char *device, int threads);
/* The same on a given op table (tests: the emulated CUDA backend, which has no
 * name tri_ops_get knows). -1 after a message when the table was built
 * against another tri_ctx (ops->ctx_size) or its init fails. */
int tri_ctx_init_ops(tri_ctx *c, const tri_ops *ops, int threads);
/* NULL-safe; frees the backend's state (not memory still allocated). */
void tri_ctx_free(tri_ctx *c);

/* Mixed precision: activations (act_dtype) and parameters as the ops read
 * them (param_dtype) become `compute`: TRI_F32 (the default after
 * tri_ctx_init), TRI_BF16 or TRI_F16; gradients and the optimizer's master
 * weights and moments stay fp32 (grad_dtype, master_dtype). Call it after
 * tri_ctx_init and before allocating anything sized by these dtypes. The CPU
 * backends ("cpu", "cpu-guard") emulate the 16-bit types exactly: storage is
 * 16-bit, every op computes in fp32 on the widened values and rounds to
 * nearest even where it stores (docs/precision.md); they keep a host scratch
 * buffer for the widened tensors, grown as needed and freed by
 * tri_ctx_free, not counted in the accounting. Returns 0, or -1 after a
 * message when the dtype is not a compute dtype or the backend does not run
 * it. */
int tri_ctx_set_precision(tri_ctx *c, tri_dtype compute);

/* The name of a dtype as `train.precision` spells the compute dtypes:
 * "fp32", "bf16", "fp16"; "f64", "i32", "u8" for the others. */
const char *tri_precision_name(tri_dtype t);
/* The compute dtype named by a `train.precision` value ("fp32", "bf16",
 * "fp16"); -1 for anything else. */
int tri_precision_parse(const char *s);

/* Backend memory of `bytes` (zero-filled), counted under `kind`. NULL after a
 * message naming `what` and the size when it cannot be had. */
void *tri_ctx_alloc(tri_ctx *c, size_t bytes, tri_mem_kind kind, const char *what);
/* NULL-safe; bytes and kind as given to tri_ctx_alloc. */
void tri_ctx_release(tri_ctx *c, void *p, size_t bytes, tri_mem_kind kind);

/* Host-side memory of `bytes` (zero-filled), counted under `kind` in
 * mem.host_bytes, apart from backend memory: what a run keeps in host memory
 * on purpose (parallel.offload = optimizer). On a backend with host_alloc (a
 * GPU) it is page-locked host memory, which host code reads and writes and
 * tri_ctx_copy_start moves; on one without (the CPU backends, whose memory
 * is the host's) it is backend memory from alloc, which the ops take as any
 * other and host code must not touch, only counted as host memory. NULL
 * after a message naming `what`. */
void *tri_ctx_host_alloc(tri_ctx *c, size_t bytes, tri_mem_kind kind, const char *what);
/* NULL-safe; bytes and kind as given to tri_ctx_host_alloc. */
void tri_ctx_host_release(tri_ctx *c, void *p, size_t bytes, tri_mem_kind kind);
/* 1 when tri_ctx_host_alloc's memory is host memory apart from the
 * backend's (the backend has host_alloc): the host computes on it, and it
 * crosses to backend memory only by copies; 0 on the CPU backends. */
int tri_ctx_host_apart(const tri_ctx *c);

/* Copies between backend memory and host_alloc'd host memory beside the
 * compute (the offloaded optimizer's schedule). tri_ctx_copy_start queues
 * one (to_host: src backend, dst host; else the reverse) behind every op
 * queued so far, on the backend's copy stream, and names it `slot` (>= 0;
 * a slot is reused once waited for, or started again unwaited, as after a
 * skipped step: its wait then waits for the latest); the host memory must
 * stay untouched until tri_ctx_copy_wait(slot) returns (the host waits for
 * that copy).
 * tri_ctx_copy_join makes the ops queued after it wait (the host does not)
 * for every copy started so far. On a backend without a copy stream (the
 * CPU) the copy is made at once, synchronously, and wait and join do
 * nothing. */
void tri_ctx_copy_start(tri_ctx *c, int slot, void *dst, const void *src, size_t bytes, int to_host);
void tri_ctx_copy_wait(tri_ctx *c, int slot);
void tri_ctx_copy_join(tri_ctx *c);

/* Saved-slot bookkeeping (see model/runtime.h): `bytes` of saved activations
 * start (+) or stop (-) being in use. */
void tri_ctx_saved_use(tri_ctx *c, size_t bytes, int acquire);

/* Staging copies between host memory and backend memory (synchronous). */
void tri_ctx_to_device(tri_ctx *c, void *dst, const void *host_src, size_t bytes);
void tri_ctx_to_host(tri_ctx *c, void *host_dst, const void *src, size_t bytes);

/* Opens (1) or closes (0) backend memory to host access around a transport
 * call that reads or writes it in place (the CPU backend's MPI transport).
 * A no-op except under "cpu-guard". NULL-safe. */
void tri_ctx_host_window(tri_ctx *c, int open);

/* Whether [p, p + bytes) is backend memory of c, inside one allocation: 1
 * yes, 0 no (host memory), -1 when the backend cannot tell (every backend
 * but "cpu-guard"). For the check of device-only groups (parallel/comm.h). */
int tri_ctx_owns(tri_ctx *c, const void *p, size_t bytes);

/* The backend's adamw_multi, or adamw on each span in order where it has
 * none (the same bits as those calls). */
void tri_ctx_adamw_multi(tri_ctx *c, const tri_adamw_span *spans, int count, float lr, float beta1, float beta2,
                         float eps, int t);
/* The backend's sumsq_multi, or the spans' sumsq added in order from 0. */
double tri_ctx_sumsq_multi(tri_ctx *c, const float *const *xs, const size_t *ns, int count);

/* The accounting as JSON: {"params": B, "grads": B, "optim": B,
 * "saved_act_peak": B (slots in use at most), "saved_act_alloc": B (slots
 * allocated), "workspace": B}, bytes of this rank; with host-side memory
 * (tri_ctx_host_alloc) also "host_optim": B and "host_other": B (the rest of
 * it: staging buffers), which the keys before do not count. */
void tri_mem_json(const tri_mem_stats *m, char *buf, size_t n);
/* The same for people: "params 1.2 MiB, grads ..., workspace ..."; then
 * "; host: optimizer ..., staging ..." when there is host-side memory. */
void tri_mem_line(const tri_mem_stats *m, char *buf, size_t n);

#endif
