/* Fault tests of the checkpoint store, end to end through the built
 * `trident` (issue 13, items 1, 8, 9 and 10, and the kill -9 loop): a deleted
 * `latest`, a damaged checkpoint, a full disk, a second trainer, temp dirs of
 * dead writers, and kills at random moments. Every trident started here is
 * capped in memory (RLIMIT_AS) and time (timeout / alarm). */
#include <criterion/criterion.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "helpers/testutil.h"

#define AS_LIMIT   "2000000000" /* bytes of address space per trident */
#define TIME_LIMIT 60           /* seconds per trident */

/* A run directory with its own token files (as tests/system/test_train.c makes them). */
static char *make_run_dir(void) {
    char *dir = tt_mkdtemp(), p[4200];
    snprintf(p, sizeof p, "%s/train.bin", dir);
    tt_write_llmc_random(p, 20000, 256, 1);
    snprintf(p, sizeof p, "%s/val.bin", dir);
    tt_write_llmc_random(p, 4000, 256, 2);
    return dir;
}

/* The trident command line for a tiny run in dir (no prefix, no redirection). */
static void train_cmd(char *cmd, size_t n, const char *dir, const char *ckpt, const char *extra) {
    snprintf(cmd, n,
             "%s train %s/configs/tiny-test.json --threads 1 --set data.train=%s/train.bin --set data.val= "
             "--set checkpoint.dir=%s --set log.dir=%s/log %s",
             tt_bin("trident"), TRI_SOURCE_DIR, dir, ckpt, dir, extra);
}

/* Runs a tiny training in dir (checkpoints in dir/ckpt), capped; stdout and
 * stderr together in *out. Returns the exit code. */
static int train(const char *dir, const char *extra, char **out) {
    char ckpt[4200], cmd[12000], full[12400];
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", dir);
    train_cmd(cmd, sizeof cmd, dir, ckpt, extra);
    snprintf(full, sizeof full, "timeout -k 5 %d prlimit " TT_PRLIMIT_AS(AS_LIMIT) " %s", TIME_LIMIT, cmd);
    return tt_run(full, out);
}

/* Starts a tiny training in the background as a child whose pid is trident's
 * own (so that kill hits it), output into log; capped by RLIMIT_AS and an
 * alarm, which both survive exec, and killed if this test's process ends
 * first (a failed assertion must not leave it running). */
static pid_t spawn_train(const char *dir, const char *extra, const char *log) {
    char ckpt[4200], cmd[12000], full[12100];
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", dir);
    train_cmd(cmd, sizeof cmd, dir, ckpt, extra);
    snprintf(full, sizeof full, "exec %s", cmd);
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

static int losses_of(const char *dir, double **out) {
    char p[4200];
    snprintf(p, sizeof p, "%s/log/metrics.jsonl", dir);
    return tt_losses(p, out);
}

static int path_exists(const char *dir, const char *name) {
    char p[4200];
    struct stat st;
    cr_assert(snprintf(p, sizeof p, "%s/%s", dir, name) < (int)sizeof p);
    return lstat(p, &st) == 0;
}

/* The one line of out that starts with "trident: " (the error), for messages. */
static void expect_one_error_line(const char *out, const char *must1, const char *must2, const char *must3) {
    const char *e = strstr(out, "trident: ");
    cr_assert_not_null(e, "no error line in: %s", out);
    cr_assert_null(strstr(e + 1, "trident: "), "more than one error line: %s", out);
    const char *musts[] = {must1, must2, must3};
    for (int i = 0; i < 3; i++)
        if (musts[i]) cr_expect_not_null(strstr(e, musts[i]), "the error does not name '%s': %s", musts[i], e);
}

/* Issue 13.1: a checkpoint dir with its newest step but no `latest`. */
Test(store_faults, no_latest_resume_keeps_and_resumes_the_newest_checkpoint, .timeout = 60) {
    char *a = make_run_dir(), *b = make_run_dir(), *out = NULL, ckpt[4200], p[4300];
    const char *cfg = "--set train.steps=8 --set checkpoint.every=2 --set checkpoint.keep=2";
    cr_assert_eq(train(a, cfg, &out), 0, "%s", out);
    free(out);
    char stop[512];
    snprintf(stop, sizeof stop, "%s --stop-at-step 6", cfg);
    cr_assert_eq(train(b, stop, &out), 0, "%s", out);
    free(out);
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", b);
    cr_assert(path_exists(ckpt, "step_00000004") && path_exists(ckpt, "step_00000006"));
    snprintf(p, sizeof p, "%s/latest", ckpt);
    cr_assert_eq(unlink(p), 0);

    /* a fresh start on it is refused, naming the checkpoint it would take over */
    int rc = train(b, cfg, &out);
    cr_expect_eq(rc, 2, "%s", out);
    expect_one_error_line(out, "already holds", "step_00000006", "--resume");
    cr_expect_null(strstr(out, "step     1"), "it trained: %s", out);
    free(out);

    char resume[512];
    snprintf(resume, sizeof resume, "%s --resume", cfg);
    cr_assert_eq(train(b, resume, &out), 0, "%s", out);
    cr_expect_not_null(strstr(out, "resumed from"), "%s", out);
    cr_expect_not_null(strstr(out, "step_00000006 at step 6"), "%s", out);
    free(out);
    double *la, *lb;
    int na = losses_of(a, &la), nb = losses_of(b, &lb);
    cr_assert_eq(na, 8);
    cr_assert_eq(nb, 8, "6 steps, then the 2 after the newest checkpoint");
    for (int i = 0; i < 8; i++) cr_expect(la[i] == lb[i], "step %d: %.17g vs %.17g", i + 1, la[i], lb[i]);
    free(la);
    free(lb);
    /* pruning (keep 2) did not delete the checkpoint it resumed from */
    cr_expect(path_exists(ckpt, "step_00000006"), "step_00000006 was pruned");
    cr_expect(path_exists(ckpt, "step_00000008"));
    cr_expect(!path_exists(ckpt, "step_00000004"), "keep=2 keeps 6 and 8 of this run");
    tt_rmrf(a);
    tt_rmrf(b);
    free(a);
    free(b);
}

Test(store_faults, a_damaged_newest_checkpoint_is_named_with_the_previous_step, .timeout = 60) {
    char *dir = make_run_dir(), *out = NULL, ckpt[4200], p[4300];
    cr_assert_eq(train(dir, "--set train.steps=6 --set checkpoint.every=2", &out), 0, "%s", out);
    free(out);
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", dir);
    snprintf(p, sizeof p, "%s/step_00000006/model.safetensors", ckpt);
    int fd = open(p, O_RDWR);
    cr_assert(fd >= 0);
    unsigned char c;
    cr_assert_eq(pread(fd, &c, 1, 4000), 1);
    c ^= 0x40; /* one bit of one weight */
    cr_assert_eq(pwrite(fd, &c, 1, 4000), 1);
    close(fd);

    int rc = train(dir, "--set train.steps=8 --set checkpoint.every=2 --resume", &out);
    cr_expect_eq(rc, 2, "%s", out);
    expect_one_error_line(out, "step_00000006/model.safetensors", "step_00000004", "mv ");
    cr_expect_null(strstr(out, "resumed from"), "it trained on it: %s", out);
    free(out);
    cr_expect(path_exists(ckpt, "step_00000006"), "the damaged one is kept for the user");

    /* doing what the message says resumes from step 4 */
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "mv %s/step_00000006 %s/damaged-step_00000006", ckpt, ckpt);
    cr_assert_eq(tt_run(cmd, NULL), 0);
    rc = train(dir, "--set train.steps=8 --set checkpoint.every=2 --resume", &out);
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect_not_null(strstr(out, "step_00000004 at step 4"), "%s", out);
    free(out);
    tt_rmrf(dir);
    free(dir);
}

/* Issue 13.9 on a real full file system: a 640 KiB tmpfs holds one
 * checkpoint of the tiny model (~420 KiB), not two: the first run's second
 * save fails (the preflight saw room for one), the resumed run is refused by
 * the preflight. Needs root and a mount
 * namespace (unshare -m), so that the mount vanishes with the test. */
Test(store_faults, enospc_on_a_small_tmpfs_leaves_no_temp_dir, .timeout = 90) {
    char *dir = make_run_dir(), *out = NULL, ckpt[4200], first[12000], again[12000], eval[9000], cmd[40000];
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", dir);
    cr_assert_eq(mkdir(ckpt, 0755), 0);
    train_cmd(first, sizeof first, dir, ckpt, "--set train.steps=3 --set checkpoint.every=1");
    train_cmd(again, sizeof again, dir, ckpt, "--set train.steps=3 --set checkpoint.every=1 --resume");
    snprintf(eval, sizeof eval, "%s eval --ckpt %s --data %s/val.bin --batches 1 --batch 1 --threads 1",
             tt_bin("trident"), ckpt, dir);
    int k = snprintf(
        cmd, sizeof cmd,
        "[ \"$(id -u)\" = 0 ] && command -v unshare >/dev/null && "
        "timeout -k 5 80 unshare -m --propagation private sh -c '"
        "mount -t tmpfs -o size=640k tmpfs %s 2>/dev/null || exit 0; echo MOUNTED; " TT_SH_LIMIT_AS(
            "2000000") "%s; echo \"first rc=$?\"; %s; echo \"again rc=$?\"; %s >/dev/null; echo \"eval rc=$?\"; "
                       "echo LISTING; ls -a %s'",
        ckpt, first, again, eval, ckpt);
    cr_assert(k < (int)sizeof cmd);
    tt_run(cmd, &out);
    if (!strstr(out, "MOUNTED")) {
        free(out);
        tt_rmrf(dir);
        free(dir);
        cr_skip_test("cannot mount a tmpfs here (needs root and unshare -m); the RLIMIT_FSIZE test covers it");
    }
    cr_expect_not_null(strstr(out, "first rc=1"), "the second save fails for space: %s", out);
    cr_expect_not_null(strstr(out, "No space left on device"), "%s", out);
    cr_expect_not_null(strstr(out, "not saved"), "%s", out);
    /* the resume is refused before step 1 by the preflight's free-space
     * check (the full disk no longer holds another checkpoint): exit 2,
     * both figures named, nothing written */
    cr_expect_not_null(strstr(out, "again rc=2"), "resume refused before training for space: %s", out);
    cr_expect_not_null(strstr(out, "free, but one checkpoint of this model needs"), "%s", out);
    cr_expect_not_null(strstr(out, "eval rc=0"), "step 1 is intact (it verifies and loads): %s", out);
    const char *ls = strstr(out, "LISTING");
    cr_assert_not_null(ls, "%s", out);
    cr_expect_null(strstr(ls, ".tmp-"), "a temp dir is left: %s", ls);
    cr_expect_not_null(strstr(ls, "step_00000001"), "%s", ls);
    cr_expect_null(strstr(ls, "step_00000002"), "%s", ls);
    free(out);
    tt_rmrf(dir);
    free(dir);
}

/* Issue 13.9 where no tmpfs can be mounted: RLIMIT_FSIZE (with SIGXFSZ
 * ignored, writes past it fail with EFBIG) makes the first save fail. */
Test(store_faults, efbig_under_rlimit_fsize_leaves_no_temp_dir, .timeout = 60) {
    char *dir = make_run_dir(), *out = NULL, ckpt[4200], cmd[12000], full[12400];
    if (tt_run("command -v prlimit", NULL) != 0) {
        tt_rmrf(dir);
        free(dir);
        cr_skip_test("prlimit (util-linux) is not installed");
    }
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", dir);
    train_cmd(cmd, sizeof cmd, dir, ckpt, "--set train.steps=2 --set checkpoint.every=1");
    /* model.safetensors of the tiny model is 139 KB, metrics.jsonl far below 64 KiB */
    snprintf(full, sizeof full,
             "trap '' XFSZ; exec timeout -k 5 %d prlimit --fsize=65536 " TT_PRLIMIT_AS(AS_LIMIT) " %s", TIME_LIMIT,
             cmd);
    int rc = tt_run(full, &out);
    cr_expect_eq(rc, 1, "%s", out);
    cr_expect_not_null(strstr(out, "File too large"), "%s", out);
    cr_expect_not_null(strstr(out, "not saved"), "%s", out);
    char found[512] = "";
    cr_expect(!tt_has_entry(ckpt, ".tmp-", found, sizeof found), "temp dir %s left in %s", found, ckpt);
    cr_expect(!tt_has_entry(ckpt, "step_", found, sizeof found), "%s", found);
    free(out);
    tt_rmrf(dir);
    free(dir);
}

/* Issue 13.10: a second trainer on a dir in use is refused naming the first. */
Test(store_faults, a_second_trainer_is_refused_naming_the_holder, .timeout = 60) {
    char *dir = make_run_dir(), *out = NULL, log[4300], lock[4300], want[128], host[256] = "";
    gethostname(host, sizeof host - 1);
    snprintf(log, sizeof log, "%s/first.log", dir);
    snprintf(lock, sizeof lock, "%s/ckpt/.lock", dir);
    pid_t first = spawn_train(dir, "--set train.steps=1000000", log);
    snprintf(want, sizeof want, "pid %ld on host ", (long)first);
    int training = 0;
    for (int i = 0; i < 200 && !training; i++) { /* up to 10 s for it to start its steps */
        char *txt = tt_read(log);
        training = txt && strstr(txt, "step     1/") != NULL;
        free(txt);
        if (!training) usleep(50000);
    }
    cr_assert(training, "the first trainer did not start (see %s)", log);
    char *holder = tt_read(lock);
    cr_expect(holder && strncmp(holder, want, strlen(want)) == 0, "%s names [%s], not %s", lock, holder, want);
    free(holder);

    int rc = train(dir, "--set train.steps=2", &out);
    cr_expect_eq(rc, 2, "%s", out);
    expect_one_error_line(out, "in use by another trainer", want, host);
    cr_expect_null(strstr(out, "step     1"), "the second one trained: %s", out);
    free(out);
    rc = train(dir, "--set train.steps=2 --resume", &out);
    cr_expect_eq(rc, 2, "with --resume too: %s", out);
    free(out);

    kill(first, SIGKILL);
    int st;
    cr_assert_eq(waitpid(first, &st, 0), first);
    cr_expect(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "the first trainer ended by itself");
    /* once it is gone, the dir is free again */
    rc = train(dir, "--set train.steps=2 --resume", &out);
    cr_expect_eq(rc, 0, "%s", out);
    free(out);
    tt_rmrf(dir);
    free(dir);
}

/* Issue 13.9, second half: temp dirs of writers that died (or hold no lock)
 * are removed when the next trainer starts, not left to fill the disk. */
Test(store_faults, stale_temp_dirs_are_removed_at_start, .timeout = 60) {
    char *dir = make_run_dir(), *out = NULL, ckpt[4200], p[4400];
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", dir);
    cr_assert_eq(mkdir(ckpt, 0755), 0);
    pid_t dead = fork();
    cr_assert(dead >= 0);
    if (dead == 0) _exit(0);
    cr_assert_eq(waitpid(dead, NULL, 0), dead);
    char dead_tmp[128], live_tmp[128];
    /* steps above the run's own, so that no save of this run would reach them */
    snprintf(dead_tmp, sizeof dead_tmp, ".tmp-step_00000099-%ld", (long)dead);
    snprintf(live_tmp, sizeof live_tmp, ".tmp-step_00000098-%ld", (long)getpid());
    snprintf(p, sizeof p, "%s/%s", ckpt, dead_tmp);
    cr_assert_eq(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/%s/model.safetensors", ckpt, dead_tmp);
    FILE *f = fopen(p, "w");
    fputs("half a checkpoint", f);
    fclose(f);
    snprintf(p, sizeof p, "%s/%s", ckpt, live_tmp);
    cr_assert_eq(mkdir(p, 0755), 0);

    int rc = train(dir, "--set train.steps=2", &out);
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect_not_null(strstr(out, dead_tmp), "%s", out);
    cr_expect_not_null(strstr(out, "is gone"), "%s", out);
    cr_expect(!path_exists(ckpt, dead_tmp), "%s is still there", dead_tmp);
    cr_expect(!path_exists(ckpt, live_tmp), "%s (a live pid holding no lock) is still there", live_tmp);
    /* and the run itself is undisturbed: its final checkpoint is there */
    cr_expect(path_exists(ckpt, "step_00000002"));
    free(out);
    tt_rmrf(dir);
    free(dir);
}

/* kill -9 at random moments (start-up, a step, the middle of a save), resume
 * each time: the final checkpoint equals an uninterrupted run's, bit for bit,
 * and no temp dir is left. */
Test(store_faults, kill_9_loop_resumes_bit_for_bit, .timeout = 120) {
    const char *cfg = "--set train.steps=20 --set checkpoint.every=1 --set checkpoint.keep=2";
    char *ref = make_run_dir(), *dir = make_run_dir(), *out = NULL, log[4300], extra[512];
    cr_assert_eq(train(ref, cfg, &out), 0, "%s", out);
    free(out);
    snprintf(log, sizeof log, "%s/killed.log", dir);
    snprintf(extra, sizeof extra, "%s --resume", cfg);
    unsigned seed = (unsigned)time(NULL);
    srand(seed);
    int kills = 0;
    for (int i = 0; i < 5; i++) {
        pid_t pid = spawn_train(dir, extra, log);
        useconds_t delay = 20000 + (useconds_t)(rand() % 600) * 1000; /* 20 .. 620 ms */
        usleep(delay);
        kills += kill(pid, SIGKILL) == 0;
        int st;
        cr_assert_eq(waitpid(pid, &st, 0), pid);
        cr_assert(WIFSIGNALED(st) || (WIFEXITED(st) && WEXITSTATUS(st) == 0), "seed %u: run %d: status %d (see %s)",
                  seed, i, st, log);
    }
    cr_assert_eq(train(dir, extra, &out), 0, "seed %u: %s", seed, out);
    /* how many kills landed inside a save (their temp dir was found and removed) */
    int mid_save = 0;
    char *killed = tt_read(log);
    for (const char *c = killed; c && (c = strstr(c, "the temporary directory of a save")); c++) mid_save++;
    for (const char *c = out; (c = strstr(c, "the temporary directory of a save")); c++) mid_save++;
    free(killed);
    free(out);
    cr_log_info("kill -9 loop: %d kills, %d inside a save, seed %u", kills, mid_save, seed);

    char a[4300], b[4300];
    snprintf(a, sizeof a, "%s/ckpt/step_00000020", ref);
    snprintf(b, sizeof b, "%s/ckpt/step_00000020", dir);
    tt_expect_same_file(a, b, "model.safetensors");
    tt_expect_same_file(a, b, "optimizer.safetensors");
    double *la, *lb;
    int na = losses_of(ref, &la), nb = losses_of(dir, &lb);
    cr_assert(na == 20 && nb >= 1);
    cr_expect(la[na - 1] == lb[nb - 1], "seed %u: final loss %.17g vs %.17g", seed, la[na - 1], lb[nb - 1]);
    free(la);
    free(lb);
    char ckpt[4300], found[512] = "";
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", dir);
    cr_expect(!tt_has_entry(ckpt, ".tmp-", found, sizeof found), "seed %u: %s left", seed, found);
    tt_rmrf(ref);
    tt_rmrf(dir);
    free(ref);
    free(dir);
}

/* Issue 13.8, first half: a checkpoint.dir that cannot hold checkpoints is
 * refused at start, naming the key, instead of failing the first save after
 * the training it was meant to keep. */
Test(store_faults, a_bad_checkpoint_dir_is_refused_before_training, .timeout = 60) {
    char *dir = make_run_dir(), *out = NULL, cmd[12000], full[12400], afile[4300], under[4400];
    snprintf(afile, sizeof afile, "%s/afile", dir);
    FILE *f = fopen(afile, "w");
    fclose(f);
    snprintf(under, sizeof under, "%s/ckpt", afile);
    const char *bad[] = {"", under};
    const char *why[] = {"empty", "afile is a file"};
    for (int i = 0; i < 2; i++) {
        train_cmd(cmd, sizeof cmd, dir, bad[i], "--set train.steps=3");
        snprintf(full, sizeof full, "timeout -k 5 %d prlimit " TT_PRLIMIT_AS(AS_LIMIT) " %s", TIME_LIMIT, cmd);
        int rc = tt_run(full, &out);
        cr_expect_eq(rc, 2, "checkpoint.dir=\"%s\": %s", bad[i], out);
        expect_one_error_line(out, "checkpoint.dir", why[i], NULL);
        cr_expect_null(strstr(out, "step     1"), "it trained first: %s", out);
        free(out);
    }
    tt_rmrf(dir);
    free(dir);
}
