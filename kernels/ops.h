/* The op interface: every numerical kernel the model uses, as a table of
 * function pointers chosen at run time (`--device cpu|cuda`).
 *
 * Conventions (all ops):
 *   - raw pointers to backend memory, explicit sizes, no tensor library;
 *   - argument order: outputs, inputs, sizes;
 *   - sizes are size_t (int only for small counts such as heads);
 *   - row-major; a linear layer's weight is (OC, C): out = inp @ W^T + b;
 *   - a backward op's comment says which outputs accumulate (+=) and which
 *     overwrite (=). Weight and bias gradients always accumulate, so gradient
 *     accumulation over micro-batches needs no extra pass;
 *   - pointers marked "may be NULL" are optional; all others must be valid.
 * The CPU backend (kernels/cpu/) is the reference: fp32, exact, OpenMP over rows.
 */
#ifndef TRI_OPS_H
#define TRI_OPS_H

#include <stddef.h>
#include <stdint.h>

typedef struct tri_ops {
    const char *name; /* "cpu", "cuda" */

    /* Prepares the calling process for this backend; call once before the
     * first op. threads > 0 sets the worker thread count (0 keeps what the
     * environment says). On the CPU it also turns on flush-to-zero and
     * denormals-are-zero on every OpenMP thread: softmax tails that fall into
     * the denormal range would otherwise slow sgemm several-fold. */
    void (*init)(int threads);

    /* ---- memory (no-ops / memcpy on CPU) ---- */
    void *(*alloc)(size_t bytes);          /* zero-filled, 64-byte aligned; NULL on failure */
    void (*free)(void *p);                 /* NULL-safe */
    void (*copy)(void *dst, const void *src, size_t bytes);
    void (*zero)(void *p, size_t bytes);
    void (*sync)(void);

    /* ---- linear layer ----
     * out (N, OC) = inp (N, C) @ weight (OC, C)^T + bias (OC)     [overwrite]
     * bias may be NULL. */
    void (*matmul_fwd)(float *out, const float *inp, const float *weight,
                       const float *bias, size_t N, size_t C, size_t OC);
    /* dinp (N, C)     = dout @ weight               [overwrite; dinp may be NULL]
     * dweight (OC, C) += dout^T @ inp               [accumulate]
     * dbias (OC)      += column sums of dout        [accumulate; may be NULL] */
    void (*matmul_bwd)(float *dinp, float *dweight, float *dbias,
                       const float *dout, const float *inp, const float *weight,
                       size_t N, size_t C, size_t OC);

    /* ---- layernorm over the last dim, eps = 1e-5 ----
     * out (N, C) = (inp - mean) * rstd * w + b; mean, rstd (N) saved for backward. */
    void (*layernorm_fwd)(float *out, float *mean, float *rstd, const float *inp,
                          const float *w, const float *b, size_t N, size_t C);
    /* dinp += ..., dw += ..., db += ...                          [all accumulate] */
    void (*layernorm_bwd)(float *dinp, float *dw, float *db, const float *dout,
                          const float *inp, const float *w, const float *mean,
                          const float *rstd, size_t N, size_t C);

    /* ---- causal multi-head self-attention ----
     * qkv (B, T, 3, NH, HS): per position all heads' q, then k, then v.
     * out (B, T, NH, HS)                                         [overwrite]
     * att (B, NH, T, T): softmax probabilities saved for backward (the upper
     * triangle, j > i, is written as 0). Scale 1/sqrt(HS). */
    void (*attention_fwd)(float *out, float *att, const float *qkv,
                          size_t B, size_t T, int NH, int HS);
    /* dqkv (B, T, 3, NH, HS)                                     [overwrite]
     * scratch: at least attention_scratch_floats(B, T, NH, HS) floats. */
    void (*attention_bwd)(float *dqkv, float *scratch, const float *dout,
                          const float *qkv, const float *att,
                          size_t B, size_t T, int NH, int HS);
    size_t (*attention_scratch_floats)(size_t B, size_t T, int NH, int HS);

    /* ---- GELU, tanh approximation ----
     * out (N) = gelu(inp)                                        [overwrite; out != inp] */
    void (*gelu_fwd)(float *out, const float *inp, size_t N);
    /* dinp (N) = gelu'(inp) * dout                               [overwrite; dinp may alias dout] */
    void (*gelu_bwd)(float *dinp, const float *inp, const float *dout, size_t N);

    /* ---- residual with a bias (the bias of a row-parallel linear, added once,
     * after the tensor-parallel reduction) ----
     * out (N, C) = res (N, C) + x (N, C) + bias (C)               [overwrite; bias may be NULL;
     *                                                              out may alias res or x] */
    void (*residual_fwd)(float *out, const float *res, const float *x,
                         const float *bias, size_t N, size_t C);
    /* dbias (C) += column sums of dout (N, C)                    [accumulate] */
    void (*bias_bwd)(float *dbias, const float *dout, size_t N, size_t C);

    /* ---- vocab-parallel token + position embedding ----
     * This rank owns token rows [vstart, vstart + Vl) of the (padded) vocabulary;
     * wte (Vl, C) holds exactly those rows.
     * out (B*T, C) = (id in range ? wte[id - vstart] : 0) + (wpe ? wpe[t] : 0)   [overwrite]
     * wpe (T_max, C) may be NULL (only one tensor-parallel rank adds it, so that
     * the sum over ranks holds it once). */
    void (*embedding_fwd)(float *out, const int32_t *ids, const float *wte,
                          const float *wpe, size_t B, size_t T, size_t C,
                          size_t vstart, size_t Vl);
    /* dwte rows of in-range ids += dout rows; dwpe[t] += sum over b of dout  [accumulate]
     * dwpe may be NULL. */
    void (*embedding_bwd)(float *dwte, float *dwpe, const float *dout,
                          const int32_t *ids, size_t B, size_t T, size_t C,
                          size_t vstart, size_t Vl);

    /* ---- vocab-parallel softmax cross-entropy, in two passes ----
     * logits (N, Vl): this rank's slice of the vocabulary, columns [vstart, vstart+Vl).
     * Only columns with global index < V (the real vocabulary) take part: padded
     * columns are treated as -inf.
     * Pass 1, one read of the logits, per row n:
     *   stats[3n+0] = local max m, stats[3n+1] = sum_j exp(l_j - m),
     *   stats[3n+2] = the target's logit if this rank owns targets[n], else 0.
     * The caller combines the stats over tensor-parallel ranks (see
     * tri_ce_combine in model/) so that every rank holds the global (M, S, target).
     * Pass 2, per row: losses[n] = log S + M - target                [overwrite; may be NULL]
     *   and, if dlogits is non-NULL, dlogits (N, Vl) = (softmax - onehot) * dscale  [overwrite;
     *   may alias logits]; padded columns get 0. */
    void (*crossentropy_stats)(float *stats, const float *logits, const int32_t *targets,
                               size_t N, size_t Vl, size_t vstart, size_t V);
    void (*crossentropy_bwd)(float *losses, float *dlogits, const float *logits,
                             const float *stats, const int32_t *targets, float dscale,
                             size_t N, size_t Vl, size_t vstart, size_t V);

    /* ---- AdamW on a contiguous span ----
     * param, m, v (n) updated in place; grad (n) read. t is the 1-based step
     * used for bias correction; wd is the decoupled weight decay for this span
     * (0 for spans that take none): param -= lr * (mhat / (sqrt(vhat) + eps) + wd * param). */
    void (*adamw)(float *param, float *m, float *v, const float *grad, size_t n,
                  float lr, float beta1, float beta2, float eps, float wd, int t);

    /* ---- reductions and elementwise helpers ----
     * sum of squares in double (for the global grad norm).                */
    double (*sumsq)(const float *x, size_t n);
    /* x (n) *= s                                                          [in place] */
    void (*scale)(float *x, float s, size_t n);
    /* y (n) += x (n)                                                      [accumulate] */
    void (*add)(float *y, const float *x, size_t n);
} tri_ops;

/* The CPU backend (kernels/cpu/). Always available. */
const tri_ops *tri_ops_cpu(void);

/* Backend by name ("cpu" or "cuda"); NULL, with a message on stderr, when the
 * name is unknown or the backend was not built or has no device. */
const tri_ops *tri_ops_get(const char *name);

#endif
