/* The mpirun runner (src/launch/launch.h): the mpirun command, running it
 * with signal forwarding and the grace/kill escalation, reading its failure
 * report and the ranks' status files for the rank that failed first, and
 * the restarts. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/err.h"
#include "base/file.h"
#include "base/fs.h"
#include "base/json.h"
#include "base/exit.h"
#include "base/log.h"
#include "base/str.h"
#include "config/config.h"
#include "launch/launch.h"

#define TAIL_LINES 20

/* After the grace period, how long mpirun gets to end the job before it is
 * killed as well. */
#define MPIRUN_KILL_WAIT_S 10.0

/* ------------------------------------------------------------------------ */
/* The mpirun command                                                       */

static void av_push(tri_launch_argv *a, char *owned) {
    if (a->n + 2 > a->cap) {
        int cap = a->cap ? 2 * a->cap : 64;
        char **v = tri_xcalloc((size_t)cap, sizeof *v);
        if (a->n) memcpy(v, a->v, (size_t)a->n * sizeof *v);
        free(a->v);
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = owned;
    a->v[a->n] = NULL;
}

void tri_launch_argv_free(tri_launch_argv *a) {
    if (a == NULL) return;
    for (int i = 0; i < a->n; i++) free(a->v[i]);
    free(a->v);
    memset(a, 0, sizeof *a);
}

static int has_resume(const tri_launch_opts *o) {
    for (int i = 1; i < o->cmd_argc; i++)
        if (!strcmp(o->cmd[i], "--resume")) return 1;
    return 0;
}

void tri_launch_command_build(tri_launch_argv *a, const tri_launch_opts *o, const tri_launch_plan *p, int attempt) {
    memset(a, 0, sizeof *a);
    av_push(a, tri_xstrdup(o->mpirun));
    av_push(a, tri_xstrdup("-np"));
    av_push(a, tri_xprintf("%d", p->world));
    if (o->hostfile) {
        /* explicit slots per host (the ranks placed there, in order): mpirun's
         * by-slot mapping then puts exactly the planned ranks on each host */
        size_t len = 1;
        for (int h = 0; h < p->nhosts; h++) len += strlen(p->hosts[h]) + 16;
        char *hl = tri_xcalloc(len, 1);
        size_t at = 0;
        for (int h = 0; h < p->nhosts; h++)
            if (p->ranks[h] > 0)
                at += (size_t)snprintf(hl + at, len - at, "%s%s:%d", at ? "," : "", p->hosts[h], p->ranks[h]);
        av_push(a, tri_xstrdup("-H"));
        av_push(a, hl);
    }
    if (p->as_root) av_push(a, tri_xstrdup("--allow-run-as-root"));
    if (p->oversub) av_push(a, tri_xstrdup("--oversubscribe"));
    if (p->bind_none) {
        av_push(a, tri_xstrdup("--bind-to"));
        av_push(a, tri_xstrdup("none"));
    }
    av_push(a, tri_xstrdup("-x"));
    av_push(a, p->user_threads ? tri_xstrdup("OMP_NUM_THREADS") : tri_xprintf("OMP_NUM_THREADS=%d", p->threads));
    av_push(a, tri_xstrdup("-x"));
    av_push(a, tri_xstrdup(p->user_wait_policy ? "OMP_WAIT_POLICY" : "OMP_WAIT_POLICY=PASSIVE"));
    for (int i = 0; i < o->n_extra; i++) av_push(a, tri_xstrdup(o->extra[i]));
    av_push(a, tri_xstrdup(p->self));
    av_push(a, tri_xstrdup("--rank-exec"));
    av_push(a, tri_xstrdup("--log-dir"));
    av_push(a, tri_xstrdup(p->log_dir));
    if (o->tee) av_push(a, tri_xstrdup("--tee"));
    if (attempt > 0) {
        av_push(a, tri_xstrdup("--attempt"));
        av_push(a, tri_xprintf("%d", attempt));
    }
    av_push(a, tri_xstrdup("--"));
    av_push(a, tri_xstrdup(p->cmd0));
    for (int i = 1; i < o->cmd_argc; i++) av_push(a, tri_xstrdup(o->cmd[i]));
    if (attempt > 0 && !has_resume(o)) av_push(a, tri_xstrdup("--resume"));
    if (p->dp_override > 0) { /* the last --set wins */
        av_push(a, tri_xstrdup("--set"));
        av_push(a, tri_xprintf("parallel.dp=%d", p->dp_override));
    }
}

/* ------------------------------------------------------------------------ */
/* Running mpirun                                                           */

typedef struct run_result {
    int exited, code, signo; /* mpirun's own status                      */
    int exec_errno;          /* mpirun could not be started              */
    char *report;            /* mpirun's stderr (malloc'd, NUL-ended)    */
    size_t report_len;
    int killed; /* the ranks outlasted --grace-s: SIGKILLed */
    /* the fast teardown (watch_ranks): a rank died and the job was killed
     * without waiting for mpirun's own teardown */
    int dead_rank;            /* -1: none seen                             */
    double t_died, t_noticed; /* when it died (its status), when seen      */
    double t_down;            /* when mpirun had ended (unix time)         */
} run_result;

/* SIGKILLs every rank on this host whose command still runs: the wrapper
 * leads its rank's process group (mpirun makes one per rank), so the
 * command and anything it started go too. Returns how many. */
static int kill_local_ranks(const tri_launch_plan *p) {
    char me[256] = "";
    if (gethostname(me, sizeof me - 1) != 0) return 0;
    int n = 0;
    for (int r = 0; r < p->world; r++) {
        tri_rank_status st;
        tri_rank_status_read(p->log_dir, r, &st);
        if (st.state != TRI_RANK_RUNNING || st.value <= 1 || strcmp(st.host, me) != 0) continue;
        if (kill(-(pid_t)st.value, SIGKILL) == 0 || kill((pid_t)st.value, SIGKILL) == 0) n++;
    }
    return n;
}

/* Whether st says the rank died in a way that the job cannot survive and
 * that leaves nothing to wait for: killed by a signal (SIGKILL, a segfault,
 * the OOM killer), or exited with TRI_EXIT_INJECTED or TRI_EXIT_TIMEOUT,
 * whose one line was written before the exit. Refusals (exit 2), runtime
 * failures (exit 1, which ranks often reach together, the one that says what
 * failed not always first) and graceful stops (128+S after a save) are left
 * to mpirun's own teardown, which gives the other ranks time to write. */
static int died_hard(const tri_rank_status *st) {
    if (st->state == TRI_RANK_SIGNAL) return 1;
    return st->state == TRI_RANK_EXIT && (st->value == TRI_EXIT_INJECTED || st->value == TRI_EXIT_TIMEOUT);
}

/* The fast teardown's watch over the status files: Open MPI waits
 * odls_base_sigkill_timeout (2 s by default) between the SIGTERM and the
 * SIGKILL of the surviving ranks, who are stuck in a collective with the dead
 * one and cannot leave it. Each wrapper renames its status file into the log
 * directory when its command ends, which changes the directory's mtime: the
 * files are read only then (and the local wrappers' pids checked, for a
 * wrapper killed itself). Returns the dead rank (*st filled) or -1. */
typedef struct rank_watch {
    struct timespec mtime; /* the log directory's, at the last read */
    double next_pid_check;
} rank_watch;

static int watch_ranks(const tri_launch_plan *p, rank_watch *w, double now, tri_rank_status *out) {
    struct stat sb;
    int changed =
        stat(p->log_dir, &sb) == 0 && (sb.st_mtim.tv_sec != w->mtime.tv_sec || sb.st_mtim.tv_nsec != w->mtime.tv_nsec);
    int check_pids = now >= w->next_pid_check;
    if (!changed && !check_pids) return -1;
    if (changed) w->mtime = sb.st_mtim;
    if (check_pids) w->next_pid_check = now + 0.1;
    char me[256] = "";
    if (gethostname(me, sizeof me - 1) != 0) me[0] = '\0';
    for (int r = 0; r < p->world; r++) {
        tri_rank_status st;
        tri_rank_status_read(p->log_dir, r, &st);
        if (died_hard(&st)) {
            *out = st;
            return r;
        }
        if (check_pids && st.state == TRI_RANK_RUNNING && st.value > 1 && !strcmp(st.host, me) &&
            kill((pid_t)st.value, 0) != 0 && errno == ESRCH) {
            /* the wrapper may have recorded its end and exited between the
             * read above and the check (a clean end read as a killed
             * wrapper tore a finished job down): read the status again */
            tri_rank_status_read(p->log_dir, r, &st);
            if (st.state != TRI_RANK_RUNNING) {
                if (died_hard(&st)) {
                    *out = st;
                    return r;
                }
                continue;
            }
            *out = st; /* the wrapper itself is gone (killed): say SIGKILL */
            out->state = TRI_RANK_SIGNAL;
            out->value = SIGKILL;
            out->t = tri_wall_s();
            return r;
        }
    }
    return -1;
}

/* Whether every rank runs on this host (no host file): the fast teardown then
 * needs nothing from mpirun; otherwise mpirun is told to end the ranks
 * elsewhere. */
static int all_ranks_local(const tri_launch_plan *p) { return p->nhosts == 1 && !strcmp(p->hosts[0], "localhost"); }

/* Milliseconds from now to t for poll(), at least 0, at most cap. */
static int ms_until(double t, double now, int cap) {
    double ms = (t - now) * 1e3 + 1;
    if (ms < 0) return 0;
    return ms > cap ? cap : (int)ms;
}

static void append_report(run_result *r, const char *buf, size_t n) {
    /* keep the last 1 MiB: the failure report comes at the end */
    const size_t cap = (size_t)1 << 20;
    if (r->report_len + n > cap) {
        size_t drop = r->report_len + n - cap;
        if (drop > r->report_len) drop = r->report_len;
        memmove(r->report, r->report + drop, r->report_len - drop);
        r->report_len -= drop;
        if (n > cap) {
            buf += n - cap;
            n = cap;
        }
    }
    char *s = tri_xcalloc(r->report_len + n + 1, 1);
    if (r->report_len) memcpy(s, r->report, r->report_len);
    memcpy(s + r->report_len, buf, n);
    free(r->report);
    r->report = s;
    r->report_len += n;
    r->report[r->report_len] = '\0';
}

static void run_result_free(run_result *r) {
    if (r == NULL) return;
    free(r->report);
    memset(r, 0, sizeof *r);
}

/* The mpirun child: its own process group (a terminal's Ctrl-C reaches
 * mpirun once, via us), SIGTERM when we die, stdin from /dev/null, stdout
 * and stderr on the pipes; exec's errno goes back through ex. */
static _Noreturn void exec_mpirun(const tri_launch_argv *cmd, pid_t parent, int out[2], int err[2], int ex[2]) {
    (void)setpgid(0, 0);
    (void)prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(TRI_EXIT_FAILURE);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) {
        dup2(devnull, STDIN_FILENO);
        close(devnull);
    }
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    close(out[0]);
    close(out[1]);
    close(err[0]);
    close(err[1]);
    close(ex[0]);
    execvp(cmd->v[0], cmd->v);
    int e = errno;
    (void)tri_write_all(ex[1], (const char *)&e, sizeof e);
    _exit(TRI_EXIT_EXEC);
}

/* Runs mpirun, relaying its stdout to ours and its stderr to ours and to
 * mpirun_log (may be -1). Once a stop request (SIGINT/SIGTERM/SIGHUP) has
 * come, the ranks get grace_s seconds to save and stop; then every rank on
 * this host is SIGKILLed and mpirun told to stop (SIGTERM: it takes down the
 * ranks on other hosts), and MPIRUN_KILL_WAIT_S later mpirun itself is
 * SIGKILLed. Returns 0 when it ran (status in *r), -1 when it could not be
 * started (r->exec_errno). */
static int run_mpirun(const tri_launch_argv *cmd, int mpirun_log, const tri_launch_plan *p, double grace_s,
                      run_result *r) {
    memset(r, 0, sizeof *r);
    int out[2], err[2], ex[2];
    if (pipe(out) != 0 || pipe(err) != 0 || pipe2(ex, O_CLOEXEC) != 0) {
        tri_error("pipe: %s", strerror(errno));
        r->exec_errno = errno;
        return -1;
    }
    pid_t parent = getpid();
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        r->exec_errno = errno;
        tri_error("fork: %s", strerror(errno));
        return -1;
    }
    if (pid == 0) exec_mpirun(cmd, parent, out, err, ex);
    tri_launch_signals_child(pid);
    close(out[1]);
    close(err[1]);
    close(ex[1]);
    int e = 0;
    ssize_t got;
    do got = read(ex[0], &e, sizeof e);
    while (got < 0 && errno == EINTR);
    close(ex[0]);
    if (got == (ssize_t)sizeof e) r->exec_errno = e;

    struct pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
    int open_fds = 2;
    char buf[65536];
    double stop_deadline = -1, kill_deadline = -1;
    int mpirun_killed = 0;
    r->dead_rank = -1;
    rank_watch watch = {{0, 0}, 0};
    while (open_fds > 0) {
        /* wake at least twice a second: a signal that lands just before
         * poll() is noticed without waiting for output; every 10 ms while
         * the ranks are watched for a death */
        int watching = tri_launch_stop_requests() == 0 && r->dead_rank < 0;
        int timeout_ms = watching ? 10 : 500;
        double now = tri_now_s();
        tri_rank_status dead;
        if (watching && (r->dead_rank = watch_ranks(p, &watch, tri_wall_s(), &dead)) >= 0) {
            /* a rank died: end the job now (every local rank's process group
             * SIGKILLed; mpirun sees them end and stops) */
            r->t_died = dead.t;
            r->t_noticed = tri_wall_s();
            kill_local_ranks(p);
            if (!all_ranks_local(p)) kill(pid, SIGTERM);
        }
        if (tri_launch_stop_requests() > 0 && stop_deadline < 0) stop_deadline = now + grace_s;
        if (stop_deadline >= 0 && !r->killed)
            timeout_ms = ms_until(stop_deadline, now, 500);
        else if (r->killed && !mpirun_killed)
            timeout_ms = ms_until(kill_deadline, now, 500);
        int n = poll(fds, 2, timeout_ms);
        now = tri_now_s();
        if (stop_deadline >= 0 && !r->killed && now >= stop_deadline) {
            tri_error("the ranks did not stop within --grace-s %g s of the stop request; killing them (SIGKILL)",
                      grace_s);
            r->killed = 1;
            kill_local_ranks(p);
            kill(pid, SIGTERM);
            kill_deadline = now + MPIRUN_KILL_WAIT_S;
        } else if (r->killed && !mpirun_killed && now >= kill_deadline) {
            tri_error("mpirun did not end %g s after that; killing it", MPIRUN_KILL_WAIT_S);
            kill(-pid, SIGKILL);
            mpirun_killed = 1;
        }
        if (n < 0) {
            if (errno == EINTR) continue;
            break;
        }
        for (int i = 0; i < 2; i++) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            ssize_t k = read(fds[i].fd, buf, sizeof buf);
            if (k < 0 && errno == EINTR) continue;
            if (k <= 0) {
                close(fds[i].fd);
                fds[i].fd = -1;
                open_fds--;
                continue;
            }
            if (i == 0) {
                (void)tri_write_all(STDOUT_FILENO, buf, (size_t)k);
            } else {
                (void)tri_write_all(STDERR_FILENO, buf, (size_t)k);
                if (mpirun_log >= 0) (void)tri_write_all(mpirun_log, buf, (size_t)k);
                append_report(r, buf, (size_t)k);
            }
        }
    }
    for (int i = 0; i < 2; i++)
        if (fds[i].fd >= 0) close(fds[i].fd);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0) {
        if (errno != EINTR) {
            st = 0;
            break;
        }
    }
    tri_launch_signals_child(0);
    r->t_down = tri_wall_s();
    if (WIFEXITED(st)) {
        r->exited = 1;
        r->code = WEXITSTATUS(st);
    } else if (WIFSIGNALED(st)) {
        r->signo = WTERMSIG(st);
    }
    return r->exec_errno ? -1 : 0;
}

/* ------------------------------------------------------------------------ */
/* Which rank failed first                                                  */

int tri_launch_report_parse(const char *report, tri_launch_failure *f) {
    f->rank = -1;
    f->code = -1;
    f->signo = -1;
    f->improper = 0;
    f->torn = 0;
    f->recorded = -1;
    f->reason[0] = '\0';
    if (report == NULL) return 0;
    /* collapse every run of whitespace: mpirun wraps its messages */
    size_t n = strlen(report);
    char *t = tri_xcalloc(n + 1, 1);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (isspace((unsigned char)report[i])) {
            if (k > 0 && t[k - 1] != ' ') t[k++] = ' ';
        } else {
            t[k++] = report[i];
        }
    }
    t[k] = '\0';
    int found = 0;
    const char *s;
    if ((s = strstr(t, "MPI_ABORT was invoked on rank ")) != NULL &&
        sscanf(s, "MPI_ABORT was invoked on rank %d in communicator %*s with errorcode %d", &f->rank, &f->code) == 2) {
        found = 1;
    } else if ((s = strstr(t, "process rank ")) != NULL && strstr(s, "exited on signal") != NULL &&
               sscanf(s, "process rank %d with PID %*d on node %*s exited on signal %d", &f->rank, &f->signo) == 2) {
        found = 1;
    } else if ((s = strstr(t, "Process name: [")) != NULL) {
        /* "[[jobid,1],R]" (Open MPI 4) or "[prterun-host-N@1,R]" (5): R is the
         * last number inside the brackets */
        const char *name = s + strlen("Process name: ");
        const char *e = strchr(name, ' '); /* end of the name token */
        const char *last = NULL;
        for (const char *c = name; *c && (!e || c < e); c++)
            if (isdigit((unsigned char)*c) && !isdigit((unsigned char)c[-1])) last = c;
        const char *ec = strstr(s, "Exit code: ");
        if (last && ec && sscanf(ec, "Exit code: %d", &f->code) == 1) {
            f->rank = atoi(last);
            found = 1;
        }
    } else if ((s = strstr(t, "process rank ")) != NULL && strstr(s, "exiting improperly") != NULL &&
               sscanf(s, "process rank %d", &f->rank) == 1) {
        f->code = 0;
        f->improper = 1;
        found = 1;
    }
    free(t);
    if (!found) f->rank = -1;
    return found;
}

/* The first failing rank from the wrappers' DIR/rank_<r>.status files (those
 * of ranks on this host, or all with a shared file system) and the ranks' own
 * exit records (DIR/rank_<r>.exit, base/exitrec.h). A rank failed when its
 * command ended with a non-zero exit or a signal, when it wrote an error line
 * and was killed before its end was recorded, or when it recorded a non-zero
 * exit code for itself. Its failure time is the earlier of its first error
 * line and its end (the time of its record when neither is known: the
 * teardown killed its wrapper first), and the earliest wins:
 * ranks that fail because another did (mpirun's teardown, a collective that
 * cannot finish, a watchdog) fail later, and when several ranks abort together
 * after agreeing that something failed, the one that said what failed wrote
 * its error line first (mpirun's report may name any of them, often one
 * whose log is empty). f->code and f->signo are -1 when unknown. Returns 1
 * when one was found. */
static int first_failure_from_status(const tri_launch_plan *p, tri_launch_failure *f) {
    double best = 0, first_end = 0;
    f->rank = -1;
    f->improper = 0;
    f->torn = 0;
    f->recorded = -1;
    f->reason[0] = '\0';
    int ender = -1, ender_code = -1, ender_sig = -1, best_state = 0;
    int recorder = -1;                /* the rank whose record came first */
    tri_exit_rec first_rec, best_rec; /* its record; the blamed rank's     */
    first_rec.code = best_rec.code = -1;
    for (int r = 0; r < p->world; r++) {
        tri_rank_status st;
        tri_rank_status_read(p->log_dir, r, &st);
        int recorded = st.rec.code > 0;
        if (recorded && (recorder < 0 || st.rec.t < first_rec.t)) {
            recorder = r;
            first_rec = st.rec;
        }
        int ended_badly = (st.state == TRI_RANK_EXIT && st.value != 0) || st.state == TRI_RANK_SIGNAL;
        if (!ended_badly && !(st.state == TRI_RANK_RUNNING && st.first_error > 0) && !recorded) continue;
        if (ended_badly && (ender < 0 || st.t < first_end)) {
            first_end = st.t;
            ender = r;
            ender_code = st.state == TRI_RANK_EXIT ? (int)st.value : -1;
            ender_sig = st.state == TRI_RANK_SIGNAL ? (int)st.value : -1;
        }
        double t = ended_badly ? st.t : st.first_error > 0 ? st.first_error : st.rec.t;
        if (st.first_error > 0 && st.first_error < t) t = st.first_error;
        if (f->rank < 0 || t < best) {
            best = t;
            f->rank = r;
            f->code = st.state == TRI_RANK_EXIT ? (int)st.value : -1;
            f->signo = st.state == TRI_RANK_SIGNAL ? (int)st.value : -1;
            best_state = st.state;
            best_rec = st.rec;
        }
    }
    if (f->rank < 0) return 0;
    /* The code the rank recorded for itself before it ended is how it ended,
     * whatever the teardown did to it (and its wrapper) afterwards. */
    if (best_rec.code > 0) {
        f->code = best_rec.code;
        f->signo = -1;
        f->recorded = f->rank;
        snprintf(f->reason, sizeof f->reason, "%s", best_rec.reason);
        return 1;
    }
    /* The rank that said what failed first was then torn down with the rest:
     * killed before its end was recorded, or ended by the teardown's SIGTERM
     * or SIGKILL after another rank's end. Its own end says nothing of what
     * failed: the code is the first rank's end that was not the teardown's
     * (else mpirun's report, find_failure), never the SIGTERM it sent. */
    int teardown_sig = f->signo == SIGTERM || f->signo == SIGKILL;
    if (best_state == TRI_RANK_RUNNING || (teardown_sig && ender >= 0 && ender != f->rank)) {
        f->torn = 1;
        int ender_genuine = ender >= 0 && ender != f->rank && !(ender_sig == SIGTERM || ender_sig == SIGKILL);
        f->code = ender_genuine ? ender_code : -1;
        f->signo = ender_genuine ? ender_sig : -1;
        if (!ender_genuine && recorder >= 0) { /* the first code a rank recorded for itself */
            f->code = first_rec.code;
            f->recorded = recorder;
            snprintf(f->reason, sizeof f->reason, "%s", first_rec.reason);
        }
    }
    return 1;
}

/* Removes this host's status files and exit records of an earlier attempt. */
static void clear_status(const tri_launch_plan *p) {
    for (int r = 0; r < p->world; r++) {
        char *path = tri_xprintf("%s/rank_%d.status", p->log_dir, r);
        (void)unlink(path);
        free(path);
        path = tri_rank_exit_record_path(p->log_dir, r);
        (void)unlink(path);
        free(path);
    }
}

int tri_launch_log_tail(const char *path, int lines, char **out) {
    *out = NULL;
    FILE *in = fopen(path, "rb");
    if (in == NULL) return TRI_TAIL_NO_LOG;
    char *text = NULL;
    size_t len = 0, cap = 0;
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0) {
        if (len + n + 1 > cap) {
            cap = (len + n + 1) * 2;
            char *t = tri_xcalloc(cap, 1);
            if (len) memcpy(t, text, len);
            free(text);
            text = t;
        }
        memcpy(text + len, buf, n);
        len += n;
    }
    fclose(in);
    if (text == NULL) return TRI_TAIL_EMPTY;
    text[len] = '\0';
    const char *start = text, *hdr;
    while ((hdr = strstr(start, "----- tridentrun: attempt ")) != NULL) {
        const char *nl = strchr(hdr, '\n');
        start = nl ? nl + 1 : hdr + strlen(hdr);
    }
    const char *end = text + len;
    if (end > start && end[-1] == '\n') end--;
    const char *from = end;
    int count = 0;
    while (from > start) {
        if (from[-1] == '\n' && ++count == lines) break;
        from--;
    }
    if (end <= start) {
        free(text);
        return TRI_TAIL_NO_OUTPUT;
    }
    /* each line grows by "  | " (4 bytes) at most, plus its newline */
    size_t room = (size_t)(end - from) + 5 * ((size_t)count + 2) + 1, at = 0;
    char *o = tri_xcalloc(room, 1);
    for (const char *c = from; c < end;) {
        const char *nl = memchr(c, '\n', (size_t)(end - c));
        size_t l = nl ? (size_t)(nl - c) : (size_t)(end - c);
        at += (size_t)snprintf(o + at, room - at, "  | %.*s\n", (int)l, c);
        c += l + 1;
    }
    free(text);
    *out = o;
    return TRI_TAIL_OK;
}

/* The rank whose first error line came first, other than `not` (-1: none
 * wrote one). */
static int first_error_rank(const tri_launch_plan *p, int not ) {
    int best = -1;
    double bt = 0;
    for (int r = 0; r < p->world; r++) {
        tri_rank_status st;
        tri_rank_status_read(p->log_dir, r, &st);
        if (r == not || st.first_error <= 0) continue;
        if (best < 0 || st.first_error < bt) {
            best = r;
            bt = st.first_error;
        }
    }
    return best;
}

/* Prints the tail of rank's log after the failure line (stderr); returns
 * what tri_launch_log_tail said. With seen, tells whether the tail holds
 * the line `seen` (*has: 1 or 0). */
static int print_tail(const char *path, const char *seen, int *has) {
    char *tail = NULL;
    int rc = tri_launch_log_tail(path, TAIL_LINES, &tail);
    if (rc == TRI_TAIL_NO_LOG)
        tri_error("(no log at %s: %s)", path, strerror(errno));
    else if (rc == TRI_TAIL_EMPTY)
        tri_error("(%s is empty)", path);
    else if (rc == TRI_TAIL_NO_OUTPUT)
        tri_error("(%s has no output from this attempt)", path);
    else {
        tri_error("last lines of %s:", path);
        fputs(tail, stderr); /* the rank's own lines, quoted: not a message of ours */
    }
    if (has != NULL) *has = tail != NULL && seen != NULL && strstr(tail, seen) != NULL;
    free(tail);
    return rc;
}

/* What failed, in words ("rank 1 failed (exit 3)") into what[n], and the
 * exit code that says so. f->rank < 0: mpirun itself (r). */
static int describe_failure(const tri_launch_failure *f, const run_result *r, char *what, size_t n) {
    if (f->rank >= 0) {
        if (f->signo >= 0) {
            snprintf(what, n, "rank %d failed (signal %d, %s)", f->rank, f->signo, strsignal(f->signo));
            return tri_exit_signal(f->signo);
        }
        if (f->improper) {
            snprintf(what, n, "rank %d failed (exit 0 without finishing MPI)", f->rank);
            return TRI_EXIT_FAILURE;
        }
        if (f->code >= 0) {
            snprintf(what, n, "rank %d failed (exit %d)", f->rank, f->code);
            return f->code > 0 && f->code < 256 ? f->code : TRI_EXIT_FAILURE;
        }
        snprintf(what, n, "rank %d failed (it wrote an error, then was stopped)", f->rank);
        return TRI_EXIT_FAILURE;
    }
    if (r->exited) {
        snprintf(what, n, "mpirun failed (exit %d)", r->code);
        return r->code;
    }
    snprintf(what, n, "mpirun died (signal %d)", r->signo);
    return tri_exit_signal(r->signo);
}

/* The first failing rank: the status files carry times, so the first failure
 * in them wins. mpirun's report covers the rest (ranks on other hosts without
 * a shared log dir), and says how a rank ended when its status could not. */
static int find_failure(const tri_launch_plan *p, const run_result *r, tri_launch_failure *f) {
    if (!first_failure_from_status(p, f)) return tri_launch_report_parse(r->report, f);
    tri_launch_failure rep;
    /* a rank torn down after its error line: mpirun's report may know how it
     * ended (MPI_Abort's errorcode: the trainer's refusal aborts with 2) */
    if (f->code < 0 && f->signo < 0 && tri_launch_report_parse(r->report, &rep)) {
        if (rep.rank == f->rank) {
            f->code = rep.code;
            f->signo = rep.signo;
            f->improper = rep.improper;
        } else if (f->torn && rep.code > 0) { /* another rank's own exit code */
            f->code = rep.code;
        }
    }
    return 1;
}

/* Sleeps s seconds (a stop request ends the wait); 0, or -1 when stopped. */
static int backoff_sleep(double s) {
    double end = tri_now_s() + s;
    while (tri_launch_stop_requests() == 0) {
        double now = tri_now_s();
        if (now >= end) return 0;
        (void)poll(NULL, 0, ms_until(end, now, 200));
    }
    return -1;
}

/* The step of checkpoint.dir's newest checkpoint per its `latest` file
 * (step_<N>), or -1. */
static long latest_step(const tri_launch_plan *p) {
    if (p->train_cfg == NULL) return -1;
    char *path = tri_xprintf("%s/latest", p->train_cfg->checkpoint.dir);
    FILE *f = fopen(path, "r");
    free(path);
    long step = -1;
    if (f != NULL) {
        if (fscanf(f, " step_%ld", &step) != 1) step = -1;
        fclose(f);
    }
    return step;
}

/* The layout change of an elastic shrink, handed to the relaunched trainer:
 * a line of log.dir/TRI_LOG_PENDING_EVENTS that its rank 0 writes into
 * metrics.jsonl (and TensorBoard, elastic/<x>) at the step it resumes from,
 * then removes (src/train/metrics.h, tri_metrics_take_events). Written
 * here, it would be lost when the trainer truncates metrics.jsonl (a
 * restart before the first checkpoint). */
static void hand_event(const char *log_dir, int attempt, int bad, const char *host, int fails, int dp, int nd,
                       int world) {
    char *path = tri_xprintf("%s/%s", log_dir, TRI_LOG_PENDING_EVENTS);
    FILE *m = tri_mkdir_p(log_dir) == 0 ? fopen(path, "a") : NULL;
    if (m != NULL) {
        fprintf(m,
                "{\"event\": \"elastic_shrink\", \"elastic_attempt\": %d, \"elastic_dropped_rank\": %d, "
                "\"elastic_host\": ",
                attempt, bad);
        tri_json_fputs(m, host);
        fprintf(m,
                ", \"elastic_failures_in_a_row\": %d, \"elastic_dp_from\": %d, \"elastic_dp_to\": %d, "
                "\"elastic_world\": %d}\n",
                fails, dp, nd, world);
    }
    if (m == NULL || fclose(m) != 0)
        tri_warn("cannot hand the layout change to the trainer through %s: %s; metrics.jsonl will not mark it", path,
                 strerror(errno));
    free(path);
}

/* Elastic shrink (--elastic K): rank `bad` failed K times in a row; drop one
 * data-parallel replica (tp x pp ranks) from the host that runs it, keep the
 * global batch (more micro-batches per rank), say so, and hand the event to
 * the relaunched trainer (hand_event). Returns 0 when shrunk (q changed), -1
 * when it cannot (no trainer layout, dp 1, no dp' that divides the batch). */
static int elastic_shrink(tri_launch_plan *q, int bad, int fails, int attempt) {
    if (!q->have_layout || q->train_cfg == NULL) {
        tri_warn("elastic: rank %d failed %d relaunches in a row, but COMMAND is not `trident train CONFIG`: "
                 "nothing to shrink",
                 bad, fails);
        return -1;
    }
    int dp = q->dp_override > 0 ? q->dp_override : q->dp;
    int nd = tri_restart_shrunk_dp(dp, q->train_cfg->train.global_batch, q->train_cfg->train.micro_batch);
    if (nd <= 0) {
        tri_warn("elastic: rank %d failed %d relaunches in a row, but parallel.dp is %d: no replica to drop", bad,
                 fails, dp);
        return -1;
    }
    int drop = (dp - nd) * q->tp * q->pp;
    const char *host = tri_launch_host_of(q, bad);
    int h0 = 0;
    for (int h = 0; h < q->nhosts; h++)
        if (!strcmp(q->hosts[h], host)) h0 = h;
    /* from the failing rank's host first, then from the last hosts */
    for (int k = 0, h = h0; drop > 0 && k <= q->nhosts; k++, h = q->nhosts - k) {
        if (h < 0 || h >= q->nhosts) continue;
        int take = q->ranks[h] < drop ? q->ranks[h] : drop;
        q->ranks[h] -= take;
        drop -= take;
    }
    q->world = nd * q->tp * q->pp;
    q->nproc = 0;
    for (int h = 0; h < q->nhosts; h++)
        if (q->ranks[h] > q->nproc) q->nproc = q->ranks[h];
    q->dp_override = nd;
    long step = latest_step(q);
    tri_error("elastic: rank %d (host %s) failed %d relaunches in a row; dropping it: data parallel %d -> %d "
              "(%d ranks in all), global batch %d kept as %d micro-batches of %d per rank; resuming from step %ld",
              bad, host, fails, dp, nd, q->world, q->train_cfg->train.global_batch,
              q->train_cfg->train.global_batch / (q->train_cfg->train.micro_batch * nd),
              q->train_cfg->train.micro_batch, step < 0 ? 0 : step);
    hand_event(q->train_cfg->log.dir, attempt + 1, bad, host, fails, dp, nd, q->world);
    return 0;
}

int tri_launch_run(const tri_launch_opts *o, const tri_launch_plan *p) {
    if (p->as_root) {
        /* the environment form of --allow-run-as-root, for mpiruns that check it */
        setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
        setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    }
    /* Open MPI's teardown after a rank's death: SIGTERM to the other ranks,
     * then odls_base_sigkill_timeout seconds (default 2) before SIGKILL; the
     * others are stuck in a collective with the dead rank, so those seconds
     * are lost to every restart. 0 unless the user set it. A graceful stop
     * loses nothing by it: a save ends with a collective after the commit. */
    setenv("OMPI_MCA_odls_base_sigkill_timeout", "0", 0);
    setenv("PRTE_MCA_odls_base_sigkill_timeout", "0", 0);
    /* Every rank on this host: Open MPI's default UCX layer finds only
     * shared memory here and costs ~0.2 s of MPI_Init per start (of ~0.3 s
     * on 4 ranks; each restart pays it); ob1 over shared memory (vader) is the
     * same path without the probing. Unless the user chose a pml. */
    if (all_ranks_local(p)) setenv("OMPI_MCA_pml", "ob1", 0);
    tri_launch_signals_install(1);
    /* q: the plan of the current attempt (an elastic shrink changes its
     * ranks; the rest is p's) */
    tri_launch_plan q = *p;
    q.ranks = tri_xcalloc((size_t)(p->nhosts > 0 ? p->nhosts : 1), sizeof *q.ranks);
    if (p->nhosts > 0) memcpy(q.ranks, p->ranks, (size_t)p->nhosts * sizeof *q.ranks);
    char *mlog_path = tri_xprintf("%s/mpirun.log", p->log_dir);
    int final = TRI_EXIT_FAILURE;
    tri_restart_state rs = {0};
    rs.last_rank = -1;
    for (int attempt = 0; attempt <= o->max_restarts; attempt++) {
        tri_launch_argv cmd;
        tri_launch_command_build(&cmd, o, &q, attempt);
        clear_status(p); /* the whole original world: a shrink leaves files behind */
        int mlog = open(mlog_path, O_WRONLY | O_CREAT | O_CLOEXEC | (attempt ? O_APPEND : O_TRUNC), 0644);
        if (mlog < 0) tri_warn("cannot write %s: %s", mlog_path, strerror(errno));
        run_result r;
        int rc = run_mpirun(&cmd, mlog, &q, o->grace_s, &r);
        if (mlog >= 0) close(mlog);
        tri_launch_argv_free(&cmd);
        if (rc != 0) {
            tri_error("cannot run '%s': %s%s", o->mpirun, strerror(r.exec_errno ? r.exec_errno : EIO),
                      r.exec_errno == ENOENT ? " (install Open MPI, or give --mpirun PATH)" : "");
            run_result_free(&r);
            final = TRI_EXIT_EXEC;
            break;
        }
        int sig = tri_launch_signal_got();
        if (sig) {
            tri_error("stopped by signal %d (%s); %s", sig, strsignal(sig),
                      r.killed ? "the ranks outlasted --grace-s and were killed" : "the ranks were told to stop");
            final = tri_exit_signal(sig);
            run_result_free(&r);
            break;
        }
        if (r.exited && r.code == 0) {
            final = TRI_EXIT_OK;
            run_result_free(&r);
            break;
        }
        tri_launch_failure f;
        char what[128];
        if (!find_failure(&q, &r, &f)) f.rank = -1;
        final = describe_failure(&f, &r, what, sizeof what);
        tri_error("%s; the job was stopped (mpirun's report: %s)", what, mlog_path);
        if (f.rank >= 0) {
            char *lp = tri_xprintf("%s/rank_%d.log", p->log_dir, f.rank);
            int shown = 0;
            int trc = print_tail(lp, f.reason, &shown);
            free(lp);
            /* the line it recorded with its code, when its log lacks it (its
             * wrapper killed before it could copy the line) */
            if (f.recorded >= 0 && f.reason[0] && !shown)
                tri_error("rank %d recorded before it ended (exit %d): %s", f.recorded, f.code, f.reason);
            /* it said nothing (it ended first, silently, as the ranks that
             * refuse together but do not print do): show the rank that did */
            int e = trc != TRI_TAIL_OK ? first_error_rank(&q, f.rank) : -1;
            if (e >= 0) {
                tri_error("rank %d wrote the first error line:", e);
                lp = tri_xprintf("%s/rank_%d.log", p->log_dir, e);
                (void)print_tail(lp, NULL, NULL);
                free(lp);
            }
        }
        if (attempt >= o->max_restarts) {
            run_result_free(&r);
            break;
        }
        if (tri_restart_is_refusal(final)) {
            tri_error("%s: a refusal (exit %d: bad input) that a relaunch would repeat; not restarting", what, final);
            run_result_free(&r);
            break;
        }
        double t_fail = r.dead_rank >= 0 ? r.t_died : r.t_down;
        double delay = tri_restart_backoff(&rs, t_fail, o->backoff_s);
        int fails = tri_restart_same_place(&rs, f.rank);
        if (o->elastic > 0 && fails >= o->elastic && elastic_shrink(&q, f.rank, fails, attempt) == 0) {
            rs.last_rank = -1; /* a new layout: the ranks count afresh */
            rs.same = 0;
        }
        if (delay > 0)
            tri_error("%s; restart %d of %d in %.1f s (failure %d of a burst: failures less than %g s apart back "
                      "off, doubling)",
                      what, attempt + 1, o->max_restarts, delay, rs.burst + 1, TRI_RESTART_BURST_S);
        else
            tri_error("%s; restart %d of %d", what, attempt + 1, o->max_restarts);
        fflush(stderr);
        if (delay > 0 && backoff_sleep(delay) != 0) {
            int s2 = tri_launch_signal_got();
            tri_error("stopped by signal %d (%s) while waiting to restart", s2, strsignal(s2));
            final = tri_exit_signal(s2);
            run_result_free(&r);
            break;
        }
        double t_relaunch = tri_wall_s();
        tri_note("restart %d: %s at %.3f; relaunched %.3f s after it (noticed %.3f s, job down %.3f s, "
                 "backoff %.3f s)",
                 attempt + 1, what, t_fail, t_relaunch - t_fail, r.dead_rank >= 0 ? r.t_noticed - t_fail : 0.0,
                 r.t_down - t_fail, delay);
        run_result_free(&r);
    }
    free(q.ranks);
    free(mlog_path);
    return final;
}
