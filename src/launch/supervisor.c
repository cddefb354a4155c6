/* The rank wrapper, `tridentrun --rank-exec` (src/launch/launch.h): each
 * rank's log file, the console tee, the status file and the first-error scan. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/err.h"
#include "base/file.h"
#include "base/exit.h"
#include "base/exitrec.h"
#include "base/str.h"
#include "launch/launch.h"

static int rank_from_env(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        long v;
        if (tri_launch_parse_int(getenv(vars[i]), 0, INT_MAX, &v) == 0) return (int)v;
    }
    return -1;
}

/* Console line assembly: each line goes to the console in one write(),
 * prefix included, so that the lines of ranks sharing the console (through
 * mpirun) never interleave within a line. */
typedef struct line_buf {
    char buf[8192];
    size_t plen, n; /* prefix length; bytes in buf (prefix included) */
} line_buf;

static void con_init(line_buf *lb, const char *prefix) {
    lb->plen = strlen(prefix);
    if (lb->plen > 64) lb->plen = 64;
    memcpy(lb->buf, prefix, lb->plen);
    lb->n = lb->plen;
}

static void con_put(line_buf *lb, int con_fd, const char *data, size_t n) {
    for (size_t i = 0; i < n; i++) {
        lb->buf[lb->n++] = data[i];
        /* a full buffer leaves room for the newline con_flush may add */
        if (data[i] == '\n' || lb->n == sizeof lb->buf - 1) {
            (void)tri_write_all(con_fd, lb->buf, lb->n);
            lb->n = lb->plen;
        }
    }
}

static void con_flush(line_buf *lb, int con_fd) {
    if (lb->n == lb->plen) return;
    lb->buf[lb->n++] = '\n';
    (void)tri_write_all(con_fd, lb->buf, lb->n);
    lb->n = lb->plen;
}

void tri_rank_status_write(const char *dir, int rank, int state, double started, int value, double first_error) {
    char *path = tri_xprintf("%s/rank_%d.status", dir, rank);
    char *tmp = tri_xprintf("%s/.rank_%d.status.tmp", dir, rank);
    FILE *f = fopen(tmp, "w");
    if (f != NULL) {
        if (state == TRI_RANK_RUNNING) {
            char host[256] = "?";
            if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "?");
            host[sizeof host - 1] = '\0';
            fprintf(f, "%.6f running %ld %s\n", started, (long)getpid(), host);
        } else {
            fprintf(f, "%.6f %s %d\n", tri_wall_s(), state == TRI_RANK_SIGNAL ? "signal" : "exit", value);
        }
        if (first_error > 0) fprintf(f, "%.6f error\n", first_error);
        if (fclose(f) == 0) (void)rename(tmp, path);
    }
    free(tmp);
    free(path);
}

char *tri_rank_exit_record_path(const char *dir, int rank) { return tri_xprintf("%s/rank_%d.exit", dir, rank); }

void tri_rank_status_read(const char *dir, int rank, tri_rank_status *st) {
    memset(st, 0, sizeof *st);
    char *path = tri_rank_exit_record_path(dir, rank);
    (void)tri_exit_record_read(path, &st->rec); /* rec.code -1: none */
    free(path);
    path = tri_xprintf("%s/rank_%d.status", dir, rank);
    FILE *f = fopen(path, "r");
    free(path);
    if (f == NULL) return;
    char line[512];
    for (int n = 0; fgets(line, sizeof line, f) != NULL; n++) {
        double t;
        char what[16];
        long v = 0;
        int k = sscanf(line, "%lf %15s %ld %255s", &t, what, &v, st->host);
        if (k < 2) continue;
        if (n > 0) {
            if (!strcmp(what, "error")) st->first_error = t;
            continue;
        }
        st->t = t;
        st->value = v;
        if (!strcmp(what, "running") && k == 4)
            st->state = TRI_RANK_RUNNING;
        else if (!strcmp(what, "exit") && k >= 3)
            st->state = TRI_RANK_EXIT;
        else if (!strcmp(what, "signal") && k >= 3)
            st->state = TRI_RANK_SIGNAL;
    }
    fclose(f);
}

static int is_error_head(const char *h, size_t n) {
    static const char *const err_prefix[] = {"trident: ", "tridentrun: "};
    static const char *const not_errors[] = {"trident: note:", "trident: warning:"}; /* base/log.h */
    for (size_t i = 0; i < sizeof not_errors / sizeof not_errors[0]; i++) {
        size_t l = strlen(not_errors[i]);
        if (n >= l && !strncmp(h, not_errors[i], l)) return 0;
    }
    for (size_t i = 0; i < sizeof err_prefix / sizeof err_prefix[0]; i++) {
        size_t l = strlen(err_prefix[i]);
        if (n >= l && !strncmp(h, err_prefix[i], l)) return 1;
    }
    return 0;
}

int tri_err_scan_put(tri_err_scan *e, const char *data, size_t n) {
    int found = 0;
    for (size_t i = 0; i < n; i++) {
        if (data[i] == '\n') {
            if (!e->decided && is_error_head(e->head, e->n)) found = 1;
            e->n = 0;
            e->decided = 0;
            continue;
        }
        if (e->decided) continue;
        e->head[e->n++] = data[i];
        if (e->n == sizeof e->head) {
            found |= is_error_head(e->head, e->n);
            e->decided = 1;
        }
    }
    return found;
}

/* A running rank: its command, its log, where its output goes. */
typedef struct rank_run {
    const tri_rank_exec_opts *o;
    int rank, log_fd, console;
    double started, first_error; /* unix times; first_error 0: none yet */
    line_buf lb[2];              /* one console line per stream, so their lines never mix */
    tri_err_scan es;
    char buf[65536];
} rank_run;

/* Starts the command with stdout and stderr on the pipes' write ends; its
 * pid, or -1 after one line. */
static pid_t start_command(const rank_run *r, int po[2], int pe[2]) {
    pid_t parent = getpid();
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        tri_error_rank(r->rank, "fork: %s", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(TRI_EXIT_FAILURE);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        signal(SIGUSR1, SIG_DFL);
        signal(SIGPIPE, SIG_DFL);
        if (dup2(po[1], STDOUT_FILENO) < 0 || dup2(pe[1], STDERR_FILENO) < 0) _exit(TRI_EXIT_EXEC);
        execvp(r->o->cmd[0], r->o->cmd);
        tri_error_rank(r->rank, "cannot run '%s': %s", r->o->cmd[0], strerror(errno));
        _exit(TRI_EXIT_EXEC);
    }
    return pid;
}

/* Copies the command's output (po: stdout, pe: stderr, read ends) to the log
 * and the console until EOF on both; once the command has exited, stops at
 * the first quiet 200 ms (a leftover grandchild may keep a pipe open).
 * Returns the command's wait status. */
static int relay(rank_run *r, pid_t pid, int out_fd, int err_fd) {
    struct pollfd pfd[2] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
    int open_fds = 2, st = 0, done = 0;
    while (open_fds > 0) {
        int n = poll(pfd, 2, done ? 200 : 100);
        if (n < 0 && errno != EINTR) break;
        if (n == 0 && done) break;
        for (int k = 0; k < 2 && n > 0; k++) {
            if (pfd[k].fd < 0 || !(pfd[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            ssize_t got = read(pfd[k].fd, r->buf, sizeof r->buf);
            if (got < 0 && errno == EINTR) continue;
            if (got <= 0) {
                close(pfd[k].fd);
                pfd[k].fd = -1;
                open_fds--;
                continue;
            }
            (void)tri_write_all(r->log_fd, r->buf, (size_t)got);
            if (r->console) con_put(&r->lb[k], STDOUT_FILENO, r->buf, (size_t)got);
            if (k == 1 && r->first_error == 0 && tri_err_scan_put(&r->es, r->buf, (size_t)got)) {
                r->first_error = tri_wall_s();
                tri_rank_status_write(r->o->log_dir, r->rank, TRI_RANK_RUNNING, r->started, -1, r->first_error);
            }
        }
        if (!done && waitpid(pid, &st, WNOHANG) == pid) done = 1;
    }
    if (r->console) {
        con_flush(&r->lb[0], STDOUT_FILENO);
        con_flush(&r->lb[1], STDOUT_FILENO);
    }
    for (int k = 0; k < 2; k++)
        if (pfd[k].fd >= 0) close(pfd[k].fd);
    while (!done) {
        if (waitpid(pid, &st, 0) == pid)
            done = 1;
        else if (errno != EINTR)
            break;
    }
    return st;
}

/* Ends this process by signal sig, as the command ended, without a core
 * file of the wrapper; returns 128 + sig if it did not. */
static int end_by_signal(int sig) {
    struct rlimit rl = {0, 0};
    (void)setrlimit(RLIMIT_CORE, &rl);
    signal(sig, SIG_DFL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    sigprocmask(SIG_UNBLOCK, &set, NULL);
    raise(sig);
    return tri_exit_signal(sig);
}

int tri_launch_rank_exec(const tri_rank_exec_opts *o) {
    int rank = rank_from_env();
    if (rank < 0) {
        tri_error("--rank-exec: no rank in the environment (OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK, SLURM_PROCID)");
        return TRI_EXIT_BAD_INPUT;
    }
    char *path = tri_xprintf("%s/rank_%d.log", o->log_dir, rank);
    int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (o->attempt == 0 ? O_TRUNC : O_APPEND);
    int log_fd = open(path, flags, 0644);
    if (log_fd < 0) {
        tri_error_rank(rank, "cannot open %s: %s", path, strerror(errno));
        free(path);
        return TRI_EXIT_BAD_INPUT;
    }
    free(path);
    if (o->attempt > 0) {
        char *hdr = tri_xprintf("----- tridentrun: attempt %d -----\n", o->attempt + 1);
        (void)tri_write_all(log_fd, hdr, strlen(hdr));
        free(hdr);
    }
    rank_run *r = tri_xcalloc(1, sizeof *r);
    r->o = o;
    r->rank = rank;
    r->log_fd = log_fd;
    r->console = o->tee || rank == 0;
    r->started = tri_wall_s();
    tri_rank_status_write(o->log_dir, rank, TRI_RANK_RUNNING, r->started, -1, 0);

    int po[2] = {-1, -1}, pe[2] = {-1, -1}; /* the command's stdout, stderr */
    if (pipe2(po, O_CLOEXEC) != 0 || pipe2(pe, O_CLOEXEC) != 0) {
        tri_error_rank(rank, "pipe: %s", strerror(errno));
        free(r);
        return TRI_EXIT_BAD_INPUT;
    }
    /* where the command records its own end (base/exitrec.h); a record of an
     * earlier attempt is no news */
    char *rec = tri_rank_exit_record_path(o->log_dir, rank);
    (void)unlink(rec);
    setenv(TRI_EXIT_RECORD_ENV, rec, 1);
    free(rec);
    tri_launch_signals_install(0);
    pid_t pid = start_command(r, po, pe);
    if (pid < 0) {
        free(r);
        return TRI_EXIT_BAD_INPUT;
    }
    tri_launch_signals_child(pid);
    close(po[1]);
    close(pe[1]);

    char prefix[32] = "";
    if (o->tee) snprintf(prefix, sizeof prefix, "[rank %d] ", rank);
    con_init(&r->lb[0], prefix);
    con_init(&r->lb[1], prefix);
    int st = relay(r, pid, po[0], pe[0]);
    tri_launch_signals_child(0);
    close(log_fd);
    double first_error = r->first_error, started = r->started;
    free(r);
    if (WIFSIGNALED(st)) {
        int sig = WTERMSIG(st);
        tri_rank_status_write(o->log_dir, rank, TRI_RANK_SIGNAL, started, sig, first_error);
        return end_by_signal(sig);
    }
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : TRI_EXIT_FAILURE;
    tri_rank_status_write(o->log_dir, rank, TRI_RANK_EXIT, started, code, first_error);
    return code;
}
