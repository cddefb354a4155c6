/* The per-op profile (kernels/profile.h) on the CUDA op table, under the
 * emulation ("cuda-emu"): each op between a pair of CUDA events recorded on
 * the stream, the events read with one wait per step and no other wait
 * added, the pool's events all destroyed at the stop, the losses of the
 * plain table bit for bit, and the ops attributed to the same kinds and
 * layer parts as on the CPU. The emulated events take the host clock, which
 * is all the emulator has: the figures are not tested, the attribution is.
 * Built a second time as part of tests/gpu's tri_gpu_tests (TRI_GPU_TEST),
 * against the real backend "cuda": there the bits and the attribution are
 * checked, and the events' own bookkeeping (the emulated runtime's counts)
 * is left out. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ctx.h"
#include "kernels/profile.h"
#include "tests/helpers/tiny_steps.h"
#ifdef TRI_GPU_TEST
#define DEV_NAME "cuda"
/* no emulated runtime to count with */
typedef struct tri_cuemu_rt_stats {
    int unused;
} tri_cuemu_rt_stats;
static void start(void) {}
#else
#include "kernels/cuda/cuda_ops.h"
#include "tests/cuemu/cuemu_api.h"
#include "tests/cuemu/cuemu_rt.h"
#define DEV_NAME "cuda-emu"
static void start(void) { tri_cuemu_set_seed(9); }
#endif

#define STEPS 3

TestSuite(cuda_profile, .init = start);

/* The tiny GPT's steps on `device`; delta (emulation only; may be NULL) gets
 * the emulated runtime's counts over them, and its live events after them. */
static tt_tiny_run run_on(const char *device, int profile, tri_cuemu_rt_stats *delta) {
    tri_ctx c;
#ifndef TRI_GPU_TEST
    if (strcmp(device, "cuda-emu") == 0)
        cr_assert_eq(tri_ctx_init_ops(&c, tri_cuemu_ops(), 0), 0);
    else
#endif
        cr_assert_eq(tri_ctx_init(&c, device, 0), 0);
#ifndef TRI_GPU_TEST
    tri_cuemu_rt_stats a, b;
    tri_cuemu_rt_stats_get(&a);
#endif
    tt_tiny_run r;
    tt_tiny_steps(&c, TRI_F32, STEPS, profile, &r);
    tri_ctx_free(&c);
#ifndef TRI_GPU_TEST
    tri_cuemu_rt_stats_get(&b);
    if (delta) {
        *delta = b;
        delta->syncs = b.syncs - a.syncs;
        delta->event_records = b.event_records - a.event_records;
        delta->event_syncs = b.event_syncs - a.event_syncs;
        delta->live_events = b.live_events - a.live_events;
    }
#else
    (void)delta;
#endif
    return r;
}

static unsigned long long all_calls(const tri_prof_totals *t) {
    unsigned long long n = 0;
    for (int k = 0; k < TRI_PROF_KINDS; k++) n += t->calls[k];
    return n;
}

Test(cuda_profile, each_op_is_timed_by_a_pair_of_events_read_once_per_step_bit_for_bit) {
    tri_cuemu_rt_stats plain_d, prof_d;
    tt_tiny_run plain = run_on(DEV_NAME, -1, &plain_d), prof = run_on(DEV_NAME, 0, &prof_d);
    for (int i = 0; i < STEPS; i++)
        cr_assert(memcmp(&plain.loss[i], &prof.loss[i], sizeof(double)) == 0,
                  "step %d: loss %.17g profiled, %.17g plain", i, prof.loss[i], plain.loss[i]);
    cr_assert(memcmp(plain.params, prof.params, plain.n * sizeof(float)) == 0, "the final weights differ");
    cr_assert_eq(prof.tot.marks, 1, "timed by events, not the clock");
    cr_assert_eq(prof.tot.steps, STEPS);
    cr_assert(all_calls(&prof.tot) > 0);
#ifndef TRI_GPU_TEST
    cr_assert_eq(prof_d.event_records, 2 * all_calls(&prof.tot), "%llu events for %llu ops",
                 (unsigned long long)prof_d.event_records, all_calls(&prof.tot));
    cr_assert_eq(prof_d.event_syncs, STEPS, "one wait per step for the step's events");
    cr_assert_eq(prof_d.syncs, plain_d.syncs, "no stream wait added: %llu profiled, %llu plain",
                 (unsigned long long)prof_d.syncs, (unsigned long long)plain_d.syncs);
    cr_assert_eq(prof_d.live_events, 0, "the pool's events destroyed at the stop");
    cr_assert_eq(plain_d.event_records, 0, "no events without the profile");
#endif
    for (int k = 0; k < TRI_PROF_KINDS; k++)
        cr_expect(isfinite(prof.tot.ms[k]) && prof.tot.ms[k] >= 0, "%s: %g ms", tri_prof_kind_key((tri_prof_kind)k),
                  prof.tot.ms[k]);
    free(plain.params), free(prof.params);
}

/* The same steps profiled on the CPU and on the emulated CUDA table: the
 * same GEMMs in every direction and layer part, the same attention,
 * LayerNorm, embedding and cross-entropy ops. Where the tables differ by
 * design it is said: the CUDA table's fc GEMM carries the GELU in its
 * epilogue (no GELU op of its own; the CPU composes them), and its
 * optimizer updates every tensor in one launch (the CPU: one per tensor). */
Test(cuda_profile, the_kinds_and_layer_parts_are_those_of_the_cpu) {
    tt_tiny_run e = run_on(DEV_NAME, 0, NULL), p = run_on("cpu", 0, NULL);
    const tri_prof_totals *te = &e.tot, *tp = &p.tot;
    for (int r = 0; r < TRI_PROF_ROLES; r++)
        for (int d = 0; d < TRI_PROF_DIRS; d++)
            cr_expect_eq(te->gemm_calls[r][d], tp->gemm_calls[r][d],
                         "%s direction %d: %llu GEMMs on " DEV_NAME ", %llu on the CPU",
                         tri_prof_role_key((tri_prof_role)r), d, te->gemm_calls[r][d], tp->gemm_calls[r][d]);
    cr_expect_eq(te->gemm_calls[TRI_PROF_UNKNOWN][0] + te->gemm_calls[TRI_PROF_UNKNOWN][1] +
                     te->gemm_calls[TRI_PROF_UNKNOWN][2],
                 0);
    const tri_prof_kind same[] = {TRI_PROF_GEMM_FWD,      TRI_PROF_GEMM_DINP,     TRI_PROF_GEMM_DWEIGHT,
                                  TRI_PROF_ATTENTION_FWD, TRI_PROF_ATTENTION_BWD, TRI_PROF_LAYERNORM,
                                  TRI_PROF_EMBEDDING,     TRI_PROF_CROSSENTROPY};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++)
        cr_expect_eq(te->calls[same[i]], tp->calls[same[i]], "%s: %llu ops, %llu on the CPU",
                     tri_prof_kind_key(same[i]), te->calls[same[i]], tp->calls[same[i]]);
    cr_expect_eq(te->calls[TRI_PROF_GELU], 0, "the GELU is in the fc GEMM's epilogue");
    cr_expect(tp->calls[TRI_PROF_GELU] > 0);
    cr_expect(te->calls[TRI_PROF_OPTIMIZER] > 0 && te->calls[TRI_PROF_OPTIMIZER] < tp->calls[TRI_PROF_OPTIMIZER],
              "%llu optimizer ops, %llu on the CPU", te->calls[TRI_PROF_OPTIMIZER], tp->calls[TRI_PROF_OPTIMIZER]);
    cr_expect(te->calls[TRI_PROF_ELEMENTWISE] > 0);
    free(e.params), free(p.params);
}

#ifndef TRI_GPU_TEST
/* A pool of 4 pairs: the first step reads it whenever it fills (the waits
 * counted), the pool grows to the step's ops, and the later steps wait once. */
Test(cuda_profile, a_small_pool_is_read_when_full_then_grown) {
    tri_cuemu_rt_stats d;
    tt_tiny_run r = run_on("cuda-emu", 4, &d);
    const unsigned long long per_step = all_calls(&r.tot) / STEPS;
    cr_assert_eq(d.event_records, 2 * all_calls(&r.tot));
    cr_assert_eq(d.event_syncs, (per_step + 3) / 4 + STEPS - 1, "%llu waits, %llu ops a step",
                 (unsigned long long)d.event_syncs, per_step);
    cr_assert_eq(d.live_events, 0);
    free(r.params);
}
#endif
