/* bf16 and fp16 conversions (kernels/half.h) bit for bit against an
 * independent reference: the nearest representable value found with double
 * arithmetic (scale by the binade's quantum, nearbyint in the default
 * round-to-nearest-even mode, scale back; both steps exact in double), with
 * the overflow threshold and NaN handling of IEEE 754. Edge values: ties
 * (exactly halfway between two neighbours, both parities), the subnormal
 * ranges of both types, the largest finite values and the first values that
 * overflow, signed zeros, infinities and NaNs; then 4 million random fp32
 * bit patterns and every fp16 value round-tripped. */
#include <criterion/criterion.h>
#include <fenv.h>
#include <float.h>
#include <math.h>
#include <stdint.h>

#include "kernels/half.h"

/* The nearest value of a type with `mbits` fraction bits, minimum normal
 * exponent emin and largest finite value maxv to x (finite), ties to even. */
static double ref_round(double x, int mbits, int emin, double maxv) {
    if (x == 0) return x;
    double a = fabs(x);
    int e;
    frexp(a, &e); /* a = f * 2^e, f in [0.5, 1): the binade's exponent is e - 1 */
    int be = e - 1 < emin ? emin : e - 1;
    double quantum = ldexp(1.0, be - mbits);
    double r = nearbyint(a / quantum) * quantum;
    /* overflow: IEEE rounds to infinity from maxv + half an ulp of maxv on */
    double half_ulp = ldexp(1.0, (int)floor(log2(maxv)) - mbits - 1);
    if (a >= maxv + half_ulp) r = INFINITY;
    return x < 0 ? -r : r;
}

static uint16_t ref_bf16(float f) {
    if (isnan(f)) return 0; /* checked separately */
    if (isinf(f)) return f > 0 ? 0x7f80 : 0xff80;
    double r = ref_round((double)f, 7, -126, 0x1.fep127);
    if (isinf(r)) return r > 0 ? 0x7f80 : 0xff80;
    uint32_t u = tri_f32_bits((float)r); /* exact: r has 8 significant bits */
    if (r == 0) u = signbit(f) ? 0x80000000u : 0;
    cr_assert_eq(u & 0xffffu, 0u, "reference bf16 of %a has low bits", (double)f);
    return (uint16_t)(u >> 16);
}

static uint16_t ref_f16(float f) {
    if (isnan(f)) return 0;
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    if (isinf(f)) return sign | 0x7c00;
    double r = fabs(ref_round((double)f, 10, -14, 65504.0));
    if (isinf(r)) return sign | 0x7c00;
    if (r < ldexp(1.0, -14)) return sign | (uint16_t)(r / ldexp(1.0, -24)); /* subnormal or zero */
    int e;
    double m = frexp(r, &e); /* r = m 2^e, m in [0.5, 1) */
    uint16_t mant = (uint16_t)((m * 2.0 - 1.0) * 1024.0);
    return sign | (uint16_t)((e - 1 + 15) << 10) | mant;
}

static void check_bf16(float f) {
    uint16_t got = tri_f32_to_bf16(f);
    if (isnan(f)) {
        cr_assert(isnan(tri_bf16_to_f32(got)), "bf16 of NaN %08x is %04x", tri_f32_bits(f), got);
        cr_assert_eq(got >> 15, tri_f32_bits(f) >> 31, "NaN sign");
        return;
    }
    uint16_t want = ref_bf16(f);
    cr_assert_eq(got, want, "bf16(%a = %08x): %04x, reference %04x", (double)f, tri_f32_bits(f), got, want);
}

static void check_f16(float f) {
    uint16_t got = tri_f32_to_f16(f);
    if (isnan(f)) {
        cr_assert(isnan(tri_f16_to_f32(got)), "f16 of NaN %08x is %04x", tri_f32_bits(f), got);
        cr_assert_eq(got >> 15, tri_f32_bits(f) >> 31, "NaN sign");
        return;
    }
    uint16_t want = ref_f16(f);
    cr_assert_eq(got, want, "f16(%a = %08x): %04x, reference %04x", (double)f, tri_f32_bits(f), got, want);
}

static void check_both(float f) {
    check_bf16(f);
    check_f16(f);
    check_bf16(-f);
    check_f16(-f);
}

Test(half, reference_rounds_to_nearest_even) {
    cr_assert_eq(fegetround(), FE_TONEAREST);
    /* 1 + 2^-8 is halfway between bf16 1 and 1 + 2^-7: even is 1 */
    cr_expect_eq(ref_bf16(1.0f + 0x1p-8f), 0x3f80);
    cr_expect_eq(ref_bf16(1.0f + 3 * 0x1p-8f), 0x3f82); /* halfway 1+2^-7 .. 1+2^-6: even is up */
    cr_expect_eq(ref_f16(65504.0f), 0x7bff);
    cr_expect_eq(ref_f16(65520.0f), 0x7c00);
    cr_expect_eq(ref_f16(0x1p-24f), 0x0001);
    cr_expect_eq(ref_f16(0x1p-25f), 0x0000);
}

Test(half, edge_values_match_the_reference) {
    float edges[] = {0.0f,        1.0f,        0.5f,         2.0f,         3.0f,         0.1f,
                     1e-3f,       65504.0f,    65505.0f,     65519.0f,     65519.99f,    65520.0f,
                     65536.0f,    1e5f,        0x1p-14f,     0x1p-15f,     0x1p-24f,     0x1p-25f,
                     0x1.8p-25f,  0x1p-26f,    0x1.ffcp-15f, 0x1.ffep-15f, 0x1.fffp-15f, 0x1p-126f,
                     0x1p-127f,   0x1p-133f,   0x1p-134f,    0x1p-149f,    0x1.8p-134f,  FLT_MAX,
                     0x1.fep127f, 0x1.fdp127f, 0x1.fe8p127f, 0x1.ffp127f,  INFINITY,     NAN};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) check_both(edges[i]);
    /* every tie between neighbouring bf16 values in a few binades, and the
     * values one fp32 ulp either side of it */
    for (int e = -140; e <= 127; e += 7)
        for (uint32_t m = 0; m < 128; m++) {
            float lo = ldexpf(1.0f + (float)m / 128.0f, e);
            if (!isfinite(lo) || lo == 0) continue;
            uint32_t tie = tri_f32_bits(lo) + 0x8000u;
            check_both(tri_bits_f32(tie));
            check_both(tri_bits_f32(tie - 1));
            check_both(tri_bits_f32(tie + 1));
        }
    /* fp16 ties in the normal and subnormal ranges */
    for (uint16_t h = 0; h < 0x7bff; h += 7) {
        double a = tri_f16_to_f32(h), b = tri_f16_to_f32((uint16_t)(h + 1));
        float mid = (float)((a + b) / 2); /* exact: fp16 neighbours' midpoint fits fp32 */
        check_both(mid);
        check_both(nextafterf(mid, 0));
        check_both(nextafterf(mid, INFINITY));
    }
    /* NaNs with payloads, both signs */
    check_both(tri_bits_f32(0x7f800001u));
    check_both(tri_bits_f32(0x7fc00000u));
    check_both(tri_bits_f32(0x7fffffffu));
}

Test(half, random_bit_patterns_match_the_reference) {
    uint64_t s = 0x9e3779b97f4a7c15ULL;
    for (int i = 0; i < 4000000; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        float f = tri_bits_f32((uint32_t)(s >> 32));
        check_bf16(f);
        check_f16(f);
    }
}

Test(half, every_16_bit_value_round_trips_exactly) {
    for (uint32_t h = 0; h < 0x10000u; h++) {
        float f = tri_f16_to_f32((uint16_t)h);
        float b = tri_bf16_to_f32((uint16_t)h);
        if (isnan(f)) {
            cr_assert(isnan(tri_f16_to_f32(tri_f32_to_f16(f))));
        } else {
            cr_assert_eq(tri_f32_to_f16(f), h, "fp16 %04x -> %a -> %04x", h, (double)f, tri_f32_to_f16(f));
            cr_assert_eq(tri_round_f16(f), f);
        }
        if (isnan(b))
            cr_assert(isnan(tri_bf16_to_f32(tri_f32_to_bf16(b))));
        else
            cr_assert_eq(tri_f32_to_bf16(b), h, "bf16 %04x -> %a -> %04x", h, (double)b, tri_f32_to_bf16(b));
    }
    /* the fp16 decoder against ldexp */
    for (uint32_t m = 0; m < 1024; m++)
        cr_assert_eq(tri_f16_to_f32((uint16_t)m), (float)ldexp((double)m, -24), "subnormal %u", m);
}
