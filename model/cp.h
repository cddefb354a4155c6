/* Context parallelism (parallel.cp; docs/parallelism.md "Context
 * parallelism"): each micro-batch's sequence of T positions is cut into
 * 2 cp chunks of Tc = T / (2 cp); rank r of the CP group holds chunks r and
 * 2cp-1-r (Megatron's causal load balance: every rank gets the same share of
 * the causal mask's work), inputs and targets alike, one after the other:
 * its local sequence of Tl = 2 Tc rows. Every op but attention is row-wise
 * and runs on the local rows as they are; what depends on the position (the
 * learned position embedding, RoPE) takes the global positions; attention
 * runs as a ring: the key/value blocks of the CP ranks pass around the group
 * (non-blocking p2p, the next block's transfer overlapped with the current
 * block's compute), each merged into the local output by its log-sum-exp;
 * the backward passes the blocks again with their key/value gradients
 * travelling with them back to their owner.
 *
 * The causal mask by global position, for the queries of rank r against the
 * block of rank s (each half is one chunk):
 *   s == r: causal by local index (chunk r before chunk 2cp-1-r, both in
 *           order): the plain causal block;
 *   s <  r: every query sees s's first chunk (s < r), none sees its second
 *           (2cp-1-s > 2cp-1-r);
 *   s >  r: r's first chunk sees nothing of s (s > r, 2cp-1-s >= cp > r);
 *           r's second chunk sees both of s's (s < 2cp-1-s < 2cp-1-r).
 * So every block but the own one is a rectangle without a mask: all rows
 * against half the keys, or half the rows against all the keys.
 *
 * With cp 1 (g->cp <= 1) every call below is the plain op. */
#ifndef TRI_CP_H
#define TRI_CP_H

#include <stddef.h>
#include <stdint.h>

#include "model/acts.h"
#include "model/gpt.h"

/* Context parallelism over comm (size cp, this rank comm->rank), before any
 * slot pool or workspace is made. Needs the backend's ring ops (kernels/ops.h
 * attention_block_*) and a state that is the log-sum-exp; returns 0, or -1
 * with a message naming parallel.cp and the backend. cp == 1: nothing. */
int tri_cp_set(tri_gpt *g, tri_comm *comm);

/* The global position of local row i (< Tl) of rank r of cp ranks. */
size_t tri_cp_position(size_t i, size_t Tl, int cp, int r);

/* This rank's share of B sequences of T tokens each, in place: x (B, T) host
 * ints becomes x (B, T / cp) = per sequence chunk r then chunk 2cp-1-r. */
void tri_cp_local_tokens(int32_t *x, size_t B, size_t T, int cp, int r);

/* out (B T, C) = the token embedding of ids plus wpe at the global
 * positions (wpe may be NULL): embedding_fwd per chunk. */
void tri_cp_embedding_fwd(tri_gpt *g, void *out, const int32_t *ids, const void *wte, const void *wpe, size_t B,
                          size_t T);
/* embedding_bwd with dwpe's rows at the global positions (dwpe may be NULL). */
void tri_cp_embedding_bwd(tri_gpt *g, float *dwte, float *dwpe, const void *dout, const int32_t *ids, size_t B,
                          size_t T);
/* rope_fwd (inverse 0) or rope_bwd (1) on qkv at the global positions. */
void tri_cp_rope(tri_gpt *g, void *qkv, size_t B, size_t T, int inverse);

/* Causal attention of the local rows: attention_fwd, or the ring. out and
 * state as attention_fwd's (the state is the log-sum-exp under cp). */
void tri_cp_attention_fwd(tri_gpt *g, tri_workspace *ws, void *out, float *state, const void *qkv, size_t B, size_t T);
/* Its backward: attention_bwd (ws->att_scratch), or the ring. dqkv [overwrite]. */
void tri_cp_attention_bwd(tri_gpt *g, tri_workspace *ws, void *dqkv, const void *dout, const void *qkv, const void *out,
                          const float *state, size_t B, size_t T);

#endif
