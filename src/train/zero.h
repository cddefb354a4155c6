/* ZeRO-2 and ZeRO-3 around the trainer (parallel.zero = 2 | 3).
 *
 * ZeRO-1 (model/optim.c, parallel/grad_sync.c) already reduce-scatters each
 * gradient bucket over the data-parallel group as backward finishes it, and
 * the optimizer updates only this rank's shard; the full gradient and
 * parameter buffers stay allocated for the whole run.
 *
 * ZeRO-2 keeps, between steps, only the reduced gradient shards: each
 * chunk's reduce-scatter writes into a buffer of 1/dp of the chunk
 * (tri_grad_sync_set_shard), the optimizer and the gradient norm read it,
 * and the chunk's full fp32 gradient buffer is released once the step's
 * reduction is over and allocated again (zeroed) when the next step begins.
 * Trident's backward accumulates every weight gradient in place in that
 * buffer over the step's micro-batches, so it exists from a step's start to
 * the end of its reduction (stage 2's working set; docs/parallelism.md).
 *
 * ZeRO-3 adds the parameters: each chunk's home is a shard buffer of 1/dp
 * (the optimizer updates it, tri_grad_sync_set_pshard), and the parameters
 * are gathered in units of parallel.zero_unit_layers layers (plus a unit at
 * each end of the chunk: head, embedding), src/train/zero_units.h says
 * exactly when. In short: the pipeline stage's callbacks are wrapped
 * (zero_wrap_stage) and the runtime calls a hook before each layer, so that
 * a unit is all-gathered just before its first layer runs, in the forward
 * and again in the backward (the input half of zb-h1's, and the forward
 * that full recompute reruns inside it; the weight half reads no weights
 * and gathers nothing), the next unit's gather started meanwhile (after a
 * chunk's last unit, the next chunk's first ones), and the previous unit
 * released; the embedding unit goes after the embedding unless the tied
 * head reads it again (one chunk with both ends: then it stays for the
 * forward), the head unit comes with the last layer unit, the backward
 * gathers the head's but not the embedding's. About two units are gathered
 * at a time, not the chunk.
 * parallel.zero_keep_params keeps a training forward's units until its
 * backward; parallel.zero_unit_layers = 0 gathers each chunk whole. A
 * checkpoint save or load gathers every chunk whole around itself. The
 * parameter peak within the first step is printed (zero_step_reduced).
 *
 * Every collective here takes the gradient-reduction group of zero_group()
 * in zero.c (tri_dist_grad_group: dp, or dp x cp), through the buckets made
 * with it. */
#ifndef TRI_TRAIN_ZERO_H
#define TRI_TRAIN_ZERO_H

#include "train/trainer.h"

/* After the buckets and the optimizer are made (trainer_setup): the shard
 * buffers, and the full gradient buffers released. 0, or -1 (printed). */
int zero_setup(trainer *t);
/* ZeRO-3, once the parameters are set (initialised, imported or loaded into
 * the full buffers, as on every rank): each rank's shards copied into their
 * buffers and the full ones released. Also after a rollback's load. 0 or -1. */
int zero_params_shard(trainer *t);
/* ZeRO-3: the stage's callbacks wrapped (gather before, release after);
 * *view is replaced. 0 or -1 (printed). No-op below stage 3. */
int zero_wrap_stage(trainer *t, tri_pipe_stage *view);
/* ZeRO-3, once the buckets are made and before the optimizer lays out its
 * shards: the buckets cut on the units' edges (parallel.zero_unit_layers)
 * and the units made. 0 or -1 (printed). No-op below stage 3. */
int zero_split_units(trainer *t);
/* ZeRO-3, collective over the group: every chunk's full parameters (for a
 * checkpoint save or load), then released again. No-ops below stage 3. */
int zero_params_gather_all(trainer *t);
void zero_params_release_all(trainer *t);
/* At the start of train_step: the step's gradient buffers (zeroed). 0 or -1 (printed). */
int zero_step_begin(trainer *t);
/* Once the step's reduction (deferred buckets included) is over. */
void zero_step_reduced(trainer *t);
/* The shard buffers (before the buckets and the context are freed). NULL-safe. */
void zero_free(trainer *t);
/* The memory held between steps against the closed form, one line on stdout
 * (the logger, zero >= 1). */
void zero_report(const trainer *t);

/* Bytes per parameter per rank held between steps under ZeRO stage `zero`
 * (0..3) over d data-parallel ranks, for parameters of param_bytes (4: fp32,
 * 2: bf16/fp16) with fp32 gradients and AdamW's fp32 moments (plus fp32
 * master weights when the parameters are 16-bit); padding aside. */
double zero_bytes_per_param(int zero, int d, int param_bytes);

#endif
