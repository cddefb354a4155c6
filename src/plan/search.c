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

/* The candidates of one mesh (tp, cp, pp, dp): vpp, micro-batch,
 * recompute, ZeRO 0/1, in the search's order. 0, or visit's non-zero. */
static int mesh_candidates(const tri_search_opts *o, tri_search_reasons *rej,
                           int (*visit)(void *ctx, const tri_config *layout), void *ctx, int tp, int cp, int pp,
                           int dp) {
    const tri_config *base = o->base;
    const tri_search_fixed *fx = &o->fixed;
    const tri_model_cfg *m = &base->model;
    char why[TRI_SEARCH_WHY];
    for (int vpp = 1; vpp <= (pp > 1 ? 16 : 1); vpp++) {
        if (fx->vpp && vpp != base->parallel.vpp) continue;
        if (!fx->vpp && vpp > 1 && (m->n_layer % pp != 0 || (m->n_layer / pp) % vpp != 0)) continue;
        for (int mb = 1; mb <= 16; mb++) {
            if (fx->mb && mb != base->train.micro_batch) continue;
            if (base->train.global_batch % dp != 0 || (base->train.global_batch / dp) % mb != 0) {
                if (mb == 1) {
                    snprintf(why, sizeof why, "global_batch %d is not divisible by dp %d", base->train.global_batch,
                             dp);
                    tri_search_reason_add(rej, why);
                }
                continue;
            }
            for (int rc = TRI_RECOMPUTE_NONE; rc <= TRI_RECOMPUTE_FULL; rc++) {
                if (fx->recompute && (tri_recompute)rc != base->train.recompute) continue;
                /* ZeRO over the dp x cp ranks that share the state */
                for (int zero = 0; zero <= (dp * cp > 1 ? 1 : 0); zero++) {
                    if (fx->zero && zero != (base->parallel.zero ? 1 : 0)) continue;
                    tri_config c = *base;
                    c.parallel.tp = tp;
                    c.parallel.cp = cp;
                    c.parallel.pp = pp;
                    c.parallel.dp = dp;
                    c.parallel.vpp = vpp;
                    c.parallel.pp_layout[0] = '\0';
                    /* a fixed ZeRO 2 or 3 is the base's; offload as fixed, else none */
                    c.parallel.zero = fx->zero ? base->parallel.zero : zero;
                    if (!fx->offload) c.parallel.offload = TRI_OFFLOAD_NONE;
                    /* sequence parallelism: on wherever it applies on GPUs (same traffic,
                     * less memory), as configured on the CPU or when given */
                    int sp_ok = tp > 1 && (m->seq_len / cp) % tp == 0;
                    c.parallel.sequence_parallel =
                        (o->cpu || fx->sp) ? (base->parallel.sequence_parallel && sp_ok) : sp_ok;
                    if (vpp > 1 && c.parallel.schedule == TRI_SCHED_ZBH1) continue;
                    if (vpp == 1 && c.parallel.schedule == TRI_SCHED_INTERLEAVED) c.parallel.schedule = TRI_SCHED_1F1B;
                    c.train.micro_batch = mb;
                    c.train.recompute = (tri_recompute)rc;
                    int stop = visit(ctx, &c);
                    if (stop) return stop;
                }
            }
        }
    }
    return 0;
}

int tri_search_candidates(const tri_search_opts *o, tri_search_reasons *rej,
                          int (*visit)(void *ctx, const tri_config *layout), void *ctx) {
    const tri_config *base = o->base;
    const tri_search_fixed *fx = &o->fixed;
    const int gpus = o->gpus;
    for (int tp = 1; tp <= gpus && tp <= o->gpu->per_node; tp++) {
        if (gpus % tp || (fx->tp && tp != base->parallel.tp)) continue;
        for (int cp = 1; cp <= gpus / tp; cp++) {
            if ((gpus / tp) % cp || (fx->cp && cp != base->parallel.cp)) continue;
            if (cp > 1 && base->model.seq_len % (2 * cp) != 0) continue;
            const int rest = gpus / tp / cp;
            for (int pp = 1; pp <= rest; pp++) {
                if (rest % pp || (fx->pp && pp != base->parallel.pp)) continue;
                int dp = rest / pp;
                if (fx->dp && dp != base->parallel.dp) continue;
                int stop = mesh_candidates(o, rej, visit, ctx, tp, cp, pp, dp);
                if (stop) return stop;
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
    /* over the limit: ZeRO 2, 3, then offload (tri_search_run in search.h) */
    tri_parallel_cfg *par = &row.cfg.parallel;
    int shardable = par->dp * par->cp > 1 && par->zero == 1 && !o->fixed.zero, over = !row.fits;
    for (int step = 0; !row.fits && step < 3; step++) {
        tri_plan_row next = row;
        if (step < 2) {
            if (!shardable) continue;
            next.cfg.parallel.zero = 2 + step;
        } else {
            if (o->fixed.offload || par->offload == TRI_OFFLOAD_OPTIMIZER) break;
            /* from zero 0 only where there is nothing to shard */
            if (par->zero == 0 && par->dp * par->cp > 1 && !o->fixed.zero) break;
            next.cfg.parallel.offload = TRI_OFFLOAD_OPTIMIZER;
        }
        r->tried++;
        if (tri_search_evaluate(x->pl, &next, o->gpu, o->cpu, o->limit, why, sizeof why) != 0) {
            if (!why[0]) return -1;
            tri_search_reason_add(&r->refused, why);
            break;
        }
        over += !next.fits;
        if (next.fits || (double)next.mem.total < (double)row.mem.total) row = next;
    }
    r->oom += over; /* every try over the limit, the candidate's included */
    if (!row.fits) {
        double excess = (double)row.mem.total - o->limit;
        if (r->closest_over < 0 || excess < r->closest_over) {
            r->closest_over = excess;
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
