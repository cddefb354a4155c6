#include "model/optim.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

int tri_optim_init(tri_optim *o, const tri_gpt *g, const tri_adamw_cfg *cfg) {
    memset(o, 0, sizeof *o);
    o->cfg = *cfg;
    o->m = g->ops->alloc(g->n_floats * sizeof(float));
    o->v = g->ops->alloc(g->n_floats * sizeof(float));
    if (!o->m || !o->v) {
        fprintf(stderr, "trident: out of memory allocating optimizer state (%zu floats)\n", 2 * g->n_floats);
        tri_optim_free(o, g);
        return -1;
    }
    return 0;
}

void tri_optim_free(tri_optim *o, const tri_gpt *g) {
    if (!o) return;
    if (g && g->ops) {
        g->ops->free(o->m);
        g->ops->free(o->v);
    }
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
    for (int i = 0; i < g->n_params; i++) {
        const tri_param *p = &g->params[i];
        if (p->replicated && g->tp_rank != 0) continue;
        sum += g->ops->sumsq(g->grad_mem + p->offset, p->numel);
    }
    return sum;
}

void tri_optim_step(tri_optim *o, tri_gpt *g, double lr, float clip_scale) {
    o->t++;
    if (clip_scale != 1.0f) g->ops->scale(g->grad_mem, clip_scale, g->n_floats);
    for (int i = 0; i < g->n_params; i++) {
        const tri_param *p = &g->params[i];
        float wd = p->decay ? (float)o->cfg.weight_decay : 0.0f;
        g->ops->adamw(g->param_mem + p->offset, o->m + p->offset, o->v + p->offset, g->grad_mem + p->offset,
                      p->numel, (float)lr, (float)o->cfg.beta1, (float)o->cfg.beta2, (float)o->cfg.eps, wd, o->t);
    }
}
