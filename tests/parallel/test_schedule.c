/* Pipeline schedules (parallel/schedule.c): every generated list is played by
 * the simulator and checked against what does not come from it: the closed
 * forms of the bubble, the peak in-flight counts derived from each schedule's
 * warmup rule, and a scan of the lists themselves (every (micro-batch, chunk)
 * forwarded and backwarded once per stage, B before W, the REDUCE's last).
 * Then lists broken on purpose, the errors, and `trident schedule --json`. */
#include <criterion/criterion.h>

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/schedule.h"
#include "tests/helpers/testutil.h"

static const tri_sim_costs unit = {1.0, 1.0, 1.0};

/* Scans each stage's list: every (mb, chunk) forwarded once, backwarded once
 * (BWD, or BWD_IN then BWD_W later), and the list ends with one REDUCE per chunk. */
static void check_coverage(const tri_schedule *s) {
    int m = s->m, v = s->vpp, fwd_only = s->kind == TRI_SCHED_FORWARD;
    int *f = calloc((size_t)m * v, sizeof *f), *b = calloc((size_t)m * v, sizeof *b),
        *w = calloc((size_t)m * v, sizeof *w);
    cr_assert(f && b && w);
    for (int r = 0; r < s->pp; r++) {
        memset(f, 0, (size_t)m * v * sizeof *f);
        memset(b, 0, (size_t)m * v * sizeof *b);
        memset(w, 0, (size_t)m * v * sizeof *w);
        int nred = 0;
        for (int i = 0; i < s->n[r]; i++) {
            const tri_action *a = &s->a[r][i];
            if (a->kind == TRI_ACT_REDUCE) {
                nred++;
                continue;
            }
            cr_assert_eq(nred, 0, "stage %d: action %d after a REDUCE", r, i);
            int j = a->mb * v + a->chunk;
            if (a->kind == TRI_ACT_FWD) f[j]++;
            if (a->kind == TRI_ACT_BWD) b[j]++, w[j]++;
            if (a->kind == TRI_ACT_BWD_IN) b[j]++;
            if (a->kind == TRI_ACT_BWD_W) {
                cr_assert_eq(b[j], 1, "stage %d: W of mb %d chunk %d before its B", r, a->mb, a->chunk);
                w[j]++;
            }
        }
        cr_assert_eq(nred, fwd_only ? 0 : v, "stage %d: %d REDUCE's", r, nred);
        for (int j = 0; j < m * v; j++) {
            cr_assert_eq(f[j], 1, "%s stage %d mb %d chunk %d: %d forwards", tri_sched_name(s->kind), r, j / v, j % v,
                         f[j]);
            cr_assert_eq(b[j], fwd_only ? 0 : 1, "stage %d mb %d chunk %d: %d backwards", r, j / v, j % v, b[j]);
            cr_assert_eq(w[j], fwd_only ? 0 : 1, "stage %d mb %d chunk %d: %d weight passes", r, j / v, j % v, w[j]);
        }
    }
    free(f);
    free(b);
    free(w);
}

/* Builds, simulates, checks no deadlock and the coverage. */
static void play(tri_schedule *s, tri_sim_result *r, tri_sched_kind k, int p, int v, int m) {
    cr_assert_eq(tri_schedule_build(s, k, p, v, m), 0, "%s p %d v %d m %d", tri_sched_name(k), p, v, m);
    check_coverage(s);
    cr_assert_eq(tri_schedule_simulate(s, unit, r), 0);
    cr_assert(!r->deadlock && !r->invalid, "%s p %d v %d m %d: %s", tri_sched_name(k), p, v, m, r->why);
}

static int find(const tri_schedule *s, int r, tri_act_kind k, int mb) {
    for (int i = 0; i < s->n[r]; i++)
        if (s->a[r][i].kind == k && s->a[r][i].mb == mb) return i;
    cr_assert_fail("stage %d has no %s mb %d", r, tri_act_name(k), mb);
    return -1;
}

Test(schedule, one_f_one_b_and_gpipe_sweep) {
    for (int p = 2; p <= 8; p++)
        for (int m = p; m <= 4 * p; m++) {
            tri_schedule s;
            tri_sim_result r;
            play(&s, &r, TRI_SCHED_1F1B, p, 1, m);
            double want = (double)(p - 1) / m;
            cr_assert(fabs(r.bubble - want) <= 1e-12, "1f1b p %d m %d: bubble %.17g, closed form %.17g", p, m, r.bubble,
                      want);
            cr_assert(fabs(tri_schedule_bubble_formula(TRI_SCHED_1F1B, p, 1, m, unit) - want) <= 1e-15);
            for (int st = 0; st < p; st++) /* warmup p - s - 1, then one more before the first backward */
                cr_assert_eq(r.peak[st], p - st, "1f1b p %d m %d stage %d: peak %d", p, m, st, r.peak[st]);
            tri_sim_result_free(&r);
            tri_schedule_free(&s);

            play(&s, &r, TRI_SCHED_GPIPE, p, 1, m);
            cr_assert(fabs(r.bubble - want) <= 1e-12, "gpipe p %d m %d: bubble %.17g", p, m, r.bubble);
            for (int st = 0; st < p; st++) cr_assert_eq(r.peak[st], m, "gpipe p %d m %d stage %d", p, m, st);
            tri_sim_result_free(&r);
            tri_schedule_free(&s);

            play(&s, &r, TRI_SCHED_FORWARD, p, 1, m);
            cr_assert(fabs(r.bubble - want) <= 1e-12, "forward p %d m %d: bubble %.17g", p, m, r.bubble);
            tri_sim_result_free(&r);
            tri_schedule_free(&s);
        }
}

/* Megatron's warmup on stage s is w = (p - s - 1)*2 + (v - 1)*p forwards,
 * capped at m*v; the steady state runs one more forward before the first
 * backward, so the stage holds min(w + 1, m*v) (micro-batch, chunk) pairs at
 * its peak. */
Test(schedule, interleaved_sweep) {
    for (int p = 2; p <= 8; p++)
        for (int m = p; m <= 4 * p; m += p)
            for (int v = 2; v <= 3; v++) {
                tri_schedule s;
                tri_sim_result r;
                play(&s, &r, TRI_SCHED_INTERLEAVED, p, v, m);
                double want = (double)(p - 1) / ((double)v * m);
                cr_assert(fabs(r.bubble - want) <= 1e-12, "interleaved p %d v %d m %d: bubble %.17g, closed form %.17g",
                          p, v, m, r.bubble, want);
                for (int st = 0; st < p; st++) {
                    int w = (p - st - 1) * 2 + (v - 1) * p, peak = w + 1 < m * v ? w + 1 : m * v;
                    cr_assert_eq(r.peak[st], peak, "interleaved p %d v %d m %d stage %d: peak %d, want %d", p, v, m, st,
                                 r.peak[st], peak);
                    int sum = 0;
                    for (int c = 0; c < v; c++) sum += r.peak_chunk[st * v + c];
                    cr_assert_geq(sum, r.peak[st]);
                }
                tri_sim_result_free(&r);
                tri_schedule_free(&s);
            }
}

/* ZB-H1 (Qi et al. 2024) with asynchronous sends: every stage idles
 * (p-1)(F+B-W), so the bubble equals the closed form (p-1)(F+B-W)/(m(F+B+W))
 * whenever W <= min(F, B) (the paper's setting). Memory from the warmup rule:
 * stage s runs p - s - 1 warmup forwards and one more before its first B, and
 * holds its first W back for s steady iterations (s more forwards), so it
 * keeps p - s micro-batches until their B and p until their W (1F1B's stage 0
 * peak) on every stage, given m >= p. */
Test(schedule, zbh1_sweep) {
    const tri_sim_costs exact[] = {{1.0, 1.0, 1.0}, {1.0, 1.5, 0.5}, {2.0, 1.0, 1.0}, {1.0, 0.5, 0.5}, {0.5, 1.0, 0.5}};
    for (int p = 2; p <= 8; p++)
        for (int m = p; m <= 4 * p; m++) {
            tri_schedule s;
            tri_sim_result r;
            play(&s, &r, TRI_SCHED_ZBH1, p, 1, m);
            for (int st = 0; st < p; st++) {
                cr_assert_eq(r.peak[st], p, "zb-h1 p %d m %d stage %d: peak %d", p, m, st, r.peak[st]);
                cr_assert_eq(r.peak_in[st], p - st, "zb-h1 p %d m %d stage %d: peak until B %d", p, m, st,
                             r.peak_in[st]);
            }
            tri_sim_result_free(&r);
            for (size_t k = 0; k < sizeof exact / sizeof *exact; k++) {
                tri_sim_costs c = exact[k];
                cr_assert_eq(tri_schedule_simulate(&s, c, &r), 0);
                cr_assert(!r.deadlock && !r.invalid, "%s", r.why);
                double zb = (double)(p - 1) * (c.f + c.b - c.w) / ((double)m * (c.f + c.b + c.w));
                cr_assert(fabs(tri_schedule_bubble_formula(TRI_SCHED_ZBH1, p, 1, m, c) - zb) <= 1e-15);
                cr_assert(fabs(r.bubble - zb) <= 1e-12,
                          "zb-h1 p %d m %d costs %g,%g,%g: bubble %.17g, closed form %.17g", p, m, c.f, c.b, c.w,
                          r.bubble, zb);
                for (int st = 0; st < p; st++) /* every stage idles (p-1)(F+B-W), not only the busiest */
                    cr_assert(fabs(r.idle[st] - (p - 1) * (c.f + c.b - c.w)) <= 1e-9, "stage %d idles %g", st,
                              r.idle[st]);
                tri_sim_result_free(&r);
            }
            tri_schedule_free(&s);
        }
}

/* With W longer than F or B the closed form is out of reach (a W sits where
 * the critical path needs an F or a B): the bubble lies strictly between it
 * and 1F1B's (p-1)/m. */
Test(schedule, zbh1_long_w_between_the_forms) {
    const tri_sim_costs longw[] = {{1.0, 1.0, 2.0}, {1.0, 0.5, 1.5}, {1.0, 0.8, 0.9}, {0.8, 1.0, 0.9}};
    for (int p = 2; p <= 8; p++)
        for (int m = p; m <= 4 * p; m += p - 1) {
            tri_schedule s;
            cr_assert_eq(tri_schedule_build(&s, TRI_SCHED_ZBH1, p, 1, m), 0);
            for (size_t k = 0; k < sizeof longw / sizeof *longw; k++) {
                tri_sim_result r;
                tri_sim_costs c = longw[k];
                cr_assert_eq(tri_schedule_simulate(&s, c, &r), 0);
                cr_assert(!r.deadlock && !r.invalid, "%s", r.why);
                double zb = tri_schedule_bubble_formula(TRI_SCHED_ZBH1, p, 1, m, c), f1b = (double)(p - 1) / m;
                cr_assert(r.bubble > zb + 1e-12 && r.bubble < f1b - 1e-12,
                          "zb-h1 p %d m %d costs %g,%g,%g: bubble %.6f not in (%.6f, %.6f)", p, m, c.f, c.b, c.w,
                          r.bubble, zb, f1b);
                tri_sim_result_free(&r);
            }
            tri_schedule_free(&s);
        }
}

/* Sends do not block: a send ends when its receive is posted (the later of
 * the two posts, found here by scanning the peer's list for the matching
 * receive), while its rank goes on at once; in ZB-H1 p 4 m 8 some sends wait
 * for a late receive and the next compute starts at their post time. */
Test(schedule, sends_do_not_block) {
    tri_schedule s;
    tri_sim_result r;
    play(&s, &r, TRI_SCHED_ZBH1, 4, 1, 8);
    int held = 0;
    for (int q = 0; q < s.pp; q++)
        for (int i = 0; i < s.n[q]; i++) {
            const tri_action *a = &s.a[q][i];
            if (a->kind != TRI_ACT_SEND_ACT && a->kind != TRI_ACT_SEND_GRAD) continue;
            tri_act_kind rk = a->kind == TRI_ACT_SEND_ACT ? TRI_ACT_RECV_ACT : TRI_ACT_RECV_GRAD;
            int j = find(&s, a->peer, rk, a->mb);
            double met = fmax(r.start[q][i], r.start[a->peer][j]);
            cr_assert(fabs(r.end[q][i] - met) <= 1e-12, "stage %d action %d: send ends %g, met %g", q, i, r.end[q][i],
                      met);
            if (r.end[q][i] > r.start[q][i] + 0.5 && i + 1 < s.n[q] && s.a[q][i + 1].kind <= TRI_ACT_BWD_W &&
                fabs(r.start[q][i + 1] - r.start[q][i]) <= 1e-12)
                held++;
        }
    cr_assert_gt(held, 0, "no send outlived its post while its rank went on");
    tri_sim_result_free(&r);
    tri_schedule_free(&s);
}

Test(schedule, pp1_is_the_trivial_list) {
    tri_sched_kind kinds[] = {TRI_SCHED_1F1B, TRI_SCHED_GPIPE, TRI_SCHED_ZBH1};
    for (int k = 0; k < 3; k++) {
        tri_schedule s;
        tri_sim_result r;
        play(&s, &r, kinds[k], 1, 1, 5);
        cr_assert_eq(s.n[0], (kinds[k] == TRI_SCHED_ZBH1 ? 3 : 2) * 5 + 1);
        cr_assert_eq(r.bubble, 0.0);
        cr_assert_eq(r.peak[0], 1);
        tri_sim_result_free(&r);
        tri_schedule_free(&s);
    }
}

/* 1F1B p 4: stage 0 posts its receive of mb 0's gradient right after F1
 * instead of after F3, so it waits for a gradient that needs stage 1 to get
 * mb 2's activation, which stage 0 sends only after F2: deadlock. */
Test(schedule, moved_recv_deadlocks) {
    tri_schedule s;
    cr_assert_eq(tri_schedule_build(&s, TRI_SCHED_1F1B, 4, 1, 8), 0);
    tri_action *a = s.a[0];
    int from = find(&s, 0, TRI_ACT_RECV_GRAD, 0), to = find(&s, 0, TRI_ACT_SEND_ACT, 1) + 1;
    cr_assert_lt(to, from);
    tri_action rg = a[from];
    memmove(a + to + 1, a + to, (size_t)(from - to) * sizeof *a);
    a[to] = rg;
    tri_sim_result r;
    cr_assert_eq(tri_schedule_simulate(&s, unit, &r), 0);
    cr_assert(r.deadlock);
    cr_assert(!r.invalid);
    cr_assert(strstr(r.why, "stage 0 waits at recv-grad mb 0 chunk 0 from stage 1"), "%s", r.why);
    cr_assert(strstr(r.why, "stage 1 waits at recv-act mb 2 chunk 0 from stage 0"), "%s", r.why);
    tri_sim_result_free(&r);
    tri_schedule_free(&s);
}

/* Swapping two receives of the same kind: the messages no longer agree. */
Test(schedule, swapped_recv_mismatch) {
    tri_schedule s;
    cr_assert_eq(tri_schedule_build(&s, TRI_SCHED_1F1B, 4, 1, 8), 0);
    int i = find(&s, 1, TRI_ACT_RECV_ACT, 2), j = find(&s, 1, TRI_ACT_RECV_ACT, 3);
    s.a[1][i].mb = 3;
    s.a[1][j].mb = 2;
    tri_sim_result r;
    cr_assert_eq(tri_schedule_simulate(&s, unit, &r), 0);
    cr_assert(r.invalid);
    cr_assert(strstr(r.why, "recv-act mb 3 chunk 0 from stage 0") && strstr(r.why, "send-act mb 2 chunk 0 to stage 1"),
              "%s", r.why);
    tri_sim_result_free(&r);
    tri_schedule_free(&s);
}

/* A send nobody receives: every list runs to its end, but the executor's
 * end-of-step wait for that send would never return. */
Test(schedule, unreceived_send_deadlocks) {
    tri_schedule s;
    cr_assert_eq(tri_schedule_build(&s, TRI_SCHED_1F1B, 2, 1, 2), 0);
    int i = find(&s, 0, TRI_ACT_SEND_ACT, 1);
    tri_action *a = realloc(s.a[0], (size_t)(s.n[0] + 1) * sizeof *a);
    cr_assert_not_null(a);
    memmove(a + i + 1, a + i, (size_t)(s.n[0] - i) * sizeof *a);
    s.a[0] = a;
    s.n[0]++;
    tri_sim_result r;
    cr_assert_eq(tri_schedule_simulate(&s, unit, &r), 0);
    cr_assert(r.deadlock && !r.invalid, "%s", r.why);
    cr_assert(strstr(r.why, "stage 0's send-act mb 1 chunk 0 to stage 1 is never received"), "%s", r.why);
    tri_sim_result_free(&r);
    tri_schedule_free(&s);
}

static char *build_error(tri_sched_kind k, int p, int v, int m) {
    tt_capture c;
    tt_capture_begin(&c, "/tmp/tri_test_schedule_err.txt");
    tri_schedule s;
    int rc = tri_schedule_build(&s, k, p, v, m);
    char *e = tt_capture_end(&c);
    cr_assert_eq(rc, -1);
    cr_assert_null(s.a);
    return e;
}

Test(schedule, errors_name_the_numbers) {
    char *e = build_error(TRI_SCHED_INTERLEAVED, 4, 2, 6);
    cr_assert(strstr(e, "micro-batches 6 is not a multiple of pp 4"), "%s", e);
    free(e);
    e = build_error(TRI_SCHED_INTERLEAVED, 4, 2, 2);
    cr_assert(strstr(e, "micro-batches 2 < pp 4"), "%s", e);
    free(e);
    e = build_error(TRI_SCHED_1F1B, 4, 2, 8);
    cr_assert(strstr(e, "vpp 2"), "%s", e);
    free(e);
    e = build_error(TRI_SCHED_GPIPE, 0, 1, 8);
    cr_assert(strstr(e, "pp must be >= 1, got 0"), "%s", e);
    free(e);
    cr_assert_eq(tri_sched_parse("zb-h1"), TRI_SCHED_ZBH1);
    cr_assert_eq(tri_sched_parse("2f2b"), -1);
}

Test(schedule, cli_json) {
    char *out = NULL, cmd[512];
    snprintf(cmd, sizeof cmd, "%s schedule --pp 4 --micro-batches 8 --vpp 2 --json", tt_bin("trident"));
    cr_assert_eq(tt_run(cmd, &out), 0, "%s", out);
    cJSON *j = cJSON_Parse(out);
    cr_assert_not_null(j, "%s", out);
    const char *keys[] = {"bubble_ratio", "bubble_formula", "peak_inflight", "deadlock", "makespan", "schedule", "pp",
                          "vpp",          "micro_batches"};
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++)
        cr_assert_not_null(cJSON_GetObjectItem(j, keys[k]), "no %s in %s", keys[k], out);
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(j, "deadlock")));
    cr_assert_str_eq(cJSON_GetObjectItem(j, "schedule")->valuestring, "interleaved");
    cr_assert(fabs(cJSON_GetObjectItem(j, "bubble_ratio")->valuedouble - 3.0 / 16.0) <= 1e-12, "%s", out);
    cr_assert(fabs(cJSON_GetObjectItem(j, "bubble_formula")->valuedouble - 3.0 / 16.0) <= 1e-12, "%s", out);
    cJSON *pk = cJSON_GetObjectItem(j, "peak_inflight");
    cr_assert_eq(cJSON_GetArraySize(pk), 4);
    cr_assert_eq(cJSON_GetArrayItem(pk, 3)->valueint, 5); /* warmup 4 + 1 on the last stage */
    cJSON_Delete(j);
    free(out);

    snprintf(cmd, sizeof cmd, "%s schedule --pp 4 --micro-batches 8", tt_bin("trident"));
    cr_assert_eq(tt_run(cmd, &out), 0, "%s", out);
    cr_assert(strstr(out, "stage 3 |") && strstr(out, "deadlock check: ok"), "%s", out);
    free(out);

    snprintf(cmd, sizeof cmd, "%s schedule --pp 0 --micro-batches 8", tt_bin("trident"));
    cr_assert_eq(tt_run(cmd, &out), 2);
    cr_assert(strstr(out, "--pp") && strstr(out, "'0'"), "%s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "%s schedule --pp 4 --micro-batches 8 --costs 1,x,1", tt_bin("trident"));
    cr_assert_eq(tt_run(cmd, &out), 2);
    cr_assert(strstr(out, "--costs") && strstr(out, "1,x,1"), "%s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "%s schedule --pp 4 --micro-batches 6 --vpp 2", tt_bin("trident"));
    cr_assert_eq(tt_run(cmd, &out), 2);
    cr_assert(strstr(out, "6") && strstr(out, "pp 4"), "%s", out);
    free(out);
}

/* The grid of a schedule, printed into memory. */
static char *grid_text(int pp, int m, tri_sim_costs c, size_t *len) {
    tri_schedule s;
    tri_sim_result r;
    cr_assert_eq(tri_schedule_build(&s, TRI_SCHED_1F1B, pp, 1, m), 0);
    cr_assert_eq(tri_schedule_simulate(&s, c, &r), 0);
    char *text = NULL;
    FILE *f = open_memstream(&text, len);
    cr_assert_not_null(f);
    tri_schedule_print_grid(f, &s, &r);
    cr_assert_eq(fclose(f), 0);
    tri_sim_result_free(&r);
    tri_schedule_free(&s);
    return text;
}

/* The longest line of text. */
static size_t widest_line(const char *text) {
    size_t best = 0;
    for (const char *p = text; *p;) {
        size_t n = strcspn(p, "\n");
        if (n > best) best = n;
        p += n + (p[n] == '\n');
    }
    return best;
}

/* Issue 22: `trident schedule --pp 8 --micro-batches 1024 --costs 1e6,1e6,1e6`
 * wrote one column per time unit, gigabytes. A makespan above
 * TRI_GRID_MAX_COLS units is scaled by a whole factor: at most that many
 * columns whatever the costs, the factor said above the grid. A short one
 * keeps a column per time unit: its last column is the simulator's makespan
 * minus one. */
Test(schedule, grid_width_is_bounded_whatever_the_costs) {
    size_t len = 0;
    char *big = grid_text(8, 1024, (tri_sim_costs){1e6, 1e6, 1e6}, &len);
    cr_expect_lt(len, (size_t)64 << 10, "the grid is %zu bytes", len);
    cr_expect_leq(widest_line(big), 9 + (size_t)TRI_GRID_MAX_COLS * 7, "a line of %zu bytes", widest_line(big));
    cr_expect_not_null(strstr(big, "one column is "), "%.300s", big);
    char want_last[16];
    snprintf(want_last, sizeof want_last, " %d\n", TRI_GRID_MAX_COLS - 1);
    cr_expect_not_null(strstr(big, want_last), "no column %d: %.300s", TRI_GRID_MAX_COLS - 1, big);
    cr_expect_not_null(strstr(big, "stage 7 |"));
    free(big);

    tri_schedule s;
    tri_sim_result r;
    cr_assert_eq(tri_schedule_build(&s, TRI_SCHED_1F1B, 4, 1, 8), 0);
    cr_assert_eq(tri_schedule_simulate(&s, unit, &r), 0);
    long span = lround(r.makespan);
    tri_sim_result_free(&r);
    tri_schedule_free(&s);
    char *small = grid_text(4, 8, unit, &len);
    cr_expect_null(strstr(small, "one column is "), "%s", small);
    char last[32];
    snprintf(last, sizeof last, " %ld\nstage 0 |", span - 1);
    cr_expect_not_null(strstr(small, last), "no time column %ld (makespan %ld): %s", span - 1, span, small);
    free(small);
}
