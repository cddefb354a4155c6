#include "model/optim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"

/* One stretch of chunk k the host step moves and updates as a whole:
 * elements [lo, hi) of the chunk, at state index s0 of m[k] (a ZeRO
 * bucket's shard b, or the whole chunk with b -1). */
typedef struct tri_optim_unit {
    int k, b;
    size_t lo, hi, s0;
} unit;

/* The argument of chunk k's bucket hook (tri_optim_offload_overlap). */
typedef struct tri_optim_hook {
    tri_optim *o;
    const tri_gpt *g;
    int k;
} hook;

/* The state's memory: backend memory, or host-side under offload. */
static void *state_alloc(tri_optim *o, const tri_gpt *g, size_t bytes, const char *what) {
    return o->offload ? tri_ctx_host_alloc(g->ctx, bytes, TRI_MEM_OPTIM, what)
                      : tri_ctx_alloc(g->ctx, bytes, TRI_MEM_OPTIM, what);
}
static void state_release(tri_optim *o, const tri_gpt *g, void *p, size_t bytes) {
    if (o->offload)
        tri_ctx_host_release(g->ctx, p, bytes, TRI_MEM_OPTIM);
    else
        tri_ctx_release(g->ctx, p, bytes, TRI_MEM_OPTIM);
}

/* The host step's units, staging buffers and host context. */
static int host_step_init(tri_optim *o, const tri_gpt *g) {
    int n = 0;
    for (int k = 0; k < g->n_chunks; k++) n += o->sync ? o->sync[k].n_buckets : 1;
    o->units = calloc((size_t)n + 1, sizeof *o->units);
    o->hgrad = calloc((size_t)g->n_chunks + 1, sizeof *o->hgrad);
    o->hparam = calloc((size_t)g->n_chunks + 1, sizeof *o->hparam);
    o->host = calloc(1, sizeof *o->host);
    if (!o->units || !o->hgrad || !o->hparam || !o->host) return tri_error("out of memory (optimizer tables)");
    if (tri_ctx_init_ops(o->host, tri_ops_cpu(), 0) != 0) {
        free(o->host);
        o->host = NULL;
        return -1;
    }
    for (int k = 0; k < g->n_chunks; k++) {
        const tri_chunk *ch = &g->chunks[k];
        if (!o->sync) {
            o->units[o->n_units++] = (unit){k, -1, 0, ch->n_elems, 0};
        } else {
            size_t s0 = 0;
            for (int b = 0; b < o->sync[k].n_buckets; b++) {
                size_t lo, hi;
                tri_grad_sync_shard(&o->sync[k], b, &lo, &hi);
                o->units[o->n_units++] = (unit){k, b, lo, hi, s0};
                s0 += hi - lo;
            }
        }
        size_t n_st = o->n_state[k];
        o->hgrad[k] = tri_ctx_host_alloc(g->ctx, n_st * sizeof(float), TRI_MEM_GRADS, "offload staging (gradients)");
        o->hparam[k] = o->hgrad[k] ? tri_ctx_host_alloc(g->ctx, n_st * tri_dtype_size(ch->param_dtype), TRI_MEM_PARAMS,
                                                        "offload staging (parameters)")
                                   : NULL;
        if (!o->hparam[k]) return -1;
    }
    return 0;
}

static int init(tri_optim *o, const tri_gpt *g, const tri_adamw_cfg *cfg, const tri_grad_sync *sync) {
    memset(o, 0, sizeof *o);
    o->cfg = *cfg;
    o->sync = sync;
    o->offload = cfg->offload == TRI_OFFLOAD_OPTIMIZER;
    o->host_step = o->offload && tri_ctx_host_apart(g->ctx);
    o->m = calloc((size_t)g->n_chunks + 1, sizeof *o->m);
    o->v = calloc((size_t)g->n_chunks + 1, sizeof *o->v);
    o->n_state = calloc((size_t)g->n_chunks + 1, sizeof *o->n_state);
    o->master = calloc((size_t)g->n_chunks + 1, sizeof *o->master);
    if (!o->m || !o->v || !o->n_state || !o->master) {
        tri_optim_free(o, g);
        return tri_error("out of memory (optimizer tables)");
    }
    o->n_chunks = g->n_chunks;
    int most = 1;
    for (int k = 0; k < g->n_chunks; k++) most = g->chunks[k].n_params > most ? g->chunks[k].n_params : most;
    o->spans = calloc((size_t)most, sizeof *o->spans);
    if (!o->spans) {
        tri_optim_free(o, g);
        return tri_error("out of memory (optimizer tables)");
    }
    for (int k = 0; k < g->n_chunks; k++) {
        size_t n = g->chunks[k].n_elems;
        if (sync) {
            n = 0;
            for (int b = 0; b < sync[k].n_buckets; b++) {
                size_t lo, hi;
                tri_grad_sync_shard(&sync[k], b, &lo, &hi);
                n += hi - lo;
            }
        }
        o->n_state[k] = n;
        size_t bytes = n * sizeof(float);
        o->m[k] = state_alloc(o, g, bytes, "optimizer state (exp_avg)");
        o->v[k] = o->m[k] ? state_alloc(o, g, bytes, "optimizer state (exp_avg_sq)") : NULL;
        if (!o->v[k]) {
            tri_optim_free(o, g);
            return -1;
        }
        /* 16-bit parameters: the fp32 master weights of the same elements */
        if (g->chunks[k].param_dtype != TRI_F32) {
            o->master[k] = state_alloc(o, g, bytes, "optimizer state (fp32 master weights)");
            if (!o->master[k]) {
                tri_optim_free(o, g);
                return -1;
            }
        }
    }
    if (o->host_step && host_step_init(o, g) != 0) {
        tri_optim_free(o, g);
        return -1;
    }
    return 0;
}

/* Under host_step: each unit's 16-bit parameters to the host, widened into
 * the masters there. */
static void master_from_params_host(tri_optim *o, const tri_gpt *g) {
    tri_ctx *c = g->ctx;
    for (int i = 0; i < o->n_units; i++) {
        const unit *u = &o->units[i];
        const tri_chunk *ch = &g->chunks[u->k];
        if (!o->master[u->k]) continue;
        const size_t esz = tri_dtype_size(ch->param_dtype), n = u->hi - u->lo;
        char *hp = (char *)o->hparam[u->k] + u->s0 * esz;
        tri_ctx_copy_start(c, 0, hp, (const char *)ch->param_mem + u->lo * esz, n * esz, 1);
        tri_ctx_copy_wait(c, 0);
        o->host->ops->cast(o->host, o->master[u->k] + u->s0, TRI_F32, hp, ch->param_dtype, n);
    }
}

void tri_optim_master_from_params(tri_optim *o, const tri_gpt *g) {
    tri_ctx *c = g->ctx;
    if (o->host_step) {
        master_from_params_host(o, g);
        return;
    }
    for (int k = 0; k < g->n_chunks; k++) {
        const tri_chunk *ch = &g->chunks[k];
        if (!o->master[k]) continue;
        const size_t esz = tri_dtype_size(ch->param_dtype);
        if (!o->sync) {
            c->ops->cast(c, o->master[k], TRI_F32, ch->param_mem, ch->param_dtype, ch->n_elems);
            continue;
        }
        size_t s0 = 0;
        for (int b = 0; b < o->sync[k].n_buckets; b++) {
            size_t lo, hi;
            tri_grad_sync_shard(&o->sync[k], b, &lo, &hi);
            c->ops->cast(c, o->master[k] + s0, TRI_F32, (const char *)ch->param_mem + lo * esz, ch->param_dtype,
                         hi - lo);
            s0 += hi - lo;
        }
    }
}

int tri_optim_init(tri_optim *o, const tri_gpt *g, const tri_adamw_cfg *cfg) { return init(o, g, cfg, NULL); }

int tri_optim_init_zero(tri_optim *o, const tri_gpt *g, const tri_adamw_cfg *cfg, const tri_grad_sync *sync) {
    return init(o, g, cfg, sync);
}

void tri_optim_free(tri_optim *o, const tri_gpt *g) {
    if (!o) return;
    for (int k = 0; k < o->n_chunks && g && g->ctx && o->n_state; k++) {
        size_t bytes = o->n_state[k] * sizeof(float);
        if (o->m) state_release(o, g, o->m[k], bytes);
        if (o->v) state_release(o, g, o->v[k], bytes);
        if (o->master) state_release(o, g, o->master[k], bytes);
        if (o->hgrad) tri_ctx_host_release(g->ctx, o->hgrad[k], bytes, TRI_MEM_GRADS);
        if (o->hparam)
            tri_ctx_host_release(g->ctx, o->hparam[k], o->n_state[k] * tri_dtype_size(g->chunks[k].param_dtype),
                                 TRI_MEM_PARAMS);
    }
    if (o->host) tri_ctx_free(o->host);
    free(o->host);
    free(o->first_unit);
    free(o->hooks);
    free(o->hgrad);
    free(o->hparam);
    free(o->units);
    free(o->master);
    free(o->spans);
    free(o->m);
    free(o->v);
    free(o->n_state);
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

/* Spans of the gradient whose squares a norm adds: a growable host table. */
typedef struct span_list {
    const float **xs;
    size_t *ns;
    int n, cap;
} span_list;

static void span_add(span_list *l, const float *x, size_t n) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        const float **xs = realloc(l->xs, (size_t)cap * sizeof *xs);
        size_t *ns = xs ? realloc(l->ns, (size_t)cap * sizeof *ns) : NULL;
        if (!xs || !ns) TRI_FAIL("out of host memory for the gradient norm's table of %d spans", cap);
        l->xs = xs, l->ns = ns, l->cap = cap;
    }
    l->xs[l->n] = x;
    l->ns[l->n++] = n;
}

/* The sum of squares of the listed spans (one reduction on a GPU), and the
 * list freed. */
static double span_sumsq(tri_ctx *c, span_list *l) {
    double sum = tri_ctx_sumsq_multi(c, (const float *const *)l->xs, l->ns, l->n);
    free(l->xs);
    free(l->ns);
    memset(l, 0, sizeof *l);
    return sum;
}

double tri_grad_sumsq_local(const tri_gpt *g) {
    span_list l = {0};
    for (int k = 0; k < g->n_chunks; k++) {
        const tri_chunk *ch = &g->chunks[k];
        for (int i = 0; i < ch->n_params; i++) {
            const tri_param *p = &ch->params[i];
            if (p->replicated && g->tp_rank != 0) continue;
            if (g->tp_rank % p->tp_replicas != 0) continue; /* a replicated KV head counts once */
            /* the tied embedding counts once: the head stage's copy is skipped */
            if (p->kind == TRI_P_WTE && !ch->has_embedding) continue;
            span_add(&l, ch->grad_mem + p->offset, p->numel);
        }
    }
    return span_sumsq(g->ctx, &l);
}

void tri_optim_runs(const tri_optim *o, const tri_gpt *g, int k, int i,
                    void (*fn)(void *ctx, size_t a, size_t e, size_t s0), void *ctx) {
    const tri_param *p = &g->chunks[k].params[i];
    if (!o->sync) {
        fn(ctx, 0, p->numel, p->offset);
        return;
    }
    const tri_grad_sync *s = &o->sync[k];
    size_t s0 = 0;
    for (int b = 0; b < s->n_buckets; b++) {
        size_t lo, hi;
        tri_grad_sync_shard(s, b, &lo, &hi);
        size_t a = lo > p->offset ? lo : p->offset, e = hi < p->offset + p->numel ? hi : p->offset + p->numel;
        if (a < e) fn(ctx, a - p->offset, e - p->offset, s0 + (a - lo));
        s0 += hi - lo;
    }
}

/* Whether parameter p of chunk ch counts in the global norm on this rank. */
static int counted(const tri_gpt *g, const tri_chunk *ch, const tri_param *p) {
    if (p->replicated && g->tp_rank != 0) return 0;
    if (g->tp_rank % p->tp_replicas != 0) return 0; /* a replicated KV head counts once */
    return !(p->kind == TRI_P_WTE && !ch->has_embedding);
}

typedef struct run_ctx {
    const tri_gpt *g;
    const tri_chunk *ch;
    const tri_param *p;
    const float *shard; /* ZeRO-2: the chunk's reduced shards; NULL: in grad_mem */
    span_list spans;
} run_ctx;

static void sumsq_run(void *ctx, size_t a, size_t e, size_t s0) {
    run_ctx *r = ctx;
    /* ZeRO-2: the reduced shards lie in their own buffer, at the state index */
    if (r->shard) {
        span_add(&r->spans, r->shard + s0, e - a);
        return;
    }
    span_add(&r->spans, r->ch->grad_mem + r->p->offset + a, e - a);
}

double tri_grad_sumsq_shards(const tri_optim *o, const tri_gpt *g) {
    run_ctx r = {.g = g};
    for (int k = 0; k < g->n_chunks; k++) {
        r.ch = &g->chunks[k];
        r.shard = o->sync ? o->sync[k].shard : NULL;
        for (int i = 0; i < r.ch->n_params; i++) {
            r.p = &r.ch->params[i];
            if (counted(g, r.ch, r.p)) tri_optim_runs(o, g, k, i, sumsq_run, &r);
        }
    }
    return span_sumsq(g->ctx, &r.spans);
}

/* ZeRO: bucket by bucket, this rank's shard of each. */
static void step_zero(tri_optim *o, tri_gpt *g, double lr, float clip_scale) {
    tri_ctx *c = g->ctx;
    for (int k = 0; k < g->n_chunks; k++) {
        tri_chunk *ch = &g->chunks[k];
        const tri_grad_sync *s = &o->sync[k];
        float *pm = ch->param_mem, *mw = o->master[k]; /* fp32 parameters are their own master weights */
        const size_t esz = tri_dtype_size(ch->param_dtype);
        /* ZeRO-2: the reduced gradient shards in their own buffer, laid out
         * like the moments (element a of the chunk at state index st) */
        float *gs = s->shard;
        /* ZeRO-3: the parameters' shards in their own buffer, laid out the same */
        char *ps = s->pshard;
        size_t s0 = 0;
        for (int b = 0; b < s->n_buckets; b++) {
            size_t lo, hi;
            tri_grad_sync_shard(s, b, &lo, &hi);
            if (clip_scale != 1.0f) c->ops->scale(c, gs ? gs + s0 : ch->grad_mem + lo, clip_scale, hi - lo);
            int n = 0;
            for (int i = 0; i < ch->n_params; i++) {
                const tri_param *p = &ch->params[i];
                size_t a = lo > p->offset ? lo : p->offset, e = hi < p->offset + p->numel ? hi : p->offset + p->numel;
                if (a >= e) continue;
                size_t st = s0 + (a - lo);
                float *own = ps ? (float *)ps + st : pm + a; /* fp32: the parameters are the masters */
                o->spans[n++] = (tri_adamw_span){.param = mw ? mw + st : own,
                                                 .m = o->m[k] + st,
                                                 .v = o->v[k] + st,
                                                 .grad = gs ? gs + st : ch->grad_mem + a,
                                                 .n = e - a,
                                                 .wd = p->decay ? (float)o->cfg.weight_decay : 0.0f};
            }
            tri_ctx_adamw_multi(c, o->spans, n, (float)lr, (float)o->cfg.beta1, (float)o->cfg.beta2, (float)o->cfg.eps,
                                o->t);
            /* 16-bit parameters: the shard rounded from its masters, then all-gathered in 16 bits */
            char *pdst = ps ? ps + s0 * esz : (char *)ch->param_mem + lo * esz;
            if (mw) c->ops->cast(c, pdst, ch->param_dtype, mw + s0, TRI_F32, hi - lo);
            s0 += hi - lo;
            if (o->shard_done) o->shard_done(o->shard_done_ctx, k, b);
        }
    }
}

/* Where unit u's reduced gradients lie on the device: in grad_mem, or
 * (ZeRO-2) in the shard buffer at the state index. */
static const float *unit_grads(const tri_optim *o, const tri_gpt *g, const unit *u) {
    const tri_grad_sync *s = o->sync ? &o->sync[u->k] : NULL;
    return s && s->shard ? s->shard + u->s0 : g->chunks[u->k].grad_mem + u->lo;
}

/* Where unit u's parameters live on the device: in param_mem, or (ZeRO-3)
 * in the parameters' shard buffer at the state index. */
static char *unit_params(const tri_optim *o, const tri_gpt *g, const unit *u) {
    const tri_grad_sync *s = o->sync ? &o->sync[u->k] : NULL;
    const size_t esz = tri_dtype_size(g->chunks[u->k].param_dtype);
    return s && s->pshard ? (char *)s->pshard + u->s0 * esz : (char *)g->chunks[u->k].param_mem + u->lo * esz;
}

/* Starts unit i's copies to the host (copy slots: 2i for its gradients,
 * then its parameters back; 2i + 1 for its fp32 parameters, which are the
 * masters and stay on the device), behind everything queued so far. */
static void unit_start(const tri_optim *o, const tri_gpt *g, int i) {
    const unit *u = &o->units[i];
    const size_t n = u->hi - u->lo;
    tri_ctx_copy_start(g->ctx, 2 * i, o->hgrad[u->k] + u->s0, unit_grads(o, g, u), n * sizeof(float), 1);
    if (!o->master[u->k])
        tri_ctx_copy_start(g->ctx, 2 * i + 1, (float *)o->hparam[u->k] + u->s0, unit_params(o, g, u), n * sizeof(float),
                           1);
}

/* Bucket b of chunk k is reduced (grad_sync's hook): its unit's copies start. */
static void bucket_reduced(void *ctx, int b) {
    const hook *h = ctx;
    unit_start(h->o, h->g, h->o->first_unit[h->k] + b);
}

int tri_optim_offload_overlap(tri_optim *o, const tri_gpt *g, tri_grad_sync *sync) {
    if (!o->host_step) return 0;
    if (o->sync && o->sync != sync)
        return tri_error("internal error: the offloaded optimizer's buckets are not its ZeRO shards'");
    int n = 0;
    for (int k = 0; k < g->n_chunks; k++) {
        if (!o->sync && sync[k].n_floats != g->chunks[k].n_elems)
            return tri_error("internal error: chunk %d's buckets cover %zu gradients of %zu", k, sync[k].n_floats,
                             g->chunks[k].n_elems);
        n += sync[k].n_buckets;
    }
    o->first_unit = calloc((size_t)g->n_chunks + 1, sizeof *o->first_unit);
    o->hooks = calloc((size_t)g->n_chunks + 1, sizeof *o->hooks);
    unit *units = o->sync ? NULL : calloc((size_t)n + 1, sizeof *units);
    if (!o->first_unit || !o->hooks || (!o->sync && !units)) {
        free(units);
        return tri_error("out of memory (optimizer tables)");
    }
    /* without ZeRO the units become the buckets (under ZeRO they are already
     * the buckets' shards): each its own stretch of the chunk, at its own
     * state index */
    int i = 0;
    for (int k = 0; k < g->n_chunks; k++) {
        o->first_unit[k] = i;
        for (int b = 0; units && b < sync[k].n_buckets; b++)
            units[i + b] = (unit){k, b, sync[k].bounds[b], sync[k].bounds[b + 1], sync[k].bounds[b]};
        i += sync[k].n_buckets;
    }
    if (units) {
        free(o->units);
        o->units = units;
        o->n_units = n;
    }
    for (int k = 0; k < g->n_chunks; k++) {
        o->hooks[k] = (hook){o, g, k};
        if (tri_grad_sync_on_bucket(&sync[k], bucket_reduced, &o->hooks[k]) != 0) return -1;
    }
    o->overlap = sync;
    return 0;
}

/* The step on the host (host_step): see tri_optim_step in optim.h. */
static void step_host(tri_optim *o, tri_gpt *g, double lr, float clip_scale) {
    tri_ctx *c = g->ctx, *h = o->host;
    /* the units whose bucket's hook has not started them during the backward */
    for (int i = 0; i < o->n_units; i++)
        if (!o->overlap || !tri_grad_sync_told(&o->overlap[o->units[i].k], o->units[i].b)) unit_start(o, g, i);
    for (int i = 0; i < o->n_units; i++) {
        const unit *u = &o->units[i];
        tri_chunk *ch = &g->chunks[u->k];
        const size_t n = u->hi - u->lo, esz = tri_dtype_size(ch->param_dtype);
        float *mw = o->master[u->k], *gr = o->hgrad[u->k];
        char *hp = (char *)o->hparam[u->k];
        tri_ctx_copy_wait(c, 2 * i);
        if (!mw) tri_ctx_copy_wait(c, 2 * i + 1);
        if (clip_scale != 1.0f) h->ops->scale(h, gr + u->s0, clip_scale, n);
        float *pm = mw ? mw : (float *)hp; /* indexed by state index */
        int cnt = 0;
        for (int j = 0; j < ch->n_params; j++) {
            const tri_param *p = &ch->params[j];
            size_t a = u->lo > p->offset ? u->lo : p->offset;
            size_t e = u->hi < p->offset + p->numel ? u->hi : p->offset + p->numel;
            if (a >= e) continue;
            size_t st = u->s0 + (a - u->lo);
            o->spans[cnt++] = (tri_adamw_span){.param = pm + st,
                                               .m = o->m[u->k] + st,
                                               .v = o->v[u->k] + st,
                                               .grad = gr + st,
                                               .n = e - a,
                                               .wd = p->decay ? (float)o->cfg.weight_decay : 0.0f};
        }
        tri_ctx_adamw_multi(h, o->spans, cnt, (float)lr, (float)o->cfg.beta1, (float)o->cfg.beta2, (float)o->cfg.eps,
                            o->t);
        /* 16-bit parameters: rounded from the masters on the host, half the bytes back */
        if (mw) h->ops->cast(h, hp + u->s0 * esz, ch->param_dtype, mw + u->s0, TRI_F32, n);
        tri_ctx_copy_start(c, 2 * i, unit_params(o, g, u), hp + u->s0 * esz, n * esz, 0);
        if (o->shard_done) {
            tri_ctx_copy_join(c); /* the all-gather of the shard reads what the copy wrote */
            o->shard_done(o->shard_done_ctx, u->k, u->b);
        }
    }
    tri_ctx_copy_join(c);
}

/* Whether p lies in the state the optimizer keeps in host memory. */
static int host_state(const tri_optim *o, const void *p) {
    if (!o || !o->host_step) return 0;
    const char *q = p;
    for (int k = 0; k < o->n_chunks; k++) {
        const float *bufs[3] = {o->m[k], o->v[k], o->master[k]};
        for (int j = 0; j < 3; j++)
            if (bufs[j] && q >= (const char *)bufs[j] && q < (const char *)(bufs[j] + o->n_state[k])) return 1;
    }
    return 0;
}

void tri_optim_copy_to_host(const tri_optim *o, const tri_gpt *g, void *host, const float *src, size_t bytes) {
    if (host_state(o, src))
        memcpy(host, src, bytes);
    else
        tri_ctx_to_host(g->ctx, host, src, bytes);
}

void tri_optim_copy_from_host(const tri_optim *o, const tri_gpt *g, float *dst, const void *host, size_t bytes) {
    if (host_state(o, dst))
        memcpy(dst, host, bytes);
    else
        tri_ctx_to_device(g->ctx, dst, host, bytes);
}

void tri_optim_step(tri_optim *o, tri_gpt *g, double lr, float clip_scale) {
    tri_ctx *c = g->ctx;
    o->t++;
    if (o->host_step) {
        step_host(o, g, lr, clip_scale);
        return;
    }
    if (o->sync) {
        step_zero(o, g, lr, clip_scale);
        return;
    }
    for (int k = 0; k < g->n_chunks; k++) {
        tri_chunk *ch = &g->chunks[k];
        if (clip_scale != 1.0f) c->ops->scale(c, ch->grad_mem, clip_scale, ch->n_elems);
        /* AdamW on the fp32 master weights: the parameters themselves when
         * fp32, else the optimizer's copy, then rounded into the parameters */
        float *pm = o->master[k] ? o->master[k] : ch->param_mem;
        for (int i = 0; i < ch->n_params; i++) {
            const tri_param *p = &ch->params[i];
            o->spans[i] = (tri_adamw_span){.param = pm + p->offset,
                                           .m = o->m[k] + p->offset,
                                           .v = o->v[k] + p->offset,
                                           .grad = ch->grad_mem + p->offset,
                                           .n = p->numel,
                                           .wd = p->decay ? (float)o->cfg.weight_decay : 0.0f};
        }
        tri_ctx_adamw_multi(c, o->spans, ch->n_params, (float)lr, (float)o->cfg.beta1, (float)o->cfg.beta2,
                            (float)o->cfg.eps, o->t);
        if (o->master[k]) c->ops->cast(c, ch->param_mem, ch->param_dtype, o->master[k], TRI_F32, ch->n_elems);
    }
}

float *tri_optim_grad0(const tri_optim *o, tri_gpt *g) {
    if (!o->sync || !o->sync[0].shard) return g->chunks[0].grad_mem;
    size_t lo, hi;
    tri_grad_sync_shard(&o->sync[0], 0, &lo, &hi);
    return lo == 0 ? o->sync[0].shard : NULL;
}
