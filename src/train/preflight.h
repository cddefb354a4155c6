/* Preflight: what a training run will need, checked on every rank before
 * the model is allocated, so that a run is refused at once with the figures
 * instead of being killed by the kernel, or training for hours and then
 * failing to save. trainer_setup (src/train/setup.c) calls tri_preflight_run
 * right after the data files are opened; `trident bench` goes through the
 * same set-up (synthetic data: no data, tokenizer, log or disk checks).
 *
 * In order, stopping at the first failure:
 *   1. config hazards: train.beta1 / beta2 that round to 1 in fp32 (AdamW's
 *      bias correction would divide by zero at step 1);
 *   2. sizes: every byte count of the parameters, gradients, optimizer
 *      state, activations and parameter table computed with overflow checks
 *      (a size that does not fit in 64 bits is refused naming the keys);
 *   3. memory: this rank's estimate times the ranks on this node against
 *      the memory available (MemAvailable of /proc/meminfo, and the cgroup's
 *      memory.max minus memory.current; cgroup v1: memory.limit_in_bytes
 *      minus memory.usage_in_bytes); --skip-memory-check skips only this;
 *   4. data.tokenizer (when set) loads, and holds at most model.vocab_size
 *      tokens;
 *   5. data.val is opened and checked even when train.eval_every is 0 (the
 *      set-up itself opens data.train and an evaluated data.val), and
 *      train.eval_batches is capped at one pass over the validation windows;
 *   6. log.dir is created and a probe file written in it (rank 0);
 *   7. the filesystem of checkpoint.dir has room for one checkpoint.
 * The outcome is all-reduced over the world, so every rank stops together.
 *
 * The sizes are first bounded with checked arithmetic (fp32, no ZeRO) in
 * preflight_activation_bytes and tri_preflight_rank_bytes, so that an
 * overflow names the keys. A training estimate is then the planner's memory
 * of the rank's pipeline stage (tri_plan_stage_mem, src/plan/plan.h: the bytes
 * the allocator counts, in train.precision's dtypes, with ZeRO's padding and
 * 1/dp optimizer shard, the schedule's saved slots under train.recompute and
 * parallel.vpp, the workspace and the pipeline's mailbox); evaluation and
 * sampling (training 0) keep the fp32 figures of one micro-batch. */
#ifndef TRI_PREFLIGHT_H
#define TRI_PREFLIGHT_H

#include <stddef.h>

#include "data/sampler.h"
#include "parallel/dist.h"
#include "config/config.h"

/* One rank's memory, in bytes. */
typedef struct tri_mem_estimate {
    size_t params; /* this rank's parameter slice in its dtype              */
    size_t grads;  /* fp32 gradients                                        */
    size_t optim;  /* AdamW's two fp32 moments (+ fp32 master weights when
                      the parameters are 16-bit); a 1/dp shard under ZeRO   */
    size_t acts;   /* saved activations (slots x slot bytes) and workspace
                      (with the pipeline's mailbox when training)           */
    size_t other;  /* parameter table, batch buffers, caller's extras       */
    size_t host;   /* parallel.offload = optimizer: the optimizer's state, kept
                      in host memory (optim is then 0); counted in total,
                      which is all host memory on the CPU backend          */
    size_t total;  /* the sum; SIZE_MAX if it overflowed                    */
} tri_mem_estimate;

/* Memory this process may still use, in bytes; SIZE_MAX where unknown or
 * unlimited. */
typedef struct tri_mem_avail {
    size_t meminfo;   /* MemAvailable                                    */
    size_t cg_limit;  /* the cgroup's limit                              */
    size_t cg_free;   /* that limit minus the cgroup's current usage     */
    size_t available; /* min(meminfo, cg_free)                           */
    size_t as_limit;  /* this process's address-space limit (ulimit -v,
                         prlimit --as): what one rank may map, whatever the
                         machine has; 0: none                             */
} tri_mem_avail;

typedef struct tri_preflight {
    /* in */
    const tri_config *cfg;
    tri_dist *dist;
    int synthetic;          /* bench: no data files, tokenizer, logs or checkpoints */
    int skip_memory_check;  /* --skip-memory-check                         */
    int verbose;            /* rank 0 prints notes and the summary line     */
    const tri_sampler *val; /* the validation data the run evaluates, or NULL */
    /* out */
    int eval_batches;     /* train.eval_batches capped at one pass over val */
    tri_mem_estimate mem; /* this rank's estimate                         */
} tri_preflight;

/* Runs the checks above on every rank (collective over p->dist->world).
 * Returns 0, or -1 on every rank after the failing rank printed one line
 * naming the key, file or figures (the caller exits with 2). */
int tri_preflight_run(tri_preflight *p);

/* The size and memory checks alone (steps 1 to 3) for the rank at
 * (tp_rank, pp_rank) of cfg's layout, not collective: for commands that
 * allocate before tri_train (bench's sgemm probe, extra_bytes) or outside
 * it (eval and sample, training = 0: fp32 parameters, gradients and
 * activations of a micro-batch of micro_batch sequences, no optimizer).
 * Training: the planner's figures (above) for micro-batches of micro_batch
 * sequences. check_memory 0 keeps only the overflow checks. Returns 0 or -1
 * (printed). */
int tri_preflight_model(const tri_config *cfg, size_t micro_batch, int tp_rank, int pp_rank, size_t extra_bytes,
                        int training, int check_memory, tri_mem_estimate *out);

/* The estimate from its figures: n_floats this rank's parameter floats
 * (tri_gpt_describe's n_floats), act_bytes its activations and workspace,
 * other_bytes the rest. Parameters and gradients take 4 bytes per float,
 * the optimizer (training only) 8. Fills *e; returns e->total (SIZE_MAX on
 * overflow). */
size_t tri_preflight_rank_bytes(size_t n_floats, size_t act_bytes, size_t other_bytes, int training,
                                tri_mem_estimate *e);

/* Bytes of one checkpoint of the model on disk: 4 bytes per parameter in
 * model.safetensors, 8 in optimizer.safetensors, plus headers and the JSON
 * files. SIZE_MAX on overflow. */
size_t tri_preflight_checkpoint_bytes(const tri_model_cfg *m);

/* The "MemAvailable:" figure of a /proc/meminfo text, in bytes; -1 if absent. */
int tri_preflight_parse_meminfo(const char *text, size_t *bytes);
/* A cgroup memory file (memory.max, memory.current, v1 limit_in_bytes):
 * a decimal byte count, or "max" (SIZE_MAX). -1 if neither. */
int tri_preflight_parse_cgroup(const char *text, size_t *bytes);
/* What this process may still use, from /proc/meminfo and its cgroup. */
void tri_preflight_available(tri_mem_avail *a);
/* Refuses (-1, one line with both figures and the override) when need
 * bytes (per rank) times local_ranks exceed a->available. */
int tri_preflight_check_memory(const tri_mem_estimate *e, int local_ranks, const tri_mem_avail *a);

/* The sentence to print when the loss or gradient norm stops being finite
 * after `updates_done` optimizer updates: the config values that can make
 * AdamW diverge (a high lr, clipping off, lr x weight_decay, beta2 near 1,
 * beta1 above sqrt(beta2)), or, before any update, that the optimizer is not
 * the cause. Written into buf; returns buf. */
const char *tri_preflight_divergence_hint(const tri_config *cfg, int updates_done, char *buf, size_t n);

#endif
