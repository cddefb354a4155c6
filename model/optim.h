/* AdamW over a model's parameter tables: learning-rate schedule, global
 * gradient norm and clipping, and the update. The moments live in flat
 * buffers laid out like each chunk's parameters (fp32, the master dtype). */
#ifndef TRI_OPTIM_H
#define TRI_OPTIM_H

#include "model/gpt.h"
#include "parallel/grad_sync.h"

/* Where the optimizer's state lives (parallel.offload): with the parameters
 * in backend memory, or (TRI_OFFLOAD_OPTIMIZER) in host memory, the fp32
 * master weights and both AdamW moments, with the step run by the host on
 * it (ZeRO-Offload; docs/parallelism.md, "Optimizer offload"). */
typedef enum tri_offload { TRI_OFFLOAD_NONE = 0, TRI_OFFLOAD_OPTIMIZER = 1 } tri_offload;

/* The optimizer's settings (train.* of the config). Fill it with designated
 * initialisers: `(tri_adamw_cfg){.lr = ..., .beta2 = ...}`. */
typedef struct tri_adamw_cfg {
    double lr, min_lr;   /* peak learning rate; the floor of the cosine decay */
    int warmup_steps;    /* linear warmup from lr/warmup_steps to lr          */
    int total_steps;     /* the cosine decay reaches min_lr here              */
    double beta1, beta2; /* AdamW's moment decay rates                        */
    double eps;          /* AdamW's denominator term                          */
    double weight_decay; /* decoupled; only parameters with decay set         */
    double grad_clip;    /* global gradient-norm clip, 0: off (the caller scales: tri_optim_step) */
    tri_offload offload; /* OPTIMIZER: the state in host memory (parallel.offload) */
} tri_adamw_cfg;

typedef struct tri_optim {
    tri_adamw_cfg cfg;
    int n_chunks;
    float **m, **v; /* [n_chunks] of (n_state[k]): exp_avg, exp_avg_sq; backend memory */
    /* [n_chunks]: the fp32 master weights of chunk k's parameters when they
     * are 16-bit (mixed precision), laid out like m[k] and v[k] (so with
     * ZeRO only this rank's shards); NULL for fp32 parameters, which are
     * their own master weights. Optimizer memory (TRI_MEM_OPTIM). */
    float **master;
    int t;           /* updates done so far                                     */
    size_t *n_state; /* [n_chunks]: chunk n_elems, or (ZeRO) this rank's share */
    /* The distributed optimizer (ZeRO-1): sync[k] cuts chunk k's buffers into
     * buckets and this DP rank's shard of each; m[k], v[k] hold the state of
     * those shards only, one after the other in bucket order. fp32
     * parameters are their own master weights: the rank updates its shards
     * of param_mem in place. NULL: every element, laid out like the chunk.
     * ZeRO-2: sync[k].shard holds the reduced gradient shards, laid out like
     * m[k] (the full gradient buffer is gone after the reduction). */
    const tri_grad_sync *sync; /* [n_chunks], not owned */
    /* ZeRO: called after each bucket's shard is updated (may be NULL) */
    void (*shard_done)(void *ctx, int chunk, int bucket);
    void *shard_done_ctx;
    /* host table of one multi-tensor AdamW call (tri_ctx_adamw_multi): the
     * parameters of one chunk, or of one ZeRO bucket's shard */
    tri_adamw_span *spans;
    /* parallel.offload = optimizer: m, v and master are host-side memory
     * (tri_ctx_host_alloc, counted as host memory). On a backend whose memory
     * is apart from the host's (a GPU; host_step 1) the step runs on the
     * host, in the host context below (the CPU backend's ops), on staging
     * copies of each unit's gradients (hgrad[k], laid out like m[k]) and
     * parameters (hparam[k]: the fp32 parameters, or the 16-bit ones rounded
     * from the masters), ZeRO-Offload's schedule (tri_optim_step,
     * tri_optim_offload_overlap). On the
     * CPU backends (host_step 0) only the accounting changes. */
    int offload, host_step;
    tri_ctx *host;                /* the host's context (host_step), owned */
    float **hgrad;                /* [n_chunks] (n_state[k]) fp32, host_step only */
    void **hparam;                /* [n_chunks] (n_state[k]) of the parameters' dtype */
    struct tri_optim_unit *units; /* [n_units]: the stretches the host step moves */
    int n_units;
    /* tri_optim_offload_overlap: the gradient buckets ([n_chunks], not
     * owned; NULL: none) whose hook starts a unit's copies during the
     * backward, the unit of chunk k's bucket 0, and the hooks' arguments */
    tri_grad_sync *overlap;
    int *first_unit;
    struct tri_optim_hook *hooks;
} tri_optim;

int tri_optim_init(tri_optim *o, const tri_gpt *g, const tri_adamw_cfg *cfg);
/* The distributed optimizer: state for this rank's shards of sync[k] (one
 * per chunk, made by tri_grad_sync_init_zero) only. */
int tri_optim_init_zero(tri_optim *o, const tri_gpt *g, const tri_adamw_cfg *cfg, const tri_grad_sync *sync);
void tri_optim_free(tri_optim *o, const tri_gpt *g); /* NULL-safe */
/* The master weights widened (exactly) from the 16-bit parameters, for a
 * fresh start (tri_gpt_init_params); a no-op for fp32 chunks. A checkpoint
 * load sets them itself (tri_model_load). */
void tri_optim_master_from_params(tri_optim *o, const tri_gpt *g);

/* Copies between host memory and a buffer of the optimizer's state or of
 * the model (the checkpoint reader and writer): a plain memcpy where the
 * buffer is the state kept in host memory (host_step), else the staging
 * copies of kernels/ctx.h on g's context. */
void tri_optim_copy_to_host(const tri_optim *o, const tri_gpt *g, void *host, const float *src, size_t bytes);
void tri_optim_copy_from_host(const tri_optim *o, const tri_gpt *g, float *dst, const void *host, size_t bytes);

/* Calls fn for every run of elements of parameter i of chunk k whose state
 * this rank keeps: local elements [a, e) of the parameter (row-major over its
 * local shape) at state index s0 of m[k], v[k]. Without ZeRO: one run, the
 * whole parameter at its offset. */
void tri_optim_runs(const tri_optim *o, const tri_gpt *g, int k, int i,
                    void (*fn)(void *ctx, size_t a, size_t e, size_t s0), void *ctx);

/* Learning rate for 0-based step s: linear warmup from lr/warmup to lr over
 * warmup_steps, then cosine decay to min_lr at total_steps (min_lr after). */
double tri_lr_at(const tri_adamw_cfg *cfg, int s);

/* Sum of squares of this rank's gradients over every chunk, counting each
 * replicated tensor only on TP rank 0 (it is identical on every TP rank) and
 * the tied token embedding only in the chunk that holds the embedding (the
 * head stage's copy has the same, reduced gradient), so that the sum over the
 * TP and PP groups is the sum over the global model. */
double tri_grad_sumsq_local(const tri_gpt *g);
/* The same over this rank's ZeRO shards only (after the reduce-scatter):
 * the sum over the DP, TP and PP groups is the global model's. */
double tri_grad_sumsq_shards(const tri_optim *o, const tri_gpt *g);

/* ZeRO-Offload's overlap of the gradients' way to the host with the
 * backward (host_step only; a no-op returning 0 otherwise, so the CPU
 * backends are unchanged): sync[k] is chunk k's gradient reduction (the
 * optimizer's own ZeRO sync, or without ZeRO the DP buckets, whose cuts
 * then become the host step's units). Registers a hook
 * (tri_grad_sync_on_bucket) that starts a unit's copies to the host (its
 * reduced gradients, and fp32 parameters) the moment grad_sync knows its
 * bucket reduced, during the last micro-batch's backward where it can; the
 * units it has not started by tri_optim_step start there. The caller wires
 * the chunks' grads_ready to tri_grad_sync_ready (also at dp = 1, where the
 * buckets are told as the backward finishes them). sync must outlive the
 * optimizer's use of it. Returns 0, or -1 after a message. */
int tri_optim_offload_overlap(tri_optim *o, const tri_gpt *g, tri_grad_sync *sync);

/* One AdamW update of every parameter of every chunk with the given lr, after
 * scaling the gradients by clip_scale (1 when not clipping; fp16 folds the
 * loss scale's inverse into it). The update runs on the fp32 master weights;
 * 16-bit parameters are then rounded from them (the cast op). Biases, LayerNorm
 * weights and embeddings take no weight decay. With ZeRO only this rank's
 * shards (gradients and parameters), each element decayed as the parameter
 * it belongs to; the caller all-gathers the parameters after.
 * Offloaded on a GPU (host_step), by ZeRO-Offload's schedule: each unit's
 * gradients (a chunk, or a bucket: a ZeRO bucket's shard, or with
 * tri_optim_offload_overlap a DP bucket) go to the host on the copy stream;
 * with tri_optim_offload_overlap each unit's copy started during the
 * backward as its bucket was reduced, and the rest start here, at once; the
 * host then waits for one unit's copy at a time, scales the gradients, runs
 * AdamW on it with the CPU backend's op (the same bits as the CPU backend),
 * rounds the parameters, and starts them back, while the next units'
 * gradients are still arriving and the earlier units' parameters are on
 * their way back (shard_done after each unit's copy is ordered before what
 * the device runs next); the device's next ops wait for the last copy. The
 * numbers are those of the CPU backend's AdamW on the same gradients,
 * whichever unit started when. */
void tri_optim_step(tri_optim *o, tri_gpt *g, double lr, float clip_scale);

/* Where element 0 of chunk 0's reduced gradient lies on this rank once the
 * step's reduction is over (test faults write a non-finite value there):
 * grad_mem, or under ZeRO-2 the start of the shard buffer on the DP rank
 * whose shard holds it, NULL on the others (which never read it). */
float *tri_optim_grad0(const tri_optim *o, tri_gpt *g);

#endif
