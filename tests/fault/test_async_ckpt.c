/* Asynchronous checkpoints (checkpoint.async, issue 22), end to end through
 * the built `trident` (and `tridentrun` for two ranks): the files of a
 * background save are those of a synchronous save byte for byte; a resume
 * from one continues bit for bit; a kill -9 in the middle of a background
 * write (held there by TRIDENT_DEBUG_CKPT_WRITE_SLEEP_MS) leaves the previous
 * complete checkpoint as the one --resume takes; SIGTERM with a save in
 * flight waits for it and then saves and stops; checkpoint.every_s saves at
 * steps both ranks agree on. The reference is always a synchronous run
 * (checkpoint.async=false: today's tri_model_save), never the code under
 * test. Every trident started here is capped in memory (RLIMIT_AS) and time
 * (timeout / alarm / prlimit --cpu). */
#include <criterion/criterion.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "helpers/testutil.h"

#define AS_LIMIT   "2000000000" /* bytes of address space per trident */
#define TIME_LIMIT 90           /* seconds per trident */
#define SLEEP_ENV  "TRIDENT_DEBUG_CKPT_WRITE_SLEEP_MS"

/* A run directory with its own token file. */
static char *make_run_dir(void) {
    char *dir = tt_mkdtemp(), p[4200];
    snprintf(p, sizeof p, "%s/train.bin", dir);
    tt_write_llmc_random(p, 20000, 256, 1);
    return dir;
}

static void train_cmd(char *cmd, size_t n, const char *dir, const char *extra) {
    snprintf(cmd, n,
             "%s train %s/configs/tiny-test.json --threads 1 --set data.train=%s/train.bin --set data.val= "
             "--set checkpoint.dir=%s/ck --set log.dir=%s/log %s",
             tt_bin("trident"), TRI_SOURCE_DIR, dir, dir, dir, extra);
}

/* A capped tiny training in dir (checkpoints in dir/ck, metrics in
 * dir/log); output in *out. Returns the exit code. */
static int train(const char *dir, const char *extra, char **out) {
    char cmd[12000], full[12400];
    train_cmd(cmd, sizeof cmd, dir, extra);
    snprintf(full, sizeof full, "timeout -k 5 %d prlimit " TT_PRLIMIT_AS(AS_LIMIT) " %s", TIME_LIMIT, cmd);
    return tt_run(full, out);
}

/* Starts a tiny training as a child whose pid is trident's own, with `env`
 * ("VAR=value" or "") in its environment, output into log; capped, and
 * killed if this process ends first. */
static pid_t spawn_sh(const char *full, const char *log);

static pid_t spawn_train(const char *dir, const char *env, const char *extra, const char *log) {
    char cmd[12000], full[12200];
    train_cmd(cmd, sizeof cmd, dir, extra);
    snprintf(full, sizeof full, "%s exec %s", env, cmd);
    return spawn_sh(full, log);
}

/* Starts /bin/sh -c full as a capped child (see spawn_train). */
static pid_t spawn_sh(const char *full, const char *log) {
    fflush(NULL);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0) _exit(126);
        tt_limit_as(2000000000UL);
        alarm(TIME_LIMIT);
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() == 1) _exit(125);
        execl("/bin/sh", "sh", "-c", full, (char *)NULL);
        _exit(127);
    }
    return pid;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int exists(const char *dir, const char *name) {
    char p[4400];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}

static void expect_same_step(const char *ref, const char *dir, int step, const char *what) {
    char a[4300], b[4300];
    snprintf(a, sizeof a, "%s/ck/step_%08d", ref, step);
    snprintf(b, sizeof b, "%s/ck/step_%08d", dir, step);
    cr_log_info("%s: comparing %s with %s", what, b, a);
    tt_expect_same_file(a, b, "model.safetensors");
    tt_expect_same_file(a, b, "optimizer.safetensors");
    tt_expect_same_file(a, b, "config.json");
}

/* The steps of the metrics lines {"step": N, "checkpoint_async": ..., ...} of dir's run. */
static int checkpoint_steps(const char *dir, int *steps, int cap, int *n_async) {
    char p[4300];
    snprintf(p, sizeof p, "%s/log/metrics.jsonl", dir);
    char *m = tt_read(p);
    int n = 0;
    *n_async = 0;
    for (char *c = m; c && (c = strstr(c, "{\"step\": ")) != NULL; c++) {
        char *eol = strchr(c, '\n');
        char *ck = strstr(c, "\"checkpoint_async\": ");
        if (!ck || (eol && ck > eol)) continue;
        if (n < cap) steps[n++] = atoi(c + 9);
        char *as = strstr(ck, "\"checkpoint_async\": true");
        if (as && (!eol || as < eol)) (*n_async)++;
    }
    free(m);
    return n;
}

/* The final loss of dir's run (its last "loss" metrics line). */
static double final_loss(const char *dir) {
    char p[4300];
    snprintf(p, sizeof p, "%s/log/metrics.jsonl", dir);
    double *l = NULL;
    int n = tt_losses(p, &l);
    cr_assert(n > 0, "%s: no losses", p);
    double v = l[n - 1];
    free(l);
    return v;
}

/* The files of background saves are those of synchronous ones at the same
 * steps, byte for byte (the manifests differ in "run", a fresh id per run,
 * and state.json in checkpoint.async itself); each save has its metrics line
 * and its log line with the blocking and the write time. */
Test(async_ckpt, async_files_equal_synchronous_ones, .timeout = 240) {
    const char *cfg = "--set train.steps=12 --set checkpoint.every=4";
    char *ref = make_run_dir(), *dir = make_run_dir(), *out = NULL, extra[512];
    snprintf(extra, sizeof extra, "%s --set checkpoint.async=false", cfg);
    cr_assert_eq(train(ref, extra, &out), 0, "%s", out);
    cr_expect(strstr(out, "saved checkpoint") && strstr(out, "synchronous)"), "%s", out);
    free(out);
    snprintf(extra, sizeof extra, "%s --set checkpoint.async=true", cfg);
    cr_assert_eq(train(dir, extra, &out), 0, "%s", out);
    cr_expect(strstr(out, "/step_00000004 (blocking ") && strstr(out, "written in the background in"), "%s", out);
    free(out);
    for (int s = 4; s <= 12; s += 4) expect_same_step(ref, dir, s, "async vs sync");
    int steps[16], n_async = 0, n = checkpoint_steps(dir, steps, 16, &n_async);
    cr_expect(n == 3 && steps[0] == 4 && steps[1] == 8 && steps[2] == 12 && n_async == 3,
              "metrics: %d checkpoint lines (%d async)", n, n_async);
    n = checkpoint_steps(ref, steps, 16, &n_async);
    cr_expect(n == 3 && n_async == 0, "sync metrics: %d checkpoint lines (%d async)", n, n_async);
    tt_rmrf(ref);
    tt_rmrf(dir);
    free(ref);
    free(dir);
}

/* A run that dies (debug.fail_step: exit 3, no clean-up) while saving in the
 * background resumes from whichever background save is complete and ends
 * with the files and the loss of an uninterrupted synchronous run. */
Test(async_ckpt, resume_from_an_async_checkpoint_is_bit_for_bit, .timeout = 240) {
    char *ref = make_run_dir(), *dir = make_run_dir(), *out = NULL;
    cr_assert_eq(train(ref, "--set train.steps=12 --set checkpoint.async=false", &out), 0, "%s", out);
    free(out);
    const char *cfg = "--set train.steps=12 --set checkpoint.every=2 --set checkpoint.async=true";
    char extra[512];
    snprintf(extra, sizeof extra, "%s --set debug.fail_step=7 --set debug.fail_rank=0", cfg);
    cr_assert_eq(train(dir, extra, &out), 3, "%s", out);
    free(out);
    snprintf(extra, sizeof extra, "%s --resume", cfg);
    cr_assert_eq(train(dir, extra, &out), 0, "%s", out);
    cr_expect(strstr(out, "resumed from ") != NULL, "%s", out);
    free(out);
    expect_same_step(ref, dir, 12, "resumed async vs uninterrupted sync");
    double a = final_loss(ref), b = final_loss(dir);
    cr_expect(a == b, "final loss %.17g vs %.17g", a, b);
    tt_rmrf(ref);
    tt_rmrf(dir);
    free(ref);
    free(dir);
}

/* kill -9 while the background writer of step 8 is held halfway through its
 * tensors: the checkpoint of step 4 (complete) is what --resume takes, and
 * the resumed run ends with an uninterrupted run's files. */
Test(async_ckpt, kill_9_during_a_background_write_keeps_the_previous_checkpoint, .timeout = 240) {
    const char *cfg = "--set train.steps=12 --set checkpoint.every=4 --set checkpoint.async=true";
    char *ref = make_run_dir(), *dir = make_run_dir(), *out = NULL, log[4300], ck[4300], found[512] = "";
    char extra[512];
    snprintf(extra, sizeof extra, "--set train.steps=12 --set checkpoint.every=4 --set checkpoint.async=false");
    cr_assert_eq(train(ref, extra, &out), 0, "%s", out);
    free(out);
    snprintf(log, sizeof log, "%s/killed.log", dir);
    snprintf(ck, sizeof ck, "%s/ck", dir);
    pid_t pid = spawn_train(dir, SLEEP_ENV "=3000", cfg, log);
    /* step 4 committed (its writer slept too) and step 8's temp dir there:
     * its writer is asleep halfway */
    int ready = 0;
    for (double t0 = now_s(); !ready && now_s() - t0 < 60; usleep(10000))
        ready =
            exists(ck, "step_00000004/manifest.json") && tt_has_entry(ck, ".tmp-step_00000008-", found, sizeof found);
    cr_assert(ready, "no background save of step 8 in flight after step 4 (see %s)", log);
    cr_expect(!exists(ck, "step_00000008"), "step 8 committed already (the writer did not sleep?)");
    cr_assert_eq(kill(pid, SIGKILL), 0);
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_expect(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "status %d (see %s)", st, log);
    cr_expect(!exists(ck, "step_00000008"), "a half-written step 8 became a checkpoint");

    snprintf(extra, sizeof extra, "%s --resume", cfg);
    cr_assert_eq(train(dir, extra, &out), 0, "%s", out);
    char want[4400];
    snprintf(want, sizeof want, "resumed from %s/step_00000004 ", ck);
    cr_expect(strstr(out, want) != NULL, "expected \"%s\" in: %s", want, out);
    cr_expect(strstr(out, "the temporary directory of a save that did not finish") != NULL, "%s", out);
    free(out);
    expect_same_step(ref, dir, 12, "resumed after kill -9 vs uninterrupted sync");
    cr_expect(!tt_has_entry(ck, ".tmp-", found, sizeof found), "%s left", found);
    tt_rmrf(ref);
    tt_rmrf(dir);
    free(ref);
    free(dir);
}

/* SIGTERM while a background save is in flight: the job waits for it, then
 * saves the step it stopped at and exits 143; both checkpoints are complete
 * and the stop's is the newest. */
Test(async_ckpt, sigterm_with_a_save_in_flight_waits_then_saves_and_stops, .timeout = 240) {
    const char *cfg = "--set train.steps=100000 --set checkpoint.every=4 --set checkpoint.async=true";
    char *dir = make_run_dir(), log[4300], ck[4300], found[512] = "";
    snprintf(log, sizeof log, "%s/run.log", dir);
    snprintf(ck, sizeof ck, "%s/ck", dir);
    pid_t pid = spawn_train(dir, SLEEP_ENV "=1500", cfg, log);
    int ready = 0;
    for (double t0 = now_s(); !ready && now_s() - t0 < 60; usleep(5000))
        ready = tt_has_entry(ck, ".tmp-step_00000004-", found, sizeof found);
    cr_assert(ready, "no background save of step 4 (see %s)", log);
    cr_assert_eq(kill(pid, SIGTERM), 0);
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    char *text = tt_read(log);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 143, "status %d: %s", st, text);
    const char *sig = strstr(text, "saving a checkpoint at step ");
    cr_assert(sig, "%s", text);
    int stop_step = atoi(sig + strlen("saving a checkpoint at step "));
    cr_expect(stop_step >= 4, "%s", text);
    char name[64], line4[4400], lineN[4400];
    snprintf(line4, sizeof line4, "saved checkpoint %s/step_00000004 (", ck);
    snprintf(lineN, sizeof lineN, "saved checkpoint %s/step_%08d (", ck, stop_step);
    const char *p4 = strstr(text, line4), *pN = strstr(text, lineN);
    cr_expect(p4 && pN && p4 <= pN, "the saves of step 4 and %d, in order: %s", stop_step, text);
    snprintf(name, sizeof name, "step_00000004/manifest.json");
    cr_expect(exists(ck, name));
    snprintf(name, sizeof name, "step_%08d/manifest.json", stop_step);
    cr_expect(exists(ck, name), "%s missing", name);
    char *latest = NULL, lp[4400];
    snprintf(lp, sizeof lp, "%s/latest", ck);
    latest = tt_read(lp);
    snprintf(name, sizeof name, "step_%08d", stop_step);
    cr_expect(latest && strncmp(latest, name, strlen(name)) == 0, "latest: %s", latest);
    cr_expect(!tt_has_entry(ck, ".tmp-", found, sizeof found), "%s left", found);
    free(latest);
    free(text);
    /* and it resumes from the stop's checkpoint */
    char *out = NULL, extra[512];
    snprintf(extra, sizeof extra, "--set train.steps=%d --set checkpoint.every=4 --resume", stop_step + 1);
    cr_expect_eq(train(dir, extra, &out), 0, "%s", out);
    char want[4400];
    snprintf(want, sizeof want, "resumed from %s/step_%08d ", ck, stop_step);
    cr_expect(strstr(out, want) != NULL, "expected \"%s\" in: %s", want, out);
    free(out);
    tt_rmrf(dir);
    free(dir);
}

/* checkpoint.every_s over two data-parallel ranks with the distributed
 * optimizer (each rank writes its own shard of the optimizer state): rank 0's
 * clock decides, the loop's all-reduce makes every rank save at that step, so
 * the checkpoint of an every_s step equals, byte for byte, the one a
 * synchronous two-rank run writes when told to stop at that step. */
Test(async_ckpt, every_s_saves_at_steps_both_ranks_agree_on, .timeout = 300) {
    char *ref = make_run_dir(), *dir = make_run_dir(), *out = NULL, cmd[12000], full[16000];
    const char *two = "--set parallel.dp=2 --set parallel.zero=1 --set parallel.timeout_s=60";
    char extra[1024];
    snprintf(extra, sizeof extra, "%s --set train.steps=100 --set checkpoint.every_s=0.02 --set checkpoint.keep=3",
             two);
    train_cmd(cmd, sizeof cmd, dir, extra);
    snprintf(full, sizeof full,
             "prlimit " TT_PRLIMIT_AS("4000000000") " --cpu=120 timeout -k 5 %d %s --log-dir %s/ranks -- %s",
             TIME_LIMIT * 2, tt_bin("tridentrun"), dir, cmd);
    int rc = tt_run(full, &out);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    /* (room for a save at every one of the 100 steps: under the sanitizers a
     * step takes longer than every_s, and a cap below the count of saves
     * would make steps[n - 2] a save that keep=3 has since removed) */
    int steps[128], n_async = 0, n = checkpoint_steps(dir, steps, 128, &n_async);
    cr_assert(n >= 2, "%d checkpoints: every_s never fired (the run was too fast?)", n);
    /* the last every_s save (the last line is the final save; keep=3 kept both) */
    int s = steps[n - 2];
    cr_assert(s > 0 && s < 100, "every_s checkpoint at step %d", s);
    snprintf(extra, sizeof extra, "%s --set train.steps=100 --set checkpoint.async=false --stop-at-step %d", two, s);
    train_cmd(cmd, sizeof cmd, ref, extra);
    snprintf(full, sizeof full,
             "prlimit " TT_PRLIMIT_AS("4000000000") " --cpu=120 timeout -k 5 %d %s --log-dir %s/ranks -- %s",
             TIME_LIMIT * 2, tt_bin("tridentrun"), ref, cmd);
    rc = tt_run(full, &out);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    cr_log_info("every_s=0.02: %d checkpoints, the last every_s one at step %d", n, s);
    expect_same_step(ref, dir, s, "every_s two-rank async vs stop-at-step sync");
    tt_rmrf(ref);
    tt_rmrf(dir);
    free(ref);
    free(dir);
}

/* checkpoint.every_s: negative refused naming the key; with checkpoint.every
 * refused naming both (exit 2, before anything trains). */
Test(async_ckpt, bad_every_s_is_refused_naming_the_key, .timeout = 60) {
    char *dir = make_run_dir(), *out = NULL;
    int rc = train(dir, "--set checkpoint.every_s=-1", &out);
    cr_expect_eq(rc, 2, "%s", out);
    cr_expect(strstr(out, "checkpoint.every_s") != NULL, "%s", out);
    free(out);
    rc = train(dir, "--set checkpoint.every_s=30 --set checkpoint.every=10", &out);
    cr_expect_eq(rc, 2, "%s", out);
    cr_expect(strstr(out, "checkpoint.every (10 steps) and checkpoint.every_s (30 s) are both set") != NULL, "%s", out);
    free(out);
    cr_expect(!exists(dir, "ck/step_00000000"), "something was saved");
    tt_rmrf(dir);
    free(dir);
}

/* A background save that fails on world rank 0's commit (its temporary
 * directory removed under it while the writers sleep halfway) fails on both
 * ranks at the same step: the job ends with "not saved" (no rank waits
 * forever for the other), no step directory and no temporary directory are
 * left. */
Test(async_ckpt, a_failed_background_save_fails_on_every_rank, .timeout = 240) {
    char *dir = make_run_dir(), cmd[12000], full[16000], log[4300], ck[4300], found[512] = "", victim[4900];
    snprintf(log, sizeof log, "%s/run.log", dir);
    snprintf(ck, sizeof ck, "%s/ck", dir);
    train_cmd(cmd, sizeof cmd, dir,
              "--set parallel.dp=2 --set parallel.zero=1 --set parallel.timeout_s=60 --set train.steps=12 "
              "--set checkpoint.every=4");
    snprintf(full, sizeof full, SLEEP_ENV "=1500 exec timeout -k 5 %d %s --log-dir %s/ranks -- %s", TIME_LIMIT,
             tt_bin("tridentrun"), dir, cmd);
    pid_t pid = spawn_sh(full, log);
    int ready = 0;
    for (double t0 = now_s(); !ready && now_s() - t0 < 60; usleep(5000))
        ready = tt_has_entry(ck, ".tmp-step_00000004-", found, sizeof found);
    cr_assert(ready, "no background save of step 4 (see %s)", log);
    /* into the writers' sleep: rank 0 makes the directory before the
     * snapshot; a removal before a writer has opened its files fails that
     * writer instead (seen under ASan: rank 1 "cannot open for writing",
     * its exit tearing the job down before rank 0 said "not saved") */
    usleep(300 * 1000);
    snprintf(victim, sizeof victim, "%s/%s", ck, found);
    tt_rmrf(victim);
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    char *text = tt_read(log);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) != 0 && WEXITSTATUS(st) != 124, "status %d: %s", st, text);
    cr_expect(text && strstr(text, "checkpoint of step 4 not saved"), "%s", text);
    cr_expect(!tt_has_entry(ck, "step_", found, sizeof found), "%s left", found);
    cr_expect(!tt_has_entry(ck, ".tmp-", found, sizeof found), "%s left", found);
    free(text);
    tt_rmrf(dir);
    free(dir);
}
