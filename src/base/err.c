#include "src/base/err.h"

#include <stdio.h>
#include <stdlib.h>

int tri_verror(const char *fmt, va_list ap) {
    char msg[2048];
    vsnprintf(msg, sizeof msg, fmt, ap);
    fprintf(stderr, "trident: %s\n", msg);
    return -1;
}

int tri_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    tri_verror(fmt, ap);
    va_end(ap);
    return -1;
}

void tri_fail_at(const char *file, int line, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "trident: internal error: %s:%d: %s\n", file, line, msg);
    fflush(NULL);
    abort();
}
