/* The trainer of one rank, shared by the three parts of `trident train`:
 *   train_setup.c  everything before step 1 (layout, mesh, backend, data, model,
 *                  optimizer, resume or init);
 *   train_step.c   one optimizer step and the validation pass, through
 *                  the pipeline executor (parallel/pipeline.h; pp = 1 runs the
 *                  trivial schedule: each micro-batch forward, then backward);
 *   train.c        the cadence around the steps: logging, evaluation,
 *                  signals, checkpoints, the run report.
 * Private to src/. */
#ifndef TRI_TRAINER_H
#define TRI_TRAINER_H

#include <stdint.h>
#include <stdio.h>

#include "data/sampler.h"
#include "model/ckpt/store.h"
#include "model/gpt.h"
#include "model/runtime.h"
#include "model/optim.h"
#include "model/stage.h"
#include "parallel/dist.h"
#include "parallel/grad_sync.h"
#include "parallel/schedule.h"
#include "parallel/pipeline.h"
#include "plan/stage_plan.h"
#include "train/badstep.h"
#include "train/metrics.h"
#include "train/train.h"

typedef struct trainer {
    const tri_config *cfg;
    tri_run_opts opts;
    tri_debug debug; /* test-only faults, read once (model/debug.h) */
    tri_dist dist;
    tri_ctx ctx;               /* the backend of this rank                   */
    tri_profile *prof;         /* opts.profile: the ops of ctx timed; else NULL */
    tri_gpt gpt;               /* the chunks this rank holds                 */
    tri_stage_plan plan;       /* this pipeline stage: chunks, schedule, slots */
    tri_schedule sched;        /* a training step's schedule (every stage)    */
    tri_schedule eval_sched;   /* one micro-batch forward only, for evaluation */
    tri_stage stage;           /* the executor's callbacks over the chunks    */
    tri_pipe pipe;             /* the executor of both                        */
    tri_pipe_stats pipe_total; /* its stats summed over the measured steps    */
    tri_recompute policy;
    tri_slot_pool *pools; /* [gpt.n_chunks]: saved slots per chunk      */
    tri_workspace ws;
    tri_optim opt;
    tri_grad_sync *sync; /* [gpt.n_chunks]: DP buckets per chunk       */
    struct zero3 *zero3; /* parallel.zero = 3: the gathered chunks (src/train/zero.c); else NULL */
    tri_sampler train_data, val_data;
    tri_ckpt_store store; /* open (locked) on world rank 0 while training */
    struct tri_ckpt_async *ckpt_async; /* checkpoint.async: the save in flight (src/train/ckpt_async.c) */
    /* a resumed run's start-up, for the restart line (trainer_startup_report) */
    double boot_t0;     /* tri_now_s() when trainer_setup began */
    double boot_dist_s; /* MPI (or the store) and the groups    */
    double boot_load_s; /* the checkpoint's tensors read        */
    double ckpt_last_s;                /* checkpoint.every_s: rank 0's clock at the last save (0: not yet) */
    int has_train_data, has_val;
    int32_t *inputs, *targets; /* (micro_batch * T) each */
    size_t G, T, mb;           /* global batch, sequence length, micro-batch */
    size_t Tl;                 /* positions per sequence on this rank: T / cp */
    size_t local_batch;        /* G / dp                                     */
    size_t first_seq;          /* this DP rank's first sequence of a step    */
    int n_micro;               /* local_batch / mb                           */
    int is_logger;             /* world rank 0                               */
    uint64_t consumed;         /* global samples consumed before this step   */
    tri_metrics *metrics; /* the logger's metrics.jsonl (+ TensorBoard); else NULL */
    int eval_batches; /* train.eval_batches, capped at one pass over
                                   the validation windows (src/train/preflight.c)   */
    int stop;         /* the stop signal every rank agreed on inside
                                   evaluate (which then gave up), else 0      */
    int data_error;   /* a token file could not be read (printed):
                                   the run ends with exit code 1              */
    /* fp16 dynamic loss scaling (train.precision fp16; else scale 1) */
    int fp16;
    double loss_scale;       /* the loss gradient is multiplied by it            */
    int scale_clean;         /* clean steps since the scale last changed          */
    tri_skip_reason skipped; /* why the last train_step made no update; 0: it did */
    tri_badstep bad;         /* bad steps, rollbacks, skipped samples (badstep.h) */
} trainer;

/* train_setup.c */
int trainer_setup(trainer *t, const tri_config *cfg, const tri_run_opts *opts, int *start);

/* After the first step of a resumed run (world rank 0): where the time from
 * trainer_setup's start to the end of that step went, in the log and in
 * metrics.jsonl (perf_startup_*): what a restart costs beside the work
 * redone (docs/reliability.md, "Fast restarts"). first_step_s: that step. */
void trainer_startup_report(trainer *t, int step, double first_step_s);
void trainer_free(trainer *t); /* NULL-safe for whatever setup reached */

/* train_step.c */
/* One optimizer step. Returns the global mean loss; *norm gets the global
 * gradient norm before clipping (unscaled); both agreed on by every rank.
 * When either is not finite, or the loss spikes (train.skip_spikes), the
 * step is skipped (t->skipped says why; badstep.h): no update, AdamW's step
 * count stays, the data position advances; under fp16 a non-finite norm
 * also halves the loss scale. A token file that cannot be read sets
 * t->data_error and returns NaN at once. */
double train_step(trainer *t, int step, double *norm);
/* Mean loss over t->eval_batches micro-batches of the validation data.
 * Between batches every rank checks for a stop request together (one int
 * all-reduced over the world); on one, t->stop gets the signal and NaN is
 * returned on every rank. A token file that cannot be read sets
 * t->data_error and returns NaN. */
double evaluate(trainer *t);

/* bad_run.c (the definitions: src/train/badstep.h) */
/* train.skip_samples parsed into t->bad; 0, or -1 (printed, naming the key). */
int badstep_setup(trainer *t);
/* After a resume from dir (step): its state.json's bad-step state; 0 or -1 (printed). */
int badstep_resume(trainer *t, const char *dir, int step);
/* A checkpoint of `step` was saved: the one a rollback returns to. */
void badstep_saved(trainer *t, int step);
/* Start of a step: the data position past skipped ranges, the fault injection armed. */
void badstep_begin_step(trainer *t);
/* debug.inject_kind nan-grad|inf-grad on the armed step and rank: one gradient element. */
void badstep_inject_grad(trainer *t);
/* Collective over the world: the step's loss and norm agreed (the maximum
 * of each over the ranks, NaN when any rank's is not finite; the injected
 * loss faults applied first), the skip decision taken and counted. */
tri_skip_reason badstep_judge(trainer *t, double *loss, double *norm);
/* The skipped step's log line (always) and metrics.jsonl line (world rank 0). */
void badstep_log(trainer *t, int done_steps, double loss, double norm);
/* After a skipped step (collective): when train.max_bad_steps are reached,
 * rolls back (*rolled = 1, *step = the checkpoint's step - 1) and records
 * the bad row's samples as skipped. TRI_EXIT_OK, or TRI_EXIT_FAILURE
 * (printed) when there is no checkpoint yet or the reload failed. */
int badstep_after_skip(trainer *t, int *step, int *rolled);
/* Collective: loads the checkpoint dir into the model, optimizer, loss scale,
 * data position and bad-step state; *step gets its step. The one place a
 * rollback reads a checkpoint. 0, or -1 on every rank (printed). */
int badstep_reload(trainer *t, const char *dir, int *step);
/* End of the run: TRI_EXIT_FAILURE (printed) when steps ran and none updated. */
int badstep_check_end(trainer *t);

#endif
