/* src/launch/placement: host files and placing ranks on hosts, checked
 * against placements written out by hand, and every refusal against the
 * line users see (tri_error's message, captured). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/err.h"
#include "helpers/testutil.h"
#include "launch/launch.h"

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "%s", path);
    fputs(text, f);
    cr_assert_eq(fclose(f), 0);
}

/* Reads a host file written from text; returns tri_launch_hostfile_read's
 * result, its message in why (captured; "" when none) and the plan. */
static int read_hosts(const char *text, tri_launch_plan *p, char *why, size_t n) {
    char *dir = tt_mkdtemp(), path[4200];
    snprintf(path, sizeof path, "%s/hosts", dir);
    write_text(path, text);
    memset(p, 0, sizeof *p);
    tt_err_capture(why, n);
    int rc = tri_launch_hostfile_read(p, path);
    tt_err_capture(NULL, 0);
    /* the message names the file: keep what follows "<dir>/" */
    size_t dl = strlen(dir) + 1;
    if (!strncmp(why, dir, dl - 1)) memmove(why, why + dl, strlen(why + dl) + 1);
    tt_rmrf(dir);
    free(dir);
    return rc;
}

Test(placement, host_files_give_hosts_slots_and_lines) {
    tri_launch_plan p;
    char why[512];
    cr_assert_eq(read_hosts("# two nodes\nnodeA slots=8\n\n  nodeB   # the second\n\tnodeC\tslots=2 \n", &p, why,
                            sizeof why),
                 0, "%s", why);
    cr_assert_eq(p.nhosts, 3);
    const char *hosts[] = {"nodeA", "nodeB", "nodeC"};
    int slots[] = {8, 0, 2}, lines[] = {2, 4, 5};
    for (int h = 0; h < 3; h++) {
        cr_expect_str_eq(p.hosts[h], hosts[h]);
        cr_expect_eq(p.slots[h], slots[h], "host %d", h);
        cr_expect_eq(p.lines[h], lines[h], "host %d", h);
    }
    tri_launch_plan_free(&p);
    cr_assert_eq(p.nhosts, 0);
    tri_launch_plan_free(NULL);
}

Test(placement, host_file_errors_name_the_file_and_line) {
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"nodeA\nnodeA\n", "hosts:2: host 'nodeA' is listed twice"},
        {"nodeA slots=0\n", "hosts:1: 'slots=0': expected \"HOST [slots=N]\" with N >= 1, once"},
        {"nodeA slots=two\n", "hosts:1: 'slots=two': expected \"HOST [slots=N]\" with N >= 1, once"},
        {"nodeA max_slots=4\n", "hosts:1: 'max_slots=4': expected \"HOST [slots=N]\" with N >= 1, once"},
        {"# one\nnodeA slots=2 slots=3\n", "hosts:2: 'slots=3': expected \"HOST [slots=N]\" with N >= 1, once"},
        {"nodeA slots=1048577\n", "hosts:1: 'slots=1048577': expected \"HOST [slots=N]\" with N >= 1, once"},
        {"# nothing\n\n", "hostfile hosts lists no hosts"},
        {"", "hostfile hosts lists no hosts"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tri_launch_plan p;
        char why[512];
        int rc = read_hosts(cases[i].text, &p, why, sizeof why);
        cr_expect_eq(rc, -1, "case %zu", i);
        /* "hostfile <dir>/hosts ..." names the path in the middle */
        char *at = strstr(why, "hostfile /");
        if (at) {
            char *slash = strrchr(why, '/');
            memmove(at + 9, slash + 1, strlen(slash + 1) + 1);
        }
        cr_expect_str_eq(why, cases[i].want, "case %zu", i);
        tri_launch_plan_free(&p);
    }
}

Test(placement, a_missing_or_special_host_file_is_refused_without_waiting) {
    char *dir = tt_mkdtemp(), path[4200], why[512], want[4400];
    snprintf(path, sizeof path, "%s/none", dir);
    tri_launch_plan p = {0};
    tt_err_capture(why, sizeof why);
    cr_assert_eq(tri_launch_hostfile_read(&p, path), -1);
    tt_err_capture(NULL, 0);
    snprintf(want, sizeof want, "cannot read hostfile %s: cannot open: No such file or directory", path);
    cr_expect_str_eq(why, want);
    /* a named pipe would block a reader forever */
    cr_assert_eq(mkfifo(path, 0644), 0);
    tri_launch_plan_free(&p);
    tt_err_capture(why, sizeof why);
    cr_assert_eq(tri_launch_hostfile_read(&p, path), -1);
    tt_err_capture(NULL, 0);
    snprintf(want, sizeof want, "cannot read hostfile %s: not a regular file (a named pipe)", path);
    cr_expect_str_eq(why, want);
    tri_launch_plan_free(&p);
    tt_rmrf(dir);
    free(dir);
}

/* A plan of n hosts nodeA, nodeB, ... on lines 1..n with the given slots,
 * and the trainer's layout when tp > 0. */
static void hand_plan(tri_launch_plan *p, int n, const int *slots, int tp, int pp, int dp) {
    memset(p, 0, sizeof *p);
    p->nhosts = n;
    p->hosts = calloc((size_t)n, sizeof *p->hosts);
    p->slots = calloc((size_t)n, sizeof *p->slots);
    p->lines = calloc((size_t)n, sizeof *p->lines);
    p->ranks = calloc((size_t)n, sizeof *p->ranks);
    for (int h = 0; h < n; h++) {
        p->hosts[h] = malloc(8);
        snprintf(p->hosts[h], 8, "node%c", 'A' + h);
        p->slots[h] = slots ? slots[h] : 0;
        p->lines[h] = h + 1;
    }
    if (tp > 0) {
        p->have_layout = 1;
        p->tp = tp;
        p->pp = pp;
        p->dp = dp;
    }
}

Test(placement, ranks_fill_hosts_as_the_rules_say) {
    static const int none[3] = {0, 0, 0}, s8_0[2] = {8, 0}, s2_3[2] = {2, 3}, s3_3_8[3] = {3, 3, 8};
    static const struct {
        int n;
        const int *slots;
        int nproc, tp, pp, dp; /* tp 0: not the trainer */
        int ranks[3], world, most;
    } cases[] = {
        /* --nproc-per-node N: N on every host, within any slots */
        {2, s8_0, 2, 0, 0, 0, {2, 2}, 4, 2},
        {3, s3_3_8, 3, 0, 0, 0, {3, 3, 3}, 9, 3},
        {1, none, 3, 1, 3, 1, {3}, 3, 3},
        /* slots everywhere: every slot for any command, tp*pp*dp in file order for the trainer */
        {2, s2_3, 0, 0, 0, 0, {2, 3}, 5, 3},
        {2, s2_3, 0, 2, 1, 2, {2, 2}, 4, 2},
        {3, s3_3_8, 0, 2, 1, 2, {3, 1, 0}, 4, 3},
        /* no slots: tp*pp*dp spread evenly for the trainer, else 1 per host */
        {2, none, 0, 2, 2, 1, {2, 2}, 4, 2},
        {3, none, 0, 0, 0, 0, {1, 1, 1}, 3, 1},
        {1, none, 0, 2, 2, 2, {8}, 8, 8},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tri_launch_plan p;
        hand_plan(&p, cases[i].n, cases[i].slots, cases[i].tp, cases[i].pp, cases[i].dp);
        tri_launch_opts o = {.nproc = cases[i].nproc, .hostfile = "hosts"};
        char why[512];
        tt_err_capture(why, sizeof why);
        int rc = tri_launch_place_ranks(&p, &o);
        tt_err_capture(NULL, 0);
        cr_assert_eq(rc, 0, "case %zu: %s", i, why);
        for (int h = 0; h < cases[i].n; h++) cr_expect_eq(p.ranks[h], cases[i].ranks[h], "case %zu host %d", i, h);
        cr_expect_eq(p.world, cases[i].world, "case %zu", i);
        cr_expect_eq(p.nproc, cases[i].most, "case %zu", i);
        tri_launch_plan_free(&p);
    }
}

Test(placement, placements_that_cannot_work_say_why_with_the_numbers) {
    static const int none[3] = {0, 0, 0}, s8_2[2] = {8, 2}, s2_0_3[3] = {2, 0, 3}, s1_2[2] = {1, 2};
    static const struct {
        int n;
        const int *slots;
        int nproc, tp, pp, dp;
        const char *want;
    } cases[] = {
        {2, s8_2, 4, 0, 0, 0, "hosts:2: host nodeB has slots=2, fewer than --nproc-per-node 4"},
        {3, s2_0_3, 0, 0, 0, 0,
         "hosts:2: host nodeB has no slots=N but other hosts have; give slots=N for every host, or --nproc-per-node"},
        {2, s1_2, 0, 2, 1, 2,
         "parallel.tp (2) x parallel.pp (1) x parallel.dp (2) = 4 ranks, but hostfile hosts has 3 slots"},
        {3, none, 0, 2, 2, 1,
         "parallel.tp (2) x parallel.pp (2) x parallel.dp (1) = 4 ranks do not divide over 3 hosts; give "
         "--nproc-per-node or slots=N in the hostfile"},
        {1, none, 3, 2, 1, 2,
         "parallel.tp (2) x parallel.pp (1) x parallel.dp (2) = 4, but --nproc-per-node 3 x 1 host = 3 ranks"},
        {2, none, 3, 2, 1, 2,
         "parallel.tp (2) x parallel.pp (1) x parallel.dp (2) = 4, but --nproc-per-node 3 x 2 hosts = 6 ranks"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tri_launch_plan p;
        hand_plan(&p, cases[i].n, cases[i].slots, cases[i].tp, cases[i].pp, cases[i].dp);
        tri_launch_opts o = {.nproc = cases[i].nproc, .hostfile = "hosts"};
        char why[512];
        tt_err_capture(why, sizeof why);
        int rc = tri_launch_place_ranks(&p, &o);
        tt_err_capture(NULL, 0);
        cr_expect_eq(rc, -1, "case %zu", i);
        cr_expect_str_eq(why, cases[i].want, "case %zu", i);
        tri_launch_plan_free(&p);
    }
}

/* Issue 22: 268M ranks were placed on a 2-core host. A host without slots=N
 * runs at most o->max_per_host ranks (TRI_LAUNCH_MAX_PER_HOST when 0); a host
 * whose slots=N allow more keeps them (they say what it can run). */
Test(placement, ranks_beyond_a_host_without_slots_are_refused) {
    static const int none[2] = {0, 0}, s1000[1] = {1000}, big[2] = {1 << 20, 1}; /* slots fill up: 2^20 + 1 */
    static const struct {
        int n;
        const int *slots;
        int nproc, max, tp, pp, dp;
        int rc;
        const char *want;
    } cases[] = {
        {1, none, 0, 0, 1, 1, 256, 0, ""},
        {1, none, 0, 0, 1, 1, 257, -1,
         "257 ranks on host nodeA (parallel.tp 1 x pp 1 x dp 257 = 257 ranks): more than 256 on a host without "
         "slots=N; give the hosts and their slots in a --hostfile, or raise --max-ranks-per-host"},
        {2, none, 0, 0, 2, 1, 256, 0, ""}, /* 256 per host over 2 hosts */
        {1, none, 300, 0, 0, 0, 0, -1,
         "300 ranks on host nodeA: more than 256 on a host without slots=N; give the hosts and their slots in a "
         "--hostfile, or raise --max-ranks-per-host"},
        {1, none, 300, 300, 0, 0, 0, 0, ""},
        {1, none, 0, 4, 1, 1, 5, -1, "5 ranks on host nodeA (parallel.tp 1 x pp 1 x dp 5 = 5 ranks): more than 4"},
        {1, s1000, 0, 0, 1, 1, 1000, 0, ""},
        {1, s1000, 1000, 0, 0, 0, 0, 0, ""},
        {2, big, 0, 0, 0, 0, 0, -1, "1048577 ranks over 2 hosts: at most 1048576 (2^20) ranks"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tri_launch_plan p;
        hand_plan(&p, cases[i].n, cases[i].slots, cases[i].tp, cases[i].pp, cases[i].dp);
        tri_launch_opts o = {.nproc = cases[i].nproc, .max_per_host = cases[i].max, .hostfile = "hosts"};
        char why[512] = "";
        tt_err_capture(why, sizeof why);
        int rc = tri_launch_place_ranks(&p, &o);
        tt_err_capture(NULL, 0);
        cr_expect_eq(rc, cases[i].rc, "case %zu: %s", i, why);
        cr_expect(strncmp(why, cases[i].want, strlen(cases[i].want)) == 0, "case %zu: \"%s\"", i, why);
        tri_launch_plan_free(&p);
    }
}

Test(placement, each_rank_runs_on_the_host_its_block_falls_on) {
    static const int s3_3_8[3] = {3, 3, 8};
    tri_launch_plan p;
    hand_plan(&p, 3, s3_3_8, 2, 1, 2);
    tri_launch_opts o = {.hostfile = "hosts"};
    cr_assert_eq(tri_launch_place_ranks(&p, &o), 0);
    const char *want[] = {"nodeA", "nodeA", "nodeA", "nodeB", "?"};
    for (int r = 0; r < 5; r++) cr_expect_str_eq(tri_launch_host_of(&p, r), want[r], "rank %d", r);
    tri_launch_plan_free(&p);
}

Test(placement, integers_are_strict) {
    long v = -7;
    cr_expect_eq(tri_launch_parse_int("12", 1, 20, &v), 0);
    cr_expect_eq(v, 12);
    cr_expect_eq(tri_launch_parse_int(" +3", 1, 20, &v), 0, "strtol's leading blanks and sign");
    cr_expect_eq(v, 3);
    const char *bad[] = {"", "0", "21", "1x", "3 ", "+", "0x10", "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_expect_eq(tri_launch_parse_int(bad[i], 1, 20, &v), -1, "'%s'", bad[i]);
    cr_expect_eq(tri_launch_parse_int(NULL, 1, 20, &v), -1);
    cr_expect_eq(v, 3, "a refused value leaves *out alone");
}
