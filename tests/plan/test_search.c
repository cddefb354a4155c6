/* The layout search (src/plan/search.h): the candidates it enumerates for a
 * small case against a list written by hand, the reasons it counts and
 * their words (the checks' own, as `trident plan --search` prints them),
 * silence while searching, the reasons' table, and the planner's cache as
 * an optimisation only. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers/testutil.h"
#include "config/config.h"
#include "plan/devices.h"
#include "plan/plan.h"
#include "plan/search.h"

/* The hand-worked case: 6 H100s, a model of 4 layers and 3 heads (C 96, T
 * 16), global batch 8, with micro_batch 1, recompute none, ZeRO 0 and cp 1
 * fixed by --set, as the command loads it. */
#define CASE_SETS                                                                                       \
    "model.n_layer=4", "model.n_head=3", "model.n_embd=96", "model.seq_len=16", "model.vocab_size=256", \
        "train.global_batch=8", "train.micro_batch=1", "train.recompute=none", "parallel.zero=0", "parallel.cp=1"
#define CASE_ARGS                                                                                                 \
    "--set model.n_layer=4 --set model.n_head=3 --set model.n_embd=96 --set model.seq_len=16 "                    \
    "--set model.vocab_size=256 --set train.global_batch=8 --set train.micro_batch=1 --set train.recompute=none " \
    "--set parallel.zero=0 --set parallel.cp=1"

static void load_case(tri_config *c) {
    const char *sets[] = {CASE_SETS};
    char path[1200];
    snprintf(path, sizeof path, "%s/configs/tiny-test.json", TRI_SOURCE_DIR);
    cr_assert_eq(tri_config_load(c, path, (int)(sizeof sets / sizeof sets[0]), sets), 0);
}

static tri_search_opts case_opts(const tri_config *base) {
    tri_search_opts o = {.base = base, .gpu = tri_gpu_lookup("h100"), .cpu = 0, .gpus = 6};
    o.limit = o.gpu->mem_bytes;
    o.fixed.mb = o.fixed.recompute = o.fixed.zero = o.fixed.cp = 1;
    return o;
}

/* The case's candidates in the search's order, worked out by hand from the
 * rules of tri_search_candidates: tp in {1, 2, 3, 6} (dividing 6), pp
 * dividing 6 / tp, dp the rest; vpp 2 only where 4 layers split evenly into
 * pp x 2 chunks; dp 6 and dp 3 do not divide the batch of 8 (no candidate);
 * sequence parallelism on where tp > 1 divides T = 16 (tp 2 only). */
static const struct {
    int tp, pp, dp, vpp, sp;
} want[] = {
    {1, 3, 2, 1, 0}, {1, 6, 1, 1, 0}, {2, 3, 1, 1, 1}, {3, 1, 2, 1, 0},
    {3, 2, 1, 1, 0}, {3, 2, 1, 2, 0}, {6, 1, 1, 1, 0},
};
#define N_WANT ((int)(sizeof want / sizeof want[0]))

/* Why the case's other layouts are refused, in the order first met, with
 * their counts: dp 6 at (tp 1, pp 1); dp 3 at (tp 1, pp 2, vpp 1 and 2) and
 * (tp 2, pp 1); then the checks' words for candidates 0, 1, 2 and 6. */
static const struct {
    int count;
    const char *why;
} refused[] = {
    {1, "global_batch 8 is not divisible by dp 6"},
    {3, "global_batch 8 is not divisible by dp 3"},
    {1, "model.n_layer (4) is not divisible by parallel.pp (3) x parallel.vpp (1) = 3; set parallel.pp_layout to "
        "give each stage its layers, e.g. \"2,1,1\""},
    {1, "model.n_layer (4) is fewer than parallel.pp (6) x parallel.vpp (1) = 6 chunks: every chunk needs at least "
        "one layer; lower parallel.pp or parallel.vpp"},
    {1, "n_head 3 is not divisible by tp 2"},
    {1, "n_head 3 is not divisible by tp 6"},
};
#define N_REFUSED ((int)(sizeof refused / sizeof refused[0]))

typedef struct seen {
    int n;
    tri_config c[64];
} seen;

static int collect(void *ctx, const tri_config *layout) {
    seen *s = ctx;
    cr_assert_lt(s->n, 64);
    s->c[s->n++] = *layout;
    return 0;
}

Test(search, candidates_of_a_small_case_are_the_hand_written_list) {
    tri_config base;
    load_case(&base);
    tri_search_opts o = case_opts(&base);
    seen s = {0};
    tri_search_reasons rej = {0};
    cr_assert_eq(tri_search_candidates(&o, &rej, collect, &s), 0);
    cr_assert_eq(s.n, N_WANT, "%d candidates", s.n);
    for (int i = 0; i < N_WANT; i++) {
        const tri_config *c = &s.c[i];
        cr_expect(c->parallel.tp == want[i].tp && c->parallel.pp == want[i].pp && c->parallel.dp == want[i].dp &&
                      c->parallel.vpp == want[i].vpp && c->parallel.sequence_parallel == want[i].sp,
                  "candidate %d: tp %d pp %d dp %d vpp %d sp %d", i, c->parallel.tp, c->parallel.pp, c->parallel.dp,
                  c->parallel.vpp, c->parallel.sequence_parallel);
        /* the fixed dimensions at the base's values, the rest of the config untouched */
        cr_expect(c->train.micro_batch == 1 && c->train.recompute == TRI_RECOMPUTE_NONE && c->parallel.zero == 0);
        cr_expect(c->parallel.schedule == TRI_SCHED_1F1B && c->model.n_layer == 4 && c->train.global_batch == 8);
    }
    /* the batch's refusals are the enumeration's; the checks' come later */
    cr_assert_eq(rej.n, 2);
    for (int i = 0; i < 2; i++) {
        cr_expect_str_eq(rej.text[i], refused[i].why);
        cr_expect_eq(rej.count[i], refused[i].count, "%s: %d", rej.text[i], rej.count[i]);
    }
}

/* A visitor's non-zero return stops the enumeration and is returned. */
static int stop_at_third(void *ctx, const tri_config *layout) {
    (void)layout;
    return ++*(int *)ctx == 3 ? 7 : 0;
}

Test(search, a_visitor_stops_the_enumeration) {
    tri_config base;
    load_case(&base);
    tri_search_opts o = case_opts(&base);
    tri_search_reasons rej = {0};
    int n = 0;
    cr_expect_eq(tri_search_candidates(&o, &rej, stop_at_third, &n), 7);
    cr_expect_eq(n, 3);
}

/* Unfixed, the search tries every micro-batch dividing the local batch,
 * every recompute policy, ZeRO where dp x cp > 1 and every cp dividing the
 * devices (with T divisible by 2 cp); zb-h1 takes no vpp > 1; an
 * interleaved base runs vpp 1 as 1f1b. Counted by hand for tp 1, pp 1 fixed
 * on 2 devices: cp 1, dp 2: micro-batches 1, 2, 4 x 3 policies x ZeRO 0, 1
 * = 18; cp 2 (T 16 = 4 x 4), dp 1: micro-batches 1, 2, 4, 8 x 3 x ZeRO 0, 1
 * (over the dp x cp = 2 ranks) = 24; 42 in all. */
Test(search, unfixed_dimensions_are_all_tried) {
    tri_config base;
    load_case(&base);
    base.parallel.tp = 1;
    base.parallel.pp = 1;
    base.parallel.dp = 2;
    tri_search_opts o = case_opts(&base);
    memset(&o.fixed, 0, sizeof o.fixed);
    o.fixed.tp = o.fixed.pp = 1;
    o.gpus = 2;
    seen s = {0};
    tri_search_reasons rej = {0};
    cr_assert_eq(tri_search_candidates(&o, &rej, collect, &s), 0);
    cr_expect_eq(s.n, 42, "%d candidates", s.n);
    int zero1 = 0, full = 0, mb4 = 0, cp2 = 0;
    for (int i = 0; i < s.n; i++) {
        zero1 += s.c[i].parallel.zero;
        full += s.c[i].train.recompute == TRI_RECOMPUTE_FULL;
        mb4 += s.c[i].train.micro_batch == 4;
        cp2 += s.c[i].parallel.cp == 2;
        cr_expect(s.c[i].parallel.zero <= 1 && s.c[i].parallel.offload == TRI_OFFLOAD_NONE,
                  "ZeRO 2, 3 and offload are tries of tri_search_run, not candidates");
    }
    cr_expect(zero1 == 21 && full == 14 && mb4 == 12 && cp2 == 24, "zero %d full %d mb4 %d cp2 %d", zero1, full, mb4,
              cp2);

    /* 2 stages of 2 layers: vpp 1 and 2 under 1f1b, vpp 1 only under zb-h1 */
    o.fixed = (tri_search_fixed){.tp = 1, .pp = 1, .mb = 1, .recompute = 1, .zero = 1};
    base.parallel.pp = 2;
    base.parallel.dp = 1;
    base.model.n_layer = 4;
    for (int k = 0; k < 3; k++) {
        tri_sched_kind kind[3] = {TRI_SCHED_1F1B, TRI_SCHED_ZBH1, TRI_SCHED_INTERLEAVED};
        base.parallel.schedule = kind[k];
        memset(&s, 0, sizeof s);
        cr_assert_eq(tri_search_candidates(&o, &rej, collect, &s), 0);
        cr_expect_eq(s.n, k == 1 ? 1 : 2, "%s: %d candidates", tri_sched_name(kind[k]), s.n);
        cr_expect_eq(s.c[0].parallel.vpp, 1);
        cr_expect_eq(s.c[0].parallel.schedule, k == 2 ? TRI_SCHED_1F1B : kind[k]);
        if (s.n == 2) cr_expect(s.c[1].parallel.vpp == 2 && s.c[1].parallel.schedule == kind[k]);
    }
}

/* The whole search of the case: 7 tried, the 3 layouts of tp 3 fit, the
 * other 4 refused in the checks' words, the counts as worked out above,
 * fastest first; and not a byte on stderr. */
Test(search, counts_and_words_the_reasons_and_prints_nothing) {
    tri_config base;
    load_case(&base);
    tri_search_opts o = case_opts(&base);
    tri_planner pl = {0};
    tri_search_result r;
    tt_capture cap;
    tt_capture_begin(&cap, "/tmp/tri_test_search_err.txt");
    int rc = tri_search_run(&pl, &o, &r);
    char *err = tt_capture_end(&cap);
    cr_assert_eq(rc, 0);
    cr_expect_str_eq(err, "", "the search printed: %s", err);
    free(err);
    cr_expect_eq(r.tried, N_WANT);
    cr_expect_eq(r.n, 3);
    cr_expect_eq(r.oom, 0);
    cr_expect_eq(r.closest_over, -1);
    cr_assert_eq(r.refused.n, N_REFUSED);
    cr_expect_eq(r.refused.other, 0);
    for (int i = 0; i < N_REFUSED; i++) {
        cr_expect_str_eq(r.refused.text[i], refused[i].why);
        cr_expect_eq(r.refused.count[i], refused[i].count, "%s", refused[i].why);
    }
    int vpp2 = 0;
    for (size_t i = 0; i < r.n; i++) {
        cr_expect(r.rows[i].fits && r.rows[i].cfg.parallel.tp == 3);
        cr_expect(r.rows[i].time.step_s > 0 && r.rows[i].mem.total > 0);
        if (i > 0) cr_expect_leq(r.rows[i - 1].time.step_s, r.rows[i].time.step_s);
        vpp2 += r.rows[i].cfg.parallel.vpp == 2;
    }
    cr_expect_eq(vpp2, 1);
    tri_search_result_free(&r);
    tri_planner_free(&pl);
}

/* `trident plan --search` prints the reasons as the search counted them:
 * its "rejected:" lines are the hand-written list, "  COUNT: WHY". */
Test(search, the_command_prints_the_reasons_as_counted) {
    char cmd[2048], *out = NULL;
    snprintf(cmd, sizeof cmd, "%s plan %s/configs/tiny-test.json --gpu h100 --gpus 6 --search --top 1 " CASE_ARGS,
             tt_bin("trident"), TRI_SOURCE_DIR);
    int rc = tt_run(cmd, &out);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "search over 6 devices: 7 layouts tried, 3 fit in 74.51 GiB, 0 out of memory, 4 invalid\n"),
              "%s", out);
    char want_text[4096] = "\nrejected:\n";
    for (int i = 0; i < N_REFUSED; i++) {
        size_t len = strlen(want_text);
        snprintf(want_text + len, sizeof want_text - len, "  %d: %s\n", refused[i].count, refused[i].why);
    }
    const char *rej = strstr(out, "\nrejected:\n");
    cr_assert_not_null(rej, "%s", out);
    cr_expect_str_eq(rej, want_text);
    free(out);
}

/* A reason the planner's evaluation gives (not its check): saved
 * activations of a billion positions of 2e8 channels overflow a byte count
 * (attention keeps no T x T state since issue 19, so positions alone no
 * longer do). Counted in the runtime's words, as `trident plan` has always
 * printed them (among others, 4 layouts each at micro-batches 2 and 4 of one
 * layer per stage on 8 H100s), and nothing printed. */
Test(search, the_planners_own_refusals_are_counted_silently) {
    tri_config base;
    const char *sets[] = {"model.seq_len=1000000000", "model.n_embd=200000000"};
    char path[1200];
    snprintf(path, sizeof path, "%s/configs/tiny-test.json", TRI_SOURCE_DIR);
    cr_assert_eq(tri_config_load(&base, path, 2, sets), 0);
    tri_search_opts o = {.base = &base, .gpu = tri_gpu_lookup("h100"), .gpus = 8};
    o.limit = o.gpu->mem_bytes;
    o.fixed.cp = 1; /* the counts below were worked out at cp 1 */
    tri_planner pl = {0};
    tri_search_result r;
    tt_capture cap;
    tt_capture_begin(&cap, "/tmp/tri_test_search_err2.txt");
    int rc = tri_search_run(&pl, &o, &r);
    char *err = tt_capture_end(&cap);
    cr_assert_eq(rc, 0);
    cr_expect_str_eq(err, "", "the search printed: %s", err);
    free(err);
    int found = 0;
    for (int i = 0; i < r.refused.n; i++)
        for (int mb = 2; mb <= 4; mb += 2) {
            char want_why[512];
            snprintf(want_why, sizeof want_why,
                     "saved activations of micro-batch %d x seq_len 1000000000 (n_embd 200000000, n_head 2, 1 layers) "
                     "overflow a byte count: reduce train.micro_batch or model.seq_len",
                     mb);
            if (!strcmp(r.refused.text[i], want_why)) {
                cr_expect_eq(r.refused.count[i], 4, "%s", want_why);
                found++;
            }
        }
    cr_expect_eq(found, 2);
    /* 132 candidates, 20 over the limit: 10 pairs at ZeRO 0 and 1 with dp > 1,
     * each ZeRO 1 one tried again at ZeRO 2, 3 and offloaded, over the limit too */
    cr_expect(r.tried == 132 + 30 && r.n == 0 && r.oom == 20 + 30, "tried %d fit %zu oom %d", r.tried, r.n, r.oom);
    tri_search_result_free(&r);
    tri_planner_free(&pl);
}

/* The first TRI_SEARCH_REASONS distinct reasons are listed, the rest
 * counted together; a reason longer than the table's room is cut. */
Test(search, the_reasons_table_keeps_the_first_reasons) {
    tri_search_reasons *r = calloc(1, sizeof *r);
    char why[64];
    for (int i = 0; i < TRI_SEARCH_REASONS + 3; i++) {
        snprintf(why, sizeof why, "reason %d", i);
        tri_search_reason_add(r, why);
        tri_search_reason_add(r, "reason 0");
    }
    cr_expect_eq(r->n, TRI_SEARCH_REASONS);
    cr_expect_eq(r->other, 3);
    cr_expect_eq(r->count[0], TRI_SEARCH_REASONS + 4);
    cr_expect_str_eq(r->text[5], "reason 5");
    cr_expect_eq(r->count[5], 1);
    free(r);

    r = calloc(1, sizeof *r);
    char *longer = malloc(TRI_SEARCH_WHY + 100);
    memset(longer, 'x', TRI_SEARCH_WHY + 99);
    longer[TRI_SEARCH_WHY + 99] = '\0';
    tri_search_reason_add(r, longer);
    cr_expect_eq(strlen(r->text[0]), TRI_SEARCH_WHY - 1);
    free(longer);
    free(r);
}

/* The planner's schedules are an optimisation: without one (NULL) the
 * search finds the same layouts with the same memory, and step times equal
 * but for the bubbles a planner reuses across cost ratios within 1e-3. */
Test(search, the_planner_only_saves_time) {
    tri_config base;
    const char *sets[] = {"model.n_layer=8", "model.n_head=4", "model.n_embd=256", "model.seq_len=256",
                          "train.global_batch=32"};
    char path[1200];
    snprintf(path, sizeof path, "%s/configs/tiny-test.json", TRI_SOURCE_DIR);
    cr_assert_eq(tri_config_load(&base, path, 5, sets), 0);
    tri_search_opts o = {.base = &base, .gpu = tri_gpu_lookup("a100"), .gpus = 8};
    o.limit = o.gpu->mem_bytes;
    tri_planner pl = {0};
    tri_search_result a, b;
    cr_assert_eq(tri_search_run(&pl, &o, &a), 0);
    cr_assert_eq(tri_search_run(NULL, &o, &b), 0);
    cr_assert_gt(a.n, 100);
    cr_assert_eq(a.n, b.n);
    cr_expect(a.tried == b.tried && a.oom == b.oom && a.refused.n == b.refused.n);
    /* rows sorted by time may swap where times tie within the tolerance:
     * compare each of a's layouts with the same layout in b */
    for (size_t i = 0; i < a.n; i++) {
        const tri_config *x = &a.rows[i].cfg;
        size_t j = 0;
        for (; j < b.n; j++) {
            const tri_config *y = &b.rows[j].cfg;
            if (x->parallel.tp == y->parallel.tp && x->parallel.pp == y->parallel.pp &&
                x->parallel.cp == y->parallel.cp && x->parallel.dp == y->parallel.dp &&
                x->parallel.vpp == y->parallel.vpp && x->train.micro_batch == y->train.micro_batch &&
                x->train.recompute == y->train.recompute && x->parallel.zero == y->parallel.zero &&
                x->parallel.offload == y->parallel.offload)
                break;
        }
        cr_assert_lt(j, b.n, "row %zu not found without a planner", i);
        const tri_plan_mem *ma = &a.rows[i].mem, *mb = &b.rows[j].mem;
        cr_expect(ma->params == mb->params && ma->grads == mb->grads && ma->optim == mb->optim &&
                      ma->saved_act_peak == mb->saved_act_peak && ma->saved_act_alloc == mb->saved_act_alloc &&
                      ma->workspace == mb->workspace && ma->total == mb->total && ma->stage == mb->stage,
                  "row %zu: memory differs", i);
        double sa = a.rows[i].time.step_s, sb = b.rows[j].time.step_s;
        cr_expect(fabs(sa - sb) <= 1e-3 * sb, "row %zu: %.9g s with a planner, %.9g s without", i, sa, sb);
    }
    cr_expect_gt(pl.n, 0);
    tri_search_result_free(&a);
    tri_search_result_free(&b);
    tri_planner_free(&pl);
    cr_expect(pl.n == 0 && pl.sched == NULL);
}
