/* 16-bit floating-point storage types: bfloat16 and IEEE binary16 (fp16).
 *
 * The CPU backend stores parameters and activations in these types where a
 * GPU would (train.precision = bf16 | fp16) and computes in fp32 on the
 * widened values, so a CPU run is the numerical reference for the CUDA
 * backend. The conversions are exact where they can be and otherwise round
 * to nearest, ties to even (the CUDA intrinsics __float2bfloat16_rn and
 * __float2half_rn do the same):
 *   - fp32 -> bf16: keep the top 16 bits after adding the rounding bias;
 *     subnormals round like any other value (bf16 has fp32's exponent range);
 *     a NaN stays a NaN (quieted, sign kept), infinities stay infinities;
 *     values that round past the largest finite bf16 become infinities.
 *   - fp32 -> fp16: 5-bit exponent, 10-bit mantissa; magnitudes from 65520
 *     up round to infinity; below 2^-14 the result is subnormal (quantum
 *     2^-24) and below 2^-25 (or at it: a tie to even zero) it is a signed
 *     zero; NaNs stay NaN (quieted, sign kept).
 *   - bf16 / fp16 -> fp32: exact.
 * Tested bit for bit against an independent reference (tests/kernels/test_half.c).
 */
#ifndef TRI_HALF_H
#define TRI_HALF_H

#include <stdint.h>
#include <string.h>

static inline uint32_t tri_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float tri_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t tri_f32_to_bf16(float f) {
    uint32_t u = tri_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); /* NaN: quiet, keep sign */
    /* round to nearest even on the 16 bits dropped; a carry may reach the
     * exponent (correct: the next binade) or infinity (correct: overflow) */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float tri_bf16_to_f32(uint16_t h) { return tri_bits_f32((uint32_t)h << 16); }

static inline uint16_t tri_f32_to_f16(float f) {
    uint32_t u = tri_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu)); /* NaN: quiet */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);                       /* >= 65520 (or inf): infinity */
    if (a >= 0x38800000u) {                                                        /* >= 2^-14: normal */
        uint32_t r = a + 0xfffu + ((a >> 13) & 1u); /* ties to even on the 13 dropped bits */
        return (uint16_t)(sign | (uint16_t)((r >> 13) - ((127u - 15u) << 10)));
    }
    if (a < 0x33000000u) return sign; /* < 2^-25: zero (2^-25 itself is handled below) */
    /* subnormal: value = m * 2^-24 with m = round(a's value * 2^24) */
    uint32_t e = a >> 23;                        /* biased exponent, 102 .. 112 */
    uint32_t mant = (a & 0x7fffffu) | 0x800000u; /* 24-bit significand, value = mant * 2^(e - 150) */
    uint32_t shift = 126u - e;                   /* value * 2^24 = mant >> (126 - e); shift 14 .. 24 */
    uint32_t q = mant >> shift, rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return (uint16_t)(sign | q); /* q may reach 0x400: the smallest normal, correctly */
}

static inline float tri_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f) return tri_bits_f32(sign | 0x7f800000u | (m << 13)); /* inf / NaN */
    if (e != 0) return tri_bits_f32(sign | ((e + 127u - 15u) << 23) | (m << 13));
    /* zero or subnormal: m * 2^-24, exact in fp32 */
    float v = (float)m * 5.9604644775390625e-08f; /* 2^-24 */
    return tri_bits_f32(sign | tri_f32_bits(v));
}

/* An fp32 value rounded to the precision of the 16-bit type (storage emulation). */
static inline float tri_round_bf16(float f) { return tri_bf16_to_f32(tri_f32_to_bf16(f)); }
static inline float tri_round_f16(float f) { return tri_f16_to_f32(tri_f32_to_f16(f)); }

#endif
