/* Causal multi-head self-attention on CUDA, flash-style: the host entry
 * points, their dispatch, the delta kernel of the backward and the SIMT
 * kernels (fp32 or bf16 storage, any head size: the reference). The
 * tensor-core kernels (bf16, head size 64 or 128) are in attention_tc.cu.
 * Contracts: attention_fwd / attention_bwd in kernels/ops.h, the entry points
 * (and the strided views of attention_{fwd,bwd}_slice) in kernels/cuda/kernels.h.
 * The (T, T) probabilities are never stored: the forward keeps one
 * log-sum-exp per query row (the saved state, (B, NH, Tq)), the backward
 * recomputes the probabilities from q, k and it.
 *
 * Layouts of the op (C = NH * HS, W = (NH + 2 NKV) * HS, G = NH / NKV), as
 * kernels/cpu/attention.c:
 *   qkv  (B, T, NH + 2 NKV, HS): q of head h at h*HS, its key/value head
 *        h / G's k at C + (h/G)*HS and v at C + (NKV + h/G)*HS (NKV = NH:
 *        (B, T, 3, NH, HS));
 *   out  (B, T, NH, HS);  lse (B, NH, T): log sum_{j<=i} exp(s_ij),
 *   s_ij = q_i . k_j / sqrt(HS).
 * attention_fwd / attention_bwd are the slice entry points on that layout:
 * views q (NH heads), k, v (NKV heads each) of qkv (row W, batch TW), out and
 * dout (row C), the whole sequence (q0 = 0, Tq = Tk = T).
 * Grouped-query attention reads key/value head h / G for query head h, in
 * place; the dk/dv kernels (SIMT and tensor-core) take a block per (batch,
 * key/value head, key tile) and add the G query heads of the group into
 * their accumulators one after the other, in order: no atomics, no copies.
 *
 * Dispatch (attention_*_slice): bf16 storage, HS 64 or 128, every view
 * 16-byte aligned with strides that are multiples of 8 elements: the
 * tensor-core kernels; anything else (fp32, other head sizes, odd views):
 * the SIMT kernels below.
 *
 * SIMT kernels. Work: a block of FA_TILE threads per (batch and head, tile of
 * FA_TILE rows); each thread owns one row (a query in the forward and in dq, a
 * key in dk/dv) and keeps its vectors in shared memory with a padded stride
 * (HS + 1: no bank conflicts between the threads' rows); the other side's
 * tiles are loaded together and read by all threads at the same address
 * (broadcast). Tensors are widened to fp32 as they are loaded (tri_cu_ld) and
 * each output is rounded once as it is stored (tri_cu_st).
 * Forward: online softmax over key tiles: per tile the row's scores, their
 * max, one rescale of the running sum and output, then the tile's p * v.
 * Backward, three launches and no atomics (every output element is written
 * by one thread, in a fixed order: deterministic):
 *   1. delta_i = dout_i . out_i   (into scratch, (B, NH, Tq));
 *   2. per key j: dv_j = sum_{i sees j} p_ij dout_i,  dk_j = scale sum_i ds_ij q_i
 *      (i over the queries of every query head of j's group);
 *   3. per query i: dq_i = scale sum_{j <= q0 + i} ds_ij k_j;
 * with p_ij = exp(s_ij - lse_i), ds_ij = p_ij (dout_i . v_j - delta_i).
 * Shared memory grows with HS: 4 * 32 * (4 HS + 2) bytes in the forward,
 * 4 * 32 * (6 HS + 6) in the dk/dv kernel; beyond 48 KiB the kernels ask for
 * the opt-in limit (HS <= 128 fits every sm_80 / sm_90 part).
 * Grids: x over the B * NH (batch, head) pairs (B * NKV for dk/dv), y over
 * the row tiles, each capped at its limit with grid-stride loops beyond
 * (attention.cuh). */
#include <limits.h>
#include <math.h>

#include "kernels/cuda/common.cuh"

#include "kernels/cuda/attention.cuh"

enum { FA_TILE = 32, FA_DELTA_THREADS = 128 };

/* Rows [r0, r0 + FA_TILE) of a strided (rows, HS) slab (row stride ld) into
 * dst (row stride dst_ld), rows at or past nrows as zeros; all threads of the
 * block take part. */
template <typename S>
DEVFN void fa_load_tile(float *dst, int dst_ld, const S *src, size_t ld, int r0, int nrows, int HS) {
    for (int idx = threadIdx.x; idx < FA_TILE * HS; idx += blockDim.x) {
        const int r = idx / HS, d = idx % HS;
        dst[r * dst_ld + d] = r0 + r < nrows ? tri_cu_ld(src, (size_t)(r0 + r) * ld + d) : 0.0f;
    }
}

DEVFN float fa_dot(const float *a, const float *b, int HS) {
    float s = 0.0f;
    for (int d = 0; d < HS; d++) s += a[d] * b[d];
    return s;
}

/* One forward tile: queries [i0, i0 + FA_TILE) of (batch, head) bh. */
template <typename S>
DEVFN void fa_fwd_tile(float *smem, S *out, float *lse, const S *q, const S *k, const S *v, const fa_geom &g, size_t bh,
                       int i0) {
    const int HS = g.HS, tid = threadIdx.x, i = i0 + tid, Tq = g.Tq;
    const size_t b = bh / (size_t)g.NH, h = bh % (size_t)g.NH;
    const int P = HS + 1; /* padded stride of the rows a thread owns */
    float *Qs = smem, *Os = Qs + FA_TILE * P, *Ks = Os + FA_TILE * P, *Vs = Ks + FA_TILE * HS;
    const size_t kvh = fa_kvh(g, h);
    const S *qh = q + b * g.q_b + h * HS, *kh = k + b * g.k_b + kvh * HS, *vh = v + b * g.v_b + kvh * HS;
    __syncthreads(); /* the block's previous tile is used up */
    fa_load_tile(Qs, P, qh, g.q_r, i0, Tq, HS);
    float *o = Os + tid * P;
    for (int d = 0; d < HS; d++) o[d] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    const int pos = g.q0 + i;                                        /* this row's position */
    const int jend = g.q0 + (i0 + FA_TILE < Tq ? i0 + FA_TILE : Tq); /* keys this tile's rows may see */
    for (int j0 = 0; j0 < jend; j0 += FA_TILE) {
        __syncthreads(); /* the previous tile's keys are used up (and Qs is loaded) */
        fa_load_tile(Ks, HS, kh, g.k_r, j0, g.Tk, HS);
        fa_load_tile(Vs, HS, vh, g.v_r, j0, g.Tk, HS);
        __syncthreads();
        if (i < Tq) {
            float s[FA_TILE];
            float mt = -INFINITY;
            FA_UNROLL
            for (int jj = 0; jj < FA_TILE; jj++) {
                s[jj] = j0 + jj <= pos ? fa_dot(Qs + tid * P, Ks + jj * HS, HS) * g.scale : -INFINITY;
                mt = s[jj] > mt ? s[jj] : mt;
            }
            /* the first tile holds key 0, which every row sees: m is finite
             * from then on, and a tile this row sees nothing of (a query
             * slice that starts inside a tile) leaves it as it is */
            const float mn = mt > m ? mt : m, corr = expf(m - mn);
            float ls = 0.0f;
            FA_UNROLL
            for (int jj = 0; jj < FA_TILE; jj++) {
                s[jj] = expf(s[jj] - mn);
                ls += s[jj];
            }
            l = l * corr + ls;
            for (int d = 0; d < HS; d++) {
                float a = o[d] * corr;
                FA_UNROLL
                for (int jj = 0; jj < FA_TILE; jj++) a += s[jj] * Vs[jj * HS + d];
                o[d] = a;
            }
            m = mn;
        }
    }
    if (i < Tq) {
        const float inv = 1.0f / l;
        const size_t dst = b * g.o_b + (size_t)i * g.o_r + h * HS;
        for (int d = 0; d < HS; d++) tri_cu_st(out, dst + d, o[d] * inv);
        lse[bh * Tq + i] = m + logf(l);
    }
}

template <typename S> KERNEL fa_fwd_kernel(S *out, float *lse, const S *q, const S *k, const S *v, fa_geom g) {
    DYN_SMEM(float, smem);
    const int tiles = (g.Tq + FA_TILE - 1) / FA_TILE;
    const size_t bh = blockIdx.x; /* grid.x is B NH */
    for (int y = blockIdx.y; y < tiles; y += gridDim.y) fa_fwd_tile(smem, out, lse, q, k, v, g, bh, y * FA_TILE);
}

/* delta (B, NH, Tq): row (bh, i) = dout_i . out_i, a thread per row. */
template <typename S> KERNEL fa_delta_kernel(float *delta, const S *dout, const S *out, fa_geom g) {
    const size_t rows = (size_t)g.BNH * (size_t)g.Tq;
    for (size_t r = (size_t)blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += (size_t)gridDim.x * blockDim.x) {
        const size_t bh = r / (size_t)g.Tq, i = r % (size_t)g.Tq, b = bh / (size_t)g.NH, h = bh % (size_t)g.NH;
        const S *dO = dout + b * g.do_b + i * g.do_r + h * g.HS, *o = out + b * g.o_b + i * g.o_r + h * g.HS;
        float s = 0.0f;
        for (int d = 0; d < g.HS; d++) s += tri_cu_ld(dO, d) * tri_cu_ld(o, d);
        delta[r] = s;
    }
}

/* One dk/dv tile: keys [j0, j0 + FA_TILE) of (batch, key/value head) bkv,
 * summed over the query heads of its group in order. */
template <typename S>
DEVFN void fa_bwd_dkdv_tile(float *smem, S *dk, S *dv, const S *dout, const S *q, const S *k, const S *v,
                            const float *lse, const float *delta, const fa_geom &g, size_t bkv, int j0) {
    const int HS = g.HS, tid = threadIdx.x, j = j0 + tid, Tq = g.Tq;
    const size_t b = bkv / (size_t)g.NKV, kvh = bkv % (size_t)g.NKV;
    const int P = HS + 1;
    float *Ks = smem, *Vs = Ks + FA_TILE * P, *dKs = Vs + FA_TILE * P, *dVs = dKs + FA_TILE * P;
    float *Qs = dVs + FA_TILE * P, *dOs = Qs + FA_TILE * HS, *Ls = dOs + FA_TILE * HS, *Ds = Ls + FA_TILE;
    const S *kh = k + b * g.k_b + kvh * HS, *vh = v + b * g.v_b + kvh * HS;
    __syncthreads(); /* the block's previous tile is used up */
    fa_load_tile(Ks, P, kh, g.k_r, j0, g.Tk, HS);
    fa_load_tile(Vs, P, vh, g.v_r, j0, g.Tk, HS);
    float *dkj = dKs + tid * P, *dvj = dVs + tid * P;
    for (int d = 0; d < HS; d++) dkj[d] = dvj[d] = 0.0f;
    for (int hg = 0; hg < g.G; hg++) {
        const size_t h = kvh * (size_t)g.G + (size_t)hg, bh = b * (size_t)g.NH + h;
        const S *qh = q + b * g.q_b + h * HS, *dO = dout + b * g.do_b + h * HS;
        const float *L = lse + bh * Tq, *D = delta + bh * Tq;
        /* the first query that sees key j0: position j0, view row j0 - q0 */
        for (int i0 = j0 > g.q0 ? j0 - g.q0 : 0; i0 < Tq; i0 += FA_TILE) {
            __syncthreads(); /* the previous query tile is used up (and Ks, Vs are loaded) */
            fa_load_tile(Qs, HS, qh, g.q_r, i0, Tq, HS);
            fa_load_tile(dOs, HS, dO, g.do_r, i0, Tq, HS);
            if (tid < FA_TILE) {
                Ls[tid] = i0 + tid < Tq ? L[i0 + tid] : 0.0f;
                Ds[tid] = i0 + tid < Tq ? D[i0 + tid] : 0.0f;
            }
            __syncthreads();
            if (j < g.Tk) {
                const float *kj = Ks + tid * P, *vj = Vs + tid * P;
                for (int ii = 0; ii < FA_TILE; ii++) {
                    const int i = i0 + ii;
                    if (g.q0 + i < j || i >= Tq) continue;
                    const float *qi = Qs + ii * HS, *doi = dOs + ii * HS;
                    const float p = expf(fa_dot(qi, kj, HS) * g.scale - Ls[ii]);
                    const float ds = p * (fa_dot(doi, vj, HS) - Ds[ii]) * g.scale;
                    for (int d = 0; d < HS; d++) {
                        dvj[d] += p * doi[d];
                        dkj[d] += ds * qi[d];
                    }
                }
            }
        }
    }
    if (j < g.Tk) {
        const size_t ok = b * g.dk_b + (size_t)j * g.dk_r + kvh * HS, ov = b * g.dv_b + (size_t)j * g.dv_r + kvh * HS;
        for (int d = 0; d < HS; d++) {
            tri_cu_st(dk, ok + d, dkj[d]);
            tri_cu_st(dv, ov + d, dvj[d]);
        }
    }
}

template <typename S>
KERNEL fa_bwd_dkdv_kernel(S *dk, S *dv, const S *dout, const S *q, const S *k, const S *v, const float *lse,
                          const float *delta, fa_geom g) {
    DYN_SMEM(float, smem);
    const int tiles = (g.Tk + FA_TILE - 1) / FA_TILE;
    const size_t bkv = blockIdx.x; /* grid.x is B NKV */
    for (int y = blockIdx.y; y < tiles; y += gridDim.y)
        fa_bwd_dkdv_tile(smem, dk, dv, dout, q, k, v, lse, delta, g, bkv, y * FA_TILE);
}

/* One dq tile: queries [i0, i0 + FA_TILE) of (batch, head) bh. */
template <typename S>
DEVFN void fa_bwd_dq_tile(float *smem, S *dq, const S *dout, const S *q, const S *k, const S *v, const float *lse,
                          const float *delta, const fa_geom &g, size_t bh, int i0) {
    const int HS = g.HS, tid = threadIdx.x, i = i0 + tid, Tq = g.Tq;
    const size_t b = bh / (size_t)g.NH, h = bh % (size_t)g.NH;
    const int P = HS + 1;
    float *Qs = smem, *dOs = Qs + FA_TILE * P, *dQs = dOs + FA_TILE * P, *Ks = dQs + FA_TILE * P;
    float *Vs = Ks + FA_TILE * HS;
    const size_t kvh = fa_kvh(g, h);
    const S *qh = q + b * g.q_b + h * HS, *kh = k + b * g.k_b + kvh * HS, *vh = v + b * g.v_b + kvh * HS;
    const S *dO = dout + b * g.do_b + h * HS;
    __syncthreads(); /* the block's previous tile is used up */
    fa_load_tile(Qs, P, qh, g.q_r, i0, Tq, HS);
    fa_load_tile(dOs, P, dO, g.do_r, i0, Tq, HS);
    float *dqi = dQs + tid * P;
    for (int d = 0; d < HS; d++) dqi[d] = 0.0f;
    const float Li = i < Tq ? lse[bh * Tq + i] : 0.0f;
    const float Di = i < Tq ? delta[bh * Tq + i] : 0.0f;
    const int pos = g.q0 + i;
    const int jend = g.q0 + (i0 + FA_TILE < Tq ? i0 + FA_TILE : Tq);
    for (int j0 = 0; j0 < jend; j0 += FA_TILE) {
        __syncthreads();
        fa_load_tile(Ks, HS, kh, g.k_r, j0, g.Tk, HS);
        fa_load_tile(Vs, HS, vh, g.v_r, j0, g.Tk, HS);
        __syncthreads();
        if (i < Tq) {
            const float *qi = Qs + tid * P, *doi = dOs + tid * P;
            for (int jj = 0; jj < FA_TILE; jj++) {
                if (j0 + jj > pos) break;
                const float *kj = Ks + jj * HS;
                const float p = expf(fa_dot(qi, kj, HS) * g.scale - Li);
                const float ds = p * (fa_dot(doi, Vs + jj * HS, HS) - Di) * g.scale;
                for (int d = 0; d < HS; d++) dqi[d] += ds * kj[d];
            }
        }
    }
    if (i < Tq) {
        const size_t dst = b * g.dq_b + (size_t)i * g.dq_r + h * HS;
        for (int d = 0; d < HS; d++) tri_cu_st(dq, dst + d, dqi[d]);
    }
}

template <typename S>
KERNEL fa_bwd_dq_kernel(S *dq, const S *dout, const S *q, const S *k, const S *v, const float *lse, const float *delta,
                        fa_geom g) {
    DYN_SMEM(float, smem);
    const int tiles = (g.Tq + FA_TILE - 1) / FA_TILE;
    const size_t bh = blockIdx.x; /* grid.x is B NH */
    for (int y = blockIdx.y; y < tiles; y += gridDim.y)
        fa_bwd_dq_tile(smem, dq, dout, q, k, v, lse, delta, g, bh, y * FA_TILE);
}

/* ---- host entry points ---- */

extern "C" size_t TRI_CU(attention_saved_floats)(size_t B, size_t T, int NH, int NKV, int HS) {
    return B * (size_t)NH * T;
}

/* the backward's delta: one float per (batch, query head, query) row */
extern "C" size_t TRI_CU(attention_scratch_floats)(size_t B, size_t T, int NH, int NKV, int HS) {
    return B * (size_t)NH * T;
}

extern "C" int TRI_CU(attention_uses_tensor_cores)(tri_dtype dt, int HS) {
    return dt == TRI_BF16 && (HS == 64 || HS == 128);
}

/* A view the tensor-core kernels can take: 16-byte aligned, strides multiples
 * of 8 bf16 (every row of every head starts on 16 bytes: cp.async's unit). */
static int fa_tc_view(const void *p, size_t batch, size_t row) {
    return ((uintptr_t)p % 16) == 0 && batch % 8 == 0 && row % 8 == 0;
}

/* The geometry of a slice call (NKV 0: NH); a contract broken by the caller
 * aborts. */
static fa_geom fa_geom_of(const char *what, size_t B, size_t Tq, size_t Tk, size_t q0, int NH, int NKV, int HS) {
    if (NKV == 0) NKV = NH;
    if (NKV < 0 || NH % NKV != 0)
        tri_cu_fail(what, "the key/value heads NKV do not divide the query heads NH", __FILE__, __LINE__);
    if (q0 > Tk || Tq > Tk - q0)
        tri_cu_fail(what, "the queries [q0, q0 + Tq) run past the Tk keys", __FILE__, __LINE__);
    if (Tk > INT_MAX) tri_cu_fail(what, "Tk is over INT_MAX", __FILE__, __LINE__);
    if (B > INT_MAX / (size_t)NH) tri_cu_fail(what, "B NH is over INT_MAX (the grid's x)", __FILE__, __LINE__);
    fa_geom g = {};
    g.Tq = (int)Tq, g.Tk = (int)Tk, g.q0 = (int)q0, g.NH = NH, g.HS = HS;
    g.NKV = NKV, g.G = NH / NKV;
    g.BNH = (int)(B * (size_t)NH), g.BNKV = (int)(B * (size_t)NKV);
    g.scale = 1.0f / sqrtf((float)HS);
    g.lse_T = Tq;
    return g;
}

extern "C" void TRI_CU(attention_fwd_slice)(void *stream, tri_dtype dt, const tri_cu_attn_fwd_args *a) {
    if (a->B == 0 || a->Tq == 0 || a->NH <= 0 || a->HS <= 0) return;
    fa_geom g = fa_geom_of("attention_fwd_slice", a->B, a->Tq, a->Tk, a->q0, a->NH, a->NKV, a->HS);
    g.q_b = a->q.batch, g.q_r = a->q.row, g.k_b = a->k.batch, g.k_r = a->k.row, g.v_b = a->v.batch, g.v_r = a->v.row,
    g.o_b = a->out.batch, g.o_r = a->out.row;
    if (TRI_CU(attention_uses_tensor_cores)(dt, a->HS) && fa_tc_view(a->q.p, g.q_b, g.q_r) &&
        fa_tc_view(a->k.p, g.k_b, g.k_r) && fa_tc_view(a->v.p, g.v_b, g.v_r) && fa_tc_view(a->out.p, g.o_b, g.o_r)) {
        TRI_CU(attention_tc_fwd)
        (stream, (tri_cu_bf16 *)a->out.p, NULL, a->lse, (const tri_cu_bf16 *)a->q.p, (const tri_cu_bf16 *)a->k.p,
         (const tri_cu_bf16 *)a->v.p, g);
        return;
    }
    const size_t HS = (size_t)a->HS;
    const size_t smem = sizeof(float) * (size_t)FA_TILE * (2 * (HS + 1) + 2 * HS);
    const dim3 grid = fa_grid(g.BNH, tri_cu_blocks(a->Tq, FA_TILE));
    TRI_CU_DTYPE_SWITCH(dt, "attention_fwd", S, FA_SMEM_OPTIN(fa_fwd_kernel<S>, smem);
                        LAUNCH(fa_fwd_kernel<S>, grid, FA_TILE, smem, stream, (S *)a->out.p, a->lse, (const S *)a->q.p,
                               (const S *)a->k.p, (const S *)a->v.p, g););
}

void TRI_CU(attention_delta)(void *stream, tri_dtype dt, float *delta, const void *dout, const void *out,
                             const fa_geom &g) {
    const size_t drows = (size_t)g.BNH * (size_t)g.Tq, dblocks = tri_cu_blocks(drows, FA_DELTA_THREADS);
    const unsigned dgrid = dblocks < 65535u * 16u ? (unsigned)dblocks : 65535u * 16u;
    TRI_CU_DTYPE_SWITCH(dt, "attention_bwd", S,
                        LAUNCH(fa_delta_kernel<S>, dgrid, FA_DELTA_THREADS, 0, stream, delta, (const S *)dout,
                               (const S *)out, g););
}

extern "C" void TRI_CU(attention_bwd_slice)(void *stream, tri_dtype dt, const tri_cu_attn_bwd_args *a) {
    if (a->B == 0 || a->Tq == 0 || a->NH <= 0 || a->HS <= 0) return;
    fa_geom g = fa_geom_of("attention_bwd_slice", a->B, a->Tq, a->Tk, a->q0, a->NH, a->NKV, a->HS);
    g.q_b = a->q.batch, g.q_r = a->q.row, g.k_b = a->k.batch, g.k_r = a->k.row, g.v_b = a->v.batch, g.v_r = a->v.row,
    g.o_b = a->out.batch, g.o_r = a->out.row, g.do_b = a->dout.batch, g.do_r = a->dout.row;
    g.dq_b = a->dq.batch, g.dq_r = a->dq.row, g.dk_b = a->dk.batch, g.dk_r = a->dk.row, g.dv_b = a->dv.batch,
    g.dv_r = a->dv.row;
    float *delta = a->scratch;
    TRI_CU(attention_delta)(stream, dt, delta, a->dout.p, a->out.p, g);
    if (TRI_CU(attention_uses_tensor_cores)(dt, a->HS) && fa_tc_view(a->q.p, g.q_b, g.q_r) &&
        fa_tc_view(a->k.p, g.k_b, g.k_r) && fa_tc_view(a->v.p, g.v_b, g.v_r) && fa_tc_view(a->dout.p, g.do_b, g.do_r) &&
        fa_tc_view(a->dq.p, g.dq_b, g.dq_r) && fa_tc_view(a->dk.p, g.dk_b, g.dk_r) &&
        fa_tc_view(a->dv.p, g.dv_b, g.dv_r)) {
        TRI_CU(attention_tc_bwd)
        (stream, (tri_cu_bf16 *)a->dq.p, (tri_cu_bf16 *)a->dk.p, (tri_cu_bf16 *)a->dv.p, NULL, NULL, NULL,
         (const tri_cu_bf16 *)a->dout.p, (const tri_cu_bf16 *)a->q.p, (const tri_cu_bf16 *)a->k.p,
         (const tri_cu_bf16 *)a->v.p, a->lse, delta, g);
        return;
    }
    const size_t HS = (size_t)a->HS;
    const size_t smem_kv = sizeof(float) * ((size_t)FA_TILE * (4 * (HS + 1) + 2 * HS) + 2 * FA_TILE);
    const size_t smem_q = sizeof(float) * (size_t)FA_TILE * (3 * (HS + 1) + 2 * HS);
    const dim3 grid_kv = fa_grid(g.BNKV, tri_cu_blocks(a->Tk, FA_TILE)),
               grid_q = fa_grid(g.BNH, tri_cu_blocks(a->Tq, FA_TILE));
    TRI_CU_DTYPE_SWITCH(dt, "attention_bwd", S, FA_SMEM_OPTIN(fa_bwd_dkdv_kernel<S>, smem_kv);
                        LAUNCH(fa_bwd_dkdv_kernel<S>, grid_kv, FA_TILE, smem_kv, stream, (S *)a->dk.p, (S *)a->dv.p,
                               (const S *)a->dout.p, (const S *)a->q.p, (const S *)a->k.p, (const S *)a->v.p, a->lse,
                               delta, g);
                        FA_SMEM_OPTIN(fa_bwd_dq_kernel<S>, smem_q);
                        LAUNCH(fa_bwd_dq_kernel<S>, grid_q, FA_TILE, smem_q, stream, (S *)a->dq.p, (const S *)a->dout.p,
                               (const S *)a->q.p, (const S *)a->k.p, (const S *)a->v.p, a->lse, delta, g););
}

/* The op's packed layout as views: q (NH heads), k and v (NKV heads each)
 * inside qkv (B, T, NH + 2 NKV, HS). */
extern "C" void TRI_CU(attention_fwd)(void *stream, tri_dtype dt, void *out, float *lse, const void *qkv, size_t B,
                                      size_t T, int NH, int NKV, int HS) {
    if (B == 0 || T == 0 || NH <= 0 || HS <= 0) return;
    if (NKV <= 0) tri_cu_fail("attention_fwd", "NKV must be positive", __FILE__, __LINE__);
    const size_t C = (size_t)NH * (size_t)HS, KV = (size_t)NKV * (size_t)HS, W = C + 2 * KV;
    const size_t es = dt == TRI_BF16 ? 2 : 4;
    const char *base = (const char *)qkv;
    tri_cu_attn_fwd_args a = {};
    a.B = B, a.Tq = T, a.Tk = T, a.q0 = 0, a.NH = NH, a.NKV = NKV, a.HS = HS;
    a.out = tri_cu_view_out{out, T * C, C};
    a.lse = lse;
    a.q = tri_cu_view{base, T * W, W};
    a.k = tri_cu_view{base + C * es, T * W, W};
    a.v = tri_cu_view{base + (C + KV) * es, T * W, W};
    TRI_CU(attention_fwd_slice)(stream, dt, &a);
}

extern "C" void TRI_CU(attention_bwd)(void *stream, tri_dtype dt, void *dqkv, float *scratch, const void *dout,
                                      const void *qkv, const void *out, const float *lse, size_t B, size_t T, int NH,
                                      int NKV, int HS) {
    if (B == 0 || T == 0 || NH <= 0 || HS <= 0) return;
    if (NKV <= 0) tri_cu_fail("attention_bwd", "NKV must be positive", __FILE__, __LINE__);
    const size_t C = (size_t)NH * (size_t)HS, KV = (size_t)NKV * (size_t)HS, W = C + 2 * KV;
    const size_t es = dt == TRI_BF16 ? 2 : 4;
    const char *base = (const char *)qkv;
    char *dbase = (char *)dqkv;
    tri_cu_attn_bwd_args a = {};
    a.B = B, a.Tq = T, a.Tk = T, a.q0 = 0, a.NH = NH, a.NKV = NKV, a.HS = HS;
    a.dq = tri_cu_view_out{dbase, T * W, W};
    a.dk = tri_cu_view_out{dbase + C * es, T * W, W};
    a.dv = tri_cu_view_out{dbase + (C + KV) * es, T * W, W};
    a.scratch = scratch;
    a.dout = tri_cu_view{dout, T * C, C};
    a.q = tri_cu_view{base, T * W, W};
    a.k = tri_cu_view{base + C * es, T * W, W};
    a.v = tri_cu_view{base + (C + KV) * es, T * W, W};
    a.out = tri_cu_view{out, T * C, C};
    a.lse = lse;
    TRI_CU(attention_bwd_slice)(stream, dt, &a);
}
