/* src/base/exitrec: a process's record of its own end, read back as
 * tridentrun reads it; nothing without the variable; a reader racing the
 * writer sees a whole record or none, never part of one (the file is
 * written aside and renamed). */
#include <criterion/criterion.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/exitrec.h"
#include "helpers/testutil.h"

static double wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

Test(exitrec, a_record_reads_back_as_written) {
    char *dir = tt_mkdtemp(), path[4200];
    snprintf(path, sizeof path, "%s/rank_3.exit", dir);
    double t0 = wall_now();
    cr_assert_eq(tri_exit_record_to(path, 124, "trident: rank 3: watchdog: step 7 (train): x; aborting the job"), 0);
    tri_exit_rec r;
    cr_assert_eq(tri_exit_record_read(path, &r), 0);
    cr_expect_eq(r.code, 124);
    cr_expect_str_eq(r.reason, "trident: rank 3: watchdog: step 7 (train): x; aborting the job");
    cr_expect(r.t >= t0 - 1e-3 && r.t <= wall_now() + 1e-3, "the time: %f (now %f)", r.t, wall_now());

    /* the text, as docs/reliability.md and other tools read it; nothing left aside */
    char *text = tt_read(path);
    cr_assert_not_null(text);
    double t;
    int code = 0, used = 0;
    cr_expect_eq(sscanf(text, "%lf %d %n", &t, &code, &used), 2, "%s", text);
    cr_expect_eq(code, 124);
    cr_expect_str_eq(text + used, "trident: rank 3: watchdog: step 7 (train): x; aborting the job\n");
    free(text);
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    cr_expect_neq(access(tmp, F_OK), 0, "the temporary file is gone");

    /* a later record replaces it; no reason, and line breaks in one, stay one line */
    cr_assert_eq(tri_exit_record_to(path, 2, NULL), 0);
    cr_assert_eq(tri_exit_record_read(path, &r), 0);
    cr_expect_eq(r.code, 2);
    cr_expect_str_eq(r.reason, "");
    cr_assert_eq(tri_exit_record_to(path, 1, "two\nlines\r"), 0);
    cr_assert_eq(tri_exit_record_read(path, &r), 0);
    cr_expect_eq(r.code, 1);
    cr_expect_str_eq(r.reason, "two lines ");

    /* a reason longer than a record holds is cut, not overrun */
    char *longr = malloc(5000);
    memset(longr, 'x', 4999);
    longr[4999] = '\0';
    cr_assert_eq(tri_exit_record_to(path, 124, longr), 0);
    cr_assert_eq(tri_exit_record_read(path, &r), 0);
    cr_expect_eq(r.code, 124);
    cr_expect_eq(strlen(r.reason), sizeof r.reason - 1);
    cr_expect_eq(strspn(r.reason, "x"), sizeof r.reason - 1);
    free(longr);
    tt_rmrf(dir);
    free(dir);
}

Test(exitrec, the_variable_names_the_file_and_without_it_nothing_is_written) {
    char *dir = tt_mkdtemp(), path[4200];
    snprintf(path, sizeof path, "%s/rank_0.exit", dir);
    unsetenv(TRI_EXIT_RECORD_ENV);
    unsetenv(TRI_EXIT_RECORD_DEBUG_ENV);
    cr_expect_eq(tri_exit_record(124, "not asked"), 1);
    setenv(TRI_EXIT_RECORD_ENV, "", 1);
    cr_expect_eq(tri_exit_record(124, "not asked"), 1);
    cr_expect_neq(access(path, F_OK), 0);

    setenv(TRI_EXIT_RECORD_ENV, path, 1);
    cr_expect_eq(tri_exit_record(124, "asked"), 0);
    tri_exit_rec r;
    cr_assert_eq(tri_exit_record_read(path, &r), 0);
    cr_expect_eq(r.code, 124);
    cr_expect_str_eq(r.reason, "asked");

    /* a directory that is not there: -1, and the caller goes on */
    char bad[4300];
    snprintf(bad, sizeof bad, "%s/no/such/dir/rank_0.exit", dir);
    setenv(TRI_EXIT_RECORD_ENV, bad, 1);
    cr_expect_eq(tri_exit_record(124, "lost"), -1);
    unsetenv(TRI_EXIT_RECORD_ENV);
    tt_rmrf(dir);
    free(dir);
}

Test(exitrec, a_missing_or_foreign_file_is_no_record) {
    char *dir = tt_mkdtemp(), path[4200];
    snprintf(path, sizeof path, "%s/rank_1.exit", dir);
    tri_exit_rec r;
    cr_expect_eq(tri_exit_record_read(path, &r), -1);
    cr_expect_eq(r.code, -1);
    static const char *const bad[] = {"", "\n", "garbage\n", "1700000000.5\n", "1700000000.5 abc reason\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        FILE *f = fopen(path, "w");
        cr_assert_not_null(f);
        fputs(bad[i], f);
        fclose(f);
        cr_expect_eq(tri_exit_record_read(path, &r), -1, "'%s'", bad[i]);
        cr_expect_eq(r.code, -1, "'%s'", bad[i]);
    }
    tt_rmrf(dir);
    free(dir);
}

/* Kills the writer and fails the test. */
#define RACE_FAIL(w, ...)              \
    do {                               \
        kill((w), SIGKILL);            \
        waitpid((w), NULL, 0);         \
        cr_assert_fail(__VA_ARGS__);   \
    } while (0)

/* A writer rewriting the record as fast as it can (two records of different
 * codes and lengths) while this process reads it 20,000 times: every read is
 * a whole record of one of the two, never an empty or half-written file.
 * Writing the file in place (open with O_TRUNC, then write) fails this
 * within a few hundred reads (at reads 2 to 230 in five tries): the reader
 * sees the truncated file. */
Test(exitrec, a_reader_racing_the_writer_sees_a_whole_record_or_none, .timeout = 60) {
    char *dir = tt_mkdtemp(), path[4200];
    snprintf(path, sizeof path, "%s/rank_0.exit", dir);
    char longr[900];
    memset(longr, 'L', sizeof longr - 1);
    longr[sizeof longr - 1] = '\0';
    fflush(NULL);
    pid_t w = fork();
    cr_assert_geq(w, 0);
    if (w == 0) {
        alarm(30);
        for (unsigned i = 0;; i++) (void)tri_exit_record_to(path, i % 2 ? 124 : 2, i % 2 ? longr : "short");
    }
    long waits = 0;
    for (int whole = 0; whole < 20000;) {
        tri_exit_rec r;
        if (tri_exit_record_read(path, &r) != 0) {
            if (whole > 0) RACE_FAIL(w, "read %d: the record is gone, or torn before its number", whole + 1);
            if (++waits > 50000000) RACE_FAIL(w, "the writer wrote nothing");
            continue; /* its first record is not there yet */
        }
        if (!(r.code == 2 && !strcmp(r.reason, "short")) && !(r.code == 124 && !strcmp(r.reason, longr)))
            RACE_FAIL(w, "read %d: a torn record: code %d, reason of %zu bytes", whole + 1, r.code, strlen(r.reason));
        whole++;
    }
    kill(w, SIGKILL);
    waitpid(w, NULL, 0);
    tt_rmrf(dir);
    free(dir);
}
