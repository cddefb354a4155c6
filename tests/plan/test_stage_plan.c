/* Pipeline layouts (tri_chunks_layout, tri_gpt_check_layout in model/gpt.h)
 * against hand-written layer ranges and the messages they must print, and
 * stage plans (src/plan/stage_plan.h) against the closed forms of the schedules'
 * saved micro-batches: 1F1B keeps min(pp - s, m) on stage s, GPipe m, one
 * stage 1. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers/testutil.h"
#include "model/gpt.h"
#include "config/config.h"
#include "plan/stage_plan.h"

static tri_model_cfg model(int L) {
    return (tri_model_cfg){.n_layer = L, .n_head = 2, .n_embd = 16, .seq_len = 8, .vocab_size = 256};
}

/* Layers [first, last] of spec sp as expected: contiguous, ascending. */
static void expect_range(const tri_chunk_spec *sp, int first, int last, const char *what) {
    cr_expect_eq(sp->n_layers, last - first + 1, "%s: %d layers, want %d-%d", what, sp->n_layers, first, last);
    for (int i = 0; i < sp->n_layers && i <= last - first; i++)
        cr_expect_eq(sp->layers[i], first + i, "%s: layer %d is %d, want %d", what, i, sp->layers[i], first + i);
}

/* Runs tri_chunks_layout (stage 0) and tri_gpt_check_layout, expecting both
 * to fail with a message containing want. */
static void expect_layout_error(int L, int pp, int vpp, const char *layout, const char *want) {
    tri_model_cfg cfg = model(L);
    tri_chunk_spec specs[TRI_MAX_VPP];
    int *buf = malloc((size_t)L * sizeof *buf);
    tt_capture cap;
    tt_capture_begin(&cap, "/tmp/tri_stage_plan_err.txt");
    int rc = tri_chunks_layout(&cfg, pp, 0, vpp, layout, specs, buf);
    char *err = tt_capture_end(&cap);
    cr_expect_eq(rc, -1, "layout \"%s\" (pp %d vpp %d, %d layers) accepted", layout, pp, vpp, L);
    cr_expect(strstr(err, want), "layout \"%s\": want '%s' in: %s", layout, want, err);
    free(err);
    tt_capture_begin(&cap, "/tmp/tri_stage_plan_err.txt");
    rc = tri_gpt_check_layout(&cfg, 1, pp, vpp, layout);
    err = tt_capture_end(&cap);
    cr_expect_eq(rc, -1, "check_layout: layout \"%s\" accepted", layout);
    cr_expect(strstr(err, want), "check_layout \"%s\": want '%s' in: %s", layout, want, err);
    free(err);
    free(buf);
}

Test(layout, per_stage_counts_give_consecutive_ranges) {
    tri_model_cfg cfg = model(14);
    const int first[4] = {0, 3, 7, 11}, last[4] = {2, 6, 10, 13};
    for (int s = 0; s < 4; s++) {
        tri_chunk_spec sp;
        int buf[14];
        cr_assert_eq(tri_chunks_layout(&cfg, 4, s, 1, " 3, 4,4 ,3", &sp, buf), 0);
        expect_range(&sp, first[s], last[s], "stage");
        cr_expect_eq(sp.has_embedding, s == 0);
        cr_expect_eq(sp.has_head, s == 3);
    }
    cr_expect_eq(tri_gpt_check_layout(&cfg, 2, 4, 1, "3,4,4,3"), 0);
}

/* pp x vpp numbers are model chunks in model order: entry j is local chunk
 * j / pp of stage j % pp */
Test(layout, per_chunk_counts_follow_model_order) {
    tri_model_cfg cfg = model(10);
    /* model chunks: 0:[0] 1:[1-3] 2:[4-5] 3:[6-7] 4:[8] 5:[9]; pp 3, vpp 2 */
    const int first[6] = {0, 1, 4, 6, 8, 9}, last[6] = {0, 3, 5, 7, 8, 9};
    for (int s = 0; s < 3; s++) {
        tri_chunk_spec specs[2];
        int buf[10];
        cr_assert_eq(tri_chunks_layout(&cfg, 3, s, 2, "1,3,2,2,1,1", specs, buf), 0);
        for (int c = 0; c < 2; c++) {
            int j = c * 3 + s;
            char what[64];
            snprintf(what, sizeof what, "stage %d chunk %d (model chunk %d)", s, c, j);
            expect_range(&specs[c], first[j], last[j], what);
            cr_expect_eq(specs[c].has_embedding, j == 0, "%s", what);
            cr_expect_eq(specs[c].has_head, j == 5, "%s", what);
        }
    }
    cr_expect_eq(tri_gpt_check_layout(&cfg, 1, 3, 2, "1,3,2,2,1,1"), 0);
}

/* "" is the even split, the same as tri_chunks_even, and pp numbers that are
 * all equal give it too */
Test(layout, empty_string_is_the_even_split) {
    tri_model_cfg cfg = model(12);
    for (int s = 0; s < 2; s++) {
        tri_chunk_spec a[3], b[3], c[3];
        int ba[12], bb[12], bc[12];
        cr_assert_eq(tri_chunks_layout(&cfg, 2, s, 3, "", a, ba), 0);
        cr_assert_eq(tri_chunks_even(&cfg, 2, s, 3, b, bb), 0);
        cr_assert_eq(tri_chunks_layout(&cfg, 2, s, 3, "2,2,2,2,2,2", c, bc), 0);
        for (int k = 0; k < 3; k++) {
            expect_range(&a[k], (k * 2 + s) * 2, (k * 2 + s) * 2 + 1, "even");
            expect_range(&b[k], (k * 2 + s) * 2, (k * 2 + s) * 2 + 1, "tri_chunks_even");
            expect_range(&c[k], (k * 2 + s) * 2, (k * 2 + s) * 2 + 1, "explicit");
        }
    }
}

Test(layout, errors_name_the_numbers) {
    expect_layout_error(14, 4, 1, "3,4,4", "parallel.pp_layout has 3 numbers; parallel.pp 4 x parallel.vpp 1 needs 4");
    expect_layout_error(14, 4, 1, "3,4,4,2", "parallel.pp_layout \"3,4,4,2\" sums to 13 layers, model.n_layer is 14");
    expect_layout_error(14, 4, 1, "3,4,4,9", "sums to 20 layers, model.n_layer is 14");
    expect_layout_error(14, 4, 1, "7,4,0,3", "leaves chunk 2 (stage 2) empty");
    expect_layout_error(14, 4, 1, "7,4,-1,4", "leaves chunk 2 (stage 2) with a negative count");
    expect_layout_error(8, 2, 2, "2,2,0,4", "leaves chunk 2 (stage 0, its local chunk 1) empty");
    expect_layout_error(14, 4, 1, "3,x,4,4", "\"x\" is not a layer count");
    expect_layout_error(14, 4, 1, "3,,4,7", "\"\" is not a layer count");
    expect_layout_error(14, 4, 1, "3,4,4,3abc", "\"3abc\" is not a layer count");
    expect_layout_error(14, 4, 1, "3,4,4,3.5", "\"3.5\" is not a layer count");
    /* pp numbers with vpp > 1: one per chunk is needed */
    expect_layout_error(8, 2, 2, "4,4", "parallel.pp 2 x parallel.vpp 2 = 4 numbers");
    /* the even split that does not divide points at parallel.pp_layout */
    expect_layout_error(14, 4, 1, "", "model.n_layer (14) is not divisible by parallel.pp (4) x parallel.vpp (1)");
    expect_layout_error(14, 4, 1, "", "parallel.pp_layout");
    expect_layout_error(14, 4, 1, "", "\"4,4,3,3\"");
    expect_layout_error(3, 2, 2, "", "fewer than parallel.pp (2) x parallel.vpp (2) = 4 chunks");
    /* virtual chunks need stages to interleave */
    expect_layout_error(8, 1, 2, "", "parallel.vpp = 2 needs parallel.pp >= 2");
}

/* ---- stage plans ----------------------------------------------------------- */

static tri_config plan_cfg(int L, int pp, int vpp, int m, const char *schedule, const char *layout) {
    tri_config c;
    tri_config_defaults(&c);
    c.model = model(L);
    c.parallel.pp = pp;
    c.parallel.vpp = vpp;
    c.parallel.dp = 2;
    c.train.micro_batch = 3;
    c.train.global_batch = m * 3 * 2;
    c.parallel.schedule = (tri_sched_kind)tri_sched_parse(schedule);
    snprintf(c.parallel.pp_layout, sizeof c.parallel.pp_layout, "%s", layout);
    return c;
}

Test(stage_plan, one_f_one_b_keeps_pp_minus_s_on_stage_s) {
    const int ms[3] = {8, 3, 1};
    for (int i = 0; i < 3; i++) {
        int pp = 4, m = ms[i];
        tri_config c = plan_cfg(8, pp, 1, m, "1f1b", "");
        for (int s = 0; s < pp; s++) {
            tri_stage_plan sp;
            cr_assert_eq(tri_stage_plan_init(&sp, &c, s), 0);
            cr_expect_eq(sp.m, m);
            cr_expect_eq(sp.kind, TRI_SCHED_1F1B);
            cr_expect_eq(sp.n_chunks, 1);
            cr_expect_eq(sp.split, 0);
            int want = pp - s < m ? pp - s : m;
            cr_expect_eq(sp.slots[0], want, "m %d stage %d: %d slots, want min(pp - s, m) = %d", m, s, sp.slots[0],
                         want);
            expect_range(&sp.specs[0], 2 * s, 2 * s + 1, "1f1b stage");
            tri_stage_plan_free(&sp);
        }
    }
}

Test(stage_plan, gpipe_keeps_every_micro_batch) {
    tri_config c = plan_cfg(6, 3, 1, 5, "gpipe", "1,2,3");
    for (int s = 0; s < 3; s++) {
        tri_stage_plan sp;
        cr_assert_eq(tri_stage_plan_init(&sp, &c, s), 0);
        cr_expect_eq(sp.kind, TRI_SCHED_GPIPE);
        cr_expect_eq(sp.slots[0], 5, "stage %d: %d slots, want m = 5", s, sp.slots[0]);
        tri_stage_plan_free(&sp);
    }
}

Test(stage_plan, one_stage_keeps_one) {
    const char *kinds[3] = {"1f1b", "gpipe", "zb-h1"};
    for (int k = 0; k < 3; k++) {
        tri_config c = plan_cfg(3, 1, 1, 7, kinds[k], "");
        tri_stage_plan sp;
        cr_assert_eq(tri_stage_plan_init(&sp, &c, 0), 0, "%s", kinds[k]);
        cr_expect_eq(sp.slots[0], 1, "%s: %d slots", kinds[k], sp.slots[0]);
        expect_range(&sp.specs[0], 0, 2, "one stage");
        cr_expect(sp.specs[0].has_embedding && sp.specs[0].has_head);
        tri_stage_plan_free(&sp);
    }
}

/* 1f1b with vpp > 1 is the interleaved schedule; zb-h1 splits the backward */
Test(stage_plan, schedule_is_resolved) {
    tri_config c = plan_cfg(8, 2, 2, 4, "1f1b", "1,3,2,2");
    tri_stage_plan sp;
    cr_assert_eq(tri_stage_plan_init(&sp, &c, 1), 0);
    cr_expect_eq(sp.kind, TRI_SCHED_INTERLEAVED);
    cr_expect_eq(sp.n_chunks, 2);
    expect_range(&sp.specs[0], 1, 3, "stage 1 chunk 0");
    expect_range(&sp.specs[1], 6, 7, "stage 1 chunk 1");
    cr_expect(sp.specs[1].has_head && !sp.specs[0].has_head && !sp.specs[0].has_embedding);
    for (int k = 0; k < 2; k++) cr_expect(sp.slots[k] >= 1 && sp.slots[k] <= 4 * 2, "chunk %d: %d", k, sp.slots[k]);
    tri_stage_plan_free(&sp);
    c = plan_cfg(8, 2, 1, 4, "zb-h1", "");
    cr_assert_eq(tri_stage_plan_init(&sp, &c, 0), 0);
    cr_expect_eq(sp.kind, TRI_SCHED_ZBH1);
    cr_expect_eq(sp.split, 1);
    cr_expect(sp.slots[0] >= 2, "stage 0 of zb-h1 keeps at least what 1F1B keeps: %d", sp.slots[0]);
    tri_stage_plan_free(&sp);
    /* ZB-H1 keeps 1F1B's peak: pp micro-batches on stage 0, at most pp anywhere */
    c = plan_cfg(8, 4, 1, 8, "zb-h1", "");
    for (int s = 0; s < 4; s++) {
        cr_assert_eq(tri_stage_plan_init(&sp, &c, s), 0);
        cr_expect(s == 0 ? sp.slots[0] == 4 : sp.slots[0] <= 4 && sp.slots[0] >= 4 - s, "zb-h1 stage %d: %d slots", s,
                  sp.slots[0]);
        tri_stage_plan_free(&sp);
    }
}

static void expect_plan_error(const tri_config *c, int pp_rank, const char *want) {
    tri_stage_plan sp;
    tt_capture cap;
    tt_capture_begin(&cap, "/tmp/tri_stage_plan_err2.txt");
    int rc = tri_stage_plan_init(&sp, c, pp_rank);
    char *err = tt_capture_end(&cap);
    cr_expect_eq(rc, -1, "accepted (want '%s')", want);
    cr_expect(strstr(err, want), "want '%s' in: %s", want, err);
    cr_expect_null(sp.layers, "a failed plan holds nothing");
    free(err);
}

Test(stage_plan, errors_name_the_numbers) {
    tri_config c = plan_cfg(14, 4, 1, 8, "1f1b", "3,4,4,2");
    expect_plan_error(&c, 3, "parallel.pp_layout \"3,4,4,2\" sums to 13 layers, model.n_layer is 14");
    c = plan_cfg(14, 4, 1, 8, "1f1b", "3,4,4");
    expect_plan_error(&c, 0, "parallel.pp_layout has 3 numbers; parallel.pp 4 x parallel.vpp 1 needs 4");
    c = plan_cfg(14, 4, 1, 8, "1f1b", "");
    expect_plan_error(&c, 1, "parallel.pp_layout");
    c = plan_cfg(34, 2, 17, 4, "interleaved", "");
    expect_plan_error(&c, 0, "parallel.vpp = 17: at most 16");
    c = plan_cfg(8, 2, 1, 4, "1f1b", "");
    c.train.global_batch = 13;
    expect_plan_error(&c, 0, "train.global_batch (13)");
    /* the schedule's own constraints (interleaved: m mod pp is 0 or >= pp) */
    c = plan_cfg(8, 2, 2, 3, "interleaved", "");
    tri_stage_plan sp;
    tt_capture cap;
    tt_capture_begin(&cap, "/tmp/tri_stage_plan_err3.txt");
    int rc = tri_stage_plan_init(&sp, &c, 0);
    char *err = tt_capture_end(&cap);
    cr_expect_eq(rc, -1, "interleaved with 3 micro-batches over 2 stages accepted");
    cr_expect(strstr(err, "3"), "the message names m: %s", err);
    free(err);
}
