/* One block of ring attention on the CPU (context parallelism; the op
 * table's attention_block_fwd / attention_block_bwd / attention_kv_copy,
 * kernels/ops.h states the contract): the queries of this rank's qkv against
 * one block of keys and values (this rank's own, or one passed around the
 * context-parallel ring), no mask or the causal mask by index, the block's
 * output merged into the running normalised output and log-sum-exp.
 *
 * The blocks are the CPU's flash attention (attention.c, tri_cpu_fa_fwd /
 * _bwd) reading the keys and values from the block's own rows: tiled, with
 * an online softmax that, to merge, starts from the running output and
 * log-sum-exp; the backward accumulates into the caller's dQ and dK/dV. The
 * same kernel as the whole sequence's attention, so every output element is
 * one fixed sequence of operations whatever the thread count.
 *
 * Layouts (W = NH + 2 NKV, G = NH / NKV): qkv (B, T, W, HS), the q of head h
 * at h*HS; kv (B, Tk, 2 NKV, HS), key head kh at kh*HS, its values at
 * (NKV + kh)*HS; o (B, T, NH, HS); lse (B, NH, T). */
#include "kernels/cpu/cpu_internal.h"

static tri_cpu_fa block_view(const float *qkv, const float *kv, size_t B, size_t T, size_t Tk, size_t q0, int causal,
                             int NH, int NKV, int HS) {
    return (tri_cpu_fa){.qkv = qkv, .kv = kv, .ks = (size_t)(2 * NKV) * (size_t)HS, .B = B, .T = T, .Tk = Tk,
                        .q0 = q0, .causal = causal, .NH = NH, .NKV = NKV, .HS = HS};
}

void tri_cpu_attention_block_fwd(float *o, float *lse, const float *qkv, const float *kv, size_t B, size_t T, size_t Tk,
                                 size_t q0, int causal, int merge, int NH, int NKV, int HS) {
    const tri_cpu_fa a = block_view(qkv, kv, B, T, Tk, q0, causal, NH, NKV, HS);
    if (B > 0 && q0 < T) tri_cpu_fa_fwd(&a, o, lse, merge);
}

void tri_cpu_attention_block_bwd(float *dqkv, float *dkv, float *scratch, const float *dout, const float *qkv,
                                 const float *kv, const float *out, const float *lse, size_t B, size_t T, size_t Tk,
                                 size_t q0, int causal, int NH, int NKV, int HS) {
    const tri_cpu_fa a = block_view(qkv, kv, B, T, Tk, q0, causal, NH, NKV, HS);
    if (B > 0 && q0 < T) tri_cpu_fa_bwd(&a, dqkv, dkv, 1, scratch, dout, out, lse);
}

void tri_cpu_attention_kv_copy(void *dst, const void *src, size_t esz, size_t B, size_t T, int NH, int NKV, int HS,
                               int to_qkv) {
    const size_t hs = (size_t)HS, W = (size_t)(NH + 2 * NKV) * hs, KW = (size_t)(2 * NKV) * hs, C = (size_t)NH * hs;
    char *d = dst;
    const char *s = src;
#pragma omp parallel for schedule(static) if (B * T > 256)
    for (size_t r = 0; r < B * T; r++) {
        if (to_qkv)
            memcpy(d + (r * W + C) * esz, s + r * KW * esz, KW * esz);
        else
            memcpy(d + r * KW * esz, s + (r * W + C) * esz, KW * esz);
    }
}
