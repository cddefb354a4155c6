/* What `trident bench` measures (the command, src/cli/cmd_bench.c, prints
 * it): a short training run on synthetic tokens through the trainer, each
 * step's time, and on the CPU the machine's sgemm speed on the model's own
 * GEMM shape before, between and after the steps (src/plan/probe.h), so
 * that MFU is read against what this machine can do rather than a
 * datasheet; on a GPU against the peak the caller gives. Under tridentrun
 * every rank runs it; rank 0's result holds the figures. */
#ifndef TRI_TRAIN_BENCH_H
#define TRI_TRAIN_BENCH_H

#include <stddef.h>

#include "config/config.h"
#include "train/train.h"

typedef struct tri_bench_opts {
    long steps;            /* measured steps; one warm-up step runs first (cfg's
                              train.steps must be steps + 1) */
    int threads;           /* per rank; 0: as the environment says             */
    double peak_tflops;    /* cuda: the device's peak; 0: none given (no MFU)   */
    int skip_memory_check; /* as `trident train --skip-memory-check`            */
    int profile;           /* time every op (tri_run_report.profile)            */
} tri_bench_opts;

typedef struct tri_bench_result {
    tri_run_report rep; /* the trainer's report: rank, world, comm, stages, mem */
    int on_cpu;         /* the peak was measured (sgemm), not given             */
    int threads;        /* OpenMP threads per rank                              */
    size_t BT, C;       /* the probe's shape: (BT x C) by (C x 4C)              */
    double step_s;      /* the median of the measured steps                     */
    double min_s, max_s;
    double tokens_per_s;
    double flops_per_token; /* model FLOPs (tri_gpt_flops_per_token)            */
    double gflops;          /* model GFLOP/s at the median step                 */
    double peak_gflops;     /* per rank: the best sgemm seen, or the given peak */
    double job_peak_gflops; /* for the job: per rank x ranks, the cores shared  */
    double mfu;             /* gflops / job_peak_gflops (0 without a peak)      */
    double mfu_paired;      /* the median over steps of each step against the
                               sgemm speed measured right after it              */
    double bubble, bubble_sim; /* pp > 1: measured and simulated (unit costs)   */
} tri_bench_result;

/* Runs it. Returns TRI_EXIT_OK (r filled on rank 0: r->rep.rank == 0), or
 * an exit code after one line naming what failed (bad sizes, memory, the
 * trainer's own refusal). */
int tri_bench_run(const tri_config *cfg, const tri_bench_opts *o, tri_bench_result *r);

#endif
