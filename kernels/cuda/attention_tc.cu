/* Causal flash attention on tensor cores (FlashAttention-2, Dao 2023), bf16
 * storage, head size 64 or 128 (the template parameter HS): the kernels that
 * attention.cu's entry points take for bf16 with those head sizes (the SIMT
 * kernels there stay the reference, and take everything else). Contracts:
 * kernels/cuda/kernels.h (attention_{fwd,bwd}_slice); the geometry (views,
 * query slice) in attention.cuh.
 *
 * Tensor cores only through common.cuh's wrappers: mma.sync m16n8k16 (bf16
 * operands, fp32 accumulation), ldmatrix (x4, plain and .trans) and cp.async
 * (16 bytes, zero-filled past the end). A block is 4 warps; each warp owns 16
 * rows of the block's 64 (queries in the forward and in dq, keys in dk/dv)
 * and holds their accumulators in registers in the mma's C layout (lane l,
 * g = l / 4, t = l % 4: rows g and g + 8, columns 2t and 2t + 1 of each
 * 8-column n-tile). The other side streams through shared memory in tiles,
 * double buffered: the tile after next is in flight (cp.async) while the
 * warps compute on the current one; rows past the end are zero-filled (and
 * masked). Shared tiles are row-major with HS + 8 elements per row (every row
 * 16-byte aligned, the 8 rows of an ldmatrix matrix in distinct banks).
 *
 * Forward (a block per (batch and head, tile of 64 queries)): Q's tile
 * through shared memory into registers once (ldmatrix.x4: the A fragments),
 * then per key tile (64 keys):
 *   S = Q K^T          B = K, n-major in shared memory: ldmatrix.x4 (plain);
 *   causal mask (key j > the row's position q0 + i: -inf) on the tiles that
 *   reach past the warp's first row; online softmax in base 2 (scores times
 *   scale log2 e; the running max m and sum l per row, l summed from the fp32
 *   p; the accumulator rescaled by 2^(m_old - m_new));
 *   O += P V           P stays in registers: its C fragments, rounded to
 *                      bf16, are the A fragments of the product (the same
 *                      lanes hold the same elements); B = V, (k, n)
 *                      row-major: ldmatrix.x4.trans.
 * At the end out = O / l (rounded to bf16 once) and lse = m ln 2 + log l,
 * (B, NH, Tq) as the SIMT kernel saves it.
 * Backward, after attention.cu's delta (dout . out per row), two kernels that
 * each write every element of their outputs once, in a fixed order (no
 * atomics: the same bits under any schedule):
 *   dk/dv: a block per (batch and key/value head, 64 keys); K and V of its
 *     keys stay in shared memory, query tiles (Q, dout, lse, delta) of the
 *     group's query heads stream through, head after head in order (grouped-
 *     query attention: one pipeline over (head, tile), the accumulators kept
 *     across heads, no atomics). Per
 *     tile, with the keys as rows: S^T = K Q^T, dP^T = V dout^T (B: Q and
 *     dout n-major, plain ldmatrix), P^T = 2^(S^T scale log2 e - lse log2 e)
 *     masked, dS^T = P^T (dP^T - delta); dV += P^T dout, dK += dS^T Q (A: P^T
 *     and dS^T from registers, rounded to bf16; B: dout and Q (k, n)
 *     row-major, ldmatrix.trans). dk = scale dK.
 *   The forward and dq read the key/value head h / G of query head h.
 *   dq: a block per (batch and head, 64 queries): Q and dout in registers, key
 *     tiles streaming: S = Q K^T, dP = dout V^T, P, dS as above, dQ += dS K
 *     (K (k, n) row-major: .trans). dq = scale dQ.
 * Tiles: forward 64 x 64; dk/dv 64 keys x 64 queries (32 for HS 128), dq 64
 * queries x 64 keys (32 for HS 128), so that the accumulators (16 x HS fp32
 * per warp, two of them in dk/dv) and the tile's S and dP fit in registers
 * without spilling (CTest attention_sass_spills: ptxas -v).
 * Shared memory (bf16 tiles, plus lse and delta in dk/dv): forward 45 KiB
 * (HS 64) / 85 KiB (HS 128), dk/dv 55 / 68.5 KiB, dq 54 / 68 KiB; above
 * 48 KiB through the kernel's opt-in (every sm_80 / sm_90 part has 99 KiB or
 * more per block). */
#include <math.h>

#include "kernels/cuda/common.cuh"

#include "kernels/cuda/attention.cuh"

enum { TC_WARPS = 4, TC_THREADS = 32 * TC_WARPS, TC_PAD = 8 };

#define FA_LOG2E 1.4426950408889634f
#define FA_LN2   0.6931471805599453f

/* 16 bytes: the unit of cp.async and the alignment of the shared tiles. */
struct alignas(16) fa_chunk {
    uint32_t w[4];
};

/* The tiling of head size HS (above). Row counts: BR queries per forward and
 * dq block, BC keys per forward tile, BKQ keys per dq tile, BK keys per dk/dv
 * block, BQK queries per dk/dv tile; LD the shared row stride in elements. */
template <int HS> struct fa_tc {
    static_assert(HS == 64 || HS == 128, "the tensor-core attention takes head sizes 64 and 128");
    static constexpr int LD = HS + TC_PAD;
    static constexpr int BR = 16 * TC_WARPS, BC = 64, BKQ = HS == 128 ? 32 : 64;
    static constexpr int BK = 16 * TC_WARPS, BQK = HS == 128 ? 32 : 64;
    static constexpr size_t fwd_smem = sizeof(tri_cu_bf16) * LD * (BR + 4 * BC);
    static constexpr size_t dkdv_smem = sizeof(tri_cu_bf16) * LD * (2 * BK + 4 * BQK) + sizeof(float) * 4 * BQK;
    static constexpr size_t dq_smem = sizeof(tri_cu_bf16) * LD * (2 * BR + 4 * BKQ);
};

/* Rows [r0, r0 + R) of a strided (rows, HS) bf16 slab (row stride `row`) into
 * the shared tile dst, by cp.async; rows at or past n are zero-filled (their
 * source address is the slab's first row, read for 0 bytes). Every thread of
 * the block takes part; the caller commits and waits. */
template <int HS, int R> DEVFN void tc_load(tri_cu_bf16 *dst, const tri_cu_bf16 *src, size_t row, int r0, int n) {
    constexpr int CH = HS / 8, LD = HS + TC_PAD;
    for (int idx = threadIdx.x; idx < R * CH; idx += TC_THREADS) {
        const int r = idx / CH, c = idx % CH * 8;
        const bool ok = r0 + r < n;
        tri_cp_async_16_zfill(dst + r * LD + c, ok ? src + (size_t)(r0 + r) * row + c : src, ok ? 16 : 0);
    }
}

/* The row address lane `lane` gives ldmatrix.x4 for the 16 x 16 block at
 * (r0, c0) of a shared tile, in the two orders the kernels use:
 * lm_a: matrices (rows 0-7, cols 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15):
 *   plain, an A fragment (16 x 16, row-major); with .trans on a (k, n)
 *   row-major tile, the B fragments of n-tiles c0 .. c0 + 7 (registers 0, 1)
 *   and c0 + 8 .. c0 + 15 (registers 2, 3);
 * lm_b: matrices (rows 0-7, cols 0-7), (0-7, 8-15), (8-15, 0-7), (8-15, 8-15):
 *   plain on an n-major tile (rows n, columns k), the B fragments of n-tiles
 *   r0 .. r0 + 7 (registers 0, 1) and r0 + 8 .. r0 + 15 (registers 2, 3). */
DEVFN const tri_cu_bf16 *lm_a(const tri_cu_bf16 *tile, int ld, int r0, int c0, int lane) {
    return tile + (r0 + (lane & 15)) * ld + c0 + 8 * (lane >> 4);
}
DEVFN const tri_cu_bf16 *lm_b(const tri_cu_bf16 *tile, int ld, int r0, int c0, int lane) {
    return tile + (r0 + (lane & 7) + 8 * (lane >> 4)) * ld + c0 + 8 * ((lane >> 3) & 1);
}

/* d0 += a b[0..1], d1 += a b[2..3]: two n-tiles from one A fragment. */
DEVFN void mma2(float d0[4], float d1[4], const uint32_t a[4], const uint32_t b[4]) {
    tri_mma_bf16_16816(d0, a, b, d0);
    tri_mma_bf16_16816(d1, a, b + 2, d1);
}

/* The A fragment of 16 columns of a matrix held in C fragments: n-tiles c0
 * (A's columns 0-7) and c1 (8-15), rounded to bf16. Lane l's C elements
 * (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1) are its A elements: no data
 * leaves the lane. */
DEVFN void c_to_a(uint32_t a[4], const float c0[4], const float c1[4]) {
    a[0] = tri_cu_pack_bf16x2(c0[0], c0[1]);
    a[1] = tri_cu_pack_bf16x2(c0[2], c0[3]);
    a[2] = tri_cu_pack_bf16x2(c1[0], c1[1]);
    a[3] = tri_cu_pack_bf16x2(c1[2], c1[3]);
}

/* Stores a warp's 16 x HS accumulator (C fragments, times `mul`) as bf16 rows
 * r0 .. r0 + 15 of a strided slab, the rows below n only. */
template <int HS>
DEVFN void store_rows(tri_cu_bf16 *dst, size_t row, const float acc[HS / 8][4], float mul, int r0, int n, int lane) {
    const int ra = r0 + (lane >> 2), rb = ra + 8, c = 2 * (lane & 3);
    FA_UNROLL
    for (int nt = 0; nt < HS / 8; nt++) {
        if (ra < n)
            *reinterpret_cast<uint32_t *>(dst + (size_t)ra * row + nt * 8 + c) =
                tri_cu_pack_bf16x2(acc[nt][0] * mul, acc[nt][1] * mul);
        if (rb < n)
            *reinterpret_cast<uint32_t *>(dst + (size_t)rb * row + nt * 8 + c) =
                tri_cu_pack_bf16x2(acc[nt][2] * mul, acc[nt][3] * mul);
    }
}

/* Adds a warp's 16 x HS accumulator (times `mul`) to fp32 rows r0 .. r0 + 15
 * of a strided slab, the rows below n only (ring attention's gradients). */
template <int HS>
DEVFN void add_rows_f32(float *dst, size_t row, const float acc[HS / 8][4], float mul, int r0, int n, int lane) {
    const int ra = r0 + (lane >> 2), rb = ra + 8, c = 2 * (lane & 3);
    FA_UNROLL
    for (int nt = 0; nt < HS / 8; nt++) {
        if (ra < n) {
            float *d = dst + (size_t)ra * row + nt * 8 + c;
            d[0] += acc[nt][0] * mul, d[1] += acc[nt][1] * mul;
        }
        if (rb < n) {
            float *d = dst + (size_t)rb * row + nt * 8 + c;
            d[0] += acc[nt][2] * mul, d[1] += acc[nt][3] * mul;
        }
    }
}

/* ---- forward ---- */

/* Queries [i0, i0 + BR) of (batch, head) bh. */
template <int HS>
DEVFN void fa_tc_fwd_tile(tri_cu_bf16 *sm, tri_cu_bf16 *out, float *o32, float *lse, const tri_cu_bf16 *q,
                          const tri_cu_bf16 *k, const tri_cu_bf16 *v, const fa_geom &g, int bh, int i0) {
    typedef fa_tc<HS> F;
    constexpr int LD = F::LD, BR = F::BR, BC = F::BC;
    tri_cu_bf16 *Qs = sm, *Ks = Qs + BR * LD, *Vs = Ks + 2 * BC * LD; /* Qs[BR][LD], Ks, Vs [2][BC][LD] */
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, tq = lane & 3, Tq = g.Tq;
    const size_t b = (unsigned)bh / (unsigned)g.NH, h = (unsigned)bh % (unsigned)g.NH, kvh = fa_kvh(g, h);
    const tri_cu_bf16 *qh = q + b * g.q_b + h * HS, *kh = k + b * g.k_b + kvh * HS, *vh = v + b * g.v_b + kvh * HS;
    const int last = (i0 + BR < Tq ? i0 + BR : Tq) - 1;  /* the block's last query */
    const int kend = g.nomask ? g.Tk : g.q0 + last + 1; /* keys [0, kend) are seen by some query */
    const int nkt = (kend + BC - 1) / BC;
    const int r0 = i0 + 16 * warp; /* the warp's first query */
    const bool active = r0 < Tq;
    /* the last key the warp's queries see */
    const int wlast = g.nomask ? g.Tk - 1 : g.q0 + (r0 + 15 < Tq ? r0 + 15 : Tq - 1);
    const int pa = g.q0 + r0 + (lane >> 2), pb = pa + 8; /* the positions of this lane's two rows */
    const float sl2 = g.scale * FA_LOG2E;

    __syncthreads(); /* the block's previous tile is used up */
    tc_load<HS, BR>(Qs, qh, g.q_r, i0, Tq);
    tc_load<HS, BC>(Ks, kh, g.k_r, 0, kend);
    tc_load<HS, BC>(Vs, vh, g.v_r, 0, kend);
    tri_cp_async_commit();

    uint32_t qf[HS / 16][4];
    float o[HS / 8][4];
    FA_UNROLL
    for (int nt = 0; nt < HS / 8; nt++) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    for (int kt = 0; kt < nkt; kt++) {
        const int buf = kt & 1, j0 = kt * BC;
        if (kt + 1 < nkt) { /* the next tile into the other buffer, then wait for this one */
            tc_load<HS, BC>(Ks + (buf ^ 1) * BC * LD, kh, g.k_r, j0 + BC, kend);
            tc_load<HS, BC>(Vs + (buf ^ 1) * BC * LD, vh, g.v_r, j0 + BC, kend);
            tri_cp_async_commit();
            tri_cp_async_wait_group<1>();
        } else {
            tri_cp_async_wait_group<0>();
        }
        __syncthreads(); /* every thread's copies of this tile are in */
        if (active && j0 <= wlast) {
            const tri_cu_bf16 *Kb = Ks + buf * BC * LD, *Vb = Vs + buf * BC * LD;
            if (kt == 0) {
                FA_UNROLL
                for (int ks = 0; ks < HS / 16; ks++) tri_ldmatrix_x4(qf[ks], lm_a(Qs, LD, 16 * warp, 16 * ks, lane));
            }
            float s[BC / 8][4];
            FA_UNROLL
            for (int nt = 0; nt < BC / 8; nt++) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
            FA_UNROLL
            for (int ks = 0; ks < HS / 16; ks++) {
                FA_UNROLL
                for (int np = 0; np < BC / 16; np++) {
                    uint32_t kb[4];
                    tri_ldmatrix_x4(kb, lm_b(Kb, LD, 16 * np, 16 * ks, lane));
                    mma2(s[2 * np], s[2 * np + 1], qf[ks], kb);
                }
            }
            /* scores in base 2, the causal mask where the tile reaches past
             * the warp's first row (without the mask: the keys past Tk) */
            const bool diag = g.nomask ? j0 + BC > g.Tk : j0 + BC - 1 > g.q0 + r0;
            float mx[2] = {-INFINITY, -INFINITY};
            FA_UNROLL
            for (int nt = 0; nt < BC / 8; nt++) {
                FA_UNROLL
                for (int e = 0; e < 4; e++) {
                    const int j = j0 + nt * 8 + 2 * tq + (e & 1);
                    float x = s[nt][e] * sl2;
                    if (diag && (g.nomask ? j >= g.Tk : j > (e < 2 ? pa : pb))) x = -INFINITY;
                    s[nt][e] = x;
                    mx[e >> 1] = fmaxf(mx[e >> 1], x);
                }
            }
            /* online softmax: the tile's max over the 4 lanes of a row, the
             * rescale of l and O; key 0 is in the first tile and seen by
             * every row, so m is finite from there on (a row that sees
             * nothing of a later tile keeps m, and its p are 0) */
            float corr[2], rs[2] = {0.0f, 0.0f};
            FA_UNROLL
            for (int r = 0; r < 2; r++) {
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(FULL_MASK, mx[r], 1));
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(FULL_MASK, mx[r], 2));
                const float mn = fmaxf(m[r], mx[r]);
                corr[r] = exp2f(m[r] - mn);
                m[r] = mn;
            }
            FA_UNROLL
            for (int nt = 0; nt < BC / 8; nt++) {
                FA_UNROLL
                for (int e = 0; e < 4; e++) {
                    const float p = exp2f(s[nt][e] - m[e >> 1]);
                    s[nt][e] = p;
                    rs[e >> 1] += p;
                }
            }
            l[0] = l[0] * corr[0] + rs[0];
            l[1] = l[1] * corr[1] + rs[1];
            FA_UNROLL
            for (int nt = 0; nt < HS / 8; nt++) {
                o[nt][0] *= corr[0], o[nt][1] *= corr[0];
                o[nt][2] *= corr[1], o[nt][3] *= corr[1];
            }
            /* O += P V, P from registers */
            FA_UNROLL
            for (int kk = 0; kk < BC / 16; kk++) {
                uint32_t pf[4];
                c_to_a(pf, s[2 * kk], s[2 * kk + 1]);
                FA_UNROLL
                for (int dp = 0; dp < HS / 16; dp++) {
                    uint32_t vb[4];
                    tri_ldmatrix_x4_trans(vb, lm_a(Vb, LD, 16 * kk, 16 * dp, lane));
                    mma2(o[2 * dp], o[2 * dp + 1], pf, vb);
                }
            }
        }
        __syncthreads(); /* before the buffer is refilled */
    }
    if (active) {
        FA_UNROLL
        for (int r = 0; r < 2; r++) {
            l[r] += __shfl_xor_sync(FULL_MASK, l[r], 1);
            l[r] += __shfl_xor_sync(FULL_MASK, l[r], 2);
        }
        const float inv0 = 1.0f / l[0], inv1 = 1.0f / l[1];
        FA_UNROLL
        for (int nt = 0; nt < HS / 8; nt++) o[nt][0] *= inv0, o[nt][1] *= inv0, o[nt][2] *= inv1, o[nt][3] *= inv1;
        const int ia = r0 + (lane >> 2), ib = ia + 8;
        if (o32 == nullptr) {
            store_rows<HS>(out + b * g.o_b + h * HS, g.o_r, o, 1.0f, r0, Tq, lane);
            if (tq == 0 && ia < Tq) lse[(size_t)bh * Tq + ia] = m[0] * FA_LN2 + logf(l[0]);
            if (tq == 0 && ib < Tq) lse[(size_t)bh * Tq + ib] = m[1] * FA_LN2 + logf(l[1]);
        } else { /* ring attention: fp32, merged into the running output by log-sum-exp */
            float *L = lse + (size_t)bh * g.lse_T, *ob = o32 + b * g.o_b + h * HS;
            float lb[2] = {m[0] * FA_LN2 + logf(l[0]), m[1] * FA_LN2 + logf(l[1])}, wa[2] = {0.0f, 0.0f},
                  wb[2] = {1.0f, 1.0f};
            const int rows[2] = {ia, ib};
            if (g.merge) {
                FA_UNROLL
                for (int r = 0; r < 2; r++) {
                    const float la = rows[r] < Tq ? L[rows[r]] : 0.0f, mx = fmaxf(la, lb[r]);
                    const float ln = mx + logf(expf(la - mx) + expf(lb[r] - mx));
                    wa[r] = expf(la - ln), wb[r] = expf(lb[r] - ln), lb[r] = ln;
                }
                __syncwarp(FULL_MASK); /* every lane has read its rows' lse before one of them is written */
            }
            const int c = 2 * tq;
            FA_UNROLL
            for (int nt = 0; nt < HS / 8; nt++) {
                FA_UNROLL
                for (int r = 0; r < 2; r++) {
                    if (rows[r] >= Tq) continue;
                    float *d = ob + (size_t)rows[r] * g.o_r + nt * 8 + c;
                    const float x0 = o[nt][2 * r] * wb[r], x1 = o[nt][2 * r + 1] * wb[r];
                    d[0] = g.merge ? d[0] * wa[r] + x0 : x0;
                    d[1] = g.merge ? d[1] * wa[r] + x1 : x1;
                }
            }
            if (tq == 0 && ia < Tq) L[ia] = lb[0];
            if (tq == 0 && ib < Tq) L[ib] = lb[1];
        }
    }
}

/* Grid (B NH, query tiles), the tiles in reverse (the longest first). */
template <int HS>
KERNEL fa_tc_fwd_kernel(tri_cu_bf16 *out, float *o32, float *lse, const tri_cu_bf16 *q, const tri_cu_bf16 *k,
                        const tri_cu_bf16 *v, fa_geom g) {
    DYN_SMEM(fa_chunk, smem);
    constexpr int BR = fa_tc<HS>::BR;
    const int tiles = (g.Tq + BR - 1) / BR;
    const int bh = blockIdx.x; /* grid.x is B NH */
    for (int y = blockIdx.y; y < tiles; y += gridDim.y)
        fa_tc_fwd_tile<HS>(reinterpret_cast<tri_cu_bf16 *>(smem), out, o32, lse, q, k, v, g, bh, (tiles - 1 - y) * BR);
}

/* ---- backward: dk, dv ---- */

/* Keys [j0, j0 + BK) of (batch, key/value head) bkv, over the query heads
 * of its group. */
template <int HS>
DEVFN void fa_tc_dkdv_tile(tri_cu_bf16 *sm, tri_cu_bf16 *dk, tri_cu_bf16 *dv, float *dk32, float *dv32,
                           const tri_cu_bf16 *dout, const tri_cu_bf16 *q, const tri_cu_bf16 *k, const tri_cu_bf16 *v,
                           const float *lse, const float *delta, const fa_geom &g, int bkv, int j0) {
    typedef fa_tc<HS> F;
    constexpr int LD = F::LD, BK = F::BK, BQ = F::BQK;
    /* Ks, Vs [BK][LD]; Qs, dOs [2][BQ][LD]; Ls (lse log2 e), Ds (delta) [2][BQ] */
    tri_cu_bf16 *Ks = sm, *Vs = Ks + BK * LD, *Qs = Vs + BK * LD, *dOs = Qs + 2 * BQ * LD;
    float *Ls = reinterpret_cast<float *>(dOs + 2 * BQ * LD), *Ds = Ls + 2 * BQ;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, tq = lane & 3, Tq = g.Tq;
    const size_t b = (unsigned)bkv / (unsigned)g.NKV, kvh = (unsigned)bkv % (unsigned)g.NKV;
    const tri_cu_bf16 *kh = k + b * g.k_b + kvh * HS, *vh = v + b * g.v_b + kvh * HS;
    const int kw = j0 + 16 * warp; /* the warp's first key */
    const bool active = kw < g.Tk;
    const int ka = kw + (lane >> 2), kb = ka + 8; /* this lane's two keys */
    const int first = !g.nomask && j0 > g.q0 ? j0 - g.q0 : 0; /* the first query that sees key j0 */
    /* the pipeline's steps: (query head of the group, query tile) pairs, the
     * head major; per head the tiles it0 .. it0 + per - 1 */
    const int it0 = first / BQ, per = (Tq + BQ - 1) / BQ - it0, nit = per > 0 ? per * g.G : 0;
    const float sl2 = g.scale * FA_LOG2E;
    auto stage = [&](int it, int buf) { /* step it's query tile into buffer buf */
                                        const int qt = it0 + it % per;
                                        const size_t bh = b * (size_t)g.NH + kvh * (size_t)g.G + (size_t)(it / per);
                                        const size_t h = bh - b * (size_t)g.NH;
                                        tc_load<HS, BQ>(Qs + buf * BQ * LD, q + b * g.q_b + h * HS, g.q_r, qt * BQ, Tq);
                                        tc_load<HS, BQ>(dOs + buf * BQ * LD, dout + b * g.do_b + h * HS, g.do_r,
                                                        qt * BQ, Tq);
                                        const float *L = lse + bh * g.lse_T, *D = delta + bh * Tq;
                                        for (int r = threadIdx.x; r < BQ; r += TC_THREADS) {
                                            const int i = qt * BQ + r;
                                            Ls[buf * BQ + r] = i < Tq ? L[i] * FA_LOG2E : 0.0f;
                                            Ds[buf * BQ + r] = i < Tq ? D[i] : 0.0f;
                                        }
    };

    __syncthreads(); /* the block's previous tile is used up */
    if (nit > 0) {
        tc_load<HS, BK>(Ks, kh, g.k_r, j0, g.Tk);
        tc_load<HS, BK>(Vs, vh, g.v_r, j0, g.Tk);
        stage(0, 0);
        tri_cp_async_commit();
    }
    float dka[HS / 8][4], dva[HS / 8][4];
    FA_UNROLL
    for (int nt = 0; nt < HS / 8; nt++) {
        FA_UNROLL
        for (int e = 0; e < 4; e++) dka[nt][e] = dva[nt][e] = 0.0f;
    }
    for (int it = 0; it < nit; it++) {
        const int buf = it & 1, i0 = (it0 + it % per) * BQ;
        if (it + 1 < nit) {
            stage(it + 1, buf ^ 1);
            tri_cp_async_commit();
            tri_cp_async_wait_group<1>();
        } else {
            tri_cp_async_wait_group<0>();
        }
        __syncthreads(); /* every thread's copies and stores of this tile are in */
        const int ilast = (i0 + BQ < Tq ? i0 + BQ : Tq) - 1;
        if (active && (g.nomask || kw <= g.q0 + ilast)) { /* some query of the tile sees the warp's first key */
            const tri_cu_bf16 *Qb = Qs + buf * BQ * LD, *dOb = dOs + buf * BQ * LD;
            const float *Lb = Ls + buf * BQ, *Db = Ds + buf * BQ;
            float s[BQ / 8][4], dp[BQ / 8][4];
            FA_UNROLL
            for (int nt = 0; nt < BQ / 8; nt++) {
                FA_UNROLL
                for (int e = 0; e < 4; e++) s[nt][e] = dp[nt][e] = 0.0f;
            }
            /* S^T = K Q^T, dP^T = V dout^T (rows: the warp's 16 keys; the
             * k loop rolled: it indexes no register array) */
            FA_ROLLED
            for (int ks = 0; ks < HS / 16; ks++) {
                uint32_t kf[4], vf[4];
                tri_ldmatrix_x4(kf, lm_a(Ks, LD, 16 * warp, 16 * ks, lane));
                tri_ldmatrix_x4(vf, lm_a(Vs, LD, 16 * warp, 16 * ks, lane));
                FA_UNROLL
                for (int np = 0; np < BQ / 16; np++) {
                    uint32_t qb[4], ob[4];
                    tri_ldmatrix_x4(qb, lm_b(Qb, LD, 16 * np, 16 * ks, lane));
                    mma2(s[2 * np], s[2 * np + 1], kf, qb);
                    tri_ldmatrix_x4(ob, lm_b(dOb, LD, 16 * np, 16 * ks, lane));
                    mma2(dp[2 * np], dp[2 * np + 1], vf, ob);
                }
            }
            /* P^T and dS^T (in s and dp): query i0 + c sees key j if j <= q0 + i0 + c */
            FA_UNROLL
            for (int nt = 0; nt < BQ / 8; nt++) {
                FA_UNROLL
                for (int e = 0; e < 4; e++) {
                    const int c = nt * 8 + 2 * tq + (e & 1), i = i0 + c;
                    const int key = e < 2 ? ka : kb;
                    const bool seen = i < Tq && (g.nomask ? key < g.Tk : key <= g.q0 + i);
                    const float p = seen ? exp2f(s[nt][e] * sl2 - Lb[c]) : 0.0f;
                    s[nt][e] = p;
                    dp[nt][e] = p * (dp[nt][e] - Db[c]);
                }
            }
            /* dV += P^T dout, dK += dS^T Q (A from registers, B by ldmatrix.trans) */
            FA_UNROLL
            for (int kk = 0; kk < BQ / 16; kk++) {
                uint32_t pf[4], sf[4];
                c_to_a(pf, s[2 * kk], s[2 * kk + 1]);
                c_to_a(sf, dp[2 * kk], dp[2 * kk + 1]);
                FA_UNROLL
                for (int dd = 0; dd < HS / 16; dd++) {
                    uint32_t ob[4];
                    tri_ldmatrix_x4_trans(ob, lm_a(dOb, LD, 16 * kk, 16 * dd, lane));
                    mma2(dva[2 * dd], dva[2 * dd + 1], pf, ob);
                }
                FA_UNROLL
                for (int dd = 0; dd < HS / 16; dd++) {
                    uint32_t qb[4];
                    tri_ldmatrix_x4_trans(qb, lm_a(Qb, LD, 16 * kk, 16 * dd, lane));
                    mma2(dka[2 * dd], dka[2 * dd + 1], sf, qb);
                }
            }
        }
        __syncthreads(); /* before the buffer is refilled */
    }
    if (active && dk32 != nullptr) { /* ring attention: added to the fp32 gradients */
        add_rows_f32<HS>(dk32 + b * g.dk_b + kvh * HS, g.dk_r, dka, g.scale, kw, g.Tk, lane);
        add_rows_f32<HS>(dv32 + b * g.dv_b + kvh * HS, g.dv_r, dva, 1.0f, kw, g.Tk, lane);
    } else if (active) { /* every key below Tk, zeros for the keys no query sees */
        store_rows<HS>(dk + b * g.dk_b + kvh * HS, g.dk_r, dka, g.scale, kw, g.Tk, lane);
        store_rows<HS>(dv + b * g.dv_b + kvh * HS, g.dv_r, dva, 1.0f, kw, g.Tk, lane);
    }
}

template <int HS>
KERNEL fa_tc_dkdv_kernel(tri_cu_bf16 *dk, tri_cu_bf16 *dv, float *dk32, float *dv32, const tri_cu_bf16 *dout,
                         const tri_cu_bf16 *q, const tri_cu_bf16 *k, const tri_cu_bf16 *v, const float *lse,
                         const float *delta, fa_geom g) {
    DYN_SMEM(fa_chunk, smem);
    constexpr int BK = fa_tc<HS>::BK;
    const int tiles = (g.Tk + BK - 1) / BK;
    const int bkv = blockIdx.x; /* grid.x is B NKV */
    for (int y = blockIdx.y; y < tiles; y += gridDim.y)
        fa_tc_dkdv_tile<HS>(reinterpret_cast<tri_cu_bf16 *>(smem), dk, dv, dk32, dv32, dout, q, k, v, lse, delta, g, bkv,
                            y * BK);
}

/* ---- backward: dq ---- */

/* Queries [i0, i0 + BR) of (batch, head) bh. */
template <int HS>
DEVFN void fa_tc_dq_tile(tri_cu_bf16 *sm, tri_cu_bf16 *dq, float *dq32, const tri_cu_bf16 *dout, const tri_cu_bf16 *q,
                         const tri_cu_bf16 *k, const tri_cu_bf16 *v, const float *lse, const float *delta,
                         const fa_geom &g, int bh, int i0) {
    typedef fa_tc<HS> F;
    constexpr int LD = F::LD, BR = F::BR, BC = F::BKQ;
    /* Qs, dOs [BR][LD]; Ks, Vs [2][BC][LD] */
    tri_cu_bf16 *Qs = sm, *dOs = Qs + BR * LD, *Ks = dOs + BR * LD, *Vs = Ks + 2 * BC * LD;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, tq = lane & 3, Tq = g.Tq;
    const size_t b = (unsigned)bh / (unsigned)g.NH, h = (unsigned)bh % (unsigned)g.NH, kvh = fa_kvh(g, h);
    const tri_cu_bf16 *qh = q + b * g.q_b + h * HS, *kh = k + b * g.k_b + kvh * HS, *vh = v + b * g.v_b + kvh * HS;
    const tri_cu_bf16 *dOh = dout + b * g.do_b + h * HS;
    const int last = (i0 + BR < Tq ? i0 + BR : Tq) - 1;
    const int kend = g.nomask ? g.Tk : g.q0 + last + 1;
    const int nkt = (kend + BC - 1) / BC;
    const int r0 = i0 + 16 * warp;
    const bool active = r0 < Tq;
    const int wlast = g.nomask ? g.Tk - 1 : g.q0 + (r0 + 15 < Tq ? r0 + 15 : Tq - 1);
    const int ia = r0 + (lane >> 2), ib = ia + 8, pa = g.q0 + ia, pb = g.q0 + ib;
    const float sl2 = g.scale * FA_LOG2E;
    const float *L = lse + (size_t)bh * g.lse_T, *D = delta + (size_t)bh * Tq;
    const float La = ia < Tq ? L[ia] * FA_LOG2E : 0.0f, Lb = ib < Tq ? L[ib] * FA_LOG2E : 0.0f;
    const float Da = ia < Tq ? D[ia] : 0.0f, Db = ib < Tq ? D[ib] : 0.0f;

    __syncthreads(); /* the block's previous tile is used up */
    tc_load<HS, BR>(Qs, qh, g.q_r, i0, Tq);
    tc_load<HS, BR>(dOs, dOh, g.do_r, i0, Tq);
    tc_load<HS, BC>(Ks, kh, g.k_r, 0, kend);
    tc_load<HS, BC>(Vs, vh, g.v_r, 0, kend);
    tri_cp_async_commit();

    float dqa[HS / 8][4];
    FA_UNROLL
    for (int nt = 0; nt < HS / 8; nt++) dqa[nt][0] = dqa[nt][1] = dqa[nt][2] = dqa[nt][3] = 0.0f;
    for (int kt = 0; kt < nkt; kt++) {
        const int buf = kt & 1, j0 = kt * BC;
        if (kt + 1 < nkt) {
            tc_load<HS, BC>(Ks + (buf ^ 1) * BC * LD, kh, g.k_r, j0 + BC, kend);
            tc_load<HS, BC>(Vs + (buf ^ 1) * BC * LD, vh, g.v_r, j0 + BC, kend);
            tri_cp_async_commit();
            tri_cp_async_wait_group<1>();
        } else {
            tri_cp_async_wait_group<0>();
        }
        __syncthreads();
        if (active && j0 <= wlast) {
            const tri_cu_bf16 *Kb = Ks + buf * BC * LD, *Vb = Vs + buf * BC * LD;
            float s[BC / 8][4], dp[BC / 8][4];
            FA_UNROLL
            for (int nt = 0; nt < BC / 8; nt++) {
                FA_UNROLL
                for (int e = 0; e < 4; e++) s[nt][e] = dp[nt][e] = 0.0f;
            }
            /* S = Q K^T, dP = dout V^T; the A fragments of Q and dout from
             * shared memory at every k step (in registers they would take
             * HS regs of the 255 that dQ, S and dP need; the k loop rolled) */
            FA_ROLLED
            for (int ks = 0; ks < HS / 16; ks++) {
                uint32_t qf[4], df[4];
                tri_ldmatrix_x4(qf, lm_a(Qs, LD, 16 * warp, 16 * ks, lane));
                tri_ldmatrix_x4(df, lm_a(dOs, LD, 16 * warp, 16 * ks, lane));
                FA_UNROLL
                for (int np = 0; np < BC / 16; np++) {
                    uint32_t kb4[4], vb4[4];
                    tri_ldmatrix_x4(kb4, lm_b(Kb, LD, 16 * np, 16 * ks, lane));
                    mma2(s[2 * np], s[2 * np + 1], qf, kb4);
                    tri_ldmatrix_x4(vb4, lm_b(Vb, LD, 16 * np, 16 * ks, lane));
                    mma2(dp[2 * np], dp[2 * np + 1], df, vb4);
                }
            }
            /* dS (in dp) */
            FA_UNROLL
            for (int nt = 0; nt < BC / 8; nt++) {
                FA_UNROLL
                for (int e = 0; e < 4; e++) {
                    const int j = j0 + nt * 8 + 2 * tq + (e & 1);
                    const bool seen = g.nomask ? j < g.Tk : j <= (e < 2 ? pa : pb);
                    const float p = seen ? exp2f(s[nt][e] * sl2 - (e < 2 ? La : Lb)) : 0.0f;
                    dp[nt][e] = p * (dp[nt][e] - (e < 2 ? Da : Db));
                }
            }
            /* dQ += dS K (K (k, n) row-major: .trans) */
            FA_UNROLL
            for (int kk = 0; kk < BC / 16; kk++) {
                uint32_t sf[4];
                c_to_a(sf, dp[2 * kk], dp[2 * kk + 1]);
                FA_UNROLL
                for (int dd = 0; dd < HS / 16; dd++) {
                    uint32_t kb4[4];
                    tri_ldmatrix_x4_trans(kb4, lm_a(Kb, LD, 16 * kk, 16 * dd, lane));
                    mma2(dqa[2 * dd], dqa[2 * dd + 1], sf, kb4);
                }
            }
        }
        __syncthreads(); /* before the buffer is refilled */
    }
    if (active && dq32 != nullptr)
        add_rows_f32<HS>(dq32 + b * g.dq_b + h * HS, g.dq_r, dqa, g.scale, r0, Tq, lane);
    else if (active)
        store_rows<HS>(dq + b * g.dq_b + h * HS, g.dq_r, dqa, g.scale, r0, Tq, lane);
}

template <int HS>
KERNEL fa_tc_dq_kernel(tri_cu_bf16 *dq, float *dq32, const tri_cu_bf16 *dout, const tri_cu_bf16 *q,
                       const tri_cu_bf16 *k, const tri_cu_bf16 *v, const float *lse, const float *delta, fa_geom g) {
    DYN_SMEM(fa_chunk, smem);
    constexpr int BR = fa_tc<HS>::BR;
    const int tiles = (g.Tq + BR - 1) / BR;
    const int bh = blockIdx.x; /* grid.x is B NH */
    for (int y = blockIdx.y; y < tiles; y += gridDim.y)
        fa_tc_dq_tile<HS>(reinterpret_cast<tri_cu_bf16 *>(smem), dq, dq32, dout, q, k, v, lse, delta, g, bh,
                          (tiles - 1 - y) * BR);
}

/* ---- launchers (attention.cuh) ---- */

template <int HS>
static void tc_fwd(void *stream, tri_cu_bf16 *out, float *o32, float *lse, const tri_cu_bf16 *q, const tri_cu_bf16 *k,
                   const tri_cu_bf16 *v, const fa_geom &g) {
    typedef fa_tc<HS> F;
    const dim3 grid = fa_grid(g.BNH, tri_cu_blocks((size_t)g.Tq, F::BR));
    FA_SMEM_OPTIN(fa_tc_fwd_kernel<HS>, F::fwd_smem);
    LAUNCH(fa_tc_fwd_kernel<HS>, grid, TC_THREADS, F::fwd_smem, stream, out, o32, lse, q, k, v, g);
}

template <int HS>
static void tc_bwd(void *stream, tri_cu_bf16 *dq, tri_cu_bf16 *dk, tri_cu_bf16 *dv, float *dq32, float *dk32,
                   float *dv32, const tri_cu_bf16 *dout, const tri_cu_bf16 *q, const tri_cu_bf16 *k,
                   const tri_cu_bf16 *v, const float *lse, const float *delta, const fa_geom &g) {
    typedef fa_tc<HS> F;
    const dim3 grid_kv = fa_grid(g.BNKV, tri_cu_blocks((size_t)g.Tk, F::BK));
    const dim3 grid_q = fa_grid(g.BNH, tri_cu_blocks((size_t)g.Tq, F::BR));
    FA_SMEM_OPTIN(fa_tc_dkdv_kernel<HS>, F::dkdv_smem);
    LAUNCH(fa_tc_dkdv_kernel<HS>, grid_kv, TC_THREADS, F::dkdv_smem, stream, dk, dv, dk32, dv32, dout, q, k, v, lse,
           delta, g);
    FA_SMEM_OPTIN(fa_tc_dq_kernel<HS>, F::dq_smem);
    LAUNCH(fa_tc_dq_kernel<HS>, grid_q, TC_THREADS, F::dq_smem, stream, dq, dq32, dout, q, k, v, lse, delta, g);
}

void TRI_CU(attention_tc_fwd)(void *stream, tri_cu_bf16 *out, float *o32, float *lse, const tri_cu_bf16 *q,
                              const tri_cu_bf16 *k, const tri_cu_bf16 *v, const fa_geom &g) {
    if (g.HS == 64)
        tc_fwd<64>(stream, out, o32, lse, q, k, v, g);
    else if (g.HS == 128)
        tc_fwd<128>(stream, out, o32, lse, q, k, v, g);
    else
        tri_cu_fail("attention_tc_fwd", "head size neither 64 nor 128", __FILE__, __LINE__);
}

void TRI_CU(attention_tc_bwd)(void *stream, tri_cu_bf16 *dq, tri_cu_bf16 *dk, tri_cu_bf16 *dv, float *dq32, float *dk32,
                              float *dv32, const tri_cu_bf16 *dout, const tri_cu_bf16 *q, const tri_cu_bf16 *k,
                              const tri_cu_bf16 *v, const float *lse, const float *delta, const fa_geom &g) {
    if (g.HS == 64)
        tc_bwd<64>(stream, dq, dk, dv, dq32, dk32, dv32, dout, q, k, v, lse, delta, g);
    else if (g.HS == 128)
        tc_bwd<128>(stream, dq, dk, dv, dq32, dk32, dv32, dout, q, k, v, lse, delta, g);
    else
        tri_cu_fail("attention_tc_bwd", "head size neither 64 nor 128", __FILE__, __LINE__);
}
