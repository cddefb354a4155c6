#include "base/err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *tri_prog_name(void) {
    return strcmp(program_invocation_short_name, "tridentrun") == 0 ? "tridentrun" : "trident";
}

int tri_verror(const char *fmt, va_list ap) {
    char msg[2048];
    vsnprintf(msg, sizeof msg, fmt, ap);
    fprintf(stderr, "%s: %s\n", tri_prog_name(), msg);
    return -1;
}

int tri_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    tri_verror(fmt, ap);
    va_end(ap);
    return -1;
}

int tri_why(char *why, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, n, fmt, ap);
    va_end(ap);
    return -1;
}

int tri_error_rank(int rank, const char *fmt, ...) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return tri_error("rank %d: %s", rank, msg);
}

void tri_fail_at(const char *file, int line, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s: internal error: %s:%d: %s\n", tri_prog_name(), file, line, msg);
    fflush(NULL);
    abort();
}
