/* Strings and allocations that cannot fail: for the programs' own small
 * bookkeeping (argument vectors, paths, messages), where running out of
 * memory leaves nothing sensible to do. They print "trident: out of memory"
 * (tri_prog_name's prefix) and exit with TRI_EXIT_FAILURE. Never for sizes
 * that come from user input: those are checked (base/size.h) and refused. */
#ifndef TRI_BASE_STR_H
#define TRI_BASE_STR_H

#include <stddef.h>

void *tri_xcalloc(size_t n, size_t size);
char *tri_xstrdup(const char *s);
/* A malloc'd formatted string. */
char *tri_xprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The part of path after its last '/' (path itself if it has none). */
const char *tri_base_name(const char *path);

/* Whether s ends with suffix. */
int tri_ends_with(const char *s, const char *suffix);

#endif
