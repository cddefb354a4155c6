/* The run configuration: one JSON file (cJSON) plus `--set section.key=value`
 * overrides. One field table in config.c drives parsing, defaults,
 * validation, `--help` and the echo at start-up, so none of them can drift.
 *
 * Errors (unknown section or key, wrong JSON type, value out of range,
 * missing or unparsable file, malformed --set) print one line naming the file
 * and the key, e.g.
 *   trident: configs/x.json: train.lr: expected a number > 0, got -1
 * and the loader returns -1; the caller exits with code 2 before any
 * allocation or training.
 *
 * Choices (recompute, precision, schedule, checkpoint dtype, device) are
 * enums, parsed once here from the names in the field table; the rest of the
 * program never compares their text.
 */
#ifndef TRI_CONFIG_H
#define TRI_CONFIG_H

#include <stdint.h>
#include <stdio.h>

#include "kernels/ctx.h"       /* tri_device, tri_dtype */
#include "model/config.h"
#include "model/optim.h"       /* tri_offload */
#include "model/runtime.h"     /* tri_recompute */
#include "parallel/schedule.h" /* tri_sched_kind */

#define TRI_PATH_MAX 1024

/* Most ranks a config may ask for (parallel.tp x pp x dp): 2^20, 64 times the
 * largest published training job; every product of the sizes then fits an int. */
#define TRI_CONFIG_MAX_WORLD (1 << 20)
/* Most virtual pipeline chunks per stage (parallel.vpp). */
#define TRI_CONFIG_MAX_VPP 16
/* Most micro-batches per step on one DP rank (global_batch / (micro_batch x
 * dp)): the pipeline schedule and its simulator hold a few actions each, and
 * `trident schedule --micro-batches` has the same bound. */
#define TRI_CONFIG_MAX_MICRO 65536

typedef struct tri_train_cfg {
    int global_batch;  /* sequences per optimizer step, over all DP ranks */
    int micro_batch;   /* sequences per forward/backward on one rank      */
    int steps;         /* optimizer steps (0: write the initial model)    */
    double lr, min_lr; /* peak and final learning rate                    */
    int warmup_steps;  /* linear warmup, then cosine decay to min_lr      */
    double weight_decay;
    double grad_clip; /* global-norm clip; 0 disables                    */
    double beta1, beta2, eps;
    uint64_t seed;
    int eval_every;         /* steps between val-loss evaluations; 0: never    */
    int eval_batches;       /* micro-batches per evaluation                    */
    tri_recompute recompute; /* activation checkpointing: none | selective | full    */
    tri_dtype precision;     /* TRI_F32 | TRI_BF16 | TRI_F16 (docs/precision.md)     */
    double loss_scale_init; /* fp16: the dynamic loss scale at step 1          */
    int loss_scale_window;  /* fp16: clean steps before the scale doubles      */
    int skip_spikes;        /* 1: a loss above spike_factor x its running mean is skipped */
    double spike_factor;    /* (src/train/badstep.h)                           */
    int max_bad_steps;      /* this many bad steps in a row: roll back; 0: never */
    char skip_samples[512]; /* global sample ranges never read: "b-e,b-e" ([b, e)) */
} tri_train_cfg;

typedef struct tri_data_cfg {
    char train[TRI_PATH_MAX];     /* token file, or a blend "0.7:a.bin,0.3:b.bin" */
    char val[TRI_PATH_MAX];       /* token file for validation; "" for none    */
    char tokenizer[TRI_PATH_MAX]; /* tokenizer.json; "" for raw bytes (vocab 256) */
    double split;                 /* > 0: this fraction of each train file's windows
                                 (its tail) is held out for validation when val is "" */
} tri_data_cfg;

typedef struct tri_parallel_cfg {
    int tp, pp, dp;
    int cp;                /* context-parallel ranks (ring attention); world = tp*cp*pp*dp */
    int vpp;               /* virtual pipeline chunks per stage              */
    tri_sched_kind schedule; /* 1F1B | INTERLEAVED | GPIPE | ZBH1; 1F1B with vpp > 1
                                runs interleaved (src/plan/stage_plan.h resolves it) */
    char pp_layout[256];   /* layers per stage or chunk, "3,4,4,3"; "": even */
    double bucket_mb;      /* gradient all-reduce bucket size, MiB            */
    double timeout_s;      /* deadline of every communication wait; 0: none  */
    int sequence_parallel; /* 1: LayerNorms, residuals and the embedding output run on
                              sequence shards (needs tp > 1 and seq_len % tp == 0) */
    int zero;              /* ZeRO stage over DP: 1 optimizer, 2 + gradients, 3 + parameters */
    int zero_keep_params;  /* ZeRO-3: a chunk's gathered parameters kept from its forward
                              until its backward (one gather per micro-batch, not two) */
    int zero_unit_layers;  /* ZeRO-3: transformer layers per gathered unit; 0: the whole chunk */
    double progress_timeout_s; /* a rank without progress while its peers wait is named
                                  after this; 0: no progress heartbeat       */
    tri_offload offload;   /* OPTIMIZER: master weights and moments in host memory */
} tri_parallel_cfg;

typedef struct tri_ckpt_cfg {
    char dir[TRI_PATH_MAX]; /* checkpoints go to <dir>/step_<N>, <dir>/latest */
    int every;              /* steps between saves; 0: only the final one     */
    int keep;               /* how many to keep; 0: all                       */
    tri_dtype dtype;        /* model.safetensors: TRI_F32 | TRI_BF16 | TRI_F16 */
    int async;              /* 1: a save blocks for a host snapshot only; a
                               background thread writes and commits it */
    double every_s;         /* seconds between saves (rank 0's clock); 0: off */
} tri_ckpt_cfg;

typedef struct tri_log_cfg {
    int every;              /* steps between log lines                      */
    char dir[TRI_PATH_MAX]; /* metrics.jsonl and TensorBoard events go here */
    double peak_gflops;     /* for MFU: the machine's peak, GFLOP/s         */
    int plot;               /* 1: world rank 0 runs scripts/plot.py on dir at the end */
    int tensorboard;        /* 1: world rank 0 also writes TensorBoard scalars to dir */
    int straggler_every;    /* steps between straggler reports; 0: none     */
    double straggler_factor; /* a rank whose compute is this much above the median is slow */
} tri_log_cfg;

/* A file in log.dir through which tridentrun hands events (an elastic
 * shrink) to the trainer it relaunches, which writes them into metrics.jsonl
 * and removes it (src/train/metrics.h, tri_metrics_take_events). */
#define TRI_LOG_PENDING_EVENTS "pending_events.jsonl"

/* debug.inject_kind: what debug.inject_step plants (src/train/badstep.h) */
typedef enum tri_inject_kind {
    TRI_INJECT_NAN_GRAD, /* one gradient element NaN             */
    TRI_INJECT_INF_GRAD, /* one gradient element +inf (an overflow) */
    TRI_INJECT_NAN_LOSS, /* the step's loss NaN                   */
    TRI_INJECT_SPIKE,    /* the step's loss x 1e4 (a spike; gradients untouched) */
} tri_inject_kind;

typedef struct tri_config {
    tri_device device; /* the top-level key "device": cpu | cpu-guard | cuda */
    tri_model_cfg model;
    tri_train_cfg train;
    tri_data_cfg data;
    tri_parallel_cfg parallel;
    tri_ckpt_cfg checkpoint;
    tri_log_cfg log;
    struct {
        int fail_step; /* test-only fault injection: at this step ...     */
        int fail_rank; /* ... this rank exits with code 3 (-1: never)     */
        int inject_step;             /* test-only: the step (1-based) whose data window gets a fault; 0: none */
        int inject_count;            /* ... and the steps after it: this many windows  */
        int inject_rank;             /* ... on this world rank (-1: every rank)         */
        tri_inject_kind inject_kind; /* ... of this kind                                */
        int sleep_ms;   /* test-only: this many ms of sleep before each step ... */
        int sleep_rank; /* ... on this world rank (-1: never)                    */
        int fail_start_rank; /* this world rank exits 3 at every start (-1: never) */
    } debug;
    char source[TRI_PATH_MAX]; /* the file it was read from, for messages */
} tri_config;

/* Fills *cfg with every field's default. */
void tri_config_defaults(tri_config *cfg);

/* Reads `path` over the defaults, then applies the overrides in order
 * (each "section.key=value"; value parsed as the field's type). Validates
 * every field's range and the cross-field rules (n_embd % n_head == 0,
 * global_batch % micro_batch == 0, min_lr <= lr, ...). Returns 0, or -1 after
 * printing one line to stderr that names the file and the key. */
int tri_config_load(tri_config *cfg, const char *path, int n_overrides, const char *const *overrides);

/* Same, from a JSON string (for state.json, where the config is stored);
 * `name` stands for the file in messages. */
int tri_config_load_string(tri_config *cfg, const char *json, const char *name);

/* The whole config as a JSON object text (malloc'd; caller frees), with
 * every field, so that loading it gives back the same config. */
char *tri_config_to_json(const tri_config *cfg);

/* Prints "section.key = value" lines, one per field (the start-up echo). */
void tri_config_print(const tri_config *cfg, FILE *f);

/* Prints every field with its type, default, range and help text. */
void tri_config_help(FILE *f);

/* Whether "section.key" names a config field (for tools that build --set
 * overrides, e.g. `trident sweep`). */
int tri_config_has_key(const char *dotted);

/* The rules across keys (src/config/check.c), run by the loader after every
 * key is read and in its range: the model architecture's shapes (with the
 * TP size), the parallel sizes and their products in 64 bits, sequence
 * parallelism. 0, or -1 said ("trident: <file>: ..." naming the keys and
 * the numbers). */
int tri_config_check_keys(const tri_config *cfg, const char *file);

#endif
