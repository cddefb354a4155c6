/* The per-op profile (kernels/profile.c) on the CPU: it only wraps (the
 * training steps give the bits of the plain table), it times every kind a
 * training step runs and no more than the wall time, it attributes each GEMM
 * to its direction and layer part, and, on a backend with timing marks (a
 * CPU table given marks below, standing in for CUDA events), it records a
 * pair around each op and reads them once per step, growing its pool after
 * a step that filled it. The emulated CUDA backend's events:
 * tests/cuemu/test_cuda_profile.c. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "helpers/tiny_steps.h"
#include "kernels/ctx.h"
#include "kernels/profile.h"

#define STEPS 3

static void free_run(tt_tiny_run *r) { free(r->params); }

static tt_tiny_run run_on(const tri_ops *ops, tri_dtype precision, int profile) {
    tri_ctx c;
    cr_assert_eq(tri_ctx_init_ops(&c, ops, 0), 0);
    tt_tiny_run r;
    tt_tiny_steps(&c, precision, STEPS, profile, &r);
    tri_ctx_free(&c);
    return r;
}

static void same_bits(const tt_tiny_run *a, const tt_tiny_run *b, const char *what) {
    cr_assert_eq(a->n, b->n);
    for (int i = 0; i < STEPS; i++)
        cr_assert(memcmp(&a->loss[i], &b->loss[i], sizeof(double)) == 0, "%s: step %d loss %.17g profiled, %.17g plain",
                  what, i, a->loss[i], b->loss[i]);
    cr_assert(memcmp(a->params, b->params, a->n * sizeof(float)) == 0, "%s: the final weights differ", what);
}

Test(profile, the_profiled_table_gives_the_bits_of_the_plain_one) {
    const tri_dtype precisions[3] = {TRI_F32, TRI_BF16, TRI_F16};
    for (int k = 0; k < 3; k++) {
        tt_tiny_run plain = run_on(tri_ops_cpu(), precisions[k], -1), prof = run_on(tri_ops_cpu(), precisions[k], 0);
        same_bits(&prof, &plain, tri_precision_name(precisions[k]));
        cr_assert(fabs(plain.loss[0] - log(100.0)) < 0.5, "a loss near log(vocab): %g", plain.loss[0]);
        free_run(&plain), free_run(&prof);
    }
}

/* Per step of the tiny GPT: the GEMMs of every layer part in every
 * direction (one LM head), and every kind but none of the GEMMs "unknown". */
static void check_gemm_counts(const tri_prof_totals *t, int steps) {
    for (int r = 0; r < TRI_PROF_ROLES; r++)
        for (int d = 0; d < TRI_PROF_DIRS; d++) {
            const unsigned long long want =
                r == TRI_PROF_UNKNOWN ? 0 : (unsigned long long)steps * (r == TRI_PROF_HEAD ? 1 : TT_TINY_LAYERS);
            cr_expect_eq(t->gemm_calls[r][d], want, "%s direction %d: %llu GEMMs, want %llu",
                         tri_prof_role_key((tri_prof_role)r), d, t->gemm_calls[r][d], want);
        }
    for (int d = 0; d < TRI_PROF_DIRS; d++) {
        unsigned long long calls = 0;
        double ms = 0;
        for (int r = 0; r < TRI_PROF_ROLES; r++) calls += t->gemm_calls[r][d], ms += t->gemm_ms[r][d];
        cr_expect_eq(calls, t->calls[TRI_PROF_GEMM_FWD + d]);
        cr_expect(fabs(ms - t->ms[TRI_PROF_GEMM_FWD + d]) <= 1e-9 * (1 + ms), "the roles add up to their kind");
    }
}

Test(profile, every_kind_of_a_training_step_is_timed_within_the_wall_time) {
    tt_tiny_run r = run_on(tri_ops_cpu(), TRI_F32, 0);
    const tri_prof_totals *t = &r.tot;
    cr_assert_eq(t->steps, STEPS);
    cr_assert_eq(t->marks, 0, "the CPU is timed by the clock");
    double sum = 0;
    for (int k = 0; k < TRI_PROF_KINDS; k++) {
        cr_expect(t->calls[k] > 0 && t->ms[k] > 0, "%s: %llu ops, %g ms", tri_prof_kind_key((tri_prof_kind)k),
                  t->calls[k], t->ms[k]);
        sum += t->ms[k];
    }
    cr_assert(sum <= r.wall_ms, "the ops take %.3f ms of %.3f ms", sum, r.wall_ms);
    /* per step and layer: two LayerNorms and two attention ops each way, GELU twice (unfused on the CPU) */
    cr_expect_eq(t->calls[TRI_PROF_ATTENTION_FWD], STEPS * TT_TINY_LAYERS);
    cr_expect_eq(t->calls[TRI_PROF_ATTENTION_BWD], STEPS * TT_TINY_LAYERS);
    cr_expect_eq(t->calls[TRI_PROF_LAYERNORM], STEPS * (4 * TT_TINY_LAYERS + 2));
    cr_expect_eq(t->calls[TRI_PROF_GELU], STEPS * 2 * TT_TINY_LAYERS);
    cr_expect_eq(t->calls[TRI_PROF_EMBEDDING], STEPS * 2);
    check_gemm_counts(t, STEPS);
    free_run(&r);
}

Test(profile, the_wrapper_keeps_the_backends_optional_ops_and_stop_puts_the_table_back) {
    tri_ctx c;
    cr_assert_eq(tri_ctx_init(&c, "cpu", 0), 0);
    tri_profile *p = tri_profile_start(&c, 0);
    cr_assert_not_null(p);
    cr_assert(c.ops != tri_ops_cpu());
    cr_assert_str_eq(c.ops->name, "cpu");
    cr_assert(c.ops->matmul_gelu_fwd == NULL && c.ops->matmul_bwd_dgelu == NULL && c.ops->adamw_multi == NULL &&
                  c.ops->sumsq_multi == NULL && c.ops->marks_init == NULL,
              "what the CPU leaves out stays out: the model takes the same path");
    cr_assert(c.ops->alloc == tri_ops_cpu()->alloc && c.ops->to_host == tri_ops_cpu()->to_host);
    tri_profile_stop(p);
    cr_assert(c.ops == tri_ops_cpu());
    tri_profile_stop(NULL);
    tri_ctx_free(&c);
}

static float *host_rand(size_t n, uint64_t seed) {
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = (float)((seed >> 40) % 2001) / 1000.0f - 1.0f;
    }
    return x;
}

/* matmul_bwd through the profile runs as its halves: the same bits as the
 * whole op for every combination of outputs, one input-gradient and one
 * weight-gradient GEMM counted when both are asked for; a weight in no
 * range is "unknown", and of two ranges that hold it the later one counts. */
Test(profile, gemms_split_into_their_halves_bit_for_bit_and_count_by_the_weights_range) {
    enum { N = 7, C = 5, OC = 6 };
    tri_ctx c;
    cr_assert_eq(tri_ctx_init(&c, "cpu", 0), 0);
    const tri_ops *cpu = c.ops;
    float *dout = host_rand(N * OC, 1), *inp = host_rand(N * C, 2), *w = host_rand(OC * C, 3);
    float *seed_dw = host_rand(OC * C, 4), *seed_db = host_rand(OC, 5);
    tri_profile *p = tri_profile_start(&c, 0);
    cr_assert_not_null(p);
    for (int mask = 1; mask < 8; mask++) { /* which of dinp, dweight, dbias are asked for */
        float di[2][N * C], dw[2][OC * C], db[2][OC];
        for (int k = 0; k < 2; k++) {
            memset(di[k], 0xff, sizeof di[k]);
            memcpy(dw[k], seed_dw, sizeof dw[k]);
            memcpy(db[k], seed_db, sizeof db[k]);
            const tri_ops *ops = k == 0 ? cpu : c.ops;
            ops->matmul_bwd(&c, mask & 1 ? di[k] : NULL, mask & 2 ? dw[k] : NULL, mask & 4 ? db[k] : NULL, dout, inp, w,
                            N, C, OC);
        }
        cr_assert(memcmp(di[0], di[1], sizeof di[0]) == 0 && memcmp(dw[0], dw[1], sizeof dw[0]) == 0 &&
                      memcmp(db[0], db[1], sizeof db[0]) == 0,
                  "outputs %d: the halves differ from the whole", mask);
    }
    /* masks 1..7: dinp in 1,3,5,7; a weight-gradient GEMM in the rest and where dweight joins dinp (3, 7) */
    const tri_prof_totals *t = tri_profile_totals(p);
    cr_expect_eq(t->gemm_calls[TRI_PROF_UNKNOWN][1], 4);
    cr_expect_eq(t->gemm_calls[TRI_PROF_UNKNOWN][2], 5);
    float out[N * OC];
    c.ops->matmul_fwd(&c, out, inp, w, NULL, N, C, OC);
    cr_assert_eq(tri_profile_role(p, w, OC * C * sizeof(float), TRI_PROF_FC), 0);
    c.ops->matmul_fwd(&c, out, inp, w, NULL, N, C, OC);
    cr_assert_eq(tri_profile_role(p, w + 3, sizeof(float), TRI_PROF_QKV), 0);
    c.ops->matmul_fwd(&c, out, inp, w, NULL, N, C, OC);     /* w itself: the fc range only */
    c.ops->matmul_fwd(&c, out, inp, w + 3, NULL, N, C, OC); /* in both: the later one, qkv */
    cr_expect_eq(t->gemm_calls[TRI_PROF_UNKNOWN][0], 1);
    cr_expect_eq(t->gemm_calls[TRI_PROF_FC][0], 2);
    cr_expect_eq(t->gemm_calls[TRI_PROF_QKV][0], 1);
    tri_profile_reset(p);
    for (int k = 0; k < TRI_PROF_KINDS; k++) cr_expect(t->calls[k] == 0 && t->ms[k] == 0, "reset zeroes every kind");
    tri_profile_stop(p);
    free(dout), free(inp), free(w), free(seed_dw), free(seed_db);
    tri_ctx_free(&c);
}

/* ---- a backend with timing marks: the CPU table with host-clock marks ---- */

/* What the marks saw (the test's own bookkeeping: one fake device). */
static struct {
    double *t;
    int *set;
    int n;
    int inits, reads, frees;
    unsigned long long records;
    int last;     /* the last mark recorded, -1 after a read */
    int in_order; /* 0 once a mark came out of its pair's order */
} M;

static int fake_marks_init(tri_ctx *c, int n) {
    free(M.t), free(M.set);
    M.t = calloc((size_t)n, sizeof *M.t);
    M.set = calloc((size_t)n, sizeof *M.set);
    M.n = n;
    M.inits++;
    M.last = -1;
    return 0;
}

static void fake_mark(tri_ctx *c, int i) {
    cr_assert(i >= 0 && i < M.n, "mark %d of a pool of %d", i, M.n);
    /* pairs in order from the first mark after a read: 2j after 2j - 1, 2j + 1 right after 2j */
    if (i != M.last + 1) M.in_order = 0;
    M.last = i;
    M.t[i] = tri_now_s();
    M.set[i] = 1;
    M.records++;
}

static void fake_marks_read(tri_ctx *c, int pairs, float *ms) {
    cr_assert(pairs > 0 && 2 * pairs <= M.n);
    cr_assert_eq(M.last, 2 * pairs - 1, "a read covers every mark recorded since the last one");
    for (int j = 0; j < pairs; j++) {
        cr_assert(M.set[2 * j] && M.set[2 * j + 1]);
        ms[j] = (float)(1e3 * (M.t[2 * j + 1] - M.t[2 * j]));
        M.set[2 * j] = M.set[2 * j + 1] = 0;
    }
    M.reads++;
    M.last = -1;
}

static void fake_marks_free(tri_ctx *c) {
    free(M.t), free(M.set);
    M.t = NULL, M.set = NULL;
    M.n = 0;
    M.frees++;
}

static tri_ops FAKE;

static void fake_start(void) {
    memset(&M, 0, sizeof M);
    M.last = -1;
    M.in_order = 1;
    FAKE = *tri_ops_cpu();
    FAKE.name = "cpu-marks";
    FAKE.marks_init = fake_marks_init;
    FAKE.mark = fake_mark;
    FAKE.marks_read = fake_marks_read;
    FAKE.marks_free = fake_marks_free;
}

static unsigned long long all_calls(const tri_prof_totals *t) {
    unsigned long long n = 0;
    for (int k = 0; k < TRI_PROF_KINDS; k++) n += t->calls[k];
    return n;
}

Test(profile, marks_go_in_pairs_around_each_op_and_are_read_once_per_step) {
    fake_start();
    tt_tiny_run clock = run_on(tri_ops_cpu(), TRI_F32, 0), marks = run_on(&FAKE, TRI_F32, 0);
    same_bits(&marks, &clock, "with marks");
    cr_assert_eq(marks.tot.marks, 1);
    cr_assert_eq(M.inits, 1, "one pool, made at the start");
    cr_assert_eq(M.frees, 1, "freed at the stop");
    cr_assert_eq(M.reads, STEPS, "one read per step");
    cr_assert(M.in_order, "every op between its own pair of marks");
    cr_assert_eq(M.records, 2 * all_calls(&marks.tot));
    for (int k = 0; k < TRI_PROF_KINDS; k++) { /* attributed as by the clock */
        cr_expect_eq(marks.tot.calls[k], clock.tot.calls[k], "%s", tri_prof_kind_key((tri_prof_kind)k));
        cr_expect(marks.tot.ms[k] > 0);
    }
    check_gemm_counts(&marks.tot, STEPS);
    free_run(&clock), free_run(&marks);
}

Test(profile, a_step_longer_than_the_pool_reads_it_when_full_and_the_next_has_room) {
    fake_start();
    tri_ctx c;
    cr_assert_eq(tri_ctx_init_ops(&c, &FAKE, 0), 0);
    tt_tiny_run r;
    tt_tiny_steps(&c, TRI_F32, STEPS, 8, &r); /* 8 pairs: far fewer than a step's ops */
    tri_ctx_free(&c);
    const unsigned long long per_step = all_calls(&r.tot) / STEPS;
    cr_assert_eq(all_calls(&r.tot), per_step * STEPS);
    cr_assert_eq(M.inits, 2, "the pool grows once, after the first step");
    cr_assert_eq(M.reads, (int)((per_step + 7) / 8) + STEPS - 1,
                 "the first step reads every 8 ops; the others once (%d reads, %llu ops a step)", M.reads, per_step);
    cr_assert_eq(M.records, 2 * all_calls(&r.tot));
    cr_assert(M.in_order);
    check_gemm_counts(&r.tot, STEPS);
    free_run(&r);
}
