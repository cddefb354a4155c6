/* GPT-2 on one tensor-parallel rank: the parameter table and the model
 * chunks a rank holds. Forward and backward live in model/runtime.h.
 *
 * The model knows the tensor-parallel layout (local shard shapes) but not how
 * ranks talk: it calls the comm interface (parallel/comm.h) on the TP group it
 * is given, which is a group of one on a single rank.
 *
 * Tensor parallelism (Megatron-1): QKV and MLP fc1 column-parallel (split by
 * heads / by output columns), attention output and MLP fc2 row-parallel (their
 * outputs all-reduced over TP, the bias added once after the reduction),
 * LayerNorms and the position embedding replicated, token embedding
 * vocab-parallel, LM head tied to it with a vocab-parallel cross-entropy.
 *
 * Chunks: a rank holds one or more model chunks. A chunk is any set of
 * transformer layers (ascending global indices, not necessarily contiguous),
 * with or without the embedding (token + position) and the head (final
 * LayerNorm, tied LM head, loss). Without pipelining a rank holds one chunk
 * with every layer and both ends; an interleaved pipeline gives stage s the
 * chunks c*pp + s. Each chunk has its own parameter table and flat buffers:
 * every parameter in one backend buffer (param_mem, of the chunk's param
 * dtype), its gradient at the same element offset in another (grad_mem,
 * fp32). Optimizer, gradient buckets and checkpoints iterate over every chunk.
 */
#ifndef TRI_GPT_H
#define TRI_GPT_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/ctx.h"
#include "kernels/profile.h"
#include "model/config.h"
#include "model/debug.h"
#include "parallel/comm.h"

/* Vocabulary padded to a multiple of 128 * tp (so every TP rank gets an equal,
 * aligned slice). */
size_t tri_padded_vocab(int vocab_size, int tp);

typedef enum {
    TRI_P_WTE,
    TRI_P_WPE,
    TRI_P_LN1W,
    TRI_P_LN1B,
    TRI_P_QKVW,
    TRI_P_QKVB,
    TRI_P_ATTPROJW,
    TRI_P_ATTPROJB,
    TRI_P_LN2W,
    TRI_P_LN2B,
    TRI_P_FCW,
    TRI_P_FCB,
    TRI_P_FCPROJW,
    TRI_P_FCPROJB,
    TRI_P_LNFW,
    TRI_P_LNFB,
    /* Llama: q_proj is TRI_P_QKVW (the fused q|k|v weight starts there) and
     * gate_proj TRI_P_FCW (the fused gate|up weight starts there); o_proj,
     * down_proj and the norms reuse ATTPROJW, FCPROJW, LN1W, LN2W, LNFW and
     * embed_tokens WTE. These are the rest: */
    TRI_P_KW,     /* k_proj, right after q_proj in the buffer   */
    TRI_P_VW,     /* v_proj, right after k_proj                */
    TRI_P_UPW,    /* up_proj, right after gate_proj            */
    TRI_P_LMHEAD, /* the untied LM head (Vp, C), vocab-parallel */
    TRI_P_KIND_COUNT
} tri_param_kind;

/* How tensor parallelism splits a tensor (in the internal layout). */
typedef enum { TRI_SPLIT_NONE = 0, TRI_SPLIT_ROWS, TRI_SPLIT_COLS } tri_split;

typedef struct tri_param {
    char name[64]; /* Hugging Face name, e.g. "transformer.h.3.attn.c_attn.weight" */
    tri_param_kind kind;
    int layer; /* global block index, -1 outside the blocks            */
    /* Internal layout: linear weights (out, in); 1-D tensors are (1, n).        */
    size_t rows, cols;   /* global shape                                         */
    size_t lrows, lcols; /* this rank's slice                                    */
    tri_split split;     /* which dim TP splits                                  */
    int segments;        /* 3 for QKV (q|k|v are split separately), else 1       */
    size_t offset;       /* of the slice in the chunk's flat buffers, in elements */
    size_t numel;        /* lrows * lcols                                        */
    tri_dtype dtype;     /* of the parameter in param_mem (its gradient: fp32)   */
    /* Hugging Face layout: linear weights are Conv1D, stored (in, out).          */
    int hf_transposed;
    size_t hf_rows_saved; /* wte: only the real vocabulary rows are saved; else rows */
    float init_std;       /* normal(0, std); 0 means constant init_value          */
    float init_value;
    int decay;      /* takes weight decay                                   */
    int replicated; /* identical on every TP rank (counted once in norms)   */
    /* TP ranks holding the same slice (Llama's KV heads when tp > n_kv_head:
     * tp_replicas consecutive ranks share one KV head); 1 otherwise. The
     * slice of rank r is slice r / tp_replicas of tp / tp_replicas. */
    int tp_replicas;
} tri_param;

/* Global index along the split dim of local index i (rows or cols) of p. */
size_t tri_param_global_dim(const tri_param *p, int tp_rank, int tp, size_t i);

/* Pointers to one layer's tensors (parameters: param dtype; gradients: fp32). */
typedef struct tri_layer_w {
    void *ln1w, *ln1b;         /* (C) (C)                        */
    void *qkvw, *qkvb;         /* (3*Cl, C) (3*Cl), q|k|v rows   */
    void *attprojw, *attprojb; /* (C, Cl) (C)                    */
    void *ln2w, *ln2b;         /* (C) (C)                        */
    void *fcw, *fcb;           /* (Fl, C) (Fl)                   */
    void *fcprojw, *fcprojb;   /* (C, Fl) (C)                    */
    /* Llama: no biases (NULL); qkvw (QKVl, C) = [q_l | k_l | v_l] rows,
     * fcw (2 Fl, C) = [gate_l | up_l] rows, ln1w/ln2w the RMSNorm weights. */
} tri_layer_w;

typedef struct tri_weights {
    void *wte;           /* (Vl, C): padded-vocab rows [vstart, vstart+Vl) */
    void *wpe;           /* (T, C)                         */
    void *lnfw, *lnfb;   /* (C) (C)                        */
    void *lm_head;       /* (Vl, C) untied LM head (head chunk), else NULL */
    tri_layer_w *layers; /* [n_layers] of the chunk        */
} tri_weights;

/* Which layers and ends a chunk holds. */
typedef struct tri_chunk_spec {
    int n_layers;
    const int *layers; /* [n_layers] global indices, ascending */
    int has_embedding, has_head;
} tri_chunk_spec;

typedef struct tri_chunk {
    int n_layers;
    int *layers;       /* [n_layers] global block indices, ascending */
    int has_embedding; /* token + position embedding      */
    int has_head;      /* final LayerNorm, LM head, loss  */
    tri_param *params; /* [n_params], in buffer order     */
    int n_params;
    int head_params; /* the head's tensors at the front of the buffer (final
                        norm, untied LM head): their gradients are final after
                        the head's backward                              */
    int *layer_last_param; /* [n_layers]: index of each layer's last tensor in buffer order */
    size_t n_elems;        /* length of the flat buffers, in elements */
    size_t n_alloc;        /* elements allocated in each buffer: n_elems, or
                              more after tri_gpt_pad (a zero tail that belongs
                              to no parameter)                            */
    tri_dtype param_dtype, grad_dtype;
    void *param_mem;  /* (n_elems) of param_dtype, backend memory */
    float *grad_mem;  /* (n_elems) fp32, backend memory  */
    tri_weights w, g; /* views into param_mem, grad_mem  */
    /* Optional: called during backward each time a prefix of the gradient
     * buffer is final, with its length in elements (grad_mem[0, n) will not be
     * written again in this backward). Data-parallel buckets start their
     * all-reduce from here. NULL: not called. */
    void (*grads_ready)(void *ctx, size_t n);
    void *grads_ready_ctx;
    /* Optional (ZeRO-3's units, src/train/zero_units.h): called before
     * chunk-local layer i runs, in the forward (backward 0) and in the
     * backward or its input half with any recompute (backward 1; the weight
     * half reads no weights and calls nothing), so that its parameters can
     * be gathered in time; in the forward also with i = n_layers before the
     * head of a chunk that has it. NULL: not called. */
    void (*before_layer)(void *ctx, int i, int backward);
    void *before_layer_ctx;
} tri_chunk;

typedef struct tri_gpt {
    tri_model_cfg cfg;
    tri_ctx *ctx;      /* not owned; NULL for a description */
    tri_comm *tp_comm; /* not owned                      */
    int tp, tp_rank;
    int sp; /* sequence parallel: set by tri_gpt_set_sequence_parallel */
    /* context parallelism (model/cp.h, tri_cp_set): the CP group (not
     * owned), its size (0 or 1: none) and this rank's index in it */
    tri_comm *cp_comm;
    int cp, cp_rank;
    /* sizes */
    tri_arch arch;
    size_t C, Cl;          /* channels; channels per TP rank (heads/tp * HS) */
    size_t F, Fl;          /* MLP width (GPT-2 4C, Llama ffn_hidden); per TP rank */
    size_t Vp, Vl, vstart; /* padded vocab; this rank's slice */
    int NH, NHl, HS;       /* heads; heads per TP rank; head size */
    /* key/value heads (GPT-2: NH); per TP rank (1 when replicated); the TP
     * ranks sharing one KV head (tp / NKV when tp > NKV, else 1) */
    int NKV, NKVl, kv_rep;
    size_t QKVl;    /* width of the qkv linear's output per rank: (NHl + 2 NKVl) HS */
    size_t FCl;     /* width of the fc linear's output per rank: Fl, Llama 2 Fl */
    int tied;       /* the LM head is the token embedding                        */
    float norm_eps; /* Llama's RMSNorm epsilon                                   */
    float *inv_freq; /* Llama: RoPE's (HS / 2) inverse frequencies, fp32 backend
                        memory (tri_gpt_init; NULL for a description)            */
    tri_chunk *chunks;     /* [n_chunks], in the order given */
    int n_chunks;
    /* test-only faults (model/debug.h): zero from tri_gpt_init; the trainer
     * copies its own in after it */
    tri_debug debug;
} tri_gpt;

/* The chunk specs of pipeline stage pp_rank of pp with vpp virtual chunks per
 * stage. The model is cut into pp * vpp model chunks of consecutive layers;
 * local chunk c of stage s is model chunk j = c*pp + s. layout gives the
 * layers of each chunk: "" is the even split (n_layer / (pp*vpp) each; when
 * that does not divide, the error suggests a parallel.pp_layout), else
 * comma-separated counts, either pp of them (one per stage, vpp == 1 only) or
 * pp * vpp (one per model chunk, in model order j = 0, 1, ...). The embedding
 * goes to model chunk 0 (local chunk 0 of stage 0), the head to the last
 * (local chunk vpp-1 of stage pp-1). specs needs vpp entries, layers_buf
 * n_layer ints (the specs point into it). Returns 0, or -1 with a message
 * naming the numbers: a wrong count of numbers, a sum other than n_layer, an
 * empty (or negative) chunk, text that is not a number, vpp > 1 with pp 1. */
int tri_chunks_layout(const tri_model_cfg *cfg, int pp, int pp_rank, int vpp, const char *layout, tri_chunk_spec *specs,
                      int *layers_buf);
/* tri_chunks_layout with layout "" (the even split). */
int tri_chunks_even(const tri_model_cfg *cfg, int pp, int pp_rank, int vpp, tri_chunk_spec *specs, int *layers_buf);

/* Builds the parameter tables of the given chunks for this TP rank and
 * allocates their flat parameter and gradient buffers (zeroed) through ctx.
 * Returns 0, or -1 with a message naming the numbers when a size does not
 * divide or memory is short. */
int tri_gpt_init(tri_gpt *g, const tri_model_cfg *cfg, tri_ctx *ctx, tri_comm *tp_comm, int tp, int tp_rank,
                 const tri_chunk_spec *specs, int n_chunks);
/* The whole model as one chunk (no pipelining). */
/* Reallocates every chunk's buffers (zeroed, nothing kept) to n_alloc =
 * n_elems rounded up to a multiple of `multiple`, for collectives that cut
 * the buffers into equal shards. Call before the parameters are set.
 * Returns 0 or -1 (printed; the model is then freed). */
int tri_gpt_pad(tri_gpt *g, size_t multiple);
/* ZeRO-2: chunk k's gradient buffer released (grad_mem NULL, the views of
 * g with it) between steps, and allocated again (zeroed, views rebound)
 * before the next step's backward: 0, or -1 (printed) when memory is short. */
void tri_gpt_grads_release(tri_gpt *g, int k);
int tri_gpt_grads_acquire(tri_gpt *g, int k);
/* ZeRO-3: the same for chunk k's parameter buffer (acquired uninitialised:
 * the caller all-gathers the parameters into it). */
void tri_gpt_params_release(tri_gpt *g, int k);
int tri_gpt_params_acquire(tri_gpt *g, int k);
/* ZeRO-3 in units: the views (w) of chunk k's tensors whose offsets lie in
 * [lo, hi) pointed into mem, a buffer holding the elements from elem0 on
 * (mem NULL: at nothing); the other views stay as they are. */
void tri_gpt_params_view(tri_gpt *g, int k, size_t lo, size_t hi, void *mem, size_t elem0);
int tri_gpt_init_single(tri_gpt *g, const tri_model_cfg *cfg, tri_ctx *ctx, tri_comm *tp_comm, int tp, int tp_rank);
/* Checks that cfg splits over tp and the pipeline: n_embd by n_head, heads
 * by tp, and the layers over pp stages of vpp chunks by layout (the rules of
 * tri_chunks_layout, for every stage; vpp > 1 needs pp >= 2). Returns 0, or
 * -1 with a message naming the numbers. (The padded vocabulary divides by tp
 * by construction.) */
int tri_gpt_check_layout(const tri_model_cfg *cfg, int tp, int pp, int vpp, const char *layout);
/* The same check, silent: 0, or -1 with the message tri_gpt_check_layout
 * would print written into why (n bytes, truncated), for a caller that tries
 * many layouts and reports the reasons itself (the planner's search). */
int tri_gpt_layout_why(const tri_model_cfg *cfg, int tp, int pp, int vpp, const char *layout, char *why, size_t n);

/* Sets g's shape fields (cfg, tp, C, Cl, F, Fl, FCl, Vp, Vl, vstart, NH, NHl,
 * HS, NKV, NKVl, kv_rep, QKVl, arch, tied, norm_eps) for TP rank tp_rank of
 * tp; nothing else. For a shell that sizes buffers without a table (the
 * planner's GPU path); cfg must pass tri_gpt_check_layout. */
void tri_gpt_sizes(tri_gpt *g, const tri_model_cfg *cfg, int tp, int tp_rank);

/* The same without memory: sizes and the parameter tables only (ctx, tp_comm
 * and the buffers stay NULL). For describing the global model (tp = 1, one
 * chunk) or another rank's shard. tri_gpt_free releases it. */
int tri_gpt_describe(tri_gpt *g, const tri_model_cfg *cfg, int tp, int tp_rank, const tri_chunk_spec *specs,
                     int n_chunks);
int tri_gpt_describe_single(tri_gpt *g, const tri_model_cfg *cfg, int tp, int tp_rank);
/* NULL-safe; zeroes *g. */
void tri_gpt_free(tri_gpt *g);

/* Turns sequence parallelism (Korthikanti et al. 2022) on or off, before
 * any slot pool or workspace is made: LayerNorms, residual adds, the
 * row-parallel biases and the embedding output then run on this rank's
 * B T / tp rows of the residual stream (model/runtime.h,
 * tri_chunk_boundary_elems), all-gathered before each column-parallel linear
 * and reduce-scattered after each row-parallel one. Needs tp > 1 and seq_len
 * divisible by tp; returns 0, or -1 with a message naming the numbers. */
int tri_gpt_set_sequence_parallel(tri_gpt *g, int on);

/* Elements of every chunk's parameters together. */
size_t tri_gpt_local_elems(const tri_gpt *g);

/* Tells the per-op profile (kernels/profile.h) which GEMM is which layer
 * part: the range of every linear weight of every chunk (qkv, attention
 * projection, fc, fc projection; the token embedding as the LM head, the
 * only GEMM that reads it). 0, or -1 (printed). */
int tri_gpt_profile_roles(const tri_gpt *g, tri_profile *p);

/* Layout-independent init: every element of every global tensor drawn from a
 * counter-based RNG keyed by (seed, tensor name, global element index), so a
 * rank materialises exactly its slice and any tp/pp layout starts from the
 * same model. GPT-2 init: std 0.02, residual projections 0.02/sqrt(2L),
 * LayerNorm weights 1, biases 0, padded vocab rows 0. Values are computed in
 * an fp32 host staging buffer and copied to the backend (rounded to 16 bits
 * under mixed precision, tri_gpt_params_to_device). Returns 0 or -1 (memory). */
int tri_gpt_init_params(tri_gpt *g, uint64_t seed);

/* Host staging of parameter values: n elements of chunk k's param_mem from
 * element `elem` on, as fp32 on the host whatever the param dtype. To the
 * device, 16-bit parameters are rounded to nearest even (kernels/half.h, the
 * cast op's rounding); to the host they are widened exactly. Returns 0 or -1
 * (out of host memory, printed). */
int tri_gpt_params_to_device(tri_gpt *g, int k, size_t elem, const float *host, size_t n);
int tri_gpt_params_to_host(const tri_gpt *g, int k, size_t elem, float *host, size_t n);

/* The Llama defaults resolved (model/config.h): key/value heads, the SwiGLU
 * width (Llama's rule: 2/3 of 4C, truncated, rounded up to ffn_multiple_of),
 * whether the LM head is tied (GPT-2: always). */
int tri_model_n_kv_head(const tri_model_cfg *cfg);
int tri_model_ffn_hidden(const tri_model_cfg *cfg);
int tri_model_tied(const tri_model_cfg *cfg);
/* The shape rules of the architecture for tp ranks (GPT-2: none beyond
 * tri_gpt_check_layout's; Llama: n_head % n_kv_head, an even head size for
 * RoPE, n_kv_head and tp one dividing the other, ffn_hidden % tp, the RoPE
 * scaling's factors). 0, or -1 with a message naming the keys and numbers
 * in why. */
int tri_model_arch_why(const tri_model_cfg *cfg, int tp, char *why, size_t n);
/* RoPE's inverse frequencies of cfg (HS / 2 floats into out): theta^(-2i/HS),
 * then Llama 3.1's scaling when rope_scaling_factor > 0. */
void tri_rope_inv_freq(const tri_model_cfg *cfg, float *out);

/* Model FLOPs per token for training (forward + backward): 6N + 12 L C T,
 * with N the non-embedding... see docs/performance.md. */
double tri_gpt_flops_per_token(const tri_model_cfg *cfg);

/* Total number of parameters of the global model (real vocabulary, tied head). */
size_t tri_gpt_num_params(const tri_model_cfg *cfg);

#endif
