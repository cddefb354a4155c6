/* Tensor parallelism's communication: Megatron's conjugate pairs f and g
 * around the column- and row-parallel linears, with and without sequence
 * parallelism (Korthikanti et al. 2022). This is where TP talks; what each
 * rank holds (heads, rows and columns of each weight, vocabulary rows) is
 * model/gpt.c's parameter tables, and the block that calls these is
 * model/runtime.c (docs/parallelism.md).
 *
 *   g, after a row-parallel linear:  forward all-reduce,  backward identity
 *   f, before a column-parallel one: forward identity,    backward all-reduce
 *
 * With sequence parallelism the residual stream holds R = BT / tp rows per
 * rank (rows [r R, (r+1) R) of the (b, t)-ordered stream), and the pairs
 * become
 *   g: forward reduce-scatter (BT -> R rows), backward all-gather
 *   f: forward all-gather (R -> BT rows),     backward reduce-scatter
 * Each function below is one of those four directions: `full` is the
 * (BT, C) tensor, `shard` the rank's (R, C) part. Collective over the TP
 * group; buffers are backend memory of the region's dtype. */
#ifndef TRI_PARALLEL_TENSOR_H
#define TRI_PARALLEL_TENSOR_H

#include <stddef.h>

#include "kernels/dtype.h"
#include "parallel/comm.h"

typedef struct tri_tp_region {
    tri_comm *comm;  /* the TP group (size tp)                  */
    int tp;          /* its size                                */
    int sp;          /* 1: sequence parallelism                 */
    size_t C;        /* elements per row                        */
    tri_dtype dtype; /* of the rows (the activation dtype)      */
} tri_tp_region;

/* The rows of BT this rank holds in the residual stream: BT, or BT / tp
 * under sequence parallelism (BT a multiple of tp). */
size_t tri_tp_rows(const tri_tp_region *r, size_t BT);

/* Forward of g / backward of f: `full` (BT, C) holds this rank's partial
 * sums; returns where the reduced rows this rank keeps are: `full` itself,
 * all-reduced in place, or (sequence parallelism) `shard`, which receives
 * the reduce-scattered rows (a different buffer than full). */
void *tri_tp_reduce(const tri_tp_region *r, void *full, void *shard, size_t BT);

/* Forward of f / backward of g: this rank's rows in `shard`; returns every
 * row: `shard` itself without sequence parallelism (every rank holds every
 * row already; `full` is not touched), else `full`, which receives the
 * all-gathered rows. */
const void *tri_tp_gather(const tri_tp_region *r, void *full, const void *shard, size_t BT);

#endif
