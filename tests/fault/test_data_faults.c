/* Fault tests of the data and the run's preconditions (issue 13, items 3,
 * 4, 5, 6, 8 and 12), end to end through the built `trident`:
 *   - SIGTERM during validation saves a checkpoint and exits 143; eval,
 *     sample and tokenize stop on SIGTERM with a message and 128 + 15;
 *   - a token file truncated under a running job is named (not SIGBUS);
 *   - a data file changed since the checkpoint is refused on --resume, and
 *     accepted with --allow-data-change;
 *   - `eval --batches` beyond one pass of the file is capped, and a file
 *     with fewer windows than --batch is evaluated in one partial batch;
 *   - sizes that overflow, models that do not fit in memory or on disk, a
 *     tokenizer larger than the vocabulary, a missing data.val and betas that
 *     round to 1 are refused before step 1 (exit 2).
 * Every child runs under prlimit (address space 4 GB, 60 s of CPU) and a
 * wall-clock deadline, so a regression fails the test instead of straining
 * the machine. */
#include <criterion/criterion.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "data/dataset.h"
#include "data/tok/tokenizer.h"
#include "helpers/testutil.h"
#include "config/config.h"
#include "train/preflight.h"

#define LIMITS "prlimit " TT_PRLIMIT_AS("4000000000") " --cpu=60"

/* ---- a child process we can signal --------------------------------------- */

typedef struct job {
    pid_t pid;
    char log[4300]; /* its stdout and stderr */
} job;

/* Starts `cmd` with /bin/sh ("exec" in front, so that the pid is the
 * command's own once prlimit has exec'd it). */
static void job_start(job *j, const char *dir, const char *name, const char *cmd) {
    snprintf(j->log, sizeof j->log, "%s/%s.log", dir, name);
    char full[16384];
    snprintf(full, sizeof full, "exec %s", cmd);
    fflush(NULL);
    pid_t p = fork();
    cr_assert(p >= 0);
    if (p == 0) {
        int fd = open(j->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0) _exit(126);
        execl("/bin/sh", "sh", "-c", full, (char *)NULL);
        _exit(127);
    }
    j->pid = p;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* Waits until `text` appears in file `path` (1) or seconds pass (0). */
static int wait_for_text(const char *path, const char *text, double seconds) {
    for (double t0 = now_s(); now_s() - t0 < seconds; sleep_s(0.02)) {
        char *s = tt_read(path);
        int found = s && strstr(s, text);
        free(s);
        if (found) return 1;
    }
    return 0;
}

/* Waits until path exists (1) or seconds pass (0). */
static int wait_for_file(const char *path, double seconds) {
    for (double t0 = now_s(); now_s() - t0 < seconds; sleep_s(0.01))
        if (access(path, F_OK) == 0) return 1;
    return 0;
}

/* Appends pid's descendants (every thread's children, recursively) to
 * pids[*n < cap]. */
static void descendants(pid_t pid, pid_t *pids, int *n, int cap) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char cp[600];
        snprintf(cp, sizeof cp, "%s/%s/children", path, e->d_name);
        FILE *f = fopen(cp, "r");
        int c;
        while (f && fscanf(f, "%d", &c) == 1 && *n < cap) {
            pids[(*n)++] = (pid_t)c;
            descendants((pid_t)c, pids, n, cap);
        }
        if (f) fclose(f);
    }
    closedir(d);
}

/* The job's exit code; 1000 + signal if a signal killed it; -1 if it was
 * still running after `seconds`: it is then killed with everything it
 * started (mpirun and the ranks under tridentrun), so that a regression
 * leaves nothing running. */
static int job_wait(job *j, double seconds) {
    int st;
    for (double t0 = now_s(); now_s() - t0 < seconds; sleep_s(0.01)) {
        pid_t r = waitpid(j->pid, &st, WNOHANG);
        if (r == j->pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 1000 + WTERMSIG(st);
    }
    pid_t tree[256];
    int n = 0;
    kill(j->pid, SIGSTOP); /* no new children while the tree is listed */
    descendants(j->pid, tree, &n, 256);
    for (int i = 0; i < n; i++) kill(tree[i], SIGKILL);
    kill(j->pid, SIGKILL);
    waitpid(j->pid, &st, 0);
    return -1;
}

static char *job_log(const job *j) {
    char *s = tt_read(j->log);
    return s ? s : strdup("(no log)");
}

/* Does the log hold text? (It may hold NUL bytes: sampled text.) */
static int log_has(const job *j, const char *text) {
    FILE *f = fopen(j->log, "rb");
    if (!f) return 0;
    char *buf = malloc(1 << 20);
    size_t n = fread(buf, 1, 1 << 20, f);
    fclose(f);
    int found = memmem(buf, n, text, strlen(text)) != NULL;
    free(buf);
    return found;
}

/* ---- runs ------------------------------------------------------------------- */

static char *path_in(char *buf, size_t n, const char *dir, const char *name) {
    snprintf(buf, n, "%s/%s", dir, name);
    return buf;
}

/* A run directory with train.bin (n_train tokens) and val.bin (n_val). */
static char *run_dir(size_t n_train, size_t n_val) {
    char *dir = tt_mkdtemp(), p[4200];
    tt_write_llmc_random(path_in(p, sizeof p, dir, "train.bin"), n_train, 256, 1);
    tt_write_llmc_random(path_in(p, sizeof p, dir, "val.bin"), n_val, 256, 2);
    return dir;
}

/* The command line of a tiny training run in dir (configs/tiny-test.json). */
static const char *train_cmd(char *buf, size_t n, const char *dir, const char *extra) {
    snprintf(buf, n,
             LIMITS " %s train %s/configs/tiny-test.json --threads 1 --set data.train=%s/train.bin "
                    "--set data.val=%s/val.bin --set checkpoint.dir=%s/ck --set log.dir=%s/log %s",
             tt_bin("trident"), TRI_SOURCE_DIR, dir, dir, dir, dir, extra);
    return buf;
}

/* A wider model for the runs that must be slow enough to be interrupted
 * (a validation pass of several seconds). */
#define SLOW_MODEL "--set model.n_embd=128 --set model.n_head=4 --set model.seq_len=64"

static int run_train(const char *dir, const char *extra, char **out) {
    char cmd[8192], full[8300];
    train_cmd(cmd, sizeof cmd, dir, extra);
    snprintf(full, sizeof full, "timeout 60 %s", cmd);
    return tt_run(full, out);
}

/* Bad input: exit code 2, the message names what it must, training never started. */
static void expect_refused(const char *what, int rc, const char *out, const char *must1, const char *must2) {
    cr_expect_eq(rc, 2, "%s: exit code %d\n%s", what, rc, out);
    cr_expect(strstr(out, must1) != NULL, "%s: message lacks '%s': %s", what, must1, out);
    if (must2) cr_expect(strstr(out, must2) != NULL, "%s: message lacks '%s': %s", what, must2, out);
    cr_expect(strstr(out, "step ") == NULL, "%s: training started: %s", what, out);
}

/* ---- item 3: signals inside long loops --------------------------------------- */

Test(data_faults, sigterm_during_validation_saves_a_checkpoint_and_exits_143, .timeout = 90) {
    char *dir = run_dir(20000, 400000), cmd[8192], p[4200];
    train_cmd(cmd, sizeof cmd, dir,
              SLOW_MODEL " --set train.steps=100000 --set train.eval_every=1 --set train.eval_batches=1000000");
    job j;
    job_start(&j, dir, "train", cmd);
    /* the step line is printed just before the validation pass starts */
    int started = wait_for_text(j.log, "step     1/", 40);
    char *log = job_log(&j);
    cr_assert(started, "no first step: %s", log);
    free(log);
    sleep_s(0.2);
    double t0 = now_s();
    kill(j.pid, SIGTERM);
    int rc = job_wait(&j, 10);
    double took = now_s() - t0;
    log = job_log(&j);
    cr_expect_eq(rc, 143, "exit code %d after SIGTERM during validation (-1: still running 10 s later): %s", rc, log);
    cr_expect(took < 5, "took %.1f s to stop", took);
    cr_expect(strstr(log, "validation abandoned") != NULL, "%s", log);
    cr_expect(strstr(log, "val loss") == NULL, "an abandoned pass logs no loss: %s", log);
    free(log);
    char *latest = tt_read(path_in(p, sizeof p, dir, "ck/latest"));
    cr_expect(latest && strncmp(latest, "step_00000001", 13) == 0, "the checkpoint of step 1: %s", latest);
    free(latest);
    tt_rmrf(dir);
    free(dir);
}

/* The same over two data-parallel ranks (tridentrun): the ranks must agree
 * to leave the pass, or one would wait forever in a collective. */
Test(data_faults, sigterm_during_validation_on_two_ranks_saves_and_exits_143, .timeout = 120) {
    char *dir = run_dir(20000, 400000), cmd[8192], p[4200];
    snprintf(cmd, sizeof cmd,
             LIMITS
             " %s --log-dir %s/ranks -- %s train %s/configs/tiny-test.json --threads 1 --set data.train=%s/train.bin "
             "--set data.val=%s/val.bin --set checkpoint.dir=%s/ck --set log.dir=%s/log " SLOW_MODEL
             " --set parallel.dp=2 --set train.steps=100000 --set train.eval_every=1 "
             "--set train.eval_batches=1000000",
             tt_bin("tridentrun"), dir, tt_bin("trident"), TRI_SOURCE_DIR, dir, dir, dir, dir);
    job j;
    job_start(&j, dir, "tridentrun", cmd);
    int started = wait_for_text(j.log, "step     1/", 60);
    char *log = job_log(&j);
    cr_assert(started, "no first step: %s", log);
    free(log);
    sleep_s(0.3);
    kill(j.pid, SIGTERM);
    int rc = job_wait(&j, 20);
    log = job_log(&j);
    cr_expect_eq(rc, 143, "exit code %d (-1: still running 20 s after SIGTERM): %s", rc, log);
    cr_expect(strstr(log, "validation abandoned") != NULL, "%s", log);
    free(log);
    char *latest = tt_read(path_in(p, sizeof p, dir, "ck/latest"));
    cr_expect(latest && strncmp(latest, "step_00000001", 13) == 0, "the checkpoint of step 1: %s", latest);
    free(latest);
    tt_rmrf(dir);
    free(dir);
}

/* A checkpoint of the initial tiny (or slow) model in dir/ck. */
static void make_checkpoint(const char *dir, const char *model) {
    char *out = NULL, extra[512];
    snprintf(extra, sizeof extra, "%s --set train.steps=0", model);
    cr_assert_eq(run_train(dir, extra, &out), 0, "%s", out);
    free(out);
}

Test(data_faults, eval_stops_on_sigterm_with_a_message, .timeout = 90) {
    char *dir = run_dir(20000, 400000), cmd[8192];
    make_checkpoint(dir, SLOW_MODEL);
    snprintf(cmd, sizeof cmd, LIMITS " %s eval --ckpt %s/ck --data %s/val.bin --batches 1000000 --batch 2 --threads 1",
             tt_bin("trident"), dir, dir);
    job j;
    job_start(&j, dir, "eval", cmd);
    sleep_s(1.0); /* loading takes well under that; the pass takes several seconds */
    kill(j.pid, SIGTERM);
    int rc = job_wait(&j, 10);
    char *log = job_log(&j);
    cr_expect_eq(rc, 143, "exit code %d (1015: killed by the signal, no message): %s", rc, log);
    cr_expect(strstr(log, "SIGTERM: stopped after") && strstr(log, "no result"), "%s", log);
    free(log);
    tt_rmrf(dir);
    free(dir);
}

Test(data_faults, sample_stops_on_sigterm_with_a_message, .timeout = 90) {
    char *dir = run_dir(20000, 4000), cmd[8192];
    make_checkpoint(dir, "");
    snprintf(cmd, sizeof cmd, LIMITS " %s sample --ckpt %s/ck --tokens 1000000 --threads 1", tt_bin("trident"), dir);
    job j;
    job_start(&j, dir, "sample", cmd);
    for (double t0 = now_s(); now_s() - t0 < 20; sleep_s(0.02)) { /* some text came out */
        struct stat st;
        if (stat(j.log, &st) == 0 && st.st_size > 200) break;
    }
    kill(j.pid, SIGTERM);
    int rc = job_wait(&j, 10);
    char *log = job_log(&j);
    cr_expect_eq(rc, 143, "exit code %d: %s", rc, log + (strlen(log) > 300 ? strlen(log) - 300 : 0));
    cr_expect(log_has(&j, "SIGTERM: stopped after"), "no message in %s", j.log);
    free(log);
    tt_rmrf(dir);
    free(dir);
}

/* bytes of words of random letters (many distinct words: slow to tokenize) */
static void write_text(const char *path, size_t bytes, uint64_t seed) {
    FILE *f = fopen(path, "w");
    cr_assert(f);
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    size_t n = 0;
    char line[128];
    while (n < bytes) {
        size_t k = 0;
        for (int w = 0; w < 10; w++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            int len = 3 + (int)((s >> 60) % 7);
            for (int i = 0; i < len; i++) line[k++] = (char)('a' + (s >> (4 * i + 8)) % 26);
            line[k++] = w < 9 ? ' ' : '\n';
        }
        fwrite(line, 1, k, f);
        n += k;
    }
    fclose(f);
}

Test(data_faults, tokenize_encode_stops_on_sigterm_and_leaves_no_file, .timeout = 90) {
    char *dir = tt_mkdtemp(), cmd[8192], p[4200], tmp[4200], fin[4200];
    write_text(path_in(p, sizeof p, dir, "small.txt"), 1 << 19, 1);
    const char *files[1] = {p};
    tri_tokenizer tk;
    cr_assert_eq(tri_tokenizer_train(&tk, files, 1, 8000, 1), 0);
    cr_assert_eq(tri_tokenizer_save(&tk, path_in(p, sizeof p, dir, "tok.json")), 0);
    tri_tokenizer_free(&tk);
    write_text(path_in(p, sizeof p, dir, "big.txt"), (size_t)48 << 20, 2);
    snprintf(cmd, sizeof cmd,
             LIMITS " %s tokenize encode --tokenizer %s/tok.json --format llmc --out %s/out --threads 1 --quiet "
                    "%s/big.txt",
             tt_bin("trident"), dir, dir, dir);
    job j;
    job_start(&j, dir, "encode", cmd);
    cr_assert(wait_for_file(path_in(tmp, sizeof tmp, dir, "out.bin.tmp"), 20), "never started");
    sleep_s(0.3);
    kill(j.pid, SIGTERM);
    int rc = job_wait(&j, 10);
    char *log = job_log(&j);
    cr_expect_eq(rc, 143, "exit code %d: %s", rc, log);
    cr_expect(strstr(log, "SIGTERM: stopped; nothing written") != NULL, "%s", log);
    cr_expect(access(tmp, F_OK) != 0, "the temporary file %s is left behind", tmp);
    cr_expect(access(path_in(fin, sizeof fin, dir, "out.bin"), F_OK) != 0, "a partial out.bin exists");
    free(log);
    tt_rmrf(dir);
    free(dir);
}

Test(data_faults, tokenize_train_stops_on_sigterm_and_writes_nothing, .timeout = 90) {
    char *dir = tt_mkdtemp(), cmd[8192], p[4200];
    write_text(path_in(p, sizeof p, dir, "corpus.txt"), (size_t)3 << 20, 3);
    snprintf(cmd, sizeof cmd, LIMITS " %s tokenize train --vocab-size 1000000 --out %s/tok.json --threads 1 %s",
             tt_bin("trident"), dir, p);
    job j;
    job_start(&j, dir, "bpe", cmd);
    sleep_s(0.6); /* counting takes a fraction of a second, the merges many seconds */
    kill(j.pid, SIGTERM);
    int rc = job_wait(&j, 10);
    char *log = job_log(&j);
    cr_expect_eq(rc, 143, "exit code %d: %s", rc, log);
    cr_expect(strstr(log, "SIGTERM: training stopped") != NULL, "%s", log);
    cr_expect(access(path_in(p, sizeof p, dir, "tok.json"), F_OK) != 0, "tok.json written");
    free(log);
    tt_rmrf(dir);
    free(dir);
}

/* ---- item 5: data under the job ---------------------------------------------- */

/* The read path itself: a mapped file truncated under it returns an error
 * naming the file (before: SIGBUS, a crash). */
Test(data_faults, reading_a_truncated_mapping_names_the_file) {
    char *dir = tt_mkdtemp(), p[4200], ep[4200];
    tt_write_llmc_random(path_in(p, sizeof p, dir, "t.bin"), 100000, 256, 1);
    tri_dataset ds;
    cr_assert_eq(tri_dataset_open(&ds, p, 256), 0);
    cr_assert_eq(truncate(p, 1024 + 2000), 0);
    int32_t buf[16];
    cr_expect_eq(tri_dataset_read(&ds, 10, 16, buf), 0, "the part still in the file reads");
    tt_capture cap;
    tt_capture_begin(&cap, path_in(ep, sizeof ep, dir, "err.txt"));
    int rc = tri_dataset_read(&ds, 50000, 16, buf);
    int rc2 = tri_dataset_read(&ds, 90000, 16, buf); /* and again: the handler is still armed */
    char *err = tt_capture_end(&cap);
    cr_expect_eq(rc, -1);
    cr_expect_eq(rc2, -1);
    cr_expect(strstr(err, "t.bin") && strstr(err, "truncated under the running job") && strstr(err, "3024 bytes now"),
              "%s", err);
    free(err);
    tri_dataset_close(&ds);
    tt_rmrf(dir);
    free(dir);
}

Test(data_faults, a_token_file_truncated_under_a_running_job_is_named, .timeout = 90) {
    char *dir = run_dir(400000, 4000), cmd[8192], p[4200];
    train_cmd(cmd, sizeof cmd, dir, "--set train.steps=1000000");
    job j;
    job_start(&j, dir, "train", cmd);
    int started = wait_for_text(j.log, "step     2/", 40);
    cr_assert(started, "no second step");
    cr_assert_eq(truncate(path_in(p, sizeof p, dir, "train.bin"), 1024 + 200), 0);
    int rc = job_wait(&j, 10);
    char *log = job_log(&j);
    const char *tail = log + (strlen(log) > 1500 ? strlen(log) - 1500 : 0);
    cr_expect_eq(rc, 1, "exit code %d (1007: died of SIGBUS): %s", rc, tail);
    cr_expect(strstr(log, "train.bin: truncated under the running job") != NULL, "%s", tail);
    free(log);
    tt_rmrf(dir);
    free(dir);
}

Test(data_faults, a_changed_data_file_is_refused_on_resume_unless_allowed, .timeout = 90) {
    char *dir = run_dir(20000, 4000), *out = NULL, p[4200];
    cr_assert_eq(run_train(dir, "--set train.steps=4 --stop-at-step 2", &out), 0, "%s", out);
    free(out);
    /* the checkpoint's size as the preflight predicts it, against the files */
    tri_config c;
    cr_assert_eq(tri_config_load(&c, TRI_SOURCE_DIR "/configs/tiny-test.json", 0, NULL), 0);
    struct stat m, o;
    cr_assert_eq(stat(path_in(p, sizeof p, dir, "ck/step_00000002/model.safetensors"), &m), 0);
    cr_assert_eq(stat(path_in(p, sizeof p, dir, "ck/step_00000002/optimizer.safetensors"), &o), 0);
    size_t real = (size_t)m.st_size + (size_t)o.st_size, est = tri_preflight_checkpoint_bytes(&c.model);
    cr_expect(est >= real && est <= real + ((size_t)1 << 20), "estimate %zu for %zu bytes", est, real);

    tt_write_llmc_random(path_in(p, sizeof p, dir, "train.bin"), 20000, 256, 77); /* same size, new tokens */
    int rc = run_train(dir, "--set train.steps=4 --resume", &out);
    expect_refused("changed train.bin", rc, out, "train.bin", "--allow-data-change");
    cr_expect(strstr(out, "fingerprint") != NULL, "%s", out);
    free(out);
    rc = run_train(dir, "--set train.steps=4 --resume --allow-data-change", &out);
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "note: --allow-data-change") && strstr(out, "resumed from"), "%s", out);
    free(out);
    tt_rmrf(dir);
    free(dir);
}

/* ---- item 12: eval --batches beyond one pass ---------------------------------- */

static double json_number(const char *out, const char *key) {
    const char *p = strstr(out, key);
    cr_assert(p, "no %s in %s", key, out);
    return strtod(p + strlen(key), NULL);
}

Test(data_faults, eval_batches_beyond_one_pass_are_capped, .timeout = 90) {
    char *dir = run_dir(20000, 1000), *out = NULL, cmd[8192];
    make_checkpoint(dir, "");
    /* 1000 tokens hold (1000 - 1) / 16 = 62 windows: 15 batches of 4 and a
     * last one of 2 */
    snprintf(cmd, sizeof cmd,
             "timeout 60 %s eval --ckpt %s/ck --data %s/val.bin --batch 4 --batches %%d --json --threads 1",
             tt_bin("trident"), dir, dir);
    char c100[8300], c16[8300];
    snprintf(c100, sizeof c100, cmd, 100);
    snprintf(c16, sizeof c16, cmd, 16);
    cr_assert_eq(tt_run(c100, &out), 0, "%s", out);
    cr_expect(strstr(out, "more than once") && strstr(out, "evaluating 16 batches"), "%s", out);
    cr_expect_eq(json_number(out, "\"batches\":"), 16, "%s", out);
    cr_expect_eq(json_number(out, "\"tokens\":"), 62 * 16, "every window once: %s", out);
    double capped = json_number(out, "\"loss\":");
    free(out);
    cr_assert_eq(tt_run(c16, &out), 0, "%s", out);
    cr_expect(strstr(out, "more than once") == NULL, "%s", out);
    cr_expect_eq(json_number(out, "\"loss\":"), capped, "the capped run is the one-pass run");
    free(out);
    /* fewer windows than --batch: one partial batch of all 62, the same mean
     * (up to float rounding: other batch shapes) */
    snprintf(cmd, sizeof cmd, "timeout 60 %s eval --ckpt %s/ck --data %s/val.bin --batch 100 --json --threads 1",
             tt_bin("trident"), dir, dir);
    cr_assert_eq(tt_run(cmd, &out), 0, "%s", out);
    cr_expect(strstr(out, "evaluating 1 batch "), "%s", out);
    cr_expect_eq(json_number(out, "\"batches\":"), 1, "%s", out);
    cr_expect_eq(json_number(out, "\"tokens\":"), 62 * 16, "%s", out);
    double one = json_number(out, "\"loss\":");
    cr_expect(fabs(one - capped) <= 1e-6 * fabs(capped), "--batch 100: %.6f, --batch 4: %.6f", one, capped);
    free(out);
    tt_rmrf(dir);
    free(dir);
}

/* the validation loss of a 1-step run with eval_batches = n */
static double val_loss(const char *dir, int n, char **out) {
    char extra[256];
    snprintf(extra, sizeof extra, "--set train.steps=1 --set train.eval_every=1 --set train.eval_batches=%d", n);
    char rm[4300];
    snprintf(rm, sizeof rm, "rm -rf %s/ck %s/log", dir, dir);
    cr_assert_eq(system(rm), 0);
    cr_assert_eq(run_train(dir, extra, out), 0, "%s", *out);
    char path[4200];
    char *m = tt_read(path_in(path, sizeof path, dir, "log/metrics.jsonl"));
    const char *p = m ? strstr(m, "\"val_loss\": ") : NULL;
    cr_assert(p, "no val_loss in metrics.jsonl: %s", *out);
    double v = strtod(p + 12, NULL);
    free(m);
    return v;
}

Test(data_faults, train_eval_batches_beyond_one_pass_are_capped, .timeout = 90) {
    /* val: 4000 tokens = 249 windows of 17, 124 micro-batches of 2 */
    char *dir = run_dir(20000, 4000), *out = NULL;
    double capped = val_loss(dir, 1000, &out);
    cr_expect(strstr(out, "train.eval_batches = 1000") && strstr(out, "each evaluation uses 124"), "%s", out);
    free(out);
    double one_pass = val_loss(dir, 124, &out);
    cr_expect(strstr(out, "each evaluation uses") == NULL, "%s", out);
    free(out);
    cr_expect_eq(capped, one_pass, "eval_batches 1000 gave %.6f, one pass %.6f", capped, one_pass);
    tt_rmrf(dir);
    free(dir);
}

/* ---- items 4, 6, 8: refused before step 1 ------------------------------------- */

Test(data_faults, a_model_that_does_not_fit_in_memory_is_refused_with_the_figures, .timeout = 90) {
    char *dir = run_dir(20000, 4000), *out = NULL, cmd[8192];
    /* 12 x 256^2 x 100000 = 79e9 parameters: over 1 TB with gradients and moments */
    int rc = run_train(dir, "--set model.n_layer=100000 --set model.n_embd=256 --set model.n_head=4", &out);
    expect_refused("train n_layer=100000", rc, out, "not enough memory", "--skip-memory-check");
    /* the need and what there is: MemAvailable, or (this test runs under
     * prlimit --as) the address-space limit when that is smaller */
    cr_expect(strstr(out, "TiB") && (strstr(out, "MemAvailable") || strstr(out, "address-space limit of")),
              "both figures: %s", out);
    free(out);
    snprintf(cmd, sizeof cmd,
             "timeout 60 " LIMITS
             " %s bench %s/configs/bench-gpt.json --steps 2 --threads 1 --set model.n_layer=100000",
             tt_bin("trident"), TRI_SOURCE_DIR);
    rc = tt_run(cmd, &out);
    expect_refused("bench n_layer=100000", rc, out, "not enough memory", "--skip-memory-check");
    free(out);
    tt_rmrf(dir);
    free(dir);
}

Test(data_faults, sizes_that_overflow_are_refused_naming_the_key, .timeout = 90) {
    char *dir = run_dir(20000, 4000), *out = NULL, cmd[8192];
    int rc = run_train(dir, "--set model.n_embd=1000000000", &out);
    expect_refused("train n_embd=1e9", rc, out, "model.n_embd", "overflows");
    free(out);
    /* the logits of 7 x 2^31 positions over 2e9 tokens (the attention's
     * T x T scores, which once overflowed here with 256 tokens, are gone:
     * that config is now refused for its memory) */
    snprintf(cmd, sizeof cmd,
             "timeout 60 " LIMITS
             " %s bench %s/configs/tiny-test.json --steps 2 --threads 1 --set model.seq_len=2147483582 "
             "--set train.micro_batch=7 --set train.global_batch=7 --set model.vocab_size=2000000000",
             tt_bin("trident"), TRI_SOURCE_DIR);
    rc = tt_run(cmd, &out);
    expect_refused("bench seq_len=2^31-66, batch 7", rc, out, "model.seq_len", "overflows");
    free(out);
    snprintf(cmd, sizeof cmd,
             "timeout 60 " LIMITS
             " %s bench %s/configs/tiny-test.json --steps 2 --threads 1 --set model.n_embd=1000000000",
             tt_bin("trident"), TRI_SOURCE_DIR);
    rc = tt_run(cmd, &out);
    expect_refused("bench n_embd=1e9", rc, out, "model.n_embd", "overflows");
    free(out);
    tt_rmrf(dir);
    free(dir);
}

Test(data_faults, a_checkpoint_that_does_not_fit_on_disk_is_refused, .timeout = 90) {
    char *dir = run_dir(20000, 4000), *out = NULL;
    /* 12 x 4096^2 x 100000 = 2e13 parameters: 240 TB a checkpoint. The memory
     * check is skipped, so the disk check is what stops it, before anything
     * of that size is allocated. */
    int rc = run_train(
        dir, "--skip-memory-check --set model.n_layer=100000 --set model.n_embd=4096 --set model.n_head=4", &out);
    expect_refused("checkpoint of 240 TB", rc, out, "checkpoint.dir", "free");
    free(out);
    tt_rmrf(dir);
    free(dir);
}

Test(data_faults, tokenizer_larger_than_the_vocabulary_and_missing_files_are_refused, .timeout = 90) {
    char *dir = run_dir(20000, 4000), *out = NULL, p[4200], extra[4600];
    /* 256 bytes + 43 merges + <|endoftext|> = 300 tokens */
    int32_t pairs[43][2];
    for (int i = 0; i < 43; i++) {
        pairs[i][0] = i;
        pairs[i][1] = i + 1;
    }
    tri_tokenizer tk;
    cr_assert_eq(tri_tokenizer_from_merges(&tk, &pairs[0][0], 43, 1), 0);
    cr_assert_eq(tri_tokenizer_vocab_size(&tk), 300);
    cr_assert_eq(tri_tokenizer_save(&tk, path_in(p, sizeof p, dir, "tok300.json")), 0);
    tri_tokenizer_free(&tk);
    snprintf(extra, sizeof extra, "--set data.tokenizer=%s", p);
    int rc = run_train(dir, extra, &out);
    expect_refused("300-token tokenizer, vocab 256", rc, out, "data.tokenizer", "300 tokens");
    cr_expect(strstr(out, "model.vocab_size = 256") != NULL, "%s", out);
    free(out);
    snprintf(extra, sizeof extra, "--set data.tokenizer=%s/missing.json", dir);
    rc = run_train(dir, extra, &out);
    expect_refused("missing tokenizer", rc, out, "missing.json", NULL);
    free(out);
    snprintf(extra, sizeof extra, "--set data.val=%s/nope.bin --set train.eval_every=0", dir);
    rc = run_train(dir, extra, &out);
    expect_refused("missing data.val, eval_every 0", rc, out, "nope.bin", NULL);
    free(out);
    tt_rmrf(dir);
    free(dir);
}

Test(data_faults, a_beta_that_rounds_to_one_in_fp32_is_refused, .timeout = 90) {
    char *dir = run_dir(20000, 4000), *out = NULL;
    int rc = run_train(dir, "--set train.beta2=0.9999999999", &out);
    expect_refused("beta2 = 1 - 1e-10", rc, out, "train.beta2", "rounds to 1");
    free(out);
    tt_rmrf(dir);
    free(dir);
}
