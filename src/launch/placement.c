/* The launcher's plan (src/launch/launch.h): the hosts of a host file, the
 * ranks placed on them, the trainer's layout from its config, and the
 * environment the ranks get. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "base/file.h"
#include "base/fs.h"
#include "base/proc.h"
#include "base/str.h"
#include "config/config.h"
#include "launch/launch.h"

int tri_launch_parse_int(const char *s, long min, long max, long *out) {
    if (s == NULL || *s == '\0') return -1;
    errno = 0;
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < min || v > max) return -1;
    *out = v;
    return 0;
}

void tri_launch_plan_free(tri_launch_plan *p) {
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

int tri_launch_hostfile_read(tri_launch_plan *p, const char *path) {
    char why[256];
    int fd = tri_open_regular_why(path, NULL, why, sizeof why); /* a named pipe is refused, not waited on */
    FILE *f = fd < 0 ? NULL : fdopen(fd, "r");
    if (f == NULL) {
        tri_error("cannot read hostfile %s: %s", path, fd < 0 ? why : strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    p->hosts = tri_xcalloc(TRI_LAUNCH_MAX_HOSTS, sizeof *p->hosts);
    p->slots = tri_xcalloc(TRI_LAUNCH_MAX_HOSTS, sizeof *p->slots);
    p->lines = tri_xcalloc(TRI_LAUNCH_MAX_HOSTS, sizeof *p->lines);
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
                rc = tri_error("%s:%d: host '%s' is listed twice", path, lineno, s);
                goto out;
            }
        if (p->nhosts == TRI_LAUNCH_MAX_HOSTS) {
            rc = tri_error("%s:%d: more than %d hosts", path, lineno, TRI_LAUNCH_MAX_HOSTS);
            goto out;
        }
        int slots = 0;
        for (char *w = strtok_r(NULL, " \t\r\n\v\f", &save); w; w = strtok_r(NULL, " \t\r\n\v\f", &save)) {
            long v;
            if (strncmp(w, "slots=", 6) == 0 && slots == 0 && tri_launch_parse_int(w + 6, 1, 1 << 20, &v) == 0) {
                slots = (int)v;
                continue;
            }
            rc = tri_error("%s:%d: '%s': expected \"HOST [slots=N]\" with N >= 1, once", path, lineno, w);
            goto out;
        }
        p->lines[p->nhosts] = lineno;
        p->slots[p->nhosts] = slots;
        p->hosts[p->nhosts++] = tri_xstrdup(s);
    }
    if (ferror(f))
        rc = tri_error("error reading hostfile %s", path);
    else if (p->nhosts == 0)
        rc = tri_error("hostfile %s lists no hosts", path);
out:
    fclose(f);
    return rc;
}

/* Is COMMAND `trident train CONFIG ...` (or `trident bench CONFIG ...`, which
 * runs the same trainer)? Then its CONFIG (*config, NULL if none) and --set
 * values (sets: room for o->cmd_argc). */
static int trainer_config(const tri_launch_opts *o, const char **config, const char **sets, int *n_sets) {
    *config = NULL;
    *n_sets = 0;
    if (o->cmd_argc < 2 || strcmp(tri_base_name(o->cmd[0]), "trident") != 0 ||
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
    char *copy = tri_xstrdup(path), *save = NULL;
    int found = 0;
    for (char *d = strtok_r(copy, ":", &save); d && !found; d = strtok_r(NULL, ":", &save)) {
        char *full = tri_xprintf("%s/%s", *d ? d : ".", name);
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
    if (strcmp(cmd0, "trident") != 0 || on_path(cmd0)) return tri_xstrdup(cmd0);
    const char *slash = strrchr(self, '/');
    if (slash == NULL) return tri_xstrdup(cmd0);
    char *full = tri_xprintf("%.*s/trident", (int)(slash - self), self);
    if (access(full, X_OK) == 0) return full;
    free(full);
    return tri_xstrdup(cmd0);
}

int tri_launch_place_ranks(tri_launch_plan *p, const tri_launch_opts *o) {
    const char *hf = o->hostfile ? o->hostfile : "";
    if (p->cp < 1) p->cp = 1; /* a plan made without the cp axis (0): none */
    long long need = p->have_layout ? (long long)p->tp * p->cp * p->pp * p->dp : 0;
    /* the layout's sizes as the messages below name them */
    char lay[160];
    if (p->cp > 1)
        snprintf(lay, sizeof lay, "parallel.tp (%d) x parallel.cp (%d) x parallel.pp (%d) x parallel.dp (%d)", p->tp,
                 p->cp, p->pp, p->dp);
    else
        snprintf(lay, sizeof lay, "parallel.tp (%d) x parallel.pp (%d) x parallel.dp (%d)", p->tp, p->pp, p->dp);
    int with_slots = 0;
    long long total_slots = 0;
    for (int h = 0; h < p->nhosts; h++) {
        with_slots += p->slots[h] > 0;
        total_slots += p->slots[h];
    }
    if (o->nproc > 0) {
        for (int h = 0; h < p->nhosts; h++) {
            if (p->slots[h] > 0 && p->slots[h] < o->nproc)
                return tri_error("%s:%d: host %s has slots=%d, fewer than --nproc-per-node %d", hf, p->lines[h],
                                 p->hosts[h], p->slots[h], o->nproc);
            p->ranks[h] = o->nproc;
        }
    } else if (with_slots > 0) {
        for (int h = 0; h < p->nhosts; h++)
            if (p->slots[h] == 0)
                return tri_error("%s:%d: host %s has no slots=N but other hosts have; give slots=N for "
                                 "every host, or --nproc-per-node",
                                 hf, p->lines[h], p->hosts[h]);
        long long want = p->have_layout ? need : total_slots;
        if (want > total_slots)
            return tri_error("%s = %lld ranks, but "
                             "hostfile %s has %lld slots",
                             lay, need, hf, total_slots);
        for (int h = 0; h < p->nhosts; h++) {
            p->ranks[h] = (int)(want < p->slots[h] ? want : p->slots[h]);
            want -= p->ranks[h];
        }
    } else if (p->have_layout) {
        if (need % p->nhosts != 0)
            return tri_error("%s = %lld ranks "
                             "do not divide over %d hosts; give --nproc-per-node or slots=N in the hostfile",
                             lay, need, p->nhosts);
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
    if (world > TRI_CONFIG_MAX_WORLD) /* the trainer's own limit, whatever the slots say */
        return tri_error("%lld ranks over %d host%s: at most %d (2^20) ranks", world, p->nhosts,
                         p->nhosts == 1 ? "" : "s", TRI_CONFIG_MAX_WORLD);
    int cap = o->max_per_host > 0 ? o->max_per_host : TRI_LAUNCH_MAX_PER_HOST;
    for (int h = 0; h < p->nhosts; h++) { /* a host's slots=N say what it can run; else the cap */
        if (p->slots[h] > 0 || p->ranks[h] <= cap) continue;
        char why[200] = "";
        if (p->have_layout && p->cp > 1)
            snprintf(why, sizeof why, " (parallel.tp %d x cp %d x pp %d x dp %d = %lld ranks)", p->tp, p->cp, p->pp,
                     p->dp, need);
        else if (p->have_layout)
            snprintf(why, sizeof why, " (parallel.tp %d x pp %d x dp %d = %lld ranks)", p->tp, p->pp, p->dp, need);
        return tri_error("%d ranks on host %s%s: more than %d on a host without slots=N; give the hosts and their "
                         "slots in a --hostfile, or raise --max-ranks-per-host",
                         p->ranks[h], p->hosts[h], why, cap);
    }
    p->world = (int)world;
    if (p->have_layout && need != world)
        return tri_error("%s = %lld, but "
                         "--nproc-per-node %d x %d host%s = %d ranks",
                         lay, need, p->nproc, p->nhosts, p->nhosts == 1 ? "" : "s", p->world);
    return 0;
}

const char *tri_launch_host_of(const tri_launch_plan *p, int r) {
    for (int h = 0; h < p->nhosts; h++) {
        if (r < p->ranks[h]) return p->hosts[h];
        r -= p->ranks[h];
    }
    return "?";
}

/* The trainer's layout (and, for `trident train`, its whole config) when
 * COMMAND runs the trainer. 0 or -1 (message printed). */
static int read_layout(tri_launch_plan *p, const tri_launch_opts *o) {
    const char *config = NULL;
    const char **sets = (const char **)tri_xcalloc((size_t)o->cmd_argc, sizeof *sets);
    int n_sets = 0, rc = 0;
    if (trainer_config(o, &config, sets, &n_sets)) {
        tri_config cfg;
        if (config == NULL)
            rc = tri_error("`trident %s` needs a CONFIG file", o->cmd[1]);
        else if (tri_config_load(&cfg, config, n_sets, sets) != 0)
            rc = -1; /* the loader printed the reason */
        else {
            p->have_layout = 1;
            p->tp = cfg.parallel.tp;
            p->pp = cfg.parallel.pp;
            p->dp = cfg.parallel.dp;
            p->cp = cfg.parallel.cp;
            if (!strcmp(o->cmd[1], "train")) {
                p->train_cfg = tri_xcalloc(1, sizeof *p->train_cfg);
                *p->train_cfg = cfg;
            }
        }
    }
    free(sets);
    return rc;
}

int tri_launch_plan_make(tri_launch_plan *p, const tri_launch_opts *o) {
    memset(p, 0, sizeof *p);
    if (o->hostfile) {
        if (tri_launch_hostfile_read(p, o->hostfile) != 0) return -1;
    } else {
        p->hosts = tri_xcalloc(1, sizeof *p->hosts);
        p->slots = tri_xcalloc(1, sizeof *p->slots);
        p->lines = tri_xcalloc(1, sizeof *p->lines);
        p->hosts[0] = tri_xstrdup("localhost");
        p->nhosts = 1;
    }
    p->ranks = tri_xcalloc((size_t)p->nhosts, sizeof *p->ranks);
    if (read_layout(p, o) != 0) return -1;
    if (tri_launch_place_ranks(p, o) != 0) return -1;

    p->cores = tri_usable_cores();
    p->oversub = p->nproc > p->cores;
    const char *omp = getenv("OMP_NUM_THREADS");
    long t;
    if (omp != NULL && *omp != '\0') {
        p->user_threads = 1;
        p->threads = tri_launch_parse_int(omp, 1, 1 << 16, &t) == 0 ? (int)t : 1;
    } else {
        p->threads = p->cores / p->nproc;
        if (p->threads < 1) p->threads = 1;
    }
    p->user_wait_policy = getenv("OMP_WAIT_POLICY") != NULL;
    p->as_root = geteuid() == 0;
    /* Open MPI binds each rank to one core by default (up to 2 ranks):
     * wrong for a multi-threaded rank, impossible when oversubscribed. */
    p->bind_none = p->oversub || p->threads > 1;

    if (!o->dry_run && tri_mkdir_p_named("--log-dir", o->log_dir) != 0) return -1;
    if (o->dry_run) {
        /* nothing is created: show where the logs would go */
        char cwd[PATH_MAX];
        if (o->log_dir[0] == '/' || getcwd(cwd, sizeof cwd) == NULL) cwd[0] = '\0';
        int len = snprintf(p->log_dir, sizeof p->log_dir, "%s%s%s", cwd, cwd[0] ? "/" : "", o->log_dir);
        if (len < 0 || (size_t)len >= sizeof p->log_dir) return tri_error("--log-dir %s: path too long", o->log_dir);
    } else if (realpath(o->log_dir, p->log_dir) == NULL) {
        return tri_error("--log-dir %s: %s", o->log_dir, strerror(errno));
    }
    if (tri_self_exe(p->self, sizeof p->self) != 0)
        return tri_error("cannot find its own executable: %s", strerror(errno));
    p->cmd0 = resolve_trident(o->cmd[0], p->self);
    return 0;
}
