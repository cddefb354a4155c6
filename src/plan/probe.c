/* The one sgemm probe; see src/plan/probe.h. */
#include "plan/probe.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/size.h"

int tri_sgemm_bytes(size_t M, size_t N, size_t K, size_t *bytes) {
    size_t f[3][2] = {{M, K}, {N, K}, {M, N}}, floats = 0, x;
    for (int k = 0; k < 3; k++)
        if (!tri_size_mul(&x, f[k][0], f[k][1]) || !tri_size_add(&floats, floats, x)) return -1;
    if (floats > SIZE_MAX / sizeof(float)) return -1;
    *bytes = floats * sizeof(float);
    return 0;
}

int tri_sgemm_init(tri_sgemm *s, size_t M, size_t N, size_t K) {
    size_t bytes;
    memset(s, 0, sizeof *s);
    if (M == 0 || N == 0 || K == 0) return 0;
    if (tri_sgemm_bytes(M, N, K, &bytes) != 0) return -1;
    s->a = malloc(M * K * sizeof *s->a);
    s->b = malloc(N * K * sizeof *s->b);
    s->c = malloc(M * N * sizeof *s->c);
    if (!s->a || !s->b || !s->c) {
        tri_sgemm_free(s);
        return -1;
    }
    s->M = M;
    s->N = N;
    s->K = K;
    for (size_t i = 0; i < M * K; i++) s->a[i] = (float)((i * 7919) % 1000) * 1e-3f - 0.5f;
    for (size_t i = 0; i < N * K; i++) s->b[i] = (float)((i * 104729) % 1000) * 1e-3f - 0.5f;
    return 0;
}

void tri_sgemm_free(tri_sgemm *s) {
    if (!s) return;
    free(s->a);
    free(s->b);
    free(s->c);
    memset(s, 0, sizeof *s);
}

static void run(tri_sgemm *s) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)s->M, (int)s->N, (int)s->K, 1.0f, s->a, (int)s->K, s->b,
                (int)s->K, 0.0f, s->c, (int)s->N);
}

double tri_sgemm_best(tri_sgemm *s, int warmup, int reps) {
    if (s->M == 0) return 0.0;
    double fl = 2.0 * (double)s->M * (double)s->N * (double)s->K, best = 0.0;
    for (int r = 0; r < warmup; r++) run(s);
    for (int r = 0; r < reps; r++) {
        double t0 = tri_now_s();
        run(s);
        double f = fl / (tri_now_s() - t0);
        if (f > best) best = f;
    }
    return best;
}

double tri_sgemm_rate(size_t M, size_t N, size_t K, int reps) {
    if (M > 4096) M = 4096;
    if (N > 16384) N = 16384;
    if (K > 16384) K = 16384;
    if (M == 0 || N == 0 || K == 0) return 1e9;
    tri_sgemm s;
    double best = 0.0;
    if (tri_sgemm_init(&s, M, N, K) == 0) {
        if (2.0 * (double)M * (double)N * (double)K < 1e8) reps *= 4;
        best = tri_sgemm_best(&s, 1, reps);
        tri_sgemm_free(&s);
    }
    return best > 0 ? best : 1e9;
}

double tri_copy_bandwidth(void) {
    size_t n = (size_t)8 << 20;
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    double best = 0;
    if (a && b) {
        for (size_t i = 0; i < n; i++) a[i] = (float)i;
        for (int r = 0; r < 5; r++) {
            double t0 = tri_now_s();
            memcpy(b, a, n * sizeof *a);
            double bw = 2.0 * (double)n * sizeof *a / (tri_now_s() - t0);
            if (bw > best) best = bw;
        }
    }
    free(a);
    free(b);
    return best > 0 ? best : 1e10;
}

double tri_core_share(long ranks, long threads, long cores) {
    return (double)ranks * threads > (double)cores ? (double)cores / ((double)ranks * threads) : 1.0;
}

/* ------------------------------------------------------------------------ */
/* plan --gpu cpu: speeds by shape, paired with the reference                 */

void tri_sgemm_meter_init(tri_sgemm_meter *m, size_t M, size_t N, size_t K, double share) {
    memset(m, 0, sizeof *m);
    m->ref[0] = M;
    m->ref[1] = N;
    m->ref[2] = K;
    m->share = share;
}

void tri_sgemm_meter_reference(tri_sgemm_meter *m, int rounds) {
    for (int i = 0; i < rounds; i++) {
        double f = tri_sgemm_rate(m->ref[0], m->ref[1], m->ref[2], 5) * m->share;
        if (f > m->ref_best) m->ref_best = f;
        if (f > m->best) m->best = f;
    }
}

/* A slow phase of this VM, seconds long, hits a shape and the reference
 * measured right after it alike and cancels in their ratio, as bench's
 * "paired" MFU does. */
double tri_sgemm_meter_flops(void *ctx, size_t M, size_t N, size_t K) {
    tri_sgemm_meter *m = ctx;
    for (int i = 0; i < m->n; i++)
        if (m->shape[i][0] == M && m->shape[i][1] == N && m->shape[i][2] == K) return m->ratio[i] * m->ref_best;
    double f = tri_sgemm_rate(M, N, K, 3) * m->share;
    double r = tri_sgemm_rate(m->ref[0], m->ref[1], m->ref[2], 3) * m->share;
    if (r > m->ref_best) m->ref_best = r;
    if (r > m->best) m->best = r;
    double ratio = f / r;
    if (ratio * m->ref_best > m->best) m->best = ratio * m->ref_best;
    if (m->n < TRI_SGEMM_METER_SHAPES) {
        m->shape[m->n][0] = M;
        m->shape[m->n][1] = N;
        m->shape[m->n][2] = K;
        m->ratio[m->n++] = ratio;
    }
    return ratio * m->ref_best;
}

/* ------------------------------------------------------------------------ */
/* bench: the speed right after each step                                    */

int tri_step_probe_init(tri_step_probe *p, size_t M, size_t N, size_t K, size_t steps) {
    memset(p, 0, sizeof *p);
    p->after = calloc(steps, sizeof *p->after);
    p->times = calloc(steps, sizeof *p->times);
    p->steps = steps;
    if (!p->after || !p->times || tri_sgemm_init(&p->sgemm, M, N, K) != 0) {
        tri_step_probe_free(p);
        return -1;
    }
    return 0;
}

void tri_step_probe_free(tri_step_probe *p) {
    if (!p) return;
    tri_sgemm_free(&p->sgemm);
    free(p->after);
    free(p->times);
    memset(p, 0, sizeof *p);
}

/* This VM has phases of about half speed lasting seconds: a step's model
 * FLOP/s over the sgemm speed measured right after it cancels them. */
void tri_step_probe_after(void *ctx, int step, double seconds) {
    tri_step_probe *p = ctx;
    p->times[step] = seconds;
    if (p->sgemm.M > 0) p->after[step] = tri_sgemm_best(&p->sgemm, 0, 2);
}
