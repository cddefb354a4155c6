/* The CPU backend's ring-attention blocks (kernels/ops.h attention_block_fwd,
 * attention_block_bwd, attention_kv_copy; kernels/cpu/attention_ring.c)
 * against the plain causal attention of the whole sequence (attention_fwd /
 * attention_bwd, tested in test_ops.c against a double reference and finite
 * differences).
 *
 * For cp = 1, 2, 3 and 4 virtual ranks, each holding chunks r and 2cp-1-r of
 * every sequence (Megatron's load balance), the blocks are composed here as a
 * ring would: the rank's own block causal, every other rank's block with the
 * mask of global positions worked out in this file from the positions alone
 * (a query sees a key iff the key's global position is not after its own;
 * each other block is then a rectangle: all rows against its first chunk, or
 * the second chunk's rows against all of it). The
 * merged outputs and log-sum-exps, and the gradients (each block's dK/dV
 * summed at its owner), must equal the whole sequence's at the same global
 * positions. Tolerance 2e-5 absolute on values of order 1: the merge adds
 * the same terms in another order (measured differences ~1e-7); a wrong mask
 * or a missing block moves outputs by ~1e-1. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ctx.h"

#define TOL 2e-5

static float frand(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(*s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static float *fvec(size_t n) {
    float *p = calloc(n ? n : 1, sizeof(float));
    cr_assert_not_null(p);
    return p;
}

/* global position of local row i of rank r (Tl rows, cp ranks) */
static size_t gpos(size_t i, size_t Tl, int cp, int r) {
    size_t Tc = Tl / 2;
    return i < Tc ? (size_t)r * Tc + i : (size_t)(2 * cp - 1 - r) * Tc + (i - Tc);
}

/* Which queries of rank r see which keys of rank src's block (src != r),
 * from global positions alone: *q0 the first query row that sees any key,
 * *tk the keys it sees; checking that the visible part is exactly the
 * rectangle rows [q0, Tl) x keys [0, tk) (no mask needed inside it). */
static void visible_from(size_t Tl, int cp, int r, int src, size_t *q0, size_t *tk) {
    *q0 = Tl;
    *tk = 0;
    for (size_t i = 0; i < Tl; i++) {
        size_t n = 0;
        for (size_t j = 0; j < Tl; j++) n += gpos(j, Tl, cp, src) <= gpos(i, Tl, cp, r);
        if (n > 0 && *q0 == Tl) *q0 = i, *tk = n;
        if (*q0 < Tl)
            cr_assert_eq(n, *tk, "rank %d row %zu sees %zu of rank %d's keys, row %zu saw %zu", r, i, n, src, *q0, *tk);
    }
    for (size_t j = 0; j < *tk; j++) /* the keys seen are a prefix of the block */
        cr_assert(gpos(j, Tl, cp, src) <= gpos(*q0, Tl, cp, r));
}

static void check_cp(tri_ctx *c, int cp, size_t B, size_t T, int NH, int NKV, int HS) {
    const tri_ops *ops = c->ops;
    const size_t W = (size_t)(NH + 2 * NKV) * HS, C = (size_t)NH * HS, KW = (size_t)(2 * NKV) * HS;
    const size_t Tl = T / (size_t)cp, Tc = Tl / 2;
    uint64_t seed = 1234 + (uint64_t)cp;
    float *qkv = fvec(B * T * W), *dout = fvec(B * T * C);
    for (size_t i = 0; i < B * T * W; i++) qkv[i] = frand(&seed);
    for (size_t i = 0; i < B * T * C; i++) dout[i] = frand(&seed);
    /* the whole sequence */
    float *out = fvec(B * T * C), *lse = fvec(B * (size_t)NH * T), *dqkv = fvec(B * T * W);
    float *scratch = fvec(ops->attention_scratch_floats(B, T, NH, NKV, HS));
    ops->attention_fwd(c, out, lse, qkv, B, T, NH, NKV, HS);
    ops->attention_bwd(c, dqkv, scratch, dout, qkv, out, lse, B, T, NH, NKV, HS);

    /* every rank's local rows and its packed key/value block */
    float **lq = calloc((size_t)cp, sizeof *lq), **lkv = calloc((size_t)cp, sizeof *lkv);
    float **lo = calloc((size_t)cp, sizeof *lo), **llse = calloc((size_t)cp, sizeof *llse);
    float **ldo = calloc((size_t)cp, sizeof *ldo), **lout = calloc((size_t)cp, sizeof *lout);
    float **ldq = calloc((size_t)cp, sizeof *ldq), **ldkv = calloc((size_t)cp, sizeof *ldkv);
    for (int r = 0; r < cp; r++) {
        lq[r] = fvec(B * Tl * W);
        ldo[r] = fvec(B * Tl * C);
        lkv[r] = fvec(B * Tl * KW);
        lo[r] = fvec(B * Tl * C);
        lout[r] = fvec(B * Tl * C);
        llse[r] = fvec(B * (size_t)NH * Tl);
        ldq[r] = fvec(B * Tl * W);
        ldkv[r] = fvec(B * Tl * KW);
        for (size_t b = 0; b < B; b++)
            for (size_t i = 0; i < Tl; i++) {
                size_t gp = gpos(i, Tl, cp, r);
                memcpy(lq[r] + (b * Tl + i) * W, qkv + (b * T + gp) * W, W * sizeof(float));
                memcpy(ldo[r] + (b * Tl + i) * C, dout + (b * T + gp) * C, C * sizeof(float));
            }
        ops->attention_kv_copy(c, lkv[r], lq[r], TRI_F32, B, Tl, NH, NKV, HS, 0);
        for (size_t n = 0; n < B * Tl; n++) /* the packed block is qkv's k and v heads */
            cr_assert(memcmp(lkv[r] + n * KW, lq[r] + n * W + C, KW * sizeof(float)) == 0);
    }
    /* forward: own block causal, then the others merged */
    for (int r = 0; r < cp; r++) {
        ops->attention_block_fwd(c, lo[r], llse[r], lq[r], lkv[r], B, Tl, Tl, 0, 1, 0, NH, NKV, HS);
        for (int s = 1; s < cp; s++) {
            int src = (r - s + cp) % cp;
            size_t q0, tk;
            visible_from(Tl, cp, r, src, &q0, &tk);
            /* Megatron's two cases: all rows x the first half, the second half x all keys */
            cr_assert((q0 == 0 && tk == Tc) || (q0 == Tc && tk == Tl), "rank %d block %d: q0 %zu tk %zu", r, src, q0,
                      tk);
            for (size_t b = 0; b < B; b++)
                ops->attention_block_fwd(c, lo[r] + b * Tl * C, llse[r] + b * (size_t)NH * Tl, lq[r] + b * Tl * W,
                                         lkv[src] + b * Tl * KW, 1, Tl, tk, q0, 0, 1, NH, NKV, HS);
        }
        double worst = 0;
        for (size_t b = 0; b < B; b++)
            for (size_t i = 0; i < Tl; i++) {
                size_t gp = gpos(i, Tl, cp, r);
                for (size_t e = 0; e < C; e++)
                    worst = fmax(worst, fabs(lo[r][(b * Tl + i) * C + e] - out[(b * T + gp) * C + e]));
                for (int h = 0; h < NH; h++)
                    worst = fmax(worst, fabs(llse[r][(b * NH + h) * Tl + i] - lse[(b * NH + h) * T + gp]));
            }
        cr_expect(worst <= TOL, "cp %d rank %d: forward differs by %g", cp, r, worst);
        memcpy(lout[r], lo[r], B * Tl * C * sizeof(float)); /* the output as stored (fp32 here) */
    }
    /* backward: own block causal into dq and its own dK/dV; the others' dK/dV
     * summed at their owner */
    for (int r = 0; r < cp; r++) {
        ops->attention_block_bwd(c, ldq[r], ldkv[r], scratch, ldo[r], lq[r], lkv[r], lout[r], llse[r], B, Tl, Tl, 0, 1,
                                 NH, NKV, HS);
        for (int s = 1; s < cp; s++) {
            int src = (r - s + cp) % cp;
            size_t q0, tk;
            visible_from(Tl, cp, r, src, &q0, &tk);
            for (size_t b = 0; b < B; b++)
                ops->attention_block_bwd(c, ldq[r] + b * Tl * W, ldkv[src] + b * Tl * KW, scratch, ldo[r] + b * Tl * C,
                                         lq[r] + b * Tl * W, lkv[src] + b * Tl * KW, lout[r] + b * Tl * C,
                                         llse[r] + b * (size_t)NH * Tl, 1, Tl, tk, q0, 0, NH, NKV, HS);
        }
    }
    for (int r = 0; r < cp; r++) {
        ops->attention_kv_copy(c, ldq[r], ldkv[r], TRI_F32, B, Tl, NH, NKV, HS, 1);
        double worst = 0;
        for (size_t b = 0; b < B; b++)
            for (size_t i = 0; i < Tl; i++) {
                size_t gp = gpos(i, Tl, cp, r);
                for (size_t e = 0; e < W; e++)
                    worst = fmax(worst, fabs(ldq[r][(b * Tl + i) * W + e] - dqkv[(b * T + gp) * W + e]));
            }
        cr_expect(worst <= TOL, "cp %d rank %d: gradient differs by %g", cp, r, worst);
    }
    for (int r = 0; r < cp; r++) {
        free(lq[r]), free(lkv[r]), free(lo[r]), free(llse[r]), free(ldo[r]), free(lout[r]), free(ldq[r]);
        free(ldkv[r]);
    }
    free(lq), free(lkv), free(lo), free(llse), free(ldo), free(lout), free(ldq), free(ldkv);
    free(qkv), free(dout), free(out), free(lse), free(dqkv), free(scratch);
}

Test(attention_ring, blocks_compose_to_the_whole_sequence) {
    tri_ctx c;
    cr_assert_eq(tri_ctx_init(&c, "cpu", 0), 0);
    cr_assert(c.ops->attention_block_fwd && c.ops->attention_block_bwd && c.ops->attention_kv_copy);
    for (int cp = 1; cp <= 4; cp++) {
        check_cp(&c, cp, 2, (size_t)(2 * cp) * 5, 4, 4, 8);  /* multi-head, chunks of 5 */
        check_cp(&c, cp, 1, (size_t)(2 * cp) * 8, 4, 2, 16); /* grouped-query */
        check_cp(&c, cp, 2, (size_t)(2 * cp) * 3, 2, 1, 8);  /* multi-query */
    }
    tri_ctx_free(&c);
}

/* A block's merge is commutative up to rounding: merging the same blocks in
 * another order gives the same output (the ring's order differs per rank). */
Test(attention_ring, merge_order_does_not_matter) {
    tri_ctx c;
    cr_assert_eq(tri_ctx_init(&c, "cpu", 0), 0);
    const int NH = 2, NKV = 2, HS = 8;
    const size_t T = 6, W = (size_t)(NH + 2 * NKV) * HS, C = (size_t)NH * HS, KW = (size_t)(2 * NKV) * HS;
    uint64_t seed = 99;
    float *q = fvec(T * W), *kv[3], *o1 = fvec(T * C), *o2 = fvec(T * C), *l1 = fvec(NH * T), *l2 = fvec(NH * T);
    for (size_t i = 0; i < T * W; i++) q[i] = frand(&seed);
    for (int k = 0; k < 3; k++) {
        kv[k] = fvec(T * KW);
        for (size_t i = 0; i < T * KW; i++) kv[k][i] = frand(&seed);
    }
    const int order[2][3] = {{0, 1, 2}, {2, 0, 1}};
    for (int k = 0; k < 3; k++) {
        c.ops->attention_block_fwd(&c, o1, l1, q, kv[order[0][k]], 1, T, T, 0, 0, k > 0, NH, NKV, HS);
        c.ops->attention_block_fwd(&c, o2, l2, q, kv[order[1][k]], 1, T, T, 0, 0, k > 0, NH, NKV, HS);
    }
    for (size_t i = 0; i < T * C; i++) cr_expect(fabsf(o1[i] - o2[i]) <= TOL, "o[%zu] %g vs %g", i, o1[i], o2[i]);
    for (size_t i = 0; i < NH * T; i++) cr_expect(fabsf(l1[i] - l2[i]) <= TOL, "lse[%zu] %g vs %g", i, l1[i], l2[i]);
    free(q), free(o1), free(o2), free(l1), free(l2);
    for (int k = 0; k < 3; k++) free(kv[k]);
    tri_ctx_free(&c);
}
