/* Shared by the libFuzzer harnesses of tests/fuzz and by their corpus replay
 * (tri_fuzz_corpus, a Criterion test that runs every committed input).
 *
 * A harness is one file fuzz_<name>.c defining
 *     int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
 * It feeds the input to one parser the way a user's file reaches it (written
 * to a scratch file when the parser takes a path), returns 0 for anything the
 * parser refuses, and checks with FUZZ_ASSERT the promises an accepted input
 * must keep (reads inside the file succeed, a round trip gives the same
 * thing back). A crash, a sanitizer report or a FUZZ_ASSERT is a finding.
 */
#ifndef TRI_FUZZ_UTIL_H
#define TRI_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* A property an accepted input must have; aborts (a finding) when it does not. */
#define FUZZ_ASSERT(cond)                                                                \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            tri_fuzz_report("%s:%d: FUZZ_ASSERT(%s) failed", __FILE__, __LINE__, #cond); \
            abort();                                                                     \
        }                                                                                \
    } while (0)

/* Prints a line to fd 2 (which tri_fuzz_quiet leaves open). */
void tri_fuzz_report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Silences the parsers' messages (one line per refused input, thousands a
 * second) by pointing the stderr stream at /dev/null; fd 2 stays open for
 * libFuzzer, the sanitizers and tri_fuzz_report. Idempotent.
 * TRIDENT_FUZZ_VERBOSE=1 in the environment keeps the messages. */
void tri_fuzz_quiet(void);

/* This process's private scratch directory (created on first use under
 * $TMPDIR or /tmp, removed at exit). */
const char *tri_fuzz_dir(void);

/* Writes data[n] to <scratch>/name (replacing it); returns its path in a
 * buffer that lives until the next call with the same name slot (slot
 * 0..3). Aborts when the disk refuses: that is the harness's fault, not a
 * finding in the parser. */
const char *tri_fuzz_write(int slot, const char *name, const void *data, size_t n);

/* A NUL-terminated copy of data[n] (malloc'd; the caller frees). */
char *tri_fuzz_cstr(const uint8_t *data, size_t n);

/* Splits data at its first NUL byte: *a = [0, cut), *b = (cut, n); without a
 * NUL, b is empty. Returns the length of a; *b_len gets b's. */
size_t tri_fuzz_split(const uint8_t *data, size_t n, const uint8_t **b, size_t *b_len);

#endif
