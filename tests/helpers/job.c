/* A job under test (tests/helpers/job.h). */
#include "job.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

double tt_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The first child of pid (from /proc, whose files have no size: read as a
 * stream), or 0. */
static pid_t child_of(pid_t pid) {
    char path[64], buf[64] = "";
    snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)pid, (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL) return 0;
    if (!fgets(buf, sizeof buf, f)) buf[0] = '\0';
    fclose(f);
    return (pid_t)atoi(buf);
}

/* Notes every pid of the job that can be found now. */
void tt_job_scan(tt_job *j) {
    if (!j->mpirun) j->mpirun = child_of(j->launcher);
    for (int r = 0; r < j->world; r++) {
        char path[400];
        snprintf(path, sizeof path, "%s/ranks/rank_%d.status", j->dir, r);
        char *s = tt_read(path);
        double t;
        char what[16];
        int pid;
        if (s && !j->wrapper[r] && sscanf(s, "%lf %15s %d", &t, what, &pid) == 3 && !strcmp(what, "running"))
            j->wrapper[r] = pid;
        free(s);
        if (j->wrapper[r] && !j->cmd[r]) j->cmd[r] = child_of(j->wrapper[r]);
    }
}

/* Is pid gone (or a zombie)? */
static int gone(pid_t pid) {
    if (pid <= 0 || kill(pid, 0) != 0) return 1;
    char path[64], buf[512] = "";
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL) return 1;
    if (!fgets(buf, sizeof buf, f)) buf[0] = '\0';
    fclose(f);
    char *rp = strrchr(buf, ')');
    return rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X');
}

/* Continues and kills every process of the job (best effort, by pid and
 * process group: ranks lead their own groups under mpirun). */
void tt_job_kill(tt_job *j) {
    pid_t all[2 + 2 * TT_JOB_MAX_RANKS];
    int n = 0;
    all[n++] = j->launcher;
    all[n++] = j->mpirun;
    for (int r = 0; r < j->world; r++) {
        all[n++] = j->wrapper[r];
        all[n++] = j->cmd[r];
    }
    for (int i = 0; i < n; i++)
        if (all[i] > 1 && !gone(all[i])) {
            kill(all[i], SIGCONT);
            kill(-all[i], SIGKILL);
            kill(all[i], SIGKILL);
        }
    int st;
    waitpid(j->launcher, &st, WNOHANG);
}

/* Starts argv (tridentrun ...) in dir, in its own process group, output to
 * dir/out.txt, each process capped at 4 GiB of address space and 60 s of CPU. */
void tt_job_start(tt_job *j, const char *dir, int world, char *const argv[]) {
    memset(j, 0, sizeof *j);
    snprintf(j->dir, sizeof j->dir, "%s", dir);
    j->world = world;
    char out[400];
    snprintf(out, sizeof out, "%s/out.txt", dir);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_geq(pid, 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        setpgid(0, 0);
        struct rlimit cpu = {60, 60};
        tt_limit_as((rlim_t)4 << 30);
        setrlimit(RLIMIT_CPU, &cpu);
        int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int in = open("/dev/null", O_RDONLY);
        if (fd < 0 || in < 0 || chdir(dir) != 0) _exit(126);
        dup2(in, 0);
        dup2(fd, 1);
        dup2(fd, 2);
        unsetenv("OMP_NUM_THREADS");
        unsetenv("OMP_WAIT_POLICY");
        execv(argv[0], argv);
        _exit(127);
    }
    setpgid(pid, pid);
    j->launcher = pid;
}

/* Waits until every rank's command runs and `ready` (a file under dir, may
 * be NULL) contains `needle`; at most `limit` seconds. */
void tt_job_wait_running(tt_job *j, const char *ready, const char *needle, double limit) {
    double t0 = tt_now_s();
    for (;;) {
        tt_job_scan(j);
        int all = j->mpirun != 0;
        for (int r = 0; r < j->world; r++) all &= j->cmd[r] != 0;
        if (all && ready) {
            char path[400];
            snprintf(path, sizeof path, "%s/%s", j->dir, ready);
            char *s = tt_read(path);
            all = s && strstr(s, needle);
            free(s);
        }
        if (all) return;
        int st;
        TT_JOB_ASSERT(j, waitpid(j->launcher, &st, WNOHANG) == 0, "the job ended before it was ready");
        TT_JOB_ASSERT(j, tt_now_s() - t0 < limit, "the job was not ready within %.0f s", limit);
        usleep(20000);
    }
}

/* Waits at most `limit` seconds for tridentrun to end; returns its exit code
 * (128 + signal). On overrun the job is killed and the test fails. */
int tt_job_wait(tt_job *j, double limit, const char *what) {
    double t0 = tt_now_s();
    int st = 0;
    for (;;) {
        tt_job_scan(j);
        pid_t w = waitpid(j->launcher, &st, WNOHANG);
        if (w == j->launcher) break;
        TT_JOB_ASSERT(j, tt_now_s() - t0 < limit, "%s: tridentrun still runs after %.0f s", what, limit);
        usleep(20000);
    }
    j->t_end = tt_now_s();
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* After the job ended: every process of it must be gone within a few
 * seconds (then everything is killed anyway). */
void tt_job_expect_all_gone(tt_job *j) {
    double t0 = tt_now_s();
    for (;;) {
        int alive = !gone(j->mpirun);
        for (int r = 0; r < j->world; r++) alive |= !gone(j->wrapper[r]) || !gone(j->cmd[r]);
        if (!alive) return;
        TT_JOB_ASSERT(j, tt_now_s() - t0 < 5.0, "processes of the job outlived it (mpirun %d, rank 1 %d/%d)",
                      (int)j->mpirun, (int)j->wrapper[1], (int)j->cmd[1]);
        usleep(50000);
    }
}

char *tt_job_output(const tt_job *j) {
    char path[400];
    snprintf(path, sizeof path, "%s/out.txt", j->dir);
    char *s = tt_read(path);
    return s ? s : strdup("");
}

int tt_job_stop_rank(tt_job *j, int rank, double limit, const char *what, double *took) {
    TT_JOB_ASSERT(j, kill(j->cmd[rank], SIGSTOP) == 0, "SIGSTOP: %s", strerror(errno));
    double t0 = tt_now_s();
    int rc = tt_job_wait(j, limit, what);
    *took = j->t_end - t0;
    kill(j->cmd[rank], SIGCONT);
    return rc;
}

int tt_job_signal(tt_job *j, int sig, double limit, const char *what, double *took) {
    double t0 = tt_now_s();
    TT_JOB_ASSERT(j, kill(j->launcher, sig) == 0, "signal %d: %s", sig, strerror(errno));
    int rc = tt_job_wait(j, limit, what);
    *took = j->t_end - t0;
    return rc;
}

char *tt_job_line(tt_job *j, char *out, const char *head, const char *what) {
    char *line = strstr(out, head);
    TT_JOB_ASSERT(j, line != NULL, "no %s:\n%s", what, out);
    char *eol = strchr(line, '\n');
    if (eol) *eol = '\0';
    return line;
}

void tt_job_end(tt_job *j, char *dir, int expect_gone) {
    if (expect_gone) tt_job_expect_all_gone(j);
    tt_job_kill(j);
    tt_rmrf(dir);
    free(dir);
}

const char tt_fake_mpirun[] = "#!/bin/sh\n"
                              "np=$2\n"
                              "shift 2\n"
                              "while [ \"$#\" -gt 1 ] && [ \"$2\" != \"--rank-exec\" ]; do shift; done\n"
                              "r=0\n"
                              "while [ $r -lt $np ]; do OMPI_COMM_WORLD_RANK=$r \"$@\" & r=$((r+1)); done\n"
                              "wait\n"
                              "[ -n \"$FAKE_REPORT\" ] && printf '%b' \"$FAKE_REPORT\" >&2\n"
                              "exit ${FAKE_EXIT:-1}\n";

void tt_write_exec(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "%s", path);
    fputs(text, f);
    cr_assert_eq(fclose(f), 0);
    cr_assert_eq(chmod(path, 0755), 0);
}

void tt_job_start_fake(tt_job *j, const char *dir, int world, const char *report, const char *code,
                       const char *script) {
    char fake[300], np[16];
    snprintf(fake, sizeof fake, "%s/fake_mpirun", dir);
    tt_write_exec(fake, tt_fake_mpirun);
    setenv("FAKE_REPORT", report, 1);
    setenv("FAKE_EXIT", code, 1);
    snprintf(np, sizeof np, "%d", world);
    char *argv[] = {(char *)tt_bin("tridentrun"),
                    "--mpirun",
                    fake,
                    "--log-dir",
                    "ranks",
                    "--nproc-per-node",
                    np,
                    "--",
                    "/bin/sh",
                    "-c",
                    (char *)script,
                    NULL};
    tt_job_start(j, dir, world, argv);
}
