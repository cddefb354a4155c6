#include "base/err.h"

#include <stdio.h>
#include <stdlib.h>

static char *capture_buf;
static size_t capture_n;

void tri_error_capture(char *buf, size_t n) {
    capture_buf = n ? buf : NULL;
    capture_n = n;
    if (capture_buf) capture_buf[0] = '\0';
}

int tri_verror(const char *fmt, va_list ap) {
    char msg[2048];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (capture_buf) {
        if (!capture_buf[0]) snprintf(capture_buf, capture_n, "%s", msg); /* the first says what failed */
        return -1;
    }
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
