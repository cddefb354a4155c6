/* The layout search; see src/plan/search.h and docs/plan.md. */
#include "plan/search.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"

void tri_search_reason_add(tri_search_reasons *r, const char *why) {
    for (int i = 0; i < r->n; i++)
        if (!strcmp(r->text[i], why)) {
            r->count[i]++;
            return;
        }
    if (r->n < TRI_SEARCH_REASONS) {
        snprintf(r->text[r->n], sizeof r->text[0], "%s", why);
        r->count[r->n++] = 1;
    } else {
        r->other++;
    }
}

int tri_search_candidates(const tri_search_opts *o, tri_search_reasons *rej,
                          int (*visit)(void *ctx, const tri_config *layout), void *ctx) {
    const tri_config *base = o->base;
    const tri_search_fixed *fx = &o->fixed;
    const tri_model_cfg *m = &base->model;
    const int gpus = o->gpus;
    char why[TRI_SEARCH_WHY];
    for (int tp = 1; tp <= gpus && tp <= o->gpu->per_node; tp++) {
        if (gpus % tp || (fx->tp && tp != base->parallel.tp)) continue;
        for (int pp = 1; pp <= gpus / tp; pp++) {
            if ((gpus / tp) % pp || (fx->pp && pp != base->parallel.pp)) continue;
            int dp = gpus / tp / pp;
            if (fx->dp && dp != base->parallel.dp) continue;
            for (int vpp = 1; vpp <= (pp > 1 ? 16 : 1); vpp++) {
                if (fx->vpp && vpp != base->parallel.vpp) continue;
                if (!fx->vpp && vpp > 1 && (m->n_layer % pp != 0 || (m->n_layer / pp) % vpp != 0)) continue;
                for (int mb = 1; mb <= 16; mb++) {
                    if (fx->mb && mb != base->train.micro_batch) continue;
                    if (base->train.global_batch % dp != 0 || (base->train.global_batch / dp) % mb != 0) {
                        if (mb == 1) {
                            snprintf(why, sizeof why, "global_batch %d is not divisible by dp %d",
                                     base->train.global_batch, dp);
                            tri_search_reason_add(rej, why);
                        }
                        continue;
                    }
                    for (int rc = TRI_RECOMPUTE_NONE; rc <= TRI_RECOMPUTE_FULL; rc++) {
                        if (fx->recompute && (tri_recompute)rc != base->train.recompute) continue;
                        for (int zero = 0; zero <= (dp > 1); zero++) {
                            if (fx->zero && zero != base->parallel.zero) continue;
                            tri_config c = *base;
                            c.parallel.tp = tp;
                            c.parallel.pp = pp;
                            c.parallel.dp = dp;
                            c.parallel.vpp = vpp;
                            c.parallel.pp_layout[0] = '\0';
                            c.parallel.zero = zero;
                            /* sequence parallelism: on wherever it applies on GPUs (same traffic,
                             * less memory), as configured on the CPU or when given */
                            int sp_ok = tp > 1 && m->seq_len % tp == 0;
                            c.parallel.sequence_parallel =
                                (o->cpu || fx->sp) ? (base->parallel.sequence_parallel && sp_ok) : sp_ok;
                            if (vpp > 1 && c.parallel.schedule == TRI_SCHED_ZBH1) continue;
                            if (vpp == 1 && c.parallel.schedule == TRI_SCHED_INTERLEAVED)
                                c.parallel.schedule = TRI_SCHED_1F1B;
                            c.train.micro_batch = mb;
                            c.train.recompute = (tri_recompute)rc;
                            int stop = visit(ctx, &c);
                            if (stop) return stop;
                        }
                    }
                }
            }
        }
    }
    return 0;
}

int tri_search_evaluate(tri_planner *pl, tri_plan_row *row, const tri_gpu_kind *gpu, int cpu, double limit, char *why,
                        size_t n) {
    if (tri_plan_memory_why(pl, &row->cfg, cpu ? NULL : gpu, &row->mem, why, n) != 0) return -1;
    if (tri_plan_time_step_why(pl, &row->cfg, gpu, &row->time, why, n) != 0) return -1;
    row->fits = (double)row->mem.total <= limit;
    return 0;
}

/* The search's state while it visits the candidates. */
typedef struct run_ctx {
    tri_planner *pl;
    const tri_search_opts *o;
    tri_search_result *r;
    size_t cap; /* rows allocated */
} run_ctx;

/* One candidate: checked, evaluated, and kept, counted as over the limit,
 * or counted by why it is invalid. 0, or -1 after a printed failure. */
static int visit_one(void *ctx, const tri_config *layout) {
    run_ctx *x = ctx;
    tri_search_result *r = x->r;
    const tri_search_opts *o = x->o;
    char why[TRI_SEARCH_WHY];
    tri_plan_row row;
    memset(&row, 0, sizeof row);
    row.cfg = *layout;
    r->tried++;
    if (tri_plan_check(&row.cfg, o->gpu, why, sizeof why) != 0) {
        tri_search_reason_add(&r->refused, why);
        return 0;
    }
    if (tri_search_evaluate(x->pl, &row, o->gpu, o->cpu, o->limit, why, sizeof why) != 0) {
        if (!why[0]) return -1; /* not the layout's fault, and printed */
        tri_search_reason_add(&r->refused, why);
        return 0;
    }
    if (!row.fits) {
        r->oom++;
        double over = (double)row.mem.total - o->limit;
        if (r->closest_over < 0 || over < r->closest_over) {
            r->closest_over = over;
            r->closest = row;
        }
        return 0;
    }
    if (r->n == x->cap) {
        tri_plan_row *nr = realloc(r->rows, 2 * x->cap * sizeof *r->rows);
        if (!nr) return tri_error("out of memory");
        r->rows = nr;
        x->cap *= 2;
    }
    r->rows[r->n++] = row;
    return 0;
}

static int cmp_rows(const void *a, const void *b) {
    const tri_plan_row *x = a, *y = b;
    return (x->time.step_s > y->time.step_s) - (x->time.step_s < y->time.step_s);
}

int tri_search_run(tri_planner *pl, const tri_search_opts *o, tri_search_result *r) {
    memset(r, 0, sizeof *r);
    r->closest_over = -1;
    run_ctx x = {pl, o, r, 256};
    r->rows = malloc(x.cap * sizeof *r->rows);
    if (!r->rows) return tri_error("out of memory");
    if (tri_search_candidates(o, &r->refused, visit_one, &x) != 0) return -1;
    qsort(r->rows, r->n, sizeof *r->rows, cmp_rows);
    return 0;
}

void tri_search_result_free(tri_search_result *r) {
    if (!r) return;
    free(r->rows);
    memset(r, 0, sizeof *r);
}
