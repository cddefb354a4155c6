/* The Llama block of one TP rank: RMSNorm, the qkv linear (q|k|v heads of
 * this rank, column-parallel), RoPE on q and k, grouped-query attention, the
 * o linear (row-parallel), the residual, RMSNorm, the gate|up linear
 * (column-parallel), SwiGLU, the down linear (row-parallel), the residual.
 * No biases. Same contracts as the GPT-2 block of model/runtime.h
 * (tri_block_fwd, _bwd, _bwd_input, _bwd_weight), which calls these for a
 * Llama; the buffers are model/acts.h's with the Llama shapes it gives.
 *
 * Replicated KV heads (tp > n_kv_head, g->kv_rep ranks per KV head): each
 * rank's k and v weight gradients come from its own query heads only; the
 * backward sums them over the ranks of the head (an all-reduce over the TP
 * group of a buffer holding every KV head, each rank filling its own), so
 * the replicas take the same gradient and stay equal. */
#ifndef TRI_LLAMA_H
#define TRI_LLAMA_H

#include "model/acts.h"
#include "model/gpt.h"

void tri_llama_block_fwd(tri_gpt *g, int k, int l, tri_layer_acts *a, const void *x, void *y, tri_workspace *ws,
                         size_t B, size_t T);
void tri_llama_block_bwd(tri_gpt *g, int k, int l, const tri_layer_acts *a, const void *x, tri_workspace *ws, size_t B,
                         size_t T);
void tri_llama_block_bwd_input(tri_gpt *g, int k, int l, const tri_layer_acts *a, const void *x, tri_workspace *ws,
                               const tri_layer_douts *d, size_t B, size_t T);
/* W of zero-bubble schedules; its only collective is the replicated KV
 * heads' sum above (every TP rank of a stage runs the same W sequence). */
void tri_llama_block_bwd_weight(tri_gpt *g, int k, int l, const tri_layer_acts *a, const tri_layer_douts *d,
                                tri_workspace *ws, size_t B, size_t T);

#endif
