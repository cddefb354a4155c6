/* Data-parallel gradient reduction in buckets, overlapped with backward.
 *
 * The gradient buffer is cut into contiguous buckets of about bucket_mb MiB,
 * front to back (the model lays gradients out in the order backward finishes
 * them). During the last micro-batch's backward, the caller reports each time
 * a prefix of the buffer is final (tri_grad_sync_ready, wired to the model's
 * grads_ready hook); every bucket that lies wholly inside that prefix starts a
 * non-blocking all-reduce (sum) over the DP group at once.
 * tri_grad_sync_finish starts what is left and waits for all of them, before
 * clipping and the optimizer step. With dp = 1 nothing is sent.
 *
 * Gradients are pre-scaled by the model (1 / (global_batch * T) per token),
 * so the sum over DP ranks is the global-mean gradient.
 *
 * The distributed optimizer (ZeRO-1, tri_grad_sync_init_zero): the buffers
 * are padded (tri_gpt_pad) and every bucket is a multiple of dp x
 * TRI_ZERO_ALIGN floats, cut into dp equal contiguous shards regardless of
 * parameter boundaries. A final bucket starts a non-blocking reduce-scatter
 * instead of an all-reduce; afterwards DP rank r holds the DP sum of its
 * shard r of every bucket, in place (the rest of the gradient buffer is then
 * undefined). After the optimizer has updated those shards of the
 * parameters, tri_grad_sync_gather_start/wait all-gather them bucket by
 * bucket. Buckets that overlap a deferred range (the tied embedding, which
 * is first summed over the embedding group) start only in
 * tri_grad_sync_finish_deferred.
 *
 * The optimizer offloaded on a GPU (tri_grad_sync_on_bucket): a hook told,
 * once a step and bucket, that the bucket's reduced gradient is complete,
 * as early as this side knows it (during the last micro-batch's backward
 * where the reduction is done by then), so that its copy to the host starts
 * beside the rest of the backward (ZeRO-Offload's schedule).
 *
 * ZeRO-3 (tri_grad_sync_set_pshard): the parameters' shards live in their
 * own buffer too, and the all-gather fills a full buffer from them.
 *
 * ZeRO-2 (tri_grad_sync_set_shard): the reduce-scatter's destination is a
 * separate buffer of this rank's shards only (shard b at offset
 * bounds[b] / dp, the layout of the optimizer's moments), so the caller can
 * release the full gradient buffer once the reduction is over and point the
 * next step's at a new one (tri_grad_sync_set_grads). With dp = 1 the
 * "reduce-scatter" is a copy into that buffer. */
#ifndef TRI_GRAD_SYNC_H
#define TRI_GRAD_SYNC_H

#include <stddef.h>

#include "parallel/comm.h"

typedef struct tri_grad_sync {
    float *grads; /* (n_floats), not owned */
    size_t n_floats;
    tri_comm *dp;   /* not owned */
    size_t *bounds; /* (n_buckets + 1) bucket edges in floats */
    tri_req *reqs;  /* (n_buckets)                            */
    int n_buckets;
    int next;  /* first bucket not started yet           */
    int armed; /* the current backward is the last micro-batch's */
    /* the distributed optimizer (zero == 1) */
    int zero;
    size_t n_real;             /* grads[n_real, n_floats) is padding     */
    void *params;              /* (n_floats) of param_dtype, not owned: the all-gather */
    tri_dtype param_dtype;     /* fp32, or bf16 / fp16 (mixed precision) */
    tri_req *gathers;          /* (n_buckets)                            */
    size_t defer_lo, defer_hi; /* buckets overlapping start late; empty: none */
    float *shard;              /* ZeRO-2: (n_floats / dp) reduced shards, not owned; NULL: in place */
    void *pshard;              /* ZeRO-3: (n_floats / dp) parameter shards of param_dtype, laid out
                                  like shard, not owned: the all-gather's source; NULL: in place */
    /* tri_grad_sync_on_bucket: the hook, its argument, and which buckets it
     * was told of in this step ((n_buckets), cleared by tri_grad_sync_begin) */
    void (*bucket_done)(void *ctx, int bucket);
    void *bucket_done_ctx;
    unsigned char *told;
} tri_grad_sync;

/* Floats each ZeRO shard is a multiple of (64 bytes). */
#define TRI_ZERO_ALIGN 16

/* bucket_mb <= 0: one bucket. */
int tri_grad_sync_init(tri_grad_sync *s, float *grads, size_t n_floats, tri_comm *dp, double bucket_mb);
void tri_grad_sync_free(tri_grad_sync *s); /* NULL-safe */
/* The distributed optimizer: grads (fp32) and params (param_dtype: the
 * all-gather moves the parameters in their own dtype) hold n_floats (a multiple of
 * dp->size * TRI_ZERO_ALIGN, see tri_gpt_pad) of which the first n_real are
 * the model's; buckets of about bucket_mb MiB (<= 0: one), each a multiple of
 * dp->size * TRI_ZERO_ALIGN. Returns 0 or -1 (printed). */
int tri_grad_sync_init_zero(tri_grad_sync *s, float *grads, void *params, tri_dtype param_dtype, size_t n_real,
                            size_t n_floats, tri_comm *dp, double bucket_mb);
/* ZeRO: buckets overlapping grads[lo, hi) are started only by
 * tri_grad_sync_finish_deferred. Without ZeRO (the range changes after the
 * reduction: the tied embedding, summed over the embedding group after it)
 * the reduction is unchanged and only the hook of tri_grad_sync_on_bucket
 * is never told of those buckets. */
void tri_grad_sync_defer(tri_grad_sync *s, size_t lo, size_t hi);
/* ZeRO: this rank's shard of bucket b is [*lo, *hi) of the buffers. */
void tri_grad_sync_shard(const tri_grad_sync *s, int b, size_t *lo, size_t *hi);
/* ZeRO-2: the reduced shards go to shard (tri_grad_sync_shard_floats floats
 * of fp32 backend memory; bucket b's at bounds[b] / dp) instead of in place. */
void tri_grad_sync_set_shard(tri_grad_sync *s, float *shard);
size_t tri_grad_sync_shard_floats(const tri_grad_sync *s);
/* ZeRO-2: the gradient buffer of the coming step (same length), after the
 * caller released the last one. */
void tri_grad_sync_set_grads(tri_grad_sync *s, float *grads);
/* ZeRO-3: the parameters' home is pshard (this rank's shards, param_dtype,
 * laid out like the gradient shards); the all-gathers go from there into
 * the full buffer params (set before each gather: it comes and goes). */
void tri_grad_sync_set_pshard(tri_grad_sync *s, void *pshard);
void tri_grad_sync_set_params(tri_grad_sync *s, void *params);

/* Calls done(ctx, b) once a step for each bucket b whose reduced gradient
 * (in place, or ZeRO-2's shard) is complete for the work the backend runs
 * from then on (its stream order; with NCCL the compute stream has been made
 * to wait for the reduction, which tri_comm_test found finished): from
 * tri_grad_sync_ready, for every bucket whose reduction is done by then (at
 * once where nothing is sent: dp = 1, or a copy), in bucket order; the
 * others from tri_grad_sync_finish, after their waits; ZeRO's deferred ones
 * from tri_grad_sync_finish_deferred; never for the buckets a range given to
 * tri_grad_sync_defer holds without ZeRO. Works with dp = 1 too (every
 * bucket told as the backward reports it final). Returns 0, or -1 after a
 * message. */
int tri_grad_sync_on_bucket(tri_grad_sync *s, void (*done)(void *ctx, int b), void *ctx);
/* Whether the hook was told of bucket b in this step. */
int tri_grad_sync_told(const tri_grad_sync *s, int b);

/* At the start of a step. */
void tri_grad_sync_begin(tri_grad_sync *s);
/* Before each micro-batch's backward: last != 0 for the final one, whose
 * backward starts the bucket all-reduces. */
void tri_grad_sync_set_last(tri_grad_sync *s, int last);
/* grads[0, n_final) will not change any more in this step (ignored unless
 * the current backward is the last micro-batch's). */
void tri_grad_sync_ready(tri_grad_sync *s, size_t n_final);
/* Starts the remaining buckets (but deferred ones) and waits for every one. */
void tri_grad_sync_finish(tri_grad_sync *s);
/* ZeRO: starts the deferred buckets and waits for them (no-op when none). */
void tri_grad_sync_finish_deferred(tri_grad_sync *s);
/* ZeRO: starts the all-gather of bucket b's parameters (every rank's shard,
 * updated); tri_grad_sync_gather_wait completes every one started. */
void tri_grad_sync_gather_start(tri_grad_sync *s, int b);
void tri_grad_sync_gather_wait(tri_grad_sync *s);

/* ZeRO-3 in units (src/train/zero_units.h): the buckets cut again so that
 * each of the n_cuts offsets (floats, any order, each <= n_floats) falls on
 * a bucket edge, an offset that is not a multiple of dp x TRI_ZERO_ALIGN
 * getting the aligned edges on both sides of it (a bucket of one alignment
 * unit around it); the stretches between are cut by bucket_mb as before.
 * Before the shards are laid out (the optimizer, tri_grad_sync_set_shard).
 * Returns 0 or -1 (printed). */
int tri_grad_sync_recut(tri_grad_sync *s, const size_t *cuts, int n_cuts, double bucket_mb);
/* ZeRO-3: starts the all-gather of bucket b's parameters from the shard
 * buffer into dst (where element bounds[b] goes: the caller's buffer may
 * hold any run of whole buckets), completed by tri_comm_wait(s->dp, req);
 * with dp = 1 a copy, done on return. */
void tri_grad_sync_gather_into(tri_grad_sync *s, int b, void *dst, tri_req *req);

#endif
