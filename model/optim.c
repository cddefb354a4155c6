#include "model/optim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/base/err.h"

int tri_optim_init(tri_optim *o, const tri_gpt *g, const tri_adamw_cfg *cfg) {
    memset(o, 0, sizeof *o);
    o->cfg = *cfg;
    o->m = calloc((size_t)g->n_chunks + 1, sizeof *o->m);
    o->v = calloc((size_t)g->n_chunks + 1, sizeof *o->v);
    if (!o->m || !o->v) {
        tri_optim_free(o, g);
        return tri_error("out of memory (optimizer tables)");
    }
    o->n_chunks = g->n_chunks;
    for (int k = 0; k < g->n_chunks; k++) {
        size_t bytes = g->chunks[k].n_elems * sizeof(float);
        o->m[k] = tri_ctx_alloc(g->ctx, bytes, TRI_MEM_OPTIM, "optimizer state (exp_avg)");
        o->v[k] = o->m[k] ? tri_ctx_alloc(g->ctx, bytes, TRI_MEM_OPTIM, "optimizer state (exp_avg_sq)") : NULL;
        if (!o->v[k]) {
            tri_optim_free(o, g);
            return -1;
        }
    }
    return 0;
}

void tri_optim_free(tri_optim *o, const tri_gpt *g) {
    if (!o) return;
    for (int k = 0; k < o->n_chunks && g && g->ctx; k++) {
        size_t bytes = g->chunks[k].n_elems * sizeof(float);
        if (o->m) tri_ctx_release(g->ctx, o->m[k], bytes, TRI_MEM_OPTIM);
        if (o->v) tri_ctx_release(g->ctx, o->v[k], bytes, TRI_MEM_OPTIM);
    }
    free(o->m);
    free(o->v);
    memset(o, 0, sizeof *o);
}

double tri_lr_at(const tri_adamw_cfg *c, int s) {
    if (c->warmup_steps > 0 && s < c->warmup_steps) return c->lr * (double)(s + 1) / (double)c->warmup_steps;
    int decay_steps = c->total_steps - c->warmup_steps;
    if (decay_steps <= 0 || s >= c->total_steps) return c->min_lr;
    double ratio = (double)(s - c->warmup_steps) / (double)decay_steps;
    double coeff = 0.5 * (1.0 + cos(M_PI * ratio));
    return c->min_lr + coeff * (c->lr - c->min_lr);
}

double tri_grad_sumsq_local(const tri_gpt *g) {
    double sum = 0.0;
    for (int k = 0; k < g->n_chunks; k++) {
        const tri_chunk *ch = &g->chunks[k];
        for (int i = 0; i < ch->n_params; i++) {
            const tri_param *p = &ch->params[i];
            if (p->replicated && g->tp_rank != 0) continue;
            /* the tied embedding counts once: the head stage's copy is skipped */
            if (p->kind == TRI_P_WTE && !ch->has_embedding) continue;
            sum += g->ctx->ops->sumsq(g->ctx, ch->grad_mem + p->offset, p->numel);
        }
    }
    return sum;
}

void tri_optim_step(tri_optim *o, tri_gpt *g, double lr, float clip_scale) {
    tri_ctx *c = g->ctx;
    o->t++;
    for (int k = 0; k < g->n_chunks; k++) {
        tri_chunk *ch = &g->chunks[k];
        TRI_CHECK(ch->param_dtype == TRI_F32); /* fp32 parameters are their own master weights */
        if (clip_scale != 1.0f) c->ops->scale(c, ch->grad_mem, clip_scale, ch->n_elems);
        float *pm = ch->param_mem;
        for (int i = 0; i < ch->n_params; i++) {
            const tri_param *p = &ch->params[i];
            float wd = p->decay ? (float)o->cfg.weight_decay : 0.0f;
            c->ops->adamw(c, pm + p->offset, o->m[k] + p->offset, o->v[k] + p->offset, ch->grad_mem + p->offset,
                          p->numel, (float)lr, (float)o->cfg.beta1, (float)o->cfg.beta2, (float)o->cfg.eps, wd, o->t);
        }
    }
}
