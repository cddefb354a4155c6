/* Processes (base/proc.h). */
#include "base/proc.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/err.h"
#include "base/exit.h"

int tri_self_exe(char *buf, size_t n) {
    if (n < 2) return -1;
    buf[0] = '\0';
    ssize_t len = readlink("/proc/self/exe", buf, n - 1);
    if (len <= 0 || (size_t)len >= n - 1) {
        buf[0] = '\0';
        return -1;
    }
    buf[len] = '\0';
    return 0;
}

int tri_self_dir(char *buf, size_t n) {
    if (tri_self_exe(buf, n) != 0) return -1;
    char *slash = strrchr(buf, '/');
    if (slash == NULL) {
        buf[0] = '\0';
        return -1;
    }
    *slash = '\0';
    return 0;
}

int tri_usable_cores(void) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

pid_t tri_proc_spawn(const char *const *argv, const tri_spawn_opts *o) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid != 0) return pid;
    if (o->new_group) setpgid(0, 0);
    if (o->out_fd >= 0) {
        dup2(o->out_fd, STDOUT_FILENO);
        dup2(o->out_fd, STDERR_FILENO);
    }
    if (o->default_signals) {
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
    }
    if (o->search_path)
        execvp(argv[0], (char *const *)argv);
    else
        execv(argv[0], (char *const *)argv);
    tri_error("%scannot run %s: %s%s", o->fail_pre ? o->fail_pre : "", argv[0], strerror(errno),
              o->fail_post ? o->fail_post : "");
    _exit(TRI_EXIT_EXEC);
}

int tri_proc_code(int status) {
    return WIFSIGNALED(status) ? tri_exit_signal(WTERMSIG(status)) : WEXITSTATUS(status);
}

int tri_proc_wait(pid_t pid) {
    int st = 0;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return -1;
    return tri_proc_code(st);
}
