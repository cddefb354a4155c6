/* GPT-2 on one pipeline stage of one tensor-parallel rank.
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
 * Every parameter lives in one flat buffer (params), its gradient at the same
 * offset in another (grads). The table of tri_param says where each tensor is,
 * what global tensor it is a slice of, and how it is stored in a Hugging Face
 * GPT-2 checkpoint.
 */
#ifndef TRI_GPT_H
#define TRI_GPT_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/ops.h"
#include "model/config.h"
#include "parallel/comm.h"

/* Which layers and ends of the model one pipeline stage holds. */
typedef struct tri_stage {
    int first_layer, last_layer; /* blocks [first, last)                   */
    int has_embedding;           /* token + position embedding (stage 0)   */
    int has_head;                /* final LayerNorm, LM head, loss (last)  */
} tri_stage;

/* Stage `pp_rank` of `pp`: an even split of the layers. */
tri_stage tri_stage_of(const tri_model_cfg *cfg, int pp, int pp_rank);

/* Vocabulary padded to a multiple of 128 * tp (so every TP rank gets an equal,
 * aligned slice). */
size_t tri_padded_vocab(int vocab_size, int tp);

typedef enum {
    TRI_P_WTE, TRI_P_WPE,
    TRI_P_LN1W, TRI_P_LN1B, TRI_P_QKVW, TRI_P_QKVB, TRI_P_ATTPROJW, TRI_P_ATTPROJB,
    TRI_P_LN2W, TRI_P_LN2B, TRI_P_FCW, TRI_P_FCB, TRI_P_FCPROJW, TRI_P_FCPROJB,
    TRI_P_LNFW, TRI_P_LNFB,
    TRI_P_KIND_COUNT
} tri_param_kind;

/* How tensor parallelism splits a tensor (in the internal layout). */
typedef enum { TRI_SPLIT_NONE = 0, TRI_SPLIT_ROWS, TRI_SPLIT_COLS } tri_split;

typedef struct tri_param {
    char name[64];        /* Hugging Face name, e.g. "transformer.h.3.attn.c_attn.weight" */
    tri_param_kind kind;
    int layer;            /* global block index, -1 outside the blocks            */
    /* Internal layout: linear weights (out, in); 1-D tensors are (1, n).        */
    size_t rows, cols;    /* global shape                                         */
    size_t lrows, lcols;  /* this rank's slice                                    */
    tri_split split;      /* which dim TP splits                                  */
    int segments;         /* 3 for QKV (q|k|v are split separately), else 1       */
    size_t offset;        /* of the slice in the flat buffers, in floats          */
    size_t numel;         /* lrows * lcols                                        */
    /* Hugging Face layout: linear weights are Conv1D, stored (in, out).          */
    int hf_transposed;
    size_t hf_rows_saved; /* wte: only the real vocabulary rows are saved; else rows */
    float init_std;       /* normal(0, std); 0 means constant init_value          */
    float init_value;
    int decay;            /* takes weight decay                                   */
    int replicated;       /* identical on every TP rank (counted once in norms)   */
} tri_param;

/* Global index along the split dim of local index i (rows or cols) of p. */
size_t tri_param_global_dim(const tri_param *p, int tp_rank, int tp, size_t i);

typedef struct tri_layer_w {
    float *ln1w, *ln1b;          /* (C) (C)                        */
    float *qkvw, *qkvb;          /* (3*Cl, C) (3*Cl), q|k|v rows   */
    float *attprojw, *attprojb;  /* (C, Cl) (C)                    */
    float *ln2w, *ln2b;          /* (C) (C)                        */
    float *fcw, *fcb;            /* (Fl, C) (Fl)                   */
    float *fcprojw, *fcprojb;    /* (C, Fl) (C)                    */
} tri_layer_w;

typedef struct tri_weights {
    float *wte;                  /* (Vl, C): padded-vocab rows [vstart, vstart+Vl) */
    float *wpe;                  /* (T, C)                         */
    float *lnfw, *lnfb;          /* (C) (C)                        */
    tri_layer_w *layers;         /* [n_local_layers]               */
} tri_weights;

typedef struct tri_gpt {
    tri_model_cfg cfg;
    const tri_ops *ops;
    tri_comm *tp_comm;           /* not owned                      */
    int tp, tp_rank;
    tri_stage stage;
    int n_local_layers;
    /* sizes */
    size_t C, Cl;                /* channels; channels per TP rank (heads/tp * HS) */
    size_t F, Fl;                /* MLP width 4C; per TP rank      */
    size_t Vp, Vl, vstart;       /* padded vocab; this rank's slice */
    int NH, NHl, HS;             /* heads; heads per TP rank; head size */
    /* parameters */
    tri_param *params;           /* [n_params], in buffer order    */
    int n_params;
    int *layer_last_param;       /* [n_local_layers]: index of each local layer's
                                    last tensor in buffer order    */
    size_t n_floats;             /* length of the flat buffers     */
    float *param_mem, *grad_mem; /* (n_floats) each, backend memory */
    tri_weights w, g;            /* views into param_mem, grad_mem */
    /* Optional: called during backward each time a prefix of the gradient
     * buffer is final, with its length in floats (grad_mem[0, n) will not be
     * written again in this backward). Data-parallel buckets start their
     * all-reduce from here. NULL: not called. */
    void (*grads_ready)(void *ctx, size_t n);
    void *grads_ready_ctx;
} tri_gpt;

/* Builds the parameter table for this stage and TP rank and allocates the
 * flat parameter and gradient buffers (zeroed). Returns 0, or -1 with a
 * message naming the numbers when a size does not divide (heads by tp,
 * layers by pp, ...). */
int tri_gpt_init(tri_gpt *g, const tri_model_cfg *cfg, const tri_ops *ops,
                 tri_comm *tp_comm, int tp, int tp_rank, int pp, int pp_rank);
/* Checks that cfg splits over tp and pp: n_embd by n_head, heads by tp,
 * layers by pp. Returns 0, or -1 with a message naming the numbers. (The
 * padded vocabulary divides by tp by construction.) */
int tri_gpt_check_layout(const tri_model_cfg *cfg, int tp, int pp);

/* The same without memory: sizes and the parameter table only (ops, tp_comm
 * and the buffers stay NULL). For describing the global model (tp = pp = 1)
 * or another rank's shard. tri_gpt_free releases it. */
int tri_gpt_describe(tri_gpt *g, const tri_model_cfg *cfg, int tp, int tp_rank, int pp, int pp_rank);
/* NULL-safe; zeroes *g. */
void tri_gpt_free(tri_gpt *g);

/* Layout-independent init: every element of every global tensor drawn from a
 * counter-based RNG keyed by (seed, tensor name, global element index), so a
 * rank materialises exactly its slice and any tp/pp layout starts from the
 * same model. GPT-2 init: std 0.02, residual projections 0.02/sqrt(2L),
 * LayerNorm weights 1, biases 0, padded vocab rows 0. */
void tri_gpt_init_params(tri_gpt *g, uint64_t seed);

/* Activations of one micro-batch (B, T) on one stage: everything backward
 * needs, plus scratch shared by all layers. */
typedef struct tri_acts {
    size_t B, T;
    float *mem;                  /* one allocation                 */
    size_t n_floats;
    float *x_in;                 /* (B*T, C) stage input (embedding output, or received) */
    /* per local layer l: */
    float **ln1, **ln1_mean, **ln1_rstd;  /* (B*T, C) (B*T) (B*T) */
    float **qkv;                 /* (B*T, 3*Cl)                    */
    float **att;                 /* (B, NHl, T, T)                 */
    float **atty;                /* (B*T, Cl)                      */
    float **res2;                /* (B*T, C) residual after attention */
    float **ln2, **ln2_mean, **ln2_rstd;
    float **fch, **fch_gelu;     /* (B*T, Fl)                      */
    float **res3;                /* (B*T, C) residual after MLP = layer output */
    /* head */
    float *lnf, *lnf_mean, *lnf_rstd; /* (B*T, C) (B*T) (B*T)      */
    float *logits;               /* (B*T, Vl); holds dlogits after the loss pass */
    float *ce_stats;             /* (B*T, 3)                       */
    float *ce_gather;            /* (tp, B*T, 3) stats of every TP rank */
    float *losses;               /* (B*T)                          */
    /* scratch for backward, shared by layers */
    float *dres;                 /* (B*T, C) gradient of the residual stream */
    float *dln;                  /* (B*T, C)                       */
    float *dproj;                /* (B*T, C) row-parallel output before the reduce (fwd) */
    float *datty;                /* (B*T, Cl)                      */
    float *dqkv;                 /* (B*T, 3*Cl)                    */
    float *dfch;                 /* (B*T, Fl)                      */
    float *att_scratch;
} tri_acts;

int tri_acts_init(tri_acts *a, const tri_gpt *g, size_t B, size_t T);
void tri_acts_free(tri_acts *a, const tri_gpt *g); /* NULL-safe */

/* Forward of one micro-batch through this stage.
 * ids (B*T): token ids (used when the stage has the embedding);
 * x (B*T, C): the stage input when it has no embedding, else NULL.
 * targets (B*T): next tokens (used when the stage has the head).
 * With the head: computes per-token losses into a->losses and, when dscale is
 * non-zero, d(loss * dscale)/dlogits into a->logits, ready for backward.
 * Returns the sum of the micro-batch's token losses on the head stage, else 0. */
double tri_gpt_forward(tri_gpt *g, tri_acts *a, const int32_t *ids, const float *x,
                       const int32_t *targets, float dscale);

/* Backward of the micro-batch last run through forward with a non-zero dscale.
 * dy (B*T, C): gradient of the stage output when the stage has no head, else NULL.
 * dx (B*T, C): receives the gradient of the stage input when the stage has no
 * embedding (may be NULL otherwise).
 * Parameter gradients accumulate (+=) into g->grad_mem. */
void tri_gpt_backward(tri_gpt *g, tri_acts *a, const int32_t *ids, const float *dy, float *dx);

/* Model FLOPs per token for training (forward + backward): 6N + 12 L C T,
 * with N the non-embedding... see docs/performance.md. */
double tri_gpt_flops_per_token(const tri_model_cfg *cfg);

/* Total number of parameters of the global model (real vocabulary, tied head). */
size_t tri_gpt_num_params(const tri_model_cfg *cfg);

#endif
