/* The emulator's tensor-core operations (docs/cuda_emulation.md): the
 * fragment tables alone against the PTX ISA's text, then the wrappers of
 * kernels/cuda/common.cuh through the kernels of tests/cuemu/tcself.cu:
 * mma against a plain matmul (bit for bit in the emulator's accumulation
 * order, within fp32 rounding of a double reference), ldmatrix against
 * hand-computed lane contents, cp.async double buffering, and the planted
 * faults each caught: a wrong lane mapping, a missing or short wait_group, a
 * missing barrier after the waits, a divergent mma or ldmatrix, copies not
 * waited for at the kernel's end. Under several scheduling seeds. */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "kernels/half.h"
#include "tests/cuemu/cuemu_api.h"
#include "tests/cuemu/cuemu_tc.h"
#include "tests/cuemu/dev_mem.h"
#include "tests/cuemu/run_child.h"
#include "tests/cuemu/tcself.h"

static uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A random value in [-2, 2) times 2^e, e in [-4, 4): products and sums over
 * a range of magnitudes, so that the order of the additions shows. */
static float rand_val(uint64_t *s) {
    const double u = (double)(rng_next(s) >> 11) / 9007199254740992.0;
    return (float)ldexp(4.0 * u - 2.0, (int)(rng_next(s) % 8) - 4);
}

/* ---- the fragment tables alone ---- */

static int rc_is(tri_cuemu_rc p, int row, int col) { return p.row == row && p.col == col; }

/* Every (row, col) of an R x C matrix is held by exactly one (lane, element). */
static void expect_covered(const char *what, tri_cuemu_rc (*f)(int, int), int per_lane, int R, int C) {
    int seen[16 * 16] = {0};
    for (int lane = 0; lane < 32; lane++)
        for (int i = 0; i < per_lane; i++) {
            const tri_cuemu_rc p = f(lane, i);
            cr_assert(p.row >= 0 && p.row < R && p.col >= 0 && p.col < C, "%s: lane %d element %d at (%d, %d)", what,
                      lane, i, p.row, p.col);
            seen[p.row * C + p.col]++;
        }
    for (int k = 0; k < R * C; k++) cr_assert_eq(seen[k], 1, "%s: (%d, %d) held %d times", what, k / C, k % C, seen[k]);
}

static tri_cuemu_rc ldm_plain(int lane, int i) { return tri_cuemu_ldmatrix_elem(lane, i, 0); }
static tri_cuemu_rc ldm_trans(int lane, int i) { return tri_cuemu_ldmatrix_elem(lane, i, 1); }

/* The tables checked on their own, against positions read off the PTX ISA's
 * figures ("Matrix Fragments for mma.m16n8k16 with floating point type";
 * "ldmatrix") for lanes 0, 5 (groupID 1, threadID_in_group 1) and 31, and
 * for every lane: each element held once, and A and B made of the 8x8
 * pieces ldmatrix hands out (which is why ldmatrix.x4 feeds A and
 * ldmatrix.x2.trans a k-major B). */
Test(cuemu_tc, fragment_tables_follow_the_ptx_isa) {
    expect_covered("A", tri_cuemu_frag_a, 8, 16, 16);
    expect_covered("B", tri_cuemu_frag_b, 4, 16, 8);
    expect_covered("C", tri_cuemu_frag_c, 4, 16, 8);
    expect_covered("ldmatrix", ldm_plain, 2, 8, 8);
    expect_covered("ldmatrix.trans", ldm_trans, 2, 8, 8);

    static const int a_want[3][8][2] = {{{0, 0}, {0, 1}, {8, 0}, {8, 1}, {0, 8}, {0, 9}, {8, 8}, {8, 9}},
                                        {{1, 2}, {1, 3}, {9, 2}, {9, 3}, {1, 10}, {1, 11}, {9, 10}, {9, 11}},
                                        {{7, 6}, {7, 7}, {15, 6}, {15, 7}, {7, 14}, {7, 15}, {15, 14}, {15, 15}}};
    static const int b_want[3][4][2] = {
        {{0, 0}, {1, 0}, {8, 0}, {9, 0}}, {{2, 1}, {3, 1}, {10, 1}, {11, 1}}, {{6, 7}, {7, 7}, {14, 7}, {15, 7}}};
    static const int c_want[3][4][2] = {
        {{0, 0}, {0, 1}, {8, 0}, {8, 1}}, {{1, 2}, {1, 3}, {9, 2}, {9, 3}}, {{7, 6}, {7, 7}, {15, 6}, {15, 7}}};
    static const int l_want[3][2][2] = {{{0, 0}, {0, 1}}, {{1, 2}, {1, 3}}, {{7, 6}, {7, 7}}};
    const int lanes[3] = {0, 5, 31};
    for (int k = 0; k < 3; k++) {
        const int l = lanes[k];
        for (int i = 0; i < 8; i++)
            cr_assert(rc_is(tri_cuemu_frag_a(l, i), a_want[k][i][0], a_want[k][i][1]), "A lane %d a%d", l, i);
        for (int i = 0; i < 4; i++) {
            cr_assert(rc_is(tri_cuemu_frag_b(l, i), b_want[k][i][0], b_want[k][i][1]), "B lane %d b%d", l, i);
            cr_assert(rc_is(tri_cuemu_frag_c(l, i), c_want[k][i][0], c_want[k][i][1]), "C lane %d c%d", l, i);
        }
        for (int i = 0; i < 2; i++) {
            cr_assert(rc_is(tri_cuemu_ldmatrix_elem(l, i, 0), l_want[k][i][0], l_want[k][i][1]), "ldm lane %d", l);
            cr_assert(rc_is(tri_cuemu_ldmatrix_elem(l, i, 1), l_want[k][i][1], l_want[k][i][0]), "ldm.t lane %d", l);
        }
    }
    for (int j = 0; j < 4; j++)
        for (int r = 0; r < 8; r++) cr_assert_eq(tri_cuemu_ldmatrix_addr_lane(j, r), 8 * j + r);
    /* A's quadrants (rows 0-7 | 8-15) x (cols 0-7 | 8-15) in register order,
     * B's k-halves transposed */
    static const int quad[4][2] = {{0, 0}, {8, 0}, {0, 8}, {8, 8}};
    for (int l = 0; l < 32; l++)
        for (int h = 0; h < 2; h++) {
            for (int j = 0; j < 4; j++) {
                const tri_cuemu_rc e = tri_cuemu_ldmatrix_elem(l, h, 0);
                cr_assert(rc_is(tri_cuemu_frag_a(l, 2 * j + h), quad[j][0] + e.row, quad[j][1] + e.col), "A lane %d",
                          l);
            }
            for (int j = 0; j < 2; j++) {
                const tri_cuemu_rc e = tri_cuemu_ldmatrix_elem(l, h, 1);
                cr_assert(rc_is(tri_cuemu_frag_b(l, 2 * j + h), 8 * j + e.row, e.col), "B lane %d", l);
            }
            cr_assert(rc_is(tri_cuemu_frag_c(l, h), tri_cuemu_ldmatrix_elem(l, h, 0).row,
                            tri_cuemu_ldmatrix_elem(l, h, 0).col),
                      "C lane %d", l);
        }
}

/* ---- mma against a plain matmul ---- */

/* `n` random bf16 values: the bits and the values. */
static void fill_bf16(uint16_t *h, float *f, size_t n, uint64_t *s) {
    for (size_t i = 0; i < n; i++) {
        h[i] = tri_f32_to_bf16(rand_val(s));
        f[i] = tri_bf16_to_f32(h[i]);
    }
}

/* d = a b + c (16 x K times K x 8) in the emulator's documented order: c,
 * then the products for k = 0, 1, ..., K - 1, each addition rounded to fp32
 * (the products are exact). Also, into dd, the same in double, and into sc
 * the sum of the magnitudes. */
static void matmul_ref(float *d, double *dd, double *sc, const float *a, const float *b, const float *c, int K) {
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 8; n++) {
            float acc = c[m * 8 + n];
            double acc_d = acc, mag = fabs(acc_d);
            for (int k = 0; k < K; k++) {
                const float p = a[m * K + k] * b[k * 8 + n];
                acc += p;
                acc_d += (double)a[m * K + k] * b[k * 8 + n];
                mag += fabs((double)p);
            }
            d[m * 8 + n] = acc;
            dd[m * 8 + n] = acc_d;
            sc[m * 8 + n] = mag;
        }
}

typedef struct mma_case {
    int products, warps, ktiles;
    uint16_t *a_h, *b_h; /* device */
    float *a, *b, *c;    /* c device; a, b the values */
    float *want;
    double *want_d, *scale;
} mma_case;

static mma_case mma_case_new(int products, int warps, int ktiles, uint64_t seed) {
    mma_case m = {products, warps, ktiles, 0, 0, 0, 0, 0, 0, 0, 0};
    const int K = 16 * ktiles;
    const size_t na = (size_t)products * 16 * K, nb = (size_t)products * K * 8, nc = (size_t)products * 128;
    m.a_h = dev_alloc(sizeof(uint16_t) * na);
    m.b_h = dev_alloc(sizeof(uint16_t) * nb);
    m.c = dev_alloc(sizeof(float) * nc);
    m.a = malloc(sizeof(float) * na);
    m.b = malloc(sizeof(float) * nb);
    m.want = malloc(sizeof(float) * nc);
    m.want_d = malloc(sizeof(double) * nc);
    m.scale = malloc(sizeof(double) * nc);
    uint64_t s = seed * 7919 + (uint64_t)products * 31 + (uint64_t)ktiles;
    fill_bf16(m.a_h, m.a, na, &s);
    fill_bf16(m.b_h, m.b, nb, &s);
    for (size_t i = 0; i < nc; i++) m.c[i] = rand_val(&s);
    for (int p = 0; p < products; p++)
        matmul_ref(m.want + (size_t)p * 128, m.want_d + (size_t)p * 128, m.scale + (size_t)p * 128,
                   m.a + (size_t)p * 16 * K, m.b + (size_t)p * K * 8, m.c + (size_t)p * 128, K);
    return m;
}

static void mma_case_free(mma_case *m) {
    dev_free(m->a_h), dev_free(m->b_h), dev_free(m->c);
    free(m->a), free(m->b), free(m->want), free(m->want_d), free(m->scale);
}

/* How many of d's elements differ from the reference bits (NaN differs);
 * and every one within K eps of the double sum's magnitudes. */
static int mma_wrong(const mma_case *m, const float *d, const char *what) {
    int wrong = 0;
    const size_t n = (size_t)m->products * 128;
    for (size_t i = 0; i < n; i++) {
        uint32_t got, want;
        memcpy(&got, &d[i], 4);
        memcpy(&want, &m->want[i], 4);
        if (got != want || isnan(d[i])) wrong++;
        if (what != NULL) {
            cr_assert(fabs((double)d[i] - m->want_d[i]) <= 16.0 * m->ktiles * FLT_EPSILON * m->scale[i],
                      "%s: element %zu is %.9g, the double sum %.17g (magnitudes %.3g)", what, i, d[i], m->want_d[i],
                      m->scale[i]);
        }
    }
    return wrong;
}

/* Random 16x16 x 16x8 products (and chains of 2 and 3 k-tiles, the
 * accumulator in place) by fragments loaded per the ISA's tables, one or
 * several warps per block: the emulator's bits, within fp32 rounding of the
 * exact sum, under every seed and worker count. */
Test(cuemu_tc, mma_matches_a_plain_matmul_bit_for_bit) {
    const int cases[][3] = {{1, 1, 1}, {6, 2, 1}, {4, 4, 2}, {5, 1, 3}}; /* products, warps per block, k-tiles */
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        for (uint64_t seed = 1; seed <= 6; seed++) {
            mma_case m = mma_case_new(cases[k][0], cases[k][1], cases[k][2], seed);
            float *d = dev_alloc(sizeof(float) * (size_t)m.products * 128);
            tri_cuemu_set_workers((int)(seed % 2) + 1);
            tri_cuemu_set_seed(seed);
            tri_cuemu_test_mma(d, m.a_h, m.b_h, m.c, m.products, m.warps, m.ktiles, TRI_TC_OK);
            char what[96];
            snprintf(what, sizeof what, "mma (products %d, warps %d, k-tiles %d, seed %llu)", m.products, m.warps,
                     m.ktiles, (unsigned long long)seed);
            cr_assert_eq(mma_wrong(&m, d, what), 0, "%s: not the plain matmul's bits", what);
            dev_free(d);
            mma_case_free(&m);
        }
    tri_cuemu_set_workers(2);
    tri_cuemu_stats st;
    tri_cuemu_stats_get(&st);
    cr_expect_gt(st.mma, 0);
}

/* The pattern a tensor-core kernel uses: k-tiles copied to shared memory by
 * cp.async (double buffered), A through ldmatrix.x4, B through ldmatrix.x2
 * (stored n-major) or ldmatrix.x2.trans (stored k-major): the same bits. */
Test(cuemu_tc, mma_through_cp_async_and_ldmatrix_matches_the_matmul) {
    for (int kt = 1; kt <= 4; kt++)
        for (int n_major = 0; n_major <= 1; n_major++)
            for (uint64_t seed = 1; seed <= 4; seed++) {
                mma_case m = mma_case_new(1, 1, kt, seed + 100);
                for (int i = 0; i < 128; i++) m.c[i] = 0.0f; /* the kernel starts from zero */
                matmul_ref(m.want, m.want_d, m.scale, m.a, m.b, m.c, 16 * kt);
                const int K = 16 * kt;
                uint16_t *b = m.b_h, *bt = NULL;
                if (n_major) { /* (n, k), 8 x K */
                    bt = dev_alloc(sizeof(uint16_t) * 8 * K);
                    for (int k = 0; k < K; k++)
                        for (int n = 0; n < 8; n++) bt[n * K + k] = m.b_h[k * 8 + n];
                    b = bt;
                }
                float *d = dev_alloc(sizeof(float) * 128);
                tri_cuemu_set_seed(seed);
                tri_cuemu_test_mma_smem(d, m.a_h, b, kt, n_major, TRI_TC_OK);
                char what[96];
                snprintf(what, sizeof what, "mma via shared memory (k-tiles %d, %s B, seed %llu)", kt,
                         n_major ? "n-major" : "k-major", (unsigned long long)seed);
                cr_assert_eq(mma_wrong(&m, d, what), 0, "%s: not the plain matmul's bits", what);
                dev_free(d);
                dev_free(bt);
                mma_case_free(&m);
            }
    tri_cuemu_stats st;
    tri_cuemu_stats_get(&st);
    cr_expect_gt(st.ldmatrix, 0);
    cr_expect_gt(st.async_copies, 0);
}

/* Planted: A's registers 1 and 2 swapped in the kernel (rows g + 8 and
 * columns 2t + 8 exchanged): most elements of D wrong, under every seed. */
Test(cuemu_tc, wrong_lane_mapping_is_caught) {
    for (uint64_t seed = 1; seed <= 6; seed++) {
        mma_case m = mma_case_new(4, 2, 1 + (int)(seed % 2), seed);
        float *d = dev_alloc(sizeof(float) * (size_t)m.products * 128);
        tri_cuemu_set_seed(seed);
        tri_cuemu_test_mma(d, m.a_h, m.b_h, m.c, m.products, m.warps, m.ktiles, TRI_TC_SWAP_A_REGS);
        const int wrong = mma_wrong(&m, d, NULL);
        cr_expect_gt(wrong, m.products * 128 / 2, "seed %llu: the swapped registers changed only %d of %d elements",
                     (unsigned long long)seed, wrong, m.products * 128);
        dev_free(d);
        mma_case_free(&m);
    }
}

/* Planted: the k-tiles read before their cp.async groups are waited for
 * (no wait_group, or wait_group<2> where <1> is needed): every element of D
 * is NaN, from the poison of the copies' destinations, under every seed. */
Test(cuemu_tc, missing_wait_group_reads_the_poison) {
    const int faults[] = {TRI_TC_NO_WAIT, TRI_TC_WAIT_TOO_FEW};
    for (int f = 0; f < 2; f++)
        for (int kt = 1; kt <= 3; kt++)
            for (uint64_t seed = 1; seed <= 4; seed++) {
                mma_case m = mma_case_new(1, 1, kt, seed + 200);
                float *d = dev_alloc(sizeof(float) * 128);
                tri_cuemu_set_seed(seed);
                tri_cuemu_test_mma_smem(d, m.a_h, m.b_h, kt, 0, faults[f]);
                for (int i = 0; i < 128; i++)
                    cr_assert(isnan(d[i]), "fault %d, k-tiles %d, seed %llu: element %d is %g", faults[f], kt,
                              (unsigned long long)seed, i, d[i]);
                dev_free(d);
                mma_case_free(&m);
            }
}

/* ---- ldmatrix ---- */

/* Lane l's register j, by the ISA's description written out here: matrix
 * j's row r is the shared row at lane 8 j + r's address (perm[8 j + r]);
 * lane l gets row l / 4, columns 2 (l % 4) and + 1 (lower first), or with
 * .trans rows 2 (l % 4) and + 1 of column l / 4. */
static uint32_t ldmatrix_want(const uint16_t *src, const int *perm, int l, int j, int trans) {
    uint16_t lo, hi;
    if (!trans) {
        const int row = perm[8 * j + l / 4], c = 2 * (l % 4);
        lo = src[row * 8 + c];
        hi = src[row * 8 + c + 1];
    } else {
        const int r0 = perm[8 * j + 2 * (l % 4)], r1 = perm[8 * j + 2 * (l % 4) + 1], c = l / 4;
        lo = src[r0 * 8 + c];
        hi = src[r1 * 8 + c];
    }
    return (uint32_t)lo | (uint32_t)hi << 16;
}

Test(cuemu_tc, ldmatrix_variants_give_the_hand_computed_lane_contents) {
    uint16_t *src = dev_alloc(sizeof(uint16_t) * 32 * 8);
    int *perm = dev_alloc(sizeof(int) * 32);
    uint32_t *out = dev_alloc(sizeof(uint32_t) * 32 * 4);
    for (int r = 0; r < 32; r++)
        for (int c = 0; c < 8; c++) src[r * 8 + c] = (uint16_t)(r << 8 | c); /* (row, col) in the bits */
    /* lane 5, .x1: row 1, columns 2 and 3 of the first matrix (identity rows) */
    for (int i = 0; i < 32; i++) perm[i] = i;
    tri_cuemu_test_ldmatrix(out, src, perm, 1, 0);
    cr_assert_eq(out[5 * 4], 0x01030102u, "lane 5 .x1: 0x%08x", out[5 * 4]);
    tri_cuemu_test_ldmatrix(out, src, perm, 1, 1);
    cr_assert_eq(out[5 * 4], 0x03010201u, "lane 5 .x1.trans: 0x%08x", out[5 * 4]);
    const int nums[3] = {1, 2, 4};
    for (uint64_t seed = 1; seed <= 4; seed++) {
        uint64_t s = seed;
        for (int i = 31; i > 0; i--) { /* rows in a random order */
            const int k = (int)(rng_next(&s) % (uint64_t)(i + 1)), t = perm[i];
            perm[i] = perm[k];
            perm[k] = t;
        }
        for (int v = 0; v < 3; v++)
            for (int trans = 0; trans <= 1; trans++) {
                for (int i = 0; i < 32 * 4; i++) out[i] = 0;
                tri_cuemu_set_seed(seed);
                tri_cuemu_test_ldmatrix(out, src, perm, nums[v], trans);
                for (int l = 0; l < 32; l++)
                    for (int j = 0; j < 4; j++) {
                        const uint32_t want = j < nums[v] ? ldmatrix_want(src, perm, l, j, trans) : 0xdeadbeefu;
                        cr_assert_eq(out[l * 4 + j], want,
                                     ".x%d%s seed %llu: lane %d register %d is 0x%08x, not 0x%08x", nums[v],
                                     trans ? ".trans" : "", (unsigned long long)seed, l, j, out[l * 4 + j], want);
                    }
            }
    }
    dev_free(src), dev_free(perm), dev_free(out);
}

/* ---- cp.async ---- */

/* Runs the double-buffered copy; returns how many of out's n values are not
 * 2 in + 1 (NaN counts). */
static int cp_async_wrong(const float *in, int n, int threads, int bytes, int fault, uint64_t seed) {
    float *out = dev_alloc(sizeof(float) * (size_t)(n ? n : 1));
    tri_cuemu_set_seed(seed);
    tri_cuemu_test_cp_async(out, in, n, threads, bytes, fault);
    int wrong = 0;
    for (int i = 0; i < n; i++) wrong += !(out[i] == 2.0f * in[i] + 1.0f);
    dev_free(out);
    return wrong;
}

static float *cp_async_input(int n) {
    float *in = dev_alloc(sizeof(float) * (size_t)(n ? n : 1));
    for (int i = 0; i < n; i++) in[i] = (float)(i % 1000) - 300.0f;
    return in;
}

/* Every chunk size, tiles that divide n and tails that do not (16 bytes:
 * the zero-fill form for a partial chunk and for chunks past the end), one
 * to several tiles; the right data under every seed. */
Test(cuemu_tc, cp_async_double_buffering_copies_every_tile) {
    const int cases[][3] = {/* n, threads, bytes */
                            {32, 32, 4},    {1000, 64, 4},  {64, 32, 8},    {2048, 96, 8}, {4, 32, 16},
                            {1000, 64, 16}, {1001, 64, 16}, {1003, 96, 16}, {3, 32, 16},   {4096, 128, 16}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        float *in = cp_async_input(cases[k][0]);
        for (uint64_t seed = 1; seed <= 5; seed++)
            cr_assert_eq(cp_async_wrong(in, cases[k][0], cases[k][1], cases[k][2], TRI_TC_OK, seed), 0,
                         "n %d, threads %d, %d-byte copies, seed %llu", cases[k][0], cases[k][1], cases[k][2],
                         (unsigned long long)seed);
        dev_free(in);
    }
}

/* Planted: no wait_group, or one that leaves the group to be read pending:
 * every value read is the poison (every seed); no barrier between the waits
 * and the reads of a neighbour's copy: wrong for most seeds (a thread that
 * runs before its neighbour reaches the wait reads the poison). */
Test(cuemu_tc, cp_async_reads_before_the_wait_are_caught) {
    const int n = 1000, threads = 64;
    float *in = cp_async_input(n);
    const int bytes[3] = {4, 8, 16};
    for (int b = 0; b < 3; b++)
        for (uint64_t seed = 1; seed <= 4; seed++) {
            cr_assert_eq(cp_async_wrong(in, n, threads, bytes[b], TRI_TC_NO_WAIT, seed), n, "no wait, %d bytes",
                         bytes[b]);
            cr_assert_eq(cp_async_wrong(in, n, threads, bytes[b], TRI_TC_WAIT_TOO_FEW, seed), n,
                         "wait_group<2>, %d bytes", bytes[b]);
        }
    int caught = 0;
    for (uint64_t seed = 1; seed <= 100; seed++)
        caught += cp_async_wrong(in, n, threads, 16, TRI_TC_NO_BARRIER, seed) > 0;
    cr_expect_geq(caught, 95, "the missing barrier changed the result for only %d of 100 seeds", caught);
    dev_free(in);
}

/* Planted: the pipeline's tail forgotten (wait_group<1> at the last tile as
 * at the others, so its copies are still queued when it is read). Its buffer
 * held an earlier tile, but a queued copy's destination reads as the poison:
 * every value of the last tile is NaN, every earlier one right. */
Test(cuemu_tc, a_queued_copy_hides_the_buffers_old_contents) {
    const int n = 5 * 256, threads = 64; /* 5 tiles of 256 floats: the last one reuses tile 3's buffer */
    float *in = cp_async_input(n), *out = dev_alloc(sizeof(float) * n);
    for (uint64_t seed = 1; seed <= 4; seed++) {
        tri_cuemu_set_seed(seed);
        tri_cuemu_test_cp_async(out, in, n, threads, 16, TRI_TC_LAST_WAIT_SHORT);
        for (int i = 0; i < n; i++) {
            if (i < n - 256)
                cr_assert_eq(out[i], 2.0f * in[i] + 1.0f, "seed %llu: value %d", (unsigned long long)seed, i);
            else
                cr_assert(isnan(out[i]), "seed %llu: value %d of the last tile is %g, not the poison",
                          (unsigned long long)seed, i, out[i]);
        }
    }
    dev_free(in), dev_free(out);
}

/* ---- misuse, fatal ---- */

static int misuse_what, misuse_lane;
static void misuse_child(void) {
    float *d = dev_alloc(sizeof(float) * 48 * 4);
    tri_cuemu_set_workers(1);
    tri_cuemu_test_tc_misuse(d, misuse_what, misuse_lane);
}

/* Runs misuse `what` (lane `lane` breaking ranks) in a child; expects
 * SIGABRT and a message naming the kernel, a line of tcself.cu and `needle`. */
static void expect_misuse(int what, int lane, const char *needle) {
    misuse_what = what;
    misuse_lane = lane;
    int status = 0;
    char *msg = run_child(misuse_child, &status);
    cr_expect(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, "misuse %d: status %d, stderr: %s", what, status,
              msg);
    cr_expect(strstr(msg, "tc_misuse_kernel") != NULL, "misuse %d names the kernel: %s", what, msg);
    cr_expect(strstr(msg, "tcself.cu:") != NULL, "misuse %d names the line: %s", what, msg);
    cr_expect(strstr(msg, needle) != NULL, "misuse %d says '%s': %s", what, needle, msg);
    free(msg);
}

/* Planted divergences: one lane skips the mma (returns; waits at a barrier
 * instead), runs it at another call site, runs an ldmatrix instead, or an
 * ldmatrix of another variant; each aborts naming the kernel and the line. */
Test(cuemu_tc, divergent_mma_and_ldmatrix_are_reported) {
    expect_misuse(TRI_TC_MISUSE_MMA_EXIT, 5, "which has exited");
    expect_misuse(TRI_TC_MISUSE_MMA_EXIT, 5, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32");
    expect_misuse(TRI_TC_MISUSE_MMA_BARRIER, 17, "which waits at __syncthreads");
    expect_misuse(TRI_TC_MISUSE_MMA_OTHER_SITE, 0, "different mma instructions");
    expect_misuse(TRI_TC_MISUSE_MMA_VS_LDMATRIX, 31, "different warp intrinsics");
    expect_misuse(TRI_TC_MISUSE_LDMATRIX_VARIANT, 9, "ldmatrix.sync.aligned.m8n8.x2.shared.b16");
}

/* Tensor-core operations in a partial warp, ldmatrix rows and cp.async
 * destinations outside shared memory: fatal, named. */
Test(cuemu_tc, tensor_op_misuse_is_reported) {
    expect_misuse(TRI_TC_MISUSE_MMA_PARTIAL_WARP, 0, "needs a full warp of 32");
    expect_misuse(TRI_TC_MISUSE_LDMATRIX_GLOBAL, 0, "not 16 bytes of the block's shared memory");
    expect_misuse(TRI_TC_MISUSE_CP_ASYNC_TO_GLOBAL, 0, "not the block's shared memory");
}

static void never_wait_child(void) {
    float *in = cp_async_input(256), *out = dev_alloc(sizeof(float) * 256);
    tri_cuemu_set_workers(1);
    tri_cuemu_test_cp_async(out, in, 256, 32, 16, TRI_TC_NEVER_WAIT);
}

/* Planted: copies never waited for; the kernel's end is an error naming the
 * kernel and where the first pending copy was issued. */
Test(cuemu_tc, cp_async_not_waited_at_kernel_exit_is_reported) {
    int status = 0;
    char *msg = run_child(never_wait_child, &status);
    cr_expect(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, "status %d, stderr: %s", status, msg);
    cr_expect(strstr(msg, "cp_async_kernel") != NULL, "names the kernel: %s", msg);
    cr_expect(strstr(msg, "cp.async copies not waited for") != NULL, "%s", msg);
    cr_expect(strstr(msg, "issued at") != NULL && strstr(msg, "tcself.cu:") != NULL, "names the copy's line: %s", msg);
    free(msg);
}
