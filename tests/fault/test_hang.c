/* Fault tests: nothing hangs forever (issue 13, items 2 and 12).
 *
 *  - a rank stopped with SIGSTOP in a dp=2 run: the other rank's watchdog
 *    (parallel.timeout_s) ends the job, naming itself, the group, the
 *    operation and the stopped rank; before, it spun in MPI forever;
 *  - SIGTERM to tridentrun while a rank cannot act on it (stopped, or
 *    ignoring SIGTERM and SIGUSR1): the ranks are killed after --grace-s;
 *    before, tridentrun waited forever;
 *  - the failure summary names the rank that failed first (its error line
 *    came first), not a follower that exited earlier with an empty log and
 *    that mpirun's report named.
 *
 * Every job runs in its own process group under a deadline, with capped
 * memory and CPU time; at the end (or on a failed assertion) every process of
 * the job is continued and killed by pid (tridentrun, mpirun, and each rank's
 * process group, whose leader is the rank wrapper), so nothing is left behind.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "helpers/job.h"
#include "helpers/testutil.h"

#define TIMEOUT_S 2 /* parallel.timeout_s of the stalled runs */
#define GRACE_S   2 /* --grace-s of the SIGTERM runs          */

/* ------------------------------------------------------------------------ */
/* A dp=2 training run of the tiny config                                   */

/* tridentrun [--grace-s G] -- trident train tiny-test --set <layout> (two
 * ranks: "parallel.dp=2" or "parallel.pp=2") --set parallel.timeout_s=T
 * --set train.steps=<steps> and the `extra` --set arguments (NULL-ended, may
 * be NULL), in dir; returns once `ready` (NULL: the ranks run) is in the
 * metrics. */
static void start_run_of(tt_job *j, int world, const char *dir, const char *layout, const char *steps,
                         const char *timeout_s, const char *grace_s, const char *const *extra, const char *ready) {
    char data[300], sets[7][320];
    snprintf(data, sizeof data, "%s/train.bin", dir);
    tt_write_llmc_random(data, 20000, 256, 11);
    snprintf(sets[0], sizeof sets[0], "data.train=%s", data);
    snprintf(sets[1], sizeof sets[1], "%s", layout);
    snprintf(sets[2], sizeof sets[2], "parallel.timeout_s=%s", timeout_s);
    snprintf(sets[3], sizeof sets[3], "train.steps=%s", steps);
    snprintf(sets[4], sizeof sets[4], "checkpoint.dir=%s/ck", dir);
    snprintf(sets[5], sizeof sets[5], "log.dir=%s/log", dir);
    snprintf(sets[6], sizeof sets[6], "data.val="); /* the config's val file is relative to the source tree */
    char cfg[300];
    snprintf(cfg, sizeof cfg, "%s/configs/tiny-test.json", TRI_SOURCE_DIR);
    char *argv[48];
    int a = 0;
    argv[a++] = (char *)tt_bin("tridentrun");
    argv[a++] = "--log-dir";
    argv[a++] = "ranks";
    if (grace_s) {
        argv[a++] = "--grace-s";
        argv[a++] = (char *)grace_s;
    }
    argv[a++] = "--";
    argv[a++] = (char *)tt_bin("trident");
    argv[a++] = "train";
    argv[a++] = cfg;
    for (int i = 0; i < 7; i++) {
        argv[a++] = "--set";
        argv[a++] = sets[i];
    }
    for (int i = 0; extra && extra[i] && a < 46; i++) {
        argv[a++] = "--set";
        argv[a++] = (char *)extra[i];
    }
    argv[a] = NULL;
    tt_job_start(j, dir, world, argv);
    tt_job_wait_running(j, ready ? "log/metrics.jsonl" : NULL, ready, 60);
}

/* Two ranks (layout: "parallel.dp=2" or "parallel.pp=2"). */
static void start_run(tt_job *j, const char *dir, const char *layout, const char *steps, const char *timeout_s,
                      const char *grace_s, const char *const *extra, const char *ready) {
    start_run_of(j, 2, dir, layout, steps, timeout_s, grace_s, extra, ready);
}

/* Practically endless; returns once training has begun (the logger wrote step 3). */
static void start_training_as(tt_job *j, const char *dir, const char *layout, const char *timeout_s,
                              const char *grace_s) {
    start_run(j, dir, layout, "100000000", timeout_s, grace_s, NULL, "\"step\": 3,");
}

static void start_training(tt_job *j, const char *dir, const char *timeout_s, const char *grace_s) {
    start_training_as(j, dir, "parallel.dp=2", timeout_s, grace_s);
}

/* Starts a two-rank run with `layout`, stops rank 1 (SIGSTOP) once it
 * trains, and checks that the job ends with the watchdog's exit code within
 * the timeout. Returns the job's output (to free) and in *line rank 0's
 * watchdog report, cut at its end of line. */
static char *stall_rank_1(tt_job *j, const char *dir, const char *layout, char **line) {
    start_training_as(j, dir, layout, "2", NULL);
    double took;
    int rc = tt_job_stop_rank(j, 1, TIMEOUT_S + 20, "after SIGSTOP of rank 1", &took);
    char *out = tt_job_output(j);
    /* the watchdog's exit code, passed on by tridentrun (recorded by the
     * rank before its MPI_Abort: it survives Open MPI's teardown) */
    TT_JOB_ASSERT(j, rc == 124, "exit %d (124 expected):\n%s", rc, out);
    TT_JOB_ASSERT(j, took >= TIMEOUT_S - 0.5 && took < TIMEOUT_S + 10, "ended %.1f s after the stop:\n%s", took, out);
    /* rank 0 waited, rank 1 is the one it waited for */
    TT_JOB_ASSERT(j, strstr(out, "tridentrun: rank 0 failed (exit 124)"), "%s", out);
    /* its line, as it printed it, or as tridentrun shows it from its record
     * when the teardown killed its wrapper before the line was copied */
    *line = tt_job_line(j, out, "trident: rank 0: watchdog: step ", "watchdog report");
    return out;
}

Test(hang, stalled_rank_ends_the_job_within_timeout_naming_the_waiting_rank, .timeout = 120) {
    char *dir = tt_mkdtemp(), *line;
    tt_job j;
    char *out = stall_rank_1(&j, dir, "parallel.dp=2", &line);
    TT_JOB_ASSERT(&j,
                  strstr(line, "(train): all-reduce over dp of ") || strstr(line, "(train): all-reduce over world of "),
                  "the group and the operation: %s", line);
    TT_JOB_ASSERT(&j, strstr(line, "(parallel.timeout_s = 2): waiting for world rank 1 ("), "the peer: %s", line);
    TT_JOB_ASSERT(&j, strstr(line, "; aborting the job"), "%s", line);
    free(out);
    tt_job_end(&j, dir, 1);
}

/* The same in a pipeline (pp = 2): the first stage waits for the second
 * one's gradients (or its activations' receipt) inside the step; the
 * report names the pipeline action, the peer stage and its world rank. */
Test(hang, stalled_pipeline_stage_is_named_with_the_action_it_owes, .timeout = 120) {
    char *dir = tt_mkdtemp(), *line;
    tt_job j;
    char *out = stall_rank_1(&j, dir, "parallel.pp=2", &line);
    /* stopped inside the pipeline phase (most of a step): the action and the
     * peer stage; at the step's end: the tied embedding's all-reduce over
     * emb, the loss and norm all-reduces over pp, the stop flag's over world */
    if (strstr(line, "pipeline action") != NULL)
        TT_JOB_ASSERT(&j, strstr(line, "from stage 1") && strstr(line, "over pp") && strstr(line, "world rank 1"),
                      "the action, group and peer: %s", line);
    else
        TT_JOB_ASSERT(&j, strstr(line, "over pp") || strstr(line, "over emb") || strstr(line, "over world"),
                      "the group: %s", line);
    TT_JOB_ASSERT(&j, strstr(line, "; aborting the job"), "%s", line);
    free(out);
    tt_job_end(&j, dir, 1);
}

/* Open MPI's teardown at once (odls_base_sigkill_timeout 0) can kill the
 * aborting rank's wrapper before the wrapper records the exit, and mpirun's
 * report can be garbled (seen under the sanitizers: tridentrun exited 1,
 * "rank 0 failed (it wrote an error, then was stopped)"). Made deterministic
 * here: once rank 0's watchdog has recorded its 124 (base/exitrec.h), the rank
 * SIGKILLs its wrapper and itself (TRIDENT_DEBUG_KILL_AFTER_EXIT_RECORD), so
 * neither the wrapper's status nor an MPI_Abort report can say how it ended.
 * tridentrun still exits 124 naming the watchdog, from the rank's record.
 * Without the record it said "rank 0 failed (signal 9, Killed)", exit 137. */
Test(hang, the_watchdogs_exit_code_survives_a_teardown_that_kills_the_aborting_ranks_wrapper, .timeout = 120) {
    setenv("TRIDENT_DEBUG_KILL_AFTER_EXIT_RECORD", "1", 1);
    char *dir = tt_mkdtemp(), *line;
    tt_job j;
    char *out = stall_rank_1(&j, dir, "parallel.dp=2", &line);
    TT_JOB_ASSERT(&j, strstr(line, "(parallel.timeout_s = 2): waiting for world rank 1 ("), "the peer: %s", line);
    TT_JOB_ASSERT(&j, strstr(line, "; aborting the job"), "%s", line);
    /* the race happened: rank 0's wrapper was killed while its rank ran, so
     * its status never got the end; the rank's own record has it */
    char path[400];
    snprintf(path, sizeof path, "%s/ranks/rank_0.status", dir);
    char *st = tt_read(path);
    TT_JOB_ASSERT(&j, st && strstr(st, " running ") && !strstr(st, " exit ") && !strstr(st, " signal "),
                  "rank 0's status: %s", st ? st : "(none)");
    free(st);
    snprintf(path, sizeof path, "%s/ranks/rank_0.exit", dir);
    char *rec = tt_read(path);
    double t;
    int code = 0, used = 0;
    TT_JOB_ASSERT(&j, rec && sscanf(rec, "%lf %d %n", &t, &code, &used) == 2 && code == 124, "rank 0's record: %s",
                  rec ? rec : "(none)");
    TT_JOB_ASSERT(&j, !strncmp(rec + used, "trident: rank 0: watchdog: step ", 32), "rank 0's record: %s", rec);
    free(rec);
    free(out);
    tt_job_end(&j, dir, 1);
}

/* SIGTERM to tridentrun (started with --grace-s GRACE_S) whose ranks cannot
 * stop: the job ends with 143 about GRACE_S later, the ranks killed. The
 * rank `stopped` (-1: none) is continued after. Returns the output. */
static char *sigterm_ends_after_grace(tt_job *j, int stopped, const char *what) {
    double took;
    int rc = tt_job_signal(j, SIGTERM, GRACE_S + 20, what, &took);
    if (stopped >= 0) kill(j->cmd[stopped], SIGCONT);
    char *out = tt_job_output(j);
    TT_JOB_ASSERT(j, rc == 128 + SIGTERM, "%s: exit %d (143 expected):\n%s", what, rc, out);
    TT_JOB_ASSERT(j, took >= GRACE_S - 0.5 && took < GRACE_S + 8, "%s: ended %.1f s after SIGTERM:\n%s", what, took,
                  out);
    return out;
}

/* The case: SIGTERM to tridentrun with a stopped rank. Rank 0 is told
 * to save (SIGUSR1), but the save waits for rank 1; with parallel.timeout_s at
 * 600 only the grace period can end the job. */
Test(hang, sigterm_with_a_stopped_rank_kills_the_job_after_the_grace_period, .timeout = 120) {
    char *dir = tt_mkdtemp();
    tt_job j;
    char grace[16];
    snprintf(grace, sizeof grace, "%d", GRACE_S);
    start_training(&j, dir, "600", grace);
    TT_JOB_ASSERT(&j, kill(j.cmd[1], SIGSTOP) == 0, "SIGSTOP: %s", strerror(errno));
    char *out = sigterm_ends_after_grace(&j, 1, "after SIGTERM with rank 1 stopped");
    TT_JOB_ASSERT(&j,
                  strstr(out, "tridentrun: the ranks did not stop within --grace-s 2 s of the stop request; "
                              "killing them (SIGKILL)"),
                  "%s", out);
    TT_JOB_ASSERT(&j, strstr(out, "tridentrun: stopped by signal 15 (Terminated); the ranks outlasted --grace-s"), "%s",
                  out);
    free(out);
    tt_job_end(&j, dir, 1);
}

/* Ranks that ignore every stop signal (not only trident): the same. */
Test(hang, sigterm_to_ranks_that_ignore_it_kills_them_after_the_grace_period, .timeout = 60) {
    char *dir = tt_mkdtemp();
    char grace[16];
    snprintf(grace, sizeof grace, "%d", GRACE_S);
    char *argv[] = {(char *)tt_bin("tridentrun"),
                    "--log-dir",
                    "ranks",
                    "--nproc-per-node",
                    "2",
                    "--grace-s",
                    grace,
                    "--",
                    "/bin/sh",
                    "-c",
                    "trap '' TERM INT HUP USR1; exec sleep 60",
                    NULL};
    tt_job j;
    tt_job_start(&j, dir, 2, argv);
    tt_job_wait_running(&j, NULL, NULL, 30);
    usleep(200000); /* the traps are set once `sleep` runs: give sh its moment */
    char *out = sigterm_ends_after_grace(&j, -1, "after SIGTERM to ranks ignoring it");
    TT_JOB_ASSERT(&j, strstr(out, "did not stop within --grace-s 2 s"), "%s", out);
    free(out);
    tt_job_end(&j, dir, 1);
}

/* Ranks that abort together after agreeing that something failed (as a
 * failed checkpoint save does): rank 1 says what failed and exits last; rank
 * 2, with an empty log, exits first, and mpirun's report names it. The
 * summary must name rank 1 and show its error. Before, it named rank 2 (from
 * the report, or as the earliest exit). */
Test(hang, summary_names_the_rank_whose_error_came_first_not_a_follower, .timeout = 60) {
    char *dir = tt_mkdtemp();
    const char *script = "case $OMPI_COMM_WORLD_RANK in "
                         "1) echo 'saving step 600'; echo 'trident: rank 1: ck/step_600: write: disk full' >&2; "
                         "sleep 1.2; exit 4;; "
                         "2) sleep 0.6; exit 1;; esac; sleep 1.6; exit 1";
    tt_job j;
    /* (mpirun's report names rank 2) */
    tt_job_start_fake(&j, dir, 3,
                      "MPI_ABORT was invoked on rank 2 in communicator MPI_COMM_WORLD\\nwith errorcode 1.\\n", "1",
                      script);
    int rc = tt_job_wait(&j, 30, "three failing ranks");
    char *out = tt_job_output(&j);
    TT_JOB_ASSERT(&j, rc == 4, "exit %d (rank 1's 4 expected):\n%s", rc, out);
    TT_JOB_ASSERT(&j, strstr(out, "tridentrun: rank 1 failed (exit 4)"), "%s", out);
    TT_JOB_ASSERT(&j, strstr(out, "  | trident: rank 1: ck/step_600: write: disk full\n"), "rank 1's log tail:\n%s",
                  out);
    TT_JOB_ASSERT(&j, !strstr(out, "rank 2 failed"), "%s", out);
    free(out);
    tt_job_end(&j, dir, 0);
}

/* The teardown race with mpirun's report garbled, as it was once under the
 * sanitizers: a stand-in mpirun whose report is Open MPI's unpack error, exit
 * 1. Rank 0 prints its watchdog line, records 124 for itself as the trainer
 * does (base/exitrec.h's "<unix time> <code> <line>", written aside and
 * renamed), and is killed with its wrapper before the wrapper can record
 * anything; rank 1 is stalled. tridentrun exits 124, naming rank 0 and its
 * line. Before the record: exit 1, "rank 0 failed (it wrote an error, then
 * was stopped)" or "mpirun failed (exit 1)". */
Test(hang, a_recorded_exit_code_wins_over_a_garbled_report_and_a_killed_wrapper, .timeout = 60) {
    char *dir = tt_mkdtemp();
#define WD_LINE                                                                                  \
    "trident: rank 0: watchdog: step 7 (train): all-reduce over dp of 8 bytes has waited 2.0 s " \
    "(parallel.timeout_s = 2): waiting for world rank 1 (dp = world ranks 0,1); aborting the job"
    const char *script = "case $OMPI_COMM_WORLD_RANK in "
                         "0) sleep 0.3; echo '" WD_LINE "' >&2; "
                         "printf '%s 124 %s\n' \"$(date +%s.%N)\" '" WD_LINE "' > \"$TRIDENT_EXIT_RECORD.tmp\" && "
                         "mv \"$TRIDENT_EXIT_RECORD.tmp\" \"$TRIDENT_EXIT_RECORD\"; "
                         "kill -9 $PPID; kill -9 $$;; "
                         "*) exec sleep 30;; esac";
    tt_job j;
    tt_job_start_fake(&j, dir, 2,
                      "[vm:04242] [[4242,0],0] ORTE_ERROR_LOG: Data unpack would read past end of buffer in file "
                      "util/show_help.c at line 501\n",
                      "1", script);
    int rc = tt_job_wait(&j, 30, "a rank killed with its wrapper after its record");
    char *out = tt_job_output(&j);
    TT_JOB_ASSERT(&j, rc == 124, "exit %d (rank 0's recorded 124 expected):\n%s", rc, out);
    TT_JOB_ASSERT(&j, strstr(out, "tridentrun: rank 0 failed (exit 124)"), "%s", out);
    /* the line: in rank 0's log tail if its wrapper copied it, else from the record */
    TT_JOB_ASSERT(&j,
                  strstr(out, "  | " WD_LINE "\n") || strstr(out, "recorded before it ended (exit 124): " WD_LINE "\n"),
                  "%s", out);
#undef WD_LINE
    free(out);
    tt_job_end(&j, dir, 1);
}

/* ------------------------------------------------------------------------ */
/* Suspension and the progress heartbeat (issue 22)                         */

/* Both ranks' pids (the trainers, not the wrappers). */
static void both_ranks(tt_job *j, pid_t *out) {
    out[0] = j->cmd[0];
    out[1] = j->cmd[1];
}

/* The whole job stopped (as a Slurm suspend, a paused VM or a debugger would)
 * for longer than parallel.timeout_s and than parallel.progress_timeout_s,
 * then continued: it trains on and ends normally. Before, it ended with 124
 * the moment it resumed, blaming a healthy peer (checked: with the pause
 * detection of tri_wd_wait disabled, this test fails with exit 124). */
Test(hang, a_job_suspended_longer_than_its_timeouts_resumes_and_finishes, .timeout = 120) {
    char *dir = tt_mkdtemp();
    tt_job j;
    const char *extra[] = {"parallel.progress_timeout_s=2", NULL};
    start_run(&j, dir, "parallel.dp=2", "1500", "2", NULL, extra, "\"step\": 3,");
    pid_t r[2];
    both_ranks(&j, r);
    /* one after the other, as a suspend reaches the tasks: rank 0 stops (and
     * later resumes) while it waits for rank 1 in a collective */
    TT_JOB_ASSERT(&j, kill(r[1], SIGSTOP) == 0, "SIGSTOP: %s", strerror(errno));
    usleep(300000);
    TT_JOB_ASSERT(&j, kill(r[0], SIGSTOP) == 0, "SIGSTOP: %s", strerror(errno));
    double t_stop = tt_now_s();
    char final[400];
    snprintf(final, sizeof final, "%s/ck/step_00001500", dir);
    struct stat st;
    TT_JOB_ASSERT(&j, stat(final, &st) != 0, "the run had ended before the stop: the test proves nothing");
    const double hold = TIMEOUT_S + 3; /* past both deadlines */
    usleep((useconds_t)(hold * 1e6));
    kill(r[0], SIGCONT);
    usleep(300000);
    kill(r[1], SIGCONT);
    int rc = tt_job_wait(&j, 90, "after the suspension");
    char *out = tt_job_output(&j);
    TT_JOB_ASSERT(&j, rc == 0, "exit %d after a suspension of %.0f s (timeout_s 2):\n%s", rc, hold, out);
    TT_JOB_ASSERT(&j, j.t_end - t_stop >= hold, "the job did not span the suspension");
    TT_JOB_ASSERT(&j, strstr(out, "final loss") && !strstr(out, ": watchdog: ") && !strstr(out, ": heartbeat: "), "%s",
                  out);
    TT_JOB_ASSERT(&j, stat(final, &st) == 0, "no final checkpoint:\n%s", out);
    free(out);
    tt_job_end(&j, dir, 1);
}

/* One rank stopped with a collective deadline of 600 s: the progress
 * heartbeat (progress_timeout_s 2) names it within seconds, and the job ends
 * as the watchdog ends it. `which`: the rank stopped (1: a plain peer; 0:
 * also the one serving the heartbeat's store). Returns the output; *line the
 * report of the other rank, cut at its end. */
static char *stop_one_rank(tt_job *j, const char *dir, int which, char **line) {
    const char *extra[] = {"parallel.progress_timeout_s=2", NULL};
    start_run(j, dir, "parallel.dp=2", "100000000", "600", NULL, extra, "\"step\": 3,");
    usleep(500000); /* a few beats published: stopped in the middle of training */
    double took;
    int rc = tt_job_stop_rank(j, which, 60, "after SIGSTOP of one rank", &took);
    char *out = tt_job_output(j);
    TT_JOB_ASSERT(j, rc == 124, "exit %d (124 expected):\n%s", rc, out);
    /* 2 s of silence, a beat to confirm, the abort: not the 600 s deadline */
    TT_JOB_ASSERT(j, took >= 1.5 && took < 12, "ended %.1f s after the stop:\n%s", took, out);
    char head[64];
    snprintf(head, sizeof head, "trident: rank %d: heartbeat: step ", 1 - which);
    *line = tt_job_line(j, out, head, "heartbeat report");
    TT_JOB_ASSERT(j, strstr(*line, "; aborting the job"), "%s", *line);
    return out;
}

Test(hang, heartbeat_names_a_stopped_rank_within_seconds, .timeout = 120) {
    char *dir = tt_mkdtemp(), *line;
    tt_job j;
    char *out = stop_one_rank(&j, dir, 1, &line);
    TT_JOB_ASSERT(&j, strstr(line, "(train): ") && strstr(line, " over "), "where rank 0 waited: %s", line);
    TT_JOB_ASSERT(&j, strstr(line, ": world rank 1 (host ") && strstr(line, ", last at step "), "the rank: %s", line);
    TT_JOB_ASSERT(&j, strstr(line, "has sent no heartbeat for ") && strstr(line, "it is stopped or gone"), "%s", line);
    free(out);
    tt_job_end(&j, dir, 1);
}

/* Four ranks, pp=2 x dp=2: the last stage's second replica (world rank 3)
 * stopped; whichever rank waits for it (a pipeline receive, the dp
 * all-reduce of its stage, a world all-reduce) names it within seconds. */
Test(hang, heartbeat_names_a_stopped_rank_of_a_pipeline, .timeout = 120) {
    char *dir = tt_mkdtemp();
    tt_job j;
    const char *extra[] = {"parallel.progress_timeout_s=2", "parallel.dp=2", NULL};
    start_run_of(&j, 4, dir, "parallel.pp=2", "100000000", "600", NULL, extra, "\"step\": 3,");
    usleep(500000);
    double took;
    int rc = tt_job_stop_rank(&j, 3, 60, "after SIGSTOP of rank 3", &took);
    char *out = tt_job_output(&j);
    TT_JOB_ASSERT(&j, rc == 124, "exit %d (124 expected):\n%s", rc, out);
    TT_JOB_ASSERT(&j, took >= 1.5 && took < 15, "ended %.1f s after the stop:\n%s", took, out);
    char *line = tt_job_line(&j, out, ": heartbeat: step ", "heartbeat report");
    TT_JOB_ASSERT(&j, strstr(line, ": world rank 3 (host ") && strstr(line, "has sent no heartbeat for "), "%s", line);
    free(out);
    tt_job_end(&j, dir, 1);
}

/* World rank 0 stopped: it serves the heartbeat's store too, so rank 1 names
 * it by the store's silence. */
Test(hang, heartbeat_names_a_stopped_rank_0_by_its_silent_store, .timeout = 120) {
    char *dir = tt_mkdtemp(), *line;
    tt_job j;
    char *out = stop_one_rank(&j, dir, 0, &line);
    TT_JOB_ASSERT(&j, strstr(line, "world rank 0 (which serves the heartbeat store) has not answered"), "%s", line);
    free(out);
    tt_job_end(&j, dir, 1);
}

/* A rank that runs but makes no progress outside any communication (here a
 * debug sleep of 10 minutes before its first step, where data loading is):
 * its peer, waiting in the step's first collective, names it after
 * progress_timeout_s (2 s), not after timeout_s (600 s). */
Test(hang, heartbeat_names_a_rank_stuck_outside_communication, .timeout = 120) {
    char *dir = tt_mkdtemp();
    tt_job j;
    const char *extra[] = {"parallel.progress_timeout_s=2", "debug.sleep_rank=1", "debug.sleep_ms=600000", NULL};
    start_run(&j, dir, "parallel.dp=2", "10", "600", NULL, extra, NULL);
    double t0 = tt_now_s();
    int rc = tt_job_wait(&j, 60, "a rank stuck before its step");
    double took = j.t_end - t0;
    char *out = tt_job_output(&j);
    TT_JOB_ASSERT(&j, rc == 124, "exit %d (124 expected):\n%s", rc, out);
    TT_JOB_ASSERT(&j, took < 20, "ended %.1f s after the start:\n%s", took, out);
    char *line = tt_job_line(&j, out, "trident: rank 0: heartbeat: step 1 (train): ", "heartbeat report");
    TT_JOB_ASSERT(&j,
                  strstr(line, "world rank 1 (host ") &&
                      strstr(line, "last at step 1, data) has made no progress for ") &&
                      strstr(line, "outside any communication (parallel.progress_timeout_s = 2)"),
                  "%s", line);
    free(out);
    tt_job_end(&j, dir, 1);
}

/* ------------------------------------------------------------------------ */
/* Straggler reports                                                        */

/* A dp=2 run of 121 steps with straggler windows of 40 (steps 2-41, 42-81,
 * 82-121: the first step is not counted), `extra` added; returns its output
 * and in *metrics the metrics file (both to free). */
static char *straggler_run(const char *dir, const char *const *extra, char **metrics) {
    tt_job j;
    start_run(&j, dir, "parallel.dp=2", "121", "60", NULL, extra, NULL);
    int rc = tt_job_wait(&j, 90, "a straggler run");
    char *out = tt_job_output(&j);
    TT_JOB_ASSERT(&j, rc == 0, "exit %d:\n%s", rc, out);
    char path[400];
    snprintf(path, sizeof path, "%s/log/metrics.jsonl", dir);
    *metrics = tt_read(path);
    TT_JOB_ASSERT(&j, *metrics != NULL, "no metrics");
    tt_job_expect_all_gone(&j);
    tt_job_kill(&j);
    return out;
}

static int count_of(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)) != NULL; p += strlen(needle)) n++;
    return n;
}

/* Rank 1 sleeps 60 ms before each of its steps (debug.sleep_ms; a step of
 * the tiny model computes in about 1 ms, up to ~5 ms for a rank starved of
 * its core while other tests run, 10-20 ms under the sanitizers, where a
 * 15 ms sleep made rank 1 only ~1.6x its peer, too near the default factor
 * 1.5: named in 1 of 5 runs): every window names it, and only it. */
Test(hang, straggler_report_names_the_slowed_rank, .timeout = 120) {
    char *dir = tt_mkdtemp(), *metrics = NULL;
    const char *extra[] = {"log.straggler_every=40", "debug.sleep_rank=1", "debug.sleep_ms=60", NULL};
    char *out = straggler_run(dir, extra, &metrics);
    cr_expect_eq(count_of(out, "note: rank 1 (host "), 3, "three windows, rank 1 named in each:\n%s", out);
    cr_expect(strstr(out, ", stage 0, dp 1, tp 0) is slow: compute "), "%s", out);
    cr_expect(strstr(out, "x the median over the last 40 steps ("), "%s", out);
    cr_expect_eq(count_of(out, "note: rank 0 ("), 0, "%s", out);
    cr_expect_eq(count_of(metrics, "\"straggler\": {\"window\": 40,"), 3, "%s", metrics);
    cr_expect_eq(count_of(metrics, "\"slow\": [1]}"), 3, "%s", metrics);
    cr_expect(strstr(metrics, "\"compute_ms_median\": ["), "%s", metrics);
    free(out);
    free(metrics);
    tt_rmrf(dir);
    free(dir);
}

/* The same run without the sleep: nobody is named (a step computes in about
 * 1 ms; a rank preempted while other tests share the two cores computes in
 * up to ~5 ms, under TRI_STRAGGLER_MIN_EXCESS_S above the other: measured,
 * 3.3 and 4.9 ms against 0.9 and 1.3 ms in the fault suite's runs, when the
 * floor was 1 ms and such windows named a healthy rank). Under the
 * sanitizers a step computes in ~10 ms and the same unfairness of the shared
 * cores made a healthy rank 1.6x its peer (15.7 against 9.7 ms, CI's ASan
 * suite): a real difference, but not a straggler's, so this control judges
 * at factor 3 (the slowed rank above is 2.5-16x its peer, named at the
 * default 1.5). The metrics hold every window's per-rank figures. */
Test(hang, straggler_report_names_nobody_in_a_healthy_run, .timeout = 120) {
    char *dir = tt_mkdtemp(), *metrics = NULL;
    const char *extra[] = {"log.straggler_every=40", "log.straggler_factor=3", NULL};
    char *out = straggler_run(dir, extra, &metrics);
    cr_expect_eq(count_of(out, "is slow: compute"), 0, "%s", out);
    cr_expect_eq(count_of(metrics, "\"straggler\": {\"window\": 40,"), 3, "%s", metrics);
    cr_expect_eq(count_of(metrics, "\"slow\": []}"), 3, "%s", metrics);
    free(out);
    free(metrics);
    tt_rmrf(dir);
    free(dir);
}
