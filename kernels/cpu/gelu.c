/* GELU, tanh approximation, on the CPU. Contracts in kernels/ops.h.
 *   gelu(x) = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3).
 * With s = 0.5 (1 + tanh(u)) = sigmoid(2u) and a = e^(-2|u|) <= 1:
 *   s = 1 / (1 + a) for u >= 0,  a / (1 + a) for u < 0   (never overflows),
 *   s (1 - s) = a / (1 + a)^2                             (both signs),
 *   gelu(x) = x s,   gelu'(x) = s + 2 x u' s (1 - s),  u' = sqrt(2/pi) (1 + 3 * 0.044715 x^2).
 * One vec_expf per element, no tanh call and no branch: both loops vectorise,
 * and 1 + tanh(u) is never formed, so nothing cancels for negative x. */
#include "kernels/cpu/cpu_internal.h"

static const float GELU_K0 = 0.79788456080286535588f; /* sqrt(2 / pi) */
static const float GELU_K1 = 0.044715f;

/* out (N) = gelu(inp)                                        [overwrite; out != inp] */
void tri_cpu_gelu_fwd(float *out, const float *inp, size_t N)
{
#pragma omp parallel for schedule(static) if (N >= TRI_CPU_PAR_MIN)
    for (size_t i = 0; i < N; i++) {
        const float x = inp[i];
        const float u = GELU_K0 * (x + GELU_K1 * x * x * x);
        const float a = vec_expf(-2.0f * fabsf(u));
        out[i] = x * ((u >= 0.0f ? 1.0f : a) / (1.0f + a));
    }
}

/* dinp (N) = gelu'(inp) * dout                               [overwrite; dinp may alias dout]
 * Beyond |x| > 30 the derivative is exactly 0 or 1 in fp32; those are
 * selected so that huge x (where x^2 overflows) cannot produce inf * 0. */
void tri_cpu_gelu_bwd(float *dinp, const float *inp, const float *dout, size_t N)
{
#pragma omp parallel for schedule(static) if (N >= TRI_CPU_PAR_MIN)
    for (size_t i = 0; i < N; i++) {
        const float x = inp[i];
        const float x2 = x * x;
        const float u = GELU_K0 * (x + GELU_K1 * x2 * x);
        const float du = GELU_K0 * (1.0f + 3.0f * GELU_K1 * x2);
        const float a = vec_expf(-2.0f * fabsf(u));
        const float r = 1.0f / (1.0f + a);
        const float s = (u >= 0.0f ? 1.0f : a) * r;
        float g = s + 2.0f * x * du * (a * r * r);
        g = x > 30.0f ? 1.0f : g;
        g = x < -30.0f ? 0.0f : g;
        dinp[i] = g * dout[i];
    }
}
