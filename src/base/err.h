/* One way to report errors, used by every layer.
 *
 *   - User input at fault (a file, a config key, a number): tri_error() prints
 *     one line "trident: <message>" naming the culprit and returns -1, so a
 *     function can `return tri_error("%s: ...", path);`. The caller decides the
 *     exit code (2 for bad input).
 *   - Internal faults (a violated contract, a size that cannot happen):
 *     TRI_CHECK(cond) and TRI_FAIL(fmt, ...) print file:line and abort. They
 *     are never compiled out, and cond is evaluated exactly once.
 *
 * Messages go to stderr unbuffered, so they survive an abort and interleave
 * sanely with other ranks' output under tridentrun. */
#ifndef TRI_BASE_ERR_H
#define TRI_BASE_ERR_H

#include <stdarg.h>
#include <stddef.h>

/* Prints "trident: <fmt...>\n" to stderr; returns -1. */
int tri_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int tri_verror(const char *fmt, va_list ap);
/* While buf is set (n > 0), tri_error keeps its first message in buf (without
 * the "trident: " prefix) instead of printing it: for a caller that tries
 * many inputs and reports the reasons itself (the planner's search). Not
 * thread-safe. tri_error_capture(NULL, 0) prints again. */
void tri_error_capture(char *buf, size_t n);

/* Prints "trident: internal error: file:line: <fmt...>" and aborts. */
_Noreturn void tri_fail_at(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#define TRI_FAIL(...) tri_fail_at(__FILE__, __LINE__, __VA_ARGS__)
#define TRI_CHECK(cond)                                                          \
    do {                                                                         \
        if (!(cond)) tri_fail_at(__FILE__, __LINE__, "check failed: %s", #cond); \
    } while (0)

#endif
