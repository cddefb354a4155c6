/* Status lines (progress) and closing summaries on stderr (base/status.h). */
#include "base/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include "base/err.h"

int tri_status_tty(void) { return isatty(STDERR_FILENO); }

void tri_status_line(const char *line, int tty) {
    if (tty)
        fprintf(stderr, "\r%s\033[K", line);
    else
        fprintf(stderr, "%s\n", line);
}

void tri_status_end(void) { fputc('\n', stderr); }

void tri_status_done(const char *fmt, ...) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s: %s\n", tri_prog_name(), msg);
}
