/* Causal multi-head self-attention on the CPU (the op table's attention;
 * kernels/ops.h states the contract), flash-style: computed tile by tile with
 * an online softmax, so the (T, T) probabilities are never stored: the
 * forward saves only each row's log-sum-exp, and the backward recomputes the
 * probabilities from it, as the CUDA kernels do.
 *
 * Grouped-query attention (NKV key/value heads, NKV dividing NH) reads the
 * key/value head h / (NH / NKV) of query head h in place.
 *
 * Work: the forward is an OpenMP loop over the B*NH (batch, query head)
 * pairs, the backward over the B*NKV (batch, key/value head) pairs, whose
 * query heads it takes one after the other, in order, adding into the
 * pair's dK and dV; one thread does a whole pair, so every output element is
 * one fixed sequence of operations, bitwise the same for any thread count.
 * Within a pair, queries go in blocks of FA_BR rows and keys in blocks of bc
 * columns (FA_BC, fewer for very large heads); tiles above the diagonal are
 * skipped, and inside a diagonal block so are the columns past the last
 * query of each FA_MR-row group. The
 * softmax scale is folded into the packed keys (exact for HS = 64).
 * (With fewer pairs than threads some threads idle: parallelism is by pair;
 * multi-query attention's backward has only B pairs.)
 * Every head size and every T is taken: wide heads narrow the key blocks
 * (key_block), and the forward's packed keys live on the heap, one block per
 * thread.
 *
 * The small products go through mm() below: a register-tiled kernel on the
 * vector layer (vec.h) that sums each element over k in increasing order by
 * FMA, and a scalar loop for leftover columns with the same order, so the
 * result does not depend on which path computed it.
 *
 * Layouts (C = NH * HS, CW = (NH + 2 NKV) * HS, G = NH / NKV):
 *   qkv  (B, T, NH + 2 NKV, HS): q of head h at h*HS, its k at (NH + h/G)*HS,
 *        its v at (NH + NKV + h/G)*HS;
 *   out  (B, T, NH, HS);  lse (B, NH, T): log sum_j<=i exp(s_ij), s = q.k / sqrt(HS). */
#include <omp.h>

#include "kernels/cpu/cpu_internal.h"

#ifdef TRI_CPU_VEC
#define FA_VN VF_N
#else
#define FA_VN 1
#endif

enum {
    /* rows of a register tile (with 2 vectors of columns: 2 * FA_MR
     * accumulators of the 16 or 32 vector registers), which is also the row
     * group that causal masking skips work by */
    FA_MR = FA_VN >= 16 ? 8 : 6,
    FA_BR = 32,          /* query rows per block */
    FA_BC = 64,          /* key columns per block (at most) */
    FA_KT_FLOATS = 16384 /* a packed (HS, bc) key block, at most (64 KiB), but see key_block */
};
/* a key block's width rounded up to the vector width */
#define FA_BCP ((FA_BC + FA_VN - 1) / FA_VN * FA_VN)

static size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

/* Keys per block for head size hs: FA_BC, halved until a packed (hs, bc)
 * block fits FA_KT_FLOATS, so that it stays in the core's cache. A head
 * wider than FA_KT_FLOATS / FA_VN floats (1024 with AVX-512 code) keeps one
 * vector of keys per block, a larger packed block: every head size works. */
static size_t key_block(size_t hs) {
    size_t bc = FA_BC;
    while (bc > FA_VN && hs * round_up(bc, FA_VN) > FA_KT_FLOATS) bc /= 2;
    return bc;
}

#ifdef TRI_CPU_VEC
/* One register tile: rows [0, R) x columns [0, NV * VF_N) of C, summed over
 * k in [0, K). R <= 8 and NV <= 2 are constants after inlining. */
static inline __attribute__((always_inline)) void mm_tile(float *c, size_t ldc, const float *a, size_t ars, size_t aks,
                                                          const float *b, size_t ldb, size_t K, int acc, const int R,
                                                          const int NV) {
    vf t[8][2]; /* R <= 8 */
    for (int r = 0; r < R; r++)
        for (int v = 0; v < NV; v++) t[r][v] = acc ? vf_load(c + (size_t)r * ldc + (size_t)v * VF_N) : vf_zero();
    for (size_t k = 0; k < K; k++) {
        const float *bk = b + k * ldb;
        vf bv[2];
        for (int v = 0; v < NV; v++) bv[v] = vf_load(bk + (size_t)v * VF_N);
        for (int r = 0; r < R; r++) {
            const vf av = vf_set1(a[(size_t)r * ars + k * aks]);
            for (int v = 0; v < NV; v++) t[r][v] = vf_fmadd(av, bv[v], t[r][v]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int v = 0; v < NV; v++) vf_store(c + (size_t)r * ldc + (size_t)v * VF_N, t[r][v]);
}
#endif

#ifdef TRI_CPU_VEC
/* The tile of R rows (1 <= R <= FA_MR, known only at run time) and NV column
 * vectors at c: a switch to the instance with R fixed, so that a leftover
 * group of rows still keeps its accumulators in registers. */
static inline __attribute__((always_inline)) void mm_rows(float *c, size_t ldc, const float *a, size_t ars, size_t aks,
                                                          const float *b, size_t ldb, size_t K, int acc, size_t R,
                                                          const int NV) {
    switch (R) {
#define MM_CASE(r) \
    case r: mm_tile(c, ldc, a, ars, aks, b, ldb, K, acc, r, NV); break;
        MM_CASE(1)
        MM_CASE(2)
        MM_CASE(3)
        MM_CASE(4)
        MM_CASE(5)
        MM_CASE(6)
        MM_CASE(7)
        MM_CASE(8)
#undef MM_CASE
    default: TRI_FAIL("register tile of %zu rows", R);
    }
}
#endif

/* C (M, N; rows ldc apart) = A B, or += A B when acc, where A (M, K) has
 * element (r, k) at a[r * ars + k * aks] (so A or its transpose may be read
 * in place) and B (K, N) has row k at b + k * ldb. Each element of C is
 * c = fma(a_rk, b_kn, c) for k = 0, 1, ..., K-1 from c (acc) or 0. */
static void mm(float *c, size_t ldc, const float *a, size_t ars, size_t aks, const float *b, size_t ldb, size_t M,
               size_t N, size_t K, int acc) {
    size_t n0 = 0;
#ifdef TRI_CPU_VEC
    for (; n0 + 2 * VF_N <= N; n0 += 2 * VF_N)
        for (size_t r = 0; r < M; r += FA_MR)
            mm_rows(c + r * ldc + n0, ldc, a + r * ars, ars, aks, b + n0, ldb, K, acc, M - r < FA_MR ? M - r : FA_MR,
                    2);
    for (; n0 + VF_N <= N; n0 += VF_N)
        for (size_t r = 0; r < M; r += FA_MR)
            mm_rows(c + r * ldc + n0, ldc, a + r * ars, ars, aks, b + n0, ldb, K, acc, M - r < FA_MR ? M - r : FA_MR,
                    1);
#endif
    for (; n0 < N; n0++)
        for (size_t r = 0; r < M; r++) {
            float s = acc ? c[r * ldc + n0] : 0.0f;
            for (size_t k = 0; k < K; k++) s = fmaf(a[r * ars + k * aks], b[k * ldb + n0], s);
            c[r * ldc + n0] = s;
        }
}

#ifdef __AVX2__
/* dst rows e = 0..7 (8 floats each, ldd apart) = mult * the transpose of the
 * 8x8 block whose rows c = 0..7 are src + c * lds (8 floats each). */
static inline void transpose8x8(float *dst, size_t ldd, const float *src, size_t lds, float mult) {
    const __m256 mv = _mm256_set1_ps(mult);
    __m256 r[8], t[8];
    for (int i = 0; i < 8; i++) r[i] = _mm256_mul_ps(_mm256_loadu_ps(src + (size_t)i * lds), mv);
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        r[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int i = 0; i < 4; i++) {
        _mm256_storeu_ps(dst + (size_t)i * ldd, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
        _mm256_storeu_ps(dst + (size_t)(i + 4) * ldd, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
    }
}
#endif

/* xt (hs, wp) = mult * the transpose of x's rows [0, w) (each hs floats, ld
 * apart), columns [w, wp) zero. Each element is one product x * mult. */
static void pack_transposed(float *xt, const float *x, size_t ld, size_t w, size_t wp, size_t hs, float mult) {
    size_t c0 = 0;
#ifdef __AVX2__
    for (; c0 + 8 <= w; c0 += 8) {
        size_t e0 = 0;
        for (; e0 + 8 <= hs; e0 += 8) transpose8x8(xt + e0 * wp + c0, wp, x + c0 * ld + e0, ld, mult);
        for (size_t e = e0; e < hs; e++)
            for (size_t c = c0; c < c0 + 8; c++) xt[e * wp + c] = x[c * ld + e] * mult;
    }
#endif
    for (size_t e = 0; e < hs; e++) {
        float *dst = xt + e * wp;
        for (size_t c = c0; c < w; c++) dst[c] = x[c * ld + e] * mult;
        for (size_t c = w; c < wp; c++) dst[c] = 0.0f;
    }
}

/* sum_e x[e] y[e] over e < n: lane sums by FMA, the lanes in a fixed order,
 * then the tail */
static float dot(const float *x, const float *y, size_t n) {
    float d = 0.0f;
    size_t e = 0;
#ifdef TRI_CPU_VEC
    if (n >= VF_N) {
        vf acc = vf_zero();
        for (; e + VF_N <= n; e += VF_N) acc = vf_fmadd(vf_load(x + e), vf_load(y + e), acc);
        d = vf_hsum(acc);
    }
#endif
    for (; e < n; e++) d = fmaf(x[e], y[e], d);
    return d;
}

/* How many keys of the block starting at key j0 (w keys) query i sees:
 * those before i + 1 (causal) or all Tk. */
static size_t keys_seen(const tri_cpu_fa *a, size_t i, size_t j0, size_t w) {
    const size_t lim = a->causal ? i + 1 : a->Tk;
    if (lim <= j0) return 0;
    return lim - j0 < w ? lim - j0 : w;
}

/* S (rows, wp) = A Bt for the queries [i0, i0 + rows) (A's rows ars apart)
 * against a packed, transposed key block bt (hs, wp) starting at key j0. Only
 * the columns each FA_MR-row group needs (rounded up to the vector width) are
 * computed; callers overwrite everything past each row's last key. */
static void scores(float *s, size_t wp, const float *a, size_t ars, const float *bt, const tri_cpu_fa *v, size_t i0,
                   size_t rows, size_t j0, size_t w, size_t hs) {
    for (size_t r0 = 0; r0 < rows; r0 += FA_MR) {
        const size_t R = rows - r0 < FA_MR ? rows - r0 : FA_MR;
        const size_t need = keys_seen(v, i0 + r0 + R - 1, j0, w);
        if (need == 0) continue;
        const size_t N = round_up(need, FA_VN) < wp ? round_up(need, FA_VN) : wp;
        mm(s + r0 * wp, wp, a + r0 * ars, ars, 1, bt, wp, R, N, hs, 0);
    }
}

static void fa_check(const tri_cpu_fa *a) {
    TRI_CHECK(a->NH > 0 && a->NKV > 0 && a->NH % a->NKV == 0 && a->HS > 0 && a->q0 <= a->T && a->Tk > 0 &&
              (!a->causal || (a->q0 == 0 && a->Tk == a->T)));
}

/* out (B, T, NH, HS) = softmax(causal(Q K^T / sqrt(HS))) V          [overwrite]
 * lse (B, NH, T) = log of each row's softmax denominator, with the max
 * folded in (lse_i = m_i + log l_i), saved for the backward     [overwrite]
 * (the core, tri_cpu_fa_fwd: any key rows, a slice of query rows, no mask,
 * and a merge that starts the online softmax from the running output: m =
 * lse, l = 1, the row = out) */
void tri_cpu_fa_fwd(const tri_cpu_fa *a, float *out, float *lse, int merge) {
    fa_check(a);
    const int NH = a->NH, NKV = a->NKV;
    const size_t hs = (size_t)a->HS, C = (size_t)NH * hs, C3 = (size_t)(NH + 2 * NKV) * hs;
    const size_t G = (size_t)(NH / NKV), KV = (size_t)NKV * hs, ks = a->ks, T = a->T, Tk = a->Tk;
    const size_t pairs = a->B * (size_t)NH, bc = key_block(hs), kt_floats = hs * round_up(bc, FA_VN);
    const float scale = 1.0f / sqrtf((float)a->HS);
#pragma omp parallel if (pairs > 1)
    {
        /* this thread's packed key block (hs, wp): on the heap, whatever hs */
        float *kt = tri_cpu_alloc(kt_floats * sizeof(float));
        if (kt == NULL) TRI_FAIL("out of host memory: attention needs %zu bytes per thread", kt_floats * 4);
        float p[FA_BR * FA_BCP];  /* (rows, wp) scores, then P */
        float m[FA_BR], l[FA_BR]; /* running max and sum per row */
#pragma omp for schedule(static)
        for (size_t bh = 0; bh < pairs; bh++) {
            const size_t b = bh / (size_t)NH, h = bh % (size_t)NH;
            const float *q = a->qkv + b * T * C3 + h * hs;          /* (T, hs), rows C3 apart */
            const float *k = a->kv + b * Tk * ks + h / G * hs, *v = k + KV; /* (Tk, hs), rows ks apart */
            float *o = out + b * T * C + h * hs; /* (T, hs), rows C apart */
            float *ls = lse + bh * T;            /* (T) */
            for (size_t i0 = a->q0; i0 < T; i0 += FA_BR) {
                const size_t rows = T - i0 < FA_BR ? T - i0 : FA_BR;
                for (size_t r = 0; r < rows; r++) {
                    if (merge) { /* the running softmax of the keys before: sum 1 at max lse */
                        m[r] = ls[i0 + r];
                        l[r] = 1.0f;
                        continue;
                    }
                    m[r] = -INFINITY;
                    l[r] = 0.0f;
                    memset(o + (i0 + r) * C, 0, hs * sizeof(float));
                }
                const size_t jend = a->causal ? i0 + rows : Tk;
                for (size_t j0 = 0; j0 < jend; j0 += bc) {
                    const size_t w = jend - j0 < bc ? jend - j0 : bc;
                    const size_t wp = round_up(w, FA_VN);
                    pack_transposed(kt, k + j0 * ks, ks, w, wp, hs, scale);
                    scores(p, wp, q + i0 * C3, C3, kt, a, i0, rows, j0, w, hs);
                    for (size_t r = 0; r < rows; r++) {
                        float *pr = p + r * wp;
                        const size_t n = keys_seen(a, i0 + r, j0, w);
                        if (n == 0) {
                            memset(pr, 0, wp * sizeof(float));
                            continue;
                        }
                        /* keys past the diagonal (and the padding): -inf, so
                         * that the whole padded row goes through the vector
                         * bodies */
                        for (size_t c = n; c < wp; c++) pr[c] = -INFINITY;
                        const float bm = row_max(pr, wp);
                        const float mnew = bm > m[r] ? bm : m[r];
                        const float alpha = vec_expf(m[r] - mnew); /* 0 on the first block */
                        l[r] = l[r] * alpha + row_exp_sum_inplace(pr, wp, mnew);
                        m[r] = mnew;
                        if (alpha != 1.0f) {
                            float *orow = o + (i0 + r) * C;
                            for (size_t e = 0; e < hs; e++) orow[e] *= alpha;
                        }
                    }
                    /* O[rows] += P V[j0, j0 + w), each row group over the keys it sees */
                    for (size_t r0 = 0; r0 < rows; r0 += FA_MR) {
                        const size_t R = rows - r0 < FA_MR ? rows - r0 : FA_MR;
                        const size_t K = keys_seen(a, i0 + r0 + R - 1, j0, w);
                        if (K > 0) mm(o + (i0 + r0) * C, C, p + r0 * wp, wp, 1, v + j0 * ks, ks, R, hs, K, 1);
                    }
                }
                for (size_t r = 0; r < rows; r++) {
                    const float inv = 1.0f / l[r];
                    float *orow = o + (i0 + r) * C;
                    for (size_t e = 0; e < hs; e++) orow[e] *= inv;
                    ls[i0 + r] = m[r] + logf(l[r]);
                }
            }
        }
        tri_cpu_free(kt);
    }
}

void tri_cpu_attention_fwd(float *out, float *lse, const float *qkv, size_t B, size_t T, int NH, int NKV, int HS) {
    const size_t C = (size_t)NH * (size_t)HS;
    const tri_cpu_fa a = {.qkv = qkv, .kv = qkv + C, .ks = C + (size_t)(2 * NKV) * (size_t)HS, .B = B, .T = T,
                          .Tk = T, .q0 = 0, .causal = 1, .NH = NH, .NKV = NKV, .HS = HS};
    if (T > 0) tri_cpu_fa_fwd(&a, out, lse, 0);
}

/* Per thread: packed keys and values (hs, wp) each, P and dS tiles
 * (FA_BR, wp) each, and D (G, T) of the G = NH / NKV query heads of a group.
 * The backward uses at most omp_get_max_threads() threads, so the thread
 * count must not grow between this call and attention_bwd. */
static size_t scratch_per_thread(size_t T, size_t hs, size_t G) {
    const size_t wp = round_up(key_block(hs), FA_VN);
    return 2 * hs * wp + 2 * (size_t)FA_BR * wp + G * T;
}

size_t tri_cpu_attention_scratch_floats(size_t B, size_t T, int NH, int NKV, int HS) {
    TRI_CHECK(HS > 0 && NH > 0 && NKV > 0 && NH % NKV == 0);
    return (size_t)omp_get_max_threads() * scratch_per_thread(T, (size_t)HS, (size_t)(NH / NKV));
}

/* dqkv (B, T, NH + 2 NKV, HS)                                       [overwrite]
 * out and lse are the forward's. Per (b, h), with P = exp(S - lse) (S scaled):
 *   D_i = sum_e dO_ie O_ie;  dP = dO V^T;  dS = P * (dP - D) * scale;
 *   dQ = dS K;  dK = dS^T Q;  dV = P^T dO   (dK, dV of the head's group).
 * Per (b, key/value head): key blocks go in the outer loop (packed once for
 * the group), the group's query heads in order inside it, and query blocks
 * (those with a query >= the block's first key; every one from q0 without
 * the mask) inside those, so dK and dV of a block are finished before the
 * next, summed over the group's heads in order, and each dQ sums the key
 * blocks in increasing order. */
void tri_cpu_fa_bwd(const tri_cpu_fa *a, float *dqkv, float *dkv, int accumulate, float *scratch, const float *dout,
                    const float *out, const float *lse) {
    fa_check(a);
    const int NH = a->NH, NKV = a->NKV;
    const size_t hs = (size_t)a->HS, C = (size_t)NH * hs, C3 = (size_t)(NH + 2 * NKV) * hs;
    const size_t G = (size_t)(NH / NKV), KV = (size_t)NKV * hs, ks = a->ks, T = a->T, Tk = a->Tk, q0 = a->q0;
    const size_t pairs = a->B * (size_t)NKV, bc = key_block(hs), per = scratch_per_thread(T, hs, G);
    const float scale = 1.0f / sqrtf((float)a->HS);
    const int nslots = omp_get_max_threads();
#pragma omp parallel num_threads(nslots) if (pairs > 1)
    {
        const size_t wmax = round_up(bc, FA_VN);
        float *kt = scratch + (size_t)omp_get_thread_num() * per; /* (hs, wp) */
        float *vt = kt + hs * wmax;                               /* (hs, wp) */
        float *p = vt + hs * wmax;                                /* (FA_BR, wp) */
        float *ds = p + (size_t)FA_BR * wmax;                     /* (FA_BR, wp) */
        float *D = ds + (size_t)FA_BR * wmax;                     /* (G, T) */
#pragma omp for schedule(static)
        for (size_t bk = 0; bk < pairs; bk++) {
            const size_t b = bk / (size_t)NKV, kh = bk % (size_t)NKV;
            const size_t base = b * T * C3, koff = b * Tk * ks + kh * hs;
            const float *k = a->kv + koff, *v = k + KV; /* (Tk, hs), rows ks apart */
            float *dk = dkv + koff, *dv = dk + KV;
            for (size_t g = 0; g < G; g++) {
                const size_t h = kh * G + g;
                const float *o = out + b * T * C + h * hs, *dO = dout + b * T * C + h * hs;
                float *dq = dqkv + base + h * hs;
                for (size_t i = q0; i < T; i++) {
                    D[g * T + i] = dot(dO + i * C, o + i * C, hs);
                    if (!accumulate) memset(dq + i * C3, 0, hs * sizeof(float));
                }
            }
            for (size_t i = 0; i < Tk && !accumulate; i++) {
                memset(dk + i * ks, 0, hs * sizeof(float));
                memset(dv + i * ks, 0, hs * sizeof(float));
            }
            for (size_t j0 = 0; j0 < Tk; j0 += bc) {
                const size_t w = Tk - j0 < bc ? Tk - j0 : bc, wp = round_up(w, FA_VN);
                pack_transposed(kt, k + j0 * ks, ks, w, wp, hs, scale);
                pack_transposed(vt, v + j0 * ks, ks, w, wp, hs, 1.0f);
                for (size_t g = 0; g < G; g++) {
                    const size_t h = kh * G + g;
                    const float *q = a->qkv + base + h * hs;
                    float *dq = dqkv + base + h * hs;
                    const float *dO = dout + b * T * C + h * hs;
                    const float *L = lse + (b * (size_t)NH + h) * T, *Dg = D + g * T;
                    for (size_t i0 = a->causal ? j0 / FA_BR * FA_BR : q0; i0 < T; i0 += FA_BR) {
                        const size_t rows = T - i0 < FA_BR ? T - i0 : FA_BR;
                        scores(p, wp, q + i0 * C3, C3, kt, a, i0, rows, j0, w, hs);
                        scores(ds, wp, dO + i0 * C, C, vt, a, i0, rows, j0, w, hs);
                        for (size_t r = 0; r < rows; r++) {
                            float *pr = p + r * wp, *dr = ds + r * wp;
                            const size_t n = keys_seen(a, i0 + r, j0, w);
                            const float li = L[i0 + r], di = Dg[i0 + r];
                            for (size_t c = n; c < wp; c++) pr[c] = -INFINITY; /* exp gives 0 */
                            row_exp_scale(pr, pr, wp, li, 1.0f);
                            for (size_t c = 0; c < n; c++) dr[c] = pr[c] * (dr[c] - di) * scale;
                            memset(dr + n, 0, (wp - n) * sizeof(float));
                        }
                        /* key c of the block is seen by queries from j0 + c on
                         * (causal): each group of FA_MR keys skips the rows
                         * before its first query */
                        for (size_t c0 = 0; c0 < w; c0 += FA_MR) {
                            const size_t R = w - c0 < FA_MR ? w - c0 : FA_MR;
                            const size_t first = a->causal && j0 + c0 > i0 ? j0 + c0 - i0 : 0;
                            if (first >= rows) continue;
                            const size_t K = rows - first;
                            /* dV[c0, c0 + R) += P[first:, c0:]^T dO[i0 + first:] */
                            mm(dv + (j0 + c0) * ks, ks, p + first * wp + c0, 1, wp, dO + (i0 + first) * C, C, R, hs, K,
                               1);
                            /* dK[c0, c0 + R) += dS[first:, c0:]^T Q[i0 + first:] */
                            mm(dk + (j0 + c0) * ks, ks, ds + first * wp + c0, 1, wp, q + (i0 + first) * C3, C3, R, hs,
                               K, 1);
                        }
                        /* dQ[i0 + r0, + R) += dS[r0:, :K] K[j0, j0 + K) */
                        for (size_t r0 = 0; r0 < rows; r0 += FA_MR) {
                            const size_t R = rows - r0 < FA_MR ? rows - r0 : FA_MR;
                            const size_t K = keys_seen(a, i0 + r0 + R - 1, j0, w);
                            if (K > 0) mm(dq + (i0 + r0) * C3, C3, ds + r0 * wp, wp, 1, k + j0 * ks, ks, R, hs, K, 1);
                        }
                    }
                }
            }
        }
    }
}

void tri_cpu_attention_bwd(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *out,
                           const float *lse, size_t B, size_t T, int NH, int NKV, int HS) {
    const size_t C = (size_t)NH * (size_t)HS;
    const tri_cpu_fa a = {.qkv = qkv, .kv = qkv + C, .ks = C + (size_t)(2 * NKV) * (size_t)HS, .B = B, .T = T,
                          .Tk = T, .q0 = 0, .causal = 1, .NH = NH, .NKV = NKV, .HS = HS};
    if (T > 0) tri_cpu_fa_bwd(&a, dqkv, dqkv + C, 0, scratch, dout, out, lse);
}
