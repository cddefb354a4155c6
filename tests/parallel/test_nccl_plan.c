/* The NCCL transport's logic without NCCL (parallel/nccl_plan.c): the type
 * and reduction mapping, the groups that ncclCommSplit forms, the grouping of
 * p2p calls into one ncclGroupStart/End with their event slots, when the
 * compute stream must wait on a slot's event, and the failure message. (The values are checked against nccl.h itself at compile
 * time in parallel/comm_nccl.c.) */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>

#include "parallel/nccl_plan.h"

Test(nccl_plan, every_dtype_maps_to_an_nccl_type_of_the_same_width) {
    /* closed form: the name of each type, written out */
    struct {
        tri_dtype t;
        int want;
    } cases[] = {{TRI_F32, TRI_NCCL_FLOAT32}, {TRI_F64, TRI_NCCL_FLOAT64}, {TRI_BF16, TRI_NCCL_BFLOAT16},
                 {TRI_F16, TRI_NCCL_FLOAT16}, {TRI_I32, TRI_NCCL_INT32},   {TRI_U8, TRI_NCCL_UINT8}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int n = tri_nccl_dtype(cases[i].t);
        cr_expect_eq(n, cases[i].want, "dtype %d", (int)cases[i].t);
        cr_expect_eq(tri_nccl_dtype_bytes(n), tri_dtype_size(cases[i].t), "dtype %d: element sizes agree",
                     (int)cases[i].t);
    }
    cr_expect_eq(tri_nccl_dtype((tri_dtype)99), -1);
    cr_expect_eq(tri_nccl_dtype_bytes(42), 0);
    /* NCCL's own numbering (nccl.h) */
    cr_expect_eq(TRI_NCCL_FLOAT32, 7);
    cr_expect_eq(TRI_NCCL_BFLOAT16, 9);
}

Test(nccl_plan, reductions_map_to_sum_and_max) {
    cr_expect_eq(tri_nccl_redop(TRI_SUM), 0, "ncclSum");
    cr_expect_eq(tri_nccl_redop(TRI_MAX), 2, "ncclMax");
    cr_expect_eq(tri_nccl_redop((tri_redop)7), -1);
}

/* For every rank of a mesh: ranks with equal split color, ordered by key, are
 * exactly the group of that kind, in Megatron's order (tp-cp-dp-pp), written
 * here in closed form from the rank formula; the cp and dp x cp groups only
 * where context parallelism makes them (cp > 1). */
static void check_splits(int tp, int cp, int pp, int dp) {
    int world = tp * cp * pp * dp;
    char err[256];
    tri_mesh *m = calloc((size_t)world, sizeof *m);
    int *color = calloc((size_t)world, sizeof *color), *key = calloc((size_t)world, sizeof *key);
    int *got = calloc((size_t)world, sizeof *got), *want = calloc((size_t)world, sizeof *want);
    cr_assert(m && color && key && got && want);
    for (int r = 0; r < world; r++)
        cr_assert_eq(tri_mesh_init_cp(&m[r], world, r, tp, cp, pp, dp, err, sizeof err), 0, "%s", err);
    tri_group_kind kinds[] = {TRI_GROUP_TP, TRI_GROUP_DP, TRI_GROUP_PP, TRI_GROUP_EMB, TRI_GROUP_CP, TRI_GROUP_DPCP};
    const size_t n_kinds = cp > 1 ? 6 : 4;
    for (size_t k = 0; k < n_kinds; k++) {
        for (int r = 0; r < world; r++) tri_nccl_split_args(&m[r], kinds[k], &color[r], &key[r]);
        for (int r = 0; r < world; r++) {
            int t = r % tp, c = (r / tp) % cp, d = (r / (tp * cp)) % dp, p = r / (tp * cp * dp), nw = 0;
            /* the group by the formula rank = t + tp*(c + cp*(d + dp*p)) */
#define RANK(t_, c_, d_, p_) ((t_) + tp * ((c_) + cp * ((d_) + dp * (p_))))
            if (kinds[k] == TRI_GROUP_TP)
                for (int i = 0; i < tp; i++) want[nw++] = RANK(i, c, d, p);
            if (kinds[k] == TRI_GROUP_DP)
                for (int i = 0; i < dp; i++) want[nw++] = RANK(t, c, i, p);
            if (kinds[k] == TRI_GROUP_PP)
                for (int i = 0; i < pp; i++) want[nw++] = RANK(t, c, d, i);
            if (kinds[k] == TRI_GROUP_CP)
                for (int i = 0; i < cp; i++) want[nw++] = RANK(t, i, d, p);
            if (kinds[k] == TRI_GROUP_DPCP) /* Megatron's combined group: consecutive cp, then dp */
                for (int i = 0; i < dp; i++)
                    for (int j = 0; j < cp; j++) want[nw++] = RANK(t, j, i, p);
            if (kinds[k] == TRI_GROUP_EMB) {
                if (p != 0 && p != pp - 1) {
                    cr_expect_eq(color[r], TRI_NCCL_NOCOLOR, "tp%d cp%d pp%d dp%d: middle stage rank %d joins no EMB",
                                 tp, cp, pp, dp, r);
                    continue;
                }
                want[nw++] = RANK(t, c, d, 0);
                if (pp > 1) want[nw++] = RANK(t, c, d, pp - 1);
            }
#undef RANK
            /* what the split forms: same color, ordered by key */
            cr_assert_neq(color[r], TRI_NCCL_NOCOLOR, "rank %d kind %zu", r, k);
            int ng = 0;
            for (int key_i = 0; key_i < world; key_i++)
                for (int q = 0; q < world; q++)
                    if (color[q] == color[r] && key[q] == key_i) got[ng++] = q;
            cr_expect_eq(ng, nw, "tp%d cp%d pp%d dp%d kind %zu rank %d: %d members, want %d", tp, cp, pp, dp, k, r, ng,
                         nw);
            for (int i = 0; i < nw && i < ng; i++)
                cr_expect_eq(got[i], want[i], "tp%d cp%d pp%d dp%d kind %zu rank %d: member %d", tp, cp, pp, dp, k, r,
                             i);
            /* the NCCL rank (key) is the index the mesh gives */
            int idx = -1;
            tri_mesh_group(&m[r], kinds[k], got, &idx);
            cr_expect_eq(key[r], idx, "rank %d kind %zu", r, k);
        }
    }
    free(m);
    free(color);
    free(key);
    free(got);
    free(want);
}

Test(nccl_plan, split_colors_and_keys_form_the_mesh_groups) {
    int layouts[][3] = {{1, 1, 1}, {2, 1, 1}, {1, 1, 2}, {2, 2, 1}, {2, 1, 2}, {1, 4, 1}, {2, 3, 2}, {4, 2, 3}};
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++)
        check_splits(layouts[i][0], 1, layouts[i][1], layouts[i][2]);
}

Test(nccl_plan, split_colors_and_keys_form_the_context_parallel_groups) {
    /* tp, cp, pp, dp */
    int layouts[][4] = {{1, 2, 1, 1}, {1, 4, 1, 1}, {2, 2, 1, 1}, {1, 2, 1, 2}, {1, 2, 2, 1}, {2, 2, 2, 2}, {1, 3, 3, 2}};
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++)
        check_splits(layouts[i][0], layouts[i][1], layouts[i][2], layouts[i][3]);
}

/* parallel/pipeline.c's pattern: a batch's sends and receives back to back, then
 * waits: one group, started once, ended at the first wait; every request of
 * it completes with the same event. */
Test(nccl_plan, one_pipeline_batch_is_one_group) {
    tri_p2p_batcher b;
    tri_p2p_init(&b);
    tri_nccl_step st[3];
    const int pp = 3; /* a communicator id */
    for (int i = 0; i < 3; i++) cr_assert_eq(tri_p2p_post(&b, pp, &st[i]), 0);
    cr_expect(st[0].group_start && st[0].new_slot && !st[0].close_group, "the first call opens the group");
    for (int i = 1; i < 3; i++) {
        cr_expect(!st[i].group_start && !st[i].close_group && !st[i].new_slot, "call %d joins it", i);
        cr_expect_eq(st[i].slot, st[0].slot);
    }
    cr_expect_eq(b.open_calls, 3);
    cr_expect_eq(tri_p2p_refs(&b, st[0].slot), 3);
    int slot = -1, comm = -1;
    cr_expect_eq(tri_p2p_close(&b, &slot, &comm), 1, "the first wait closes it");
    cr_expect_eq(slot, st[0].slot);
    cr_expect_eq(comm, pp);
    cr_expect_eq(tri_p2p_close(&b, &slot, &comm), 0, "the second wait finds it closed");
    cr_expect_eq(b.groups_closed, 1);
    for (int i = 0; i < 3; i++) tri_p2p_done(&b, st[i].slot);
    cr_expect_eq(tri_p2p_refs(&b, st[0].slot), 0);
    /* the next batch reuses the event */
    tri_nccl_step n;
    cr_assert_eq(tri_p2p_post(&b, pp, &n), 0);
    cr_expect(n.group_start && !n.new_slot);
    cr_expect_eq(n.slot, st[0].slot);
    tri_p2p_free(&b);
    tri_p2p_free(NULL);
}

/* Sends outlive their batch (the pipeline reaps them later): the next batch
 * gets a new event while the old one still has requests pending. */
Test(nccl_plan, pending_sends_keep_their_event_and_the_next_batch_gets_another) {
    tri_p2p_batcher b;
    tri_p2p_init(&b);
    tri_nccl_step s1, r1, s2;
    tri_p2p_post(&b, 1, &s1);
    tri_p2p_post(&b, 1, &r1);
    int slot, comm;
    tri_p2p_close(&b, &slot, &comm);
    tri_p2p_done(&b, r1.slot); /* the receive was waited for, the send not yet */
    cr_expect_eq(tri_p2p_refs(&b, s1.slot), 1);
    tri_p2p_post(&b, 1, &s2);
    cr_expect(s2.group_start && s2.new_slot);
    cr_expect_neq(s2.slot, s1.slot);
    tri_p2p_done(&b, s1.slot);
    tri_p2p_done(&b, s1.slot); /* a second completion is harmless */
    cr_expect_eq(tri_p2p_refs(&b, s1.slot), 0);
    cr_expect_eq(tri_p2p_refs(&b, 1000), 0);
    tri_p2p_free(&b);
}

/* Any collective ends an open group first (ncclGroupStart is per thread: a
 * DP all-reduce issued inside the PP group would join it), and so does a p2p
 * call on another communicator. */
Test(nccl_plan, a_collective_or_another_communicator_closes_the_open_group) {
    tri_p2p_batcher b;
    tri_p2p_init(&b);
    tri_nccl_step p, c, q, r;
    tri_p2p_post(&b, 5, &p);
    cr_assert_eq(tri_p2p_collective(&b, 2, &c), 0);
    cr_expect(c.close_group);
    cr_expect_eq(c.close_slot, p.slot);
    cr_expect_eq(c.close_comm, 5);
    cr_expect(!c.group_start);
    cr_expect_neq(c.slot, p.slot, "the collective's event is its own while the group's requests pend");
    cr_expect_eq(tri_p2p_refs(&b, c.slot), 1);
    /* a collective with no group open closes nothing */
    tri_nccl_step c2;
    tri_p2p_collective(&b, 2, &c2);
    cr_expect(!c2.close_group);
    cr_expect_neq(c2.slot, c.slot);
    /* p2p on communicator 5, then on 6: the second call closes 5's group and opens one on 6 */
    tri_p2p_post(&b, 5, &q);
    tri_p2p_post(&b, 6, &r);
    cr_expect(r.close_group && r.group_start);
    cr_expect_eq(r.close_comm, 5);
    cr_expect_eq(r.close_slot, q.slot);
    cr_expect_neq(r.slot, q.slot);
    cr_expect_eq(b.open_comm, 6);
    cr_expect_eq(b.groups_closed, 2);
    tri_p2p_free(&b);
}

Test(nccl_plan, many_pending_requests_grow_the_slots) {
    tri_p2p_batcher b;
    tri_p2p_init(&b);
    int made = 0;
    for (int i = 0; i < 100; i++) {
        tri_nccl_step st;
        cr_assert_eq(tri_p2p_collective(&b, 0, &st), 0);
        made += st.new_slot;
        cr_expect_eq(st.slot, i, "every slot still pending: a new one");
    }
    cr_expect_eq(made, 100);
    cr_expect_eq(b.n_slots, 100);
    tri_p2p_done(&b, 37);
    tri_nccl_step st;
    tri_p2p_collective(&b, 0, &st);
    cr_expect_eq(st.slot, 37, "the freed slot is reused");
    cr_expect(!st.new_slot);
    tri_p2p_free(&b);
}

/* The compute stream waits on a slot's event once per use of the slot:
 * at the first completed request of a p2p group (its other requests share
 * the event), after a collective; never while the group is open (its event
 * is not recorded yet), and again when the slot is reused. */
Test(nccl_plan, the_compute_stream_waits_once_per_use_of_an_event_and_never_on_an_open_group) {
    tri_p2p_batcher b;
    tri_p2p_init(&b);
    tri_nccl_step st[3];
    for (int i = 0; i < 3; i++) tri_p2p_post(&b, 4, &st[i]);
    const int slot = st[0].slot;
    cr_expect_eq(tri_p2p_fence(&b, slot), -1, "the group is open: its event is not recorded");
    int cs, cc;
    cr_assert_eq(tri_p2p_close(&b, &cs, &cc), 1); /* the first wait closes it */
    cr_expect_eq(tri_p2p_fence(&b, slot), 1, "the first wait orders the compute stream");
    for (int i = 1; i < 3; i++) cr_expect_eq(tri_p2p_fence(&b, slot), 0, "request %d: already ordered", i);
    for (int i = 0; i < 3; i++) tri_p2p_done(&b, slot);
    /* a collective reuses the slot: a new use, a new wait */
    tri_nccl_step c;
    tri_p2p_collective(&b, 2, &c);
    cr_assert_eq(c.slot, slot);
    cr_expect_eq(tri_p2p_fence(&b, c.slot), 1);
    cr_expect_eq(tri_p2p_fence(&b, c.slot), 0);
    /* a slot of its own for the next collective while this one pends */
    tri_nccl_step d;
    tri_p2p_collective(&b, 2, &d);
    cr_expect_neq(d.slot, c.slot);
    cr_expect_eq(tri_p2p_fence(&b, d.slot), 1);
    cr_expect_eq(tri_p2p_fence(&b, -1), -1);
    cr_expect_eq(tri_p2p_fence(&b, 1000), -1);
    /* many slots: each new one starts unordered */
    for (int i = 0; i < 40; i++) {
        tri_nccl_step e;
        tri_p2p_collective(&b, 2, &e);
        cr_expect_eq(tri_p2p_fence(&b, e.slot), 1, "slot %d", e.slot);
    }
    tri_p2p_free(&b);
}

Test(nccl_plan, failure_message_names_rank_call_place_and_group) {
    char buf[256];
    /* (printed through tri_error_rank: "trident: rank R: " comes first) */
    tri_nccl_fail_msg(buf, sizeof buf, "dp", "ncclAllReduce(...)", "parallel/comm_nccl.c", 120,
                      "unhandled system error");
    cr_expect_str_eq(buf, "ncclAllReduce(...) failed at parallel/comm_nccl.c:120 (group dp): unhandled system error");
    tri_nccl_fail_msg(buf, sizeof buf, NULL, "cudaSetDevice(1)", "f.c", 7, "invalid device ordinal");
    cr_expect_str_eq(buf, "cudaSetDevice(1) failed at f.c:7: invalid device ordinal");
}
