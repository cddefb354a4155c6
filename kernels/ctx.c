/* The op context: backend start-up, memory with accounting, staging copies. */
#include "kernels/ctx.h"

#include <stdio.h>
#include <string.h>

#include "base/err.h"
#include "base/size.h"

int tri_ctx_init(tri_ctx *c, const char *device, int threads) {
    memset(c, 0, sizeof *c);
    const tri_ops *ops = tri_ops_get(device ? device : "cpu");
    return ops != NULL ? tri_ctx_init_ops(c, ops, threads) : -1;
}

int tri_ctx_init_ops(tri_ctx *c, const tri_ops *ops, int threads) {
    memset(c, 0, sizeof *c);
    if (ops->ctx_size != sizeof(tri_ctx))
        return tri_error("--device %s: the backend was built from another version of Trident (its tri_ctx has %zu "
                         "bytes, this program's %zu)",
                         ops->name, ops->ctx_size, sizeof(tri_ctx));
    c->ops = ops;
    if (ops->init(c, threads) != 0) {
        memset(c, 0, sizeof *c);
        return -1;
    }
    return 0;
}

void tri_ctx_free(tri_ctx *c) {
    if (!c) return;
    if (c->ops && c->ops->shutdown) c->ops->shutdown(c);
    memset(c, 0, sizeof *c);
}

const char *tri_precision_name(tri_dtype t) {
    switch (t) {
    case TRI_F32: return "fp32";
    case TRI_F64: return "f64";
    case TRI_I32: return "i32";
    case TRI_U8: return "u8";
    case TRI_BF16: return "bf16";
    case TRI_F16: return "fp16";
    }
    return "unknown";
}

const char *tri_device_name(tri_device d) {
    switch (d) {
    case TRI_DEVICE_CPU: return "cpu";
    case TRI_DEVICE_CPU_GUARD: return "cpu-guard";
    case TRI_DEVICE_CUDA: return "cuda";
    }
    return "unknown";
}

int tri_precision_parse(const char *s) {
    if (s == NULL) return -1;
    if (strcmp(s, "fp32") == 0) return TRI_F32;
    if (strcmp(s, "bf16") == 0) return TRI_BF16;
    if (strcmp(s, "fp16") == 0) return TRI_F16;
    return -1;
}

int tri_ctx_set_precision(tri_ctx *c, tri_dtype compute) {
    if (compute != TRI_F32 && compute != TRI_BF16 && compute != TRI_F16)
        return tri_error("%s is not a compute dtype (expected fp32, bf16 or fp16)", tri_precision_name(compute));
    if (compute != TRI_F32 && !(c->ops->compute_dtypes & (1u << compute))) {
        const unsigned has = c->ops->compute_dtypes;
        return tri_error("the %s backend does not compute in %s (it computes in fp32%s%s)", c->ops->name,
                         tri_precision_name(compute), has & (1u << TRI_BF16) ? ", bf16" : "",
                         has & (1u << TRI_F16) ? ", fp16" : "");
    }
    c->act_dtype = c->param_dtype = compute;
    c->grad_dtype = c->master_dtype = TRI_F32;
    return 0;
}

void *tri_ctx_alloc(tri_ctx *c, size_t bytes, tri_mem_kind kind, const char *what) {
    TRI_CHECK(kind >= 0 && kind < TRI_MEM_KINDS);
    void *p = c->ops->alloc(c, bytes);
    if (!p) {
        char h[32];
        tri_error("out of memory: %s needs %s (%zu bytes) of %s memory", what,
                  tri_size_human(h, sizeof h, (double)bytes), bytes, c->ops->name);
        return NULL;
    }
    c->mem.bytes[kind] += bytes;
    if (c->mem.bytes[kind] > c->mem.peak[kind]) c->mem.peak[kind] = c->mem.bytes[kind];
    return p;
}

void tri_ctx_release(tri_ctx *c, void *p, size_t bytes, tri_mem_kind kind) {
    if (!p) return;
    TRI_CHECK(kind >= 0 && kind < TRI_MEM_KINDS && c->mem.bytes[kind] >= bytes);
    c->mem.bytes[kind] -= bytes;
    c->ops->free(c, p, bytes);
}

void *tri_ctx_host_alloc(tri_ctx *c, size_t bytes, tri_mem_kind kind, const char *what) {
    TRI_CHECK(kind >= 0 && kind < TRI_MEM_KINDS);
    void *p = c->ops->host_alloc ? c->ops->host_alloc(c, bytes) : c->ops->alloc(c, bytes);
    if (!p) {
        char h[32];
        tri_error("out of memory: %s needs %s (%zu bytes) of host memory (%s)", what,
                  tri_size_human(h, sizeof h, (double)bytes), bytes, c->ops->host_alloc ? "page-locked" : c->ops->name);
        return NULL;
    }
    c->mem.host_bytes[kind] += bytes;
    if (c->mem.host_bytes[kind] > c->mem.host_peak[kind]) c->mem.host_peak[kind] = c->mem.host_bytes[kind];
    return p;
}

void tri_ctx_host_release(tri_ctx *c, void *p, size_t bytes, tri_mem_kind kind) {
    if (!p) return;
    TRI_CHECK(kind >= 0 && kind < TRI_MEM_KINDS && c->mem.host_bytes[kind] >= bytes);
    c->mem.host_bytes[kind] -= bytes;
    if (c->ops->host_free)
        c->ops->host_free(c, p, bytes);
    else
        c->ops->free(c, p, bytes);
}

int tri_ctx_host_apart(const tri_ctx *c) { return c->ops->host_alloc != NULL; }

void tri_ctx_copy_start(tri_ctx *c, int slot, void *dst, const void *src, size_t bytes, int to_host) {
    TRI_CHECK(slot >= 0);
    if (c->ops->copy_start) {
        c->ops->copy_start(c, slot, dst, src, bytes, to_host);
    } else if (to_host) {
        c->ops->to_host(c, dst, src, bytes);
    } else {
        c->ops->to_device(c, dst, src, bytes);
    }
}

void tri_ctx_copy_wait(tri_ctx *c, int slot) {
    if (c->ops->copy_wait) c->ops->copy_wait(c, slot);
}

void tri_ctx_copy_join(tri_ctx *c) {
    if (c->ops->copy_join) c->ops->copy_join(c);
}

void tri_ctx_saved_use(tri_ctx *c, size_t bytes, int acquire) {
    if (acquire) {
        c->mem.saved_in_use += bytes;
        if (c->mem.saved_in_use > c->mem.saved_in_use_peak) c->mem.saved_in_use_peak = c->mem.saved_in_use;
    } else {
        TRI_CHECK(c->mem.saved_in_use >= bytes);
        c->mem.saved_in_use -= bytes;
    }
}

void tri_ctx_to_device(tri_ctx *c, void *dst, const void *host_src, size_t bytes) {
    c->ops->to_device(c, dst, host_src, bytes);
}

void tri_ctx_to_host(tri_ctx *c, void *host_dst, const void *src, size_t bytes) {
    c->ops->to_host(c, host_dst, src, bytes);
}

void tri_ctx_host_window(tri_ctx *c, int open) {
    if (c && c->ops && c->ops->host_window) c->ops->host_window(c, open);
}

int tri_ctx_owns(tri_ctx *c, const void *p, size_t bytes) {
    if (c == NULL || c->ops == NULL || c->ops->owns == NULL) return -1;
    return c->ops->owns(c, p, bytes) ? 1 : 0;
}

void tri_ctx_adamw_multi(tri_ctx *c, const tri_adamw_span *spans, int count, float lr, float beta1, float beta2,
                         float eps, int t) {
    if (count <= 0) return;
    if (c->ops->adamw_multi != NULL) {
        c->ops->adamw_multi(c, spans, count, lr, beta1, beta2, eps, t);
        return;
    }
    for (int i = 0; i < count; i++)
        c->ops->adamw(c, spans[i].param, spans[i].m, spans[i].v, spans[i].grad, spans[i].n, lr, beta1, beta2, eps,
                      spans[i].wd, t);
}

double tri_ctx_sumsq_multi(tri_ctx *c, const float *const *xs, const size_t *ns, int count) {
    if (count <= 0) return 0.0;
    if (c->ops->sumsq_multi != NULL) return c->ops->sumsq_multi(c, xs, ns, count);
    double sum = 0.0;
    for (int i = 0; i < count; i++) sum += c->ops->sumsq(c, xs[i], ns[i]);
    return sum;
}

/* Host-side bytes at their peaks other than the optimizer's (staging). */
static size_t host_other(const tri_mem_stats *m) {
    size_t s = 0;
    for (int k = 0; k < TRI_MEM_KINDS; k++)
        if (k != TRI_MEM_OPTIM) s += m->host_peak[k];
    return s;
}

void tri_mem_json(const tri_mem_stats *m, char *buf, size_t n) {
    int len = snprintf(buf, n,
                       "{\"params\": %zu, \"grads\": %zu, \"optim\": %zu, \"saved_act_peak\": %zu, "
                       "\"saved_act_alloc\": %zu, \"workspace\": %zu",
                       m->peak[TRI_MEM_PARAMS], m->peak[TRI_MEM_GRADS], m->peak[TRI_MEM_OPTIM], m->saved_in_use_peak,
                       m->peak[TRI_MEM_SAVED], m->peak[TRI_MEM_WORKSPACE]);
    if (len < 0 || (size_t)len >= n) return;
    if (m->host_peak[TRI_MEM_OPTIM] || host_other(m))
        len += snprintf(buf + len, n - (size_t)len, ", \"host_optim\": %zu, \"host_other\": %zu",
                        m->host_peak[TRI_MEM_OPTIM], host_other(m));
    if (len >= 0 && (size_t)len < n) snprintf(buf + len, n - (size_t)len, "}");
}

void tri_mem_line(const tri_mem_stats *m, char *buf, size_t n) {
    char a[24], b[24], c[24], d[24], e[24];
    snprintf(buf, n, "params %s, grads %s, optimizer %s, saved activations %s (slots allocated up front), workspace %s",
             tri_size_human(a, sizeof a, (double)m->peak[TRI_MEM_PARAMS]),
             tri_size_human(b, sizeof b, (double)m->peak[TRI_MEM_GRADS]),
             tri_size_human(c, sizeof c, (double)m->peak[TRI_MEM_OPTIM]),
             tri_size_human(d, sizeof d, (double)m->peak[TRI_MEM_SAVED]),
             tri_size_human(e, sizeof e, (double)m->peak[TRI_MEM_WORKSPACE]));
    size_t len = strlen(buf);
    if ((m->host_peak[TRI_MEM_OPTIM] || host_other(m)) && len < n)
        snprintf(buf + len, n - len, "; host: optimizer %s, staging %s",
                 tri_size_human(a, sizeof a, (double)m->host_peak[TRI_MEM_OPTIM]),
                 tri_size_human(b, sizeof b, (double)host_other(m)));
}
