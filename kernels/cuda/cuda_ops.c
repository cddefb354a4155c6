/* The CUDA backend's op table: the contracts of kernels/ops.h over the
 * kernels of kernels/cuda (kernels.h), cuBLASLt's GEMMs (gemm.h) and the CUDA
 * runtime. Everything runs on the context's stream (ctx->stream, a
 * non-blocking stream of this context's own); only the copies to or from host
 * memory and the reductions that return a value to the host wait for it.
 * Every runtime call is checked (TRI_CUDA_CHECK: file:line, the call, the
 * rank); an allocation that fails returns NULL as the contract says.
 *
 * The backend's state (ctx->backend): the stream, the GEMM executor with its
 * plan cache and cuBLASLt workspace, and one growable scratch buffer for the
 * kernels that need one (LayerNorm's and bias_bwd's partial sums, the sorted
 * keys of the embedding backward, attention's backward, AdamW's tensor table,
 * the reductions' partials); under the profile (kernels/profile.h) also its
 * pool of timing events. Scratch is used by one op at a time: every op runs
 * on the one stream, so a buffer that grows is freed in stream order
 * (cudaFreeAsync) behind the ops that used it.
 *
 * Dtypes: the context starts fp32 (every dtype F32); train.precision = bf16
 * (tri_ctx_set_precision) makes activations and parameters bf16, and every
 * kernel and GEMM takes that compute dtype (c->act_dtype): bf16 storage,
 * fp32 arithmetic and accumulation. Gradients of weights, statistics and the
 * optimizer's tensors stay fp32. fp16 is not offered (compute_dtypes).
 *
 * Debugging: TRIDENT_CUDA_SYNC=1 (read once, when the context is made, into
 * the backend's state) makes every op wait for the stream after its launches
 * and check the result (op_done), so that an asynchronous fault (an illegal
 * address, a trap) is reported at the op whose kernels caused it, not at a
 * later call that happened to wait. Off by default: ops do not wait.
 * Compiled with
 * TRI_CUEMU, the same file is the emulated backend "cuda-emu" of the tests
 * (kernels/cuda/cuda_ops.h). */
#include "kernels/cuda/cuda_ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ctx.h"
#include "kernels/cuda/check.h"
#include "base/err.h"

#ifdef TRI_CUEMU
#define BACKEND_NAME         "cuda-emu"
#define GEMM_WORKSPACE_BYTES ((size_t)1 << 20) /* the emulated GEMM uses none; a buffer all the same */
#else
#define BACKEND_NAME         "cuda"
#define GEMM_WORKSPACE_BYTES ((size_t)32 << 20) /* what cuBLAS advises for Hopper */
#endif

typedef struct cuda_state {
    cudaStream_t stream;
    tri_gemm_exec gemm;
    void *gemm_ws;
    void *scratch;
    size_t scratch_bytes;
    tri_dbias_policy dbias;
    int sync_launches; /* TRIDENT_CUDA_SYNC=1: wait for the stream after every op */
    /* host tables of the multi-tensor AdamW and sum-of-squares launches,
     * grown as needed; copied to scratch before each launch */
    tri_cu_adamw_tensor *adamw_tab;
    tri_cu_span *span_tab;
    int adamw_cap, span_cap;
    /* the profile's timing marks (marks_init), NULL until asked for */
    cudaEvent_t *marks;
    int n_marks;
    /* the copies beside the compute (copy_start), made at the first: their
     * stream, the events that order it after the compute stream and back,
     * and one event per slot */
    cudaStream_t copy_stream;
    cudaEvent_t after_compute, after_copies;
    cudaEvent_t *slots;
    int n_slots;
} cuda_state;

static cuda_state *st(tri_ctx *c) { return (cuda_state *)c->backend; }

/* The end of an op that queued work on the stream: under TRIDENT_CUDA_SYNC=1
 * the wait for it, and a fault of its kernels reported here, naming the op
 * (file:line of this call); otherwise nothing. */
static void op_done(tri_ctx *c, const char *op, const char *file, int line) {
    cuda_state *s = st(c);
    if (!s->sync_launches) return;
    cudaError_t e = cudaStreamSynchronize(s->stream);
    if (e == cudaSuccess) e = cudaGetLastError();
    if (e != cudaSuccess) {
        char what[160];
        snprintf(what, sizeof what, "%s, in the wait after its launches (TRIDENT_CUDA_SYNC=1)", op);
        tri_cuda_fail(e, what, file, line);
    }
}
#define OP_DONE(c, op) op_done((c), (op), __FILE__, __LINE__)

/* Scratch of at least `bytes` (256-byte aligned), valid until the next call. */
static void *scratch(tri_ctx *c, size_t bytes) {
    cuda_state *s = st(c);
    if (bytes <= s->scratch_bytes) return s->scratch;
    size_t cap = s->scratch_bytes ? s->scratch_bytes : 4096;
    while (cap < bytes) cap *= 2;
    if (s->scratch) TRI_CUDA_CHECK(cudaFreeAsync(s->scratch, s->stream));
    s->scratch = NULL;
    s->scratch_bytes = 0;
    TRI_CUDA_CHECK(cudaMallocAsync(&s->scratch, cap, s->stream));
    s->scratch_bytes = cap;
    return s->scratch;
}

#ifndef TRI_CUEMU
/* The local rank the launcher gives (one GPU per rank on a node), or 0. */
static int local_rank(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "LOCAL_RANK", "SLURM_LOCALID"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v != NULL && *v >= '0' && *v <= '9') return atoi(v);
    }
    return 0;
}
#endif

static void cu_shutdown(tri_ctx *c);
static void cu_marks_free(tri_ctx *c);
static void copies_free(cuda_state *s);

static int cu_init(tri_ctx *c, int threads) {
    cuda_state *s = calloc(1, sizeof *s);
    if (s == NULL) return tri_error("--device %s: out of host memory", BACKEND_NAME);
    c->backend = s;
#ifndef TRI_CUEMU
    int count = 0;
    TRI_CUDA_CHECK(cudaGetDeviceCount(&count));
    TRI_CUDA_CHECK(cudaSetDevice(local_rank() % (count > 0 ? count : 1)));
#endif
    TRI_CUDA_CHECK(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking));
    c->stream = s->stream;
    if (cudaMallocAsync(&s->gemm_ws, GEMM_WORKSPACE_BYTES, s->stream) != cudaSuccess) {
        (void)cudaGetLastError();
        s->gemm_ws = NULL;
        cu_shutdown(c);
        return tri_error("--device %s: out of device memory for the %zu-byte GEMM workspace", BACKEND_NAME,
                         GEMM_WORKSPACE_BYTES);
    }
    if (TRI_CU(gemm_init)(&s->gemm, s->gemm_ws, GEMM_WORKSPACE_BYTES) != 0) {
        cu_shutdown(c);
        return -1;
    }
    c->blas = s->gemm.handle;
    s->dbias = TRI_DBIAS_REDUCE;
    const char *sync = getenv("TRIDENT_CUDA_SYNC"); /* once per context, never per launch */
    s->sync_launches = sync != NULL && sync[0] == '1';
    c->act_dtype = c->param_dtype = c->grad_dtype = c->master_dtype = TRI_F32;
    TRI_CUDA_CHECK(cudaStreamSynchronize(s->stream));
    return 0;
}

static void cu_shutdown(tri_ctx *c) {
    cuda_state *s = st(c);
    if (s == NULL) return;
    if (s->stream) TRI_CUDA_CHECK(cudaStreamSynchronize(s->stream));
    cu_marks_free(c);
    copies_free(s);
    TRI_CU(gemm_free)(&s->gemm);
    if (s->gemm_ws) TRI_CUDA_CHECK(cudaFreeAsync(s->gemm_ws, s->stream));
    if (s->scratch) TRI_CUDA_CHECK(cudaFreeAsync(s->scratch, s->stream));
    if (s->stream) {
        TRI_CUDA_CHECK(cudaStreamSynchronize(s->stream));
        TRI_CUDA_CHECK(cudaStreamDestroy(s->stream));
    }
    free(s->adamw_tab);
    free(s->span_tab);
    free(s);
    c->backend = NULL;
    c->stream = NULL;
    c->blas = NULL;
}

/* ---- memory ---- */

static void *cu_alloc(tri_ctx *c, size_t bytes) {
    void *p = NULL;
    const cudaError_t e = cudaMallocAsync(&p, bytes ? bytes : 1, st(c)->stream);
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError(); /* clear it: the caller reports the failure */
        return NULL;
    }
    TRI_CUDA_CHECK(e);
    if ((uintptr_t)p % 64 != 0)
        TRI_FAIL("cudaMallocAsync returned %p, not 64-byte aligned as the op contract needs", p);
    TRI_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, st(c)->stream));
    return p;
}

static void cu_free(tri_ctx *c, void *p, size_t bytes) {
    if (p != NULL) TRI_CUDA_CHECK(cudaFreeAsync(p, st(c)->stream));
}

/* The copy and the memset of the ops below, queued without the op's end. */
static void copy_async(tri_ctx *c, void *dst, const void *src, size_t bytes) {
    TRI_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, st(c)->stream));
}

static void zero_async(tri_ctx *c, void *p, size_t bytes) {
    TRI_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, st(c)->stream));
}

static void cu_copy(tri_ctx *c, void *dst, const void *src, size_t bytes) {
    copy_async(c, dst, src, bytes);
    OP_DONE(c, "copy");
}

/* Staging copies are synchronous (kernels/ctx.h): the host buffer may be
 * reused, or read, as soon as they return. */
static void cu_to_device(tri_ctx *c, void *dst, const void *host_src, size_t bytes) {
    TRI_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, st(c)->stream));
    TRI_CUDA_CHECK(cudaStreamSynchronize(st(c)->stream));
}

static void cu_to_host(tri_ctx *c, void *host_dst, const void *src, size_t bytes) {
    TRI_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, st(c)->stream));
    TRI_CUDA_CHECK(cudaStreamSynchronize(st(c)->stream));
}

static void cu_zero(tri_ctx *c, void *p, size_t bytes) {
    zero_async(c, p, bytes);
    OP_DONE(c, "zero");
}

static void cu_sync(tri_ctx *c) { TRI_CUDA_CHECK(cudaStreamSynchronize(st(c)->stream)); }

/* A transport that touches device memory in place (CUDA-aware MPI, NCCL on
 * another stream) may do so once this stream's work is done. */
static void cu_host_window(tri_ctx *c, int open) {
    if (open) cu_sync(c);
}

/* ---- host memory and copies beside the compute (the offloaded optimizer) ----
 * Page-locked host memory (cudaHostAlloc), and copies on a second stream of
 * this context's own, made at the first copy: each waits for the compute
 * stream's work queued so far (an event recorded there) and records the
 * event of its slot, which copy_wait waits for; copy_join makes the compute
 * stream wait for the copy stream's last event. A slot's event is created
 * when the slot is first used and kept to the end. */

static void *cu_host_alloc(tri_ctx *c, size_t bytes) {
    (void)c;
    void *p = NULL;
    const cudaError_t e = cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocDefault);
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError(); /* the caller reports it */
        return NULL;
    }
    TRI_CUDA_CHECK(e);
    memset(p, 0, bytes);
    return p;
}

static void cu_host_free(tri_ctx *c, void *p, size_t bytes) {
    (void)c, (void)bytes;
    if (p != NULL) TRI_CUDA_CHECK(cudaFreeHost(p));
}

static cudaEvent_t slot_event(cuda_state *s, int slot) {
    if (slot >= s->n_slots) {
        int n = s->n_slots ? s->n_slots : 16;
        while (n <= slot) n *= 2;
        cudaEvent_t *ev = realloc(s->slots, (size_t)n * sizeof *ev);
        if (ev == NULL) TRI_FAIL("--device %s: out of host memory for %d copy events", BACKEND_NAME, n);
        for (int i = s->n_slots; i < n; i++) TRI_CUDA_CHECK(cudaEventCreate(&ev[i]));
        s->slots = ev;
        s->n_slots = n;
    }
    return s->slots[slot];
}

static void cu_copy_start(tri_ctx *c, int slot, void *dst, const void *src, size_t bytes, int to_host) {
    cuda_state *s = st(c);
    if (s->copy_stream == NULL) {
        TRI_CUDA_CHECK(cudaStreamCreateWithFlags(&s->copy_stream, cudaStreamNonBlocking));
        TRI_CUDA_CHECK(cudaEventCreate(&s->after_compute));
        TRI_CUDA_CHECK(cudaEventCreate(&s->after_copies));
    }
    cudaEvent_t done = slot_event(s, slot);
    TRI_CUDA_CHECK(cudaEventRecord(s->after_compute, s->stream));
    TRI_CUDA_CHECK(cudaStreamWaitEvent(s->copy_stream, s->after_compute, 0));
    TRI_CUDA_CHECK(
        cudaMemcpyAsync(dst, src, bytes, to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice, s->copy_stream));
    TRI_CUDA_CHECK(cudaEventRecord(done, s->copy_stream));
}

static void cu_copy_wait(tri_ctx *c, int slot) {
    cuda_state *s = st(c);
    if (slot < 0 || slot >= s->n_slots)
        TRI_FAIL("--device %s: wait for copy slot %d, never started", BACKEND_NAME, slot);
    TRI_CUDA_CHECK(cudaEventSynchronize(s->slots[slot]));
}

static void cu_copy_join(tri_ctx *c) {
    cuda_state *s = st(c);
    if (s->copy_stream == NULL) return;
    TRI_CUDA_CHECK(cudaEventRecord(s->after_copies, s->copy_stream));
    TRI_CUDA_CHECK(cudaStreamWaitEvent(s->stream, s->after_copies, 0));
}

static void copies_free(cuda_state *s) {
    if (s->copy_stream == NULL) return;
    TRI_CUDA_CHECK(cudaStreamSynchronize(s->copy_stream));
    for (int i = 0; i < s->n_slots; i++) TRI_CUDA_CHECK(cudaEventDestroy(s->slots[i]));
    free(s->slots);
    TRI_CUDA_CHECK(cudaEventDestroy(s->after_compute));
    TRI_CUDA_CHECK(cudaEventDestroy(s->after_copies));
    TRI_CUDA_CHECK(cudaStreamDestroy(s->copy_stream));
    s->slots = NULL;
    s->n_slots = 0;
    s->copy_stream = NULL;
}

/* ---- cast ---- */

/* A dtype's name for messages (the module has no kernels/ctx.c). */
static const char *dtype_name(tri_dtype t) {
    return t == TRI_F32 ? "fp32" : t == TRI_BF16 ? "bf16" : t == TRI_F16 ? "fp16" : "a non-float dtype";
}

/* fp32 <-> bf16 by the cast kernels of elementwise.cu (the bits of
 * kernels/half.h, as the CPU's cast); a dtype to itself is a copy (none when
 * dst is src). fp16 is not a dtype of this backend: compute_dtypes leaves it
 * out, so tri_ctx_set_precision refuses train.precision=fp16 and no tensor
 * here is fp16. A cast from or to it (or any other dtype) is a programming
 * error, reported (naming the dtypes) and fatal. */
static void cu_cast(tri_ctx *c, void *dst, tri_dtype dst_t, const void *src, tri_dtype src_t, size_t n) {
    if (dst_t == src_t && (dst_t == TRI_F32 || dst_t == TRI_BF16)) {
        if (dst != src && n > 0) copy_async(c, dst, src, n * tri_dtype_size(dst_t));
    } else if (src_t == TRI_F32 && dst_t == TRI_BF16) {
        TRI_CU(cast_f32_to_bf16)(st(c)->stream, dst, src, n);
    } else if (src_t == TRI_BF16 && dst_t == TRI_F32) {
        TRI_CU(cast_bf16_to_f32)(st(c)->stream, dst, src, n);
    } else {
        TRI_FAIL("--device %s: cast from %s to %s: the CUDA backend casts only between fp32 and bf16", BACKEND_NAME,
                 dtype_name(src_t), dtype_name(dst_t));
    }
    OP_DONE(c, "cast");
}

/* ---- linear layer ---- */

/* The bias gradient (C, fp32) += the column sums of dout (N, C) by the
 * reduction kernel; N, C > 0. */
static void reduce_bias(tri_ctx *c, float *dbias, const void *dout, size_t N, size_t C) {
    float *part = scratch(c, TRI_CU(bias_bwd_scratch_floats)(N, C) * sizeof(float));
    TRI_CU(bias_bwd)(st(c)->stream, c->act_dtype, dbias, part, dout, N, C);
}

/* out (N, OC) = the bias broadcast (0 without one): the fill of C = 0, and
 * the first half of an unfused BIAS epilogue. */
static void fill_bias(tri_ctx *c, void *out, const void *bias, size_t N, size_t OC) {
    zero_async(c, out, N * OC * tri_dtype_size(c->act_dtype));
    if (bias) TRI_CU(residual_fwd)(st(c)->stream, c->act_dtype, out, out, out, bias, N, OC);
}

static void cu_matmul_fwd(tri_ctx *c, void *out, const void *inp, const void *weight, const void *bias, size_t N,
                          size_t C, size_t OC) {
    tri_gemm_call g;
    int fill = 0;
    if (tri_gemm_plan_fwd(&g, &fill, c->act_dtype, out, inp, weight, bias, N, C, OC) == 0) {
        if (TRI_CU(gemm_run)(&st(c)->gemm, st(c)->stream, &g) == TRI_GEMM_NO_ALGO) {
            /* no algorithm with the BIAS epilogue: out = bias, then out += the product */
            fill_bias(c, out, bias, N, OC);
            tri_gemm_unfuse(&g);
            g.d.accumulate = 1;
            (void)TRI_CU(gemm_run)(&st(c)->gemm, st(c)->stream, &g);
        }
    } else if (fill) { /* C = 0: out = bias broadcast, or 0 */
        fill_bias(c, out, bias, N, OC);
    }
    OP_DONE(c, "matmul_fwd");
}

/* The dweight GEMM of matmul_bwd and matmul_bwd_dgelu (with dbias through
 * BGRADB when the route says so, the reduction where cuBLASLt has no
 * algorithm for it). */
static void dweight_gemm(tri_ctx *c, float *dweight, float *dbias, tri_dbias_route route, const void *dout,
                         const void *inp, size_t N, size_t C, size_t OC) {
    cuda_state *s = st(c);
    tri_gemm_call g;
    float *bgrad = route == TRI_DBIAS_ROUTE_EPILOGUE ? scratch(c, OC * sizeof(float)) : NULL;
    if (tri_gemm_plan_dweight(&g, c->act_dtype, dweight, bgrad, dout, inp, N, C, OC) != 0) return;
    if (TRI_CU(gemm_run)(&s->gemm, s->stream, &g) == TRI_GEMM_RAN) {
        if (bgrad) TRI_CU(add)(s->stream, dbias, bgrad, OC); /* the epilogue overwrites; dbias accumulates */
        return;
    }
    /* no algorithm with BGRADB: the plain GEMM, dbias by the reduction */
    tri_gemm_unfuse(&g);
    (void)TRI_CU(gemm_run)(&s->gemm, s->stream, &g);
    reduce_bias(c, dbias, dout, N, OC);
}

static void cu_matmul_bwd(tri_ctx *c, void *dinp, float *dweight, float *dbias, const void *dout, const void *inp,
                          const void *weight, size_t N, size_t C, size_t OC) {
    cuda_state *s = st(c);
    const tri_dbias_route route = tri_gemm_dbias_route(s->dbias, dweight != NULL, dbias != NULL, N, C, OC);
    if (route == TRI_DBIAS_ROUTE_REDUCE && N > 0) reduce_bias(c, dbias, dout, N, OC);
    tri_gemm_call g;
    int fill = 0;
    if (tri_gemm_plan_dinp(&g, &fill, c->act_dtype, dinp, dout, weight, N, C, OC) == 0)
        (void)TRI_CU(gemm_run)(&s->gemm, s->stream, &g); /* no epilogue: it runs (or aborts) */
    else if (fill)
        zero_async(c, dinp, N * C * tri_dtype_size(c->act_dtype));
    dweight_gemm(c, dweight, dbias, route, dout, inp, N, C, OC);
    OP_DONE(c, "matmul_bwd");
}

/* pre = inp @ weight^T (+ bias), out = gelu(pre): one GEMM with GELU_AUX_BIAS
 * (GELU_AUX) in its epilogue; where cuBLASLt has none, matmul_fwd into pre
 * and the GELU kernel, as the model composes them on other backends. */
static void cu_matmul_gelu_fwd(tri_ctx *c, void *out, void *pre, const void *inp, const void *weight,
                               const void *bias, size_t N, size_t C, size_t OC) {
    tri_gemm_call g;
    int fill = 0;
    if (tri_gemm_plan_fwd_gelu(&g, &fill, c->act_dtype, out, pre, inp, weight, bias, N, C, OC) == 0 &&
        TRI_CU(gemm_run)(&st(c)->gemm, st(c)->stream, &g) == TRI_GEMM_RAN) {
        OP_DONE(c, "matmul_gelu_fwd");
        return;
    }
    cu_matmul_fwd(c, pre, inp, weight, bias, N, C, OC);
    TRI_CU(gelu_fwd)(st(c)->stream, c->act_dtype, out, pre, N * OC);
    OP_DONE(c, "matmul_gelu_fwd");
}

/* dpre = gelu'(pre) * (dout @ weight) by the dinp GEMM with DGELU_BGRAD (the
 * bias gradient of pre's linear into scratch, then added) or DGELU; where
 * cuBLASLt has neither, the plain GEMM and the GELU kernel; the bias
 * gradient by the reduction wherever the epilogue did not give it. dweight
 * by its own GEMM, as in matmul_bwd (its dbias route: none here). */
static void cu_matmul_bwd_dgelu(tri_ctx *c, void *dpre, float *dweight, float *dbias_pre, const void *dout,
                                const void *inp, const void *weight, const void *pre, size_t N, size_t C, size_t OC) {
    cuda_state *s = st(c);
    tri_gemm_call g;
    int fill = 0, need_reduce = dbias_pre != NULL;
    float *bgrad = dbias_pre && C > 0 ? scratch(c, C * sizeof(float)) : NULL;
    int ran = 0;
    if (tri_gemm_plan_dinp_dgelu(&g, &fill, c->act_dtype, dpre, bgrad, dout, weight, pre, N, C, OC) == 0) {
        ran = TRI_CU(gemm_run)(&s->gemm, s->stream, &g) == TRI_GEMM_RAN;
        if (ran && bgrad) {
            TRI_CU(add)(s->stream, dbias_pre, bgrad, C); /* the epilogue overwrites; the op accumulates */
            need_reduce = 0;
        }
        if (!ran && bgrad) { /* DGELU_BGRAD refused: DGELU, and the reduction */
            tri_gemm_plan_dinp_dgelu(&g, &fill, c->act_dtype, dpre, NULL, dout, weight, pre, N, C, OC);
            ran = TRI_CU(gemm_run)(&s->gemm, s->stream, &g) == TRI_GEMM_RAN;
        }
        if (!ran) { /* neither: the plain dinp GEMM, then GELU's backward in place */
            tri_gemm_unfuse(&g);
            (void)TRI_CU(gemm_run)(&s->gemm, s->stream, &g);
            TRI_CU(gelu_bwd)(s->stream, c->act_dtype, dpre, pre, dpre, N * C);
        }
    } else if (fill) { /* OC = 0: dout @ weight is 0, and so is dpre */
        zero_async(c, dpre, N * C * tri_dtype_size(c->act_dtype));
        need_reduce = 0; /* += 0 */
    } else {
        need_reduce = 0; /* N or C = 0: nothing to write */
    }
    if (need_reduce) reduce_bias(c, dbias_pre, dpre, N, C);
    dweight_gemm(c, dweight, NULL, TRI_DBIAS_ROUTE_NONE, dout, inp, N, C, OC);
    OP_DONE(c, "matmul_bwd_dgelu");
}

/* ---- LayerNorm, attention, RMSNorm, RoPE, SwiGLU, GELU, residual ---- */

static void cu_layernorm_fwd(tri_ctx *c, void *out, float *mean, float *rstd, const void *inp, const void *w,
                             const void *b, size_t N, size_t C) {
    TRI_CU(layernorm_fwd)(st(c)->stream, c->act_dtype, out, mean, rstd, inp, w, b, N, C);
    OP_DONE(c, "layernorm_fwd");
}

static void cu_layernorm_bwd(tri_ctx *c, void *dinp, float *dw, float *db, const void *dout, const void *inp,
                             const void *w, const float *mean, const float *rstd, size_t N, size_t C) {
    float *part = scratch(c, TRI_CU(layernorm_bwd_scratch_floats)(N, C) * sizeof(float));
    TRI_CU(layernorm_bwd)(st(c)->stream, c->act_dtype, dinp, dw, db, part, dout, inp, w, mean, rstd, N, C);
    OP_DONE(c, "layernorm_bwd");
}

static void cu_attention_fwd(tri_ctx *c, void *out, float *state, const void *qkv, size_t B, size_t T, int NH, int NKV,
                             int HS) {
    TRI_CU(attention_fwd)(st(c)->stream, c->act_dtype, out, state, qkv, B, T, NH, NKV, HS);
    OP_DONE(c, "attention_fwd");
}

static void cu_attention_bwd(tri_ctx *c, void *dqkv, float *scratch_buf, const void *dout, const void *qkv,
                             const void *out, const float *state, size_t B, size_t T, int NH, int NKV, int HS) {
    TRI_CU(attention_bwd)(st(c)->stream, c->act_dtype, dqkv, scratch_buf, dout, qkv, out, state, B, T, NH, NKV, HS);
    OP_DONE(c, "attention_bwd");
}

static void cu_attention_block_fwd(tri_ctx *c, float *o, float *lse, const void *qkv, const void *kv, size_t B,
                                   size_t T, size_t Tk, size_t q0, int causal, int merge, int NH, int NKV, int HS) {
    TRI_CU(attention_block_fwd)(st(c)->stream, c->act_dtype, o, lse, qkv, kv, B, T, Tk, q0, causal, merge, NH, NKV, HS);
    OP_DONE(c, "attention_block_fwd");
}

static void cu_attention_block_bwd(tri_ctx *c, float *dqkv, float *dkv, float *scratch, const void *dout,
                                   const void *qkv, const void *kv, const void *out, const float *lse, size_t B,
                                   size_t T, size_t Tk, size_t q0, int causal, int NH, int NKV, int HS) {
    TRI_CU(attention_block_bwd)
    (st(c)->stream, c->act_dtype, dqkv, dkv, scratch, dout, qkv, kv, out, lse, B, T, Tk, q0, causal, NH, NKV, HS);
    OP_DONE(c, "attention_block_bwd");
}

static void cu_attention_kv_copy(tri_ctx *c, void *dst, const void *src, tri_dtype t, size_t B, size_t T, int NH,
                                 int NKV, int HS, int to_qkv) {
    TRI_CU(attention_kv_copy)(st(c)->stream, dst, src, tri_dtype_size(t), B, T, NH, NKV, HS, to_qkv);
    OP_DONE(c, "attention_kv_copy");
}

static void cu_rmsnorm_fwd(tri_ctx *c, void *out, float *rstd, const void *inp, const void *w, size_t N, size_t C,
                           float eps) {
    TRI_CU(rmsnorm_fwd)(st(c)->stream, c->act_dtype, out, rstd, inp, w, N, C, eps);
    OP_DONE(c, "rmsnorm_fwd");
}

static void cu_rmsnorm_bwd(tri_ctx *c, void *dinp, float *dw, const void *dout, const void *inp, const void *w,
                           const float *rstd, size_t N, size_t C) {
    float *part = scratch(c, TRI_CU(rmsnorm_bwd_scratch_floats)(N, C) * sizeof(float));
    TRI_CU(rmsnorm_bwd)(st(c)->stream, c->act_dtype, dinp, dw, part, dout, inp, w, rstd, N, C);
    OP_DONE(c, "rmsnorm_bwd");
}

static void cu_rope_fwd(tri_ctx *c, void *qkv, const float *inv_freq, size_t B, size_t T, int NH, int NKV, int HS,
                        size_t pos0) {
    TRI_CU(rope_fwd)(st(c)->stream, c->act_dtype, qkv, inv_freq, B, T, NH, NKV, HS, pos0);
    OP_DONE(c, "rope_fwd");
}

static void cu_rope_bwd(tri_ctx *c, void *dqkv, const float *inv_freq, size_t B, size_t T, int NH, int NKV, int HS,
                        size_t pos0) {
    TRI_CU(rope_bwd)(st(c)->stream, c->act_dtype, dqkv, inv_freq, B, T, NH, NKV, HS, pos0);
    OP_DONE(c, "rope_bwd");
}

static void cu_swiglu_fwd(tri_ctx *c, void *out, const void *inp, size_t N, size_t F) {
    TRI_CU(swiglu_fwd)(st(c)->stream, c->act_dtype, out, inp, N, F);
    OP_DONE(c, "swiglu_fwd");
}

static void cu_swiglu_bwd(tri_ctx *c, void *dinp, const void *inp, const void *dout, size_t N, size_t F) {
    TRI_CU(swiglu_bwd)(st(c)->stream, c->act_dtype, dinp, inp, dout, N, F);
    OP_DONE(c, "swiglu_bwd");
}

static void cu_gelu_fwd(tri_ctx *c, void *out, const void *inp, size_t N) {
    TRI_CU(gelu_fwd)(st(c)->stream, c->act_dtype, out, inp, N);
    OP_DONE(c, "gelu_fwd");
}

static void cu_gelu_bwd(tri_ctx *c, void *dinp, const void *inp, const void *dout, size_t N) {
    TRI_CU(gelu_bwd)(st(c)->stream, c->act_dtype, dinp, inp, dout, N);
    OP_DONE(c, "gelu_bwd");
}

static void cu_residual_fwd(tri_ctx *c, void *out, const void *res, const void *x, const void *bias, size_t N,
                            size_t C) {
    TRI_CU(residual_fwd)(st(c)->stream, c->act_dtype, out, res, x, bias, N, C);
    OP_DONE(c, "residual_fwd");
}

static void cu_bias_bwd(tri_ctx *c, float *dbias, const void *dout, size_t N, size_t C) {
    if (N == 0 || C == 0) return;
    reduce_bias(c, dbias, dout, N, C);
    OP_DONE(c, "bias_bwd");
}

/* ---- embedding, cross-entropy ---- */

static void cu_embedding_fwd(tri_ctx *c, void *out, const int32_t *ids, const void *wte, const void *wpe, size_t B,
                             size_t T, size_t C, size_t vstart, size_t Vl) {
    TRI_CU(embedding_fwd)(st(c)->stream, c->act_dtype, out, ids, wte, wpe, B, T, C, vstart, Vl);
    OP_DONE(c, "embedding_fwd");
}

static void cu_embedding_bwd(tri_ctx *c, float *dwte, float *dwpe, const void *dout, const int32_t *ids, size_t B,
                             size_t T, size_t C, size_t vstart, size_t Vl) {
    float *keys = scratch(c, TRI_CU(embedding_bwd_scratch_floats)(B, T) * sizeof(float));
    TRI_CU(embedding_bwd)(st(c)->stream, c->act_dtype, dwte, dwpe, keys, dout, ids, B, T, C, vstart, Vl);
    OP_DONE(c, "embedding_bwd");
}

static void cu_crossentropy_stats(tri_ctx *c, float *stats, const void *logits, const int32_t *targets, size_t N,
                                  size_t Vl, size_t vstart, size_t V) {
    TRI_CU(crossentropy_stats)(st(c)->stream, c->act_dtype, stats, logits, targets, N, Vl, vstart, V);
    OP_DONE(c, "crossentropy_stats");
}

static void cu_crossentropy_combine(tri_ctx *c, float *stats, const float *gather, size_t N, int R) {
    TRI_CU(crossentropy_combine)(st(c)->stream, stats, gather, N, R);
    OP_DONE(c, "crossentropy_combine");
}

static void cu_crossentropy_bwd(tri_ctx *c, float *losses, void *dlogits, const void *logits, const float *stats,
                                const int32_t *targets, float dscale, size_t N, size_t Vl, size_t vstart, size_t V) {
    TRI_CU(crossentropy_bwd)
    (st(c)->stream, c->act_dtype, losses, dlogits, logits, stats, targets, dscale, N, Vl, vstart, V);
    OP_DONE(c, "crossentropy_bwd");
}

/* ---- AdamW, reductions ---- */

/* Grows a host table of `size`-byte entries to at least n entries. */
static void *grow_table(void *tab, int *cap, int n, size_t size) {
    if (n <= *cap) return tab;
    int c = *cap ? *cap : 64;
    while (c < n) c *= 2;
    void *t = realloc(tab, (size_t)c * size);
    if (t == NULL) TRI_FAIL("--device %s: out of host memory for a table of %d tensors", BACKEND_NAME, c);
    *cap = c;
    return t;
}

/* Every span in one launch: the table built on the host, copied to scratch,
 * then the kernel. The wait at the end lets the next call rewrite the host
 * table (the copy reads it asynchronously); it is one wait per chunk or
 * ZeRO bucket per step, not one per tensor. */
static void cu_adamw_multi(tri_ctx *c, const tri_adamw_span *spans, int count, float lr, float beta1, float beta2,
                           float eps, int t) {
    if (count <= 0) return;
    cuda_state *s = st(c);
    s->adamw_tab = grow_table(s->adamw_tab, &s->adamw_cap, count, sizeof *s->adamw_tab);
    for (int i = 0; i < count; i++)
        s->adamw_tab[i] = (tri_cu_adamw_tensor){.param = spans[i].param,
                                                .m = spans[i].m,
                                                .v = spans[i].v,
                                                .grad = spans[i].grad,
                                                .n = spans[i].n,
                                                .wd = spans[i].wd};
    const size_t blocks = TRI_CU(adamw_plan)(s->adamw_tab, count);
    if (blocks == 0) return;
    const size_t bytes = (size_t)count * sizeof *s->adamw_tab;
    tri_cu_adamw_tensor *dev = scratch(c, bytes);
    TRI_CUDA_CHECK(cudaMemcpyAsync(dev, s->adamw_tab, bytes, cudaMemcpyHostToDevice, s->stream));
    TRI_CU(adamw_multi)(s->stream, dev, count, blocks, lr, beta1, beta2, eps, t, 1.0f);
    TRI_CUDA_CHECK(cudaStreamSynchronize(s->stream));
}

static void cu_adamw(tri_ctx *c, float *param, float *m, float *v, const float *grad, size_t n, float lr, float beta1,
                     float beta2, float eps, float wd, int t) {
    const tri_adamw_span one = {.param = param, .m = m, .v = v, .grad = grad, .n = n, .wd = wd};
    cu_adamw_multi(c, &one, 1, lr, beta1, beta2, eps, t);
}

/* The sum of squares of every span: one table, one launch (the fixed tree
 * of sum_multi), one wait for the double. Scratch: the table, then the
 * result, then the per-block partials. */
static double cu_sumsq_multi(tri_ctx *c, const float *const *xs, const size_t *ns, int count) {
    if (count <= 0) return 0.0;
    cuda_state *s = st(c);
    s->span_tab = grow_table(s->span_tab, &s->span_cap, count, sizeof *s->span_tab);
    for (int i = 0; i < count; i++) s->span_tab[i] = (tri_cu_span){.x = xs[i], .n = ns[i]};
    const size_t blocks = TRI_CU(sum_plan)(s->span_tab, count);
    const size_t tab_bytes = ((size_t)count * sizeof *s->span_tab + 255) / 256 * 256;
    char *buf = scratch(c, tab_bytes + (1 + (blocks ? blocks : 1)) * sizeof(double));
    tri_cu_span *dev = (tri_cu_span *)buf;
    double *result = (double *)(buf + tab_bytes);
    TRI_CUDA_CHECK(cudaMemcpyAsync(dev, s->span_tab, (size_t)count * sizeof *dev, cudaMemcpyHostToDevice, s->stream));
    TRI_CU(sum_multi)(s->stream, result, result + 1, dev, count, blocks, 1);
    double r = 0.0;
    cu_to_host(c, &r, result, sizeof r);
    return r;
}

static double reduce(tri_ctx *c, const float *x, size_t n, int square) {
    if (n == 0) return 0.0;
    cuda_state *s = st(c);
    double *buf = scratch(c, (1 + TRI_CU(sum_partials)(n)) * sizeof(double));
    TRI_CU(sum)(s->stream, buf, buf + 1, x, n, square);
    double r = 0.0;
    cu_to_host(c, &r, buf, sizeof r);
    return r;
}

static double cu_sum(tri_ctx *c, const float *x, size_t n) { return reduce(c, x, n, 0); }
static double cu_sumsq(tri_ctx *c, const float *x, size_t n) { return reduce(c, x, n, 1); }

static void cu_scale(tri_ctx *c, float *x, float s, size_t n) {
    TRI_CU(scale)(st(c)->stream, x, s, n);
    OP_DONE(c, "scale");
}

static void cu_add(tri_ctx *c, float *y, const float *x, size_t n) {
    TRI_CU(add)(st(c)->stream, y, x, n);
    OP_DONE(c, "add");
}

/* ---- timing marks (the profile, kernels/profile.h) ----
 * CUDA events with timing, recorded on the compute stream: a pool made once
 * (marks_init), recorded around ops without a wait, and read once per step
 * after one cudaEventSynchronize on the last of them. */

static void destroy_events(cudaEvent_t *ev, int n) {
    for (int i = 0; i < n; i++) TRI_CUDA_CHECK(cudaEventDestroy(ev[i]));
    free(ev);
}

static void cu_marks_free(tri_ctx *c) {
    cuda_state *s = st(c);
    if (s == NULL || s->marks == NULL) return;
    destroy_events(s->marks, s->n_marks);
    s->marks = NULL;
    s->n_marks = 0;
}

/* The new pool first, then the old one freed: a pool that cannot be had
 * leaves the old one in place (the caller is told: -1, printed). */
static int cu_marks_init(tri_ctx *c, int n) {
    cuda_state *s = st(c);
    cudaEvent_t *ev = calloc(n > 0 ? (size_t)n : 1, sizeof *ev);
    if (ev == NULL) return tri_error("--device %s: out of host memory for %d timing events", BACKEND_NAME, n);
    for (int i = 0; i < n; i++) {
        const cudaError_t e = cudaEventCreate(&ev[i]);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            destroy_events(ev, i);
            return tri_error("--device %s: cannot create %d timing events (%d made): %s", BACKEND_NAME, n, i,
                             cudaGetErrorString(e));
        }
    }
    cu_marks_free(c);
    s->marks = ev;
    s->n_marks = n;
    return 0;
}

static void cu_mark(tri_ctx *c, int i) {
    cuda_state *s = st(c);
    if (i < 0 || i >= s->n_marks) TRI_FAIL("--device %s: timing mark %d of a pool of %d", BACKEND_NAME, i, s->n_marks);
    TRI_CUDA_CHECK(cudaEventRecord(s->marks[i], s->stream));
}

static void cu_marks_read(tri_ctx *c, int pairs, float *ms) {
    cuda_state *s = st(c);
    if (pairs <= 0) return;
    if (2 * pairs > s->n_marks)
        TRI_FAIL("--device %s: %d pairs of timing marks read from a pool of %d", BACKEND_NAME, pairs, s->n_marks);
    TRI_CUDA_CHECK(cudaEventSynchronize(s->marks[2 * pairs - 1]));
    for (int j = 0; j < pairs; j++) TRI_CUDA_CHECK(cudaEventElapsedTime(&ms[j], s->marks[2 * j], s->marks[2 * j + 1]));
}

static const tri_ops CUDA_OPS = {
    .name = BACKEND_NAME,
    .compute_dtypes = (1u << TRI_F32) | (1u << TRI_BF16),
    .ctx_size = sizeof(tri_ctx),
    .init = cu_init,
    .shutdown = cu_shutdown,
    .alloc = cu_alloc,
    .free = cu_free,
    .copy = cu_copy,
    .to_device = cu_to_device,
    .to_host = cu_to_host,
    .zero = cu_zero,
    .sync = cu_sync,
    .host_window = cu_host_window,
    .host_alloc = cu_host_alloc,
    .host_free = cu_host_free,
    .copy_start = cu_copy_start,
    .copy_wait = cu_copy_wait,
    .copy_join = cu_copy_join,
    .cast = cu_cast,
    .matmul_fwd = cu_matmul_fwd,
    .matmul_bwd = cu_matmul_bwd,
    .matmul_gelu_fwd = cu_matmul_gelu_fwd,
    .matmul_bwd_dgelu = cu_matmul_bwd_dgelu,
    .layernorm_fwd = cu_layernorm_fwd,
    .layernorm_bwd = cu_layernorm_bwd,
    .attention_fwd = cu_attention_fwd,
    .attention_bwd = cu_attention_bwd,
    .attention_saved_floats = TRI_CU(attention_saved_floats),
    .attention_scratch_floats = TRI_CU(attention_scratch_floats),
    .attention_block_fwd = cu_attention_block_fwd,
    .attention_block_bwd = cu_attention_block_bwd,
    .attention_kv_copy = cu_attention_kv_copy,
    .rmsnorm_fwd = cu_rmsnorm_fwd,
    .rmsnorm_bwd = cu_rmsnorm_bwd,
    .rope_fwd = cu_rope_fwd,
    .rope_bwd = cu_rope_bwd,
    .swiglu_fwd = cu_swiglu_fwd,
    .swiglu_bwd = cu_swiglu_bwd,
    .gelu_fwd = cu_gelu_fwd,
    .gelu_bwd = cu_gelu_bwd,
    .residual_fwd = cu_residual_fwd,
    .bias_bwd = cu_bias_bwd,
    .embedding_fwd = cu_embedding_fwd,
    .embedding_bwd = cu_embedding_bwd,
    .crossentropy_stats = cu_crossentropy_stats,
    .crossentropy_combine = cu_crossentropy_combine,
    .crossentropy_bwd = cu_crossentropy_bwd,
    .adamw = cu_adamw,
    .adamw_multi = cu_adamw_multi,
    .sum = cu_sum,
    .sumsq = cu_sumsq,
    .sumsq_multi = cu_sumsq_multi,
    .scale = cu_scale,
    .add = cu_add,
    .marks_init = cu_marks_init,
    .mark = cu_mark,
    .marks_read = cu_marks_read,
    .marks_free = cu_marks_free,
};

const tri_ops *TRI_CU(ops)(void) { return &CUDA_OPS; }

const tri_gemm_exec *TRI_CU(ops_gemm)(const tri_ctx *c) { return &((const cuda_state *)c->backend)->gemm; }

void TRI_CU(ops_set_dbias_policy)(tri_ctx *c, tri_dbias_policy p) { st(c)->dbias = p; }
