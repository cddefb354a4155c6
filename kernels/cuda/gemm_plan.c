/* The GEMM plans of the CUDA backend and their cache (kernels/cuda/gemm_plan.h):
 * pure arithmetic, built into every program and tested on the host. */
#include "kernels/cuda/gemm_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"

unsigned tri_gemm_ptr_align(const void *p) {
    const uintptr_t a = (uintptr_t)p;
    unsigned al = 16;
    while (al > 1 && a % al != 0) al /= 2;
    return al;
}

unsigned tri_gemm_type_size(tri_dtype t) { return t == TRI_F32 ? 4u : t == TRI_BF16 ? 2u : 0u; }

int tri_gemm_epi_bias_in(tri_gemm_epilogue e) { return e == TRI_GEMM_EPI_BIAS || e == TRI_GEMM_EPI_GELU_AUX_BIAS; }

int tri_gemm_epi_bias_out(tri_gemm_epilogue e) { return e == TRI_GEMM_EPI_BGRADB || e == TRI_GEMM_EPI_DGELU_BGRAD; }

int tri_gemm_epi_aux(tri_gemm_epilogue e) {
    return e == TRI_GEMM_EPI_GELU_AUX || e == TRI_GEMM_EPI_GELU_AUX_BIAS || e == TRI_GEMM_EPI_DGELU ||
           e == TRI_GEMM_EPI_DGELU_BGRAD;
}

const char *tri_gemm_epi_name(tri_gemm_epilogue e) {
    static const char *const names[TRI_GEMM_EPI_COUNT] = {"none",          "bias",  "bgradb",     "gelu_aux",
                                                          "gelu_aux_bias", "dgelu", "dgelu_bgrad"};
    return e >= 0 && e < TRI_GEMM_EPI_COUNT ? names[e] : "?";
}

int tri_gemm_check_types(const tri_gemm_call *g) {
    const void *p[5] = {g->A, g->B, g->D, g->bias, g->aux};
    const tri_dtype t[5] = {g->d.atype, g->d.btype, g->d.dtype, g->d.biastype, g->d.auxtype};
    for (int i = 0; i < 5; i++) {
        const unsigned sz = tri_gemm_type_size(t[i]);
        if (sz == 0 || (p[i] != NULL && tri_gemm_ptr_align(p[i]) < sz)) return -1;
    }
    return 0;
}

static unsigned min_align(const void *const p[5]) {
    unsigned al = 16;
    for (int i = 0; i < 5; i++)
        if (tri_gemm_ptr_align(p[i]) < al) al = tri_gemm_ptr_align(p[i]);
    return al;
}

/* One GEMM of a plan, as the plan functions state it: the storage type of
 * A and B (`ab`) and of D, the bias and the aux matrix (`dt`; cuBLASLt's
 * bias and aux types default to D's), the transposes (0: N, 1: T), the
 * sizes and leading dimensions (the aux matrix's is D's, ldc), beta
 * (`accumulate`), the epilogue and the operands. Fields left out are 0 (no
 * transpose, overwrite, no epilogue, no bias, no aux). */
typedef struct gemm_spec {
    tri_dtype ab, dt;
    int transa, transb;
    size_t m, n, k, lda, ldb, ldc;
    int accumulate;
    tri_gemm_epilogue epilogue;
    const void *A, *B;
    void *D, *bias, *aux;
} gemm_spec;

/* *g = the call s describes, its alignment the least of its pointers'. */
static void set(tri_gemm_call *g, const gemm_spec *s) {
    memset(g, 0, sizeof *g);
    g->d.transa = s->transa;
    g->d.transb = s->transb;
    g->d.m = s->m;
    g->d.n = s->n;
    g->d.k = s->k;
    g->d.lda = s->lda;
    g->d.ldb = s->ldb;
    g->d.ldc = s->ldc;
    g->d.accumulate = s->accumulate;
    g->d.epilogue = s->epilogue;
    g->d.align = min_align((const void *const[5]){s->A, s->B, s->D, s->bias, s->aux});
    g->d.atype = g->d.btype = s->ab;
    g->d.dtype = g->d.biastype = g->d.auxtype = s->dt;
    g->d.auxld = tri_gemm_epi_aux(s->epilogue) ? s->ldc : 0;
    g->A = s->A;
    g->B = s->B;
    g->D = s->D;
    g->bias = s->bias;
    g->aux = s->aux;
}

int tri_gemm_plan_fwd(tri_gemm_call *g, int *fill, tri_dtype dt, void *out, const void *inp, const void *weight,
                      const void *bias, size_t N, size_t C, size_t OC) {
    *fill = 0;
    memset(g, 0, sizeof *g);
    if (N == 0 || OC == 0) return 1;
    if (C == 0) {
        *fill = 1;
        return 1;
    }
    /* out^T (OC x N, ld OC) = W^T-as-stored^T ... : A = W stored (C x OC, ld C), op T; B = inp stored (C x N, ld C) */
    set(g, &(gemm_spec){.ab = dt,
                        .dt = dt,
                        .transa = 1,
                        .m = OC,
                        .n = N,
                        .k = C,
                        .lda = C,
                        .ldb = C,
                        .ldc = OC,
                        .epilogue = bias ? TRI_GEMM_EPI_BIAS : TRI_GEMM_EPI_NONE,
                        .A = weight,
                        .B = inp,
                        .D = out,
                        .bias = (void *)bias});
    return 0;
}

int tri_gemm_plan_dinp(tri_gemm_call *g, int *fill, tri_dtype dt, void *dinp, const void *dout, const void *weight,
                       size_t N, size_t C, size_t OC) {
    *fill = 0;
    memset(g, 0, sizeof *g);
    if (dinp == NULL || N == 0 || C == 0) return 1;
    if (OC == 0) {
        *fill = 1;
        return 1;
    }
    /* dinp^T (C x N, ld C) = A (W stored: C x OC, ld C) @ B (dout stored: OC x N, ld OC) */
    set(g, &(gemm_spec){.ab = dt,
                        .dt = dt,
                        .m = C,
                        .n = N,
                        .k = OC,
                        .lda = C,
                        .ldb = OC,
                        .ldc = C,
                        .A = weight,
                        .B = dout,
                        .D = dinp});
    return 0;
}

int tri_gemm_plan_dweight(tri_gemm_call *g, tri_dtype dt, float *dweight, float *dbias_scratch, const void *dout,
                          const void *inp, size_t N, size_t C, size_t OC) {
    memset(g, 0, sizeof *g);
    if (dweight == NULL || N == 0 || C == 0 || OC == 0) return 1;
    /* dW^T (C x OC, ld C) += A (inp stored: C x N, ld C) @ op(B) (dout stored: OC x N, ld OC; op T);
     * dW and the bias gradient fp32 whatever dt */
    set(g, &(gemm_spec){.ab = dt,
                        .dt = TRI_F32,
                        .transb = 1,
                        .m = C,
                        .n = OC,
                        .k = N,
                        .lda = C,
                        .ldb = OC,
                        .ldc = C,
                        .accumulate = 1,
                        .epilogue = dbias_scratch ? TRI_GEMM_EPI_BGRADB : TRI_GEMM_EPI_NONE,
                        .A = inp,
                        .B = dout,
                        .D = dweight,
                        .bias = dbias_scratch});
    return 0;
}

int tri_gemm_plan_fwd_gelu(tri_gemm_call *g, int *fill, tri_dtype dt, void *out, void *pre, const void *inp,
                           const void *weight, const void *bias, size_t N, size_t C, size_t OC) {
    if (tri_gemm_plan_fwd(g, fill, dt, out, inp, weight, bias, N, C, OC) != 0) return 1;
    /* the fwd GEMM with GELU in the epilogue; pre^T (OC x N, ld OC) is laid out as D */
    g->d.epilogue = bias ? TRI_GEMM_EPI_GELU_AUX_BIAS : TRI_GEMM_EPI_GELU_AUX;
    g->d.auxld = g->d.ldc;
    g->aux = pre;
    if (tri_gemm_ptr_align(pre) < g->d.align) g->d.align = tri_gemm_ptr_align(pre);
    return 0;
}

int tri_gemm_plan_dinp_dgelu(tri_gemm_call *g, int *fill, tri_dtype dt, void *dpre, float *dbias_scratch,
                             const void *dout, const void *weight, const void *pre, size_t N, size_t C, size_t OC) {
    if (tri_gemm_plan_dinp(g, fill, dt, dpre, dout, weight, N, C, OC) != 0) return 1;
    /* dpre^T (C x N, ld C) = gelu'(pre^T) * (W^T-as-stored @ dout^T); pre^T laid out as D;
     * the bias gradient (C) = sums of D over its N columns, fp32 */
    set(g, &(gemm_spec){.ab = dt,
                        .dt = dt,
                        .m = C,
                        .n = N,
                        .k = OC,
                        .lda = C,
                        .ldb = OC,
                        .ldc = C,
                        .epilogue = dbias_scratch ? TRI_GEMM_EPI_DGELU_BGRAD : TRI_GEMM_EPI_DGELU,
                        .A = weight,
                        .B = dout,
                        .D = dpre,
                        .bias = dbias_scratch,
                        .aux = (void *)pre});
    if (dbias_scratch) g->d.biastype = TRI_F32;
    return 0;
}

void tri_gemm_unfuse(tri_gemm_call *g) {
    g->d.epilogue = TRI_GEMM_EPI_NONE;
    g->d.biastype = g->d.auxtype = g->d.dtype;
    g->d.auxld = 0;
    g->bias = g->aux = NULL;
    g->d.align = min_align((const void *const[5]){g->A, g->B, g->D, NULL, NULL});
}

tri_dbias_route tri_gemm_dbias_route(tri_dbias_policy policy, int want_dweight, int want_dbias, size_t N, size_t C,
                                     size_t OC) {
    if (!want_dbias || OC == 0) return TRI_DBIAS_ROUTE_NONE;
    if (policy == TRI_DBIAS_EPILOGUE && want_dweight && N > 0 && C > 0) return TRI_DBIAS_ROUTE_EPILOGUE;
    return TRI_DBIAS_ROUTE_REDUCE;
}

/* ---- cache ---- */

static uint64_t mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    return h * 0xBF58476D1CE4E5B9ull;
}

uint64_t tri_gemm_desc_hash(const tri_gemm_desc *d) {
    uint64_t h = 0x243F6A8885A308D3ull;
    const uint64_t v[11] = {(uint64_t)d->transa,
                            (uint64_t)d->transb,
                            d->m,
                            d->n,
                            d->k,
                            d->lda,
                            d->ldb,
                            d->ldc,
                            (uint64_t)d->accumulate | (uint64_t)d->epilogue << 8 | (uint64_t)d->align << 16,
                            (uint64_t)d->atype | (uint64_t)d->btype << 8 | (uint64_t)d->dtype << 16 |
                                (uint64_t)d->biastype << 24 | (uint64_t)d->auxtype << 32,
                            d->auxld};
    for (int i = 0; i < 11; i++) h = mix(h, v[i]);
    return h;
}

int tri_gemm_desc_equal(const tri_gemm_desc *a, const tri_gemm_desc *b) {
    return a->transa == b->transa && a->transb == b->transb && a->m == b->m && a->n == b->n && a->k == b->k &&
           a->lda == b->lda && a->ldb == b->ldb && a->ldc == b->ldc && a->accumulate == b->accumulate &&
           a->epilogue == b->epilogue && a->align == b->align && a->atype == b->atype && a->btype == b->btype &&
           a->dtype == b->dtype && a->biastype == b->biastype && a->auxtype == b->auxtype && a->auxld == b->auxld;
}

tri_gemm_entry *tri_gemm_cache_find(tri_gemm_cache *c, const tri_gemm_desc *d) {
    const uint64_t h = tri_gemm_desc_hash(d);
    for (size_t i = 0; i < c->n; i++) {
        if (c->e[i].hash == h && tri_gemm_desc_equal(&c->e[i].d, d)) {
            c->hits++;
            c->e[i].uses++;
            return &c->e[i];
        }
    }
    c->misses++;
    return NULL;
}

tri_gemm_entry *tri_gemm_cache_add(tri_gemm_cache *c, const tri_gemm_desc *d) {
    if (c->n == c->cap) {
        const size_t cap = c->cap ? 2 * c->cap : 16;
        tri_gemm_entry *e = realloc(c->e, cap * sizeof *e);
        if (e == NULL) return NULL;
        c->e = e;
        c->cap = cap;
    }
    tri_gemm_entry *e = &c->e[c->n++];
    memset(e, 0, sizeof *e);
    e->d = *d;
    e->hash = tri_gemm_desc_hash(d);
    e->uses = 1;
    return e;
}

void tri_gemm_cache_free(tri_gemm_cache *c) {
    if (c == NULL) return;
    for (size_t i = 0; i < c->n; i++)
        if (c->release) c->release(&c->e[i]);
    free(c->e);
    c->e = NULL;
    c->n = c->cap = 0;
}

static const char *type_name(tri_dtype t) { return t == TRI_F32 ? "f32" : t == TRI_BF16 ? "bf16" : "?"; }

void tri_gemm_desc_str(const tri_gemm_desc *d, char *buf, size_t n) {
    char aux[64] = "";
    if (tri_gemm_epi_aux(d->epilogue))
        snprintf(aux, sizeof aux, ", aux ld %llu %s", (unsigned long long)d->auxld, type_name(d->auxtype));
    snprintf(
        buf, n,
        "m %llu n %llu k %llu, A%s B%s, lda %llu ldb %llu ldc %llu, beta %d, epilogue %s, align %u, types %s %s -> "
        "%s (bias %s)%s",
        (unsigned long long)d->m, (unsigned long long)d->n, (unsigned long long)d->k, d->transa ? "^T" : "",
        d->transb ? "^T" : "", (unsigned long long)d->lda, (unsigned long long)d->ldb, (unsigned long long)d->ldc,
        d->accumulate, tri_gemm_epi_name(d->epilogue), d->align, type_name(d->atype), type_name(d->btype),
        type_name(d->dtype), type_name(d->biastype), aux);
}

void tri_gemm_cache_fallback(tri_gemm_cache *c, tri_gemm_entry *e) {
    e->no_algo = 1;
    const unsigned bit = 1u << (unsigned)e->d.epilogue;
    if (c->noted & bit) return;
    c->noted |= bit;
    char s[384];
    tri_gemm_desc_str(&e->d, s, sizeof s);
    tri_note("the GEMM library has no algorithm for the %s epilogue of the GEMM %s: this GEMM, and any other "
             "that finds none for that epilogue, runs without it (its work done by separate kernels)",
             tri_gemm_epi_name(e->d.epilogue), s);
}
