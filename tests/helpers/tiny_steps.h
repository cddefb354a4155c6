/* A few training steps of a tiny GPT on one context, for the tests that
 * compare two runs of the same steps (the profile's wrapping table against
 * the plain one, one backend against another). */
#ifndef TRI_TINY_STEPS_H
#define TRI_TINY_STEPS_H

#include <stddef.h>

#include "kernels/ctx.h"
#include "kernels/profile.h"

#define TT_TINY_MAX_STEPS 8

/* The model: 2 layers, n_embd 32, 2 heads, seq_len 16, vocab 100; micro-batch 2. */
#define TT_TINY_LAYERS 2

typedef struct tt_tiny_run {
    double loss[TT_TINY_MAX_STEPS]; /* each step's mean loss                       */
    float *params;                  /* the final fp32 weights (malloc'd; free them) */
    size_t n;
    double wall_ms;      /* the steps' wall time, profile reads included */
    tri_prof_totals tot; /* with a profile: its totals after the steps   */
    tri_mem_stats mem;   /* the context's accounting after the steps, model and optimizer still allocated */
    int shards_done;     /* ZeRO: the optimizer's shard_done calls */
} tt_tiny_run;

/* `steps` (<= TT_TINY_MAX_STEPS) AdamW steps (clipping, weight decay) of the
 * tiny GPT on ctx (started, fp32) in `precision`: the same seed, data and
 * schedule on every call. profile < 0: no profile; else the ops are timed by
 * a profile started after the model is built (roles given; `profile` pairs
 * of marks, 0 for the default), read with tri_profile_step after every step
 * and stopped at the end. Criterion asserts on any failure. */
void tt_tiny_steps(tri_ctx *ctx, tri_dtype precision, int steps, int profile, tt_tiny_run *out);
/* The same with the optimizer's state offloaded (parallel.offload) or not. */
void tt_tiny_steps_offload(tri_ctx *ctx, tri_dtype precision, int steps, int offload, tt_tiny_run *out);
/* The same through the distributed optimizer (ZeRO-1) over a group of one,
 * the buffers padded and cut into buckets of bucket_mb MiB (at least 3). */
void tt_tiny_steps_zero(tri_ctx *ctx, tri_dtype precision, int steps, int offload, double bucket_mb, tt_tiny_run *out);

#endif
