/* The one sgemm probe: how fast this machine runs the model's GEMMs, for
 * the CPU's MFU (`trident bench`) and the CPU as a planned device
 * (`trident plan --gpu cpu`, docs/plan.md). The shape is the linears' own:
 * out (M, N) = A (M, K) B (N, K)^T, row-major, with OpenBLAS (cblas_sgemm),
 * on the threads the process has (tri_set_threads). A FLOP is 2 M N K.
 *
 * The two commands time it differently, each as it always has:
 *   - bench keeps one shape's buffers (tri_sgemm) and takes the best of a
 *     few runs, no warm-up run, before, between and after the training
 *     steps (tri_step_probe): the peak for MFU, and each step's MFU against
 *     the speed measured right after it;
 *   - plan measures any shape afresh (tri_sgemm_rate: one warm-up run not
 *     counted, shapes capped, more runs for small ones) and keeps each
 *     shape's speed as a ratio to a reference shape measured right after it
 *     (tri_sgemm_meter), which cancels this VM's slow phases the way bench's
 *     paired MFU does.
 * Nothing here is global: each probe is its caller's. */
#ifndef TRI_PLAN_PROBE_H
#define TRI_PLAN_PROBE_H

#include <stddef.h>

/* One shape's operands (A, B filled with a fixed pattern) and output. */
typedef struct tri_sgemm {
    size_t M, N, K;
    float *a; /* (M, K) */
    float *b; /* (N, K) */
    float *c; /* (M, N) */
} tri_sgemm;

/* Bytes of a shape's three buffers into *bytes: 0, or -1 when they do not
 * fit size_t. */
int tri_sgemm_bytes(size_t M, size_t N, size_t K, size_t *bytes);
/* Allocates and fills the operands. M, N or K = 0: an empty probe (no
 * buffers; tri_sgemm_best gives 0). Returns 0, or -1 when out of memory or
 * the sizes overflow (nothing printed; *s is then empty). */
int tri_sgemm_init(tri_sgemm *s, size_t M, size_t N, size_t K);
/* NULL-safe; zeroes *s. */
void tri_sgemm_free(tri_sgemm *s);
/* The best FLOP/s of `reps` timed runs after `warmup` untimed ones; 0 for an
 * empty probe or reps < 1. */
double tri_sgemm_best(tri_sgemm *s, int warmup, int reps);

/* `trident plan --gpu cpu`: the best FLOP/s of one shape, measured afresh:
 * M capped at 4096 rows and N, K at 16384 (the speed is flat beyond), one
 * warm-up run (it wakes the threads), then reps runs, four times as many
 * below 1e8 FLOPs. 1e9 when a dimension is 0 or memory is short. */
double tri_sgemm_rate(size_t M, size_t N, size_t K, int reps);

/* Bytes/s of a streaming copy of 32 MiB (beyond the caches), best of 5;
 * 1e10 when memory is short. Reads and writes both count. */
double tri_copy_bandwidth(void);

/* The share of a machine's cores one rank gets when `ranks` ranks of
 * `threads` threads each run on `cores` cores: cores / (ranks x threads)
 * when that oversubscribes them, else 1. */
double tri_core_share(long ranks, long threads, long cores);

/* `trident plan --gpu cpu`'s GEMM speeds (tri_gpu_kind.gemm_flops with
 * this as gemm_ctx): a shape's speed is its ratio to the reference shape,
 * measured back to back, times the reference's best speed so far. All
 * speeds are one rank's: the machine's times share. */
#define TRI_SGEMM_METER_SHAPES 1024
typedef struct tri_sgemm_meter {
    size_t ref[3];   /* the reference (M, N, K): the MLP's first GEMM, as bench probes it */
    double share;    /* of the machine one rank gets (tri_core_share)                  */
    double ref_best; /* the reference's best speed seen, times share                   */
    double best;     /* the fastest speed measured: the CPU's peak for MFU, as bench
                        takes its best sgemm                                            */
    int n;           /* shapes measured (beyond the table's size: measured each time)  */
    size_t shape[TRI_SGEMM_METER_SHAPES][3];
    double ratio[TRI_SGEMM_METER_SHAPES]; /* the shape's speed over the reference's */
} tri_sgemm_meter;

/* An empty meter of reference (M, N, K) and share; measures nothing. */
void tri_sgemm_meter_init(tri_sgemm_meter *m, size_t M, size_t N, size_t K, double share);
/* The reference shape's speed, best of `rounds` measurements (5 runs each). */
void tri_sgemm_meter_reference(tri_sgemm_meter *m, int rounds);
/* FLOP/s of out (M, N) = A (M, K) B (N, K)^T on one rank: measured with the
 * reference right after it on first use (3 runs each), from the table after.
 * ctx: a tri_sgemm_meter. */
double tri_sgemm_meter_flops(void *ctx, size_t M, size_t N, size_t K);

/* `trident bench`: each training step's seconds and the sgemm speed right
 * after it (tri_run_opts.after_step with this as its context). */
typedef struct tri_step_probe {
    tri_sgemm sgemm; /* M = 0: empty (a GPU run: only the times are kept) */
    double *after;   /* [steps]: FLOP/s measured right after that step (2 runs) */
    double *times;   /* [steps]: that step's seconds                            */
    size_t steps;
} tri_step_probe;

/* Room for `steps` steps and, unless M is 0, the shape's buffers. 0, or -1
 * when out of memory (nothing printed; *p is then empty). */
int tri_step_probe_init(tri_step_probe *p, size_t M, size_t N, size_t K, size_t steps);
/* NULL-safe; zeroes *p. */
void tri_step_probe_free(tri_step_probe *p);
/* The after_step callback: records step's seconds and, with buffers, the
 * best of 2 runs of the shape. ctx: a tri_step_probe; step < steps. */
void tri_step_probe_after(void *ctx, int step, double seconds);

#endif
