/* Vocab-parallel token + position embedding on CUDA. out, wte, wpe and dout
 * are fp32 or bf16 (the kernels' storage type S, T being the sequence
 * length; fp32 arithmetic, common.cuh's tri_cu_ld / tri_cu_st); the
 * gradients dwte and dwpe are fp32. Contracts: embedding_fwd / embedding_bwd
 * in kernels/ops.h, the entry points in kernels/cuda/kernels.h; the same
 * arithmetic as kernels/cpu/embedding.c.
 *
 * This rank holds token rows [vstart, vstart + Vl) as wte (Vl, C); an id
 * outside them (or negative) contributes a zero row.
 *
 * Forward: a block per token row, threads over columns.
 *
 * Backward, deterministic and without float atomics:
 *   - dwpe: a thread per (t, c) adds dout[b, t, c] for b = 0, 1, ... in order;
 *   - dwte: each in-range token r becomes the key (local row << 32 | r); the
 *     keys are sorted on the device (a bitonic network over the next power of
 *     two, out-of-range tokens as the largest key), so that the tokens of one
 *     row of dwte lie together, in token order. Each run of equal rows is
 *     then summed by one thread block (threads over columns) into its row of
 *     dwte, token by token. Every element of dwte therefore receives its
 *     additions in increasing token order, as on the CPU: the result is the
 *     CPU's, bit for bit, under any schedule. */
#include "kernels/cuda/common.cuh"

enum {
    EMB_THREADS = 256, /* threads per row block, at most */
    EMB_SORT_THREADS = 256,
    EMB_POS_THREADS = 128 /* columns per block of the dwpe sums */
};

#define EMB_NO_KEY 0xffffffffffffffffull

/* The local row of token id, or -1 when another rank owns it (or it is negative). */
DEVFN long long emb_local_row(int32_t id, size_t vstart, size_t Vl) {
    if (id < 0 || (size_t)id < vstart || (size_t)id - vstart >= Vl) return -1;
    return (long long)((size_t)id - vstart);
}

/* Row blockIdx.x: out = (wte row or 0) + (wpe[t] or 0), one rounding at the
 * store. */
template <typename S>
KERNEL emb_fwd_kernel(S *out, const int32_t *ids, const S *wte, const S *wpe, size_t T, size_t C, size_t vstart,
                      size_t Vl) {
    const size_t r = blockIdx.x;
    const long long lr = emb_local_row(ids[r], vstart, Vl);
    const S *te = lr >= 0 ? wte + (size_t)lr * C : NULL;
    const S *pe = wpe != NULL ? wpe + (r % T) * C : NULL;
    S *o = out + r * C;
    for (size_t c = threadIdx.x; c < C; c += blockDim.x) {
        float v;
        if (te != NULL)
            v = pe != NULL ? tri_cu_ld(te, c) + tri_cu_ld(pe, c) : tri_cu_ld(te, c);
        else
            v = pe != NULL ? tri_cu_ld(pe, c) : 0.0f;
        tri_cu_st(o, c, v);
    }
}

/* Column block blockIdx.x, position blockIdx.y: dwpe[t][c] += dout[b, t, c]
 * for b = 0 .. B-1, in order. */
template <typename S> KERNEL emb_bwd_pos_kernel(float *dwpe, const S *dout, size_t B, size_t T, size_t C) {
    const size_t t = blockIdx.y, c = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float acc = dwpe[t * C + c];
    for (size_t b = 0; b < B; b++) acc += tri_cu_ld(dout, (b * T + t) * C + c);
    dwpe[t * C + c] = acc;
}

/* key[i] = (local row << 32 | i) for in-range tokens i < rows, EMB_NO_KEY
 * for the others and for the padding up to n. */
KERNEL emb_keys_kernel(unsigned long long *key, const int32_t *ids, size_t rows, size_t n, size_t vstart, size_t Vl) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned long long k = EMB_NO_KEY;
    if (i < rows) {
        const long long lr = emb_local_row(ids[i], vstart, Vl);
        if (lr >= 0) k = ((unsigned long long)lr << 32) | (unsigned long long)i;
    }
    key[i] = k;
}

/* One compare-exchange step (k, j) of the bitonic network on n (a power of
 * two) keys: element i and its partner i ^ j, in ascending order where
 * i & k is 0, descending elsewhere. */
KERNEL emb_bitonic_kernel(unsigned long long *key, size_t n, size_t k, size_t j) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const size_t l = i ^ j;
    if (l <= i) return;
    const unsigned long long a = key[i], b = key[l];
    const bool up = (i & k) == 0;
    if ((a > b) == up) {
        key[i] = b;
        key[l] = a;
    }
}

/* Block blockIdx.x: if sorted key i starts a run of one row of dwte, that
 * row += the dout rows of the run's tokens, in token order. */
template <typename S>
KERNEL emb_bwd_tok_kernel(float *dwte, const unsigned long long *key, const S *dout, size_t n, size_t C) {
    const size_t i = blockIdx.x;
    const unsigned long long k = key[i];
    if (k == EMB_NO_KEY || (i > 0 && (key[i - 1] >> 32) == (k >> 32))) return; /* the whole block leaves */
    const unsigned long long row = k >> 32;
    float *dst = dwte + (size_t)row * C;
    for (size_t c = threadIdx.x; c < C; c += blockDim.x) {
        float acc = dst[c];
        for (size_t e = i; e < n && key[e] != EMB_NO_KEY && (key[e] >> 32) == row; e++)
            acc += tri_cu_ld(dout, (size_t)(key[e] & 0xffffffffull) * C + c);
        dst[c] = acc;
    }
}

static unsigned emb_threads(size_t C) {
    const size_t t = (C + 31) / 32 * 32;
    return t < EMB_THREADS ? (unsigned)t : (unsigned)EMB_THREADS;
}

/* The sort's length: B*T rounded up to a power of two. */
static size_t emb_sort_len(size_t rows) {
    size_t n = 1;
    while (n < rows) n *= 2;
    return n;
}

extern "C" size_t TRI_CU(embedding_bwd_scratch_floats)(size_t B, size_t T) {
    return 2 * emb_sort_len(B * T); /* one 64-bit key per sorted slot */
}

extern "C" void TRI_CU(embedding_fwd)(void *stream, tri_dtype dt, void *out, const int32_t *ids, const void *wte,
                                      const void *wpe, size_t B, size_t T, size_t C, size_t vstart, size_t Vl) {
    if (B * T == 0 || C == 0) return;
    TRI_CU_DTYPE_SWITCH(dt, "embedding_fwd", S,
                        LAUNCH(emb_fwd_kernel<S>, (unsigned)(B * T), emb_threads(C), 0, stream, (S *)out, ids,
                               (const S *)wte, (const S *)wpe, T, C, vstart, Vl););
}

extern "C" void TRI_CU(embedding_bwd)(void *stream, tri_dtype dt, float *dwte, float *dwpe, float *scratch,
                                      const void *dout, const int32_t *ids, size_t B, size_t T, size_t C, size_t vstart,
                                      size_t Vl) {
    const size_t rows = B * T;
    if (rows == 0 || C == 0) return;
    /* checked here too: with neither dwpe nor local rows nothing below would */
    if (dt != TRI_F32 && dt != TRI_BF16) tri_cu_bad_dtype("embedding_bwd", (int)dt, __FILE__, __LINE__);
    if (dwpe != NULL)
        TRI_CU_DTYPE_SWITCH(dt, "embedding_bwd", S,
                            LAUNCH(emb_bwd_pos_kernel<S>, dim3(tri_cu_blocks(C, EMB_POS_THREADS), (unsigned)T),
                                   EMB_POS_THREADS, 0, stream, dwpe, (const S *)dout, B, T, C););
    if (Vl == 0) return;
    unsigned long long *key = reinterpret_cast<unsigned long long *>(scratch);
    const size_t n = emb_sort_len(rows);
    const unsigned blocks = tri_cu_blocks(n, EMB_SORT_THREADS);
    LAUNCH(emb_keys_kernel, blocks, EMB_SORT_THREADS, 0, stream, key, ids, rows, n, vstart, Vl);
    for (size_t k = 2; k <= n; k *= 2)
        for (size_t j = k / 2; j > 0; j /= 2)
            LAUNCH(emb_bitonic_kernel, blocks, EMB_SORT_THREADS, 0, stream, key, n, k, j);
    TRI_CU_DTYPE_SWITCH(
        dt, "embedding_bwd", S,
        LAUNCH(emb_bwd_tok_kernel<S>, (unsigned)n, emb_threads(C), 0, stream, dwte, key, (const S *)dout, n, C););
}
