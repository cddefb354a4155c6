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
    tri_sampler train_data, val_data;
    tri_ckpt_store store; /* open (locked) on world rank 0 while training */
    struct tri_ckpt_async *ckpt_async; /* checkpoint.async: the save in flight (src/train/ckpt_async.c) */
    double ckpt_last_s;                /* checkpoint.every_s: rank 0's clock at the last save (0: not yet) */
    int has_train_data, has_val;
    int32_t *inputs, *targets; /* (micro_batch * T) each */
    size_t G, T, mb;           /* global batch, sequence length, micro-batch */
    size_t local_batch;        /* G / dp                                     */
    size_t first_seq;          /* this DP rank's first sequence of a step    */
    int n_micro;               /* local_batch / mb                           */
    int is_logger;             /* world rank 0                               */
    uint64_t consumed;         /* global samples consumed before this step   */
    FILE *metrics;
    int eval_batches; /* train.eval_batches, capped at one pass over
                                   the validation windows (src/train/preflight.c)   */
    int stop;         /* the stop signal every rank agreed on inside
                                   evaluate (which then gave up), else 0      */
    int data_error;   /* a token file could not be read (printed):
                                   the run ends with exit code 1              */
    /* fp16 dynamic loss scaling (train.precision fp16; else scale 1) */
    int fp16;
    double loss_scale; /* the loss gradient is multiplied by it            */
    int scale_clean;   /* clean steps since the scale last changed          */
    int skipped;       /* the last train_step found an overflow: no update  */
} trainer;

/* train_setup.c */
int trainer_setup(trainer *t, const tri_config *cfg, const tri_run_opts *opts, int *start);
void trainer_free(trainer *t); /* NULL-safe for whatever setup reached */

/* train_step.c */
/* One optimizer step. Returns the global mean loss; *norm gets the global
 * gradient norm before clipping (unscaled). When either is not finite the
 * parameters are left as they were (no update) and the caller stops, except
 * under fp16 when the gradient norm is not finite: the step is skipped
 * (t->skipped = 1; no update, the data position advances, the loss scale
 * halves) and the run goes on. A token file that cannot be read sets
 * t->data_error and returns NaN at once. */
double train_step(trainer *t, int step, double *norm);
/* Mean loss over t->eval_batches micro-batches of the validation data.
 * Between batches every rank checks for a stop request together (one int
 * all-reduced over the world); on one, t->stop gets the signal and NaN is
 * returned on every rank. A token file that cannot be read sets
 * t->data_error and returns NaN. */
double evaluate(trainer *t);

#endif
