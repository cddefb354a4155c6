/* The watchdog's pure logic (parallel/watchdog.c): the deadline, the polling
 * back-off and the report line. The transport's use of it (a rank that never
 * joins a collective) is tested with mpi_probe's stall mode in test_comm.c and
 * end to end in tests/fault/test_hang.c. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "parallel/watchdog.h"
#include "base/exitrec.h"
#include "helpers/testutil.h"

static double clock_of(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

Test(watchdog, pause_spins_then_yields_then_sleeps_a_growing_bounded_time) {
    const tri_wd_policy *p = &tri_wd_default_policy;
    cr_expect_eq(tri_wd_pause_ns(p, 0.0), 0);
    cr_expect_eq(tri_wd_pause_ns(p, 40e-6), 0);
    cr_expect_eq(tri_wd_pause_ns(p, 60e-6), -1);
    cr_expect_eq(tri_wd_pause_ns(p, 0.049), -1);
    /* beyond 50 ms: 1/1000 of the time waited, between 20 us and 1 ms */
    cr_expect_eq(tri_wd_pause_ns(p, 0.060), 60000);
    cr_expect_eq(tri_wd_pause_ns(p, 0.5), 500000);
    cr_expect_eq(tri_wd_pause_ns(p, 1.0), 1000000);
    cr_expect_eq(tri_wd_pause_ns(p, 3600.0), 1000000);
    cr_expect_eq(tri_wd_pause_ns(NULL, 3600.0), 1000000, "NULL means the default policy");
    tri_wd_policy q = {.spin_s = 0, .yield_s = 0, .sleep_frac = 0.5, .min_sleep_s = 0.002, .max_sleep_s = 0.01};
    cr_expect_eq(tri_wd_pause_ns(&q, 0.001), 2000000, "the floor");
    cr_expect_eq(tri_wd_pause_ns(&q, 0.012), 6000000);
    cr_expect_eq(tri_wd_pause_ns(&q, 1.0), 10000000, "the cap");
}

Test(watchdog, deadline_passes_at_timeout_and_never_without_one) {
    cr_expect(!tri_wd_expired(3.0, 2.999));
    cr_expect(tri_wd_expired(3.0, 3.0));
    cr_expect(tri_wd_expired(0.5, 1e9));
    cr_expect(!tri_wd_expired(0.0, 1e9), "timeout 0: no deadline");
    cr_expect(!tri_wd_expired(-1.0, 1e9));
}

typedef struct countdown {
    int left, polls;
} countdown;

static int done_after(void *ctx) {
    countdown *c = ctx;
    c->polls++;
    return --c->left <= 0;
}

Test(watchdog, wait_returns_once_done_without_waiting_for_the_deadline) {
    countdown c = {5, 0};
    double waited = -1;
    cr_assert_eq(tri_wd_wait(10.0, NULL, done_after, &c, &waited), 0);
    cr_expect_eq(c.polls, 5);
    cr_expect(waited >= 0 && waited < 0.05, "waited %g s", waited);
    /* done at the first poll even with a deadline already passed */
    countdown d = {1, 0};
    cr_expect_eq(tri_wd_wait(1e-9, NULL, done_after, &d, NULL), 0);
    cr_expect_eq(d.polls, 1);
}

static int never(void *ctx) {
    (*(int *)ctx)++;
    return 0;
}

/* A wait that never completes ends at its deadline, and while it waits it
 * leaves the core to others: a busy poll would use ~0.3 s of CPU here. */
Test(watchdog, expired_wait_ends_at_the_deadline_using_little_cpu) {
    int polls = 0;
    double waited = -1;
    double c0 = clock_of(CLOCK_PROCESS_CPUTIME_ID);
    int rc = tri_wd_wait(0.3, NULL, never, &polls, &waited);
    double cpu = clock_of(CLOCK_PROCESS_CPUTIME_ID) - c0;
    cr_assert_eq(rc, -1);
    cr_expect(waited >= 0.3 && waited < 0.6, "waited %g s for a 0.3 s deadline", waited);
    cr_expect(cpu < 0.15, "used %.3f s of CPU in a %.3f s wait (%d polls)", cpu, waited, polls);
    cr_expect(polls > 10, "%d polls", polls);
}

Test(watchdog, report_of_a_collective_names_step_group_op_bytes_and_peers) {
    tri_progress p = {7, "train", "", NULL};
    const int members[] = {0, 2};
    tri_wd_site s = {.world_rank = 0,
                     .progress = &p,
                     .group = "dp",
                     .op = "all-reduce",
                     .bytes = 8,
                     .peer = -1,
                     .members = members,
                     .n_members = 2,
                     .waited_s = 3.04,
                     .timeout_s = 3};
    char buf[512];
    cr_expect_str_eq(tri_wd_describe(buf, sizeof buf, &s),
                     "trident: rank 0: watchdog: step 7 (train): all-reduce over dp of 8 bytes has waited "
                     "3.0 s (parallel.timeout_s = 3): waiting for world rank 2 (dp = world ranks 0,2); "
                     "aborting the job");
    const int four[] = {1, 3, 5, 7};
    s.world_rank = 5;
    s.members = four;
    s.n_members = 4;
    s.group = "tp";
    s.op = "all-gather";
    s.bytes = 1048576;
    s.timeout_s = 0.5;
    tri_progress before = {0, "set-up", "", NULL};
    s.progress = &before;
    cr_expect_str_eq(tri_wd_describe(buf, sizeof buf, &s),
                     "trident: rank 5: watchdog: set-up: all-gather over tp of 1048576 bytes has waited "
                     "3.0 s (parallel.timeout_s = 0.5): waiting for world ranks 1,3,7 (tp = world ranks "
                     "1,3,5,7); aborting the job");
}

Test(watchdog, report_of_a_point_to_point_wait_names_the_peer) {
    tri_wd_site s = {.world_rank = 4,
                     .progress = NULL,
                     .group = "pp",
                     .op = "receive",
                     .bytes = 1024,
                     .peer = 0,
                     .tag = 3,
                     .waited_s = 600.2,
                     .timeout_s = 600};
    char buf[512];
    cr_expect_str_eq(tri_wd_describe(buf, sizeof buf, &s),
                     "trident: rank 4: watchdog: outside the training loop: receive over pp of 1024 bytes "
                     "from world rank 0 (tag 3) has waited 600.2 s (parallel.timeout_s = 600): waiting for "
                     "world rank 0; aborting the job");
    s.op = "send";
    s.peer = 6;
    cr_expect(strstr(tri_wd_describe(buf, sizeof buf, &s), "send over pp of 1024 bytes to world rank 6 (tag 3)"), "%s",
              buf);
}

Test(watchdog, report_cuts_long_member_lists_and_never_overflows) {
    int members[40];
    for (int i = 0; i < 40; i++) members[i] = i;
    tri_progress p = {12, "eval", "", NULL};
    tri_wd_site s = {.world_rank = 0,
                     .progress = &p,
                     .group = "world",
                     .op = "barrier",
                     .bytes = 0,
                     .peer = -1,
                     .members = members,
                     .n_members = 40,
                     .waited_s = 1,
                     .timeout_s = 1};
    char buf[1024];
    tri_wd_describe(buf, sizeof buf, &s);
    cr_expect(strstr(buf, "waiting for world ranks 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,... (39 in all)"), "%s", buf);
    cr_expect(strstr(buf, "(world = world ranks 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,... (40 in all))"), "%s", buf);
    char small[40];
    memset(small, 'x', sizeof small);
    tri_wd_describe(small, 32, &s);
    cr_expect_eq(strlen(small), 31, "cut to the buffer: '%s'", small);
    cr_expect_eq(small[32], 'x', "wrote past the length given");
}

/* Both reports print their line and record it with exit code 124 where
 * tridentrun reads a rank's own end (base/exitrec.h), before the transport
 * aborts: the code survives a teardown that kills the rank's wrapper. The
 * record's line is the printed one, and the describe functions' text. */
Test(watchdog, the_reports_record_exit_124_with_their_line_before_the_abort) {
    char *dir = tt_mkdtemp(), path[4200], got[1200];
    snprintf(path, sizeof path, "%s/rank_1.exit", dir);
    setenv(TRI_EXIT_RECORD_ENV, path, 1);
    unsetenv(TRI_EXIT_RECORD_DEBUG_ENV);
    tri_progress p = {7, "train", "", NULL};
    tri_wd_site s = {.world_rank = 1,
                     .progress = &p,
                     .group = "pp",
                     .op = "receive",
                     .bytes = 64,
                     .peer = 0,
                     .tag = 2,
                     .waited_s = 2.0,
                     .timeout_s = 2};
    tt_err_capture(got, sizeof got);
    tri_wd_report(&s);
    tt_err_capture(NULL, 0);
    char want[1024];
    tri_wd_describe(want, sizeof want, &s);
    const char *head = "trident: rank 1: watchdog: step 7 (train): receive over pp";
    cr_expect_eq(strncmp(want, head, strlen(head)), 0, "%s", want);
    cr_expect_str_eq(got, want + strlen("trident: "), "the printed line");
    tri_exit_rec r;
    cr_assert_eq(tri_exit_record_read(path, &r), 0, "no record at %s", path);
    cr_expect_eq(r.code, TRI_EXIT_TIMEOUT);
    cr_expect_str_eq(r.reason, want);

    tt_err_capture(got, sizeof got);
    tri_wd_report_named(1, &p, "all-reduce", "dp", 3.5, "world rank 0 (host h, last at step 7, train) has sent no "
                                                         "heartbeat for 3.3 s: it is stopped or gone");
    tt_err_capture(NULL, 0);
    tri_wd_describe_named(want, sizeof want, 1, &p, "all-reduce", "dp", 3.5,
                          "world rank 0 (host h, last at step 7, train) has sent no heartbeat for 3.3 s: it is "
                          "stopped or gone");
    cr_expect_str_eq(want,
                     "trident: rank 1: heartbeat: step 7 (train): all-reduce over dp has waited 3.5 s: world rank 0 "
                     "(host h, last at step 7, train) has sent no heartbeat for 3.3 s: it is stopped or gone; "
                     "aborting the job");
    cr_expect_str_eq(got, want + strlen("trident: "), "the printed line");
    cr_assert_eq(tri_exit_record_read(path, &r), 0);
    cr_expect_eq(r.code, TRI_EXIT_TIMEOUT);
    cr_expect_str_eq(r.reason, want);

    /* outside tridentrun (no variable): printed, nothing recorded */
    unsetenv(TRI_EXIT_RECORD_ENV);
    unlink(path);
    tt_err_capture(got, sizeof got);
    tri_wd_report(&s);
    tt_err_capture(NULL, 0);
    cr_expect(strstr(got, "watchdog: step 7"), "%s", got);
    cr_expect_neq(access(path, F_OK), 0);
    tt_rmrf(dir);
    free(dir);
}

/* The running clock: polls a few milliseconds apart count, a gap of more
 * than max_gap_s (the process was stopped) does not, nor a clock going back. */
Test(watchdog, clock_counts_running_time_and_skips_a_stop) {
    tri_wd_clock k;
    tri_wd_clock_start(&k, 100.0, 1.0);
    double t = 100.0;
    for (int i = 0; i < 1000; i++) t += 0.002; /* 2 s of polls every 2 ms */
    double run = 0;
    for (double x = 100.002; x <= t + 1e-9; x += 0.002) run = tri_wd_clock_tick(&k, x);
    cr_expect_float_eq(run, 2.0, 1e-6, "%g", run);
    run = tri_wd_clock_tick(&k, t + 3600.0); /* stopped for an hour */
    cr_expect_float_eq(run, 2.0, 1e-6, "a stop of an hour counted: %g", run);
    cr_expect_float_eq(k.paused, 3600.0, 1e-6);
    run = tri_wd_clock_tick(&k, t + 3600.5); /* a gap under max_gap_s is waiting: it counts */
    cr_expect_float_eq(run, 2.5, 1e-6, "%g", run);
    run = tri_wd_clock_tick(&k, t + 3600.0); /* backwards: nothing */
    cr_expect_float_eq(run, 2.5, 1e-6, "%g", run);
    run = tri_wd_clock_tick(&k, t + 3601.0 - 1e-3); /* just under max_gap_s after the last tick */
    cr_expect_float_eq(run, 3.5 - 1e-3, 1e-6, "%g", run);
}

static int stop_once(void *ctx) {
    int *polls = ctx;
    if (++*polls == 3) raise(SIGSTOP); /* a helper process continues us */
    return 0;
}

/* A wait whose whole process is stopped for longer than its deadline (a
 * suspended job) resumes and keeps waiting: the stop is not counted. The
 * process stops itself at the third poll; a child continues it 1.6 s later;
 * the 1 s deadline then passes 1 s of running time after the start. */
Test(watchdog, a_stop_longer_than_the_deadline_is_not_counted) {
    pid_t me = getpid();
    pid_t kid = fork();
    cr_assert_geq(kid, 0);
    if (kid == 0) {
        struct timespec ts = {1, 600000000L};
        nanosleep(&ts, NULL);
        kill(me, SIGCONT);
        _exit(0);
    }
    int polls = 0;
    double waited = -1;
    double t0 = clock_of(CLOCK_MONOTONIC);
    int rc = tri_wd_wait(1.0, NULL, stop_once, &polls, &waited);
    double wall = clock_of(CLOCK_MONOTONIC) - t0;
    int st;
    waitpid(kid, &st, 0);
    cr_expect_eq(rc, -1, "the deadline still passes once 1 s of running time is waited");
    cr_expect(wall >= 2.5, "the stop (1.6 s) was counted: the wait ended after %.2f s of wall time", wall);
    cr_expect(waited >= 1.0 && waited < 1.3, "waited %.3f s of running time", waited);
}
