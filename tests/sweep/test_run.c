/* src/sweep/run.c, the parts that start nothing: the command line of a
 * point (through tridentrun for more than one rank, --threads, --resume),
 * how it is printed for the log and --dry-run, and where the programs are
 * found. Running points end to end: tests/system/test_sweep.c. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers/testutil.h"
#include "sweep/sweep.h"

/* A sweep and a point made by hand (no file, no config loaded). */
static void make(tri_sweep *sw, tri_sweep_point *p, int dp, int threads) {
    memset(sw, 0, sizeof *sw);
    memset(p, 0, sizeof *p);
    sw->base = "base.json";
    sw->threads = threads;
    snprintf(sw->self, sizeof sw->self, "/opt/t/trident");
    snprintf(sw->runner, sizeof sw->runner, "/opt/t/tridentrun");
    snprintf(p->dir, sizeof p->dir, "out/lr=0.1");
    p->sets[p->n_sets++] = (char *)"train.lr=0.1";
    p->sets[p->n_sets++] = (char *)"log.dir=out/lr=0.1";
    p->cfg.parallel.tp = p->cfg.parallel.pp = 1;
    p->cfg.parallel.dp = dp;
}

/* argv joined with single spaces. */
static void joined(const char *const *av, char *buf, size_t n) {
    buf[0] = '\0';
    for (int i = 0; av[i]; i++) {
        size_t len = strlen(buf);
        snprintf(buf + len, n - len, "%s%s", i ? " " : "", av[i]);
    }
}

Test(sweep_run, one_rank_point_runs_trident_train_with_its_sets) {
    tri_sweep sw;
    tri_sweep_point p;
    make(&sw, &p, 1, 0);
    const char *av[TRI_SWEEP_ARGV_MAX];
    char ranks_dir[TRI_PATH_MAX + 16], threads[16], line[8192];
    int n = tri_sweep_point_argv(&sw, &p, 0, av, ranks_dir, threads);
    cr_expect_eq(n, 7);
    cr_expect_null(av[n]);
    joined(av, line, sizeof line);
    cr_expect_str_eq(line, "/opt/t/trident train base.json --set train.lr=0.1 --set log.dir=out/lr=0.1");
}

Test(sweep_run, threads_and_resume_come_last) {
    tri_sweep sw;
    tri_sweep_point p;
    make(&sw, &p, 1, 4);
    const char *av[TRI_SWEEP_ARGV_MAX];
    char ranks_dir[TRI_PATH_MAX + 16], threads[16], line[8192];
    int n = tri_sweep_point_argv(&sw, &p, 1, av, ranks_dir, threads);
    cr_expect_eq(n, 10);
    joined(av, line, sizeof line);
    cr_expect_str_eq(line, "/opt/t/trident train base.json --set train.lr=0.1 --set log.dir=out/lr=0.1 "
                           "--threads 4 --resume");
}

Test(sweep_run, several_ranks_go_through_tridentrun_with_a_log_dir) {
    tri_sweep sw;
    tri_sweep_point p;
    make(&sw, &p, 2, 0);
    const char *av[TRI_SWEEP_ARGV_MAX];
    char ranks_dir[TRI_PATH_MAX + 16], threads[16], line[8192];
    tri_sweep_point_argv(&sw, &p, 0, av, ranks_dir, threads);
    joined(av, line, sizeof line);
    cr_expect_str_eq(line, "/opt/t/tridentrun --log-dir out/lr=0.1/ranks -- /opt/t/trident train base.json "
                           "--set train.lr=0.1 --set log.dir=out/lr=0.1");
}

/* Plain words as they are, others (spaces, quotes' neighbours, empty) in single quotes. */
Test(sweep_run, printed_argv_quotes_what_a_shell_would_split) {
    const char *av[] = {"/opt/t/trident", "train", "a b.json", "--set", "data.val=", "", "x=1,2:3+4", "$HOME", NULL};
    FILE *f = tmpfile();
    cr_assert(f);
    tri_sweep_print_argv(f, av);
    rewind(f);
    char buf[512] = {0};
    size_t got = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[got] = '\0';
    cr_expect_str_eq(buf, "/opt/t/trident train 'a b.json' --set data.val= '' x=1,2:3+4 '$HOME'\n");
}

/* This program is found through /proc/self/exe, tridentrun beside it. */
Test(sweep_run, programs_are_this_one_and_tridentrun_beside_it) {
    tri_sweep sw;
    memset(&sw, 0, sizeof sw);
    cr_assert_eq(tri_sweep_find_programs(&sw), 0);
    const char *slash = strrchr(sw.self, '/');
    cr_assert(slash != NULL && sw.self[0] == '/', "%s", sw.self);
    cr_expect(strstr(slash, "test_") != NULL || strstr(slash, "tri_tests") != NULL, "self: %s", sw.self);
    char want[TRI_PATH_MAX + 16];
    snprintf(want, sizeof want, "%.*s/tridentrun", (int)(slash - sw.self), sw.self);
    cr_expect_str_eq(sw.runner, want);
    /* one-rank points need no tridentrun, wherever it is */
    snprintf(sw.runner, sizeof sw.runner, "/nonexistent/tridentrun");
    tri_sweep_point p;
    memset(&p, 0, sizeof p);
    p.cfg.parallel.tp = p.cfg.parallel.pp = p.cfg.parallel.dp = 1;
    sw.points = &p;
    sw.n_points = 1;
    cr_expect_eq(tri_sweep_check_runner(&sw), 0);
    /* a two-rank point does */
    p.cfg.parallel.dp = 2;
    sw.file = "s.json";
    char *dir = tt_mkdtemp(), path[4200];
    snprintf(path, sizeof path, "%s/stderr", dir);
    tt_capture cap;
    tt_capture_begin(&cap, path);
    int rc = tri_sweep_check_runner(&sw);
    char *err = tt_capture_end(&cap);
    cr_expect_eq(rc, -1);
    cr_expect_str_eq(err, "trident: s.json: points with tp*pp*dp > 1 run through tridentrun, but "
                          "/nonexistent/tridentrun is missing (No such file or directory)\n");
    free(err);
    tt_rmrf(dir);
    free(dir);
}
