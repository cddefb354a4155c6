/* Starting scripts/plot.py (src/train/plot.h). */
#include "train/plot.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/exit.h"
#include "base/log.h"
#include "base/proc.h"

#define MAX_ARGS 64

int tri_plot_run(const char *what, const char *const *args) {
    char script[4096];
    const char *env = getenv("TRIDENT_PLOT");
    if (env && env[0]) {
        snprintf(script, sizeof script, "%s", env);
    } else {
        char dir[4000];
        if (tri_self_dir(dir, sizeof dir) != 0) {
            tri_warn("%s: cannot find this program's directory, no plots", what);
            return -1;
        }
        snprintf(script, sizeof script, "%s/../scripts/plot.py", dir);
    }
    if (access(script, R_OK) != 0) {
        tri_warn("%s: %s: %s (set TRIDENT_PLOT to scripts/plot.py), no plots", what, script, strerror(errno));
        return -1;
    }
    const char *python = getenv("TRIDENT_PYTHON");
    if (!python || !python[0]) python = access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";

    const char *argv[MAX_ARGS + 3];
    int n = 0;
    argv[n++] = python;
    argv[n++] = script;
    for (int i = 0; args[i] != NULL; i++) {
        if (i >= MAX_ARGS) {
            tri_warn("%s: more than %d arguments for plot.py, no plots", what, MAX_ARGS);
            return -1;
        }
        argv[n++] = args[i];
    }
    argv[n] = NULL;
    char pre[256];
    snprintf(pre, sizeof pre, "warning: %s: ", what);
    tri_spawn_opts o = {.out_fd = -1,
                        .search_path = 1,
                        .fail_pre = pre,
                        .fail_post = " (install python3 and python3-matplotlib), no plots"};
    pid_t pid = tri_proc_spawn(argv, &o);
    if (pid < 0) {
        tri_warn("%s: fork: %s, no plots", what, strerror(errno));
        return -1;
    }
    int rc = tri_proc_wait(pid);
    if (rc < 0) {
        tri_warn("%s: waitpid: %s", what, strerror(errno));
        return -1;
    }
    if (rc > TRI_EXIT_SIGNAL_BASE) {
        tri_warn("%s: %s killed by signal %d, no plots", what, script, rc - TRI_EXIT_SIGNAL_BASE);
        return rc;
    }
    if (rc != 0 && rc != TRI_EXIT_EXEC)
        tri_warn("%s: %s exited with code %d (see its message above), no plots", what, script, rc);
    return rc == TRI_EXIT_EXEC ? -1 : rc;
}
