/* src/launch/supervisor: the rank wrapper's first-error scan (fed in the
 * pieces a pipe delivers), its status files (written, then read back as the
 * launcher reads them), and one whole run of the wrapper: the rank's log,
 * the console lines, the status, the exit code passed on. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "helpers/testutil.h"
#include "launch/launch.h"

/* Feeds text to a fresh scan in pieces of `step` bytes; returns the index of
 * the piece in which an error line was first reported, or -1. */
static int scan_pieces(const char *text, size_t step) {
    tri_err_scan e;
    memset(&e, 0, sizeof e);
    size_t n = strlen(text);
    for (size_t at = 0, k = 0; at < n; at += step, k++)
        if (tri_err_scan_put(&e, text + at, n - at < step ? n - at : step)) return (int)k;
    return -1;
}

Test(supervisor, error_lines_are_told_from_the_rest_across_reads) {
    static const struct {
        const char *text;
        int error;
    } cases[] = {
        {"trident: data/x.bin: cannot open\n", 1},
        {"tridentrun: rank 1: cannot run 'x': No such file or directory\n", 1},
        {"step 1 loss 4.2\ntrident: parallel.tp 3 does not divide n_head 4\n", 1},
        {"trident: note: resuming from step 20\n", 0},
        {"trident: warning: plots: cannot run scripts/plot.py, no plots\n", 0},
        {"trident: warn\n", 1},
        {"step 1\n  trident: indented\nwarning from a library\n", 0},
        {"the trident: word mid-line\n", 0},
        /* a line longer than the scan's head: decided on its first bytes */
        {"trident: a very long message that goes on and on well past the first bytes\n", 1},
        {"trident: note: a very long note that goes on and on well past the first bytes\n", 0},
        /* an error line without its newline yet counts once its head is in */
        {"trident: out of memory after all these bytes", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (size_t step = 1; step <= 64; step *= 2)
            cr_expect_eq(scan_pieces(cases[i].text, step) >= 0, cases[i].error, "case %zu, pieces of %zu", i, step);
    /* reported in the read where the line ends (or its first 24 bytes are in) */
    cr_expect_eq(scan_pieces("ok\ntrident: x\n", 3), 4);
}

Test(supervisor, status_files_read_back_as_written) {
    char *dir = tt_mkdtemp();
    tri_rank_status st;
    tri_rank_status_read(dir, 3, &st);
    cr_expect_eq(st.state, TRI_RANK_NONE, "no file yet");

    char host[256] = "";
    cr_assert_eq(gethostname(host, sizeof host - 1), 0);
    tri_rank_status_write(dir, 3, TRI_RANK_RUNNING, 1700000000.25, -1, 0);
    tri_rank_status_read(dir, 3, &st);
    cr_expect_eq(st.state, TRI_RANK_RUNNING);
    cr_expect_eq(st.t, 1700000000.25);
    cr_expect_eq(st.value, (long)getpid());
    cr_expect_str_eq(st.host, host);
    cr_expect_eq(st.first_error, 0);

    tri_rank_status_write(dir, 3, TRI_RANK_RUNNING, 1700000000.25, -1, 1700000001.5);
    tri_rank_status_read(dir, 3, &st);
    cr_expect_eq(st.state, TRI_RANK_RUNNING);
    cr_expect_eq(st.first_error, 1700000001.5);

    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    tri_rank_status_write(dir, 3, TRI_RANK_EXIT, 1700000000.25, 6, 1700000001.5);
    tri_rank_status_read(dir, 3, &st);
    cr_expect_eq(st.state, TRI_RANK_EXIT);
    cr_expect_eq(st.value, 6);
    cr_expect(st.t >= (double)now.tv_sec && st.t < (double)now.tv_sec + 60, "the time it ended: %f", st.t);
    cr_expect_eq(st.first_error, 1700000001.5);

    tri_rank_status_write(dir, 3, TRI_RANK_SIGNAL, 0, 9, 0);
    tri_rank_status_read(dir, 3, &st);
    cr_expect_eq(st.state, TRI_RANK_SIGNAL);
    cr_expect_eq(st.value, 9);
    cr_expect_eq(st.first_error, 0);

    /* the file's text, as docs and other tools read it; no temporary left */
    char path[4200];
    snprintf(path, sizeof path, "%s/rank_3.status", dir);
    char *text = tt_read(path);
    cr_assert_not_null(text);
    double t;
    int sig = 0;
    cr_expect_eq(sscanf(text, "%lf signal %d\n", &t, &sig), 2, "%s", text);
    cr_expect_eq(sig, 9);
    free(text);
    snprintf(path, sizeof path, "%s/.rank_3.status.tmp", dir);
    cr_expect_neq(access(path, F_OK), 0);

    /* what is not a status line is no state */
    snprintf(path, sizeof path, "%s/rank_4.status", dir);
    FILE *f = fopen(path, "w");
    fputs("garbage\n", f);
    fclose(f);
    tri_rank_status_read(dir, 4, &st);
    cr_expect_eq(st.state, TRI_RANK_NONE);
    tt_rmrf(dir);
    free(dir);
}

/* Runs the wrapper as rank `rank` on /bin/sh -c script, its console (fd 1)
 * into dir/console; returns its exit code. */
static int wrap(const char *dir, int rank, int tee, int attempt, const char *script) {
    char r[16], path[4200];
    snprintf(r, sizeof r, "%d", rank);
    setenv("OMPI_COMM_WORLD_RANK", r, 1);
    snprintf(path, sizeof path, "%s/console", dir);
    fflush(stdout);
    int saved = dup(STDOUT_FILENO), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    cr_assert(saved >= 0 && fd >= 0);
    dup2(fd, STDOUT_FILENO);
    close(fd);
    char *cmd[] = {"/bin/sh", "-c", (char *)script, NULL};
    tri_rank_exec_opts o = {.log_dir = dir, .tee = tee, .attempt = attempt, .cmd = cmd};
    int rc = tri_launch_rank_exec(&o);
    dup2(saved, STDOUT_FILENO);
    close(saved);
    return rc;
}

static char *read_in(const char *dir, const char *name) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char *s = tt_read(path);
    cr_assert_not_null(s, "%s", path);
    return s;
}

Test(supervisor, a_rank_is_logged_teed_and_ends_as_its_command_did) {
    char *dir = tt_mkdtemp();
    /* rank 2 with --tee: every line on the console, prefixed; stdout and
     * stderr both in the log; the exit code passed on */
    int rc = wrap(dir, 2, 1, 0, "echo out; echo 'trident: it broke' >&2; printf partial; exit 4");
    cr_expect_eq(rc, 4);
    char *log = read_in(dir, "rank_2.log");
    cr_expect(strstr(log, "out\n") && strstr(log, "trident: it broke\n") && strstr(log, "partial"), "%s", log);
    free(log);
    char *con = read_in(dir, "console");
    cr_expect(strstr(con, "[rank 2] out\n"), "%s", con);
    cr_expect(strstr(con, "[rank 2] trident: it broke\n"), "%s", con);
    cr_expect(strstr(con, "[rank 2] partial\n"), "an unended line is ended on the console: %s", con);
    free(con);
    tri_rank_status st;
    tri_rank_status_read(dir, 2, &st);
    cr_expect_eq(st.state, TRI_RANK_EXIT);
    cr_expect_eq(st.value, 4);
    cr_expect_gt(st.first_error, 0, "the error line was noted");

    /* rank 1 without --tee: nothing on the console; a later attempt appends
     * under a header; a clean run notes no error */
    rc = wrap(dir, 1, 0, 0, "echo first");
    cr_expect_eq(rc, 0);
    rc = wrap(dir, 1, 0, 1, "echo second; echo 'trident: note: resumed' >&2");
    cr_expect_eq(rc, 0);
    log = read_in(dir, "rank_1.log");
    cr_expect_str_eq(log, "first\n----- tridentrun: attempt 2 -----\nsecond\ntrident: note: resumed\n");
    free(log);
    con = read_in(dir, "console");
    cr_expect_str_eq(con, "");
    free(con);
    tri_rank_status_read(dir, 1, &st);
    cr_expect_eq(st.state, TRI_RANK_EXIT);
    cr_expect_eq(st.value, 0);
    cr_expect_eq(st.first_error, 0);

    /* rank 0 is on the console without a prefix */
    rc = wrap(dir, 0, 0, 0, "echo zero");
    cr_expect_eq(rc, 0);
    con = read_in(dir, "console");
    cr_expect_str_eq(con, "zero\n");
    free(con);
    tt_rmrf(dir);
    free(dir);
}

Test(supervisor, a_command_that_cannot_run_exits_127_and_says_so_in_its_log) {
    char *dir = tt_mkdtemp();
    setenv("OMPI_COMM_WORLD_RANK", "1", 1);
    char *cmd[] = {"/nonexistent/prog", NULL};
    tri_rank_exec_opts o = {.log_dir = dir, .cmd = cmd};
    cr_expect_eq(tri_launch_rank_exec(&o), 127);
    char *log = read_in(dir, "rank_1.log");
    cr_expect_str_eq(log, "trident: rank 1: cannot run '/nonexistent/prog': No such file or directory\n");
    free(log);
    tri_rank_status st;
    tri_rank_status_read(dir, 1, &st);
    cr_expect_eq(st.state, TRI_RANK_EXIT);
    cr_expect_eq(st.value, 127);
    cr_expect_gt(st.first_error, 0);
    tt_rmrf(dir);
    free(dir);
}

Test(supervisor, without_a_rank_or_a_log_it_refuses_in_one_line) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
    char *cmd[] = {"/bin/true", NULL};
    tri_rank_exec_opts o = {.log_dir = "/nonexistent", .cmd = cmd};
    char why[512];
    tt_err_capture(why, sizeof why);
    cr_expect_eq(tri_launch_rank_exec(&o), 2);
    tt_err_capture(NULL, 0);
    cr_expect_str_eq(why, "--rank-exec: no rank in the environment (OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK, "
                          "SLURM_PROCID)");
    /* the first variable that holds a rank wins */
    setenv("PMI_RANK", "x", 1);
    setenv("SLURM_PROCID", "5", 1);
    tt_err_capture(why, sizeof why);
    cr_expect_eq(tri_launch_rank_exec(&o), 2);
    tt_err_capture(NULL, 0);
    cr_expect_str_eq(why, "rank 5: cannot open /nonexistent/rank_5.log: No such file or directory");
}

/* The wrapper names DIR/rank_<r>.exit to its command (TRIDENT_EXIT_RECORD),
 * where a rank that ends the job records its own exit code (base/exitrec.h),
 * after removing a record of an earlier attempt; the status reader returns
 * the record beside the status, and no record as code -1. */
Test(supervisor, the_command_is_told_where_to_record_its_end_and_an_old_record_is_gone) {
    char *dir = tt_mkdtemp();
    char *rec = tri_rank_exit_record_path(dir, 2);
    char want[4200];
    snprintf(want, sizeof want, "%s/rank_2.exit", dir);
    cr_expect_str_eq(rec, want);
    cr_assert_eq(tri_exit_record_to(rec, 124, "an earlier attempt's"), 0);
    unsetenv(TRI_EXIT_RECORD_ENV);
    int rc = wrap(dir, 2, 0, 0, "echo \"record at $TRIDENT_EXIT_RECORD\"; test -e \"$TRIDENT_EXIT_RECORD\" && echo stale; "
                                "exit 0");
    cr_expect_eq(rc, 0);
    char *log = read_in(dir, "rank_2.log");
    char line[4300];
    snprintf(line, sizeof line, "record at %s\n", want);
    cr_expect_str_eq(log, line, "the path, and no stale record: %s", log);
    free(log);
    tri_rank_status st;
    tri_rank_status_read(dir, 2, &st);
    cr_expect_eq(st.state, TRI_RANK_EXIT);
    cr_expect_eq(st.rec.code, -1, "no record of this attempt");

    /* a command that records its end: read back with the status */
    rc = wrap(dir, 2, 0, 1,
              "printf '1700000000.5 124 trident: rank 2: watchdog: x\\n' > \"$TRIDENT_EXIT_RECORD\"; exit 124");
    cr_expect_eq(rc, 124);
    tri_rank_status_read(dir, 2, &st);
    cr_expect_eq(st.state, TRI_RANK_EXIT);
    cr_expect_eq(st.value, 124);
    cr_expect_eq(st.rec.code, 124);
    cr_expect_eq(st.rec.t, 1700000000.5);
    cr_expect_str_eq(st.rec.reason, "trident: rank 2: watchdog: x");
    free(rec);
    tt_rmrf(dir);
    free(dir);
}
