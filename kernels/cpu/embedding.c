/* Vocab-parallel token + position embedding on the CPU. Contracts in kernels/ops.h.
 * This rank holds token rows [vstart, vstart + Vl) as wte (Vl, C). */
#include <omp.h>

#include "kernels/cpu/cpu_internal.h"

/* The local row of token id, or -1 when another rank owns it (or the id is
 * negative). */
static ptrdiff_t local_row(int32_t id, size_t vstart, size_t Vl) {
    if (id < 0 || (size_t)id < vstart || (size_t)id - vstart >= Vl) return -1;
    return (ptrdiff_t)((size_t)id - vstart);
}

/* out (B*T, C) = (id in range ? wte[id - vstart] : 0) + (wpe ? wpe[t] : 0)   [overwrite]
 * ids (B*T); wpe (>= T, C) may be NULL. */
void tri_cpu_embedding_fwd(float *out, const int32_t *ids, const float *wte, const float *wpe, size_t B, size_t T,
                           size_t C, size_t vstart, size_t Vl) {
    const size_t rows = B * T;
#pragma omp parallel for schedule(static) if (rows * C >= TRI_CPU_PAR_MIN)
    for (size_t r = 0; r < rows; r++) {
        float *o = out + r * C;
        const ptrdiff_t lr = local_row(ids[r], vstart, Vl);
        const float *pe = wpe != NULL ? wpe + (r % T) * C : NULL;
        if (lr >= 0) {
            const float *te = wte + (size_t)lr * C;
            if (pe != NULL) {
                for (size_t c = 0; c < C; c++) o[c] = te[c] + pe[c];
            } else {
                memcpy(o, te, C * sizeof(float));
            }
        } else if (pe != NULL) {
            memcpy(o, pe, C * sizeof(float));
        } else {
            memset(o, 0, C * sizeof(float));
        }
    }
}

/* dwte (Vl, C): rows of in-range ids += dout rows              [accumulate]
 * dwpe (>= T, C): dwpe[t] += sum over b of dout[b, t]          [accumulate; may be NULL]
 * Race-free without atomics: each thread owns a fixed span of columns of dwte
 * and walks all B*T tokens in order; dwpe goes by rows t, batches in order.
 * Every element's additions happen in token order: bitwise reproducible for
 * any thread count. */
void tri_cpu_embedding_bwd(float *dwte, float *dwpe, const float *dout, const int32_t *ids, size_t B, size_t T,
                           size_t C, size_t vstart, size_t Vl) {
    const size_t rows = B * T;
#pragma omp parallel if (rows * C >= TRI_CPU_PAR_MIN)
    {
        const size_t nt = (size_t)omp_get_num_threads(), tid = (size_t)omp_get_thread_num();
        /* this thread's columns [c0, c1), cut at multiples of 16 floats (one cache line) */
        const size_t lines = (C + 15) / 16;
        size_t c0 = lines * tid / nt * 16, c1 = lines * (tid + 1) / nt * 16;
        if (c0 > C) c0 = C;
        if (c1 > C) c1 = C;
        for (size_t r = 0; r < rows && c0 < c1; r++) {
            const ptrdiff_t lr = local_row(ids[r], vstart, Vl);
            if (lr < 0) continue;
            float *dst = dwte + (size_t)lr * C;
            const float *src = dout + r * C;
            for (size_t c = c0; c < c1; c++) dst[c] += src[c];
        }
        if (dwpe != NULL) {
#pragma omp for schedule(static)
            for (size_t t = 0; t < T; t++) {
                float *dst = dwpe + t * C;
                for (size_t b = 0; b < B; b++) {
                    const float *src = dout + (b * T + t) * C;
                    for (size_t c = 0; c < C; c++) dst[c] += src[c];
                }
            }
        }
    }
}
