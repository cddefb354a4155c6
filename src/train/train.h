/* `trident train`: the training loop of one rank. */
#ifndef TRI_TRAIN_H
#define TRI_TRAIN_H

#include "config/config.h"

#include "kernels/profile.h"
#include "parallel/comm.h"

#define TRI_REPORT_MAX_STAGES 64

/* What a run measured on this rank (filled when tri_run_opts.report is set). */
typedef struct tri_run_report {
    int world, rank;           /* this rank's place                              */
    int steps;                 /* steps run (not counting the first, see below) */
    double seconds;            /* their wall time                                */
    tri_comm_stats tp, dp, pp; /* communication in those steps, per group        */
    tri_comm_stats cp, dpcp;   /* context parallelism's: the K/V ring, the dp x cp
                                  gradient group (no calls when parallel.cp is 1) */
    tri_mem_stats mem;         /* this rank's memory accounting (kernels/ctx.h)  */
    /* The pipeline phase of those steps, per stage (stage s of this rank's
     * pipeline at [s]; TRI_REPORT_MAX_STAGES at most): compute time, time
     * waiting for p2p batches, and the span from a step's first action to the
     * end of its last compute action (parallel/pipeline.h), summed over the steps. */
    int stages;
    double stage_busy_s[TRI_REPORT_MAX_STAGES], stage_p2p_s[TRI_REPORT_MAX_STAGES], stage_span_s[TRI_REPORT_MAX_STAGES];
    /* With tri_run_opts.profile: this rank's op time by kind in those steps
     * (kernels/profile.h; profile.steps of them). */
    tri_prof_totals profile;
} tri_run_report;

typedef struct tri_run_opts {
    int resume;            /* continue from the newest complete checkpoint in checkpoint.dir, if any */
    const char *init_from; /* NULL, or a Hugging Face directory whose weights start the run (step 0,
                              fresh optimizer; model/ckpt/checkpoint.h tri_model_import) */
    int threads;           /* OpenMP/OpenBLAS threads; 0: leave as the environment says */
    tri_device device;     /* TRI_DEVICE_CPU (the default), CPU_GUARD or CUDA */
    int synthetic;         /* bench: random tokens instead of the data files */
    int quiet;             /* no per-step lines */
    int stop_at;           /* > 0: save and stop after this step (the schedule still
                            runs to train.steps; resume continues) */
    int allow_data_change; /* --resume even when a data file differs from the one the
                              checkpoint's run read (src/train/datafiles.h) */
    int skip_memory_check; /* do not refuse a run the memory estimate says will not fit
                              (src/train/preflight.h) */
    /* if non-NULL: called on every rank after each step with its duration
     * (bench measures the machine's sgemm speed right then) */
    void (*after_step)(void *ctx, int step, double seconds);
    void *after_step_ctx;
    int profile;            /* bench --profile: every op of this rank timed (kernels/profile.h) into report->profile */
    tri_run_report *report; /* if non-NULL: filled when all train.steps ran, for every step after the first
                               (the first warms caches and page-faults the buffers) */
} tri_run_opts;

/* Trains as cfg says; returns the process exit code (base/exit.h):
 * TRI_EXIT_OK, TRI_EXIT_BAD_INPUT, TRI_EXIT_FAILURE (a runtime failure), or
 * tri_exit_signal(sig) when stopped by a signal after saving a checkpoint
 * (143 for SIGTERM). debug.fail_step ends the rank with TRI_EXIT_INJECTED. */
int tri_train(const tri_config *cfg, const tri_run_opts *opts);

/* Prepares the CPU backend (threads n > 0; 0 keeps the environment's), for commands that run the model. */
void tri_set_threads(int n);

#endif
