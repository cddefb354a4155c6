/* What ZeRO's stages, context parallelism and optimizer offload change in
 * the planner's model (src/plan/plan.h), in closed form: the bytes a rank
 * holds of the parameters, gradients and optimizer state, and the bytes it
 * sends per step. Pure functions of numbers, so that tests/plan/test_shard.c
 * checks them against the ZeRO paper's forms and docs/parallelism.md can
 * state the same formulas ("ZeRO-2 and ZeRO-3", "Context parallelism",
 * "Optimizer offload").
 *
 * Conventions: N parameter elements of the stage on this TP rank, P bytes a
 * parameter (2 or 4), fp32 gradients (4 bytes, Trident accumulates them in
 * fp32; the ZeRO paper's mixed precision has 2-byte gradients), an AdamW
 * state of 8 bytes per element (two fp32 moments) plus 4 (fp32 masters)
 * when P is 2; d the ranks the state is sharded and the gradients reduced
 * over: parallel.dp x parallel.cp (Megatron's one combined group). */
#ifndef TRI_PLAN_SHARD_H
#define TRI_PLAN_SHARD_H

#include <stddef.h>

/* A stage's parameters and how they are held. */
typedef struct tri_shard_in {
    size_t elems;       /* N                                                      */
    size_t alloc;       /* N padded for ZeRO (a multiple of d x TRI_ZERO_ALIGN per chunk); N without */
    int P;              /* bytes of a parameter: 2 or 4                            */
    int zero;           /* parallel.zero, 0..3                                     */
    int d;              /* dp x cp                                                 */
    size_t chunk_elems; /* ZeRO-3: the largest pipeline chunk of the stage (the unit gathered) */
    int n_chunks;       /* ZeRO-3: chunks on the rank (parallel.vpp)               */
    /* ZeRO-3 with layer units (parallel.zero_unit_layers > 0; 0: whole chunks):
     * the largest chunk's embedding + head + two of its largest units, and
     * its largest unit (src/train/zero_units.c gathers one unit ahead) */
    size_t units_elems, unit_elems;
    int offload;        /* parallel.offload = optimizer                             */
    int staging;        /* 1: a GPU, whose host stages the shard's gradients (fp32) and parameters */
} tri_shard_in;

/* Bytes of one rank. */
typedef struct tri_shard_mem {
    size_t params, grads, optim; /* on the device                          */
    size_t host;                 /* in host memory (offload), not on the device */
} tri_shard_mem;

/* The closed forms at the step's peak, as the trainer holds them
 * (docs/parallelism.md, "ZeRO-2 and ZeRO-3"), S = alloc / d the rank's shard
 * (N without ZeRO), K = 8 + (P == 2 ? 4 : 0) the optimizer's bytes per
 * element:
 *   zero 0:  params P N,           grads 4 N,           optim K N
 *   zero 1:  params P alloc,       grads 4 alloc,       optim K S
 *   zero 2:  params P alloc,       grads 4 S + 4 alloc, optim K S
 *   zero 3:  params P S + P W3,    grads 4 S + 4 alloc, optim K S
 * The backward accumulates every micro-batch's gradients into the whole
 * fp32 buffer, reduced once a step, so stages 2 and 3 hold it during the
 * step beside their shards; W3 = min(2, chunks) x the largest chunk (the
 * chunk in use and the next, gathered early), at most alloc; with layer
 * units at most the embedding and head units and two layer units of a
 * chunk (the one in use and the next), plus one more unit with several
 * chunks (the next chunk's first, gathered early). Between steps
 * a rank holds the ZeRO paper's forms with fp32 gradients, P + 4 + K/d,
 * P + (4 + K)/d and (P + 4 + K)/d a parameter (bf16: 6 + 12/d, 2 + 16/d,
 * 18/d; the paper's 2 + 2 + 12/d, 2 + 14/d, 16/d have 2-byte gradients).
 * Offloaded, optim moves to host, with on a GPU the staging copies S (4 + P). */
void tri_shard_mem_of(const tri_shard_in *in, tri_shard_mem *out);

/* Bytes one rank sends per step over the d ranks in ring collectives ((d-1)
 * / d of a buffer per pass), m micro-batches: the gradients' reduction (rs)
 * and the parameters' gathering (ag), returned as their sum:
 *   zero 0: all-reduce of the fp32 gradients       rs 2 (d-1)/d 4N, ag 0
 *   zero 1, 2: reduce-scatter, then all-gather      rs (d-1)/d 4N,   ag (d-1)/d P N
 *   zero 3: the parameters gathered before each micro-batch's forward and
 *           again before its backward, none after the step
 *                                                   rs (d-1)/d 4N,   ag 2m (d-1)/d P N
 * (reduce-scatter + all-gather is the all-reduce's volume when P = 4; ZeRO-3
 * adds one parameter all-gather per backward). rs or ag may be NULL. */
double tri_shard_dp_bytes(int zero, int d, int m, int P, double N, double *rs, double *ag);

/* Context parallelism's ring: the bytes one rank sends per layer and
 * micro-batch, (cp-1) passes of its K and V blocks, B x T/cp tokens of
 * kv_width values each (the KV heads on this TP rank x the head size) of A
 * bytes: forward (cp-1) 2 B (T/cp) kv_width A; backward (cp-1) 2 B (T/cp)
 * kv_width (A + 4), the blocks again and their fp32 gradients travelling
 * back to their owner. 0 at cp 1. */
double tri_shard_cp_ring_bytes(int cp, double B, double T, double kv_width, double A, int backward);

/* Optimizer offload's PCIe bytes per step for a shard of S elements with
 * P-byte parameters: the gradients to the host (4 S), the parameters back
 * (P S), and fp32 parameters to the host too (4 S: they are the masters,
 * kept on the device between steps). */
double tri_shard_pcie_bytes(double S, int P);

#endif
