/* The signal flags and handler of the launcher and the rank wrapper
 * (src/launch/launch.h). */
#include <signal.h>
#include <string.h>

#include "launch/launch.h"

/* The only writable file-scope state of the wing: what the signal handler
 * needs (a handler cannot be given a context). */
static volatile sig_atomic_t g_child_pid = 0;
static volatile sig_atomic_t g_signal = 0;
static volatile sig_atomic_t g_graceful = 0; /* see tri_launch_signals_install */
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

void tri_launch_signals_install(int graceful) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; /* no SA_RESTART: poll() returns EINTR */
    g_graceful = graceful;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

void tri_launch_signals_child(pid_t pid) {
    g_child_pid = pid;
    if (pid > 0 && g_signal) kill(pid, pass_on((int)g_signal)); /* arrived before the pid was known */
}

int tri_launch_signal_got(void) { return (int)g_signal; }

int tri_launch_stop_requests(void) { return (int)g_requests; }
