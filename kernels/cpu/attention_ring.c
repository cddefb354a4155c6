/* One block of ring attention on the CPU (context parallelism; the op
 * table's attention_block_fwd / attention_block_bwd / attention_kv_copy,
 * kernels/ops.h states the contract): the queries of this rank's qkv against
 * one block of keys and values (this rank's own, or one passed around the
 * context-parallel ring), no mask or the causal mask by index, the block's
 * output merged into the running normalised output and log-sum-exp.
 *
 * Plain loops, one query row at a time (scores against the block's keys,
 * their exponentials, the weighted values), vectorised over the head size:
 * every output element is one fixed sequence of operations, whatever the
 * thread count. The forward runs
 * over the B*NH (batch, query head) pairs, the backward over the B*NKV
 * (batch, key/value head) pairs (a pair owns its dK, dV and the dQ of its
 * group's query heads, so threads never share an output).
 *
 * Layouts (W = NH + 2 NKV, G = NH / NKV): qkv (B, T, W, HS), the q of head h
 * at h*HS; kv (B, Tk, 2 NKV, HS), key head kh at kh*HS, its values at
 * (NKV + kh)*HS; o (B, T, NH, HS); lse (B, NH, T). */
#include <omp.h>

#include "kernels/cpu/cpu_internal.h"

/* query i (0-based in the block's rows) sees keys [0, n) */
static size_t keys_visible(int causal, size_t i, size_t Tk) { return causal ? (i + 1 < Tk ? i + 1 : Tk) : Tk; }

/* sum_e x[e] y[e]: vector lanes (a fixed order for a given build), then the lanes */
static float dotf(const float *x, const float *y, size_t n) {
    float d = 0.0f;
#pragma omp simd reduction(+ : d)
    for (size_t e = 0; e < n; e++) d += x[e] * y[e];
    return d;
}

void tri_cpu_attention_block_fwd(float *o, float *lse, const float *qkv, const float *kv, size_t B, size_t T, size_t Tk,
                                 size_t q0, int causal, int merge, int NH, int NKV, int HS) {
    TRI_CHECK(NH > 0 && NKV > 0 && NH % NKV == 0 && HS > 0 && q0 <= T && (!causal || (q0 == 0 && T == Tk)));
    const size_t hs = (size_t)HS, W = (size_t)(NH + 2 * NKV) * hs, C = (size_t)NH * hs, KW = (size_t)(2 * NKV) * hs;
    const size_t G = (size_t)(NH / NKV), pairs = B * (size_t)NH;
    const float scale = 1.0f / sqrtf((float)HS);
#pragma omp parallel if (pairs > 1)
    {
        float *s = tri_cpu_alloc((Tk + hs) * sizeof(float)); /* scores, then the block's output row */
        if (s == NULL) TRI_FAIL("out of host memory: ring attention needs %zu bytes per thread", (Tk + hs) * 4);
        float *ob = s + Tk;
#pragma omp for schedule(static)
        for (size_t bh = 0; bh < pairs; bh++) {
            const size_t b = bh / (size_t)NH, h = bh % (size_t)NH, kh = h / G;
            const float *k = kv + b * Tk * KW + kh * hs, *v = k + (size_t)NKV * hs;
            for (size_t i = q0; i < T; i++) {
                const float *q = qkv + (b * T + i) * W + h * hs;
                const size_t n = keys_visible(causal, i, Tk);
                if (n == 0) continue;
                float m = -INFINITY;
                for (size_t j = 0; j < n; j++) {
                    s[j] = dotf(q, k + j * KW, hs) * scale;
                    if (s[j] > m) m = s[j];
                }
                float l = 0.0f;
                for (size_t j = 0; j < n; j++) {
                    s[j] = expf(s[j] - m);
                    l += s[j];
                }
                memset(ob, 0, hs * sizeof(float));
                for (size_t j = 0; j < n; j++) {
                    const float *vj = v + j * KW;
#pragma omp simd
                    for (size_t e = 0; e < hs; e++) ob[e] = fmaf(s[j], vj[e], ob[e]);
                }
                const float inv = 1.0f / l, lb = m + logf(l);
                float *orow = o + (b * T + i) * C + h * hs, *L = lse + bh * T + i;
                if (!merge) { /* the first block: overwrite */
                    for (size_t e = 0; e < hs; e++) orow[e] = ob[e] * inv;
                    *L = lb;
                    continue;
                }
                /* merge: lse' = log(e^La + e^Lb); o' = o e^(La - lse') + ob/l e^(Lb - lse') */
                const float la = *L, mx = la > lb ? la : lb;
                const float lnew = mx + logf(expf(la - mx) + expf(lb - mx));
                const float wa = expf(la - lnew), wb = expf(lb - lnew) * inv;
                for (size_t e = 0; e < hs; e++) orow[e] = orow[e] * wa + ob[e] * wb;
                *L = lnew;
            }
        }
        tri_cpu_free(s);
    }
}

void tri_cpu_attention_block_bwd(float *dqkv, float *dkv, const float *dout, const float *qkv, const float *kv,
                                 const float *out, const float *lse, size_t B, size_t T, size_t Tk, size_t q0,
                                 int causal, int NH, int NKV, int HS) {
    TRI_CHECK(NH > 0 && NKV > 0 && NH % NKV == 0 && HS > 0 && q0 <= T && (!causal || (q0 == 0 && T == Tk)));
    const size_t hs = (size_t)HS, W = (size_t)(NH + 2 * NKV) * hs, C = (size_t)NH * hs, KW = (size_t)(2 * NKV) * hs;
    const size_t G = (size_t)(NH / NKV), pairs = B * (size_t)NKV;
    const float scale = 1.0f / sqrtf((float)HS);
#pragma omp parallel for schedule(static) if (pairs > 1)
    for (size_t bk = 0; bk < pairs; bk++) {
        const size_t b = bk / (size_t)NKV, kh = bk % (size_t)NKV;
        const float *k = kv + b * Tk * KW + kh * hs, *v = k + (size_t)NKV * hs;
        float *dk = dkv + b * Tk * KW + kh * hs, *dv = dk + (size_t)NKV * hs;
        for (size_t g = 0; g < G; g++) {
            const size_t h = kh * G + g;
            const float *L = lse + (b * (size_t)NH + h) * T;
            for (size_t i = q0; i < T; i++) {
                const size_t n = keys_visible(causal, i, Tk);
                const float *q = qkv + (b * T + i) * W + h * hs;
                const float *dO = dout + (b * T + i) * C + h * hs, *O = out + (b * T + i) * C + h * hs;
                float *dq = dqkv + (b * T + i) * W + h * hs;
                const float D = dotf(dO, O, hs), li = L[i];
                for (size_t j = 0; j < n; j++) {
                    const float *kj = k + j * KW, *vj = v + j * KW;
                    const float p = expf(dotf(q, kj, hs) * scale - li);
                    const float ds = p * (dotf(dO, vj, hs) - D) * scale;
                    float *dkj = dk + j * KW, *dvj = dv + j * KW;
#pragma omp simd
                    for (size_t e = 0; e < hs; e++) {
                        dq[e] = fmaf(ds, kj[e], dq[e]);
                        dkj[e] = fmaf(ds, q[e], dkj[e]);
                        dvj[e] = fmaf(p, dO[e], dvj[e]);
                    }
                }
            }
        }
    }
}

void tri_cpu_attention_kv_copy(void *dst, const void *src, size_t esz, size_t B, size_t T, int NH, int NKV, int HS,
                               int to_qkv) {
    const size_t hs = (size_t)HS, W = (size_t)(NH + 2 * NKV) * hs, KW = (size_t)(2 * NKV) * hs, C = (size_t)NH * hs;
    char *d = dst;
    const char *s = src;
#pragma omp parallel for schedule(static) if (B * T > 256)
    for (size_t r = 0; r < B * T; r++) {
        if (to_qkv)
            memcpy(d + (r * W + C) * esz, s + r * KW * esz, KW * esz);
        else
            memcpy(d + r * KW * esz, s + (r * W + C) * esz, KW * esz);
    }
}
