/* The planner's model (`trident plan`, docs/plan.md): what a layout of a
 * GPT needs per rank and how long its step takes, without allocating the
 * model.
 *
 * Memory of one rank (the keys of `trident bench`'s "mem"):
 *   - params, grads, optim: the rank's parameter elements times the bytes of
 *     their dtypes (16-bit or fp32 parameters, fp32 gradients, fp32 AdamW
 *     moments plus fp32 master weights when the parameters are 16-bit); under
 *     ZeRO-1 the buffers are padded as tri_gpt_pad pads them and the
 *     optimizer keeps a 1/dp shard; offloaded (parallel.offload), the
 *     optimizer's bytes move to host memory (host, with a GPU's staging
 *     buffers), out of the device's total. On the CPU backend the elements come from
 *     tri_gpt_describe, as preflight and the allocator get them; for GPUs
 *     from the closed form of the same tables (tri_plan_param_elems), checked
 *     equal in tests/plan/test_plan.c.
 *   - saved_act_alloc: sum over the stage's chunks of the schedule's peak of
 *     micro-batches in flight times tri_slot_bytes (the pool allocated up
 *     front); saved_act_peak: the most bytes of slots in use at once, from
 *     walking the rank's action list;
 *   - workspace: tri_workspace_bytes plus the pipeline's mailbox buffers
 *     (tri_pipe_box_need, parallel/pipeline.h).
 * The activation sizes always come from the runtime's own functions
 * (model/runtime.h) on a description of the stage's chunks, whose backend
 * keeps flash attention's state (B x heads x T fp32 log-sum-exp values) on
 * the CPU as on a GPU; for a GPU it needs no attention scratch (the CPU's
 * is a few tiles per thread).
 *
 * Time of one step (docs/plan.md): compute of the busiest pipeline stage
 * (GEMMs at a shape-dependent efficiency of the device's peak, attention at
 * a fixed efficiency, the other passes at memory bandwidth, recompute
 * adding forward work to backward, the optimizer at memory bandwidth), the
 * exposed TP, DP and PP communication (ring collectives at link bandwidth:
 * NVLink inside a node, InfiniBand across), and the bubble from the
 * schedule simulator (parallel/schedule.h) with the stage's forward and
 * backward costs. */
#ifndef TRI_PLAN_H
#define TRI_PLAN_H

#include <stddef.h>

#include "config/config.h"
#include "plan/devices.h"

/* What a planner keeps between calls: schedules (every rank's action list)
 * and their simulations by (schedule, pp, vpp, micro-batches), which the
 * layouts of a search share (a search over 64 devices runs about six times
 * faster with them). The caller owns it: {0} is an empty planner,
 * tri_planner_free releases what it holds. Every function below that takes
 * one also takes NULL: nothing kept, each call builds and frees what it
 * needs. Not for two threads at once. */
typedef struct tri_planner {
    struct tri_plan_sched *sched; /* [48], allocated on first use           */
    int n, next;                  /* entries held; the next one to replace  */
} tri_planner;

/* NULL-safe; leaves *pl empty ({0}) and reusable. */
void tri_planner_free(tri_planner *pl);

/* Memory of one rank, bytes; the keys of `trident bench`'s "mem". */
typedef struct tri_plan_mem {
    size_t params, grads, optim, saved_act_peak, saved_act_alloc, workspace;
    size_t total; /* params + grads + optim + saved_act_alloc + workspace */
    /* parallel.offload = optimizer: the optimizer's state in host memory
     * (optim is then 0), with on a GPU the staging copies of the gradients
     * (fp32) and parameters (their dtype) of the rank's shard; not in total */
    size_t host;
    int stage; /* the pipeline rank it describes                     */
} tri_plan_mem;

/* The step of one layout. Times in seconds. */
typedef struct tri_plan_time {
    int m;            /* micro-batches per step per DP rank                 */
    double compute_s; /* forward, backward, recompute and optimizer of the busiest stage */
    double tp_s;      /* exposed tensor-parallel collectives                */
    double dp_s;      /* exposed data-parallel reduction (and ZeRO gather)   */
    double pp_s;      /* exposed pipeline sends and receives                 */
    double bubble_s;  /* pipeline idle time of the busiest stage             */
    double bubble;    /* the simulator's ratio idle / busy                   */
    double step_s;    /* the sum                                             */
    double tokens_per_s;
    double model_flops; /* per step: tri_gpt_flops_per_token x tokens (no recompute) */
    double hw_flops;    /* per step, with what recompute adds                  */
    double tflops_per_gpu, mfu;
    /* bytes one rank sends per step (src/plan/shard.h): the DP (x CP)
     * gradient reduction and ZeRO's parameter gathers, the CP ring of the
     * busiest stage, and an offloaded optimizer's PCIe copies (a GPU) */
    double dp_bytes, cp_bytes, pcie_bytes;
} tri_plan_time;

/* Elements of the parameters of the given stage's chunks on one TP rank,
 * in closed form (every tensor rounded up to 16 elements, as the model's
 * tables lay them out; wte on the first and last stage). */
size_t tri_plan_param_elems(const tri_config *cfg, int pp_rank);

/* Memory of pipeline rank pp_rank (TP rank 0) of cfg's layout on gpu (NULL:
 * the CPU backend, sized by tri_gpt_describe as preflight sizes it; else the
 * closed form of the parameters and gpu's attention sizes). cfg's
 * train.precision sets the dtypes. Returns 0, or -1 with a message naming
 * the numbers (a layout the model or the schedule refuses). */
int tri_plan_stage_mem(tri_planner *pl, const tri_config *cfg, const tri_gpu_kind *gpu, int pp_rank, tri_plan_mem *out);
/* The largest total over the pipeline ranks. */
int tri_plan_memory(tri_planner *pl, const tri_config *cfg, const tri_gpu_kind *gpu, tri_plan_mem *out);

/* The step time of cfg's layout on gpu (may not be NULL; `--gpu cpu` builds
 * a kind from measurements). Returns 0 or -1 (printed). */
int tri_plan_time_step(tri_planner *pl, const tri_config *cfg, const tri_gpu_kind *gpu, tri_plan_time *out);

/* tri_plan_memory and tri_plan_time_step for a caller that tries many
 * layouts and reports the reasons itself (the search): 0, or -1 with the
 * planner's reason written into why (n bytes; the words the printing ones
 * print) and nothing printed. For a layout tri_plan_check accepted, a -1
 * with why left empty ("") is a failure that was printed where it happened
 * (out of memory), not a property of the layout. */
int tri_plan_memory_why(tri_planner *pl, const tri_config *cfg, const tri_gpu_kind *gpu, tri_plan_mem *out, char *why,
                        size_t n);
int tri_plan_time_step_why(tri_planner *pl, const tri_config *cfg, const tri_gpu_kind *gpu, tri_plan_time *out,
                           char *why, size_t n);

/* Why a layout is not a candidate, or "" when it is: checks tp | heads and
 * tp <= per_node, the layers over pp x vpp (tri_gpt_layout_why), the batch
 * over micro_batch x dp, the schedule's constraints (tri_schedule_check),
 * sequence parallelism's. Writes the reason into why (the words the
 * printing checks use); returns 0 when valid. Silent. */
int tri_plan_check(const tri_config *cfg, const tri_gpu_kind *gpu, char *why, size_t n);

/* Bytes per element of a train.precision: activations and parameters
 * (2 or 4); -1 for a dtype that is not a compute precision. */
int tri_plan_precision_bytes(tri_dtype precision);

#endif
