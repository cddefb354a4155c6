/* "cpu-guard": the CPU backend with guarded memory, a test and debug mode.
 *
 * Every allocation is its own mapping, kept PROT_NONE except while an op, a
 * staging copy or a transport call (tri_ctx_host_window) runs: the entry
 * points below open every mapping (read/write), run the CPU op, and close them
 * again. Host code that reads or writes backend memory anywhere else (model
 * code peeking at a loss, a checkpoint writer reading parameters) faults with
 * SIGSEGV at the offending line, which is what the model's "no host access to
 * backend memory" rule needs to be checked by a test. Slow (two mprotect per
 * mapping per op): for tests only. */
#include "kernels/cpu/cpu_internal.h"

#include <sys/mman.h>

typedef struct guard_map {
    void *p;
    size_t len;
} guard_map;

/* cpu first: the CPU ops this backend runs find their state (the 16-bit
 * emulation's scratch) at ctx->backend */
typedef struct guard_state {
    tri_cpu_state cpu;
    guard_map *maps;
    int n, cap;
    int depth; /* nested opens (a transport call inside a window) */
} guard_state;

static guard_state *state_of(tri_ctx *c) {
    TRI_CHECK(c->backend != NULL);
    return c->backend;
}

static void protect_all(guard_state *g, int prot) {
    for (int i = 0; i < g->n; i++)
        if (mprotect(g->maps[i].p, g->maps[i].len, prot) != 0)
            TRI_FAIL("mprotect failed on a guarded mapping of %zu bytes", g->maps[i].len);
}

static void open_mem(tri_ctx *c) {
    guard_state *g = state_of(c);
    if (g->depth++ == 0) protect_all(g, PROT_READ | PROT_WRITE);
}

static void close_mem(tri_ctx *c) {
    guard_state *g = state_of(c);
    TRI_CHECK(g->depth > 0);
    if (--g->depth == 0) protect_all(g, PROT_NONE);
}

static int guard_init(tri_ctx *c, int threads) {
    if (tri_ops_cpu()->init(c, threads) != 0) return -1;
    guard_state *g = calloc(1, sizeof *g);
    if (!g) return tri_error("out of memory (cpu-guard state)");
    c->backend = g;
    return 0;
}

static void guard_shutdown(tri_ctx *c) {
    guard_state *g = c->backend;
    if (g) {
        tri_cpu_state_release(&g->cpu);
        free(g->maps);
        free(g);
    }
    c->backend = NULL;
}

static size_t map_len(size_t bytes) {
    const size_t page = 4096;
    return bytes == 0 ? page : (bytes + page - 1) / page * page;
}

static void *guard_alloc(tri_ctx *c, size_t bytes) {
    guard_state *g = state_of(c);
    if (bytes > SIZE_MAX - 4096) return NULL;
    const size_t len = map_len(bytes);
    void *p = mmap(NULL, len, g->depth > 0 ? PROT_READ | PROT_WRITE : PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    if (g->n == g->cap) {
        int cap = g->cap ? 2 * g->cap : 64;
        guard_map *m = realloc(g->maps, (size_t)cap * sizeof *m);
        if (!m) {
            munmap(p, len);
            return NULL;
        }
        g->maps = m;
        g->cap = cap;
    }
    g->maps[g->n++] = (guard_map){p, len};
    return p; /* anonymous mappings are zero-filled */
}

static void guard_free(tri_ctx *c, void *p, size_t bytes) {
    if (!p) return;
    guard_state *g = state_of(c);
    for (int i = 0; i < g->n; i++)
        if (g->maps[i].p == p) {
            munmap(p, g->maps[i].len);
            g->maps[i] = g->maps[--g->n];
            return;
        }
    TRI_FAIL("cpu-guard: free of %p, which it did not allocate", p);
}

static void guard_host_window(tri_ctx *c, int open) {
    if (open)
        open_mem(c);
    else
        close_mem(c);
}

static int guard_owns(tri_ctx *c, const void *p, size_t bytes) {
    const guard_state *g = state_of(c);
    const char *q = p;
    for (int i = 0; i < g->n; i++) {
        const char *lo = g->maps[i].p;
        if (q >= lo && q < lo + g->maps[i].len) return bytes <= (size_t)(lo + g->maps[i].len - q);
    }
    return 0;
}

/* Every other entry: open, run the CPU op, close. */
#define CPU (tri_ops_cpu())
#define GUARD_VOID(name, params, args) \
    static void guard_##name params {  \
        open_mem(c);                   \
        CPU->name args;                \
        close_mem(c);                  \
    }
#define GUARD_RET(type, name, params, args) \
    static type guard_##name params {       \
        open_mem(c);                        \
        type r = CPU->name args;            \
        close_mem(c);                       \
        return r;                           \
    }

GUARD_VOID(copy, (tri_ctx * c, void *dst, const void *src, size_t bytes), (c, dst, src, bytes))
GUARD_VOID(to_device, (tri_ctx * c, void *dst, const void *src, size_t bytes), (c, dst, src, bytes))
GUARD_VOID(to_host, (tri_ctx * c, void *dst, const void *src, size_t bytes), (c, dst, src, bytes))
GUARD_VOID(zero, (tri_ctx * c, void *p, size_t bytes), (c, p, bytes))
GUARD_VOID(cast, (tri_ctx * c, void *dst, tri_dtype dt, const void *src, tri_dtype st, size_t n),
           (c, dst, dt, src, st, n))
GUARD_VOID(matmul_fwd,
           (tri_ctx * c, void *out, const void *inp, const void *w, const void *b, size_t N, size_t C, size_t OC),
           (c, out, inp, w, b, N, C, OC))
GUARD_VOID(matmul_bwd,
           (tri_ctx * c, void *dinp, float *dw, float *db, const void *dout, const void *inp, const void *w, size_t N,
            size_t C, size_t OC),
           (c, dinp, dw, db, dout, inp, w, N, C, OC))
GUARD_VOID(layernorm_fwd,
           (tri_ctx * c, void *out, float *mean, float *rstd, const void *inp, const void *w, const void *b, size_t N,
            size_t C),
           (c, out, mean, rstd, inp, w, b, N, C))
GUARD_VOID(layernorm_bwd,
           (tri_ctx * c, void *dinp, float *dw, float *db, const void *dout, const void *inp, const void *w,
            const float *mean, const float *rstd, size_t N, size_t C),
           (c, dinp, dw, db, dout, inp, w, mean, rstd, N, C))
GUARD_VOID(attention_fwd,
           (tri_ctx * c, void *out, float *state, const void *qkv, size_t B, size_t T, int NH, int NKV, int HS),
           (c, out, state, qkv, B, T, NH, NKV, HS))
GUARD_VOID(attention_bwd,
           (tri_ctx * c, void *dqkv, float *scratch, const void *dout, const void *qkv, const void *out,
            const float *state, size_t B, size_t T, int NH, int NKV, int HS),
           (c, dqkv, scratch, dout, qkv, out, state, B, T, NH, NKV, HS))
GUARD_VOID(attention_block_fwd,
           (tri_ctx * c, float *o, float *lse, const void *qkv, const void *kv, size_t B, size_t T, size_t Tk,
            size_t q0, int causal, int merge, int NH, int NKV, int HS),
           (c, o, lse, qkv, kv, B, T, Tk, q0, causal, merge, NH, NKV, HS))
GUARD_VOID(attention_block_bwd,
           (tri_ctx * c, float *dqkv, float *dkv, float *scratch, const void *dout, const void *qkv, const void *kv,
            const void *out, const float *lse, size_t B, size_t T, size_t Tk, size_t q0, int causal, int NH, int NKV,
            int HS),
           (c, dqkv, dkv, scratch, dout, qkv, kv, out, lse, B, T, Tk, q0, causal, NH, NKV, HS))
GUARD_VOID(attention_kv_copy,
           (tri_ctx * c, void *dst, const void *src, tri_dtype t, size_t B, size_t T, int NH, int NKV, int HS,
            int to_qkv),
           (c, dst, src, t, B, T, NH, NKV, HS, to_qkv))
GUARD_VOID(rmsnorm_fwd,
           (tri_ctx * c, void *out, float *rstd, const void *inp, const void *w, size_t N, size_t C, float eps),
           (c, out, rstd, inp, w, N, C, eps))
GUARD_VOID(rmsnorm_bwd,
           (tri_ctx * c, void *dinp, float *dw, const void *dout, const void *inp, const void *w, const float *rstd,
            size_t N, size_t C),
           (c, dinp, dw, dout, inp, w, rstd, N, C))
GUARD_VOID(rope_fwd,
           (tri_ctx * c, void *qkv, const float *inv_freq, size_t B, size_t T, int NH, int NKV, int HS, size_t pos0),
           (c, qkv, inv_freq, B, T, NH, NKV, HS, pos0))
GUARD_VOID(rope_bwd,
           (tri_ctx * c, void *dqkv, const float *inv_freq, size_t B, size_t T, int NH, int NKV, int HS, size_t pos0),
           (c, dqkv, inv_freq, B, T, NH, NKV, HS, pos0))
GUARD_VOID(swiglu_fwd, (tri_ctx * c, void *out, const void *inp, size_t N, size_t F), (c, out, inp, N, F))
GUARD_VOID(swiglu_bwd, (tri_ctx * c, void *dinp, const void *inp, const void *dout, size_t N, size_t F),
           (c, dinp, inp, dout, N, F))
GUARD_VOID(gelu_fwd, (tri_ctx * c, void *out, const void *inp, size_t N), (c, out, inp, N))
GUARD_VOID(gelu_bwd, (tri_ctx * c, void *dinp, const void *inp, const void *dout, size_t N), (c, dinp, inp, dout, N))
GUARD_VOID(residual_fwd, (tri_ctx * c, void *out, const void *res, const void *x, const void *bias, size_t N, size_t C),
           (c, out, res, x, bias, N, C))
GUARD_VOID(bias_bwd, (tri_ctx * c, float *db, const void *dout, size_t N, size_t C), (c, db, dout, N, C))
GUARD_VOID(embedding_fwd,
           (tri_ctx * c, void *out, const int32_t *ids, const void *wte, const void *wpe, size_t B, size_t T, size_t C,
            size_t vstart, size_t Vl),
           (c, out, ids, wte, wpe, B, T, C, vstart, Vl))
GUARD_VOID(embedding_bwd,
           (tri_ctx * c, float *dwte, float *dwpe, const void *dout, const int32_t *ids, size_t B, size_t T, size_t C,
            size_t vstart, size_t Vl),
           (c, dwte, dwpe, dout, ids, B, T, C, vstart, Vl))
GUARD_VOID(crossentropy_stats,
           (tri_ctx * c, float *stats, const void *logits, const int32_t *targets, size_t N, size_t Vl, size_t vstart,
            size_t V),
           (c, stats, logits, targets, N, Vl, vstart, V))
GUARD_VOID(crossentropy_combine, (tri_ctx * c, float *stats, const float *gather, size_t N, int R),
           (c, stats, gather, N, R))
GUARD_VOID(crossentropy_bwd,
           (tri_ctx * c, float *losses, void *dlogits, const void *logits, const float *stats, const int32_t *targets,
            float dscale, size_t N, size_t Vl, size_t vstart, size_t V),
           (c, losses, dlogits, logits, stats, targets, dscale, N, Vl, vstart, V))
GUARD_VOID(adamw,
           (tri_ctx * c, float *param, float *m, float *v, const float *grad, size_t n, float lr, float beta1,
            float beta2, float eps, float wd, int t),
           (c, param, m, v, grad, n, lr, beta1, beta2, eps, wd, t))
GUARD_RET(double, sum, (tri_ctx * c, const float *x, size_t n), (c, x, n))
GUARD_RET(double, sumsq, (tri_ctx * c, const float *x, size_t n), (c, x, n))
GUARD_VOID(scale, (tri_ctx * c, float *x, float s, size_t n), (c, x, s, n))
GUARD_VOID(add, (tri_ctx * c, float *y, const float *x, size_t n), (c, y, x, n))

static void guard_sync(tri_ctx *c) {}

static size_t guard_attention_saved_floats(size_t B, size_t T, int NH, int NKV, int HS) {
    return CPU->attention_saved_floats(B, T, NH, NKV, HS);
}

static size_t guard_attention_scratch_floats(size_t B, size_t T, int NH, int NKV, int HS) {
    return CPU->attention_scratch_floats(B, T, NH, NKV, HS);
}

static const tri_ops GUARD_OPS = {
    .name = "cpu-guard",
    .compute_dtypes = (1u << TRI_F32) | (1u << TRI_BF16) | (1u << TRI_F16),
    .ctx_size = sizeof(tri_ctx),
    .init = guard_init,
    .shutdown = guard_shutdown,
    .alloc = guard_alloc,
    .free = guard_free,
    .copy = guard_copy,
    .to_device = guard_to_device,
    .to_host = guard_to_host,
    .zero = guard_zero,
    .sync = guard_sync,
    .host_window = guard_host_window,
    .owns = guard_owns,
    .cast = guard_cast,
    .matmul_fwd = guard_matmul_fwd,
    .matmul_bwd = guard_matmul_bwd,
    .layernorm_fwd = guard_layernorm_fwd,
    .layernorm_bwd = guard_layernorm_bwd,
    .attention_fwd = guard_attention_fwd,
    .attention_bwd = guard_attention_bwd,
    .attention_saved_floats = guard_attention_saved_floats,
    .attention_scratch_floats = guard_attention_scratch_floats,
    .attention_block_fwd = guard_attention_block_fwd,
    .attention_block_bwd = guard_attention_block_bwd,
    .attention_kv_copy = guard_attention_kv_copy,
    .rmsnorm_fwd = guard_rmsnorm_fwd,
    .rmsnorm_bwd = guard_rmsnorm_bwd,
    .rope_fwd = guard_rope_fwd,
    .rope_bwd = guard_rope_bwd,
    .swiglu_fwd = guard_swiglu_fwd,
    .swiglu_bwd = guard_swiglu_bwd,
    .gelu_fwd = guard_gelu_fwd,
    .gelu_bwd = guard_gelu_bwd,
    .residual_fwd = guard_residual_fwd,
    .bias_bwd = guard_bias_bwd,
    .embedding_fwd = guard_embedding_fwd,
    .embedding_bwd = guard_embedding_bwd,
    .crossentropy_stats = guard_crossentropy_stats,
    .crossentropy_combine = guard_crossentropy_combine,
    .crossentropy_bwd = guard_crossentropy_bwd,
    .adamw = guard_adamw,
    .sum = guard_sum,
    .sumsq = guard_sumsq,
    .scale = guard_scale,
    .add = guard_add,
};

const tri_ops *tri_ops_cpu_guard(void) { return &GUARD_OPS; }
