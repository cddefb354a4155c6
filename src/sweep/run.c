/* Running a sweep's points: each one a child `trident train` (through
 * tridentrun for more than one rank) writing into its run directory's
 * train.log, with SIGINT and SIGTERM passed on to it (src/sweep/sweep.h). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/err.h"
#include "base/exit.h"
#include "base/file.h"
#include "base/fs.h"
#include "base/proc.h"
#include "model/gpt.h"
#include "sweep/sweep.h"

#define TAIL_LINES 15

/* ------------------------------------------------------------------------ */
/* Signals: passed on to the running point                                   */

/* Signal-handler state, the only writable file-scope data here: the signal
 * that stopped the sweep (0: none), and the pid of the running point (0:
 * none) that on_signal passes it on to. */
static volatile sig_atomic_t g_signal = 0;
static volatile sig_atomic_t g_child = 0;

static void on_signal(int sig) {
    g_signal = sig;
    pid_t pid = (pid_t)g_child;
    if (pid > 0) kill(pid, sig);
}

/* ------------------------------------------------------------------------ */
/* The programs and the command lines                                        */

int tri_sweep_find_programs(tri_sweep *sw) {
    char *slash = tri_self_exe(sw->self, sizeof sw->self) == 0 ? strrchr(sw->self, '/') : NULL;
    if (slash == NULL) return tri_error("sweep: cannot find this program (/proc/self/exe)");
    snprintf(sw->runner, sizeof sw->runner, "%.*s/tridentrun", (int)(slash - sw->self), sw->self);
    return 0;
}

int tri_sweep_check_runner(const tri_sweep *sw) {
    int need_runner = 0;
    for (int i = 0; i < sw->n_points; i++) need_runner |= tri_sweep_ranks(&sw->points[i].cfg) > 1;
    if (need_runner && access(sw->runner, X_OK) != 0)
        return tri_error("%s: points with tp*pp*dp > 1 run through tridentrun, but %s is missing (%s)", sw->file,
                         sw->runner, strerror(errno));
    return 0;
}

int tri_sweep_point_argv(const tri_sweep *sw, const tri_sweep_point *p, int resume, const char **av, char *ranks_dir,
                         char *threads) {
    int n = 0;
    if (tri_sweep_ranks(&p->cfg) > 1) {
        snprintf(ranks_dir, TRI_PATH_MAX + 16, "%s/ranks", p->dir);
        av[n++] = sw->runner;
        av[n++] = "--log-dir";
        av[n++] = ranks_dir;
        av[n++] = "--";
    }
    av[n++] = sw->self;
    av[n++] = "train";
    av[n++] = sw->base;
    for (int i = 0; i < p->n_sets; i++) {
        av[n++] = "--set";
        av[n++] = p->sets[i];
    }
    if (sw->threads > 0) {
        snprintf(threads, 16, "%d", sw->threads);
        av[n++] = "--threads";
        av[n++] = threads;
    }
    if (resume) av[n++] = "--resume";
    av[n] = NULL;
    return n;
}

void tri_sweep_print_argv(FILE *f, const char *const *av) {
    for (int i = 0; av[i]; i++) {
        const char *a = av[i];
        int plain = a[0] != '\0';
        for (const char *c = a; *c; c++)
            if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-+=/,:", *c)) plain = 0;
        fprintf(f, plain ? "%s%s" : "%s'%s'", i ? " " : "", a);
    }
    fprintf(f, "\n");
}

/* ------------------------------------------------------------------------ */
/* Running one point                                                        */

/* The last `lines` lines of a file to stderr, as they are (the point's own
 * output, not a message of ours). */
static void print_tail(const char *path, int lines) {
    size_t len = 0;
    char *text = tri_slurp(path, "log", 0, &len);
    if (text == NULL) return;
    size_t start = len > 0 && text[len - 1] == '\n' ? len - 1 : len;
    for (int seen = 0; start > 0; start--)
        if (text[start - 1] == '\n' && ++seen == lines) break;
    fputs(text + start, stderr);
    free(text);
}

/* Runs the point to its end. Returns 0 when it ran (p->exit_code says how it
 * ended), -1 when it could not be started (printed). */
static int run_point(const tri_sweep *sw, tri_sweep_point *p) {
    if (tri_sweep_rundir_open(sw, p) != 0) return -1;
    const char *av[TRI_SWEEP_ARGV_MAX];
    char ranks_dir[TRI_PATH_MAX + 16], threads[16];
    tri_sweep_point_argv(sw, p, p->state == TRI_POINT_RESUME, av, ranks_dir, threads);
    char log[TRI_PATH_MAX + 16];
    snprintf(log, sizeof log, "%s/train.log", p->dir);
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return tri_error("%s: cannot open: %s", log, strerror(errno));
    FILE *lf = fdopen(dup(fd), "a");
    if (lf) {
        time_t now = time(NULL);
        char ts[64];
        strftime(ts, sizeof ts, "%Y-%m-%d %H:%M:%S", localtime(&now));
        fprintf(lf, "== trident sweep %s, %s: ", sw->file, ts);
        tri_sweep_print_argv(lf, av);
        fclose(lf);
    }
    double t0 = tri_now_s();
    /* its own process group: a terminal's Ctrl-C reaches the point once, through us */
    tri_spawn_opts o = {.out_fd = fd, .new_group = 1, .default_signals = 1, .fail_pre = "sweep: "};
    pid_t pid = tri_proc_spawn(av, &o);
    if (pid < 0) {
        int err = errno;
        close(fd);
        return tri_error("sweep: fork: %s", strerror(err));
    }
    close(fd);
    g_child = pid;
    int code = tri_proc_wait(pid);
    g_child = 0;
    p->ran = 1;
    p->wall_s = tri_now_s() - t0;
    p->exit_code = code < 0 ? TRI_EXIT_FAILURE : code;
    if (p->exit_code == 0) {
        if (tri_sweep_rundir_done(p) != 0) {
            p->exit_code = TRI_EXIT_FAILURE;
            return 0;
        }
        p->state = TRI_POINT_DONE;
    } else {
        p->state = TRI_POINT_RESUME; /* it started: the next sweep resumes it */
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* The sweep                                                                */

int tri_sweep_run(tri_sweep *sw, tri_sweep_result *r) {
    memset(r, 0, sizeof *r);
    if (tri_mkdir_p_named("out", sw->out) != 0) return -1;

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    for (int i = 0; i < sw->n_points && !g_signal; i++) {
        tri_sweep_point *p = &sw->points[i];
        if (p->state == TRI_POINT_DONE) {
            printf("[%d/%d] %s: done already, not rerun\n", i + 1, sw->n_points, p->name);
            r->n_skip++;
            continue;
        }
        int ranks = tri_sweep_ranks(&p->cfg);
        printf("[%d/%d] %s: %s (%zu parameters, %d rank%s; output in %s/train.log)\n", i + 1, sw->n_points, p->name,
               p->state == TRI_POINT_RESUME ? "resuming" : "running", tri_gpt_num_params(&p->cfg.model), ranks,
               ranks > 1 ? "s" : "", p->dir);
        fflush(stdout);
        if (run_point(sw, p) != 0) {
            r->failed = 1;
            break;
        }
        r->n_run++;
        tri_sweep_stats s;
        tri_sweep_read_stats(p->dir, &s);
        if (p->exit_code == 0) {
            printf("[%d/%d] %s: ok in %.1f s: step %d, loss %.4f", i + 1, sw->n_points, p->name, p->wall_s,
                   s.last_step, s.final_loss);
            if (!isnan(s.final_val)) printf(", val loss %.4f", s.final_val);
            printf("\n");
        } else {
            r->n_fail++;
            tri_error("sweep: point %s failed with exit code %d after %.1f s; the end of %s/train.log:", p->name,
                      p->exit_code, p->wall_s, p->dir);
            char log[TRI_PATH_MAX + 16];
            snprintf(log, sizeof log, "%s/train.log", p->dir);
            print_tail(log, TAIL_LINES);
        }
        if (tri_sweep_write_summary(sw) != 0) r->failed = 1;
    }
    if (tri_sweep_write_summary(sw) != 0) r->failed = 1;
    for (int i = 0; i < sw->n_points; i++)
        r->n_pending += sw->points[i].state != TRI_POINT_DONE && !sw->points[i].ran;
    r->signal = (int)g_signal;
    return 0;
}
