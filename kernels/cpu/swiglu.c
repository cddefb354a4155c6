/* SwiGLU on the CPU (Llama's MLP nonlinearity). Contracts in kernels/ops.h
 * (swiglu_fwd, swiglu_bwd). Each row of inp is [gate (F) | up (F)]:
 *   out = silu(g) * u,  silu(g) = g s,  s = sigmoid(g);
 *   dg = dout * u * silu'(g),  silu'(g) = s (1 + g (1 - s));  du = dout * silu(g).
 * With a = e^(-|g|) <= 1: s = 1 / (1 + a) for g >= 0, a / (1 + a) for g < 0,
 * and 1 - s = (g >= 0 ? a : 1) / (1 + a): one exp per element, no overflow
 * and nothing cancels. Vector bodies through vec.h with the same operations
 * in the same order as the scalar tails (vec_expf_v = vec_expf lane by
 * lane): every element gets the same bits whichever path computed it. */
#include "kernels/cpu/cpu_internal.h"

static float swiglu_one(float g, float u) {
    const float a = vec_expf(-fabsf(g));
    const float s = (g >= 0.0f ? 1.0f : a) / (1.0f + a);
    return (g * s) * u;
}

/* dg and du of one element */
static void swiglu_grad_one(float g, float u, float d, float *dg, float *du) {
    const float a = vec_expf(-fabsf(g));
    const float r = 1.0f / (1.0f + a);
    const float s = (g >= 0.0f ? 1.0f : a) * r;
    const float oms = (g >= 0.0f ? a : 1.0f) * r; /* 1 - s */
    *dg = (d * u) * (s * (1.0f + g * oms));
    *du = d * (g * s);
}

/* o[0, F) = silu(g) * u for one row */
static void swiglu_row(float *o, const float *g, const float *u, size_t F) {
    size_t i = 0;
#ifdef TRI_CPU_VEC
    const vf one = vf_set1(1.0f), zero = vf_zero();
    for (; i + VF_N <= F; i += VF_N) {
        const vf x = vf_load(g + i);
        const vf a = vec_expf_v(vf_sub(zero, vf_abs(x)));
        const vf s = vf_div(vf_select(vf_ge(x, zero), one, a), vf_add(one, a));
        vf_store(o + i, vf_mul(vf_mul(x, s), vf_load(u + i)));
    }
#endif
    for (; i < F; i++) o[i] = swiglu_one(g[i], u[i]);
}

/* dg[0, F), du[0, F) of one row */
static void swiglu_grad_row(float *dg, float *du, const float *g, const float *u, const float *d, size_t F) {
    size_t i = 0;
#ifdef TRI_CPU_VEC
    const vf one = vf_set1(1.0f), zero = vf_zero();
    for (; i + VF_N <= F; i += VF_N) {
        const vf x = vf_load(g + i), up = vf_load(u + i), dd = vf_load(d + i);
        const vf a = vec_expf_v(vf_sub(zero, vf_abs(x)));
        const vf r = vf_div(one, vf_add(one, a));
        const vmask pos = vf_ge(x, zero);
        const vf s = vf_mul(vf_select(pos, one, a), r);
        const vf oms = vf_mul(vf_select(pos, a, one), r);
        vf_store(dg + i, vf_mul(vf_mul(dd, up), vf_mul(s, vf_add(one, vf_mul(x, oms)))));
        vf_store(du + i, vf_mul(dd, vf_mul(x, s)));
    }
#endif
    for (; i < F; i++) swiglu_grad_one(g[i], u[i], d[i], dg + i, du + i);
}

/* out (N, F) = silu(inp[:, :F]) * inp[:, F:]                  [overwrite] */
void tri_cpu_swiglu_fwd(float *out, const float *inp, size_t N, size_t F) {
#pragma omp parallel for schedule(static) if (N * F >= TRI_CPU_PAR_MIN)
    for (size_t n = 0; n < N; n++) swiglu_row(out + n * F, inp + n * 2 * F, inp + n * 2 * F + F, F);
}

/* dinp (N, 2F) = [dout * u * silu'(g) | dout * silu(g)]      [overwrite] */
void tri_cpu_swiglu_bwd(float *dinp, const float *inp, const float *dout, size_t N, size_t F) {
#pragma omp parallel for schedule(static) if (N * F >= TRI_CPU_PAR_MIN)
    for (size_t n = 0; n < N; n++)
        swiglu_grad_row(dinp + n * 2 * F, dinp + n * 2 * F + F, inp + n * 2 * F, inp + n * 2 * F + F, dout + n * F, F);
}
