/* What one pipeline stage holds and keeps, for the trainer, preflight,
 * bench and the launcher: its chunks (by parallel.pp_layout), the schedule
 * (parallel.schedule, resolved), and how many micro-batches of saved
 * activations each of its chunks keeps at the schedule's peak, from the
 * simulator (parallel/schedule.h) run with unit costs. Memory of a stage:
 * every local chunk's parameters, plus sum over chunks c of slots[c] x
 * tri_slot_bytes(chunk c), plus the workspace (model/runtime.h). */
#ifndef TRI_STAGE_PLAN_H
#define TRI_STAGE_PLAN_H

#include "model/gpt.h"
#include "model/runtime.h"
#include "parallel/schedule.h"
#include "config/config.h"

/* Most virtual chunks per stage (parallel.vpp). */
#define TRI_MAX_VPP TRI_CONFIG_MAX_VPP

typedef struct tri_stage_plan {
    int pp, vpp, pp_rank;
    int m;                             /* micro-batches per step per DP rank: global_batch / (micro_batch x dp) */
    tri_sched_kind kind;               /* resolved: 1f1b with vpp > 1 is interleaved                           */
    int n_chunks;                      /* vpp                                                                   */
    tri_chunk_spec specs[TRI_MAX_VPP]; /* local chunk c = model chunk c*pp + pp_rank              */
    int *layers;                       /* the specs' layer lists (n_layer ints), owned            */
    int slots[TRI_MAX_VPP];            /* saved slots per local chunk: the simulator's peak alive, >= 1     */
    int split;                         /* zb-h1: slots keep what W (the weight gradients) needs              */
    double bubble;                     /* the simulator's bubble ratio (idle / busy of the busiest rank)     */
} tri_stage_plan;

/* The plan of stage pp_rank under cfg (parallel.pp, vpp, schedule,
 * pp_layout; train.global_batch, micro_batch; parallel.dp). Builds the
 * schedule (tri_schedule_build) and simulates it with unit costs (f = b = w
 * = 1) to get the peaks. Returns 0, or -1 with a message naming the numbers
 * (a layout that does not fit the model, a schedule constraint, vpp above
 * TRI_MAX_VPP); *sp is then zeroed. */
int tri_stage_plan_init(tri_stage_plan *sp, const tri_config *cfg, int pp_rank);
/* NULL-safe; zeroes *sp. */
void tri_stage_plan_free(tri_stage_plan *sp);

/* Saved activations of the plan's chunks on the rank g describes (g holds
 * exactly sp's chunks, in order): sum over c of slots[c] x
 * tri_slot_bytes(g, c, B, T, policy). 0 with a message on overflow. */
size_t tri_stage_plan_saved_bytes(const tri_stage_plan *sp, const tri_gpt *g, size_t B, size_t T, tri_recompute policy);

#endif
