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
#include "model/runtime.h"     /* tri_recompute */
#include "parallel/schedule.h" /* tri_sched_kind */

#define TRI_PATH_MAX 1024

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
    int vpp;               /* virtual pipeline chunks per stage              */
    tri_sched_kind schedule; /* 1F1B | INTERLEAVED | GPIPE | ZBH1; 1F1B with vpp > 1
                                runs interleaved (src/plan/stage_plan.h resolves it) */
    char pp_layout[256];   /* layers per stage or chunk, "3,4,4,3"; "": even */
    double bucket_mb;      /* gradient all-reduce bucket size, MiB            */
    double timeout_s;      /* deadline of every communication wait; 0: none  */
    int sequence_parallel; /* 1: LayerNorms, residuals and the embedding output run on
                              sequence shards (needs tp > 1 and seq_len % tp == 0) */
    int zero;              /* 1: distributed optimizer (ZeRO-1) over DP      */
} tri_parallel_cfg;

typedef struct tri_ckpt_cfg {
    char dir[TRI_PATH_MAX]; /* checkpoints go to <dir>/step_<N>, <dir>/latest */
    int every;              /* steps between saves; 0: only the final one     */
    int keep;               /* how many to keep; 0: all                       */
    tri_dtype dtype;        /* model.safetensors: TRI_F32 | TRI_BF16 | TRI_F16 */
} tri_ckpt_cfg;

typedef struct tri_log_cfg {
    int every;              /* steps between log lines                      */
    char dir[TRI_PATH_MAX]; /* metrics.jsonl goes here                      */
    double peak_gflops;     /* for MFU: the machine's peak, GFLOP/s         */
    int plot;               /* 1: world rank 0 runs scripts/plot.py on dir at the end */
} tri_log_cfg;

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

#endif
