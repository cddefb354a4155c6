/* One way to report errors, used by every layer.
 *
 *   - User input at fault (a file, a config key, a number): tri_error() prints
 *     one line "trident: <message>" naming the culprit and returns -1, so a
 *     function can `return tri_error("%s: ...", path);`. The caller decides the
 *     exit code (base/exit.h: TRI_EXIT_BAD_INPUT for bad input).
 *   - A failure on one rank of several: tri_error_rank() prints
 *     "trident: rank R: <message>", so the launcher's summary can name it.
 *   - Notes and warnings (nothing failed): base/log.h.
 *   - Internal faults (a violated contract, a size that cannot happen):
 *     TRI_CHECK(cond) and TRI_FAIL(fmt, ...) print file:line and abort. They
 *     are never compiled out, and cond is evaluated exactly once.
 *
 * Messages go to stderr unbuffered, so they survive an abort and interleave
 * sanely with other ranks' output under tridentrun. The prefix is the
 * program's: "tridentrun: " in the launcher, "trident: " everywhere else
 * (tri_prog_name; test programs included, so tests read the users' lines). */
#ifndef TRI_BASE_ERR_H
#define TRI_BASE_ERR_H

#include <stdarg.h>
#include <stddef.h>

/* "tridentrun" when the running program is the launcher, else "trident":
 * the prefix of every message (from glibc's program_invocation_short_name,
 * so no state of ours). */
const char *tri_prog_name(void);

/* Prints "trident: <fmt...>\n" to stderr; returns -1. */
int tri_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The same with a va_list, for functions that take a format themselves. */
int tri_verror(const char *fmt, va_list ap);
/* Writes the message into why[n] instead of printing it and returns -1:
 * the silent checks' way of saying what tri_error would print, for callers
 * that try many inputs and report the reasons themselves (the planner's
 * search); their printing twin is `return tri_error("%s", why)`. */
int tri_why(char *why, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Prints "trident: rank R: <fmt...>\n" to stderr; returns -1. */
int tri_error_rank(int rank, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prints "trident: internal error: file:line: <fmt...>" and aborts. */
_Noreturn void tri_fail_at(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#define TRI_FAIL(...) tri_fail_at(__FILE__, __LINE__, __VA_ARGS__)
#define TRI_CHECK(cond)                                                          \
    do {                                                                         \
        if (!(cond)) tri_fail_at(__FILE__, __LINE__, "check failed: %s", #cond); \
    } while (0)

#endif
