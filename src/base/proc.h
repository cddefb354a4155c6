/* Processes: this program's own executable, the cores it may use, and
 * children started and waited for (the plot script, a sweep's training
 * runs, mpirun). */
#ifndef TRI_BASE_PROC_H
#define TRI_BASE_PROC_H

#include <stddef.h>
#include <sys/types.h>

/* The path of the running executable (/proc/self/exe) into buf[n]; 0, or
 * -1 (buf is ""). */
int tri_self_exe(char *buf, size_t n);

/* The directory of the running executable (build/trident -> build); 0 or -1. */
int tri_self_dir(char *buf, size_t n);

/* Cores this process may run on: its affinity mask (right inside
 * containers and cgroups), else the online count; at least 1. */
int tri_usable_cores(void);

/* How a child starts (tri_proc_spawn). */
typedef struct tri_spawn_opts {
    int out_fd;          /* >= 0: the child's stdout and stderr go there       */
    int new_group;       /* the child leads its own process group              */
    int default_signals; /* SIGINT and SIGTERM back to their default actions   */
    int search_path;     /* execvp (PATH), not execv                           */
    /* The child's line when exec fails, "<prog>: <fail_pre>cannot run ARGV0:
     * REASON<fail_post>"; it then exits with TRI_EXIT_EXEC (127). */
    const char *fail_pre, *fail_post;
} tri_spawn_opts;

/* fork + exec of argv (NULL-terminated) after flushing stdio. Returns the
 * child's pid, or -1 (errno set; nothing was started). */
pid_t tri_proc_spawn(const char *const *argv, const tri_spawn_opts *o);

/* waitpid(pid) retrying EINTR. Returns the child's exit code, 128 + signal
 * for a child killed by a signal (tri_exit_signal), or -1 (errno). */
int tri_proc_wait(pid_t pid);

/* The exit code of a wait status: its exit status, or 128 + the signal. */
int tri_proc_code(int status);

#endif
