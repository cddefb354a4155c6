/* A few training steps of a tiny GPT on one context, for the tests that
 * compare two runs of the same steps (the profile's wrapping table against
 * the plain one, one backend against another). */
#ifndef TRI_TINY_STEPS_H
#define TRI_TINY_STEPS_H

#include <stddef.h>

#include "kernels/ctx.h"
#include "kernels/profile.h"
#include "parallel/comm.h"

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
    float *m, *v;        /* tt_tiny_steps_opts only: the final AdamW moments (malloc'd; free them) */
    size_t n_state;      /* their length (the optimizer's n_state[0]) */
} tt_tiny_run;

/* Where a probe of tt_tiny_steps_opts is called: before the backward, after
 * each grads_ready report of it (n_final: the prefix reported final), and
 * after it, before the step's reduction is finished and its update made. */
typedef enum { TT_BWD_START, TT_BWD_READY, TT_BWD_END } tt_bwd_point;

typedef struct tt_tiny_opts {
    int offload;      /* the optimizer's state offloaded (parallel.offload)        */
    double bucket_mb; /* > 0: the gradients reduced in buckets of this size over a
                         group of one, by grad_sync (wired to the backward's
                         grads_ready); 0: no grad_sync                              */
    int zero;         /* with buckets: 0 (plain DP buckets), 1 (ZeRO-1), 2 (ZeRO-2:
                         the reduced shards in their own buffer), 3 (ZeRO-3: the
                         parameters' shards too, gathered after each update)        */
    int overlap;      /* tri_optim_offload_overlap: the buckets start the copies    */
    tri_comm *dp;     /* the gradients' group (NULL: a group of one); with ZeRO over
                         more than one rank, params returns this rank's masters
                         (16-bit) or the whole parameter buffer (fp32)              */
    void (*probe)(void *ctx, int step, tt_bwd_point where, size_t n_final);
    void *probe_ctx;
} tt_tiny_opts;

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
/* The same steps as set by opts (see tt_tiny_opts), the moments returned too. */
void tt_tiny_steps_opts(tri_ctx *ctx, tri_dtype precision, int steps, const tt_tiny_opts *opts, tt_tiny_run *out);

#endif
