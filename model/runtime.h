/* The stage runtime: forward and backward of model chunks, one micro-batch
 * at a time, with saved slots, one workspace and activation checkpointing.
 *
 *   block_fwd / block_bwd   one transformer layer (TP collectives inside);
 *   embed_fwd / embed_bwd   token + position embedding of a chunk that has it;
 *   head_fwd / head_bwd     final LayerNorm, tied LM head and loss;
 *   tri_chunk_forward / tri_chunk_backward   a loop over those for one chunk;
 *   tri_chunk_backward_input / _weight       the same backward split in two
 *                                            for zero-bubble schedules (below).
 *
 * Memory (all backend memory, from the context's allocator, counted by kind):
 *   - a saved slot (TRI_MEM_SAVED) holds what one micro-batch's backward of
 *     one chunk needs, and nothing else, sized by the recompute policy:
 *       none:      every layer's buffers (input, LayerNorm outputs and
 *                  statistics, qkv, attention state, attention output,
 *                  residual, MLP pre- and post-GELU);
 *       selective: the same without the attention state, recomputed from
 *                  qkv in backward. Every backend's attention is
 *                  flash-style, so that state is one log-sum-exp per
 *                  (batch, head, query) row, B NH T / tp floats a layer:
 *                  no T x T tensor exists to drop;
 *       full:      each layer's input only; the layer's forward (TP
 *                  collectives included) reruns inside backward;
 *     plus, for the chunk's ends, the token ids (embedding), the targets,
 *     the head input, its LayerNorm statistics and the gradient of the head
 *     LayerNorm output (head). Slots come from a pool allocated up front with
 *     as many slots as the schedule keeps micro-batches in flight (1 without
 *     pipelining); acquire/release never allocate.
 *   - a split slot (pool made with split = 1, for zero-bubble schedules such
 *     as ZB-H1) also keeps, per layer, what the deferred weight gradients
 *     (W) need: the output gradients of the four linears (dout), and under
 *     "full" the inputs of those linears (ln1, atty, ln2, fch_gelu in
 *     s->layer[i], written there by B's recompute) so that W recomputes
 *     nothing. Per layer, A the activation dtype's size, each buffer rounded
 *     up to 64 bytes:
 *       every policy:  + A BT (3 Cl + C + Fl + C)   dqkv, dattproj, dfc, dfcproj
 *       full, also:    + A BT (C + Cl + C + Fl)     ln1, atty, ln2, fch_gelu
 *     (tp = 1, fp32: + 36 BT C, and + 28 BT C more under full). layer_bytes
 *     includes it; the chunk's ends are unchanged.
 *   - one workspace per stage (TRI_MEM_WORKSPACE), shared by every chunk and
 *     micro-batch: logits, cross-entropy statistics, backward temporaries,
 *     the chunk output to send, and what recompute rebuilds.
 *
 * The head never keeps the logits: head_fwd computes the loss and, when
 * training, the logits' gradient in place and at once its product with the
 * tied embedding (the gradient of the final LayerNorm output, saved in the
 * slot, and the embedding's weight gradient). A (B*T, V/tp) tensor per
 * micro-batch in flight would otherwise dominate the last stage's memory.
 *
 * No function here reads backend memory from the host: ids and targets are
 * staged in (tri_slot_stage), the loss comes back as a sum computed by an op. */
#ifndef TRI_RUNTIME_H
#define TRI_RUNTIME_H

#include "model/acts.h"
#include "model/gpt.h"

typedef enum { TRI_RECOMPUTE_NONE = 0, TRI_RECOMPUTE_SELECTIVE, TRI_RECOMPUTE_FULL } tri_recompute;

/* What a forward computes at the head: the logits only (sampling), the loss
 * (evaluation), or the loss and the gradient for backward (training). */
typedef enum { TRI_FWD_LOGITS = 0, TRI_FWD_LOSS, TRI_FWD_TRAIN } tri_fwd_mode;

/* "none" / "selective" / "full" -> the policy; -1 for anything else. */
int tri_recompute_parse(const char *s);
const char *tri_recompute_name(tri_recompute r);


/* What one micro-batch of one chunk keeps for its backward. */
typedef struct tri_slot {
    void *mem;                  /* one allocation, slot_bytes      */
    int32_t *ids;               /* (BT) embedding chunks           */
    int32_t *targets;           /* (BT) head chunks                */
    void **x;                   /* [n_layers]: each layer's input (R, C) */
    tri_layer_acts *layer;      /* [n_layers]                      */
    tri_layer_douts *dout;      /* [n_layers] split pools, else NULL */
    void *x_head;               /* (R, C) head input (head chunks) */
    float *lnf_mean, *lnf_rstd; /* (R) (R)                       */
    void *dlnf;                 /* (R, C) grad of the head LayerNorm output */
    int in_use;
} tri_slot;

typedef struct tri_slot_pool {
    int chunk; /* which chunk of the model        */
    size_t B, T;
    tri_recompute policy;
    int split; /* slots keep what a deferred W needs   */
    size_t slot_bytes;
    size_t layer_bytes; /* saved bytes of one layer (the closed form's subject) */
    int n_slots;
    tri_slot *slots; /* [n_slots]                       */
} tri_slot_pool;


/* Bytes one slot of chunk k needs (policy, micro-batch B x T, split or
 * not); *layer_bytes (if non-NULL) gets one layer's share. Overflow-checked:
 * 0 with a message naming the numbers when the sizes do not fit size_t. */
size_t tri_slot_bytes(const tri_gpt *g, int k, size_t B, size_t T, tri_recompute policy, int split,
                      size_t *layer_bytes);
/* Bytes of the stage's workspace (max over the chunks' needs). 0 with a
 * message on overflow. */
size_t tri_workspace_bytes(const tri_gpt *g, size_t B, size_t T, tri_recompute policy);
/* The same two, silent: 0 with the message written into why (why_n bytes,
 * truncated) instead of printed, for the planner's search. */
size_t tri_slot_bytes_why(const tri_gpt *g, int k, size_t B, size_t T, tri_recompute policy, int split,
                          size_t *layer_bytes, char *why, size_t why_n);
size_t tri_workspace_bytes_why(const tri_gpt *g, size_t B, size_t T, tri_recompute policy, char *why, size_t why_n);

/* split = 0: slots for tri_chunk_backward; split = 1: split slots (above),
 * for tri_chunk_backward_input / _weight (tri_chunk_backward works on them
 * too, leaving the extra buffers unused). */
int tri_slot_pool_init(tri_slot_pool *p, const tri_gpt *g, int k, size_t B, size_t T, tri_recompute policy, int n_slots,
                       int split);
void tri_slot_pool_free(tri_slot_pool *p, const tri_gpt *g); /* NULL-safe */
/* A free slot (accounted as saved activations in use), or NULL when all are
 * taken (a schedule bug: the pool is sized by the schedule's peak). */
tri_slot *tri_slot_acquire(tri_slot_pool *p, const tri_gpt *g);
void tri_slot_release(tri_slot_pool *p, const tri_gpt *g, tri_slot *s);

int tri_workspace_init(tri_workspace *w, const tri_gpt *g, size_t B, size_t T, tri_recompute policy);
void tri_workspace_free(tri_workspace *w, const tri_gpt *g); /* NULL-safe */

/* Stages host ids and targets (BT each) of one micro-batch into the slot
 * (either may be NULL; ids are used by embedding chunks, targets by head
 * chunks). */
void tri_slot_stage(const tri_gpt *g, const tri_slot_pool *p, tri_slot *s, const int32_t *ids, const int32_t *targets);

/* ---- the pieces ---- */

/* Layer l (index within chunk k) forward: x (BT, C) -> y (BT, C), keeping
 * what backward needs in a (the slot's buffers, or the workspace's under
 * recompute). y may be the next layer's input buffer. */
void tri_block_fwd(tri_gpt *g, int k, int l, tri_layer_acts *a, const void *x, void *y, tri_workspace *ws, size_t B,
                   size_t T);
/* Layer l backward: ws->dres holds dL/dy on entry and dL/dx on return;
 * parameter gradients accumulate into chunk k's grad_mem. a and x as the
 * forward left them. */
void tri_block_bwd(tri_gpt *g, int k, int l, const tri_layer_acts *a, const void *x, tri_workspace *ws, size_t B,
                   size_t T);
/* tri_block_bwd in two parts. _input: the same, except that the four
 * linears' weight gradients are not computed; their output gradients go to
 * d instead (LayerNorm and bias gradients are done here). _weight: those
 * four weight gradients from d and the linears' inputs in a (ln1, atty, ln2,
 * fch_gelu); no collectives, no workspace. */
void tri_block_bwd_input(tri_gpt *g, int k, int l, const tri_layer_acts *a, const void *x, tri_workspace *ws,
                         const tri_layer_douts *d, size_t B, size_t T);
void tri_block_bwd_weight(tri_gpt *g, int k, int l, const tri_layer_acts *a, const tri_layer_douts *d, size_t B,
                          size_t T);

/* x, dx: this rank's rows of the residual stream (tri_chunk_boundary_elems);
 * ws is scratch for the whole (BT, C) lookup under sequence parallelism. */
void tri_embed_fwd(tri_gpt *g, int k, const int32_t *ids, void *x, tri_workspace *ws, size_t B, size_t T);
void tri_embed_bwd(tri_gpt *g, int k, const int32_t *ids, const void *dx, tri_workspace *ws, size_t B, size_t T);

/* Elements of the residual stream one rank holds for a B x T micro-batch:
 * B T C, or under sequence parallelism (g->sp) B T C / tp, the rank's rows
 * [r B T / tp, (r+1) B T / tp) of the (b, t)-ordered stream. The size of a
 * chunk's input and output (what pipeline stages send each other), of every
 * x, res2, ln1, ln2, x_head and dlnf, and of ws->dres on a chunk boundary. */
size_t tri_chunk_boundary_elems(const tri_gpt *g, size_t B, size_t T);

/* Head forward of the micro-batch in slot s (its x_head holds the input, its
 * targets the staged targets). TRI_FWD_LOGITS: only the logits (ws->logits),
 * returns 0. TRI_FWD_LOSS: the per-token losses (ws->losses). TRI_FWD_TRAIN:
 * also the gradient of (loss * dscale), carried back through the LM head into
 * s->dlnf and the embedding's weight gradient. Returns the sum of the token
 * losses. */
double tri_head_fwd(tri_gpt *g, int k, tri_slot *s, tri_workspace *ws, size_t B, size_t T, tri_fwd_mode mode,
                    float dscale);
/* Head backward: ws->dres = dL/d(head input) (overwrite). */
void tri_head_bwd(tri_gpt *g, int k, tri_slot *s, tri_workspace *ws, size_t B, size_t T);

/* ---- one chunk ---- */

/* Forward of the micro-batch staged in slot s through chunk k.
 * x_in (BT, C): the chunk input when it has no embedding (backend memory),
 * else NULL. The output of a chunk without head is left in ws->out.
 * Returns the micro-batch's loss sum on a head chunk (mode LOSS or TRAIN),
 * else 0. */
double tri_chunk_forward(tri_gpt *g, tri_slot_pool *p, tri_slot *s, tri_workspace *ws, const void *x_in,
                         tri_fwd_mode mode, float dscale);
/* Backward of the micro-batch in slot s (last run forward in mode TRAIN).
 * dy (BT, C): gradient of the chunk output when it has no head, else NULL.
 * On return ws->dres holds the gradient of the chunk input (for a chunk
 * without embedding, to send back). Parameter gradients accumulate. */
void tri_chunk_backward(tri_gpt *g, tri_slot_pool *p, tri_slot *s, tri_workspace *ws, const void *dy);

/* tri_chunk_backward split for zero-bubble schedules (ZB-H1: B on the
 * critical path, W later); the pool must be a split one (split = 1).
 *
 * B, tri_chunk_backward_input: same contract as tri_chunk_backward (dy, and
 * ws->dres = dL/d(chunk input) on return), but the weight gradients of the
 * four linears of every layer are left for W; their output gradients (and
 * under "full" their inputs) are kept in the slot. B does everything else:
 * the head's backward (ln_f; the head's wte part is done in forward anyway),
 * every LayerNorm and bias gradient, and the embedding's backward (it reads
 * ws->dres, which later work would overwrite). B never calls grads_ready.
 *
 * W, tri_chunk_backward_weight: the deferred weight gradients of the
 * micro-batch in s, after its B (any F/B/W of other micro-batches may run in
 * between). It does not touch the workspace. It calls grads_ready as in the
 * fused backward (ln_f's prefix, then each layer's from last to first, then
 * n_elems), which is right because B already finished everything in those
 * prefixes but the linear weights. With a DP hook armed for the last
 * micro-batch, that micro-batch's W must be the stage's last W (as in
 * ZB-H1).
 *
 * The slot stays acquired from forward until after W (the caller releases
 * it). With the same operations in the same order per micro-batch, B then W
 * gives tri_chunk_backward's gradients and dL/dx bit for bit. */
void tri_chunk_backward_input(tri_gpt *g, tri_slot_pool *p, tri_slot *s, tri_workspace *ws, const void *dy);
void tri_chunk_backward_weight(tri_gpt *g, tri_slot_pool *p, tri_slot *s, tri_workspace *ws);

#endif
