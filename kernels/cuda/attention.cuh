/* What the two attention kernel files share (included after common.cuh):
 * attention.cu (the SIMT kernels, the delta kernel, the host entry points and
 * their dispatch) and attention_tc.cu (the tensor-core kernels). Not a public
 * header: the contracts are those of kernels/cuda/kernels.h. */
#ifndef TRI_CUDA_ATTENTION_CUH
#define TRI_CUDA_ATTENTION_CUH

#include "kernels/cuda/common.cuh"

/* The geometry of one call, passed to every kernel by value (the pointers go
 * as separate arguments, so that the emulator checks each one).
 * Queries [q0, q0 + Tq) of Tk keys; a block's (batch, head) is
 * bh = b NH + h < BNH, its tile index runs over blockIdx.y. Strides in
 * elements: a view's (b, t, h) row starts at p + b * X_b + t * X_r + h * HS.
 * Grouped-query attention: k, v, dk and dv hold NKV heads (NH % NKV == 0);
 * query head h reads key/value head h / G, G = NH / NKV (fa_kvh). The dk/dv
 * kernels run a block per (batch, key/value head) = b NKV + kh < BNKV and
 * add the G query heads of the group in order. */
struct fa_geom {
    int Tq, Tk, q0, NH, HS;
    int NKV, G;                          /* key/value heads; G = NH / NKV query heads per group */
    int BNH, BNKV;                       /* B NH, B NKV <= INT_MAX */
    size_t q_b, q_r, k_b, k_r, v_b, v_r; /* q, k, v */
    size_t o_b, o_r;                     /* out (written by the forward, read by the backward) */
    size_t do_b, do_r;                   /* dout */
    size_t dq_b, dq_r, dk_b, dk_r, dv_b, dv_r;
    float scale; /* 1 / sqrt(HS) */
    /* ring attention's blocks (attention_ring.cu, the tensor-core kernels
     * only): nomask 1: every query sees all Tk keys (no causal mask; q0 then
     * plays no part); lse_T: the rows between two (batch, head) pairs of lse
     * (Tq for the slice calls); merge: the forward's fp32 output merged into
     * the running one (below) */
    int nomask, merge;
    size_t lse_T;
};

/* The key/value head of query head h. */
#define fa_kvh(g, h) ((h) / (size_t)(g).G)

/* The grid of a kernel over (batch, head) pairs and `tiles` tiles of rows:
 * x runs over the pairs (B NH <= 2^31 - 1, x's limit), y over the tiles, capped
 * at its limit (65535); the kernels loop with the grid's stride beyond. */
static inline dim3 fa_grid(int BNH, size_t tiles) {
    const size_t x = (size_t)BNH, y = tiles < 65535u ? tiles : 65535u;
    return dim3((unsigned)x, (unsigned)y);
}

#if defined(__CUDACC__)
#define FA_UNROLL _Pragma("unroll")
#define FA_ROLLED _Pragma("unroll 1") /* a loop kept rolled (registers) */
/* Dynamic shared memory above the default 48 KiB needs the kernel's opt-in. */
#define FA_SMEM_OPTIN(kernel, bytes)                                                                                 \
    do {                                                                                                             \
        if ((bytes) > 48 * 1024)                                                                                     \
            TRI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)(bytes))); \
    } while (0)
#else
#define FA_UNROLL
#define FA_ROLLED
#define FA_SMEM_OPTIN(kernel, bytes) ((void)(bytes))
#endif

/* The tensor-core kernels of attention_tc.cu (bf16 storage, HS 64 or 128,
 * views 16-byte aligned with strides that are multiples of 8): the forward
 * (out, lse), and the backward's dk/dv and dq kernels after the delta
 * (dout . out per row, (B, NH, Tq), computed by attention.cu).
 * With o32 (the forward) or dq32, dk32, dv32 (the backward) non-NULL, the
 * outputs are fp32 at those pointers instead (same strides, in elements):
 * the forward's normalised output and lse (row t of pair bh at
 * lse[bh lse_T + t]) overwrite, or with g.merge are merged into the running
 * ones (lse' = log(e^lse + e^lse_b), o' = o e^(lse - lse') + o_b e^(lse_b -
 * lse')); the backward's gradients are added to what is there. */
void TRI_CU(attention_tc_fwd)(void *stream, tri_cu_bf16 *out, float *o32, float *lse, const tri_cu_bf16 *q,
                              const tri_cu_bf16 *k, const tri_cu_bf16 *v, const fa_geom &g);
void TRI_CU(attention_tc_bwd)(void *stream, tri_cu_bf16 *dq, tri_cu_bf16 *dk, tri_cu_bf16 *dv, float *dq32, float *dk32,
                              float *dv32, const tri_cu_bf16 *dout, const tri_cu_bf16 *q, const tri_cu_bf16 *k,
                              const tri_cu_bf16 *v, const float *lse, const float *delta, const fa_geom &g);
/* The backward's delta (attention.cu): row (bh, i) of delta (B NH, Tq) =
 * dout_i . out_i over the views of g (do_b, do_r; o_b, o_r). */
void TRI_CU(attention_delta)(void *stream, tri_dtype dt, float *delta, const void *dout, const void *out,
                             const fa_geom &g);

#endif
