/* GELU, tanh approximation, on the CPU. Contracts in kernels/ops.h.
 *   gelu(x) = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3).
 * With s = 0.5 (1 + tanh(u)) = sigmoid(2u) and a = e^(-2|u|) <= 1:
 *   s = 1 / (1 + a) for u >= 0,  a / (1 + a) for u < 0   (never overflows),
 *   s (1 - s) = a / (1 + a)^2                             (both signs),
 *   gelu(x) = x s,   gelu'(x) = s + 2 x u' s (1 - s),  u' = sqrt(2/pi) (1 + 3 * 0.044715 x^2).
 * One exp per element, no tanh call and no branch (vector bodies through
 * vec.h, scalar tails), and 1 + tanh(u) is never formed, so nothing cancels
 * for negative x. */
#include "kernels/cpu/cpu_internal.h"

static const float GELU_K0 = 0.79788456080286535588f; /* sqrt(2 / pi) */
static const float GELU_K1 = 0.044715f;

/* Elements per OpenMP work item: a multiple of the vector width. */
enum { GELU_BLOCK = 4096 };

/* The scalar formulas below are the reference; the vector bodies do the same
 * operations in the same order (vec_expf_v = vec_expf lane by lane), so every
 * element gets the same bits whichever path computed it. */

static float gelu_one(float x) {
    const float u = GELU_K0 * (x + GELU_K1 * x * x * x);
    const float a = vec_expf(-2.0f * fabsf(u));
    return x * ((u >= 0.0f ? 1.0f : a) / (1.0f + a));
}

static float gelu_grad_one(float x, float dy) {
    const float x2 = x * x;
    const float u = GELU_K0 * (x + GELU_K1 * x2 * x);
    const float du = GELU_K0 * (1.0f + 3.0f * GELU_K1 * x2);
    const float a = vec_expf(-2.0f * fabsf(u));
    const float r = 1.0f / (1.0f + a);
    const float s = (u >= 0.0f ? 1.0f : a) * r;
    float g = s + 2.0f * x * du * (a * r * r);
    g = x > 30.0f ? 1.0f : g;
    g = x < -30.0f ? 0.0f : g;
    return g * dy;
}

/* out[i0, i1) = gelu(inp[i0, i1)) */
static void gelu_span(float *out, const float *inp, size_t i0, size_t i1) {
    size_t i = i0;
#ifdef TRI_CPU_VEC
    const vf k0 = vf_set1(GELU_K0), k1 = vf_set1(GELU_K1);
    const vf one = vf_set1(1.0f), m2 = vf_set1(-2.0f), zero = vf_zero();
    for (; i + VF_N <= i1; i += VF_N) {
        const vf x = vf_load(inp + i);
        const vf u = vf_mul(k0, vf_add(x, vf_mul(vf_mul(vf_mul(k1, x), x), x)));
        const vf a = vec_expf_v(vf_mul(m2, vf_abs(u)));
        const vf num = vf_select(vf_ge(u, zero), one, a);
        vf_store(out + i, vf_mul(x, vf_div(num, vf_add(one, a))));
    }
#endif
    for (; i < i1; i++) out[i] = gelu_one(inp[i]);
}

/* dinp[i0, i1) = gelu'(inp) * dout (dinp may alias dout) */
static void gelu_grad_span(float *dinp, const float *inp, const float *dout, size_t i0, size_t i1) {
    size_t i = i0;
#ifdef TRI_CPU_VEC
    const vf k0 = vf_set1(GELU_K0), k1 = vf_set1(GELU_K1), k3 = vf_set1(3.0f * GELU_K1);
    const vf one = vf_set1(1.0f), two = vf_set1(2.0f), m2 = vf_set1(-2.0f), zero = vf_zero();
    const vf p30 = vf_set1(30.0f), n30 = vf_set1(-30.0f);
    for (; i + VF_N <= i1; i += VF_N) {
        const vf x = vf_load(inp + i);
        const vf x2 = vf_mul(x, x);
        const vf u = vf_mul(k0, vf_add(x, vf_mul(vf_mul(k1, x2), x)));
        const vf du = vf_mul(k0, vf_add(one, vf_mul(k3, x2)));
        const vf a = vec_expf_v(vf_mul(m2, vf_abs(u)));
        const vf r = vf_div(one, vf_add(one, a));
        const vf s = vf_mul(vf_select(vf_ge(u, zero), one, a), r);
        const vf t = vf_mul(vf_mul(vf_mul(two, x), du), vf_mul(vf_mul(a, r), r));
        vf g = vf_add(s, t);
        g = vf_select(vf_gt(x, p30), one, g);
        g = vf_select(vf_lt(x, n30), zero, g);
        vf_store(dinp + i, vf_mul(g, vf_load(dout + i)));
    }
#endif
    for (; i < i1; i++) dinp[i] = gelu_grad_one(inp[i], dout[i]);
}

/* out (N) = gelu(inp)                                        [overwrite; out != inp] */
void tri_cpu_gelu_fwd(float *out, const float *inp, size_t N) {
    const size_t nblk = (N + GELU_BLOCK - 1) / GELU_BLOCK;
#pragma omp parallel for schedule(static) if (N >= TRI_CPU_PAR_MIN)
    for (size_t bk = 0; bk < nblk; bk++) {
        const size_t i0 = bk * GELU_BLOCK;
        gelu_span(out, inp, i0, N - i0 < GELU_BLOCK ? N : i0 + GELU_BLOCK);
    }
}

/* dinp (N) = gelu'(inp) * dout                               [overwrite; dinp may alias dout]
 * Beyond |x| > 30 the derivative is exactly 0 or 1 in fp32; those are
 * selected so that huge x (where x^2 overflows) cannot produce inf * 0. */
void tri_cpu_gelu_bwd(float *dinp, const float *inp, const float *dout, size_t N) {
    const size_t nblk = (N + GELU_BLOCK - 1) / GELU_BLOCK;
#pragma omp parallel for schedule(static) if (N >= TRI_CPU_PAR_MIN)
    for (size_t bk = 0; bk < nblk; bk++) {
        const size_t i0 = bk * GELU_BLOCK;
        gelu_grad_span(dinp, inp, dout, i0, N - i0 < GELU_BLOCK ? N : i0 + GELU_BLOCK);
    }
}
