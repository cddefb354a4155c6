/* The progress heartbeat's judging (parallel/heartbeat.c): made-up records
 * and clocks. The running heartbeat is tested end to end in
 * tests/fault/test_hang.c (a stopped rank, a rank stuck before its step). */
#include <criterion/criterion.h>

#include <stdio.h>
#include <string.h>

#include "parallel/heartbeat.h"

static tri_hb_record rec(uint64_t seq, uint64_t count, int waiting, int step, const char *phase) {
    tri_hb_record r;
    memset(&r, 0, sizeof r);
    r.seq = seq;
    r.count = count;
    r.waiting = waiting;
    r.step = step;
    snprintf(r.phase, sizeof r.phase, "%s", phase);
    snprintf(r.host, sizeof r.host, "node%d", step % 7);
    return r;
}

/* Four ranks watched by rank 0 every 0.25 s for `secs`: rank 1 beats and
 * progresses, rank 2 beats and waits (for rank 3), rank 3 per `mode`:
 * 0 healthy, 1 stopped (no beats), 2 alive but stuck (beats, no progress,
 * not waiting). Returns the judgement after each observation round; the
 * first that names someone is kept in *v and its time in *at. */
static int run(int mode, double secs, double silent_s, double progress_s, tri_hb_verdict *v, double *at) {
    tri_hb_seen seen[4];
    memset(seen, 0, sizeof seen);
    uint64_t seq = 0, count1 = 0;
    for (double now = 0; now <= secs + 1e-9; now += 0.25) {
        seq++;
        count1 += 3;
        tri_hb_record r1 = rec(seq, count1, 0, 9, "train"), r2 = rec(seq, 50, 1, 9, "train");
        tri_hb_record r3 = rec(mode == 1 ? 1 : seq, mode == 0 ? count1 : 40, 0, 8, "data");
        tri_hb_observe(&seen[1], &r1, now);
        tri_hb_observe(&seen[2], &r2, now);
        tri_hb_observe(&seen[3], &r3, now);
        if (tri_hb_judge(seen, 4, 0, now, silent_s, progress_s, v)) {
            *at = now;
            return 1;
        }
    }
    return 0;
}

Test(heartbeat, healthy_and_waiting_ranks_are_never_named) {
    tri_hb_verdict v;
    double at = -1;
    cr_expect_eq(run(0, 120.0, 5.0, 30.0, &v, &at), 0, "named rank %d at %g s", v.rank, at);
}

Test(heartbeat, a_silent_rank_is_named_after_silent_s) {
    tri_hb_verdict v;
    double at = -1;
    cr_assert_eq(run(1, 60.0, 5.0, 30.0, &v, &at), 1);
    cr_expect_eq(v.rank, 3);
    cr_expect(v.silent);
    cr_expect_eq(v.n_blamed, 1);
    /* its last beat was seen at 0 s: named at the first look >= 5 s */
    cr_expect(at >= 5.0 && at < 5.3, "named at %g s", at);
    char buf[512];
    tri_hb_seen seen[4];
    memset(seen, 0, sizeof seen);
    seen[3].valid = 1;
    seen[3].last = rec(1, 40, 0, 8, "data");
    cr_expect_str_eq(tri_hb_describe(buf, sizeof buf, &v, seen, 30.0),
                     "world rank 3 (host node1, last at step 8, data) has sent no heartbeat for 5.0 s: it is "
                     "stopped or gone");
}

Test(heartbeat, a_live_rank_without_progress_outside_a_wait_is_named_after_progress_s) {
    tri_hb_verdict v;
    double at = -1;
    cr_assert_eq(run(2, 60.0, 5.0, 30.0, &v, &at), 1);
    cr_expect_eq(v.rank, 3);
    cr_expect(!v.silent);
    cr_expect(at >= 30.0 && at < 30.3, "named at %g s", at);
    /* progress_timeout_s shorter than the silent threshold bounds both */
    cr_assert_eq(run(1, 60.0, 5.0, 2.0, &v, &at), 1);
    cr_expect(v.silent && at >= 2.0 && at < 2.3, "named at %g s", at);
}

/* The watcher's clock skips a stop of its own process (tri_wd_clock): when
 * the whole job was suspended, every peer's last beat is as recent on that
 * clock as before, and nobody is named; a peer that moves on after the
 * resume stays fresh. */
Test(heartbeat, a_whole_job_suspension_blames_nobody) {
    tri_wd_clock k;
    tri_wd_clock_start(&k, 1000.0, 0.25 + TRI_WD_PAUSE_GAP_S);
    tri_hb_seen seen[2];
    memset(seen, 0, sizeof seen);
    double raw = 1000.0;
    uint64_t seq = 0;
    tri_hb_verdict v;
    for (int i = 0; i < 8; i++) { /* 2 s of beats */
        raw += 0.25;
        seq++;
        tri_hb_record r = rec(seq, seq, 0, 3, "train");
        tri_hb_observe(&seen[1], &r, tri_wd_clock_tick(&k, raw));
    }
    raw += 600.0; /* everyone stopped for 10 minutes; the watcher resumes first */
    tri_hb_record stale = rec(seq, seq, 0, 3, "train");
    double now = tri_wd_clock_tick(&k, raw);
    tri_hb_observe(&seen[1], &stale, now);
    cr_expect_eq(tri_hb_judge(seen, 2, 0, now, 5.0, 30.0, &v), 0, "named rank %d after a suspension", v.rank);
    for (int i = 0; i < 40; i++) {
        raw += 0.25;
        seq++;
        tri_hb_record r = rec(seq, seq, 0, 3, "train");
        now = tri_wd_clock_tick(&k, raw);
        tri_hb_observe(&seen[1], &r, now);
        cr_expect_eq(tri_hb_judge(seen, 2, 0, now, 5.0, 30.0, &v), 0);
    }
    /* the same records against wall time: named at once */
    tri_hb_seen wall[2];
    memset(wall, 0, sizeof wall);
    tri_hb_observe(&wall[1], &stale, 1002.0);
    tri_hb_observe(&wall[1], &stale, 1602.0);
    cr_expect_eq(tri_hb_judge(wall, 2, 0, 1602.0, 5.0, 30.0, &v), 1, "the control: wall time names the peer");
}

Test(heartbeat, the_longest_silent_of_several_is_named_and_the_others_counted) {
    tri_hb_seen seen[5];
    memset(seen, 0, sizeof seen);
    tri_hb_record r = rec(1, 1, 0, 1, "train");
    for (int i = 1; i < 5; i++) tri_hb_observe(&seen[i], &r, 0.0);
    tri_hb_record r2 = rec(2, 2, 0, 1, "train");
    tri_hb_observe(&seen[2], &r2, 1.0); /* rank 2 beat once more, at 1 s */
    tri_hb_observe(&seen[4], &r2, 9.0); /* rank 4 is fresh */
    tri_hb_verdict v;
    cr_assert_eq(tri_hb_judge(seen, 5, 0, 9.0, 5.0, 30.0, &v), 1);
    cr_expect_eq(v.rank, 1, "ranks 1 and 3 silent 9 s, rank 2 8 s: the first of the longest");
    cr_expect_eq(v.n_blamed, 3);
    cr_expect(v.silent);
    cr_expect_float_eq(v.for_s, 9.0, 1e-12);
    /* the watcher itself is never judged */
    cr_expect_eq(tri_hb_judge(seen, 5, 1, 9.0, 5.0, 30.0, &v), 1);
    cr_expect_eq(v.rank, 3);
}
