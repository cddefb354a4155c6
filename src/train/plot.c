/* Starting scripts/plot.py (src/train/plot.h). */
#include "train/plot.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_ARGS 64

int tri_self_dir(char *buf, unsigned long n) {
    buf[0] = '\0';
    if (n < 2) return -1;
    ssize_t len = readlink("/proc/self/exe", buf, n - 1);
    if (len <= 0) {
        buf[0] = '\0';
        return -1;
    }
    buf[len] = '\0';
    char *slash = strrchr(buf, '/');
    if (slash == NULL) {
        buf[0] = '\0';
        return -1;
    }
    *slash = '\0';
    return 0;
}

int tri_plot_run(const char *what, const char *const *args) {
    char script[4096];
    const char *env = getenv("TRIDENT_PLOT");
    if (env && env[0]) {
        snprintf(script, sizeof script, "%s", env);
    } else {
        char dir[4000];
        if (tri_self_dir(dir, sizeof dir) != 0) {
            fprintf(stderr, "trident: warning: %s: cannot find this program's directory, no plots\n", what);
            return -1;
        }
        snprintf(script, sizeof script, "%s/../scripts/plot.py", dir);
    }
    if (access(script, R_OK) != 0) {
        fprintf(stderr, "trident: warning: %s: %s: %s (set TRIDENT_PLOT to scripts/plot.py), no plots\n", what, script,
                strerror(errno));
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
            fprintf(stderr, "trident: warning: %s: more than %d arguments for plot.py, no plots\n", what, MAX_ARGS);
            return -1;
        }
        argv[n++] = args[i];
    }
    argv[n] = NULL;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "trident: warning: %s: fork: %s, no plots\n", what, strerror(errno));
        return -1;
    }
    if (pid == 0) {
        execvp(python, (char *const *)argv);
        fprintf(stderr, "trident: warning: %s: cannot run %s: %s (install python3 and python3-matplotlib), no plots\n",
                what, python, strerror(errno));
        _exit(127);
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0) {
        if (errno != EINTR) {
            fprintf(stderr, "trident: warning: %s: waitpid: %s\n", what, strerror(errno));
            return -1;
        }
    }
    if (WIFSIGNALED(st)) {
        fprintf(stderr, "trident: warning: %s: %s killed by signal %d, no plots\n", what, script, WTERMSIG(st));
        return 128 + WTERMSIG(st);
    }
    int rc = WEXITSTATUS(st);
    if (rc != 0 && rc != 127)
        fprintf(stderr, "trident: warning: %s: %s exited with code %d (see its message above), no plots\n", what,
                script, rc);
    return rc == 127 ? -1 : rc;
}
