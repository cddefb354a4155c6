/* tridentrun: the launcher users see (torchrun-like), built on Open MPI's mpirun.
 *
 *   tridentrun [--nproc-per-node N] [--hostfile FILE] [--log-dir DIR] [--tee]
 *              [--dry-run] [--max-restarts K] [--grace-s S] [--mpirun PATH]
 *              [--mpirun-arg ARG]... -- COMMAND [ARGS...]
 *
 * What it does, in order:
 *  1. When COMMAND is `trident train CONFIG [--set k=v]...`, it loads CONFIG with
 *     the overrides (src/config/config.h) and checks tp*pp*dp against the number of
 *     ranks before anything starts. Ranks per host: --nproc-per-node N on
 *     every host (a host file's slots=N below N is an error); else the host
 *     file's slots=N, filled in file order (tp*pp*dp ranks for the trainer,
 *     every slot for another COMMAND); else tp*pp*dp / hosts for the trainer
 *     and 1 per host for another COMMAND (see place_ranks).
 *  2. It builds one mpirun command (printed by --dry-run with the rank map):
 *     -np W, -H host:N,... for a host file (N: the ranks placed there, so the
 *     ranks of each host are consecutive), --allow-run-as-root as root,
 *     --oversubscribe when ranks per node exceed this machine's cores,
 *     --bind-to none when ranks are oversubscribed or use more than one
 *     thread, -x OMP_NUM_THREADS=max(1, cores/ranks per node) (the user's
 *     value wins) and -x OMP_WAIT_POLICY=PASSIVE (idle OpenMP workers sleep
 *     instead of spinning on a shared core).
 *  3. Each rank runs through `tridentrun --rank-exec`, a thin wrapper that
 *     forks COMMAND with its stdout and stderr going (through pipes) to
 *     DIR/rank_<r>.log, and ends the way COMMAND ended (same exit code, or the
 *     same signal), so mpirun sees COMMAND's fate. Rank 0's output is also
 *     shown on the console; with --tee every rank's is, each line prefixed
 *     "[rank r] ". The wrapper also writes DIR/rank_<r>.status (its pid and
 *     host while COMMAND runs, then "<time> exit <code>" or "<time> signal
 *     <n>", plus the time of COMMAND's first error line). mpirun's own
 *     messages go to stderr and to DIR/mpirun.log. A bare `trident` not on
 *     $PATH is taken from the directory of this tridentrun.
 *  4. When a rank fails, mpirun stops the others (Open MPI's default for a
 *     non-zero exit, a signal, MPI_Abort or an exit without MPI_Finalize).
 *     tridentrun names the rank that failed first: by the status files, the
 *     earliest of each failed rank's first error line and exit (mpirun's
 *     report when no status file shows a failure), and prints the last 20
 *     lines of that rank's log. With --max-restarts K it relaunches up to K
 *     times, appending --resume to COMMAND's arguments (unless present).
 *     The exit code is the failing rank's (128+signal for a signal; 1 when
 *     unknown).
 *  5. The first SIGINT/SIGTERM/SIGHUP is passed to mpirun (which runs in its own
 *     process group, so a terminal's Ctrl-C reaches it only through us) as
 *     SIGUSR1, which mpirun forwards to every rank: the trainer saves a
 *     checkpoint and stops (mpirun would answer SIGTERM itself by killing the
 *     ranks a second later). A second signal goes to mpirun as it is, a hard
 *     stop. Ranks still running --grace-s seconds after the first signal (a
 *     rank stopped, wedged, or ignoring it) are SIGKILLed on this host, and
 *     mpirun is told to end the rest (and killed 10 s later if it does not).
 *     tridentrun exits 128+signal after mpirun has stopped the ranks. If
 *     tridentrun itself is killed, mpirun gets SIGTERM (PR_SET_PDEATHSIG).
 * Argument errors: one line "tridentrun: ...", exit 2.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "model/gpt.h"
#include "model/runtime.h"
#include "parallel/mesh.h"
#include "base/file.h"
#include "base/size.h"
#include "config/config.h"
#include "plan/stage_plan.h"

#define TAIL_LINES 20
#define MAX_HOSTS  4096

/* The only mutable file-scope state: what the signal handler needs (a handler
 * cannot be given a context). */
static volatile sig_atomic_t g_child_pid = 0;
static volatile sig_atomic_t g_signal = 0;
/* The launcher sets this: mpirun answers SIGTERM by killing the job (SIGKILL
 * one second after SIGTERM), too soon for the ranks to save a checkpoint, but
 * it forwards SIGUSR1 to them. So the first stop request goes to the ranks as
 * SIGUSR1 (the trainer saves and stops), a second one to mpirun as it is. */
static volatile sig_atomic_t g_graceful = 0;
static volatile sig_atomic_t g_requests = 0;

/* The signal to pass on for sig. */
static int pass_on(int sig) {
    if (g_graceful && sig != SIGUSR1 && g_requests == 1) return SIGUSR1;
    return sig;
}

static void on_signal(int sig) {
    g_signal = sig;
    g_requests++;
    pid_t pid = (pid_t)g_child_pid;
    if (pid > 0) kill(pid, pass_on(sig));
}

/* ------------------------------------------------------------------------ */
/* Small helpers                                                            */

static void die_oom(void) {
    fprintf(stderr, "tridentrun: out of memory\n");
    exit(1);
}

static void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size);
    if (p == NULL) die_oom();
    return p;
}

static char *xstrdup(const char *s) {
    char *p = strdup(s);
    if (p == NULL) die_oom();
    return p;
}

static char *xprintf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (n < 0) die_oom();
    return s;
}

/* Writes all of buf (retrying short writes and EINTR). Returns 0 or -1. */
static int write_all(int fd, const char *buf, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, buf, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        buf += w;
        n -= (size_t)w;
    }
    return 0;
}

/* A strict decimal integer in [min, max]; -1 on anything else. */
static int parse_int(const char *s, long min, long max, long *out) {
    if (s == NULL || *s == '\0') return -1;
    errno = 0;
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < min || v > max) return -1;
    *out = v;
    return 0;
}

/* Cores this process may run on (the affinity mask: right inside containers
 * and cgroups), else the online count. */
static int usable_cores(void) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* mkdir -p; 0 or -1 (errno set). */
static int mkdir_p(const char *path) {
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(buf, 0777) != 0 && errno != EEXIST) return -1;
    struct stat st;
    if (stat(buf, &st) != 0) return -1;
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* ------------------------------------------------------------------------ */
/* Rank wrapper: `tridentrun --rank-exec --log-dir DIR [--tee] [--attempt N] -- CMD...` */

static int rank_from_env(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        long v;
        if (parse_int(getenv(vars[i]), 0, INT_MAX, &v) == 0) return (int)v;
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
            (void)write_all(con_fd, lb->buf, lb->n);
            lb->n = lb->plen;
        }
    }
}

static void con_flush(line_buf *lb, int con_fd) {
    if (lb->n == lb->plen) return;
    lb->buf[lb->n++] = '\n';
    (void)write_all(con_fd, lb->buf, lb->n);
    lb->n = lb->plen;
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* What the rank wrapper knows about its command, for DIR/rank_<r>.status. */
typedef struct rank_status {
    const char *dir;
    int rank;
    double started;     /* when the wrapper started                        */
    double first_error; /* when CMD first wrote an error line; 0: never    */
} rank_status;

/* DIR/rank_<r>.status, one or two lines:
 *   "<unix time> running <wrapper pid> <host>"   while CMD runs, then
 *   "<unix time> exit <code>" or "<unix time> signal <n>" when it has ended;
 *   "<unix time> error"   (second line) when CMD wrote its first error line:
 *                          a stderr line starting "trident: " or "tridentrun: "
 *                          that is not a "trident: note".
 * The launcher blames the rank whose failure came first (the earlier of its
 * first error line and its exit), and kills the ranks on its own host by the
 * wrapper's pid (each wrapper leads its rank's process group) when they
 * outlast --grace-s. Written to a temporary name and renamed, so a reader
 * never sees half a line. what: "running", "exit" or "signal". */
static void write_status(const rank_status *s, const char *what, int value) {
    char *path = xprintf("%s/rank_%d.status", s->dir, s->rank);
    char *tmp = xprintf("%s/.rank_%d.status.tmp", s->dir, s->rank);
    FILE *f = fopen(tmp, "w");
    if (f != NULL) {
        if (!strcmp(what, "running")) {
            char host[256] = "?";
            if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "?");
            host[sizeof host - 1] = '\0';
            fprintf(f, "%.6f running %ld %s\n", s->started, (long)getpid(), host);
        } else {
            fprintf(f, "%.6f %s %d\n", now_seconds(), what, value);
        }
        if (s->first_error > 0) fprintf(f, "%.6f error\n", s->first_error);
        if (fclose(f) == 0) (void)rename(tmp, path);
    }
    free(tmp);
    free(path);
}

/* Finds the start of each line of CMD's stderr, across reads, to tell an
 * error line ("trident: ..." or "tridentrun: ...", not "trident: note") from
 * the rest. */
typedef struct err_scan {
    char head[24]; /* the current line's first bytes */
    size_t n;
    int decided; /* the current line is classified */
} err_scan;

static int is_error_head(const char *h, size_t n) {
    static const char *const err_prefix[] = {"trident: ", "tridentrun: "};
    if (n >= 14 && !strncmp(h, "trident: note:", 14)) return 0;
    for (size_t i = 0; i < sizeof err_prefix / sizeof err_prefix[0]; i++) {
        size_t l = strlen(err_prefix[i]);
        if (n >= l && !strncmp(h, err_prefix[i], l)) return 1;
    }
    return 0;
}

/* Feeds stderr bytes; returns 1 when an error line started in them. */
static int err_scan_put(err_scan *e, const char *data, size_t n) {
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

/* The rank wrapper: `tridentrun --rank-exec --log-dir DIR [--tee] [--attempt N] -- CMD...`
 * run by mpirun in each rank's place. It forks CMD with stdout and stderr on
 * two pipes, copies both to DIR/rank_<r>.log (and to its own stdout, the
 * console, for rank 0, or for every rank with --tee), notes when CMD first
 * writes an error line, forwards SIGINT/SIGTERM/SIGHUP/SIGUSR1 to CMD,
 * records all that in DIR/rank_<r>.status, and ends the way CMD ended (same
 * exit code, or the same signal), so mpirun sees CMD's fate. CMD stays in
 * the wrapper's process group, so mpirun's teardown signals reach both, and
 * CMD dies with the wrapper (PR_SET_PDEATHSIG). */
static int rank_exec_main(int argc, char **argv) {
    const char *dir = NULL;
    int tee = 0, attempt = 0, i = 2;
    for (; i < argc; i++) {
        if (!strcmp(argv[i], "--log-dir") && i + 1 < argc)
            dir = argv[++i];
        else if (!strcmp(argv[i], "--tee"))
            tee = 1;
        else if (!strcmp(argv[i], "--attempt") && i + 1 < argc) {
            long v;
            if (parse_int(argv[++i], 0, INT_MAX, &v) != 0) break;
            attempt = (int)v;
        } else
            break;
    }
    if (dir == NULL || i >= argc || strcmp(argv[i], "--") != 0 || i + 1 >= argc) {
        fprintf(stderr, "tridentrun: --rank-exec: usage: --rank-exec --log-dir DIR [--tee] "
                        "[--attempt N] -- COMMAND...\n");
        return 2;
    }
    char **cmd = argv + i + 1;
    int rank = rank_from_env();
    if (rank < 0) {
        fprintf(stderr, "tridentrun: --rank-exec: no rank in the environment "
                        "(OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK, SLURM_PROCID)\n");
        return 2;
    }
    char *path = xprintf("%s/rank_%d.log", dir, rank);
    int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (attempt == 0 ? O_TRUNC : O_APPEND);
    int log_fd = open(path, flags, 0644);
    if (log_fd < 0) {
        fprintf(stderr, "tridentrun: rank %d: cannot open %s: %s\n", rank, path, strerror(errno));
        free(path);
        return 2;
    }
    free(path);
    if (attempt > 0) {
        char *hdr = xprintf("----- tridentrun: attempt %d -----\n", attempt + 1);
        (void)write_all(log_fd, hdr, strlen(hdr));
        free(hdr);
    }
    rank_status rs = {dir, rank, now_seconds(), 0};
    write_status(&rs, "running", -1);

    const int console = tee || rank == 0;
    int po[2] = {-1, -1}, pe[2] = {-1, -1}; /* CMD's stdout, stderr */
    if (pipe2(po, O_CLOEXEC) != 0 || pipe2(pe, O_CLOEXEC) != 0) {
        fprintf(stderr, "tridentrun: rank %d: pipe: %s\n", rank, strerror(errno));
        return 2;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    pid_t parent = getpid();
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "tridentrun: rank %d: fork: %s\n", rank, strerror(errno));
        return 2;
    }
    if (pid == 0) {
        (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(1);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        signal(SIGUSR1, SIG_DFL);
        signal(SIGPIPE, SIG_DFL);
        if (dup2(po[1], STDOUT_FILENO) < 0 || dup2(pe[1], STDERR_FILENO) < 0) _exit(127);
        execvp(cmd[0], cmd);
        fprintf(stderr, "tridentrun: rank %d: cannot run '%s': %s\n", rank, cmd[0], strerror(errno));
        _exit(127);
    }
    g_child_pid = pid;
    if (g_signal) kill(pid, (int)g_signal);
    close(po[1]);
    close(pe[1]);

    char prefix[32] = "";
    if (tee) snprintf(prefix, sizeof prefix, "[rank %d] ", rank);
    /* one console line buffer per stream, so that their lines never mix */
    static line_buf lb[2];
    con_init(&lb[0], prefix);
    con_init(&lb[1], prefix);
    err_scan es;
    memset(&es, 0, sizeof es);
    struct pollfd pfd[2] = {{po[0], POLLIN, 0}, {pe[0], POLLIN, 0}};
    int open_fds = 2, st = 0, done = 0;
    static char buf[65536];
    /* copy until EOF on both; once CMD has exited, stop at the first quiet
     * 200 ms (a leftover grandchild may keep a pipe open) */
    while (open_fds > 0) {
        int n = poll(pfd, 2, done ? 200 : 100);
        if (n < 0 && errno != EINTR) break;
        if (n == 0 && done) break;
        for (int k = 0; k < 2 && n > 0; k++) {
            if (pfd[k].fd < 0 || !(pfd[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            ssize_t got = read(pfd[k].fd, buf, sizeof buf);
            if (got < 0 && errno == EINTR) continue;
            if (got <= 0) {
                close(pfd[k].fd);
                pfd[k].fd = -1;
                open_fds--;
                continue;
            }
            (void)write_all(log_fd, buf, (size_t)got);
            if (console) con_put(&lb[k], STDOUT_FILENO, buf, (size_t)got);
            if (k == 1 && rs.first_error == 0 && err_scan_put(&es, buf, (size_t)got)) {
                rs.first_error = now_seconds();
                write_status(&rs, "running", -1);
            }
        }
        if (!done && waitpid(pid, &st, WNOHANG) == pid) done = 1;
    }
    if (console) {
        con_flush(&lb[0], STDOUT_FILENO);
        con_flush(&lb[1], STDOUT_FILENO);
    }
    for (int k = 0; k < 2; k++)
        if (pfd[k].fd >= 0) close(pfd[k].fd);
    while (!done) {
        if (waitpid(pid, &st, 0) == pid)
            done = 1;
        else if (errno != EINTR)
            break;
    }
    g_child_pid = 0;
    close(log_fd);
    if (WIFSIGNALED(st)) {
        int sig = WTERMSIG(st);
        write_status(&rs, "signal", sig);
        /* end the same way, without a core file of the wrapper */
        struct rlimit rl = {0, 0};
        (void)setrlimit(RLIMIT_CORE, &rl);
        signal(sig, SIG_DFL);
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, sig);
        sigprocmask(SIG_UNBLOCK, &set, NULL);
        raise(sig);
        return 128 + sig;
    }
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : 1;
    write_status(&rs, "exit", code);
    return code;
}

/* ------------------------------------------------------------------------ */
/* Options                                                                  */

typedef struct opts {
    int nproc;            /* 0: not given                                 */
    const char *hostfile; /* NULL: this machine only                      */
    const char *log_dir;
    int tee, dry_run, max_restarts;
    double grace_s; /* after a stop request, SIGKILL the ranks then */
    const char *mpirun;
    const char **extra; /* --mpirun-arg values (n_extra)                */
    int n_extra;
    char **cmd; /* COMMAND and its arguments (cmd_argc)         */
    int cmd_argc;
} opts;

static void usage(FILE *f) {
    fprintf(f, "usage: tridentrun [options] -- COMMAND [ARGS...]\n"
               "  e.g. tridentrun --nproc-per-node 4 -- trident train configs/x.json --set parallel.tp=2\n"
               "options:\n"
               "  --nproc-per-node N  ranks on every host (default: the hostfile's slots, else\n"
               "                      tp*pp*dp / hosts for `trident train`, else 1)\n"
               "  --hostfile FILE     one host per line, optionally \"slots=N\" ('#' comments); without\n"
               "                      --nproc-per-node the ranks fill the slots in order; default: this machine\n"
               "  --log-dir DIR       rank r's stdout+stderr go to DIR/rank_<r>.log (default: logs)\n"
               "  --tee               show every rank's output on the console, as \"[rank r] ...\"\n"
               "                      (default: rank 0's only)\n"
               "  --dry-run           print the rank map and the mpirun command, start nothing\n"
               "  --max-restarts K    after a failure, relaunch up to K times with --resume (default 0)\n"
               "  --grace-s S         after SIGINT/SIGTERM, give the ranks S seconds to save and stop,\n"
               "                      then kill them (SIGKILL) (default 60)\n"
               "  --mpirun PATH       the mpirun to use (default: mpirun on PATH)\n"
               "  --mpirun-arg ARG    pass ARG to mpirun as is (repeatable), e.g.\n"
               "                      --mpirun-arg=--mca --mpirun-arg=btl_vader_single_copy_mechanism\n"
               "                      --mpirun-arg=none  (containers that forbid cross-process reads)\n"
               "  -h, --help          this text\n"
               "Exit code: 0 on success, 2 for bad arguments, else the failing rank's code.\n");
}

/* "--opt VALUE" or "--opt=VALUE": returns the value and advances *i, or NULL. */
static const char *opt_value(int argc, char **argv, int *i, const char *name, int *bad) {
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0) return NULL;
    if (a[n] == '=') return a + n + 1;
    if (a[n] != '\0') return NULL;
    if (*i + 1 >= argc) {
        fprintf(stderr, "tridentrun: %s needs a value\n", name);
        *bad = 1;
        return NULL;
    }
    return argv[++*i];
}

/* 0, 1 (help shown: exit 0) or -1 (message printed: exit 2). */
static int parse_opts(int argc, char **argv, opts *o) {
    memset(o, 0, sizeof *o);
    o->log_dir = "logs";
    o->mpirun = "mpirun";
    o->grace_s = 60;
    o->extra = (const char **)xcalloc((size_t)argc, sizeof *o->extra);
    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i], *v;
        int bad = 0;
        long n;
        if (!strcmp(a, "--")) {
            i++;
            break;
        }
        if (a[0] != '-') break; /* COMMAND without "--" */
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 1;
        } else if (!strcmp(a, "--tee")) {
            o->tee = 1;
        } else if (!strcmp(a, "--dry-run")) {
            o->dry_run = 1;
        } else if ((v = opt_value(argc, argv, &i, "--nproc-per-node", &bad)) != NULL) {
            if (parse_int(v, 1, 1 << 20, &n) != 0) {
                fprintf(stderr, "tridentrun: --nproc-per-node: expected an integer >= 1, got '%s'\n", v);
                return -1;
            }
            o->nproc = (int)n;
        } else if ((v = opt_value(argc, argv, &i, "--max-restarts", &bad)) != NULL) {
            if (parse_int(v, 0, 1000, &n) != 0) {
                fprintf(stderr, "tridentrun: --max-restarts: expected an integer in [0, 1000], got '%s'\n", v);
                return -1;
            }
            o->max_restarts = (int)n;
        } else if ((v = opt_value(argc, argv, &i, "--grace-s", &bad)) != NULL) {
            char *end = NULL;
            errno = 0;
            double g = strtod(v, &end);
            if (*v == '\0' || *end != '\0' || errno != 0 || !(g >= 0 && g <= 1e6)) {
                fprintf(stderr, "tridentrun: --grace-s: expected seconds in [0, 1000000], got '%s'\n", v);
                return -1;
            }
            o->grace_s = g;
        } else if ((v = opt_value(argc, argv, &i, "--hostfile", &bad)) != NULL) {
            o->hostfile = v;
        } else if ((v = opt_value(argc, argv, &i, "--log-dir", &bad)) != NULL) {
            if (*v == '\0') {
                fprintf(stderr, "tridentrun: --log-dir: expected a directory, got ''\n");
                return -1;
            }
            o->log_dir = v;
        } else if ((v = opt_value(argc, argv, &i, "--mpirun-arg", &bad)) != NULL) {
            o->extra[o->n_extra++] = v;
        } else if ((v = opt_value(argc, argv, &i, "--mpirun", &bad)) != NULL) {
            if (*v == '\0') {
                fprintf(stderr, "tridentrun: --mpirun: expected a program, got ''\n");
                return -1;
            }
            o->mpirun = v;
        } else if (!bad) {
            fprintf(stderr, "tridentrun: unknown option '%s' (try `tridentrun --help`)\n", a);
            return -1;
        }
        if (bad) return -1;
    }
    if (i >= argc) {
        fprintf(stderr, "tridentrun: missing COMMAND after the options (e.g. -- trident train CONFIG)\n");
        return -1;
    }
    o->cmd = argv + i;
    o->cmd_argc = argc - i;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* The plan: hosts, ranks, layout, environment                              */

typedef struct plan {
    char **hosts; /* (nhosts); "localhost" when no host file        */
    int nhosts;
    int *slots;       /* (nhosts) the host file's slots=N; 0: not given */
    int *lines;       /* (nhosts) the host's line in the host file      */
    int *ranks;       /* (nhosts) ranks placed on each host; the ranks of
                           host h follow those of hosts 0..h-1           */
    int nproc, world; /* most ranks on one host, ranks in all           */
    int have_layout;  /* tp/pp/dp known (COMMAND is `trident train`)    */
    int tp, pp, dp;
    int cores;        /* usable cores on this machine                   */
    int threads;      /* OMP_NUM_THREADS per rank                       */
    int user_threads; /* 1 when the user set OMP_NUM_THREADS            */
    int oversub, bind_none;
    char log_dir[PATH_MAX]; /* absolute                                   */
    char self[PATH_MAX];    /* this executable (the rank wrapper)         */
    char *cmd0;             /* the program to run (COMMAND[0], resolved)  */
    tri_config *train_cfg;  /* `trident train CONFIG`: the loaded config  */
} plan;

static void plan_free(plan *p) {
    if (p == NULL) return;
    for (int i = 0; i < p->nhosts; i++) free(p->hosts[i]);
    free(p->hosts);
    free(p->slots);
    free(p->lines);
    free(p->ranks);
    free(p->cmd0);
    free(p->train_cfg);
    memset(p, 0, sizeof *p);
}

/* Reads the host file: per line a host name and optionally slots=N ('#'
 * starts a comment), as in Open MPI's host files; anything else on a line is
 * an error (tridentrun places the ranks itself and passes mpirun an explicit
 * -H list, so a key it does not honour must not be ignored silently).
 * 0 or -1 (message printed). */
static int read_hostfile(plan *p, const char *path) {
    char why[256];
    int fd = tri_open_regular_why(path, NULL, why, sizeof why); /* a named pipe is refused, not waited on */
    FILE *f = fd < 0 ? NULL : fdopen(fd, "r");
    if (f == NULL) {
        fprintf(stderr, "tridentrun: cannot read hostfile %s: %s\n", path, fd < 0 ? why : strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    p->hosts = xcalloc(MAX_HOSTS, sizeof *p->hosts);
    p->slots = xcalloc(MAX_HOSTS, sizeof *p->slots);
    p->lines = xcalloc(MAX_HOSTS, sizeof *p->lines);
    char line[1024];
    int lineno = 0, rc = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        lineno++;
        char *hash = strchr(line, '#');
        if (hash) *hash = '\0';
        char *save = NULL;
        char *s = strtok_r(line, " \t\r\n\v\f", &save);
        if (s == NULL) continue;
        for (int h = 0; h < p->nhosts; h++)
            if (!strcmp(p->hosts[h], s)) {
                fprintf(stderr, "tridentrun: %s:%d: host '%s' is listed twice\n", path, lineno, s);
                rc = -1;
                goto out;
            }
        if (p->nhosts == MAX_HOSTS) {
            fprintf(stderr, "tridentrun: %s:%d: more than %d hosts\n", path, lineno, MAX_HOSTS);
            rc = -1;
            goto out;
        }
        int slots = 0;
        for (char *w = strtok_r(NULL, " \t\r\n\v\f", &save); w; w = strtok_r(NULL, " \t\r\n\v\f", &save)) {
            long v;
            if (strncmp(w, "slots=", 6) == 0 && slots == 0 && parse_int(w + 6, 1, 1 << 20, &v) == 0) {
                slots = (int)v;
                continue;
            }
            fprintf(stderr, "tridentrun: %s:%d: '%s': expected \"HOST [slots=N]\" with N >= 1, once\n", path, lineno,
                    w);
            rc = -1;
            goto out;
        }
        p->lines[p->nhosts] = lineno;
        p->slots[p->nhosts] = slots;
        p->hosts[p->nhosts++] = xstrdup(s);
    }
    if (ferror(f)) {
        fprintf(stderr, "tridentrun: error reading hostfile %s\n", path);
        rc = -1;
    } else if (p->nhosts == 0) {
        fprintf(stderr, "tridentrun: hostfile %s lists no hosts\n", path);
        rc = -1;
    }
out:
    fclose(f);
    return rc;
}

/* Is COMMAND `trident train CONFIG ...` (or `trident bench CONFIG ...`, which
 * runs the same trainer)? Then its CONFIG and --set values. */
static int trainer_config(const opts *o, const char **config, const char **sets, int *n_sets) {
    *config = NULL;
    *n_sets = 0;
    if (o->cmd_argc < 2 || strcmp(base_name(o->cmd[0]), "trident") != 0 ||
        (strcmp(o->cmd[1], "train") != 0 && strcmp(o->cmd[1], "bench") != 0))
        return 0;
    for (int i = 2; i < o->cmd_argc; i++) {
        const char *a = o->cmd[i];
        if (!strcmp(a, "--set") && i + 1 < o->cmd_argc)
            sets[(*n_sets)++] = o->cmd[++i];
        else if (!strncmp(a, "--set=", 6))
            sets[(*n_sets)++] = a + 6;
        else if ((!strcmp(a, "--threads") || !strcmp(a, "--device") || !strcmp(a, "--steps") ||
                  !strcmp(a, "--stop-at-step")) &&
                 i + 1 < o->cmd_argc)
            i++;
        else if (a[0] != '-' && *config == NULL)
            *config = a;
    }
    return 1;
}

/* Is there an executable `name` in a directory of $PATH? */
static int on_path(const char *name) {
    const char *path = getenv("PATH");
    if (path == NULL) return 0;
    char *copy = xstrdup(path), *save = NULL;
    int found = 0;
    for (char *d = strtok_r(copy, ":", &save); d && !found; d = strtok_r(NULL, ":", &save)) {
        char *full = xprintf("%s/%s", *d ? d : ".", name);
        found = access(full, X_OK) == 0;
        free(full);
    }
    free(copy);
    return found;
}

/* COMMAND[0] as the ranks will run it (malloc'd): a bare `trident` that is
 * not on $PATH becomes the `trident` next to this tridentrun (the build
 * directory), so `build/tridentrun -- trident train ...` works uninstalled. */
static char *resolve_trident(const char *cmd0, const char *self) {
    if (strcmp(cmd0, "trident") != 0 || on_path(cmd0)) return xstrdup(cmd0);
    const char *slash = strrchr(self, '/');
    if (slash == NULL) return xstrdup(cmd0);
    char *full = xprintf("%.*s/trident", (int)(slash - self), self);
    if (access(full, X_OK) == 0) return full;
    free(full);
    return xstrdup(cmd0);
}

/* How many ranks each host runs (p->ranks), the world, and the most on one
 * host (p->nproc), honouring the host file's slots=N:
 *  - --nproc-per-node N: N ranks on every host (torchrun's meaning); a host
 *    whose slots are fewer than N is an error.
 *  - otherwise, when every host has slots=N: the ranks fill the hosts in file
 *    order up to their slots (Open MPI's default by-slot placement): all the
 *    slots for a command that is not the trainer (as mpirun without -np),
 *    tp x pp x dp ranks for the trainer (an error if they exceed the slots).
 *  - otherwise (no slots anywhere): tp x pp x dp spread evenly over the hosts
 *    for the trainer, 1 rank per host for any other command.
 * Some hosts with slots=N and some without is an error (ambiguous).
 * 0 or -1 (message printed). */
static int place_ranks(plan *p, const opts *o) {
    const char *hf = o->hostfile ? o->hostfile : "";
    long long need = p->have_layout ? (long long)p->tp * p->pp * p->dp : 0;
    int with_slots = 0;
    long long total_slots = 0;
    for (int h = 0; h < p->nhosts; h++) {
        with_slots += p->slots[h] > 0;
        total_slots += p->slots[h];
    }
    if (o->nproc > 0) {
        for (int h = 0; h < p->nhosts; h++) {
            if (p->slots[h] > 0 && p->slots[h] < o->nproc) {
                fprintf(stderr, "tridentrun: %s:%d: host %s has slots=%d, fewer than --nproc-per-node %d\n", hf,
                        p->lines[h], p->hosts[h], p->slots[h], o->nproc);
                return -1;
            }
            p->ranks[h] = o->nproc;
        }
    } else if (with_slots > 0) {
        for (int h = 0; h < p->nhosts; h++)
            if (p->slots[h] == 0) {
                fprintf(stderr,
                        "tridentrun: %s:%d: host %s has no slots=N but other hosts have; give slots=N for "
                        "every host, or --nproc-per-node\n",
                        hf, p->lines[h], p->hosts[h]);
                return -1;
            }
        long long want = p->have_layout ? need : total_slots;
        if (want > total_slots) {
            fprintf(stderr,
                    "tridentrun: parallel.tp (%d) x parallel.pp (%d) x parallel.dp (%d) = %lld ranks, but "
                    "hostfile %s has %lld slots\n",
                    p->tp, p->pp, p->dp, need, hf, total_slots);
            return -1;
        }
        for (int h = 0; h < p->nhosts; h++) {
            p->ranks[h] = (int)(want < p->slots[h] ? want : p->slots[h]);
            want -= p->ranks[h];
        }
    } else if (p->have_layout) {
        if (need % p->nhosts != 0) {
            fprintf(stderr,
                    "tridentrun: parallel.tp (%d) x parallel.pp (%d) x parallel.dp (%d) = %lld ranks "
                    "do not divide over %d hosts; give --nproc-per-node or slots=N in the hostfile\n",
                    p->tp, p->pp, p->dp, need, p->nhosts);
            return -1;
        }
        for (int h = 0; h < p->nhosts; h++) p->ranks[h] = (int)(need / p->nhosts);
    } else {
        for (int h = 0; h < p->nhosts; h++) p->ranks[h] = 1;
    }
    long long world = 0;
    p->nproc = 0;
    for (int h = 0; h < p->nhosts; h++) {
        world += p->ranks[h];
        if (p->ranks[h] > p->nproc) p->nproc = p->ranks[h];
    }
    if (world > INT_MAX) {
        fprintf(stderr, "tridentrun: %lld ranks over %d hosts is too many ranks\n", world, p->nhosts);
        return -1;
    }
    p->world = (int)world;
    if (p->have_layout && need != world) {
        fprintf(stderr,
                "tridentrun: parallel.tp (%d) x parallel.pp (%d) x parallel.dp (%d) = %lld, but "
                "--nproc-per-node %d x %d host%s = %d ranks\n",
                p->tp, p->pp, p->dp, need, p->nproc, p->nhosts, p->nhosts == 1 ? "" : "s", p->world);
        return -1;
    }
    return 0;
}

/* The host that runs rank r. */
static const char *host_of(const plan *p, int r) {
    for (int h = 0; h < p->nhosts; h++) {
        if (r < p->ranks[h]) return p->hosts[h];
        r -= p->ranks[h];
    }
    return "?";
}

/* 0 or -1 (message printed). */
static int make_plan(plan *p, const opts *o) {
    memset(p, 0, sizeof *p);
    if (o->hostfile) {
        if (read_hostfile(p, o->hostfile) != 0) return -1;
    } else {
        p->hosts = xcalloc(1, sizeof *p->hosts);
        p->slots = xcalloc(1, sizeof *p->slots);
        p->lines = xcalloc(1, sizeof *p->lines);
        p->hosts[0] = xstrdup("localhost");
        p->nhosts = 1;
    }
    p->ranks = xcalloc((size_t)p->nhosts, sizeof *p->ranks);

    const char *config = NULL;
    const char **sets = (const char **)xcalloc((size_t)o->cmd_argc, sizeof *sets);
    int n_sets = 0;
    int is_trainer = trainer_config(o, &config, sets, &n_sets);
    if (is_trainer) {
        if (config == NULL) {
            fprintf(stderr, "tridentrun: `trident %s` needs a CONFIG file\n", o->cmd[1]);
            free(sets);
            return -1;
        }
        tri_config cfg;
        if (tri_config_load(&cfg, config, n_sets, sets) != 0) {
            free(sets); /* the loader printed the reason */
            return -1;
        }
        p->have_layout = 1;
        p->tp = cfg.parallel.tp;
        p->pp = cfg.parallel.pp;
        p->dp = cfg.parallel.dp;
        if (!strcmp(o->cmd[1], "train")) {
            p->train_cfg = xcalloc(1, sizeof *p->train_cfg);
            *p->train_cfg = cfg;
        }
    }
    free(sets);

    if (place_ranks(p, o) != 0) return -1;

    p->cores = usable_cores();
    p->oversub = p->nproc > p->cores;
    const char *omp = getenv("OMP_NUM_THREADS");
    long t;
    if (omp != NULL && *omp != '\0') {
        p->user_threads = 1;
        p->threads = parse_int(omp, 1, 1 << 16, &t) == 0 ? (int)t : 1;
    } else {
        p->threads = p->cores / p->nproc;
        if (p->threads < 1) p->threads = 1;
    }
    /* Open MPI binds each rank to one core by default (up to 2 ranks):
     * wrong for a multi-threaded rank, impossible when oversubscribed. */
    p->bind_none = p->oversub || p->threads > 1;

    if (!o->dry_run && mkdir_p(o->log_dir) != 0) {
        fprintf(stderr, "tridentrun: cannot create --log-dir %s: %s\n", o->log_dir, strerror(errno));
        return -1;
    }
    if (o->dry_run) {
        /* nothing is created: show where the logs would go */
        char cwd[PATH_MAX];
        if (o->log_dir[0] == '/' || getcwd(cwd, sizeof cwd) == NULL) cwd[0] = '\0';
        int len = snprintf(p->log_dir, sizeof p->log_dir, "%s%s%s", cwd, cwd[0] ? "/" : "", o->log_dir);
        if (len < 0 || (size_t)len >= sizeof p->log_dir) {
            fprintf(stderr, "tridentrun: --log-dir %s: path too long\n", o->log_dir);
            return -1;
        }
    } else if (realpath(o->log_dir, p->log_dir) == NULL) {
        fprintf(stderr, "tridentrun: --log-dir %s: %s\n", o->log_dir, strerror(errno));
        return -1;
    }
    ssize_t n = readlink("/proc/self/exe", p->self, sizeof p->self - 1);
    if (n <= 0) {
        fprintf(stderr, "tridentrun: cannot find its own executable: %s\n", strerror(errno));
        return -1;
    }
    p->self[n] = '\0';
    p->cmd0 = resolve_trident(o->cmd[0], p->self);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* The mpirun command                                                       */

typedef struct argv_buf {
    char **v;
    int n, cap;
} argv_buf;

static void av_push(argv_buf *a, char *owned) {
    if (a->n + 2 > a->cap) {
        int cap = a->cap ? 2 * a->cap : 64;
        char **v = realloc(a->v, (size_t)cap * sizeof *v);
        if (v == NULL) die_oom();
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = owned;
    a->v[a->n] = NULL;
}

static void av_free(argv_buf *a) {
    for (int i = 0; i < a->n; i++) free(a->v[i]);
    free(a->v);
    memset(a, 0, sizeof *a);
}

static int has_resume(const opts *o) {
    for (int i = 1; i < o->cmd_argc; i++)
        if (!strcmp(o->cmd[i], "--resume")) return 1;
    return 0;
}

static void build_command(argv_buf *a, const opts *o, const plan *p, int attempt) {
    memset(a, 0, sizeof *a);
    av_push(a, xstrdup(o->mpirun));
    av_push(a, xstrdup("-np"));
    av_push(a, xprintf("%d", p->world));
    if (o->hostfile) {
        /* explicit slots per host (the ranks placed there, in order): mpirun's
         * by-slot mapping then puts exactly the planned ranks on each host */
        size_t len = 1;
        for (int h = 0; h < p->nhosts; h++) len += strlen(p->hosts[h]) + 16;
        char *hl = xcalloc(len, 1);
        size_t at = 0;
        for (int h = 0; h < p->nhosts; h++)
            if (p->ranks[h] > 0)
                at += (size_t)snprintf(hl + at, len - at, "%s%s:%d", at ? "," : "", p->hosts[h], p->ranks[h]);
        av_push(a, xstrdup("-H"));
        av_push(a, hl);
    }
    if (geteuid() == 0) av_push(a, xstrdup("--allow-run-as-root"));
    if (p->oversub) av_push(a, xstrdup("--oversubscribe"));
    if (p->bind_none) {
        av_push(a, xstrdup("--bind-to"));
        av_push(a, xstrdup("none"));
    }
    av_push(a, xstrdup("-x"));
    av_push(a, p->user_threads ? xstrdup("OMP_NUM_THREADS") : xprintf("OMP_NUM_THREADS=%d", p->threads));
    av_push(a, xstrdup("-x"));
    av_push(a, getenv("OMP_WAIT_POLICY") ? xstrdup("OMP_WAIT_POLICY") : xstrdup("OMP_WAIT_POLICY=PASSIVE"));
    for (int i = 0; i < o->n_extra; i++) av_push(a, xstrdup(o->extra[i]));
    av_push(a, xstrdup(p->self));
    av_push(a, xstrdup("--rank-exec"));
    av_push(a, xstrdup("--log-dir"));
    av_push(a, xstrdup(p->log_dir));
    if (o->tee) av_push(a, xstrdup("--tee"));
    if (attempt > 0) {
        av_push(a, xstrdup("--attempt"));
        av_push(a, xprintf("%d", attempt));
    }
    av_push(a, xstrdup("--"));
    av_push(a, xstrdup(p->cmd0));
    for (int i = 1; i < o->cmd_argc; i++) av_push(a, xstrdup(o->cmd[i]));
    if (attempt > 0 && !has_resume(o)) av_push(a, xstrdup("--resume"));
}

/* Prints one argument so that a POSIX shell reads it back unchanged. */
static void print_quoted(FILE *f, const char *s) {
    int plain = *s != '\0';
    for (const char *c = s; *c; c++)
        if (!isalnum((unsigned char)*c) && !strchr("@%+=:,./_-", *c)) plain = 0;
    if (plain) {
        fputs(s, f);
        return;
    }
    fputc('\'', f);
    for (const char *c = s; *c; c++) {
        if (*c == '\'')
            fputs("'\\''", f);
        else
            fputc(*c, f);
    }
    fputc('\'', f);
}

static void print_command(FILE *f, const argv_buf *a) {
    for (int i = 0; i < a->n; i++) {
        if (i) fputc(' ', f);
        print_quoted(f, a->v[i]);
    }
    fputc('\n', f);
}

/* "chunk 0: layers 0-3 +embedding" */
static void print_chunk(FILE *f, int c, const tri_chunk_spec *sp) {
    fprintf(f, "    chunk %d: ", c);
    if (sp->n_layers == 1)
        fprintf(f, "layer %d", sp->layers[0]);
    else
        fprintf(f, "layers %d-%d", sp->layers[0], sp->layers[sp->n_layers - 1]);
    fprintf(f, "%s%s", sp->has_embedding ? " +embedding" : "", sp->has_head ? " +head" : "");
}

/* What each rank of `trident train` holds and keeps: its pipeline stage, the
 * layers of its chunks, its parameter bytes (fp32) and the saved activations
 * the schedule's peak keeps (src/plan/stage_plan.h), plus the schedule's line. A
 * config the trainer would refuse gets its reason (on stderr) instead. */
static void print_stages(FILE *f, const plan *p) {
    const tri_config *cfg = p->train_cfg;
    int pp = cfg->parallel.pp;
    tri_stage_plan *sps = xcalloc((size_t)pp, sizeof *sps);
    int ok = 1;
    fflush(f);
    if (tri_gpt_check_layout(&cfg->model, cfg->parallel.tp, pp, cfg->parallel.vpp, cfg->parallel.pp_layout) != 0)
        ok = 0;
    for (int s = 0; ok && s < pp; s++)
        if (tri_stage_plan_init(&sps[s], cfg, s) != 0) ok = 0;
    if (!ok) {
        fprintf(f, "pipeline: the trainer would refuse this config (the reason is the trident: line on stderr)\n");
    } else {
        int policy = tri_recompute_parse(cfg->train.recompute);
        tri_recompute pol = policy < 0 ? TRI_RECOMPUTE_NONE : (tri_recompute)policy;
        size_t B = (size_t)cfg->train.micro_batch, T = (size_t)cfg->model.seq_len;
        fprintf(f,
                "pipeline: schedule %s, parallel.pp %d x vpp %d, m = %d micro-batches per step per dp rank, bubble "
                "%.3f (simulated, unit costs)\n",
                tri_sched_name(sps[0].kind), pp, cfg->parallel.vpp, sps[0].m, sps[0].bubble);
        for (int r = 0; r < p->world; r++) {
            tri_mesh m;
            char err[256];
            if (tri_mesh_init(&m, p->world, r, p->tp, p->pp, p->dp, err, sizeof err) != 0) break;
            const tri_stage_plan *sp = &sps[m.pp_rank];
            tri_gpt g;
            if (tri_gpt_describe(&g, &cfg->model, cfg->parallel.tp, m.tp_rank, sp->specs, sp->n_chunks) != 0) break;
            size_t params = tri_gpt_local_elems(&g) * sizeof(float);
            size_t saved = tri_stage_plan_saved_bytes(sp, &g, B, T, pol);
            size_t ws = tri_workspace_bytes(&g, B, T, pol);
            char a[32], b[32], c[32];
            fprintf(f,
                    "rank %d: stage %d, parameters %s (%zu bytes), saved activations %s (%zu bytes), workspace %s "
                    "(%zu bytes)\n",
                    r, m.pp_rank, tri_size_human(a, sizeof a, (double)params), params,
                    tri_size_human(b, sizeof b, (double)saved), saved, tri_size_human(c, sizeof c, (double)ws), ws);
            for (int k = 0; k < sp->n_chunks; k++) {
                size_t slot = tri_slot_bytes(&g, k, B, T, pol, sp->split, NULL);
                print_chunk(f, k, &sp->specs[k]);
                fprintf(f, ": %d slot%s x %s (%zu bytes)\n", sp->slots[k], sp->slots[k] == 1 ? "" : "s",
                        tri_size_human(a, sizeof a, (double)slot), slot);
            }
            tri_gpt_free(&g);
        }
    }
    for (int s = 0; s < pp; s++) tri_stage_plan_free(&sps[s]);
    free(sps);
}

static void print_plan(FILE *f, const plan *p, const argv_buf *cmd) {
    int uneven = 0;
    for (int h = 0; h < p->nhosts; h++) uneven |= p->ranks[h] != p->nproc;
    if (uneven) {
        fprintf(f, "tridentrun: %d rank%s =", p->world, p->world == 1 ? "" : "s");
        for (int h = 0; h < p->nhosts; h++) fprintf(f, "%s %d on %s", h ? " +" : "", p->ranks[h], p->hosts[h]);
    } else {
        fprintf(f, "tridentrun: %d rank%s = %d per host x %d host%s", p->world, p->world == 1 ? "" : "s", p->nproc,
                p->nhosts, p->nhosts == 1 ? "" : "s");
    }
    if (p->have_layout) fprintf(f, "; parallel.tp %d x pp %d x dp %d", p->tp, p->pp, p->dp);
    fprintf(f, "; %d core%s here, OMP_NUM_THREADS=%d%s\n", p->cores, p->cores == 1 ? "" : "s", p->threads,
            p->user_threads ? " (yours)" : "");
    fprintf(f, "%6s  %-24s %4s %4s %4s  %s\n", "rank", "host", "tp", "dp", "pp", "log");
    for (int r = 0; r < p->world; r++) {
        fprintf(f, "%6d  %-24s ", r, host_of(p, r));
        tri_mesh m;
        char err[256];
        if (p->have_layout && tri_mesh_init(&m, p->world, r, p->tp, p->pp, p->dp, err, sizeof err) == 0)
            fprintf(f, "%4d %4d %4d", m.tp_rank, m.dp_rank, m.pp_rank);
        else
            fprintf(f, "%4s %4s %4s", "-", "-", "-");
        fprintf(f, "  %s/rank_%d.log\n", p->log_dir, r);
    }
    if (p->train_cfg) print_stages(f, p);
    fprintf(f, "mpirun command:\n");
    print_command(f, cmd);
}

/* ------------------------------------------------------------------------ */
/* Running mpirun and reading its report                                    */

typedef struct run_result {
    int exited, code, signo; /* mpirun's own status                      */
    int exec_errno;          /* mpirun could not be started              */
    char *report;            /* mpirun's stderr (malloc'd, NUL-ended)    */
    size_t report_len;
    int killed; /* the ranks outlasted --grace-s: SIGKILLed */
} run_result;

/* ------------------------------------------------------------------------ */
/* The wrappers' status files                                               */

/* One rank's DIR/rank_<r>.status (see write_status). */
typedef struct status_rec {
    enum { ST_NONE, ST_RUNNING, ST_EXIT, ST_SIGNAL } state;
    double t;           /* when it entered that state                     */
    long value;         /* running: the wrapper's pid; exit: code; signal: n */
    char host[256];     /* running: the wrapper's host                    */
    double first_error; /* when the rank wrote its first error line; 0: never */
} status_rec;

/* Reads rank r's status file; st->state is ST_NONE when it is missing or
 * unreadable. */
static void read_status(const plan *p, int r, status_rec *st) {
    memset(st, 0, sizeof *st);
    char *path = xprintf("%s/rank_%d.status", p->log_dir, r);
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
            st->state = ST_RUNNING;
        else if (!strcmp(what, "exit") && k >= 3)
            st->state = ST_EXIT;
        else if (!strcmp(what, "signal") && k >= 3)
            st->state = ST_SIGNAL;
    }
    fclose(f);
}

/* SIGKILLs every rank on this host whose command still runs: the wrapper
 * leads its rank's process group (mpirun makes one per rank), so the
 * command and anything it started go too. Returns how many. */
static int kill_local_ranks(const plan *p) {
    char me[256] = "";
    if (gethostname(me, sizeof me - 1) != 0) return 0;
    int n = 0;
    for (int r = 0; r < p->world; r++) {
        status_rec st;
        read_status(p, r, &st);
        if (st.state != ST_RUNNING || st.value <= 1 || strcmp(st.host, me) != 0) continue;
        if (kill(-(pid_t)st.value, SIGKILL) == 0 || kill((pid_t)st.value, SIGKILL) == 0) n++;
    }
    return n;
}

static double mono_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Milliseconds from now to t for poll(), at least 0, at most cap. */
static int ms_until(double t, double now, int cap) {
    double ms = (t - now) * 1e3 + 1;
    if (ms < 0) return 0;
    return ms > cap ? cap : (int)ms;
}

/* After the grace period, how long mpirun gets to end the job before it is
 * killed as well. */
#define MPIRUN_KILL_WAIT_S 10.0

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
    char *s = realloc(r->report, r->report_len + n + 1);
    if (s == NULL) die_oom();
    memcpy(s + r->report_len, buf, n);
    r->report = s;
    r->report_len += n;
    r->report[r->report_len] = '\0';
}

static void run_result_free(run_result *r) {
    if (r == NULL) return;
    free(r->report);
    memset(r, 0, sizeof *r);
}

/* Runs mpirun, relaying its stdout to ours and its stderr to ours and to
 * mpirun_log (may be -1). Once a stop request (SIGINT/SIGTERM/SIGHUP) has
 * come, the ranks get grace_s seconds to save and stop; then every rank on
 * this host is SIGKILLed and mpirun told to stop (SIGTERM: it takes down the
 * ranks on other hosts), and MPIRUN_KILL_WAIT_S later mpirun itself is
 * SIGKILLed. Returns 0 when it ran (status in *r), -1 when it could not be
 * started (r->exec_errno). */
static int run_mpirun(const argv_buf *cmd, int mpirun_log, const plan *p, double grace_s, run_result *r) {
    memset(r, 0, sizeof *r);
    int out[2], err[2], ex[2];
    if (pipe(out) != 0 || pipe(err) != 0 || pipe2(ex, O_CLOEXEC) != 0) {
        fprintf(stderr, "tridentrun: pipe: %s\n", strerror(errno));
        r->exec_errno = errno;
        return -1;
    }
    pid_t parent = getpid();
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        r->exec_errno = errno;
        fprintf(stderr, "tridentrun: fork: %s\n", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        /* own process group: a terminal's Ctrl-C reaches mpirun once, via us */
        (void)setpgid(0, 0);
        (void)prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) _exit(1);
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
        (void)write_all(ex[1], (const char *)&e, sizeof e);
        _exit(127);
    }
    g_child_pid = pid;
    if (g_signal) kill(pid, pass_on((int)g_signal)); /* arrived before the pid was known */
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
    while (open_fds > 0) {
        /* wake at least twice a second: a signal that lands just before
         * poll() is noticed without waiting for output */
        int timeout_ms = 500;
        double now = mono_now();
        if (g_requests > 0 && stop_deadline < 0) stop_deadline = now + grace_s;
        if (stop_deadline >= 0 && !r->killed)
            timeout_ms = ms_until(stop_deadline, now, 500);
        else if (r->killed && !mpirun_killed)
            timeout_ms = ms_until(kill_deadline, now, 500);
        int n = poll(fds, 2, timeout_ms);
        now = mono_now();
        if (stop_deadline >= 0 && !r->killed && now >= stop_deadline) {
            fprintf(stderr,
                    "tridentrun: the ranks did not stop within --grace-s %g s of the stop request; "
                    "killing them (SIGKILL)\n",
                    grace_s);
            r->killed = 1;
            kill_local_ranks(p);
            kill(pid, SIGTERM);
            kill_deadline = now + MPIRUN_KILL_WAIT_S;
        } else if (r->killed && !mpirun_killed && now >= kill_deadline) {
            fprintf(stderr, "tridentrun: mpirun did not end %g s after that; killing it\n", MPIRUN_KILL_WAIT_S);
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
                (void)write_all(STDOUT_FILENO, buf, (size_t)k);
            } else {
                (void)write_all(STDERR_FILENO, buf, (size_t)k);
                if (mpirun_log >= 0) (void)write_all(mpirun_log, buf, (size_t)k);
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
    g_child_pid = 0;
    if (WIFEXITED(st)) {
        r->exited = 1;
        r->code = WEXITSTATUS(st);
    } else if (WIFSIGNALED(st)) {
        r->signo = WTERMSIG(st);
    }
    return r->exec_errno ? -1 : 0;
}

/* The first failing rank as Open MPI reports it. Fills *rank, and *code or
 * *signo (exactly one >= 0 meaningful; *improper when the rank exited 0
 * without finalising MPI). Returns 1 when found. */
static int parse_failure(const char *report, int *rank, int *code, int *signo, int *improper) {
    *rank = -1;
    *code = -1;
    *signo = -1;
    *improper = 0;
    if (report == NULL) return 0;
    /* collapse every run of whitespace: mpirun wraps its messages */
    size_t n = strlen(report);
    char *t = xcalloc(n + 1, 1);
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
        sscanf(s, "MPI_ABORT was invoked on rank %d in communicator %*s with errorcode %d", rank, code) == 2) {
        found = 1;
    } else if ((s = strstr(t, "process rank ")) != NULL && strstr(s, "exited on signal") != NULL &&
               sscanf(s, "process rank %d with PID %*d on node %*s exited on signal %d", rank, signo) == 2) {
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
        if (last && ec && sscanf(ec, "Exit code: %d", code) == 1) {
            *rank = atoi(last);
            found = 1;
        }
    } else if ((s = strstr(t, "process rank ")) != NULL && strstr(s, "exiting improperly") != NULL &&
               sscanf(s, "process rank %d", rank) == 1) {
        *code = 0;
        *improper = 1;
        found = 1;
    }
    free(t);
    if (!found) *rank = -1;
    return found;
}

/* The first failing rank from the wrappers' DIR/rank_<r>.status files (those
 * of ranks on this host, or all with a shared file system). A rank failed
 * when its command ended with a non-zero exit or a signal, or when it wrote an
 * error line and was killed before its end was recorded. Its failure time is
 * the earlier of its first error line and its end, and the earliest wins:
 * ranks that fail because another did (mpirun's teardown, a collective that
 * cannot finish, a watchdog) fail later, and when several ranks abort together
 * after agreeing that something failed, the one that said what failed wrote
 * its error line first (mpirun's report may name any of them, often one
 * whose log is empty). *code and *signo are -1 when unknown. Returns 1 when
 * one was found. */
static int first_failure_from_status(const plan *p, int *rank, int *code, int *signo) {
    double best = 0;
    *rank = -1;
    for (int r = 0; r < p->world; r++) {
        status_rec st;
        read_status(p, r, &st);
        int ended_badly = (st.state == ST_EXIT && st.value != 0) || st.state == ST_SIGNAL;
        if (!ended_badly && !(st.state == ST_RUNNING && st.first_error > 0)) continue;
        double t = ended_badly ? st.t : st.first_error;
        if (st.first_error > 0 && st.first_error < t) t = st.first_error;
        if (*rank < 0 || t < best) {
            best = t;
            *rank = r;
            *code = st.state == ST_EXIT ? (int)st.value : -1;
            *signo = st.state == ST_SIGNAL ? (int)st.value : -1;
        }
    }
    return *rank >= 0;
}

/* Removes this host's status files of an earlier attempt. */
static void clear_status(const plan *p) {
    for (int r = 0; r < p->world; r++) {
        char *path = xprintf("%s/rank_%d.status", p->log_dir, r);
        (void)unlink(path);
        free(path);
    }
}

/* Prints the last `lines` lines of the log, from its last attempt only. */
static void print_tail(FILE *f, const char *path, int lines) {
    FILE *in = fopen(path, "rb");
    if (in == NULL) {
        fprintf(f, "tridentrun: (no log at %s: %s)\n", path, strerror(errno));
        return;
    }
    char *text = NULL;
    size_t len = 0, cap = 0;
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0) {
        if (len + n + 1 > cap) {
            cap = (len + n + 1) * 2;
            char *t = realloc(text, cap);
            if (t == NULL) die_oom();
            text = t;
        }
        memcpy(text + len, buf, n);
        len += n;
    }
    fclose(in);
    if (text == NULL) {
        fprintf(f, "tridentrun: (%s is empty)\n", path);
        return;
    }
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
        fprintf(f, "tridentrun: (%s has no output from this attempt)\n", path);
    } else {
        fprintf(f, "tridentrun: last lines of %s:\n", path);
        for (const char *c = from; c < end;) {
            const char *nl = memchr(c, '\n', (size_t)(end - c));
            size_t l = nl ? (size_t)(nl - c) : (size_t)(end - c);
            fprintf(f, "  | %.*s\n", (int)l, c);
            c += l + 1;
        }
    }
    free(text);
}

static int run(const opts *o, plan *p) {
    char *mlog_path = xprintf("%s/mpirun.log", p->log_dir);
    int final = 1;
    for (int attempt = 0; attempt <= o->max_restarts; attempt++) {
        argv_buf cmd;
        build_command(&cmd, o, p, attempt);
        clear_status(p);
        int mlog = open(mlog_path, O_WRONLY | O_CREAT | O_CLOEXEC | (attempt ? O_APPEND : O_TRUNC), 0644);
        if (mlog < 0) fprintf(stderr, "tridentrun: warning: cannot write %s: %s\n", mlog_path, strerror(errno));
        run_result r;
        int rc = run_mpirun(&cmd, mlog, p, o->grace_s, &r);
        if (mlog >= 0) close(mlog);
        av_free(&cmd);
        if (rc != 0) {
            fprintf(stderr, "tridentrun: cannot run '%s': %s%s\n", o->mpirun,
                    strerror(r.exec_errno ? r.exec_errno : EIO),
                    r.exec_errno == ENOENT ? " (install Open MPI, or give --mpirun PATH)" : "");
            run_result_free(&r);
            final = 127;
            break;
        }
        if (g_signal) {
            fprintf(stderr, "tridentrun: stopped by signal %d (%s); %s\n", (int)g_signal, strsignal((int)g_signal),
                    r.killed ? "the ranks outlasted --grace-s and were killed" : "the ranks were told to stop");
            final = 128 + (int)g_signal;
            run_result_free(&r);
            break;
        }
        if (r.exited && r.code == 0) {
            final = 0;
            run_result_free(&r);
            break;
        }
        int rank, code, signo, improper = 0, found = 0;
        char what[128];
        /* The status files carry times: the first failure in them wins. mpirun's
         * report covers the rest (ranks on other hosts without a shared log
         * dir), and says how a rank ended when its status could not. */
        if (first_failure_from_status(p, &rank, &code, &signo)) {
            int rr, rc2, rs2, imp;
            if (code < 0 && signo < 0 && parse_failure(r.report, &rr, &rc2, &rs2, &imp) && rr == rank) {
                code = rc2;
                signo = rs2;
                improper = imp;
            }
            found = 1;
        } else {
            found = parse_failure(r.report, &rank, &code, &signo, &improper);
        }
        if (found) {
            if (signo >= 0) {
                snprintf(what, sizeof what, "rank %d failed (signal %d, %s)", rank, signo, strsignal(signo));
                final = 128 + signo;
            } else if (improper) {
                snprintf(what, sizeof what, "rank %d failed (exit 0 without finishing MPI)", rank);
                final = 1;
            } else if (code >= 0) {
                snprintf(what, sizeof what, "rank %d failed (exit %d)", rank, code);
                final = code > 0 && code < 256 ? code : 1;
            } else {
                snprintf(what, sizeof what, "rank %d failed (it wrote an error, then was stopped)", rank);
                final = 1;
            }
        } else {
            rank = -1;
            if (r.exited) {
                snprintf(what, sizeof what, "mpirun failed (exit %d)", r.code);
                final = r.code;
            } else {
                snprintf(what, sizeof what, "mpirun died (signal %d)", r.signo);
                final = 128 + r.signo;
            }
        }
        run_result_free(&r);
        fprintf(stderr, "tridentrun: %s; the job was stopped (mpirun's report: %s)\n", what, mlog_path);
        if (rank >= 0) {
            char *lp = xprintf("%s/rank_%d.log", p->log_dir, rank);
            print_tail(stderr, lp, TAIL_LINES);
            free(lp);
        }
        if (attempt < o->max_restarts) {
            fprintf(stderr, "tridentrun: %s; restart %d of %d\n", what, attempt + 1, o->max_restarts);
            fflush(stderr);
        }
    }
    free(mlog_path);
    return final;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--rank-exec")) return rank_exec_main(argc, argv);

    opts o;
    int prc = parse_opts(argc, argv, &o);
    if (prc != 0) {
        free(o.extra);
        return prc > 0 ? 0 : 2;
    }
    plan p;
    if (make_plan(&p, &o) != 0) {
        plan_free(&p);
        free(o.extra);
        return 2;
    }
    if (o.dry_run) {
        argv_buf cmd;
        build_command(&cmd, &o, &p, 0);
        print_plan(stdout, &p, &cmd);
        if (o.max_restarts > 0) {
            av_free(&cmd);
            build_command(&cmd, &o, &p, 1);
            printf("on restart (up to %d):\n", o.max_restarts);
            print_command(stdout, &cmd);
        }
        av_free(&cmd);
        plan_free(&p);
        free(o.extra);
        return 0;
    }

    if (geteuid() == 0) {
        /* the environment form of --allow-run-as-root, for mpiruns that check it */
        setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
        setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; /* no SA_RESTART: poll() returns EINTR */
    g_graceful = 1;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    int rc = run(&o, &p);
    plan_free(&p);
    free(o.extra);
    return rc;
}
