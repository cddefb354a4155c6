/* Notes and warnings (base/log.h). */
#include "base/log.h"

#include <stdarg.h>
#include <stdio.h>

#include "base/err.h"

static void say(FILE *f, const char *pre, const char *kind, const char *fmt, va_list ap) {
    char msg[2048];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (pre)
        fprintf(f, "%s: %s%s\n", tri_prog_name(), kind, msg);
    else
        fprintf(f, "%s%s\n", kind, msg);
}

void tri_log_note(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    say(stdout, NULL, "note: ", fmt, ap);
    va_end(ap);
}

void tri_note(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    say(stderr, "", "note: ", fmt, ap);
    va_end(ap);
}

void tri_warn(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    say(stderr, "", "warning: ", fmt, ap);
    va_end(ap);
}

void tri_note_rank(int rank, const char *fmt, ...) {
    char kind[48];
    snprintf(kind, sizeof kind, "rank %d: note: ", rank);
    va_list ap;
    va_start(ap, fmt);
    say(stderr, "", kind, fmt, ap);
    va_end(ap);
}
