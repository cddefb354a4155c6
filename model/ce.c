#include "model/ce.h"

#include <math.h>

void tri_ce_combine(tri_comm *tp, float *stats, float *gather, size_t N) {
    if (tp->size == 1) return;
    size_t R = (size_t)tp->size;
    tri_comm_allgather(tp, gather, stats, 3 * N, TRI_F32);
    #pragma omp parallel for schedule(static)
    for (size_t n = 0; n < N; n++) {
        float M = -INFINITY;
        for (size_t r = 0; r < R; r++) {
            float m = gather[(r * N + n) * 3];
            if (m > M || isnan(m)) M = m; /* a NaN logit on any rank makes the loss NaN, as at tp=1 */
        }
        float S = 0.0f, t = 0.0f;
        for (size_t r = 0; r < R; r++) {
            const float *s = &gather[(r * N + n) * 3];
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
