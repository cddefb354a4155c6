/* A thin vector layer for the CPU backend's hand-vectorised loops: one float
 * vector type `vf` of VF_N lanes with the handful of operations those loops
 * use, on AVX-512 (16 lanes) or AVX2+FMA (8 lanes); TRI_CPU_VEC is defined
 * when either is available, and the loops keep a scalar tail (and a scalar
 * build) with the same formulas.
 *
 * Why by hand: gcc vectorises vec_expf's clamps and selects only with AVX-512
 * masks (without -ffast-math, -ftrapping-math forbids if-converting them into
 * AVX2 blends), so on an AVX2-only machine the GELU, softmax and cross-entropy
 * loops ran scalar, 4-15x slower than on an AVX-512 one. With this layer AVX2
 * is a first-class fast path, and AVX-512 machines get 16 lanes.
 *
 * Every operation rounds exactly as its scalar counterpart (one rounding per
 * add/mul/div, FMA where the scalar code calls fmaf, and the build uses
 * -ffp-contract=off through -std=c11), so a vector lane and the scalar tail
 * give the same bits for the same input. Comparisons are ordered and quiet:
 * false for NaN, like C's <, >, >=. */
#ifndef TRI_CPU_VEC_H
#define TRI_CPU_VEC_H

#include <math.h>
#include <stdint.h>

#if defined(__AVX512F__)
#include <immintrin.h>
#define TRI_CPU_VEC 1
#define VF_N        16
typedef __m512 vf;
typedef __m512i vi;
typedef __mmask16 vmask;
static inline vf vf_load(const float *p) { return _mm512_loadu_ps(p); }
static inline void vf_store(float *p, vf a) { _mm512_storeu_ps(p, a); }
static inline vf vf_set1(float a) { return _mm512_set1_ps(a); }
static inline vf vf_add(vf a, vf b) { return _mm512_add_ps(a, b); }
static inline vf vf_sub(vf a, vf b) { return _mm512_sub_ps(a, b); }
static inline vf vf_mul(vf a, vf b) { return _mm512_mul_ps(a, b); }
static inline vf vf_div(vf a, vf b) { return _mm512_div_ps(a, b); }
static inline vf vf_fmadd(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }   /* a b + c */
static inline vf vf_fnmadd(vf a, vf b, vf c) { return _mm512_fnmadd_ps(a, b, c); } /* c - a b */
/* a > b ? a : b and a < b ? a : b; b when either is NaN */
static inline vf vf_max(vf a, vf b) { return _mm512_max_ps(a, b); }
static inline vf vf_min(vf a, vf b) { return _mm512_min_ps(a, b); }
static inline vf vf_abs(vf a) { return _mm512_abs_ps(a); }
static inline vmask vf_lt(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
static inline vmask vf_gt(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
static inline vmask vf_ge(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ); }
/* m ? a : b, lane by lane */
static inline vf vf_select(vmask m, vf a, vf b) { return _mm512_mask_blend_ps(m, b, a); }
static inline vi vf_bits(vf a) { return _mm512_castps_si512(a); }
static inline vf vi_as_vf(vi a) { return _mm512_castsi512_ps(a); }
static inline vi vi_set1(int32_t a) { return _mm512_set1_epi32(a); }
static inline vi vi_add(vi a, vi b) { return _mm512_add_epi32(a, b); }
static inline vi vi_sub(vi a, vi b) { return _mm512_sub_epi32(a, b); }
static inline vi vi_sra1(vi a) { return _mm512_srai_epi32(a, 1); }
static inline vi vi_sll23(vi a) { return _mm512_slli_epi32(a, 23); }
/* The sum of the lanes in a fixed order (halves added pairwise, recursively). */
static inline float vf_hsum(vf v) {
    const __m256 h =
        _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    const __m128 a = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    const __m128 b = _mm_add_ps(a, _mm_movehl_ps(a, a));
    return _mm_cvtss_f32(_mm_add_ss(b, _mm_movehdup_ps(b)));
}
static inline float vf_hmax(vf v) {
    const __m256 h =
        _mm256_max_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    const __m128 a = _mm_max_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    const __m128 b = _mm_max_ps(a, _mm_movehl_ps(a, a));
    return _mm_cvtss_f32(_mm_max_ss(b, _mm_movehdup_ps(b)));
}

#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define TRI_CPU_VEC 1
#define VF_N        8
typedef __m256 vf;
typedef __m256i vi;
typedef __m256 vmask;
static inline vf vf_load(const float *p) { return _mm256_loadu_ps(p); }
static inline void vf_store(float *p, vf a) { _mm256_storeu_ps(p, a); }
static inline vf vf_set1(float a) { return _mm256_set1_ps(a); }
static inline vf vf_add(vf a, vf b) { return _mm256_add_ps(a, b); }
static inline vf vf_sub(vf a, vf b) { return _mm256_sub_ps(a, b); }
static inline vf vf_mul(vf a, vf b) { return _mm256_mul_ps(a, b); }
static inline vf vf_div(vf a, vf b) { return _mm256_div_ps(a, b); }
static inline vf vf_fmadd(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
static inline vf vf_fnmadd(vf a, vf b, vf c) { return _mm256_fnmadd_ps(a, b, c); }
static inline vf vf_max(vf a, vf b) { return _mm256_max_ps(a, b); }
static inline vf vf_min(vf a, vf b) { return _mm256_min_ps(a, b); }
static inline vf vf_abs(vf a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
static inline vmask vf_lt(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
static inline vmask vf_gt(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
static inline vmask vf_ge(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_GE_OQ); }
static inline vf vf_select(vmask m, vf a, vf b) { return _mm256_blendv_ps(b, a, m); }
static inline vi vf_bits(vf a) { return _mm256_castps_si256(a); }
static inline vf vi_as_vf(vi a) { return _mm256_castsi256_ps(a); }
static inline vi vi_set1(int32_t a) { return _mm256_set1_epi32(a); }
static inline vi vi_add(vi a, vi b) { return _mm256_add_epi32(a, b); }
static inline vi vi_sub(vi a, vi b) { return _mm256_sub_epi32(a, b); }
static inline vi vi_sra1(vi a) { return _mm256_srai_epi32(a, 1); }
static inline vi vi_sll23(vi a) { return _mm256_slli_epi32(a, 23); }
static inline float vf_hsum(vf v) {
    const __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 b = _mm_add_ps(a, _mm_movehl_ps(a, a));
    return _mm_cvtss_f32(_mm_add_ss(b, _mm_movehdup_ps(b)));
}
static inline float vf_hmax(vf v) {
    const __m128 a = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 b = _mm_max_ps(a, _mm_movehl_ps(a, a));
    return _mm_cvtss_f32(_mm_max_ss(b, _mm_movehdup_ps(b)));
}
#endif

#ifdef TRI_CPU_VEC
static inline vf vf_zero(void) { return vf_set1(0.0f); }

/* vec_expf (cpu_internal.h) on VF_N lanes: the same operations in the same
 * order, so every lane has vec_expf's bits. */
static inline vf vec_expf_v(vf x) {
    const vf lo = vf_set1(-103.97f), hi = vf_set1(88.7228f), magic = vf_set1(12582912.0f);
    vf xc = vf_max(lo, x); /* x < lo ? lo : x, NaN stays */
    xc = vf_min(hi, xc);   /* xc > hi ? hi : xc */
    const vf big = vf_add(vf_mul(xc, vf_set1(1.44269504088896341f)), magic);
    const vf kf = vf_sub(big, magic);
    const vi k = vi_sub(vf_bits(big), vi_set1(0x4B400000));
    const vi k1 = vi_sra1(k), k2 = vi_sub(k, k1);
    const vf s1 = vi_as_vf(vi_sll23(vi_add(k1, vi_set1(127))));
    const vf s2 = vi_as_vf(vi_sll23(vi_add(k2, vi_set1(127))));
    vf r = vf_fnmadd(kf, vf_set1(0.693145751953125f), xc);
    r = vf_fnmadd(kf, vf_set1(1.428606820309417232e-6f), r);
    vf p = vf_set1(1.0f / 5040.0f);
    p = vf_fmadd(p, r, vf_set1(1.0f / 720.0f));
    p = vf_fmadd(p, r, vf_set1(1.0f / 120.0f));
    p = vf_fmadd(p, r, vf_set1(1.0f / 24.0f));
    p = vf_fmadd(p, r, vf_set1(1.0f / 6.0f));
    p = vf_fmadd(p, r, vf_set1(0.5f));
    p = vf_fmadd(p, r, vf_set1(1.0f));
    p = vf_fmadd(p, r, vf_set1(1.0f));
    vf y = vf_mul(vf_mul(p, s1), s2);
    y = vf_select(vf_lt(x, lo), vf_zero(), y);
    y = vf_select(vf_gt(x, hi), vf_set1(INFINITY), y);
    return y;
}
#endif

#endif
