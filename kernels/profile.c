/* The per-op profile: an op table around the backend's. See kernels/profile.h. */
#include "kernels/profile.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/err.h"

/* The pairs of marks made at start-up (grown between steps when a step
 * needs more: see tri_profile_step). */
#define START_PAIRS 4096

typedef struct role_range {
    uintptr_t lo, hi; /* [lo, hi) */
    tri_prof_role role;
} role_range;

/* The table first: ctx->ops points at it, and so at the profile
 * (C11 6.7.2.1: a pointer to a struct, suitably converted, points to its
 * first member and back). */
struct tri_profile {
    tri_ops table;
    const tri_ops *real;
    tri_ctx *c;
    tri_prof_totals tot;
    role_range *roles; /* in the order given */
    int n_roles, cap_roles;
    int depth; /* ops in progress: an op that another op calls is its caller's time */
    /* the backend's marks: pair j is marks 2j, 2j+1 around the op of kind[j], role[j] */
    int marks;   /* the backend has them */
    int cap;     /* pairs in the pool */
    int n;       /* pairs recorded and not read yet */
    int in_step; /* pairs begun since the last tri_profile_step */
    int no_grow; /* a larger pool could not be had (said once): keep this one */
    unsigned char *kind, *role;
    float *ms;
};

static tri_profile *prof(tri_ctx *c) { return (tri_profile *)(uintptr_t)c->ops; }

static int is_gemm(int kind) { return kind >= TRI_PROF_GEMM_FWD && kind < TRI_PROF_GEMM_FWD + TRI_PROF_DIRS; }

static void add(tri_profile *p, int kind, int role, double ms) {
    p->tot.ms[kind] += ms;
    if (is_gemm(kind)) p->tot.gemm_ms[role][kind - TRI_PROF_GEMM_FWD] += ms;
}

/* Reads the recorded pairs (one wait) into the totals. */
static void flush(tri_profile *p) {
    if (p->n == 0) return;
    p->real->marks_read(p->c, p->n, p->ms);
    for (int j = 0; j < p->n; j++) add(p, p->kind[j], p->role[j], (double)p->ms[j]);
    p->n = 0;
}

/* A pool of `pairs` pairs (the backend's marks and their attributions);
 * the old one is kept when the new one cannot be had. 0 or -1 (printed). */
static int make_pool(tri_profile *p, int pairs) {
    unsigned char *k = malloc((size_t)pairs), *r = malloc((size_t)pairs);
    float *ms = malloc((size_t)pairs * sizeof *ms);
    if (!k || !r || !ms) {
        free(k), free(r), free(ms);
        return tri_error("profile: out of memory for %d timing marks", 2 * pairs);
    }
    if (p->real->marks_init(p->c, 2 * pairs) != 0) {
        free(k), free(r), free(ms);
        return -1;
    }
    free(p->kind), free(p->role), free(p->ms);
    p->kind = k, p->role = r, p->ms = ms;
    p->cap = pairs;
    return 0;
}

/* One op being timed: its start (clock) or its pair (marks); UNTIMED inside
 * another op. */
#define CLOCK   (-1)
#define UNTIMED (-2)
typedef struct span {
    double t0;
    int pair;
    unsigned char kind, role;
} span;

static span begin(tri_profile *p, tri_ctx *c, int kind, int role) {
    span s = {.pair = UNTIMED, .kind = (unsigned char)kind, .role = (unsigned char)role};
    if (p->depth++ > 0) return s;
    p->tot.calls[kind]++;
    if (is_gemm(kind)) p->tot.gemm_calls[role][kind - TRI_PROF_GEMM_FWD]++;
    if (!p->marks) {
        s.pair = CLOCK;
        s.t0 = tri_now_s();
        return s;
    }
    if (p->n == p->cap) flush(p); /* a step longer than the pool: one wait now */
    s.pair = p->n++;
    p->in_step++;
    p->kind[s.pair] = s.kind;
    p->role[s.pair] = s.role;
    p->real->mark(c, 2 * s.pair);
    return s;
}

static void end(tri_profile *p, tri_ctx *c, span s) {
    p->depth--;
    if (s.pair == CLOCK)
        add(p, s.kind, s.role, 1e3 * (tri_now_s() - s.t0));
    else if (s.pair >= 0)
        p->real->mark(c, 2 * s.pair + 1);
}

/* The role of the GEMM whose weight is w: the last range given that holds it. */
static int role_of(const tri_profile *p, const void *w) {
    const uintptr_t a = (uintptr_t)w;
    for (int i = p->n_roles - 1; i >= 0; i--)
        if (a >= p->roles[i].lo && a < p->roles[i].hi) return p->roles[i].role;
    return TRI_PROF_UNKNOWN;
}

/* stmt, a call of the real table's entry (`real->op(c, ...)`), timed as
 * an op of kind and role. */
#define TIMED(kind, role, stmt)                       \
    do {                                              \
        tri_profile *p_ = prof(c);                    \
        const tri_ops *real = p_->real;               \
        const span s_ = begin(p_, c, (kind), (role)); \
        stmt;                                         \
        end(p_, c, s_);                               \
    } while (0)

/* ---- the wrappers ---- */

static void p_copy(tri_ctx *c, void *dst, const void *src, size_t bytes) {
    TIMED(TRI_PROF_ELEMENTWISE, 0, real->copy(c, dst, src, bytes));
}

static void p_zero(tri_ctx *c, void *p, size_t bytes) { TIMED(TRI_PROF_ELEMENTWISE, 0, real->zero(c, p, bytes)); }

static void p_cast(tri_ctx *c, void *dst, tri_dtype dst_t, const void *src, tri_dtype src_t, size_t n) {
    TIMED(TRI_PROF_ELEMENTWISE, 0, real->cast(c, dst, dst_t, src, src_t, n));
}

static void p_matmul_fwd(tri_ctx *c, void *out, const void *inp, const void *weight, const void *bias, size_t N,
                         size_t C, size_t OC) {
    TIMED(TRI_PROF_GEMM_FWD, role_of(prof(c), weight), real->matmul_fwd(c, out, inp, weight, bias, N, C, OC));
}

/* The input gradient and the weight gradient (with the bias gradient) of
 * one call are timed apart: the op runs as its two halves, dinp first as
 * the backends compute them. The contract makes the three outputs
 * independent (dinp overwritten, dweight and dbias accumulated, each from
 * dout and one other input), so the halves give the bits of the whole. */
static void p_matmul_bwd(tri_ctx *c, void *dinp, float *dweight, float *dbias, const void *dout, const void *inp,
                         const void *weight, size_t N, size_t C, size_t OC) {
    const int r = role_of(prof(c), weight);
    if (dinp != NULL && dweight != NULL) {
        TIMED(TRI_PROF_GEMM_DINP, r, real->matmul_bwd(c, dinp, NULL, NULL, dout, inp, weight, N, C, OC));
        TIMED(TRI_PROF_GEMM_DWEIGHT, r, real->matmul_bwd(c, NULL, dweight, dbias, dout, inp, weight, N, C, OC));
    } else {
        TIMED(dinp != NULL ? TRI_PROF_GEMM_DINP : TRI_PROF_GEMM_DWEIGHT, r,
              real->matmul_bwd(c, dinp, dweight, dbias, dout, inp, weight, N, C, OC));
    }
}

static void p_matmul_gelu_fwd(tri_ctx *c, void *out, void *pre, const void *inp, const void *weight, const void *bias,
                              size_t N, size_t C, size_t OC) {
    TIMED(TRI_PROF_GEMM_FWD, role_of(prof(c), weight), real->matmul_gelu_fwd(c, out, pre, inp, weight, bias, N, C, OC));
}

/* As matmul_bwd: dpre (with dbias_pre) first, then dweight by matmul_bwd,
 * whose dweight is the one the fused op computes (dout^T @ inp, accumulated;
 * on the CUDA backend the very same GEMM). */
static void p_matmul_bwd_dgelu(tri_ctx *c, void *dpre, float *dweight, float *dbias_pre, const void *dout,
                               const void *inp, const void *weight, const void *pre, size_t N, size_t C, size_t OC) {
    const int r = role_of(prof(c), weight);
    TIMED(TRI_PROF_GEMM_DINP, r, real->matmul_bwd_dgelu(c, dpre, NULL, dbias_pre, dout, inp, weight, pre, N, C, OC));
    if (dweight != NULL)
        TIMED(TRI_PROF_GEMM_DWEIGHT, r, real->matmul_bwd(c, NULL, dweight, NULL, dout, inp, weight, N, C, OC));
}

static void p_layernorm_fwd(tri_ctx *c, void *out, float *mean, float *rstd, const void *inp, const void *w,
                            const void *b, size_t N, size_t C) {
    TIMED(TRI_PROF_LAYERNORM, 0, real->layernorm_fwd(c, out, mean, rstd, inp, w, b, N, C));
}

static void p_layernorm_bwd(tri_ctx *c, void *dinp, float *dw, float *db, const void *dout, const void *inp,
                            const void *w, const float *mean, const float *rstd, size_t N, size_t C) {
    TIMED(TRI_PROF_LAYERNORM, 0, real->layernorm_bwd(c, dinp, dw, db, dout, inp, w, mean, rstd, N, C));
}

static void p_attention_fwd(tri_ctx *c, void *out, float *state, const void *qkv, size_t B, size_t T, int NH, int NKV,
                            int HS) {
    TIMED(TRI_PROF_ATTENTION_FWD, 0, real->attention_fwd(c, out, state, qkv, B, T, NH, NKV, HS));
}

static void p_attention_bwd(tri_ctx *c, void *dqkv, float *scratch, const void *dout, const void *qkv, const void *out,
                            const float *state, size_t B, size_t T, int NH, int NKV, int HS) {
    TIMED(TRI_PROF_ATTENTION_BWD, 0, real->attention_bwd(c, dqkv, scratch, dout, qkv, out, state, B, T, NH, NKV, HS));
}

/* The Llama ops count under the kinds of their GPT-2 counterparts: RMSNorm
 * as LayerNorm, SwiGLU as GELU, RoPE as elementwise. */
static void p_rmsnorm_fwd(tri_ctx *c, void *out, float *rstd, const void *inp, const void *w, size_t N, size_t C,
                          float eps) {
    TIMED(TRI_PROF_LAYERNORM, 0, real->rmsnorm_fwd(c, out, rstd, inp, w, N, C, eps));
}

static void p_rmsnorm_bwd(tri_ctx *c, void *dinp, float *dw, const void *dout, const void *inp, const void *w,
                          const float *rstd, size_t N, size_t C) {
    TIMED(TRI_PROF_LAYERNORM, 0, real->rmsnorm_bwd(c, dinp, dw, dout, inp, w, rstd, N, C));
}

static void p_rope_fwd(tri_ctx *c, void *qkv, const float *inv_freq, size_t B, size_t T, int NH, int NKV, int HS,
                       size_t pos0) {
    TIMED(TRI_PROF_ELEMENTWISE, 0, real->rope_fwd(c, qkv, inv_freq, B, T, NH, NKV, HS, pos0));
}

static void p_rope_bwd(tri_ctx *c, void *dqkv, const float *inv_freq, size_t B, size_t T, int NH, int NKV, int HS,
                       size_t pos0) {
    TIMED(TRI_PROF_ELEMENTWISE, 0, real->rope_bwd(c, dqkv, inv_freq, B, T, NH, NKV, HS, pos0));
}

static void p_swiglu_fwd(tri_ctx *c, void *out, const void *inp, size_t N, size_t F) {
    TIMED(TRI_PROF_GELU, 0, real->swiglu_fwd(c, out, inp, N, F));
}

static void p_swiglu_bwd(tri_ctx *c, void *dinp, const void *inp, const void *dout, size_t N, size_t F) {
    TIMED(TRI_PROF_GELU, 0, real->swiglu_bwd(c, dinp, inp, dout, N, F));
}

static void p_gelu_fwd(tri_ctx *c, void *out, const void *inp, size_t N) {
    TIMED(TRI_PROF_GELU, 0, real->gelu_fwd(c, out, inp, N));
}

static void p_gelu_bwd(tri_ctx *c, void *dinp, const void *inp, const void *dout, size_t N) {
    TIMED(TRI_PROF_GELU, 0, real->gelu_bwd(c, dinp, inp, dout, N));
}

static void p_residual_fwd(tri_ctx *c, void *out, const void *res, const void *x, const void *bias, size_t N,
                           size_t C) {
    TIMED(TRI_PROF_ELEMENTWISE, 0, real->residual_fwd(c, out, res, x, bias, N, C));
}

static void p_bias_bwd(tri_ctx *c, float *dbias, const void *dout, size_t N, size_t C) {
    TIMED(TRI_PROF_ELEMENTWISE, 0, real->bias_bwd(c, dbias, dout, N, C));
}

static void p_embedding_fwd(tri_ctx *c, void *out, const int32_t *ids, const void *wte, const void *wpe, size_t B,
                            size_t T, size_t C, size_t vstart, size_t Vl) {
    TIMED(TRI_PROF_EMBEDDING, 0, real->embedding_fwd(c, out, ids, wte, wpe, B, T, C, vstart, Vl));
}

static void p_embedding_bwd(tri_ctx *c, float *dwte, float *dwpe, const void *dout, const int32_t *ids, size_t B,
                            size_t T, size_t C, size_t vstart, size_t Vl) {
    TIMED(TRI_PROF_EMBEDDING, 0, real->embedding_bwd(c, dwte, dwpe, dout, ids, B, T, C, vstart, Vl));
}

static void p_crossentropy_stats(tri_ctx *c, float *stats, const void *logits, const int32_t *targets, size_t N,
                                 size_t Vl, size_t vstart, size_t V) {
    TIMED(TRI_PROF_CROSSENTROPY, 0, real->crossentropy_stats(c, stats, logits, targets, N, Vl, vstart, V));
}

static void p_crossentropy_combine(tri_ctx *c, float *stats, const float *gather, size_t N, int R) {
    TIMED(TRI_PROF_CROSSENTROPY, 0, real->crossentropy_combine(c, stats, gather, N, R));
}

static void p_crossentropy_bwd(tri_ctx *c, float *losses, void *dlogits, const void *logits, const float *stats,
                               const int32_t *targets, float dscale, size_t N, size_t Vl, size_t vstart, size_t V) {
    TIMED(TRI_PROF_CROSSENTROPY, 0,
          real->crossentropy_bwd(c, losses, dlogits, logits, stats, targets, dscale, N, Vl, vstart, V));
}

static void p_adamw(tri_ctx *c, float *param, float *m, float *v, const float *grad, size_t n, float lr, float beta1,
                    float beta2, float eps, float wd, int t) {
    TIMED(TRI_PROF_OPTIMIZER, 0, real->adamw(c, param, m, v, grad, n, lr, beta1, beta2, eps, wd, t));
}

static void p_adamw_multi(tri_ctx *c, const tri_adamw_span *spans, int count, float lr, float beta1, float beta2,
                          float eps, int t) {
    TIMED(TRI_PROF_OPTIMIZER, 0, real->adamw_multi(c, spans, count, lr, beta1, beta2, eps, t));
}

/* The ops that return a value: timed the same way. */
static double p_sum(tri_ctx *c, const float *x, size_t n) {
    double r;
    TIMED(TRI_PROF_CROSSENTROPY, 0, r = real->sum(c, x, n)); /* (the model sums only its losses) */
    return r;
}

static double p_sumsq(tri_ctx *c, const float *x, size_t n) {
    double r;
    TIMED(TRI_PROF_OPTIMIZER, 0, r = real->sumsq(c, x, n)); /* (the gradient norm) */
    return r;
}

static double p_sumsq_multi(tri_ctx *c, const float *const *xs, const size_t *ns, int count) {
    double r;
    TIMED(TRI_PROF_OPTIMIZER, 0, r = real->sumsq_multi(c, xs, ns, count));
    return r;
}

static void p_scale(tri_ctx *c, float *x, float s, size_t n) {
    TIMED(TRI_PROF_OPTIMIZER, 0, real->scale(c, x, s, n)); /* (clipping, fp16 unscaling) */
}

static void p_add(tri_ctx *c, float *y, const float *x, size_t n) {
    TIMED(TRI_PROF_ELEMENTWISE, 0, real->add(c, y, x, n));
}

/* ---- the profile ---- */

/* The real table with its ops replaced by the wrappers above. An optional
 * op the backend leaves NULL stays NULL, so that the model takes the same
 * path as without the profile; the entries that are not ops (start-up,
 * memory, staging copies, waits, sizes, marks) are the real ones. */
static tri_ops wrap(const tri_ops *real) {
    tri_ops t = *real;
    t.copy = p_copy;
    t.zero = p_zero;
    t.cast = p_cast;
    t.matmul_fwd = p_matmul_fwd;
    t.matmul_bwd = p_matmul_bwd;
    t.matmul_gelu_fwd = real->matmul_gelu_fwd ? p_matmul_gelu_fwd : NULL;
    t.matmul_bwd_dgelu = real->matmul_bwd_dgelu ? p_matmul_bwd_dgelu : NULL;
    t.layernorm_fwd = p_layernorm_fwd;
    t.layernorm_bwd = p_layernorm_bwd;
    t.attention_fwd = p_attention_fwd;
    t.attention_bwd = p_attention_bwd;
    t.rmsnorm_fwd = real->rmsnorm_fwd ? p_rmsnorm_fwd : NULL;
    t.rmsnorm_bwd = real->rmsnorm_bwd ? p_rmsnorm_bwd : NULL;
    t.rope_fwd = real->rope_fwd ? p_rope_fwd : NULL;
    t.rope_bwd = real->rope_bwd ? p_rope_bwd : NULL;
    t.swiglu_fwd = real->swiglu_fwd ? p_swiglu_fwd : NULL;
    t.swiglu_bwd = real->swiglu_bwd ? p_swiglu_bwd : NULL;
    t.gelu_fwd = p_gelu_fwd;
    t.gelu_bwd = p_gelu_bwd;
    t.residual_fwd = p_residual_fwd;
    t.bias_bwd = p_bias_bwd;
    t.embedding_fwd = p_embedding_fwd;
    t.embedding_bwd = p_embedding_bwd;
    t.crossentropy_stats = p_crossentropy_stats;
    t.crossentropy_combine = p_crossentropy_combine;
    t.crossentropy_bwd = p_crossentropy_bwd;
    t.adamw = p_adamw;
    t.adamw_multi = real->adamw_multi ? p_adamw_multi : NULL;
    t.sum = p_sum;
    t.sumsq = p_sumsq;
    t.sumsq_multi = real->sumsq_multi ? p_sumsq_multi : NULL;
    t.scale = p_scale;
    t.add = p_add;
    return t;
}

tri_profile *tri_profile_start(tri_ctx *c, int pairs) {
    tri_profile *p = calloc(1, sizeof *p);
    if (p == NULL) {
        tri_error("profile: out of memory");
        return NULL;
    }
    p->real = c->ops;
    p->c = c;
    p->table = wrap(c->ops);
    p->marks = c->ops->marks_init != NULL && c->ops->mark != NULL && c->ops->marks_read != NULL;
    p->tot.marks = p->marks;
    if (p->marks && make_pool(p, pairs > 0 ? pairs : START_PAIRS) != 0) {
        free(p);
        return NULL;
    }
    c->ops = &p->table;
    return p;
}

void tri_profile_stop(tri_profile *p) {
    if (p == NULL) return;
    if (p->c->ops == &p->table) p->c->ops = p->real;
    if (p->marks && p->real->marks_free) p->real->marks_free(p->c);
    free(p->kind);
    free(p->role);
    free(p->ms);
    free(p->roles);
    free(p);
}

int tri_profile_role(tri_profile *p, const void *weight, size_t bytes, tri_prof_role r) {
    if (p->n_roles == p->cap_roles) {
        int cap = p->cap_roles ? 2 * p->cap_roles : 64;
        role_range *n = realloc(p->roles, (size_t)cap * sizeof *n);
        if (n == NULL) return tri_error("profile: out of memory for the GEMM roles");
        p->roles = n;
        p->cap_roles = cap;
    }
    p->roles[p->n_roles++] = (role_range){.lo = (uintptr_t)weight, .hi = (uintptr_t)weight + bytes, .role = r};
    return 0;
}

void tri_profile_step(tri_profile *p) {
    flush(p);
    /* a step that filled the pool waited for it: the next has room for all its ops */
    if (p->marks && p->in_step > p->cap && !p->no_grow && make_pool(p, p->in_step) != 0)
        p->no_grow = 1; /* the old pool stays: a wait whenever it fills */
    p->in_step = 0;
    p->tot.steps++;
}

void tri_profile_reset(tri_profile *p) {
    flush(p);
    const int marks = p->tot.marks;
    memset(&p->tot, 0, sizeof p->tot);
    p->tot.marks = marks;
}

const tri_prof_totals *tri_profile_totals(const tri_profile *p) { return &p->tot; }

static const char *const KIND_KEY[TRI_PROF_KINDS] = {
    "gemm_fwd", "gemm_dinp",    "gemm_dweight", "attention_fwd", "attention_bwd", "layernorm",
    "gelu",     "crossentropy", "embedding",    "elementwise",   "optimizer",
};

static const char *const KIND_LABEL[TRI_PROF_KINDS] = {
    "GEMM forward", "GEMM input grad", "GEMM weight grad", "attention fwd", "attention bwd", "LayerNorm",
    "GELU",         "cross-entropy",   "embedding",        "elementwise",   "optimizer",
};

static const char *const ROLE_KEY[TRI_PROF_ROLES] = {"qkv", "attproj", "fc", "fcproj", "head", "unknown"};

const char *tri_prof_kind_key(tri_prof_kind k) { return k >= 0 && k < TRI_PROF_KINDS ? KIND_KEY[k] : "?"; }
const char *tri_prof_kind_label(tri_prof_kind k) { return k >= 0 && k < TRI_PROF_KINDS ? KIND_LABEL[k] : "?"; }
const char *tri_prof_role_key(tri_prof_role r) { return r >= 0 && r < TRI_PROF_ROLES ? ROLE_KEY[r] : "?"; }
