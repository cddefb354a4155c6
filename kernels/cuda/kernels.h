/* The host entry points of the CUDA kernel files (the .cu files of kernels/cuda), callable
 * from C. Each launches its kernels on `stream` (a cudaStream_t; NULL is the
 * default stream) and returns without waiting; pointers are device memory.
 * The contracts are those of the op of the same name in kernels/ops.h; what
 * differs (scratch buffers a kernel needs) is said here.
 *
 * Dtypes. An entry point that takes `tri_dtype dt` (after the stream) has its
 * `void *` tensors in that dtype, TRI_F32 or TRI_BF16 (the context's compute
 * dtype; any other aborts, naming the entry point); it computes in fp32,
 * rounds each stored value once (to nearest even), and a `void *` output that
 * accumulates is widened, accumulated in fp32 and rounded once, as the CPU's
 * bf16 emulation does (kernels/ops.h). `float *` tensors are fp32 whatever dt
 * is. Entry points without a dtype are fp32 only.
 *
 * The names are tri_cuda_<op> in the nvcc build and tri_cuemu_<op> when the
 * same sources are compiled as host C++ against the emulation layer of
 * tests/cuemu (TRI_CUEMU defined), so that the two never clash. */
#ifndef TRI_CUDA_KERNELS_H
#define TRI_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/dtype.h"

#ifdef TRI_CUEMU
#define TRI_CU(name) tri_cuemu_##name
#else
#define TRI_CU(name) tri_cuda_##name
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- layernorm.cu (eps = 1e-5) ----
 * out (N, C) = (inp - mean) * rstd * w + b; mean, rstd (N)    [overwrite] */
void TRI_CU(layernorm_fwd)(void *stream, tri_dtype dt, void *out, float *mean, float *rstd, const void *inp,
                           const void *w, const void *b, size_t N, size_t C);
/* dinp (N, C) += ..., dw (C) += ..., db (C) += ...             [all accumulate]
 * scratch: layernorm_bwd_scratch_floats(N, C) floats of device memory (the
 * per-row-group partial sums of dw and db, reduced in a fixed order: the
 * result does not depend on scheduling). */
void TRI_CU(layernorm_bwd)(void *stream, tri_dtype dt, void *dinp, float *dw, float *db, float *scratch,
                           const void *dout, const void *inp, const void *w, const float *mean, const float *rstd,
                           size_t N, size_t C);
size_t TRI_CU(layernorm_bwd_scratch_floats)(size_t N, size_t C);

/* ---- gelu.cu (tanh approximation) ----
 * out (N) = gelu(inp)                                          [overwrite; out != inp]
 * dinp (N) = gelu'(inp) * dout                                 [overwrite; dinp may alias dout] */
void TRI_CU(gelu_fwd)(void *stream, tri_dtype dt, void *out, const void *inp, size_t N);
void TRI_CU(gelu_bwd)(void *stream, tri_dtype dt, void *dinp, const void *inp, const void *dout, size_t N);

/* ---- crossentropy.cu: vocab-parallel softmax cross-entropy ----
 * logits (N, Vl) hold global columns [vstart, vstart + Vl); columns >= V are
 * padding. targets (N) are device memory. logits and dlogits are of dtype dt
 * (fp32 or bf16; fp32 arithmetic), stats, gather and losses fp32.
 * stats (N, 3) = (local max, sum of exp(l - max), owned target logit or 0)   [overwrite]
 * combine: stats (N, 3) = the global (M, S, target) from gather (R, N, 3)     [overwrite]
 * bwd: losses (N) = log S + M - target          [overwrite; may be NULL]
 *      dlogits (N, Vl) = (softmax - onehot) * dscale, 0 in padded columns
 *                                               [overwrite; may be NULL; may alias logits] */
void TRI_CU(crossentropy_stats)(void *stream, tri_dtype dt, float *stats, const void *logits, const int32_t *targets,
                                size_t N, size_t Vl, size_t vstart, size_t V);
void TRI_CU(crossentropy_combine)(void *stream, float *stats, const float *gather, size_t N, int R);
void TRI_CU(crossentropy_bwd)(void *stream, tri_dtype dt, float *losses, void *dlogits, const void *logits,
                              const float *stats, const int32_t *targets, float dscale, size_t N, size_t Vl,
                              size_t vstart, size_t V);

/* ---- embedding.cu: vocab-parallel token + position embedding ----
 * This rank holds token rows [vstart, vstart + Vl) as wte (Vl, C); ids (B*T)
 * are device memory; wpe (>= T, C) may be NULL.
 * fwd: out (B*T, C) = (id in range ? wte[id - vstart] : 0) + (wpe ? wpe[t] : 0)   [overwrite]
 * bwd: dwte rows of in-range ids += dout rows; dwpe[t] += sum over b of dout     [accumulate;
 *      dwpe may be NULL]. Deterministic: every element's additions happen in token
 *      order, as on the CPU (the same bits). scratch: embedding_bwd_scratch_floats(B, T)
 *      floats of device memory, 8-byte aligned (the sorted token keys). */
void TRI_CU(embedding_fwd)(void *stream, tri_dtype dt, void *out, const int32_t *ids, const void *wte, const void *wpe,
                           size_t B, size_t T, size_t C, size_t vstart, size_t Vl);
void TRI_CU(embedding_bwd)(void *stream, tri_dtype dt, float *dwte, float *dwpe, float *scratch, const void *dout,
                           const int32_t *ids, size_t B, size_t T, size_t C, size_t vstart, size_t Vl);
size_t TRI_CU(embedding_bwd_scratch_floats)(size_t B, size_t T);

/* ---- attention.cu, attention_tc.cu: causal self-attention, multi-head or
 * grouped-query, flash-style ----
 * qkv (B, T, NH + 2 NKV, HS) (NH % NKV == 0; query head h reads key/value head
 * h / (NH / NKV)); out (B, T, NH, HS); scale 1/sqrt(HS). qkv, out, dout and dqkv
 * are of dtype dt (fp32 or bf16: fp32 arithmetic, each output rounded once); lse
 * and scratch fp32.
 * fwd: out [overwrite]; lse (B, NH, T) = log sum_{j<=i} exp(s_ij) [overwrite]: the
 *      saved state, attention_saved_floats(B, T, NH, NKV, HS) floats.
 * bwd: dqkv (B, T, NH + 2 NKV, HS) [overwrite] from dout, qkv and the forward's out
 *      and lse, dk and dv summed over each group's query heads in order;
 *      scratch: attention_scratch_floats(B, T, NH, NKV, HS) floats (dout . out per
 *      row). No atomics: the same bits under any schedule.
 * Both are attention_{fwd,bwd}_slice below on the packed layout (q, k and v views
 * into qkv with row (NH + 2 NKV) HS, the whole sequence: q0 = 0, Tq = Tk = T), and
 * take its kernels: tensor cores for bf16 with HS 64 or 128, the SIMT kernels
 * otherwise. */
void TRI_CU(attention_fwd)(void *stream, tri_dtype dt, void *out, float *lse, const void *qkv, size_t B, size_t T,
                           int NH, int NKV, int HS);
void TRI_CU(attention_bwd)(void *stream, tri_dtype dt, void *dqkv, float *scratch, const void *dout, const void *qkv,
                           const void *out, const float *lse, size_t B, size_t T, int NH, int NKV, int HS);
size_t TRI_CU(attention_saved_floats)(size_t B, size_t T, int NH, int NKV, int HS);
size_t TRI_CU(attention_scratch_floats)(size_t B, size_t T, int NH, int NKV, int HS);

/* ---- attention_ring.cu: one block of ring attention (context parallelism),
 * the contracts of attention_block_fwd / _bwd / attention_kv_copy in
 * kernels/ops.h; HS <= 256. attention_kv_copy moves elements of esz (2 or
 * 4) bytes, whatever their dtype. ---- */
void TRI_CU(attention_block_fwd)(void *stream, tri_dtype dt, float *o, float *lse, const void *qkv, const void *kv,
                                 size_t B, size_t T, size_t Tk, size_t q0, int causal, int merge, int NH, int NKV,
                                 int HS);
void TRI_CU(attention_block_bwd)(void *stream, tri_dtype dt, float *dqkv, float *dkv, float *scratch, const void *dout,
                                 const void *qkv, const void *kv, const void *out, const float *lse, size_t B, size_t T,
                                 size_t Tk, size_t q0, int causal, int NH, int NKV, int HS);
void TRI_CU(attention_kv_copy)(void *stream, void *dst, const void *src, size_t esz, size_t B, size_t T, int NH,
                               int NKV, int HS, int to_qkv);

/* The same attention on strided views, for a query slice and a head slice.
 * A view holds, for batch b < B, row t and head h, the HS elements of dtype dt
 *   p + b * batch + t * row + h * HS + [0, HS)        (strides counted in elements),
 * h < NH for q, out, dout and dq, h < NKV for k, v, dk and dv (grouped-query
 * attention: NKV divides NH, query head h reads key/value head h / (NH / NKV);
 * NKV = 0 stands for NH, multi-head attention),
 * so a view may be q, k or v inside a packed qkv, or the heads [h0, h0 + NH) of a
 * caller whose rows are wider (a tensor-parallel head slice: p at head h0, row the
 * caller's row length).
 * The call computes queries [q0, q0 + Tq) of a causal sequence of Tk keys
 * (q0 + Tq <= Tk; the views of q, out, dout and dq have Tq rows, those of k, v, dk
 * and dv Tk rows): view row t of q is position q0 + t and sees keys 0 .. q0 + t.
 * fwd: out [overwrite]; lse (B, NH, Tq), row t of head (b, h) at (b NH + h) Tq + t
 *      [overwrite], as attention_fwd saves it.
 * bwd: dq [overwrite]; dk, dv [overwrite]: the gradients through these Tq queries
 *      only (a key that none of them sees gets zeros); out and lse as the forward
 *      left them; scratch: B NH Tq floats. Every output element is written once, by
 *      one thread, in a fixed order: the same bits under any schedule.
 * Kernels: bf16 with HS 64 or 128, every view 16-byte aligned with batch and row
 * multiples of 8, takes the tensor cores (mma.sync m16n8k16, fp32 accumulation;
 * attention_uses_tensor_cores says which); anything else the SIMT kernels, which are
 * also the fp32 reference. B, Tq, NH or HS of 0 does nothing; q0 + Tq > Tk aborts. */
typedef struct tri_cu_view {
    const void *p;
    size_t batch, row;
} tri_cu_view;
typedef struct tri_cu_view_out {
    void *p;
    size_t batch, row;
} tri_cu_view_out;
typedef struct tri_cu_attn_fwd_args {
    size_t B, Tq, Tk, q0;
    int NH, HS;
    int NKV; /* key/value heads of k and v; 0: NH */
    tri_cu_view_out out;
    float *lse;
    tri_cu_view q, k, v;
} tri_cu_attn_fwd_args;
typedef struct tri_cu_attn_bwd_args {
    size_t B, Tq, Tk, q0;
    int NH, HS;
    int NKV; /* key/value heads of k, v, dk and dv; 0: NH */
    tri_cu_view_out dq, dk, dv;
    float *scratch;
    tri_cu_view dout, q, k, v, out;
    const float *lse;
} tri_cu_attn_bwd_args;
void TRI_CU(attention_fwd_slice)(void *stream, tri_dtype dt, const tri_cu_attn_fwd_args *a);
void TRI_CU(attention_bwd_slice)(void *stream, tri_dtype dt, const tri_cu_attn_bwd_args *a);
/* 1 when bf16 attention of head size HS takes the tensor-core kernels (given aligned
 * views: HS 64 or 128), 0 when it takes the SIMT ones. */
int TRI_CU(attention_uses_tensor_cores)(tri_dtype dt, int HS);

/* ---- rmsnorm.cu, rope.cu, swiglu.cu: the Llama ops (kernels/ops.h), fp32 or
 * bf16 storage of the `void *` tensors (fp32 arithmetic, each output rounded once);
 * rstd, dw, inv_freq and scratch fp32 ----
 * rmsnorm_bwd: dinp and dw accumulate; dw through partial sums over fixed row
 * groups (scratch: rmsnorm_bwd_scratch_floats(N, C) floats), no float atomics.
 * rope_fwd / rope_bwd: in place on the q and k heads of qkv (B, T, NH + 2 NKV, HS),
 * HS even. swiglu_bwd: dinp (N, 2F) overwritten, not aliasing inp or dout. */
void TRI_CU(rmsnorm_fwd)(void *stream, tri_dtype dt, void *out, float *rstd, const void *inp, const void *w, size_t N,
                         size_t C, float eps);
void TRI_CU(rmsnorm_bwd)(void *stream, tri_dtype dt, void *dinp, float *dw, float *scratch, const void *dout,
                         const void *inp, const void *w, const float *rstd, size_t N, size_t C);
size_t TRI_CU(rmsnorm_bwd_scratch_floats)(size_t N, size_t C);
void TRI_CU(rope_fwd)(void *stream, tri_dtype dt, void *qkv, const float *inv_freq, size_t B, size_t T, int NH, int NKV,
                      int HS, size_t pos0);
void TRI_CU(rope_bwd)(void *stream, tri_dtype dt, void *dqkv, const float *inv_freq, size_t B, size_t T, int NH,
                      int NKV, int HS, size_t pos0);
void TRI_CU(swiglu_fwd)(void *stream, tri_dtype dt, void *out, const void *inp, size_t N, size_t F);
void TRI_CU(swiglu_bwd)(void *stream, tri_dtype dt, void *dinp, const void *inp, const void *dout, size_t N, size_t F);

/* ---- optim.cu: AdamW over many tensors, sums of many tensors ----
 * A table of tensors in device memory, planned once on the host: *_plan fills
 * each entry's first_block and returns the launch's block count; the table is
 * then copied to the device (its pointers are device memory and must stay
 * valid while it is used).
 * adamw_multi: for every entry, the CPU adamw op (kernels/ops.h) on (param, m, v,
 *   grad, n) with the entry's weight decay wd, the gradient first multiplied by
 *   grad_scale (1 for none; the CPU's scale op followed by adamw). fp32 master
 *   weights; bias corrections as the CPU computes them.
 * sum_multi: *result (one double, device memory) = the sum over every entry of
 *   x[i] (square 0) or x[i]^2 (square 1), in double; partial: `blocks` doubles
 *   (at least 1) of device memory. sum: the same for one tensor; partial:
 *   sum_partials(n) doubles. Both reduce in a fixed tree that depends only on
 *   the sizes: the same bits under any schedule. */
typedef struct tri_cu_adamw_tensor {
    float *param, *m, *v;
    const float *grad;
    size_t n;
    float wd;
    unsigned first_block; /* set by adamw_plan */
} tri_cu_adamw_tensor;

typedef struct tri_cu_span {
    const float *x;
    size_t n;
    unsigned first_block; /* set by sum_plan */
} tri_cu_span;

size_t TRI_CU(adamw_plan)(tri_cu_adamw_tensor *table, int count);
void TRI_CU(adamw_multi)(void *stream, const tri_cu_adamw_tensor *table, int count, size_t blocks, float lr,
                         float beta1, float beta2, float eps, int t, float grad_scale);
size_t TRI_CU(sum_plan)(tri_cu_span *table, int count);
void TRI_CU(sum_multi)(void *stream, double *result, double *partial, const tri_cu_span *table, int count,
                       size_t blocks, int square);
size_t TRI_CU(sum_partials)(size_t n);
void TRI_CU(sum)(void *stream, double *result, double *partial, const float *x, size_t n, int square);

/* ---- elementwise.cu ----
 * residual_fwd: out (N, C) = res + x + bias (C)       [overwrite; bias may be NULL;
 *                                                      out may alias res or x]
 * bias_bwd: dbias (C, fp32) += column sums of dout (N, C)   [accumulate]; scratch:
 *   bias_bwd_scratch_floats(N, C) floats (partial sums over fixed row groups:
 *   the same bits under any schedule)
 * scale: x (n) *= s [in place];  add: y (n) += x (n) [accumulate]; fp32 only
 * cast_f32_to_bf16: out (n) = in rounded to bf16 (nearest, ties to even; the bits of
 *   kernels/half.h's tri_f32_to_bf16), stored as uint16_t   [overwrite]
 * cast_bf16_to_f32: out (n) = in, exactly                     [overwrite] */
void TRI_CU(residual_fwd)(void *stream, tri_dtype dt, void *out, const void *res, const void *x, const void *bias,
                          size_t N, size_t C);
void TRI_CU(bias_bwd)(void *stream, tri_dtype dt, float *dbias, float *scratch, const void *dout, size_t N, size_t C);
size_t TRI_CU(bias_bwd_scratch_floats)(size_t N, size_t C);
void TRI_CU(scale)(void *stream, float *x, float s, size_t n);
void TRI_CU(add)(void *stream, float *y, const float *x, size_t n);
void TRI_CU(cast_f32_to_bf16)(void *stream, uint16_t *out, const float *in, size_t n);
void TRI_CU(cast_bf16_to_f32)(void *stream, float *out, const uint16_t *in, size_t n);

#ifdef __cplusplus
}
#endif

#endif
