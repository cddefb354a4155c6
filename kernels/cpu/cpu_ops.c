/* The CPU backend's op table. Each op lives in the file of its family
 * (matmul.c, layernorm.c, rmsnorm.c, attention.c, rope.c, gelu.c, swiglu.c,
 * embedding.c, crossentropy.c, adamw.c, elementwise.c) with plain fp32 signatures; the entries below adapt
 * them to the table's contract (context first, compute-dtype tensors as
 * void *). With fp32 compute dtypes (the default) they pass the pointers on.
 * With bf16 or fp16 ones (tri_ctx_set_precision) they emulate the 16-bit
 * types exactly: every `void *` input is widened to fp32 in the context's
 * scratch (precision.c), the fp32 op runs, and every `void *` output is
 * rounded to nearest even once as it is stored (an accumulating one is
 * widened first, accumulated in fp32, then rounded). The `float *` tensors
 * are fp32 under every precision and are passed on as they are. The
 * backend's state (ctx->backend) is only that scratch. */
#include "kernels/cpu/cpu_internal.h"

#include <omp.h>
#include <xmmintrin.h>

#include "kernels/half.h"

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

static void cpu_shutdown(tri_ctx *c) {
    tri_cpu_state *s = c->backend;
    if (s) {
        tri_cpu_state_release(s);
        free(s);
    }
    c->backend = NULL;
}

static void *cpu_alloc(tri_ctx *c, size_t bytes) { return tri_cpu_alloc(bytes); }
static void cpu_free(tri_ctx *c, void *p, size_t bytes) { tri_cpu_free(p); }
static void cpu_copy(tri_ctx *c, void *dst, const void *src, size_t bytes) { tri_cpu_copy(dst, src, bytes); }
static void cpu_zero(tri_ctx *c, void *p, size_t bytes) { tri_cpu_zero(p, bytes); }
static void cpu_sync(tri_ctx *c) { tri_cpu_sync(); }

static void cpu_cast(tri_ctx *c, void *dst, tri_dtype dst_t, const void *src, tri_dtype src_t, size_t n) {
    tri_cpu_cast(dst, dst_t, src, src_t, n);
}

/* ---- the 16-bit emulation's plumbing ----
 * An op first adds up the scratch it may need (pad() per tensor), takes it in
 * one piece, then hands out 64-byte aligned parts: widened inputs (in_f),
 * fp32 outputs (out_f), widened accumulating outputs (acc_f); store() rounds
 * an output into its 16-bit tensor. An fp32 tensor is used in place. */

static int is16(tri_dtype t) { return t != TRI_F32; }
static int all_f32(const tri_ctx *c) { return !is16(c->act_dtype) && !is16(c->param_dtype); }

static size_t pad(size_t n) { return (n + 15) / 16 * 16; }

static float *take(float **cur, size_t n) {
    float *r = *cur;
    *cur += pad(n);
    return r;
}

static const float *in_f(float **cur, const void *x, tri_dtype t, size_t n) {
    if (x == NULL || !is16(t)) return x;
    float *r = take(cur, n);
    tri_cpu_widen(r, x, t, n);
    return r;
}

static float *out_f(float **cur, void *x, tri_dtype t, size_t n) {
    if (x == NULL || !is16(t)) return x;
    return take(cur, n);
}

static float *acc_f(float **cur, void *x, tri_dtype t, size_t n) {
    if (x == NULL || !is16(t)) return x;
    float *r = take(cur, n);
    tri_cpu_widen(r, x, t, n);
    return r;
}

static void store(void *x, tri_dtype t, const float *f, size_t n) {
    if (x != NULL && is16(t)) tri_cpu_narrow(x, t, f, n);
}

/* ---- ops ---- */

static void cpu_matmul_fwd(tri_ctx *c, void *out, const void *inp, const void *weight, const void *bias, size_t N,
                           size_t C, size_t OC) {
    if (all_f32(c)) {
        tri_cpu_matmul_fwd(out, inp, weight, bias, N, C, OC);
        return;
    }
    const tri_dtype A = c->act_dtype, P = c->param_dtype;
    float *cur = tri_cpu_scratch(c, pad(N * C) + pad(OC * C) + pad(OC) + pad(N * OC));
    const float *xi = in_f(&cur, inp, A, N * C), *w = in_f(&cur, weight, P, OC * C), *b = in_f(&cur, bias, P, OC);
    float *o = out_f(&cur, out, A, N * OC);
    tri_cpu_matmul_fwd(o, xi, w, b, N, C, OC);
    store(out, A, o, N * OC);
}

static void cpu_matmul_bwd(tri_ctx *c, void *dinp, float *dweight, float *dbias, const void *dout, const void *inp,
                           const void *weight, size_t N, size_t C, size_t OC) {
    if (all_f32(c)) {
        tri_cpu_matmul_bwd(dinp, dweight, dbias, dout, inp, weight, N, C, OC);
        return;
    }
    const tri_dtype A = c->act_dtype, P = c->param_dtype;
    float *cur = tri_cpu_scratch(c, pad(N * OC) + 2 * pad(N * C) + pad(OC * C) + pad(N * C));
    const float *d = in_f(&cur, dout, A, N * OC);
    const float *xi = dweight ? in_f(&cur, inp, A, N * C) : NULL; /* only dweight reads inp */
    const float *w = dinp ? in_f(&cur, weight, P, OC * C) : NULL; /* only dinp reads weight */
    float *di = out_f(&cur, dinp, A, N * C);
    tri_cpu_matmul_bwd(di, dweight, dbias, d, xi, w, N, C, OC); /* NULL xi, w: not read */
    store(dinp, A, di, N * C);
}

static void cpu_layernorm_fwd(tri_ctx *c, void *out, float *mean, float *rstd, const void *inp, const void *w,
                              const void *b, size_t N, size_t C) {
    if (all_f32(c)) {
        tri_cpu_layernorm_fwd(out, mean, rstd, inp, w, b, N, C);
        return;
    }
    const tri_dtype A = c->act_dtype, P = c->param_dtype;
    float *cur = tri_cpu_scratch(c, 2 * pad(N * C) + 2 * pad(C));
    const float *xi = in_f(&cur, inp, A, N * C), *wf = in_f(&cur, w, P, C), *bf = in_f(&cur, b, P, C);
    float *o = out_f(&cur, out, A, N * C);
    tri_cpu_layernorm_fwd(o, mean, rstd, xi, wf, bf, N, C);
    store(out, A, o, N * C);
}

static void cpu_layernorm_bwd(tri_ctx *c, void *dinp, float *dw, float *db, const void *dout, const void *inp,
                              const void *w, const float *mean, const float *rstd, size_t N, size_t C) {
    if (all_f32(c)) {
        tri_cpu_layernorm_bwd(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
        return;
    }
    const tri_dtype A = c->act_dtype, P = c->param_dtype;
    float *cur = tri_cpu_scratch(c, 3 * pad(N * C) + pad(C));
    const float *d = in_f(&cur, dout, A, N * C), *xi = in_f(&cur, inp, A, N * C), *wf = in_f(&cur, w, P, C);
    float *di = acc_f(&cur, dinp, A, N * C); /* dinp accumulates: widen, add in fp32, round once */
    tri_cpu_layernorm_bwd(di, dw, db, d, xi, wf, mean, rstd, N, C);
    store(dinp, A, di, N * C);
}

/* The CPU's attention is flash-style (attention.c): its state is one
 * log-sum-exp per (batch, query head, query) row, B * NH * T floats, as on
 * the CUDA backend; the backward recomputes the probabilities from it, qkv
 * and the forward's output. No (T, T) tensor exists. */
static size_t cpu_attention_saved_floats(size_t B, size_t T, int NH, int NKV, int HS) { return B * (size_t)NH * T; }

static void cpu_attention_fwd(tri_ctx *c, void *out, float *state, const void *qkv, size_t B, size_t T, int NH, int NKV,
                              int HS) {
    const tri_dtype A = c->act_dtype;
    if (!is16(A)) {
        tri_cpu_attention_fwd(out, state, qkv, B, T, NH, NKV, HS);
        return;
    }
    const size_t n = B * T * (size_t)NH * (size_t)HS, nqkv = B * T * (size_t)(NH + 2 * NKV) * (size_t)HS;
    float *cur = tri_cpu_scratch(c, pad(nqkv) + pad(n));
    const float *q = in_f(&cur, qkv, A, nqkv);
    float *o = out_f(&cur, out, A, n);
    tri_cpu_attention_fwd(o, state, q, B, T, NH, NKV, HS);
    store(out, A, o, n);
}

/* 16-bit: `out` is read as stored (rounded), widened like every other
 * input; the state is the fp32 one the forward saved. */
static void cpu_attention_bwd(tri_ctx *c, void *dqkv, float *scratch, const void *dout, const void *qkv,
                              const void *out, const float *state, size_t B, size_t T, int NH, int NKV, int HS) {
    const tri_dtype A = c->act_dtype;
    if (!is16(A)) {
        tri_cpu_attention_bwd(dqkv, scratch, dout, qkv, out, state, B, T, NH, NKV, HS);
        return;
    }
    const size_t n = B * T * (size_t)NH * (size_t)HS, nqkv = B * T * (size_t)(NH + 2 * NKV) * (size_t)HS;
    float *cur = tri_cpu_scratch(c, 2 * pad(n) + 2 * pad(nqkv));
    const float *d = in_f(&cur, dout, A, n), *q = in_f(&cur, qkv, A, nqkv), *o = in_f(&cur, out, A, n);
    float *dq = out_f(&cur, dqkv, A, nqkv);
    tri_cpu_attention_bwd(dq, scratch, d, q, o, state, B, T, NH, NKV, HS);
    store(dqkv, A, dq, nqkv);
}

/* Ring attention's blocks (attention_ring.c): 16-bit qkv, kv, dout and out
 * widened as every input; o, lse, dqkv and dkv are fp32 already. */
static void cpu_attention_block_fwd(tri_ctx *c, float *o, float *lse, const void *qkv, const void *kv, size_t B,
                                    size_t T, size_t Tk, size_t q0, int causal, int merge, int NH, int NKV, int HS) {
    const tri_dtype A = c->act_dtype;
    const size_t nqkv = B * T * (size_t)(NH + 2 * NKV) * (size_t)HS, nkv = B * Tk * (size_t)(2 * NKV) * (size_t)HS;
    float *cur = is16(A) ? tri_cpu_scratch(c, pad(nqkv) + pad(nkv)) : NULL;
    const float *q = in_f(&cur, qkv, A, nqkv), *k = in_f(&cur, kv, A, nkv);
    tri_cpu_attention_block_fwd(o, lse, q, k, B, T, Tk, q0, causal, merge, NH, NKV, HS);
}

static void cpu_attention_block_bwd(tri_ctx *c, float *dqkv, float *dkv, float *scratch, const void *dout,
                                    const void *qkv, const void *kv, const void *out, const float *lse, size_t B,
                                    size_t T, size_t Tk, size_t q0, int causal, int NH, int NKV, int HS) {
    const tri_dtype A = c->act_dtype;
    const size_t n = B * T * (size_t)NH * (size_t)HS, nqkv = B * T * (size_t)(NH + 2 * NKV) * (size_t)HS;
    const size_t nkv = B * Tk * (size_t)(2 * NKV) * (size_t)HS;
    float *cur = is16(A) ? tri_cpu_scratch(c, 2 * pad(n) + pad(nqkv) + pad(nkv)) : NULL;
    const float *d = in_f(&cur, dout, A, n), *q = in_f(&cur, qkv, A, nqkv), *k = in_f(&cur, kv, A, nkv);
    const float *o = in_f(&cur, out, A, n);
    tri_cpu_attention_block_bwd(dqkv, dkv, scratch, d, q, k, o, lse, B, T, Tk, q0, causal, NH, NKV, HS);
}

static void cpu_attention_kv_copy(tri_ctx *c, void *dst, const void *src, tri_dtype t, size_t B, size_t T, int NH,
                                  int NKV, int HS, int to_qkv) {
    tri_cpu_attention_kv_copy(dst, src, tri_dtype_size(t), B, T, NH, NKV, HS, to_qkv);
}

static void cpu_rmsnorm_fwd(tri_ctx *c, void *out, float *rstd, const void *inp, const void *w, size_t N, size_t C,
                            float eps) {
    if (all_f32(c)) {
        tri_cpu_rmsnorm_fwd(out, rstd, inp, w, N, C, eps);
        return;
    }
    const tri_dtype A = c->act_dtype, P = c->param_dtype;
    float *cur = tri_cpu_scratch(c, 2 * pad(N * C) + pad(C));
    const float *xi = in_f(&cur, inp, A, N * C), *wf = in_f(&cur, w, P, C);
    float *o = out_f(&cur, out, A, N * C);
    tri_cpu_rmsnorm_fwd(o, rstd, xi, wf, N, C, eps);
    store(out, A, o, N * C);
}

static void cpu_rmsnorm_bwd(tri_ctx *c, void *dinp, float *dw, const void *dout, const void *inp, const void *w,
                            const float *rstd, size_t N, size_t C) {
    if (all_f32(c)) {
        tri_cpu_rmsnorm_bwd(dinp, dw, dout, inp, w, rstd, N, C);
        return;
    }
    const tri_dtype A = c->act_dtype, P = c->param_dtype;
    float *cur = tri_cpu_scratch(c, 3 * pad(N * C) + pad(C));
    const float *d = in_f(&cur, dout, A, N * C), *xi = in_f(&cur, inp, A, N * C), *wf = in_f(&cur, w, P, C);
    float *di = acc_f(&cur, dinp, A, N * C); /* dinp accumulates: widen, add in fp32, round once */
    tri_cpu_rmsnorm_bwd(di, dw, d, xi, wf, rstd, N, C);
    store(dinp, A, di, N * C);
}

/* RoPE works in place: 16-bit qkv is widened, rotated in fp32 and rounded
 * once as it is stored back (the v heads too, which round to themselves). */
static void cpu_rope(tri_ctx *c, void *x, const float *inv_freq, size_t B, size_t T, int NH, int NKV, int HS,
                     size_t pos0, int fwd) {
    const tri_dtype A = c->act_dtype;
    void (*op)(float *, const float *, size_t, size_t, int, int, int, size_t) =
        fwd ? tri_cpu_rope_fwd : tri_cpu_rope_bwd;
    if (!is16(A)) {
        op(x, inv_freq, B, T, NH, NKV, HS, pos0);
        return;
    }
    const size_t n = B * T * (size_t)(NH + 2 * NKV) * (size_t)HS;
    float *cur = tri_cpu_scratch(c, pad(n));
    float *f = acc_f(&cur, x, A, n);
    op(f, inv_freq, B, T, NH, NKV, HS, pos0);
    store(x, A, f, n);
}

static void cpu_rope_fwd(tri_ctx *c, void *qkv, const float *inv_freq, size_t B, size_t T, int NH, int NKV, int HS,
                         size_t pos0) {
    cpu_rope(c, qkv, inv_freq, B, T, NH, NKV, HS, pos0, 1);
}

static void cpu_rope_bwd(tri_ctx *c, void *dqkv, const float *inv_freq, size_t B, size_t T, int NH, int NKV, int HS,
                         size_t pos0) {
    cpu_rope(c, dqkv, inv_freq, B, T, NH, NKV, HS, pos0, 0);
}

static void cpu_swiglu_fwd(tri_ctx *c, void *out, const void *inp, size_t N, size_t F) {
    const tri_dtype A = c->act_dtype;
    if (!is16(A)) {
        tri_cpu_swiglu_fwd(out, inp, N, F);
        return;
    }
    float *cur = tri_cpu_scratch(c, pad(2 * N * F) + pad(N * F));
    const float *xi = in_f(&cur, inp, A, 2 * N * F);
    float *o = out_f(&cur, out, A, N * F);
    tri_cpu_swiglu_fwd(o, xi, N, F);
    store(out, A, o, N * F);
}

static void cpu_swiglu_bwd(tri_ctx *c, void *dinp, const void *inp, const void *dout, size_t N, size_t F) {
    const tri_dtype A = c->act_dtype;
    if (!is16(A)) {
        tri_cpu_swiglu_bwd(dinp, inp, dout, N, F);
        return;
    }
    float *cur = tri_cpu_scratch(c, 2 * pad(2 * N * F) + pad(N * F));
    const float *xi = in_f(&cur, inp, A, 2 * N * F), *d = in_f(&cur, dout, A, N * F);
    float *di = out_f(&cur, dinp, A, 2 * N * F);
    tri_cpu_swiglu_bwd(di, xi, d, N, F);
    store(dinp, A, di, 2 * N * F);
}

static void cpu_gelu_fwd(tri_ctx *c, void *out, const void *inp, size_t N) {
    const tri_dtype A = c->act_dtype;
    if (!is16(A)) {
        tri_cpu_gelu_fwd(out, inp, N);
        return;
    }
    float *cur = tri_cpu_scratch(c, 2 * pad(N));
    const float *xi = in_f(&cur, inp, A, N);
    float *o = out_f(&cur, out, A, N);
    tri_cpu_gelu_fwd(o, xi, N);
    store(out, A, o, N);
}

static void cpu_gelu_bwd(tri_ctx *c, void *dinp, const void *inp, const void *dout, size_t N) {
    const tri_dtype A = c->act_dtype;
    if (!is16(A)) {
        tri_cpu_gelu_bwd(dinp, inp, dout, N);
        return;
    }
    float *cur = tri_cpu_scratch(c, 2 * pad(N));
    const float *xi = in_f(&cur, inp, A, N);
    float *d = (float *)in_f(&cur, dout, A, N); /* our own copy: the fp32 op may write dinp over it */
    tri_cpu_gelu_bwd(d, xi, d, N);
    store(dinp, A, d, N);
}

static void cpu_residual_fwd(tri_ctx *c, void *out, const void *res, const void *x, const void *bias, size_t N,
                             size_t C) {
    if (all_f32(c)) {
        tri_cpu_residual_fwd(out, res, x, bias, N, C);
        return;
    }
    const tri_dtype A = c->act_dtype, P = c->param_dtype;
    float *cur = tri_cpu_scratch(c, 3 * pad(N * C) + pad(C));
    const float *r = in_f(&cur, res, A, N * C), *xi = in_f(&cur, x, A, N * C), *b = in_f(&cur, bias, P, C);
    float *o = out_f(&cur, out, A, N * C); /* out may alias res or x: both are read already */
    tri_cpu_residual_fwd(o, r, xi, b, N, C);
    store(out, A, o, N * C);
}

static void cpu_bias_bwd(tri_ctx *c, float *dbias, const void *dout, size_t N, size_t C) {
    const tri_dtype A = c->act_dtype;
    if (!is16(A)) {
        tri_cpu_bias_bwd(dbias, dout, N, C);
        return;
    }
    float *cur = tri_cpu_scratch(c, pad(N * C));
    tri_cpu_bias_bwd(dbias, in_f(&cur, dout, A, N * C), N, C);
}

static float load_as_f32(const void *p, tri_dtype t, size_t i) {
    if (t == TRI_BF16) return tri_bf16_to_f32(((const uint16_t *)p)[i]);
    if (t == TRI_F16) return tri_f16_to_f32(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}

/* 16-bit: the rows are gathered and added in fp32 one element at a time, as
 * tri_cpu_embedding_fwd does, without widening all of wte (Vl rows) per call. */
static void cpu_embedding_fwd(tri_ctx *c, void *out, const int32_t *ids, const void *wte, const void *wpe, size_t B,
                              size_t T, size_t C, size_t vstart, size_t Vl) {
    if (all_f32(c)) {
        tri_cpu_embedding_fwd(out, ids, wte, wpe, B, T, C, vstart, Vl);
        return;
    }
    const tri_dtype A = c->act_dtype, P = c->param_dtype;
    const size_t rows = B * T;
    float *cur = tri_cpu_scratch(c, pad(rows * C));
    float *o = out_f(&cur, out, A, rows * C);
#pragma omp parallel for schedule(static) if (rows * C >= TRI_CPU_PAR_MIN)
    for (size_t r = 0; r < rows; r++) {
        const int32_t id = ids[r];
        const int in_range = id >= 0 && (size_t)id >= vstart && (size_t)id - vstart < Vl;
        const size_t te = in_range ? ((size_t)id - vstart) * C : 0, pe = (r % T) * C;
        float *orow = o + r * C;
        for (size_t k = 0; k < C; k++) {
            float v;
            if (in_range && wpe != NULL)
                v = load_as_f32(wte, P, te + k) + load_as_f32(wpe, P, pe + k);
            else if (in_range)
                v = load_as_f32(wte, P, te + k);
            else if (wpe != NULL)
                v = load_as_f32(wpe, P, pe + k);
            else
                v = 0.0f;
            orow[k] = v;
        }
    }
    store(out, A, o, rows * C);
}

static void cpu_embedding_bwd(tri_ctx *c, float *dwte, float *dwpe, const void *dout, const int32_t *ids, size_t B,
                              size_t T, size_t C, size_t vstart, size_t Vl) {
    const tri_dtype A = c->act_dtype;
    if (!is16(A)) {
        tri_cpu_embedding_bwd(dwte, dwpe, dout, ids, B, T, C, vstart, Vl);
        return;
    }
    float *cur = tri_cpu_scratch(c, pad(B * T * C));
    tri_cpu_embedding_bwd(dwte, dwpe, in_f(&cur, dout, A, B * T * C), ids, B, T, C, vstart, Vl);
}

/* Cross-entropy works row by row, so 16-bit logits are widened a block of
 * rows at a time (about CE_BLOCK_FLOATS): the (N, Vl) logits are the largest
 * activation, and the scratch stays small. */
#define CE_BLOCK_FLOATS ((size_t)1 << 22)

static size_t ce_rows(size_t N, size_t Vl) {
    size_t r = Vl > 0 ? CE_BLOCK_FLOATS / Vl : N;
    return r < 1 ? 1 : r > N ? N : r;
}

static void cpu_crossentropy_stats(tri_ctx *c, float *stats, const void *logits, const int32_t *targets, size_t N,
                                   size_t Vl, size_t vstart, size_t V) {
    const tri_dtype A = c->act_dtype;
    if (!is16(A)) {
        tri_cpu_crossentropy_stats(stats, logits, targets, N, Vl, vstart, V);
        return;
    }
    const size_t rb = ce_rows(N, Vl);
    float *buf = tri_cpu_scratch(c, pad(rb * Vl));
    for (size_t n0 = 0; n0 < N; n0 += rb) {
        const size_t nr = N - n0 < rb ? N - n0 : rb;
        tri_cpu_widen(buf, (const char *)logits + n0 * Vl * tri_dtype_size(A), A, nr * Vl);
        tri_cpu_crossentropy_stats(stats + 3 * n0, buf, targets + n0, nr, Vl, vstart, V);
    }
}

static void cpu_crossentropy_combine(tri_ctx *c, float *stats, const float *gather, size_t N, int R) {
    tri_cpu_crossentropy_combine(stats, gather, N, R);
}

static void cpu_crossentropy_bwd(tri_ctx *c, float *losses, void *dlogits, const void *logits, const float *stats,
                                 const int32_t *targets, float dscale, size_t N, size_t Vl, size_t vstart, size_t V) {
    const tri_dtype A = c->act_dtype;
    if (!is16(A)) {
        tri_cpu_crossentropy_bwd(losses, dlogits, logits, stats, targets, dscale, N, Vl, vstart, V);
        return;
    }
    const size_t rb = ce_rows(N, Vl);
    float *buf = tri_cpu_scratch(c, pad(rb * Vl));
    for (size_t n0 = 0; n0 < N; n0 += rb) {
        const size_t nr = N - n0 < rb ? N - n0 : rb;
        tri_cpu_widen(buf, (const char *)logits + n0 * Vl * tri_dtype_size(A), A, nr * Vl);
        /* the fp32 op may write the gradient over its logits: over our copy */
        tri_cpu_crossentropy_bwd(losses ? losses + n0 : NULL, dlogits ? buf : NULL, buf, stats + 3 * n0, targets + n0,
                                 dscale, nr, Vl, vstart, V);
        if (dlogits) tri_cpu_narrow((char *)dlogits + n0 * Vl * tri_dtype_size(A), A, buf, nr * Vl);
    }
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
    .compute_dtypes = (1u << TRI_F32) | (1u << TRI_BF16) | (1u << TRI_F16),
    .ctx_size = sizeof(tri_ctx),
    .init = cpu_init,
    .shutdown = cpu_shutdown,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy = cpu_copy,
    .to_device = cpu_copy,
    .to_host = cpu_copy,
    .zero = cpu_zero,
    .sync = cpu_sync,
    .host_window = NULL,
    .cast = cpu_cast,
    .matmul_fwd = cpu_matmul_fwd,
    .matmul_bwd = cpu_matmul_bwd,
    .layernorm_fwd = cpu_layernorm_fwd,
    .layernorm_bwd = cpu_layernorm_bwd,
    .attention_fwd = cpu_attention_fwd,
    .attention_bwd = cpu_attention_bwd,
    .attention_saved_floats = cpu_attention_saved_floats,
    .attention_scratch_floats = tri_cpu_attention_scratch_floats,
    .attention_block_fwd = cpu_attention_block_fwd,
    .attention_block_bwd = cpu_attention_block_bwd,
    .attention_kv_copy = cpu_attention_kv_copy,
    .rmsnorm_fwd = cpu_rmsnorm_fwd,
    .rmsnorm_bwd = cpu_rmsnorm_bwd,
    .rope_fwd = cpu_rope_fwd,
    .rope_bwd = cpu_rope_bwd,
    .swiglu_fwd = cpu_swiglu_fwd,
    .swiglu_bwd = cpu_swiglu_bwd,
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
