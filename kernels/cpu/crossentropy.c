/* Vocab-parallel softmax cross-entropy on the CPU, in two passes.
 * Contracts in kernels/ops.h (crossentropy_stats, crossentropy_bwd).
 *
 * This rank holds logits (N, Vl) for global columns [vstart, vstart + Vl);
 * only columns with global index < V are real, so per row the real local
 * columns are [0, Vr) with Vr = min(Vl, V - vstart) (0 when vstart >= V).
 * Padded columns are never read. */
#include "kernels/cpu/cpu_internal.h"

/* Rows go in chunks of TRI_CPU_CHUNK columns (4 KiB): a chunk stays in L1
 * between its max and its sum of exponentials, so the row is read once from
 * memory, and the next chunk is prefetched meanwhile. */

static size_t real_cols(size_t Vl, size_t vstart, size_t V) {
    if (vstart >= V) return 0;
    return V - vstart < Vl ? V - vstart : Vl;
}

/* The local column of global target id, or -1 when this rank does not own it
 * (another rank's column, a padded column, or a negative id). */
static ptrdiff_t local_target(int32_t tgt, size_t vstart, size_t Vr) {
    if (tgt < 0 || (size_t)tgt < vstart || (size_t)tgt - vstart >= Vr) return -1;
    return (ptrdiff_t)((size_t)tgt - vstart);
}

/* stats (N, 3) = (local max m, sum_j exp(l_j - m), owned target logit or 0)   [overwrite]
 * A rank with no real columns writes (-inf, 0, 0). Chunked online softmax:
 * when a chunk raises the max, the running sum is rescaled by exp(m_old - m_new). */
void tri_cpu_crossentropy_stats(float *stats, const float *logits, const int32_t *targets, size_t N, size_t Vl,
                                size_t vstart, size_t V) {
    const size_t Vr = real_cols(Vl, vstart, V);
#pragma omp parallel for schedule(static) if (N * Vr >= TRI_CPU_PAR_MIN)
    for (size_t n = 0; n < N; n++) {
        const float *row = logits + n * Vl;
        float m = -INFINITY, s = 0.0f;
        for (size_t j0 = 0; j0 < Vr; j0 += TRI_CPU_CHUNK) {
            const size_t j1 = j0 + TRI_CPU_CHUNK < Vr ? j0 + TRI_CPU_CHUNK : Vr;
            prefetch_read(row + j1, next_chunk_len(j0, Vr));
            const float cm = row_max(row + j0, j1 - j0);
            if (cm > m) {
                s *= vec_expf(m - cm); /* m = -inf at the start: s = 0 * 0 */
                m = cm;
            }
            s += row_sumexp(row + j0, j1 - j0, m);
        }
        const ptrdiff_t lt = local_target(targets[n], vstart, Vr);
        stats[3 * n + 0] = m;
        stats[3 * n + 1] = s;
        stats[3 * n + 2] = lt >= 0 ? row[lt] : 0.0f;
    }
}

/* The gradient of one row: d[j] = exp(l[j] - M) * dscale / S for the real
 * columns (k = dscale / S), 0 for padded columns; the caller subtracts dscale
 * at the owned target. The next chunk is prefetched for writing when in
 * place, for reading otherwise. */
static void ce_grad_row(float *d, const float *l, size_t Vr, size_t Vl, float M, float k) {
    for (size_t j0 = 0; j0 < Vr; j0 += TRI_CPU_CHUNK) {
        const size_t j1 = j0 + TRI_CPU_CHUNK < Vr ? j0 + TRI_CPU_CHUNK : Vr;
        if (d == l)
            prefetch_write(d + j1, next_chunk_len(j0, Vr));
        else
            prefetch_read(l + j1, next_chunk_len(j0, Vr));
        row_exp_scale(d + j0, l + j0, j1 - j0, M, k);
    }
    for (size_t j = Vr; j < Vl; j++) d[j] = 0.0f;
}

/* stats (N, 3) holds the global (M, S, target logit) combined over ranks.
 * losses (N) = log S + M - target                           [overwrite; may be NULL]
 * dlogits (N, Vl) = (softmax - onehot) * dscale              [overwrite; may be NULL;
 *                                                             may alias logits] */
void tri_cpu_crossentropy_bwd(float *losses, float *dlogits, const float *logits, const float *stats,
                              const int32_t *targets, float dscale, size_t N, size_t Vl, size_t vstart, size_t V) {
    const size_t Vr = real_cols(Vl, vstart, V);
    const size_t work = dlogits != NULL ? N * Vl : N;
#pragma omp parallel for schedule(static) if (work >= TRI_CPU_PAR_MIN)
    for (size_t n = 0; n < N; n++) {
        const float M = stats[3 * n + 0], S = stats[3 * n + 1], tl = stats[3 * n + 2];
        if (losses != NULL) losses[n] = logf(S) + M - tl;
        if (dlogits == NULL) continue;
        const float k = dscale / S;
        float *d = dlogits + n * Vl;
        const float *l = logits + n * Vl;
        ce_grad_row(d, l, Vr, Vl, M, k);
        const ptrdiff_t lt = local_target(targets[n], vstart, Vr);
        if (lt >= 0) d[lt] -= dscale;
    }
}

/* stats (N, 3) = the global (M, S, target) of each row from the R ranks'
 * local stats in gather (R, N, 3)                              [overwrite] */
void tri_cpu_crossentropy_combine(float *stats, const float *gather, size_t N, int R) {
#pragma omp parallel for schedule(static) if (N * (size_t)R >= TRI_CPU_PAR_MIN / 16)
    for (size_t n = 0; n < N; n++) {
        float M = -INFINITY;
        for (int r = 0; r < R; r++) {
            const float m = gather[((size_t)r * N + n) * 3];
            if (m > M || isnan(m)) M = m; /* a NaN logit on any rank makes the loss NaN, as at tp=1 */
        }
        float S = 0.0f, t = 0.0f;
        for (int r = 0; r < R; r++) {
            const float *s = &gather[((size_t)r * N + n) * 3];
            /* a rank whose slice is all padding has (m, S) = (-inf, 0): skip it
             * (exp(-inf - -inf) is NaN); anything else, NaN included, counts */
            if (s[1] != 0.0f) S += s[1] * expf(s[0] - M);
            t += s[2];
        }
        stats[3 * n + 0] = M;
        stats[3 * n + 1] = S;
        stats[3 * n + 2] = t;
    }
}
