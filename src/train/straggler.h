/* Straggler reports: which rank is slow, seen every K steps.
 *
 * Each rank records, for every step, its compute time (the step's wall time
 * less the time it spent blocked in communication, from its groups'
 * tri_comm_stats) and that blocked time. Every log.straggler_every steps the
 * ranks send world rank 0 the min, median and max of their compute time over
 * the window and the median of their blocked time (one small all-gather over
 * the world); rank 0 names each rank whose median compute exceeds
 * log.straggler_factor times the median of the other ranks' medians (the
 * others': with two ranks the median of all would be their mean) and it by
 * at least TRI_STRAGGLER_MIN_EXCESS_S, so that a rank preempted once a step
 * on a shared host is not a straggler:
 *   note: rank 3 (host h, stage 1, dp 0, tp 0) is slow: compute 1.9x the
 *   median over the last 50 steps (41.2 ms a step against 21.7 ms, the
 *   median of the other ranks)
 * and writes a metrics.jsonl line with every rank's figures. A slow rank
 * makes the others wait: their blocked time grows, their compute does not,
 * which is why the comparison is of compute and not of step time.
 *
 * The arithmetic (tri_straggler_median, tri_straggler_judge) is pure and
 * unit-tested in tests/train/test_straggler.c.
 */
#ifndef TRI_STRAGGLER_H
#define TRI_STRAGGLER_H

#include <stdio.h>

#include "parallel/dist.h"
#include "train/metrics.h"

/* A rank is slow only when its median compute exceeds the others' median by
 * at least this much (besides the factor): a few of the scheduler's time
 * slices, the most that one preemption per step adds to a rank that shares
 * its core (measured on a 2-core host running other jobs: healthy tiny-model
 * ranks at 0.9 against 3.3-4.9 ms). It hides a 1.5x straggler only when a
 * step computes in under 10 ms. */
#define TRI_STRAGGLER_MIN_EXCESS_S 5e-3

/* Figures of one rank over a window, as gathered (doubles, one layout). */
enum {
    TRI_SG_MIN = 0,  /* compute, seconds per step */
    TRI_SG_MEDIAN,   /* compute                   */
    TRI_SG_MAX,      /* compute                   */
    TRI_SG_COMM,     /* blocked in communication, median */
    TRI_SG_TP,       /* coordinates               */
    TRI_SG_PP,
    TRI_SG_DP,
    TRI_SG_N
};

typedef struct tri_straggler {
    int every;          /* window; 0: off              */
    int quiet;          /* 1: no notes (metrics only)  */
    double factor;      /* log.straggler_factor        */
    int n;              /* steps recorded in the window */
    double *compute, *comm; /* every: per step         */
    double *all;        /* world x TRI_SG_N: the gathered figures */
    char (*hosts)[64];  /* world rank 0: every rank's host name */
} tri_straggler;

/* Median of x[0..n) (n > 0; x is reordered). */
double tri_straggler_median(double *x, int n);
/* Ranks whose median compute fig[r*TRI_SG_N + TRI_SG_MEDIAN] exceeds factor
 * times the median of the other ranks' (and it by TRI_STRAGGLER_MIN_EXCESS_S)
 * into slow[] with that median in base[] (at most max_slow, the largest
 * ratio first); *median gets the median of all. Returns how many (possibly
 * more than max_slow). */
int tri_straggler_judge(const double *fig, int world, double factor, double *median, int *slow, double *base,
                        int max_slow);

/* Collective over d's world (it gathers the host names). every 0 or a world
 * of one: off, no collective ever. Returns 0 or -1 (out of memory on this rank: message;
 * the caller ends the job, the other ranks would wait for it). */
int tri_straggler_init(tri_straggler *s, tri_dist *d, int every, double factor, int quiet);
/* The time this rank has spent blocked in communication so far: the sum of
 * its groups' stats.seconds (the difference over a step is what counts). */
double tri_straggler_comm_s(const tri_dist *d);
/* After each step: its wall time and the part of it blocked in communication. */
void tri_straggler_step(tri_straggler *s, double step_s, double blocked_s);
/* Collective every `every` recorded steps (call after each step on every
 * rank): gathers, and on world rank 0 notes the slow ranks and writes
 * a line to metrics (may be NULL). `step`: the step just done. */
void tri_straggler_check(tri_straggler *s, tri_dist *d, tri_metrics *metrics, int step);
void tri_straggler_free(tri_straggler *s);

#endif
