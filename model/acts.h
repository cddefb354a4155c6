/* The buffers of one layer's forward and backward and the stage's scratch,
 * shared by the GPT-2 blocks (model/runtime.c) and the Llama blocks
 * (model/llama.c); model/runtime.h says what lives where and how large. */
#ifndef TRI_ACTS_H
#define TRI_ACTS_H

#include <stddef.h>
#include <stdint.h>

/* One layer's buffers (activation dtype unless marked fp32); NULL where the
 * policy does not keep them. R: the rows of the residual stream this rank
 * holds, BT, or BT / tp under sequence parallelism (tri_chunk_boundary_elems). */
typedef struct tri_layer_acts {
    void *ln1;                  /* (R, C)                          */
    float *ln1_mean, *ln1_rstd; /* (R) (R) fp32                   */
    void *qkv;                  /* (BT, 3*Cl)                       */
    float *att;                 /* attention_saved_floats(B, T, NHl, HS) fp32 */
    void *atty;                 /* (BT, Cl)                         */
    void *res2;                 /* (R, C) residual after attention */
    void *ln2;                  /* (R, C)                          */
    float *ln2_mean, *ln2_rstd; /* (R) (R) fp32                   */
    void *fch, *fch_gelu;       /* (BT, Fl) (BT, Fl)                */
    /* Llama: ln1/ln2 are RMSNorm outputs (ln1_mean, ln2_mean NULL), qkv is
     * (BT, QKVl) after RoPE, fch (BT, 2 Fl) = [gate | up] before SwiGLU and
     * fch_gelu (BT, Fl) = silu(gate) * up. */
} tri_layer_acts;

/* Split slots only: the output gradients of one layer's four linears, saved
 * by B (tri_block_bwd_input) for W (tri_block_bwd_weight). */
typedef struct tri_layer_douts {
    void *dqkv;        /* (BT, 3*Cl) of the qkv linear                        */
    void *dattproj;    /* (BT, C)    of the attention projection (dL/dres2)  */
    void *dfc;         /* (BT, Fl)   of the MLP fc linear (after GELU's backward) */
    void *dfcproj;     /* (BT, C)    of the MLP projection (dL/dy of the layer) */
    void *ln1g, *ln2g; /* (BT, C) sequence parallel only (else NULL): the
                          LayerNorm outputs all-gathered by B, W's inputs */
} tri_layer_douts;

/* The per-stage scratch. */
typedef struct tri_workspace {
    size_t B, T;
    size_t bytes;
    void *mem;
    void *logits;                         /* (BT, Vl) head                   */
    float *ce_stats, *ce_gather, *losses; /* (BT, 3) (tp, BT, 3) (BT) */
    void *out;                            /* (BT, C) output of a chunk without head */
    void *dres;                           /* (BT, C) gradient of the residual stream */
    void *dln, *dproj;                    /* (BT, C) (BT, C)                 */
    void *datty, *dqkv, *dfch;            /* (BT, Cl) (BT, QKVl) (BT, FCl)   */
    void *dsw;                            /* Llama: (BT, Fl) SwiGLU output's gradient */
    float *kv_dw;                         /* Llama, replicated KV heads: (2, NKV HS, C) +
                                             (2 HS, C) fp32, their weight gradients summed */
    float *att_scratch;                   /* attention_scratch_floats        */
    void *seq;                            /* (BT, C) sequence parallel: a LayerNorm output gathered */
    float *tp_dw;                         /* (6C) fp32 sequence parallel: row-wise grads to reduce */
    tri_layer_acts re;                    /* recompute target: selective: att; full: every buffer */
    void *re_out;                         /* (BT, C) full recompute: the layer output (discarded) */
    /* context parallelism only (model/cp.c), else NULL; KVW = 2 NKVl HS */
    void *cp_kv[2];   /* (BT, KVW) two key/value blocks of the ring: the one in use, the next */
    float *cp_dkv[3]; /* (BT, KVW) fp32: this rank's own block's gradient and two travelling */
    float *cp_o;      /* (BT, Cl) fp32: the merged attention output */
    float *cp_dqkv;   /* (BT, QKVl) fp32: the gradient of qkv being summed */
} tri_workspace;

#endif
