/* The planner's model; see src/plan/plan.h and docs/plan.md. */
#include "plan/plan.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ctx.h"
#include "kernels/ops.h"
#include "model/gpt.h"
#include "model/runtime.h"
#include "model/stage.h"
#include "parallel/grad_sync.h"
#include "parallel/schedule.h"
#include "base/err.h"
#include "parallel/pipeline.h"
#include "plan/shard.h"
#include "plan/stage_plan.h"

int tri_plan_precision_bytes(tri_dtype precision) {
    if (precision == TRI_F32) return 4;
    if (precision == TRI_BF16 || precision == TRI_F16) return 2;
    return -1;
}


/* A printing entry point's end: rc, with why printed when the silent one
 * refused (an empty why: a function it called printed already). */
static int print_why(int rc, const char *why) {
    if (rc != 0 && why[0]) tri_error("%s", why);
    return rc;
}

/* parallel.cp, 1 in a config made without the defaults (a test's). */
static int cp_of(const tri_parallel_cfg *p) { return p->cp > 1 ? p->cp : 1; }

/* Room for any of the planner's reasons. */
#define WHY_MAX 1024

/* ------------------------------------------------------------------------ */
/* a description of one stage without parameter tables                       */

/* Flash attention as the planner models the GPU backends' kernels: the
 * log-sum-exp of every (batch, head, query) row is all it keeps (as the CPU
 * backend's attention does too), and no scratch (the CPU backend's needs
 * per-thread tiles). */
static size_t flash_saved_floats(size_t B, size_t T, int NH, int NKV, int HS) {
    (void)NKV, (void)HS;
    return B * (size_t)NH * T;
}
static size_t flash_scratch_floats(size_t B, size_t T, int NH, int NKV, int HS) {
    (void)B, (void)T, (void)NH, (void)NKV, (void)HS;
    return 0;
}

typedef struct stage_desc {
    tri_gpt g;
    tri_chunk chunks[TRI_MAX_VPP];
    tri_chunk_spec specs[TRI_MAX_VPP];
    int *layers;
    tri_ctx ctx;
    tri_ops ops;
    int described; /* g from tri_gpt_describe (free it) */
} stage_desc;

static size_t r16(size_t n) { return (n + 15) / 16 * 16; }

/* Elements of one Llama chunk's table (model/gpt.c build_llama_table): per
 * layer down_proj (C, F/t), gate|up (2 F/t, C) back to back, the post-
 * attention RMSNorm, o_proj (C, C/t), q|k|v ((NHl + 2 NKVl) HS, C) back to
 * back (a KV head's rows whole on each of its tp / n_kv_head ranks when tp >
 * n_kv_head), the input RMSNorm; the head chunk the final RMSNorm and, untied,
 * lm_head (Vp/t, C); embed_tokens on the first stage (and on the last when
 * tied). Fused parts are not padded between them, as padd lays them out. */
static size_t llama_chunk_elems(const tri_model_cfg *m, int tp, int n_layers, int emb, int head) {
    size_t C = (size_t)m->n_embd, t = (size_t)tp, Fl = (size_t)tri_model_ffn_hidden(m) / t;
    size_t NKV = (size_t)tri_model_n_kv_head(m), HS = C / (size_t)m->n_head;
    size_t KVl = (NKV >= t ? NKV / t : 1) * HS, Cl = C / t;
    size_t layer = r16(C * Fl) + Fl * C + r16(Fl * C) + r16(C) + r16(C * Cl) + Cl * C + KVl * C + r16(KVl * C) + r16(C);
    size_t wte = r16(tri_padded_vocab(m->vocab_size, tp) / t * C);
    size_t n = (size_t)n_layers * layer;
    if (head) n += r16(C) + (tri_model_tied(m) ? 0 : wte);
    if (emb || (head && tri_model_tied(m))) n += wte;
    return n;
}

/* Elements of one chunk's parameter table (model/gpt.c build_table). */
static size_t chunk_elems(const tri_model_cfg *m, int tp, int n_layers, int emb, int head) {
    if (m->arch == TRI_ARCH_LLAMA) return llama_chunk_elems(m, tp, n_layers, emb, head);
    size_t C = (size_t)m->n_embd, F = 4 * C, t = (size_t)tp, T = (size_t)m->seq_len;
    size_t layer = 4 * r16(C) + r16(3 * C / t * C) + r16(3 * C / t) + r16(C * C / t) + r16(C) + r16(F / t * C) +
                   r16(F / t) + r16(C * F / t) + r16(C);
    size_t n = (size_t)n_layers * layer;
    if (head) n += 2 * r16(C);
    if (emb) n += r16(T * C);
    if (emb || head) n += r16(tri_padded_vocab(m->vocab_size, tp) / t * C);
    return n;
}

/* Values of K (or V) per token on one TP rank: the KV heads it holds (a
 * replicated KV head whole) x the head size; GPT-2 has n_head of them. */
static double kv_width(const tri_model_cfg *m, int tp) {
    double HS = (double)m->n_embd / m->n_head, t = tp;
    double NKV = m->arch == TRI_ARCH_LLAMA ? tri_model_n_kv_head(m) : m->n_head;
    return (NKV >= t ? NKV / t : 1.0) * HS;
}

static void stage_free(stage_desc *d) {
    if (d->described) {
        d->g.ctx = NULL;
        tri_gpt_free(&d->g);
    }
    free(d->layers);
    memset(d, 0, sizeof *d);
}

/* The chunks of stage pp_rank: by tri_gpt_describe (CPU, exactly as
 * preflight) or as a shell holding only the sizes the runtime's size
 * functions read (GPU). Returns 0, or -1 with the reason in why (or printed
 * by the model's functions, why untouched: out of memory, a layout that
 * tri_plan_check would refuse). */
static int stage_init(stage_desc *d, const tri_config *cfg, const tri_gpu_kind *gpu, int pp_rank, char *why, size_t n) {
    const tri_model_cfg *m = &cfg->model;
    const tri_parallel_cfg *par = &cfg->parallel;
    memset(d, 0, sizeof *d);
    if (par->vpp > TRI_MAX_VPP)
        return tri_why(why, n, "parallel.vpp = %d: at most %d virtual chunks per stage", par->vpp, TRI_MAX_VPP);
    d->layers = malloc(((size_t)m->n_layer + 1) * sizeof *d->layers);
    if (!d->layers) return tri_why(why, n, "out of memory (layer list of %d layers)", m->n_layer);
    if (tri_chunks_layout(m, par->pp, pp_rank, par->vpp, par->pp_layout, d->specs, d->layers) != 0) {
        stage_free(d);
        return -1;
    }
    tri_dtype act = cfg->train.precision;
    d->ops = *tri_ops_cpu();
    if (gpu && gpu->flash) {
        d->ops.attention_saved_floats = flash_saved_floats;
        d->ops.attention_scratch_floats = flash_scratch_floats;
    }
    d->ctx.ops = &d->ops;
    d->ctx.act_dtype = d->ctx.param_dtype = act;
    d->ctx.grad_dtype = d->ctx.master_dtype = TRI_F32;
    if (!gpu) {
        if (tri_gpt_describe(&d->g, m, par->tp, 0, d->specs, par->vpp) != 0) {
            stage_free(d);
            return -1;
        }
        d->described = 1;
        if (tri_gpt_set_sequence_parallel(&d->g, par->sequence_parallel) != 0) {
            stage_free(d);
            return -1;
        }
        /* fp32: no context, as preflight; else one that only says the dtype */
        if (act != TRI_F32) d->g.ctx = &d->ctx;
        return 0;
    }
    tri_gpt *g = &d->g;
    tri_gpt_sizes(g, m, par->tp, 0);
    g->ctx = &d->ctx;
    g->sp = par->sequence_parallel;
    g->n_chunks = par->vpp;
    g->chunks = d->chunks;
    for (int k = 0; k < par->vpp; k++) {
        d->chunks[k].n_layers = d->specs[k].n_layers;
        d->chunks[k].has_embedding = d->specs[k].has_embedding;
        d->chunks[k].has_head = d->specs[k].has_head;
        d->chunks[k].n_elems =
            chunk_elems(m, par->tp, d->specs[k].n_layers, d->specs[k].has_embedding, d->specs[k].has_head);
    }
    return 0;
}

size_t tri_plan_param_elems(const tri_config *cfg, int pp_rank) {
    const tri_parallel_cfg *par = &cfg->parallel;
    tri_chunk_spec specs[TRI_MAX_VPP];
    if (par->vpp > TRI_MAX_VPP) return 0;
    int *layers = malloc(((size_t)cfg->model.n_layer + 1) * sizeof *layers);
    if (!layers) return 0;
    size_t n = 0;
    if (tri_chunks_layout(&cfg->model, par->pp, pp_rank, par->vpp, par->pp_layout, specs, layers) == 0)
        for (int k = 0; k < par->vpp; k++)
            n += chunk_elems(&cfg->model, par->tp, specs[k].n_layers, specs[k].has_embedding, specs[k].has_head);
    free(layers);
    return n;
}

/* ------------------------------------------------------------------------ */
/* the schedule                                                              */

static int sched_kind(const tri_config *cfg) {
    int kind = (int)cfg->parallel.schedule;
    if (kind == TRI_SCHED_1F1B && cfg->parallel.vpp > 1) kind = TRI_SCHED_INTERLEAVED;
    return kind;
}

static int micro_batches(const tri_config *cfg) {
    long per = (long)cfg->train.micro_batch * cfg->parallel.dp;
    if (per <= 0 || cfg->train.global_batch % per != 0) return -1;
    return (int)(cfg->train.global_batch / per);
}

/* A schedule and its simulations, kept by a planner for the search (layouts
 * share them): the lists, the forward-only list that evaluation runs, the
 * peaks of the unit-cost simulation, and bubbles already simulated by cost
 * ratio. */
typedef struct tri_plan_sched {
    int kind, pp, vpp, m;
    tri_schedule s, ev;
    int *peak_chunk; /* [pp * vpp] */
    int n_bubbles;
    double ratio[8], bubble[8]; /* (b / f, w / f) -> simulated bubble */
    double wratio[8];
} sched_entry;

/* The entries a planner keeps; beyond, the oldest is replaced. */
#define SCHED_CACHE 48

static void entry_free(sched_entry *e) {
    tri_schedule_free(&e->s);
    tri_schedule_free(&e->ev);
    free(e->peak_chunk);
    memset(e, 0, sizeof *e);
}

void tri_planner_free(tri_planner *pl) {
    if (!pl) return;
    if (pl->sched)
        for (int i = 0; i < pl->n; i++) entry_free(&pl->sched[i]);
    free(pl->sched);
    memset(pl, 0, sizeof *pl);
}

/* The entry of (kind, pp, vpp, m): the planner's, built and simulated on
 * first use; without a planner (NULL, or no memory for its table) built
 * into *own, which sched_put frees. NULL with the reason in why when the
 * simulation refuses the schedule (the numbers' refusal, out of memory:
 * printed by tri_schedule_build). */
static sched_entry *sched_get(tri_planner *pl, sched_entry *own, int kind, int pp, int vpp, int m, char *why,
                              size_t n) {
    if (pl && !pl->sched) pl->sched = calloc(SCHED_CACHE, sizeof *pl->sched);
    if (pl && pl->sched)
        for (int i = 0; i < pl->n; i++) {
            sched_entry *c = &pl->sched[i];
            if (c->kind == kind && c->pp == pp && c->vpp == vpp && c->m == m) return c;
        }
    sched_entry e;
    memset(&e, 0, sizeof e);
    e.kind = kind;
    e.pp = pp;
    e.vpp = vpp;
    e.m = m;
    if (tri_schedule_build(&e.s, (tri_sched_kind)kind, pp, vpp, m) != 0) return NULL;
    if (tri_schedule_build(&e.ev, TRI_SCHED_FORWARD, pp, vpp, 1) != 0) {
        entry_free(&e);
        return NULL;
    }
    tri_sim_result r;
    memset(&r, 0, sizeof r);
    tri_sim_costs unit = {1.0, 1.0, 1.0};
    int rc = tri_schedule_simulate(&e.s, unit, &r);
    if (rc != 0 || r.deadlock || r.invalid) {
        tri_why(why, n, "the %s schedule of parallel.pp %d x parallel.vpp %d with %d micro-batches %s",
               tri_sched_name((tri_sched_kind)kind), pp, vpp, m, rc != 0 ? "could not be simulated" : r.why);
        tri_sim_result_free(&r);
        entry_free(&e);
        return NULL;
    }
    e.peak_chunk = malloc((size_t)pp * (size_t)vpp * sizeof *e.peak_chunk);
    if (!e.peak_chunk) {
        tri_sim_result_free(&r);
        entry_free(&e);
        tri_why(why, n, "out of memory");
        return NULL;
    }
    for (int i = 0; i < pp * vpp; i++) e.peak_chunk[i] = r.peak_chunk ? r.peak_chunk[i] : 1;
    tri_sim_result_free(&r);
    if (!pl || !pl->sched) {
        *own = e;
        return own;
    }
    int slot = pl->n < SCHED_CACHE ? pl->n++ : pl->next;
    if (pl->n == SCHED_CACHE && slot == pl->next) {
        if (pl->sched[slot].peak_chunk) entry_free(&pl->sched[slot]);
        pl->next = (pl->next + 1) % SCHED_CACHE;
    }
    pl->sched[slot] = e;
    return &pl->sched[slot];
}

/* Done with an entry of sched_get: frees it when it was built into own. */
static void sched_put(sched_entry *e, sched_entry *own) {
    if (e == own) entry_free(own);
}

/* The simulated bubble (idle / busy of the busiest rank) with costs c. 0, or
 * -1 with the reason in why. */
static int sched_bubble(sched_entry *e, tri_sim_costs c, double *bubble, char *why, size_t n) {
    double rb = c.b / c.f, rw = c.w / c.f;
    for (int i = 0; i < e->n_bubbles; i++)
        if (fabs(e->ratio[i] - rb) < 1e-3 * rb && fabs(e->wratio[i] - rw) <= 1e-3 * rb) {
            *bubble = e->bubble[i];
            return 0;
        }
    tri_sim_result r;
    memset(&r, 0, sizeof r);
    int rc = tri_schedule_simulate(&e->s, c, &r);
    if (rc != 0 || r.deadlock || r.invalid) {
        tri_sim_result_free(&r);
        return tri_why(why, n, "plan: the schedule could not be simulated with costs %g, %g, %g", c.f, c.b, c.w);
    }
    *bubble = r.bubble;
    tri_sim_result_free(&r);
    if (e->n_bubbles < 8) {
        e->ratio[e->n_bubbles] = rb;
        e->wratio[e->n_bubbles] = rw;
        e->bubble[e->n_bubbles++] = *bubble;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* memory                                                                    */

/* tri_plan_stage_mem, silent as tri_plan_memory_why. */
/* ZeRO-3's layer units of a chunk (src/train/zero_units.c) in closed form,
 * in elements rounded up to pad plus one pad (each unit's edges fall on
 * bucket edges; an unaligned edge's small bucket is gathered by both
 * neighbours): *ends the embedding and head parameters together, *unit
 * `per` layers (at most the chunk's). An estimate from above. */
static void chunk_units(const tri_model_cfg *m, int tp, const tri_chunk *ch, int per, size_t pad, size_t *ends,
                        size_t *unit) {
    const size_t e = chunk_elems(m, tp, 0, ch->has_embedding, ch->has_head);
    const size_t u = chunk_elems(m, tp, per < ch->n_layers ? per : ch->n_layers, 0, 0);
    *ends = (e + 2 * pad - 1) / pad * pad;
    *unit = (u + 2 * pad - 1) / pad * pad;
}

static int stage_mem(tri_planner *pl, const tri_config *cfg, const tri_gpu_kind *gpu, int pp_rank, tri_plan_mem *out,
                     char *why, size_t n) {
    const tri_parallel_cfg *par = &cfg->parallel;
    memset(out, 0, sizeof *out);
    out->stage = pp_rank;
    int P = tri_plan_precision_bytes(cfg->train.precision);
    int kind = sched_kind(cfg), m = micro_batches(cfg);
    if (P < 0)
        return tri_why(why, n, "train.precision %s is not one of fp32, bf16, fp16",
                      tri_precision_name(cfg->train.precision));
    if (m < 1)
        return tri_why(why, n, "train.global_batch (%d) is not a multiple of train.micro_batch (%d) x parallel.dp (%d)",
                      cfg->train.global_batch, cfg->train.micro_batch, par->dp);
    int policy = (int)cfg->train.recompute;
    if (pp_rank < 0 || pp_rank >= par->pp) return tri_why(why, n, "plan: no pipeline stage %d of %d", pp_rank, par->pp);
    stage_desc d;
    if (stage_init(&d, cfg, gpu, pp_rank, why, n) != 0) return -1;
    sched_entry own, *e = sched_get(pl, &own, kind, par->pp, par->vpp, m, why, n);
    if (!e) {
        stage_free(&d);
        return -1;
    }
    /* context parallelism: each rank holds T / cp tokens of a sequence */
    size_t B = (size_t)cfg->train.micro_batch, T = (size_t)cfg->model.seq_len / (size_t)cp_of(par);
    int split = kind == TRI_SCHED_ZBH1, rc = 0;
    size_t slot[TRI_MAX_VPP] = {0};
    for (int c = 0; rc == 0 && c < par->vpp; c++) {
        slot[c] = tri_slot_bytes_why(&d.g, c, B, T, (tri_recompute)policy, split, NULL, why, n);
        if (slot[c] == 0) rc = -1;
        int peak = e->peak_chunk[pp_rank * par->vpp + c];
        out->saved_act_alloc += slot[c] * (size_t)(peak > 1 ? peak : 1);
    }
    if (rc == 0) {
        /* slots in use: acquired at a forward, released after the backward
         * (after W under zero-bubble schedules) */
        size_t use = 0, peak = 0;
        for (int i = 0; i < e->s.n[pp_rank]; i++) {
            const tri_action *a = &e->s.a[pp_rank][i];
            if (a->kind == TRI_ACT_FWD) {
                use += slot[a->chunk];
                if (use > peak) peak = use;
            } else if (a->kind == TRI_ACT_BWD || a->kind == TRI_ACT_BWD_W) {
                use -= slot[a->chunk];
            }
        }
        out->saved_act_peak = peak;
        size_t ws = tri_workspace_bytes_why(&d.g, B, T, (tri_recompute)policy, why, n);
        if (ws == 0) rc = -1;
        unsigned char ends[TRI_PIPE_MAX_CHUNKS];
        tri_stage_ends(&d.g, ends);
        int boxes = tri_pipe_box_need(e->s.a[pp_rank], e->s.n[pp_rank], ends);
        int eb = tri_pipe_box_need(e->ev.a[pp_rank], e->ev.n[pp_rank], ends);
        if (eb > boxes) boxes = eb;
        size_t A = (size_t)P;
        out->workspace = ws + (size_t)boxes * tri_chunk_boundary_elems(&d.g, B, T) * A;
        /* context parallelism's ring: the K and V blocks in flight, double
         * buffered, and in the backward their gradients too (docs/parallelism.md) */
        if (cp_of(par) > 1) out->workspace += 8 * B * T * (size_t)kv_width(&cfg->model, par->tp) * A;
        /* parameters: padded under ZeRO as tri_gpt_pad pads them, over the
         * dp x cp ranks that share the state */
        size_t dz = (size_t)par->dp * (size_t)cp_of(par);
        size_t unit_pad = par->zero ? dz * TRI_ZERO_ALIGN : 1, elems = 0, alloc = 0, most = 0;
        size_t units = 0, unit = 0; /* ZeRO-3's layer units (src/train/zero_units.c) */
        for (int k = 0; k < d.g.n_chunks; k++) {
            size_t n = d.g.chunks[k].n_elems, a = (n + unit_pad - 1) / unit_pad * unit_pad;
            elems += n;
            alloc += a;
            most = a > most ? a : most; /* ZeRO-3 gathers a chunk at a time */
            if (par->zero == 3 && par->zero_unit_layers > 0) {
                size_t ends = 0, u = 0;
                chunk_units(&cfg->model, par->tp, &d.g.chunks[k], par->zero_unit_layers, unit_pad, &ends, &u);
                units = ends + 2 * u > units ? ends + 2 * u : units;
                unit = u > unit ? u : unit;
            }
        }
        tri_shard_in si = {.elems = elems,
                           .alloc = alloc,
                           .P = P,
                           .zero = par->zero,
                           .d = (int)dz,
                           .chunk_elems = most,
                           .n_chunks = d.g.n_chunks,
                           .units_elems = units,
                           .unit_elems = unit,
                           .offload = par->offload == TRI_OFFLOAD_OPTIMIZER,
                           .staging = gpu != NULL};
        tri_shard_mem sm;
        tri_shard_mem_of(&si, &sm);
        out->params = sm.params;
        out->grads = sm.grads;
        out->optim = sm.optim;
        out->host = sm.host;
        out->total = out->params + out->grads + out->optim + out->saved_act_alloc + out->workspace;
    }
    stage_free(&d);
    sched_put(e, &own);
    return rc;
}

int tri_plan_stage_mem(tri_planner *pl, const tri_config *cfg, const tri_gpu_kind *gpu, int pp_rank,
                       tri_plan_mem *out) {
    char why[WHY_MAX] = "";
    return print_why(stage_mem(pl, cfg, gpu, pp_rank, out, why, sizeof why), why);
}

int tri_plan_memory_why(tri_planner *pl, const tri_config *cfg, const tri_gpu_kind *gpu, tri_plan_mem *out, char *why,
                        size_t n) {
    why[0] = '\0';
    memset(out, 0, sizeof *out);
    /* stages differ only at the ends and in their layer counts: the first,
     * the last, and any with the most layers */
    int pp = cfg->parallel.pp, all = cfg->parallel.pp_layout[0] != '\0';
    for (int s = 0; s < pp; s++) {
        /* an even split: the middle stages equal stage 1 but for in-flight
         * counts that fall with the stage index */
        if (!all && s > 1 && s < pp - 1) continue;
        tri_plan_mem e;
        if (stage_mem(pl, cfg, gpu, s, &e, why, n) != 0) return -1;
        if (s == 0 || e.total > out->total) *out = e;
    }
    return 0;
}

int tri_plan_memory(tri_planner *pl, const tri_config *cfg, const tri_gpu_kind *gpu, tri_plan_mem *out) {
    char why[WHY_MAX];
    return print_why(tri_plan_memory_why(pl, cfg, gpu, out, why, sizeof why), why);
}

/* ------------------------------------------------------------------------ */
/* time                                                                      */

typedef struct costs {
    const tri_gpu_kind *gpu;
    double peak;  /* FLOP/s of the precision */
    double A;     /* activation bytes        */
    double tp_bw; /* bytes/s a TP collective moves per rank */
    double lat;
    int tp;
    double cp_bw; /* bytes/s of the CP ring's sends per rank */
} costs;

/* A GEMM of M x N x K (2 M N K FLOPs). */
static double gemm_s(const costs *c, double M, double N, double K) {
    double fl = 2.0 * M * N * K;
    if (fl <= 0) return 0;
    if (c->gpu->gemm_flops) return fl / c->gpu->gemm_flops(c->gpu->gemm_ctx, (size_t)M, (size_t)N, (size_t)K);
    double h = c->gpu->gemm_half;
    double eff = c->gpu->gemm_eff * (M / (M + h)) * (N / (N + h)) * (K / (K + h));
    return fl / (c->peak * eff);
}

/* A forward GEMM out (M, N) = x (M, K) W^T, and its backward: dx (M, K) =
 * dout (M, N) W, dW (N, K) = dout^T x. */
static double gemm_fwd(const costs *c, double M, double N, double K) { return gemm_s(c, M, N, K); }
static double gemm_bwd(const costs *c, double M, double N, double K) { return gemm_s(c, M, K, N) + gemm_s(c, N, K, M); }

/* Ring all-reduce of `bytes` over n ranks (the DP collectives' bytes come
 * from src/plan/shard.h). */
static double allreduce_s(double bytes, int n, double bw, double lat) {
    if (n <= 1) return 0;
    return 2.0 * (n - 1) / n * bytes / bw + 2.0 * (n - 1) * lat;
}

static double bw_for(const tri_gpu_kind *g, int span);

/* One layer, one micro-batch of M = B T / cp tokens. */
typedef struct layer_t {
    double f, b;       /* compute, forward and backward (with recompute) */
    double tp_f, tp_b; /* TP collectives */
    double fl_f;       /* forward FLOPs (for what recompute adds) */
    double re_fl;      /* FLOPs recompute adds */
    double cp_f, cp_b; /* exposed context-parallel ring transfers */
} layer_t;

static layer_t layer_time(const costs *c, const tri_config *cfg, int policy) {
    const tri_model_cfg *m = &cfg->model;
    /* context parallelism: a rank computes T / cp tokens of each sequence,
     * and 1 / cp of the causal attention (the load-balanced chunks) */
    double cp = cp_of(&cfg->parallel), B = cfg->train.micro_batch, T = m->seq_len, M = B * T / cp, C = m->n_embd;
    double t = c->tp;
    double NHl = (double)m->n_head / t, HS = C / m->n_head, A = c->A, Cl = C / t;
    int sp = cfg->parallel.sequence_parallel, llama = m->arch == TRI_ARCH_LLAMA;
    const tri_gpu_kind *g = c->gpu;
    layer_t L = {0};
    /* the four linears' widths on one TP rank: qkv (GPT-2 3 C/t; Llama's GQA
     * (NHl + 2 NKVl) HS, a replicated KV head's rows computed on each of its
     * ranks), attention out (C/t -> C), fc (GPT-2 4 C/t; SwiGLU's gate|up
     * 2 F/t) and the MLP out (Fl -> C) */
    double NKV = tri_model_n_kv_head(m), KVl = (NKV >= t ? NKV / t : 1.0) * HS;
    double QKV = llama ? NHl * HS + 2 * KVl : 3 * C / t;
    double Fl = llama ? tri_model_ffn_hidden(m) / t : 4 * C / t, FC = llama ? 2 * Fl : Fl;
    double gf = gemm_fwd(c, M, QKV, C) + gemm_fwd(c, M, C, Cl) + gemm_fwd(c, M, FC, C) + gemm_fwd(c, M, C, Fl);
    double gb = gemm_bwd(c, M, QKV, C) + gemm_bwd(c, M, C, Cl) + gemm_bwd(c, M, FC, C) + gemm_bwd(c, M, C, Fl);
    /* attention: QK^T and PV over the full T x T square (Megatron's count) */
    double att_fl = 4.0 * B * T * T * C / t / cp, att_f, att_b;
    if (g->gemm_flops) {
        /* the CPU: the flash kernel's (batch, head) pairs run side by side
         * on the threads, timed as one GEMM of (B heads T) x T x HS; its
         * backward (five products, the probabilities recomputed) measures
         * about 2x its forward (docs/performance.md) */
        att_f = att_fl / g->gemm_flops(g->gemm_ctx, (size_t)(B * NHl * T / cp), (size_t)T, (size_t)HS);
        att_b = 2.0 * att_f;
    } else {
        att_f = att_fl / (c->peak * g->attn_eff);
        att_b = 2.5 * att_f; /* flash backward recomputes the probabilities */
    }
    /* the passes at memory bandwidth, elements per token: LayerNorms (or
     * RMSNorms), residual adds (10 C, replicated: / t under SP); GPT-2's
     * biases, GELU and the attention output (18 C / t); Llama's RoPE on q and
     * k (read and written), SwiGLU (reads 2 Fl, writes Fl) and the attention
     * output; backward twice that */
    double rep = sp ? 10.0 * C / t : 10.0 * C;
    double loc = llama ? 2.0 * (Cl + KVl) + 3.0 * Fl + 2.0 * Cl : 18.0 * C / t;
    double el_f = M * (rep + loc) * A / g->mem_bw;
    double el_b = 2.0 * el_f;
    double f = gf + att_f + el_f;
    double ar = allreduce_s(M * C * A, c->tp, c->tp_bw, c->lat);
    L.f = f;
    L.b = gb + att_b + el_b;
    L.tp_f = 2 * ar;
    L.tp_b = 2 * ar;
    L.fl_f = 2.0 * M * (QKV * C + C * Cl + FC * C + C * Fl) + att_fl;
    /* the ring's K/V blocks, overlapped with the attention blocks: what
     * exceeds the local attention is exposed (forward; backward, the blocks
     * and their gradients, against the backward's attention) */
    if (cp > 1) {
        double w = kv_width(m, c->tp);
        double fr = tri_shard_cp_ring_bytes((int)cp, B, T, w, A, 0) / c->cp_bw + (cp - 1) * c->lat;
        double br = tri_shard_cp_ring_bytes((int)cp, B, T, w, A, 1) / c->cp_bw + (cp - 1) * c->lat;
        L.cp_f = fr > att_f ? fr - att_f : 0.0;
        L.cp_b = br > att_b ? br - att_b : 0.0;
        if (policy == TRI_RECOMPUTE_FULL) L.cp_b += L.cp_f;
    }
    if (policy == TRI_RECOMPUTE_FULL) {
        L.b += f;
        L.tp_b += 2 * ar;
        L.re_fl = L.fl_f;
    } else if (policy == TRI_RECOMPUTE_SELECTIVE) {
        L.b += att_f;
        L.re_fl = att_fl;
    }
    return L;
}

static double bw_for(const tri_gpu_kind *g, int span) { return (span <= g->per_node ? g->intra_bw : g->inter_bw); }

int tri_plan_time_step_why(tri_planner *pl, const tri_config *cfg, const tri_gpu_kind *gpu, tri_plan_time *out,
                           char *why, size_t n) {
    const tri_model_cfg *md = &cfg->model;
    const tri_parallel_cfg *par = &cfg->parallel;
    why[0] = '\0';
    memset(out, 0, sizeof *out);
    int P = tri_plan_precision_bytes(cfg->train.precision);
    int kind = sched_kind(cfg), m = micro_batches(cfg), policy = (int)cfg->train.recompute, rc;
    if (P < 0 || m < 1) return tri_why(why, n, "plan: the layout's train.precision or batch is not valid");
    costs c = {gpu, P == 2 ? gpu->peak_16 : gpu->peak_32, P, 0, gpu->latency_s, par->tp, 0};
    c.tp_bw = gpu->intra_bw * gpu->link_eff;
    /* the CP group spans tp x cp ranks of the mesh (Megatron's tp-cp-dp-pp order) */
    c.cp_bw = bw_for(gpu, par->tp * cp_of(par)) * gpu->link_eff;
    int world = par->tp * cp_of(par) * par->pp * par->dp;
    layer_t L = layer_time(&c, cfg, policy);
    double B = cfg->train.micro_batch, T = md->seq_len, M = B * T / cp_of(par), C = md->n_embd, t = par->tp;
    double Vl = (double)tri_padded_vocab(md->vocab_size, par->tp) / t;
    /* the ends: LM head GEMM and cross-entropy (last stage), embedding (first) */
    double head_f = gemm_fwd(&c, M, Vl, C) + 4.0 * M * Vl * c.A / gpu->mem_bw;
    double head_b = gemm_bwd(&c, M, Vl, C);
    double emb_f = 2.0 * M * C * c.A / gpu->mem_bw, emb_b = M * C * (c.A + 4.0) / gpu->mem_bw;
    double ar = allreduce_s(M * C * c.A, par->tp, c.tp_bw, c.lat);

    /* per stage, per micro-batch, over its chunks */
    double F = 0, Bk = 0, TPs = 0, busiest = -1, opt_elems = 0;
    int busy_layers = 0;
    int *layers = malloc(((size_t)md->n_layer + 1) * sizeof *layers);
    if (!layers) return tri_why(why, n, "out of memory");
    for (int s = 0; s < par->pp; s++) {
        tri_chunk_spec specs[TRI_MAX_VPP];
        if (par->vpp > TRI_MAX_VPP || tri_chunks_layout(md, par->pp, s, par->vpp, par->pp_layout, specs, layers) != 0) {
            free(layers);
            return -1;
        }
        double f = 0, b = 0, tp = 0;
        int nl = 0;
        for (int k = 0; k < par->vpp; k++) {
            nl += specs[k].n_layers;
            if (specs[k].has_embedding) {
                f += emb_f;
                b += emb_b;
                tp += ar;
            }
            if (specs[k].has_head) {
                f += head_f;
                b += head_b;
                tp += ar;
            }
        }
        f += nl * L.f;
        b += nl * L.b;
        tp += nl * (L.tp_f + L.tp_b + L.cp_f + L.cp_b);
        if (f + b + tp > busiest) {
            busiest = f + b + tp;
            busy_layers = nl;
            F = f;
            Bk = b;
            TPs = tp;
        }
    }
    free(layers);
    opt_elems = (double)tri_plan_param_elems(cfg, 0);
    for (int s = 1; s < par->pp; s++) {
        double e = (double)tri_plan_param_elems(cfg, s);
        if (e > opt_elems) opt_elems = e;
    }
    /* AdamW: reads parameter, gradient, moments (and master), writes them;
     * ZeRO: over the rank's shard of the dp x cp ranks */
    double master = P == 2 ? 8.0 : 0.0, dz = (double)par->dp * cp_of(par);
    double state = par->zero ? opt_elems / dz : opt_elems;
    double opt_bytes = state * (2.0 * P + 4.0 + 16.0 + master) + opt_elems * 4.0 /* the gradient norm */;
    double opt_s = opt_bytes / gpu->mem_bw;
    if (par->offload == TRI_OFFLOAD_OPTIMIZER && gpu->pcie_bw > 0) {
        /* offloaded on a GPU: the gradients down, AdamW on the host (the
         * same bytes at host bandwidth, and the 16-bit parameters rounded
         * there), the parameters up, pipelined shard by shard: the slowest
         * of the three, the device only taking the gradient norm. The
         * gradients leave bucket by bucket during the last micro-batch's
         * backward (model/optim.h): only what that backward cannot cover
         * is exposed. */
        double pcie = gpu->pcie_bw * gpu->link_eff;
        double down = state * (P == 4 ? 8.0 : 4.0) / pcie, up = state * P / pcie;
        double host = state * (2.0 * 4.0 + 4.0 + 16.0 + master + (P == 2 ? 4.0 + P : 0.0)) / gpu->host_bw;
        double exposed = down > Bk ? down - Bk : 0.0;
        double slow = exposed > host ? exposed : host;
        opt_s = (slow > up ? slow : up) + opt_elems * 4.0 / gpu->mem_bw;
        out->pcie_bytes = tri_shard_pcie_bytes(state, P);
    }

    out->m = m;
    if (cp_of(par) > 1) {
        /* the ring of the busiest stage's layers: forward, backward, and
         * under full recompute the forward again */
        double w = kv_width(md, par->tp), cpn = cp_of(par);
        double fwd = tri_shard_cp_ring_bytes((int)cpn, B, T, w, P, 0),
               bwd = tri_shard_cp_ring_bytes((int)cpn, B, T, w, P, 1);
        out->cp_bytes = (double)m * busy_layers * (fwd + bwd + (policy == TRI_RECOMPUTE_FULL ? fwd : 0.0));
    }
    out->compute_s = m * (F + Bk) + opt_s;
    out->tp_s = m * TPs;
    if (md->arch == TRI_ARCH_LLAMA && par->tp > tri_model_n_kv_head(md)) {
        /* KV heads replicated over tp / n_kv_head ranks: their k and v weight
         * gradients (2 HS x C fp32 a layer) summed over those ranks once a step */
        double kv = 2.0 * (C / md->n_head) * C * 4.0 * busy_layers;
        out->tp_s += allreduce_s(kv, par->tp / tri_model_n_kv_head(md), c.tp_bw, c.lat);
    }
    if (gpu->share > 0 && gpu->share < 1 && par->pp == 1) {
        /* oversubscribed ranks in lockstep (no pipeline: every rank runs
         * the same work between TP or DP synchronisations): a round ends
         * when the core running the most ranks has run them all, so a rank
         * gets 1 / ceil(ranks x threads / cores) of a core, not the fluid
         * cores / (ranks x threads) the rates include (docs/plan.md) */
        double lock = 1.0 / ceil(1.0 / gpu->share - 1e-9);
        out->compute_s *= gpu->share / lock;
    }

    /* the bubble: the schedule simulated with this stage's costs per chunk */
    sched_entry own, *e = sched_get(pl, &own, kind, par->pp, par->vpp, m, why, n);
    if (!e) return -1;
    tri_sim_costs sc = {(F + TPs / 2) / par->vpp, (Bk + TPs / 2) / par->vpp, 0.0};
    if (kind == TRI_SCHED_ZBH1) {
        /* B (input gradients) and W (weight gradients) split a backward in halves */
        sc.w = sc.b / 2;
        sc.b -= sc.w;
    }
    rc = sched_bubble(e, sc, &out->bubble, why, n);
    sched_put(e, &own);
    if (rc != 0) return -1;
    out->bubble_s = out->bubble * (m * (F + Bk) + out->tp_s);
    if (gpu->share > 0 && gpu->share < 1) {
        /* ranks oversubscribing a CPU's cores: a stage that idles gives its
         * cores to the others, so the step is the longer of the busiest
         * stage's path at a whole core's speed (busy x share, plus its
         * bubble) and the machine's work at the shared speed */
        double busy = m * (F + Bk) + out->tp_s, path = busy * gpu->share * (1.0 + out->bubble);
        out->bubble_s = path > busy ? path - busy : 0.0;
    }

    /* pipeline sends: the activation forward and its gradient back, per
     * micro-batch and chunk, on the critical path */
    if (par->pp > 1) {
        double msg = M * C * c.A / (par->sequence_parallel ? t : 1.0); /* M: this rank's tokens */
        double bw = bw_for(gpu, world) * gpu->link_eff;
        out->pp_s = 2.0 * m * par->vpp * (msg / bw + c.lat);
    }
    /* data parallel: fp32 gradients reduced (ZeRO: reduce-scattered, then the
     * parameters all-gathered), overlapped with the last micro-batch's
     * backward */
    int over = gpu->share > 0 && gpu->share < 1, d = par->dp * cp_of(par);
    if (d > 1) {
        /* the gradients' reduction and the parameters' gathering over the
         * dp x cp ranks (src/plan/shard.h): every stage reduces under the
         * last micro-batch's backward; zero 1 and 2 gather after the step,
         * zero 3 before each chunk's forward and backward instead */
        double bw = bw_for(gpu, par->tp * d) * gpu->link_eff;
        /* oversubscribed CPU ranks: the copies of shared-memory MPI are work
         * on the shared cores, and no core is idle to overlap them */
        if (over) bw *= gpu->share;
        double rs, ag, lat = (par->zero ? 1.0 : 2.0) * (d - 1) * c.lat;
        out->dp_bytes = tri_shard_dp_bytes(par->zero, d, m, P, opt_elems, &rs, &ag);
        double red = rs / bw + lat, bw_win = over ? 0.0 : Bk;
        out->dp_s = red > bw_win ? red - bw_win : 0.0;
        if (par->zero == 3) {
            /* a chunk's gather before each forward and backward: with more
             * chunks than one the next chunk's is started under this one's
             * compute (F / vpp, Bk / vpp), with one it is waited for */
            double g1 = ag / (2.0 * m * par->vpp) / bw + lat;
            double fw = over || par->vpp < 2 ? 0.0 : F / par->vpp, bwk = over || par->vpp < 2 ? 0.0 : Bk / par->vpp;
            out->dp_s += m * par->vpp * ((g1 > fw ? g1 - fw : 0.0) + (g1 > bwk ? g1 - bwk : 0.0));
        } else if (ag > 0) {
            out->dp_s += ag / bw + lat;
        }
    }
    if (over && gpu->sync_s > 0) {
        /* each blocking wait finds a peer descheduled: sync_s per TP
         * collective (4 a layer and micro-batch, 6 under full recompute, one
         * at each end), pipeline receive (2 m vpp), DP wait (the buckets, the
         * ZeRO gather) and the step's small reductions (loss over dp and pp,
         * gradient norm over tp, pp and dp under ZeRO, the stop flag) */
        double per_layer = policy == TRI_RECOMPUTE_FULL ? 6.0 : 4.0;
        double n_tp = par->tp > 1 ? m * (busy_layers * per_layer + 2.0) + 1.0 : 0.0;
        double n_pp = par->pp > 1 ? 2.0 * m * par->vpp + 2.0 : 0.0;
        double n_dp = d > 1 ? 2.0 + (par->zero ? 2.0 : 0.0) + (par->zero == 3 ? 2.0 * m * par->vpp : 0.0) : 0.0;
        out->tp_s += n_tp * gpu->sync_s;
        out->pp_s += n_pp * gpu->sync_s;
        out->dp_s += (n_dp + (world > 1 ? 1.0 : 0.0)) * gpu->sync_s;
    }
    out->step_s = out->compute_s + out->tp_s + out->dp_s + out->pp_s + out->bubble_s;
    double tokens = (double)cfg->train.global_batch * T;
    out->tokens_per_s = tokens / out->step_s;
    out->model_flops = tri_gpt_flops_per_token(md) * tokens;
    out->hw_flops = out->model_flops + (double)md->n_layer * L.re_fl / M * t * tokens;
    out->tflops_per_gpu = out->model_flops / out->step_s / world / 1e12;
    out->mfu = out->model_flops / out->step_s / (world * c.peak);
    return 0;
}

int tri_plan_time_step(tri_planner *pl, const tri_config *cfg, const tri_gpu_kind *gpu, tri_plan_time *out) {
    char why[WHY_MAX];
    return print_why(tri_plan_time_step_why(pl, cfg, gpu, out, why, sizeof why), why);
}

/* ------------------------------------------------------------------------ */
/* validity                                                                  */

int tri_plan_check(const tri_config *cfg, const tri_gpu_kind *gpu, char *why, size_t n) {
    const tri_model_cfg *m = &cfg->model;
    const tri_parallel_cfg *par = &cfg->parallel;
    why[0] = '\0';
    if (par->tp < 1 || par->pp < 1 || par->dp < 1 || par->vpp < 1 || par->cp < 1) {
        snprintf(why, n, "tp, cp, pp, dp and vpp must be >= 1");
        return -1;
    }
    if (par->cp > 1 && m->seq_len % (2 * par->cp) != 0) {
        snprintf(why, n, "seq_len %d is not divisible by 2 x cp %d (context parallelism's 2 x cp chunks)", m->seq_len,
                 par->cp);
        return -1;
    }
    if (gpu && par->tp > gpu->per_node) {
        snprintf(why, n, "tp %d is above the %d devices of a node", par->tp, gpu->per_node);
        return -1;
    }
    if (m->n_embd % m->n_head != 0) {
        snprintf(why, n, "n_embd %d is not divisible by n_head %d", m->n_embd, m->n_head);
        return -1;
    }
    if (m->n_head % par->tp != 0) {
        snprintf(why, n, "n_head %d is not divisible by tp %d", m->n_head, par->tp);
        return -1;
    }
    if (par->sequence_parallel && (par->tp < 2 || m->seq_len % par->tp != 0)) {
        snprintf(why, n, "sequence parallelism needs tp > 1 and seq_len %d divisible by tp %d", m->seq_len, par->tp);
        return -1;
    }
    if (par->sequence_parallel && par->cp > 1 && (m->seq_len / par->cp) % par->tp != 0) {
        snprintf(why, n, "sequence parallelism with cp %d needs seq_len / cp = %d divisible by tp %d", par->cp,
                 m->seq_len / par->cp, par->tp);
        return -1;
    }
    long per = (long)cfg->train.micro_batch * par->dp;
    if (per <= 0 || cfg->train.global_batch % per != 0) {
        snprintf(why, n, "global_batch %d is not divisible by micro_batch %d x dp %d", cfg->train.global_batch,
                 cfg->train.micro_batch, par->dp);
        return -1;
    }
    if (tri_gpt_layout_why(m, par->tp, par->pp, par->vpp, par->pp_layout, why, n) != 0) return -1;
    if (par->vpp > TRI_MAX_VPP) {
        snprintf(why, n, "vpp %d is above %d", par->vpp, TRI_MAX_VPP);
        return -1;
    }
    return tri_schedule_check((tri_sched_kind)sched_kind(cfg), par->pp, par->vpp, (int)(cfg->train.global_batch / per),
                              why, n);
}
