/* ZeRO-3's units: the parameters gathered a few transformer layers at a time
 * (PyTorch FSDP's wrapped modules), not a whole pipeline chunk at a time.
 *
 * A chunk's flat parameter buffer (model/gpt.h: the head's tensors first,
 * the layers from last to first, the embedding last) is cut into units:
 *   - a layer unit: `unit_layers` consecutive layers of the chunk (its
 *     layers 0..L-1 are unit 0, ...);
 *   - the head unit (final norm; Llama's untied LM head) at the front and
 *     the embedding unit (position and token embedding; the tied LM head)
 *     at the back, where the chunk has them: the chunk's "ends".
 * Each unit is a run of whole gradient buckets (tri_grad_sync_recut puts a
 * bucket edge on every unit edge: an edge inside an alignment unit of
 * dp x TRI_ZERO_ALIGN floats gets a one-unit bucket around it, which the two
 * units beside it both gather), so a unit's gather is the all-gather of its
 * buckets' shards into its own buffer ("window"), and the views of its
 * tensors (tri_gpt_params_view) point there while it is held.
 *
 * When (the chunk's before_layer hook, model/runtime.c, and the stage
 * wrapper of src/train/zero.c):
 *   forward of chunk c   the embedding unit (a chunk with the embedding)
 *                        and the first layer unit start to gather, the
 *                        embedding's is waited for (the embedding runs);
 *                        before the first layer of unit u: unit u-1
 *                        released (not while keeping, below), and at the
 *                        first layer the embedding unit (unless the head
 *                        reads it again: the tied LM head of a chunk with
 *                        both ends), unit u waited for, unit u+1's gather
 *                        started (after the last unit: the head unit, the
 *                        embedding unit for a tied head, and chunk c+1's
 *                        first ones), so u+1's gather overlaps u's
 *                        compute; before the head (the hook with i =
 *                        n_layers) the last layer unit released and the
 *                        head's waited for; after the head, everything of
 *                        chunk c released;
 *   backward (fused or its input half, any recompute)   the other way: the
 *                        head unit and the last layer unit first, then
 *                        before unit u: u+1 released, u waited for, u-1
 *                        started (after unit 0: chunk c-1's first ones);
 *                        the embedding unit is not gathered (its backward
 *                        reads no weights); at the end all released;
 *   backward_weight      nothing: the weight gradients read no weights.
 * keep (parallel.zero_keep_params, a training forward): nothing released in
 * the forward; the backward releases as it goes.
 * So outside a forward with keep, at most two layer units of a chunk are
 * gathered, with the embedding unit of a chunk with both ends (one chunk
 * per rank, tied), or its head unit next to the last layer unit (with
 * several chunks on a rank, plus the next chunk's first ones, started
 * early). unit_layers 0: the whole chunk is one unit
 * (buffer [0, n_alloc), no ends), gathered at the chunk's start: the
 * chunk-wide gather. */
#ifndef TRI_TRAIN_ZERO_UNITS_H
#define TRI_TRAIN_ZERO_UNITS_H

#include "kernels/ctx.h"
#include "model/gpt.h"
#include "parallel/grad_sync.h"

typedef struct zero_units zero_units;

/* The buckets of every chunk cut on its unit edges (sync[k] for chunk k, made
 * with tri_grad_sync_init_zero; before the optimizer lays out its shards).
 * 0 or -1 (printed). */
int zero_units_cut(const tri_gpt *g, tri_grad_sync *sync, int unit_layers, double bucket_mb);
/* The units of every chunk over the cut buckets, each chunk's before_layer
 * hook set; nothing gathered. NULL (printed) when memory is short. */
zero_units *zero_units_new(tri_gpt *g, tri_grad_sync *sync, tri_ctx *ctx, int unit_layers);
/* Everything released, the hooks removed. NULL-safe. */
void zero_units_free(zero_units *z);

/* Chunk c's forward (backward 0) or backward (1) begins: its first units
 * started and its ends waited for; keep (forward only): nothing of it is
 * released before its backward. */
void zero_units_begin(zero_units *z, int c, int backward, int keep);
/* Chunk c's forward or backward is over: its units released (none after a
 * forward begun with keep). */
void zero_units_end(zero_units *z, int c);
/* Every unit of every chunk released (their views point at nothing). */
void zero_units_release_all(zero_units *z);
/* Bytes gathered now (every unit's window held or on its way). */
size_t zero_units_bytes(const zero_units *z);

#endif
