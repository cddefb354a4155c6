/* The sgemm probe (src/plan/probe.h): the GEMM it times is the linears'
 * shape, computed right; its sizes are checked; the share of the cores;
 * the fresh measurement's fallbacks; the meter's pairing and its table; the
 * per-step record bench reads. Speeds themselves vary with the machine:
 * only their sign and finiteness are checked. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "plan/probe.h"

Test(probe, core_share_is_the_cores_over_the_threads_when_oversubscribed) {
    cr_expect_eq(tri_core_share(4, 1, 2), 0.5);
    cr_expect_eq(tri_core_share(3, 1, 2), 2.0 / 3.0);
    cr_expect_eq(tri_core_share(1, 4, 2), 0.5);
    cr_expect_eq(tri_core_share(2, 1, 2), 1.0);
    cr_expect_eq(tri_core_share(2, 2, 8), 1.0);
}

/* out (M, N) = A (M, K) B (N, K)^T against a loop, on odd sizes. */
Test(probe, the_sgemm_is_the_linears_shape) {
    tri_sgemm s;
    const size_t M = 5, N = 7, K = 3;
    cr_assert_eq(tri_sgemm_init(&s, M, N, K), 0);
    cr_assert(s.a && s.b && s.c);
    for (size_t i = 0; i < M * N; i++) s.c[i] = NAN; /* poisoned */
    double f = tri_sgemm_best(&s, 1, 2);
    cr_expect(f > 0 && isfinite(f), "%g FLOP/s", f);
    for (size_t m = 0; m < M; m++)
        for (size_t n = 0; n < N; n++) {
            double want = 0;
            for (size_t k = 0; k < K; k++) want += (double)s.a[m * K + k] * s.b[n * K + k];
            cr_expect(fabs(s.c[m * N + n] - want) <= 1e-5, "out[%zu][%zu] = %g, want %g", m, n, s.c[m * N + n], want);
        }
    /* the fixed fill: the same operands every time */
    cr_expect_float_eq(s.a[1], (float)(7919 % 1000) * 1e-3f - 0.5f, 1e-7);
    cr_expect_float_eq(s.b[1], (float)(104729 % 1000) * 1e-3f - 0.5f, 1e-7);
    cr_expect_eq(tri_sgemm_best(&s, 0, 0), 0.0);
    tri_sgemm_free(&s);
    cr_expect(s.a == NULL && s.M == 0);
    tri_sgemm_free(NULL);
}

Test(probe, sizes_are_checked_and_an_empty_probe_measures_nothing) {
    size_t bytes = 0;
    cr_expect_eq(tri_sgemm_bytes(2, 3, 4, &bytes), 0);
    cr_expect_eq(bytes, (2 * 4 + 3 * 4 + 2 * 3) * sizeof(float));
    cr_expect_eq(tri_sgemm_bytes(SIZE_MAX / 2, 3, 4, &bytes), -1);
    cr_expect_eq(tri_sgemm_bytes((size_t)1 << 31, (size_t)1 << 31, 2, &bytes), -1); /* M N floats overflow bytes */
    tri_sgemm s;
    cr_expect_eq(tri_sgemm_init(&s, SIZE_MAX / 2, 3, 4), -1);
    cr_expect(s.a == NULL && s.M == 0);
    cr_expect_eq(tri_sgemm_init(&s, 0, 3, 4), 0);
    cr_expect(s.a == NULL && s.M == 0);
    cr_expect_eq(tri_sgemm_best(&s, 1, 5), 0.0);
    tri_sgemm_free(&s);
}

/* plan's fresh measurement: 1e9 for a shape with no work, a positive
 * finite speed otherwise, capped shapes included. */
Test(probe, the_fresh_rate_has_its_fallbacks) {
    cr_expect_eq(tri_sgemm_rate(0, 64, 64, 1), 1e9);
    cr_expect_eq(tri_sgemm_rate(64, 0, 64, 1), 1e9);
    double f = tri_sgemm_rate(16, 24, 8, 1);
    cr_expect(f > 0 && isfinite(f), "%g", f);
    f = tri_sgemm_rate(100000, 8, 8, 1); /* M capped at 4096 rows */
    cr_expect(f > 0 && isfinite(f), "%g", f);
    double bw = tri_copy_bandwidth();
    cr_expect(bw > 0 && isfinite(bw), "%g", bw);
}

/* The meter: a shape is measured once, with the reference right after it;
 * later it is its stored ratio times the reference's best so far, so a
 * better reference lifts every shape alike. best is the fastest seen. */
Test(probe, the_meter_pairs_each_shape_with_the_reference) {
    tri_sgemm_meter *m = malloc(sizeof *m);
    tri_sgemm_meter_init(m, 64, 256, 64, 0.5);
    cr_expect(m->n == 0 && m->ref_best == 0 && m->best == 0 && m->share == 0.5);
    tri_sgemm_meter_reference(m, 2);
    cr_assert(m->ref_best > 0 && isfinite(m->ref_best));
    cr_expect_geq(m->best, m->ref_best);
    double f = tri_sgemm_meter_flops(m, 32, 48, 16);
    cr_assert(f > 0 && isfinite(f));
    cr_assert_eq(m->n, 1);
    cr_expect(m->shape[0][0] == 32 && m->shape[0][1] == 48 && m->shape[0][2] == 16);
    cr_expect_float_eq(f, m->ratio[0] * m->ref_best, 1e-12 * f);
    cr_expect_geq(m->best, f * (1 - 1e-12));
    /* from the table: no new entry, scaled by the reference's best */
    m->ref_best *= 2;
    double g = tri_sgemm_meter_flops(m, 32, 48, 16);
    cr_expect_eq(m->n, 1);
    cr_expect_float_eq(g, m->ratio[0] * m->ref_best, 1e-12 * g);
    /* a full table: measured every time, not stored */
    m->n = TRI_SGEMM_METER_SHAPES;
    double h = tri_sgemm_meter_flops(m, 8, 8, 8);
    cr_expect(h > 0 && isfinite(h));
    cr_expect_eq(m->n, TRI_SGEMM_METER_SHAPES);
    free(m);
}

/* bench's record: each step's seconds, and with buffers the speed right
 * after it; without (a GPU run) the times only. */
Test(probe, the_step_probe_records_each_step) {
    tri_step_probe p;
    cr_assert_eq(tri_step_probe_init(&p, 16, 64, 16, 3), 0);
    cr_expect_eq(p.steps, 3);
    tri_step_probe_after(&p, 1, 0.25);
    cr_expect_eq(p.times[1], 0.25);
    cr_expect(p.after[1] > 0 && isfinite(p.after[1]), "%g", p.after[1]);
    cr_expect(p.after[0] == 0 && p.times[0] == 0 && p.after[2] == 0);
    tri_step_probe_free(&p);
    cr_expect(p.after == NULL && p.times == NULL && p.sgemm.a == NULL);

    cr_assert_eq(tri_step_probe_init(&p, 0, 64, 16, 2), 0);
    tri_step_probe_after(&p, 0, 0.5);
    cr_expect(p.times[0] == 0.5 && p.after[0] == 0);
    tri_step_probe_free(&p);
    tri_step_probe_free(NULL);
}
