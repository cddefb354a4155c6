/* One pipeline stage's chunks, schedule and saved slots; see src/plan/stage_plan.h. */
#include "plan/stage_plan.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/size.h"

int tri_stage_plan_init(tri_stage_plan *sp, const tri_config *cfg, int pp_rank) {
    const tri_parallel_cfg *par = &cfg->parallel;
    memset(sp, 0, sizeof *sp);
    int pp = par->pp, vpp = par->vpp;
    if (vpp > TRI_MAX_VPP) return tri_error("parallel.vpp = %d: at most %d virtual chunks per stage", vpp, TRI_MAX_VPP);
    if (pp < 1 || vpp < 1 || pp_rank < 0 || pp_rank >= pp)
        return tri_error("internal error: pipeline stage %d of parallel.pp %d with parallel.vpp %d", pp_rank, pp, vpp);
    long per = (long)cfg->train.micro_batch * par->dp;
    if (per <= 0 || cfg->train.global_batch % per != 0 || cfg->train.global_batch / per < 1)
        return tri_error("train.global_batch (%d) is not a positive multiple of train.micro_batch (%d) x parallel.dp "
                         "(%d) = %ld",
                         cfg->train.global_batch, cfg->train.micro_batch, par->dp, per);
    tri_sched_kind kind = par->schedule;
    if (kind == TRI_SCHED_1F1B && vpp > 1) kind = TRI_SCHED_INTERLEAVED;
    sp->pp = pp;
    sp->vpp = vpp;
    sp->pp_rank = pp_rank;
    sp->m = (int)(cfg->train.global_batch / per);
    sp->kind = (tri_sched_kind)kind;
    sp->n_chunks = vpp;
    sp->split = kind == TRI_SCHED_ZBH1;
    sp->layers = malloc(((size_t)cfg->model.n_layer + 1) * sizeof *sp->layers);
    if (!sp->layers) return tri_error("out of memory (layer list of %d layers)", cfg->model.n_layer);
    if (tri_chunks_layout(&cfg->model, pp, pp_rank, vpp, par->pp_layout, sp->specs, sp->layers) != 0) {
        tri_stage_plan_free(sp);
        return -1;
    }

    tri_schedule s;
    if (tri_schedule_build(&s, sp->kind, pp, vpp, sp->m) != 0) {
        tri_stage_plan_free(sp);
        return -1; /* named the numbers */
    }
    tri_sim_result r;
    memset(&r, 0, sizeof r);
    tri_sim_costs unit = {1.0, 1.0, 1.0};
    int rc = tri_schedule_simulate(&s, unit, &r);
    if (rc != 0) {
        tri_error("out of memory (simulating the %s schedule of parallel.pp %d x parallel.vpp %d, %d micro-batches)",
                  tri_sched_name(sp->kind), pp, vpp, sp->m);
    } else if (r.deadlock || r.invalid) {
        rc = tri_error("internal error: the %s schedule of parallel.pp %d x parallel.vpp %d with %d micro-batches "
                       "%s in the simulator: %s",
                       tri_sched_name(sp->kind), pp, vpp, sp->m, r.deadlock ? "deadlocks" : "is invalid", r.why);
    } else {
        for (int c = 0; c < vpp; c++) {
            int peak = r.peak_chunk ? r.peak_chunk[pp_rank * vpp + c] : 1;
            sp->slots[c] = peak > 1 ? peak : 1;
        }
        sp->bubble = r.bubble;
    }
    tri_sim_result_free(&r);
    tri_schedule_free(&s);
    if (rc != 0) tri_stage_plan_free(sp);
    return rc;
}

void tri_stage_plan_free(tri_stage_plan *sp) {
    if (!sp) return;
    free(sp->layers);
    memset(sp, 0, sizeof *sp);
}

size_t tri_stage_plan_saved_bytes(const tri_stage_plan *sp, const tri_gpt *g, size_t B, size_t T,
                                  tri_recompute policy) {
    size_t total = 0;
    for (int c = 0; c < sp->n_chunks && c < g->n_chunks; c++) {
        size_t slot = tri_slot_bytes(g, c, B, T, policy, sp->split, NULL), all;
        if (slot == 0) return 0; /* named the numbers */
        if (!tri_size_mul(&all, slot, (size_t)sp->slots[c]) || !tri_size_add(&total, total, all)) {
            tri_error("the saved activations of pipeline stage %d (%d slots of %zu bytes for chunk %d) do not fit "
                      "in 64 bits",
                      sp->pp_rank, sp->slots[c], slot, c);
            return 0;
        }
    }
    return total;
}
