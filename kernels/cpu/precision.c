/* The CPU backend's 16-bit emulation: widening to fp32 (exact), narrowing
 * to bf16 / fp16 (round to nearest even, kernels/half.h), the cast op, and
 * the per-context host scratch the op adapters (cpu_ops.c) widen into.
 * Contracts in kernels/ops.h and docs/precision.md. */
#include "kernels/cpu/cpu_internal.h"
#include "kernels/half.h"

/* A conversion loop is worth an OpenMP team above this many elements. */
#define CAST_PAR_MIN (1u << 16)

float *tri_cpu_scratch(tri_ctx *c, size_t floats) {
    tri_cpu_state *s = c->backend;
    if (s == NULL) { /* the plain CPU backend: its state appears with the first 16-bit op */
        s = calloc(1, sizeof *s);
        if (s == NULL) TRI_FAIL("out of host memory (CPU backend state)");
        c->backend = s;
    }
    if (floats > s->scratch_floats) {
        /* grow geometrically so that a run settles after a few calls */
        size_t want = floats > SIZE_MAX / 2 / sizeof(float) ? floats : floats + floats / 2;
        float *p = tri_cpu_alloc(want * sizeof(float));
        if (p == NULL) TRI_FAIL("out of host memory: the 16-bit emulation needs %zu bytes of scratch", want * 4);
        tri_cpu_free(s->scratch);
        s->scratch = p;
        s->scratch_floats = want;
    }
    return s->scratch;
}

void tri_cpu_state_release(tri_cpu_state *s) {
    if (s == NULL) return;
    tri_cpu_free(s->scratch);
    s->scratch = NULL;
    s->scratch_floats = 0;
}

void tri_cpu_widen(float *dst, const void *src, tri_dtype t, size_t n) {
    if (t == TRI_F32) {
        if (dst != src) memcpy(dst, src, n * sizeof(float));
        return;
    }
    TRI_CHECK(t == TRI_BF16 || t == TRI_F16);
    const uint16_t *h = src;
    if (t == TRI_BF16) {
#pragma omp parallel for schedule(static) if (n >= CAST_PAR_MIN)
        for (size_t i = 0; i < n; i++) dst[i] = tri_bf16_to_f32(h[i]);
    } else {
#pragma omp parallel for schedule(static) if (n >= CAST_PAR_MIN)
        for (size_t i = 0; i < n; i++) dst[i] = tri_f16_to_f32(h[i]);
    }
}

void tri_cpu_narrow(void *dst, tri_dtype t, const float *src, size_t n) {
    if (t == TRI_F32) {
        if (dst != src) memcpy(dst, src, n * sizeof(float));
        return;
    }
    TRI_CHECK(t == TRI_BF16 || t == TRI_F16);
    uint16_t *h = dst;
    if (t == TRI_BF16) {
#pragma omp parallel for schedule(static) if (n >= CAST_PAR_MIN)
        for (size_t i = 0; i < n; i++) h[i] = tri_f32_to_bf16(src[i]);
    } else {
#pragma omp parallel for schedule(static) if (n >= CAST_PAR_MIN)
        for (size_t i = 0; i < n; i++) h[i] = tri_f32_to_f16(src[i]);
    }
}

void tri_cpu_cast(void *dst, tri_dtype dst_t, const void *src, tri_dtype src_t, size_t n) {
    TRI_CHECK(dst_t == TRI_F32 || dst_t == TRI_BF16 || dst_t == TRI_F16);
    TRI_CHECK(src_t == TRI_F32 || src_t == TRI_BF16 || src_t == TRI_F16);
    if (dst_t == src_t) {
        if (dst != src && n > 0) memcpy(dst, src, n * tri_dtype_size(dst_t));
    } else if (src_t == TRI_F32) {
        tri_cpu_narrow(dst, dst_t, src, n);
    } else if (dst_t == TRI_F32) {
        tri_cpu_widen(dst, src, src_t, n);
    } else { /* bf16 <-> fp16: the widening is exact, so this rounds once */
        const uint16_t *s = src;
        uint16_t *d = dst;
        if (src_t == TRI_BF16) {
#pragma omp parallel for schedule(static) if (n >= CAST_PAR_MIN)
            for (size_t i = 0; i < n; i++) d[i] = tri_f32_to_f16(tri_bf16_to_f32(s[i]));
        } else {
#pragma omp parallel for schedule(static) if (n >= CAST_PAR_MIN)
            for (size_t i = 0; i < n; i++) d[i] = tri_f32_to_bf16(tri_f16_to_f32(s[i]));
        }
    }
}
