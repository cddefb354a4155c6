/* The layout search of `trident plan --search` (docs/plan.md): every
 * layout of N devices (tp x pp x dp = N, virtual chunks, micro-batch,
 * recompute, ZeRO; sequence parallelism where it applies), each checked
 * (tri_plan_check) and evaluated (tri_plan_memory, tri_plan_time_step),
 * those that fit the device ranked by step time, and the others counted by
 * why they were refused, in the words the checks use. Prints nothing: the
 * command prints the result (src/cli/cmd_plan.c). */
#ifndef TRI_PLAN_SEARCH_H
#define TRI_PLAN_SEARCH_H

#include <stddef.h>

#include "config/config.h"
#include "plan/plan.h"

/* Dimensions the user fixed (--set): the search keeps the base config's. */
typedef struct tri_search_fixed {
    int tp, pp, dp, vpp, mb, recompute, zero, sp, cp, offload;
} tri_search_fixed;

/* What to search. */
typedef struct tri_search_opts {
    const tri_config *base;  /* the model, batch, schedule, precision; the fixed dimensions */
    const tri_gpu_kind *gpu; /* the device (tp <= gpu->per_node)                          */
    int cpu;                 /* 1: `--gpu cpu`: memory as the CPU backend sizes it
                                 (tri_gpt_describe), sequence parallelism as configured   */
    int gpus;                /* N                                                         */
    double limit;            /* bytes a rank may use                                      */
    tri_search_fixed fixed;
} tri_search_opts;

/* One layout and what the planner says of it. */
typedef struct tri_plan_row {
    tri_config cfg;
    tri_plan_mem mem;
    tri_plan_time time;
    int fits; /* mem.total <= the limit */
} tri_plan_row;

/* Why layouts were refused: each distinct reason once, in the order first
 * met, with how many layouts it refused. */
#define TRI_SEARCH_REASONS 32
#define TRI_SEARCH_WHY     512 /* a reason's room, '\0' included (longer ones are cut) */
typedef struct tri_search_reasons {
    int n;
    char text[TRI_SEARCH_REASONS][TRI_SEARCH_WHY];
    int count[TRI_SEARCH_REASONS];
    int other; /* refusals for reasons beyond the first TRI_SEARCH_REASONS */
} tri_search_reasons;

/* Counts one refusal for why. */
void tri_search_reason_add(tri_search_reasons *r, const char *why);

/* Calls visit(ctx, layout) for every candidate layout of o, in the search's
 * order: tp (dividing N, at most a node's devices), cp (dividing N / tp,
 * with seq_len divisible by 2 cp), pp (dividing N / tp / cp), dp = N / tp /
 * cp / pp, vpp 1..16 (> 1 only with pp > 1 and the layers dividing
 * evenly into pp x vpp chunks), micro_batch 1..16, recompute none,
 * selective, full, ZeRO 0 and (dp x cp > 1) 1, offload none (ZeRO 2 and 3
 * and offload are not candidates of their own: tri_search_run tries them on
 * a layout that does not fit, see there); the fixed dimensions only at the
 * base config's values; no vpp > 1 under zb-h1; interleaved at vpp 1 runs
 * as 1f1b; sequence parallelism on wherever it applies (tp > 1 dividing
 * seq_len), or as configured with cpu or when fixed. A dp that does not
 * divide the global batch is no candidate: it is counted in rej once per
 * (tp, pp, vpp) ("global_batch G is not divisible by dp D"). Returns 0, or
 * the first non-zero value visit returned (which stops it). */
int tri_search_candidates(const tri_search_opts *o, tri_search_reasons *rej,
                          int (*visit)(void *ctx, const tri_config *layout), void *ctx);

/* Memory (the largest stage) and step time of row->cfg, and whether it fits
 * within limit; cpu as in tri_search_opts. 0, or -1 with the planner's
 * reason in why (n bytes), or -1 with why "" after a failure that was
 * printed (out of memory; tri_plan_memory_why). */
int tri_search_evaluate(tri_planner *pl, tri_plan_row *row, const tri_gpu_kind *gpu, int cpu, double limit, char *why,
                        size_t n);

/* The search's outcome. */
typedef struct tri_search_result {
    tri_plan_row *rows; /* [n] the layouts that fit, by step time, fastest first (owned) */
    size_t n;
    int tried;                  /* candidates checked                                     */
    int oom;                    /* valid, but over the limit                              */
    double closest_over;        /* bytes the closest of those needs beyond the limit; -1: none */
    tri_plan_row closest;       /* that layout (when closest_over >= 0)                   */
    tri_search_reasons refused; /* the invalid ones (tried - n - oom of them) and the dps
                                   that do not divide the batch, by reason              */
} tri_search_result;

/* Runs the search of o with planner pl (NULL: nothing kept between layouts,
 * several times slower). A candidate over the memory limit is tried again,
 * in turn, at ZeRO 2 and 3 (from ZeRO 1, where dp x cp > 1 and parallel.zero
 * is not fixed), then with the optimizer offloaded at the highest of those
 * (where parallel.offload is not fixed): the first that fits is kept, as a
 * layout of its own, and each try counts in tried. The planner never makes
 * these faster (more communication, PCIe traffic), so a layout that fits
 * without them is never shadowed by one that needs them; the search proposes
 * them exactly when they are what fits.
 * Returns 0 (r filled, possibly with no layout that fits), or -1 after a
 * printed failure (out of memory); free r either way. */
int tri_search_run(tri_planner *pl, const tri_search_opts *o, tri_search_result *r);
/* NULL-safe; zeroes *r. */
void tri_search_result_free(tri_search_result *r);

#endif
