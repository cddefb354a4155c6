/* Allocations that cannot fail and small string helpers (base/str.h). */
#include "base/str.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/exit.h"

static _Noreturn void die_oom(void) {
    tri_error("out of memory");
    exit(TRI_EXIT_FAILURE);
}

void *tri_xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (p == NULL) die_oom();
    return p;
}

char *tri_xstrdup(const char *s) {
    char *p = strdup(s);
    if (p == NULL) die_oom();
    return p;
}

char *tri_xprintf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (n < 0) die_oom();
    return s;
}

const char *tri_base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

int tri_ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && memcmp(s + n - m, suffix, m) == 0;
}
