/* The CPU backend's op table. Each op lives in the file of its family
 * (matmul.c, layernorm.c, attention.c, gelu.c, embedding.c, crossentropy.c,
 * adamw.c, elementwise.c) with plain fp32 signatures; the entries below adapt
 * them to the table's contract (context first, compute-dtype tensors as
 * void *). The CPU backend computes in fp32 only: tri_ctx_init sets every
 * dtype of the context to F32, and the adapters rely on it. The backend has
 * no state of its own: the context's stream, handles and backend pointer stay
 * NULL. */
#include "kernels/cpu/cpu_internal.h"

#include <omp.h>
#include <xmmintrin.h>

#define MXCSR_DAZ 0x0040 /* denormal inputs read as zero */

static int cpu_init(tri_ctx *c, int threads) {
    if (threads > 0) omp_set_num_threads(threads);
/* MXCSR is per thread: set it on every thread of the pool; threads the
     * pool adds later are created by this thread and inherit it */
#pragma omp parallel
    _mm_setcsr(_mm_getcsr() | _MM_FLUSH_ZERO_ON | MXCSR_DAZ);
    c->act_dtype = c->param_dtype = c->grad_dtype = c->master_dtype = TRI_F32;
    return 0;
}

static void *cpu_alloc(tri_ctx *c, size_t bytes) { return tri_cpu_alloc(bytes); }
static void cpu_free(tri_ctx *c, void *p, size_t bytes) { tri_cpu_free(p); }
static void cpu_copy(tri_ctx *c, void *dst, const void *src, size_t bytes) { tri_cpu_copy(dst, src, bytes); }
static void cpu_zero(tri_ctx *c, void *p, size_t bytes) { tri_cpu_zero(p, bytes); }
static void cpu_sync(tri_ctx *c) { tri_cpu_sync(); }

static void cpu_matmul_fwd(tri_ctx *c, void *out, const void *inp, const void *weight, const void *bias, size_t N,
                           size_t C, size_t OC) {
    tri_cpu_matmul_fwd(out, inp, weight, bias, N, C, OC);
}

static void cpu_matmul_bwd(tri_ctx *c, void *dinp, float *dweight, float *dbias, const void *dout, const void *inp,
                           const void *weight, size_t N, size_t C, size_t OC) {
    tri_cpu_matmul_bwd(dinp, dweight, dbias, dout, inp, weight, N, C, OC);
}

static void cpu_layernorm_fwd(tri_ctx *c, void *out, float *mean, float *rstd, const void *inp, const void *w,
                              const void *b, size_t N, size_t C) {
    tri_cpu_layernorm_fwd(out, mean, rstd, inp, w, b, N, C);
}

static void cpu_layernorm_bwd(tri_ctx *c, void *dinp, float *dw, float *db, const void *dout, const void *inp,
                              const void *w, const float *mean, const float *rstd, size_t N, size_t C) {
    tri_cpu_layernorm_bwd(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}

/* The CPU keeps the softmax probabilities (B, NH, T, T) as attention's state:
 * on a CPU recomputing them costs a GEMM and an exp pass per row block, while
 * keeping them costs only memory (see docs/performance.md). */
static size_t cpu_attention_saved_floats(size_t B, size_t T, int NH, int HS) { return B * (size_t)NH * T * T; }

static void cpu_attention_fwd(tri_ctx *c, void *out, float *state, const void *qkv, size_t B, size_t T, int NH,
                              int HS) {
    tri_cpu_attention_fwd(out, state, qkv, B, T, NH, HS);
}

static void cpu_attention_bwd(tri_ctx *c, void *dqkv, float *scratch, const void *dout, const void *qkv,
                              const void *out, const float *state, size_t B, size_t T, int NH, int HS) {
    tri_cpu_attention_bwd(dqkv, scratch, dout, qkv, state, B, T, NH, HS);
}

static void cpu_gelu_fwd(tri_ctx *c, void *out, const void *inp, size_t N) { tri_cpu_gelu_fwd(out, inp, N); }

static void cpu_gelu_bwd(tri_ctx *c, void *dinp, const void *inp, const void *dout, size_t N) {
    tri_cpu_gelu_bwd(dinp, inp, dout, N);
}

static void cpu_residual_fwd(tri_ctx *c, void *out, const void *res, const void *x, const void *bias, size_t N,
                             size_t C) {
    tri_cpu_residual_fwd(out, res, x, bias, N, C);
}

static void cpu_bias_bwd(tri_ctx *c, float *dbias, const void *dout, size_t N, size_t C) {
    tri_cpu_bias_bwd(dbias, dout, N, C);
}

static void cpu_embedding_fwd(tri_ctx *c, void *out, const int32_t *ids, const void *wte, const void *wpe, size_t B,
                              size_t T, size_t C, size_t vstart, size_t Vl) {
    tri_cpu_embedding_fwd(out, ids, wte, wpe, B, T, C, vstart, Vl);
}

static void cpu_embedding_bwd(tri_ctx *c, float *dwte, float *dwpe, const void *dout, const int32_t *ids, size_t B,
                              size_t T, size_t C, size_t vstart, size_t Vl) {
    tri_cpu_embedding_bwd(dwte, dwpe, dout, ids, B, T, C, vstart, Vl);
}

static void cpu_crossentropy_stats(tri_ctx *c, float *stats, const void *logits, const int32_t *targets, size_t N,
                                   size_t Vl, size_t vstart, size_t V) {
    tri_cpu_crossentropy_stats(stats, logits, targets, N, Vl, vstart, V);
}

static void cpu_crossentropy_combine(tri_ctx *c, float *stats, const float *gather, size_t N, int R) {
    tri_cpu_crossentropy_combine(stats, gather, N, R);
}

static void cpu_crossentropy_bwd(tri_ctx *c, float *losses, void *dlogits, const void *logits, const float *stats,
                                 const int32_t *targets, float dscale, size_t N, size_t Vl, size_t vstart, size_t V) {
    tri_cpu_crossentropy_bwd(losses, dlogits, logits, stats, targets, dscale, N, Vl, vstart, V);
}

static void cpu_adamw(tri_ctx *c, float *param, float *m, float *v, const float *grad, size_t n, float lr, float beta1,
                      float beta2, float eps, float wd, int t) {
    tri_cpu_adamw(param, m, v, grad, n, lr, beta1, beta2, eps, wd, t);
}

static double cpu_sum(tri_ctx *c, const float *x, size_t n) { return tri_cpu_sum(x, n); }
static double cpu_sumsq(tri_ctx *c, const float *x, size_t n) { return tri_cpu_sumsq(x, n); }
static void cpu_scale(tri_ctx *c, float *x, float s, size_t n) { tri_cpu_scale(x, s, n); }
static void cpu_add(tri_ctx *c, float *y, const float *x, size_t n) { tri_cpu_add(y, x, n); }

static const tri_ops CPU_OPS = {
    .name = "cpu",
    .init = cpu_init,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy = cpu_copy,
    .to_device = cpu_copy,
    .to_host = cpu_copy,
    .zero = cpu_zero,
    .sync = cpu_sync,
    .host_window = NULL,
    .matmul_fwd = cpu_matmul_fwd,
    .matmul_bwd = cpu_matmul_bwd,
    .layernorm_fwd = cpu_layernorm_fwd,
    .layernorm_bwd = cpu_layernorm_bwd,
    .attention_fwd = cpu_attention_fwd,
    .attention_bwd = cpu_attention_bwd,
    .attention_saved_floats = cpu_attention_saved_floats,
    .attention_scratch_floats = tri_cpu_attention_scratch_floats,
    .gelu_fwd = cpu_gelu_fwd,
    .gelu_bwd = cpu_gelu_bwd,
    .residual_fwd = cpu_residual_fwd,
    .bias_bwd = cpu_bias_bwd,
    .embedding_fwd = cpu_embedding_fwd,
    .embedding_bwd = cpu_embedding_bwd,
    .crossentropy_stats = cpu_crossentropy_stats,
    .crossentropy_combine = cpu_crossentropy_combine,
    .crossentropy_bwd = cpu_crossentropy_bwd,
    .adamw = cpu_adamw,
    .sum = cpu_sum,
    .sumsq = cpu_sumsq,
    .scale = cpu_scale,
    .add = cpu_add,
};

/* The CPU backend: a static table, valid for the life of the program. */
const tri_ops *tri_ops_cpu(void) { return &CPU_OPS; }
