#include "base/stop.h"

#include <signal.h>
#include <string.h>

static volatile sig_atomic_t g_stop = 0;

static void on_stop(int sig) {
    if (!g_stop) g_stop = sig;
}

void tri_stop_install(int flags) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sigemptyset(&sa.sa_mask);
    /* SA_RESETHAND: the handler runs once, then the default action is back */
    sa.sa_flags = (flags & TRI_STOP_SECOND_KILLS) ? SA_RESETHAND : 0;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
}

int tri_stop_signal(void) { return g_stop; }

const char *tri_stop_name(int sig) {
    switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGUSR1: return "SIGUSR1";
    default: return "a signal";
    }
}
