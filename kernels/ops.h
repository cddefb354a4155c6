/* The op interface: every numerical kernel the model uses, as a table of
 * function pointers chosen at run time (`--device cpu|cuda`).
 *
 * Conventions (all ops):
 *   - the context first (kernels/ctx.h: stream, library handles, dtypes);
 *     then outputs, inputs, sizes;
 *   - raw pointers to backend memory, explicit sizes, no tensor library;
 *   - tensors of the compute dtypes (activations: ctx->act_dtype, weights:
 *     ctx->param_dtype) are `void *`; what is fp32 whatever the compute dtype
 *     is `float *`: LayerNorm and RMSNorm statistics, RoPE's frequencies,
 *     cross-entropy statistics and losses, gradients of weights (fp32
 *     accumulation) and the optimizer's tensors. The CPU backend computes
 *     in fp32 everywhere; with 16-bit compute dtypes (tri_ctx_set_precision)
 *     it widens every `void *` input to fp32 (exact), runs the fp32 op, and
 *     rounds every `void *` output once, to nearest even, as it is stored;
 *     a `void *` output that accumulates (+=) is widened, accumulated in
 *     fp32 and rounded once.
 *     So each 16-bit op gives the bits of the fp32 op run on the rounded
 *     inputs with its `void *` outputs rounded (docs/precision.md);
 *   - sizes are size_t (int only for small counts such as heads);
 *   - row-major; a linear layer's weight is (OC, C): out = inp @ W^T + b;
 *   - a backward op's comment says which outputs accumulate (+=) and which
 *     overwrite (=). Weight and bias gradients always accumulate, so gradient
 *     accumulation over micro-batches needs no extra pass;
 *   - pointers marked "may be NULL" are optional; all others must be valid.
 * The CPU backend (kernels/cpu/) is the reference: fp32, exact, OpenMP over rows;
 * bf16 and fp16 emulated exactly on top of it.
 */
#ifndef TRI_OPS_H
#define TRI_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/dtype.h"

/* The context every op runs in (kernels/ctx.h, which includes this header:
 * the context sits above its op table, which needs only its name). */
typedef struct tri_ctx tri_ctx;

/* One span of a multi-tensor AdamW step (adamw_multi): backend pointers. */
typedef struct tri_adamw_span {
    float *param, *m, *v;
    const float *grad;
    size_t n;
    float wd;
} tri_adamw_span;

typedef struct tri_ops {
    const char *name; /* "cpu", "cpu-guard", "cuda" */
    /* The compute dtypes (ctx->act_dtype, ctx->param_dtype) this backend's
     * ops accept, as bits 1u << dtype. 0 stands for fp32 only. */
    unsigned compute_dtypes;
    /* sizeof(tri_ctx) where this table was compiled: tri_ctx_init refuses a
     * table built against another context (a CUDA module of another build). */
    size_t ctx_size;

    /* Prepares the calling process for this backend and fills the backend's
     * part of c (handles, dtypes); called once by tri_ctx_init. threads > 0
     * sets the worker thread count (0 keeps what the environment says). On the
     * CPU it also turns on flush-to-zero and denormals-are-zero on every
     * OpenMP thread: softmax tails that fall into the denormal range would
     * otherwise slow sgemm several-fold. Returns 0 or -1 (printed). */
    int (*init)(tri_ctx *c, int threads);
    void (*shutdown)(tri_ctx *c); /* may be NULL */

    /* ---- memory ---- */
    void *(*alloc)(tri_ctx *c, size_t bytes);        /* zero-filled, 64-byte aligned; NULL on failure */
    void (*free)(tri_ctx *c, void *p, size_t bytes); /* NULL-safe */
    void (*copy)(tri_ctx *c, void *dst, const void *src, size_t bytes); /* backend to backend */
    void (*to_device)(tri_ctx *c, void *dst, const void *host_src, size_t bytes);
    void (*to_host)(tri_ctx *c, void *host_dst, const void *src, size_t bytes);
    void (*zero)(tri_ctx *c, void *p, size_t bytes);
    void (*sync)(tri_ctx *c);
    /* opens (1) / closes (0) backend memory to in-place host access by a
     * transport; NULL where that is always allowed (the plain CPU backend) */
    void (*host_window)(tri_ctx *c, int open);
    /* 1 when [p, p + bytes) lies inside one allocation of this backend, 0
     * when it does not (host memory, or straddling); NULL where the backend
     * cannot tell (only "cpu-guard" can: the check of device-only groups,
     * parallel/comm.h) */
    int (*owns)(tri_ctx *c, const void *p, size_t bytes);
    /* Host memory beside the backend's and copies beside the compute, for
     * the offloaded optimizer (kernels/ctx.h, tri_ctx_host_alloc and
     * tri_ctx_copy_*). All five NULL on a backend whose memory is host
     * memory (the CPU backends).
     * host_alloc: page-locked host memory, zero-filled; NULL on failure.
     * host_free: NULL-safe.
     * copy_start: a copy between backend memory and host_alloc'd memory
     *   (to_host: src is the backend's) on the backend's copy stream, after
     *   every op queued so far on the compute stream; slot (>= 0) names it.
     * copy_wait: the host waits for the copy named slot.
     * copy_join: ops queued after it wait for every copy started so far. */
    void *(*host_alloc)(tri_ctx *c, size_t bytes);
    void (*host_free)(tri_ctx *c, void *p, size_t bytes);
    void (*copy_start)(tri_ctx *c, int slot, void *dst, const void *src, size_t bytes, int to_host);
    void (*copy_wait)(tri_ctx *c, int slot);
    void (*copy_join)(tri_ctx *c);

    /* dst (n) of dst_t = src (n) of src_t, each of F32, BF16 or F16:
     * exact when widening or keeping the type, round to nearest even when
     * narrowing (kernels/half.h). dst and src must not overlap unless they are
     * the same pointer with the same dtype. For the optimizer's fp32 master
     * weights -> 16-bit parameters. Any context dtypes. */
    void (*cast)(tri_ctx *c, void *dst, tri_dtype dst_t, const void *src, tri_dtype src_t, size_t n);

    /* ---- linear layer ----
     * out (N, OC) = inp (N, C) @ weight (OC, C)^T + bias (OC)     [overwrite]
     * bias may be NULL. */
    void (*matmul_fwd)(tri_ctx *c, void *out, const void *inp, const void *weight, const void *bias, size_t N, size_t C,
                       size_t OC);
    /* dinp (N, C)     = dout @ weight               [overwrite; dinp may be NULL]
     * dweight (OC, C) += dout^T @ inp               [accumulate; may be NULL]
     * dbias (OC)      += column sums of dout        [accumulate; may be NULL] */
    void (*matmul_bwd)(tri_ctx *c, void *dinp, float *dweight, float *dbias, const void *dout, const void *inp,
                       const void *weight, size_t N, size_t C, size_t OC);

    /* ---- a linear layer and the GELU around it, fused (the MLP; optional) ----
     * Each may be NULL in a table: the model then composes the plain ops, as
     * said under each (the CPU backends leave both NULL, so their numbers are
     * those of the plain ops). A GPU backend computes each as one GEMM with
     * its epilogue (docs/cuda.md), where it can.
     *
     * matmul_gelu_fwd, the linear before the GELU (fc):
     *   pre (N, OC) = inp (N, C) @ weight (OC, C)^T + bias (OC)   [overwrite; bias may be NULL]
     *   out (N, OC) = gelu(pre)                                    [overwrite; out != pre]
     * pre is what gelu_bwd needs later. Composed: matmul_fwd into pre, then
     * gelu_fwd(out, pre). With a 16-bit dtype, out may be the GELU of the
     * fp32 sum (the composition's is that of pre as stored, rounded): the
     * two differ by gelu'(pre) times the rounding of pre. */
    void (*matmul_gelu_fwd)(tri_ctx *c, void *out, void *pre, const void *inp, const void *weight, const void *bias,
                            size_t N, size_t C, size_t OC);
    /* matmul_bwd_dgelu, the backward of the linear after the GELU (fc2,
     * "fcproj", whose input inp is gelu(pre)), continued through the GELU:
     *   dpre (N, C)     = gelu'(pre) * (dout (N, OC) @ weight (OC, C))   [overwrite]
     *   dweight (OC, C) += dout^T @ inp                              [accumulate; may be NULL]
     *   dbias_pre (C)   += column sums of dpre                       [accumulate; may be NULL]
     * dbias_pre is the bias gradient of the linear that made pre (fc): the
     * caller then leaves it out of that linear's matmul_bwd. pre (N, C) as
     * matmul_gelu_fwd (or matmul_fwd) left it. Composed: matmul_bwd(dpre,
     * dweight, NULL, ...), gelu_bwd(dpre, pre, dpre), and the bias gradient
     * through fc's matmul_bwd. With a 16-bit dtype, dbias_pre may sum the
     * fp32 values of dpre before they are rounded. */
    void (*matmul_bwd_dgelu)(tri_ctx *c, void *dpre, float *dweight, float *dbias_pre, const void *dout,
                             const void *inp, const void *weight, const void *pre, size_t N, size_t C, size_t OC);

    /* ---- layernorm over the last dim, eps = 1e-5 ----
     * out (N, C) = (inp - mean) * rstd * w + b; mean, rstd (N) saved for backward. */
    void (*layernorm_fwd)(tri_ctx *c, void *out, float *mean, float *rstd, const void *inp, const void *w,
                          const void *b, size_t N, size_t C);
    /* dinp += ..., dw += ..., db += ...                          [all accumulate] */
    void (*layernorm_bwd)(tri_ctx *c, void *dinp, float *dw, float *db, const void *dout, const void *inp,
                          const void *w, const float *mean, const float *rstd, size_t N, size_t C);

    /* ---- causal self-attention, multi-head or grouped-query ----
     * qkv (B, T, NH + 2 NKV, HS): per position all NH query heads, then the
     * NKV key heads, then the NKV value heads (NKV = NH: (B, T, 3, NH, HS)).
     * NH % NKV == 0; query head h reads key/value head h / (NH / NKV) (NKV =
     * NH is multi-head attention, 1 multi-query); the key and value heads are
     * read in place, never copied per query head.
     * out (B, T, NH, HS)                                         [overwrite]
     * state: what the backend saves for backward, attention_saved_floats(B, T,
     * NH, NKV, HS) fp32 values [overwrite]: the backend's business (both
     * backends are flash-style and keep one log-sum-exp per (batch, query
     * head, query) row, B * NH * T floats; the backward recomputes the
     * probabilities). Scale 1/sqrt(HS). */
    void (*attention_fwd)(tri_ctx *c, void *out, float *state, const void *qkv, size_t B, size_t T, int NH, int NKV,
                          int HS);
    /* dqkv (B, T, NH + 2 NKV, HS)                                [overwrite]
     * The gradient of a key/value head sums over the NH / NKV query heads of
     * its group, in a fixed order (no float atomics: deterministic).
     * out and state as the forward left them for this qkv;
     * scratch: at least attention_scratch_floats(B, T, NH, NKV, HS) floats. */
    void (*attention_bwd)(tri_ctx *c, void *dqkv, float *scratch, const void *dout, const void *qkv, const void *out,
                          const float *state, size_t B, size_t T, int NH, int NKV, int HS);
    size_t (*attention_saved_floats)(size_t B, size_t T, int NH, int NKV, int HS);
    size_t (*attention_scratch_floats)(size_t B, size_t T, int NH, int NKV, int HS);

    /* ---- ring attention, one block at a time (context parallelism) ----
     * All three may be NULL in a table: the model then refuses
     * parallel.cp > 1 on that backend (model/cp.c).
     * The queries are rows [q0, T) of each sequence of qkv (B, T, NH + 2 NKV,
     * HS) as attention_fwd reads it; the keys and values one block kv (B, Tk,
     * 2 NKV, HS): per position the NKV key heads, then the NKV value heads.
     * causal 1: query row i sees keys j <= i (then q0 = 0 and Tk = T); 0:
     * every key of the block. Scale 1/sqrt(HS); query head h reads key/value
     * head h / (NH / NKV).
     * attention_block_fwd: the block's softmax-normalised output and its
     *   log-sum-exp into o (B, T, NH, HS) and lse (B, NH, T), both fp32, rows
     *   [q0, T): merge 0 [overwrite]; merge 1 [merge]: merged with the
     *   running (o, lse) of the blocks so far (lse' = log(e^lse + e^lse_b),
     *   o' = o e^(lse - lse') + o_b e^(lse_b - lse')).
     * attention_block_bwd: the block's share of the gradients, with P =
     *   exp(S - lse) from the final (merged) lse and D_i = dout_i . out_i of
     *   the final out (B, T, NH, HS) as stored: dqkv (B, T, NH + 2 NKV, HS)
     *   fp32, the q heads of rows [q0, T) [accumulate; the k and v heads
     *   untouched]; dkv (B, Tk, 2 NKV, HS) fp32 [accumulate]. Deterministic.
     *   scratch: attention_scratch_floats(B, T, NH, NKV, HS) floats.
     * attention_kv_copy: the k and v heads of every position between the
     *   two layouts, elements of dtype t: to_qkv 0: kv (B, T, 2 NKV, HS) =
     *   those of qkv [overwrite]; 1: those of qkv = kv [overwrite; the q
     *   heads untouched]. */
    void (*attention_block_fwd)(tri_ctx *c, float *o, float *lse, const void *qkv, const void *kv, size_t B, size_t T,
                                size_t Tk, size_t q0, int causal, int merge, int NH, int NKV, int HS);
    void (*attention_block_bwd)(tri_ctx *c, float *dqkv, float *dkv, float *scratch, const void *dout, const void *qkv,
                                const void *kv, const void *out, const float *lse, size_t B, size_t T, size_t Tk,
                                size_t q0, int causal, int NH, int NKV, int HS);
    void (*attention_kv_copy)(tri_ctx *c, void *dst, const void *src, tri_dtype t, size_t B, size_t T, int NH, int NKV,
                              int HS, int to_qkv);

    /* ---- RMSNorm over the last dim (Llama) ----
     * out (N, C) = inp * rstd * w, rstd (N) = 1 / sqrt(mean(inp^2) + eps),
     * saved for the backward.                       [overwrite out and rstd] */
    void (*rmsnorm_fwd)(tri_ctx *c, void *out, float *rstd, const void *inp, const void *w, size_t N, size_t C,
                        float eps);
    /* dinp += ..., dw += ...                                     [both accumulate]
     * rstd as the forward saved it for this inp. */
    void (*rmsnorm_bwd)(tri_ctx *c, void *dinp, float *dw, const void *dout, const void *inp, const void *w,
                        const float *rstd, size_t N, size_t C);

    /* ---- rotary position embedding on the q and k heads of qkv (Llama) ----
     * qkv (B, T, NH + 2 NKV, HS) as attention reads it; HS even. Within each
     * q and k head, Hugging Face's rotate-half pairing: element i pairs with
     * i + HS/2 (i < HS/2),
     *   (x_i, x_{i+HS/2}) -> (x_i cos a - x_{i+HS/2} sin a, x_{i+HS/2} cos a + x_i sin a),
     *   a = (float)(pos0 + t) * inv_freq[i] for row t (an fp32 product, as
     *   Hugging Face forms it; cos and sin of it range-reduced in full);
     * inv_freq (HS / 2) fp32 backend memory (the model computes it on the
     * host, scaling included); the v heads are untouched.     [in place] */
    void (*rope_fwd)(tri_ctx *c, void *qkv, const float *inv_freq, size_t B, size_t T, int NH, int NKV, int HS,
                     size_t pos0);
    /* The transpose (inverse) rotation (angle -a) on the q and k heads of
     * dqkv: the backward of rope_fwd; the v heads untouched.   [in place] */
    void (*rope_bwd)(tri_ctx *c, void *dqkv, const float *inv_freq, size_t B, size_t T, int NH, int NKV, int HS,
                     size_t pos0);

    /* ---- SwiGLU (Llama's MLP nonlinearity) ----
     * out (N, F) = silu(inp[:, :F]) * inp[:, F:], inp (N, 2F) rows [gate | up],
     * silu(g) = g * sigmoid(g).                         [overwrite; out != inp] */
    void (*swiglu_fwd)(tri_ctx *c, void *out, const void *inp, size_t N, size_t F);
    /* dinp (N, 2F) = [dout * up * silu'(gate) | dout * silu(gate)]
     * from dout (N, F) and inp (N, 2F)                 [overwrite; dinp != inp, dout] */
    void (*swiglu_bwd)(tri_ctx *c, void *dinp, const void *inp, const void *dout, size_t N, size_t F);

    /* ---- GELU, tanh approximation ----
     * out (N) = gelu(inp)                                        [overwrite; out != inp] */
    void (*gelu_fwd)(tri_ctx *c, void *out, const void *inp, size_t N);
    /* dinp (N) = gelu'(inp) * dout                               [overwrite; dinp may alias dout] */
    void (*gelu_bwd)(tri_ctx *c, void *dinp, const void *inp, const void *dout, size_t N);

    /* ---- residual with a bias (the bias of a row-parallel linear, added once,
     * after the tensor-parallel reduction) ----
     * out (N, C) = res (N, C) + x (N, C) + bias (C)               [overwrite; bias may be NULL;
     *                                                              out may alias res or x] */
    void (*residual_fwd)(tri_ctx *c, void *out, const void *res, const void *x, const void *bias, size_t N, size_t C);
    /* dbias (C) += column sums of dout (N, C)                    [accumulate] */
    void (*bias_bwd)(tri_ctx *c, float *dbias, const void *dout, size_t N, size_t C);

    /* ---- vocab-parallel token + position embedding ----
     * This rank owns token rows [vstart, vstart + Vl) of the (padded) vocabulary;
     * wte (Vl, C) holds exactly those rows. ids (B*T) are backend memory.
     * out (B*T, C) = (id in range ? wte[id - vstart] : 0) + (wpe ? wpe[t] : 0)   [overwrite]
     * wpe (T_max, C) may be NULL (only one tensor-parallel rank adds it, so that
     * the sum over ranks holds it once). */
    void (*embedding_fwd)(tri_ctx *c, void *out, const int32_t *ids, const void *wte, const void *wpe, size_t B,
                          size_t T, size_t C, size_t vstart, size_t Vl);
    /* dwte rows of in-range ids += dout rows; dwpe[t] += sum over b of dout  [accumulate]
     * dwpe may be NULL. Deterministic (no float atomics). */
    void (*embedding_bwd)(tri_ctx *c, float *dwte, float *dwpe, const void *dout, const int32_t *ids, size_t B,
                          size_t T, size_t C, size_t vstart, size_t Vl);

    /* ---- vocab-parallel softmax cross-entropy, in three steps ----
     * logits (N, Vl): this rank's slice of the vocabulary, columns [vstart, vstart+Vl).
     * Only columns with global index < V (the real vocabulary) take part: padded
     * columns are treated as -inf. targets (N) are backend memory.
     * 1. crossentropy_stats, one read of the logits, per row n:
     *   stats[3n+0] = local max m, stats[3n+1] = sum_j exp(l_j - m),
     *   stats[3n+2] = the target's logit if this rank owns targets[n], else 0.
     * 2. the caller all-gathers the stats of the R tensor-parallel ranks into
     *   gather (R, N, 3), and crossentropy_combine makes stats the global
     *   (M, S, target) of every row [overwrite]. Not called when R = 1.
     * 3. crossentropy_bwd, per row: losses[n] = log S + M - target   [overwrite; may be NULL]
     *   and, if dlogits is non-NULL, dlogits (N, Vl) = (softmax - onehot) * dscale  [overwrite;
     *   may alias logits]; padded columns get 0. */
    void (*crossentropy_stats)(tri_ctx *c, float *stats, const void *logits, const int32_t *targets, size_t N,
                               size_t Vl, size_t vstart, size_t V);
    void (*crossentropy_combine)(tri_ctx *c, float *stats, const float *gather, size_t N, int R);
    void (*crossentropy_bwd)(tri_ctx *c, float *losses, void *dlogits, const void *logits, const float *stats,
                             const int32_t *targets, float dscale, size_t N, size_t Vl, size_t vstart, size_t V);

    /* ---- AdamW on a contiguous span ----
     * param, m, v (n) updated in place; grad (n) read. t is the 1-based step
     * used for bias correction; wd is the decoupled weight decay for this span
     * (0 for spans that take none): param -= lr * (mhat / (sqrt(vhat) + eps) + wd * param). */
    void (*adamw)(tri_ctx *c, float *param, float *m, float *v, const float *grad, size_t n, float lr, float beta1,
                  float beta2, float eps, float wd, int t);

    /* ---- the same over many spans at once ----
     * adamw on each span in turn (hyper-parameters shared, wd per span);
     * `spans` is host memory (the pointers in it are backend memory) and may
     * be reused once the call returns. A GPU backend updates every span in
     * one launch. May be NULL in a table: call it through
     * tri_ctx_adamw_multi, which then calls adamw per span. */
    void (*adamw_multi)(tri_ctx *c, const tri_adamw_span *spans, int count, float lr, float beta1, float beta2,
                        float eps, int t);

    /* ---- reductions and elementwise helpers on fp32 tensors ----
     * sum and sum of squares, in double, returned to the host.           */
    double (*sum)(tri_ctx *c, const float *x, size_t n);
    double (*sumsq)(tri_ctx *c, const float *x, size_t n);
    /* the sum of sumsq over `count` spans (xs[i], ns[i]; host arrays of
     * backend pointers), in double, returned to the host: one reduction and
     * one wait on a GPU. May be NULL: tri_ctx_sumsq_multi then adds the
     * spans' sumsq in order. */
    double (*sumsq_multi)(tri_ctx *c, const float *const *xs, const size_t *ns, int count);
    /* x (n) *= s                                                          [in place] */
    void (*scale)(tri_ctx *c, float *x, float s, size_t n);
    /* y (n) += x (n)                                                      [accumulate] */
    void (*add)(tri_ctx *c, float *y, const float *x, size_t n);

    /* ---- timing marks, for the per-op profile (kernels/profile.h) ----
     * A backend whose ops only queue work (a GPU) times them with marks on
     * its stream; all four are NULL on a backend whose ops finish before
     * they return (the CPU), which the profile times with the clock.
     * marks_init: a pool of n marks (CUDA events), made once, before the
     *   steps it times; a second call replaces the pool. 0, or -1 (printed).
     * mark: records mark i (< n) on the stream, behind the work queued so
     *   far; no wait.
     * marks_read: waits for mark 2 * pairs - 1, then ms[j] = the time
     *   between marks 2j and 2j + 1 in milliseconds, for j < pairs: one wait
     *   for the lot.
     * marks_free: frees the pool (NULL-safe: none made is fine); the
     *   backend's shutdown frees it too. */
    int (*marks_init)(tri_ctx *c, int n);
    void (*mark)(tri_ctx *c, int i);
    void (*marks_read)(tri_ctx *c, int pairs, float *ms);
    void (*marks_free)(tri_ctx *c);
} tri_ops;

/* The CPU backend (kernels/cpu/). Always available. */
const tri_ops *tri_ops_cpu(void);
/* The CPU backend with guarded memory (kernels/cpu/guard.c): a test and
 * debug mode in which host access to backend memory outside an op faults. */
const tri_ops *tri_ops_cpu_guard(void);

/* Backend by name ("cpu", "cpu-guard" or "cuda"); NULL, with a message on
 * stderr, when the name is unknown or the backend was not built or has no
 * device. The CUDA table comes from the CUDA module (kernels/cuda_module.h).
 * A backend that exists only in the tests (the emulated "cuda-emu") has no
 * name here: a test starts a context on its table (tri_ctx_init_ops). */
const tri_ops *tri_ops_get(const char *name);

#endif
